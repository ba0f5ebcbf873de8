//! Lock against real servers: mutual exclusion between threads, try/timed acquisition,
//! no herd (a release wakes only the next waiter), loss reporting, and a holder killed
//! with SIGKILL in another process releasing the lock after its session timeout.

mod common;
mod ordered_support;

use common::{
    assert_no_leftover_contexts, child_session, connect, connect_to, report_and_hang, unique_path,
    wait_until, Child, Proxy,
};
use ordered_support::{eventually, op, shared_server_addr, RequestProxy};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::Timeout;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::locks::{Lock, LockLost};
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

/// Set in a child process started by `holder_killed_in_another_process_releases_the_lock`.
const CHILD_ENV: &str = "RECIPES_LOCK_TEST_CHILD";
/// Session timeout of the child holder.
const CHILD_SESSION: Duration = Duration::from_secs(4);

#[test]
fn lock_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Lock>();
    send_sync::<zookeeper_mt_recipes::locks::LockGuard>();
}

#[test]
fn mutual_exclusion_between_threads() {
    const THREADS: usize = 6;
    const ROUNDS: u64 = 8;
    let path = unique_path("mutex");
    let inside = Arc::new(AtomicUsize::new(0));
    // Updated with a separate load and store: lost updates if two threads overlap.
    let counter = Arc::new(AtomicU64::new(0));
    // Four threads with their own sessions, two sharing one Lock value.
    let shared_zk = connect();
    let shared_lock = Arc::new(Lock::new(&shared_zk, &path).unwrap());
    let mut sessions = vec![shared_zk];
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let lock = if t < 4 {
                let zk = connect();
                sessions.push(zk.clone());
                Arc::new(Lock::new(&zk, &path).unwrap())
            } else {
                Arc::clone(&shared_lock)
            };
            let inside = Arc::clone(&inside);
            let counter = Arc::clone(&counter);
            thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.acquire(Timeout::Never).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    let value = counter.load(Ordering::SeqCst);
                    thread::yield_now();
                    counter.store(value + 1, Ordering::SeqCst);
                    assert!(!guard.is_lost());
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), THREADS as u64 * ROUNDS);
    assert!(connect().get_children(&path).unwrap().is_empty());
    // Every predecessor and own-node watch fired or was removed: nothing left behind.
    for zk in &sessions {
        assert_no_leftover_contexts(zk);
    }
}

#[test]
fn try_and_timed_acquire() {
    let zk = connect();
    let path = unique_path("try");
    let holder = Lock::new(&zk, &path).unwrap().with_label("holder-1");
    let other = Lock::new(connect(), &path).unwrap();
    assert_eq!(other.holder().unwrap(), None);

    let guard = holder.try_acquire().unwrap().expect("a free lock");
    assert_eq!(other.holder().unwrap().as_deref(), Some("holder-1"));
    assert!(other.try_acquire().unwrap().is_none());

    let started = Instant::now();
    assert!(other
        .acquire(Duration::from_millis(300))
        .optional()
        .unwrap()
        .is_none());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // Failed attempts leave no node behind.
    assert_eq!(zk.get_children(&path).unwrap().len(), 1);

    let first = guard.sequence();
    // RAII release: the drop sends the delete without waiting for it, so the other
    // session waits for the node to go.
    drop(guard);
    let guard = other
        .acquire(Duration::from_secs(10))
        .optional()
        .unwrap()
        .expect("released on drop");
    assert!(
        guard.sequence() > first,
        "sequence is a growing fencing token"
    );
    guard.release().unwrap();
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn release_wakes_only_the_next_waiter() {
    const WAITERS: usize = 5;
    let path = unique_path("herd");
    let holder = Lock::new(connect(), &path).unwrap();
    let guard = holder.acquire(Timeout::Never).unwrap();

    let locks: Vec<Arc<Lock>> = (0..WAITERS)
        .map(|_| Arc::new(Lock::new(connect(), &path).unwrap()))
        .collect();
    let (got_tx, got_rx) = mpsc::channel();
    let mut release_txs = Vec::new();
    let mut threads = Vec::new();
    for (i, lock) in locks.iter().enumerate() {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        release_txs.push(release_tx);
        let lock = Arc::clone(lock);
        let got_tx = got_tx.clone();
        threads.push(thread::spawn(move || {
            let guard = lock.acquire(Timeout::Never).unwrap();
            got_tx.send(i).unwrap();
            release_rx.recv().unwrap();
            guard.release().unwrap();
        }));
        // Queue the waiters in a known order: each blocks before the next starts.
        wait_until("waiter blocked", || locks[i].waiting() >= 1);
    }
    let wakeups = |locks: &[Arc<Lock>]| locks.iter().map(|l| l.wakeups()).collect::<Vec<_>>();
    assert_eq!(wakeups(&locks), vec![0; WAITERS]);

    guard.release().unwrap();
    for (i, release_tx) in release_txs.iter().enumerate() {
        assert_eq!(got_rx.recv_timeout(Duration::from_secs(10)).unwrap(), i);
        // Waiters 0..=i were each woken once; nobody behind them was woken.
        let expected: Vec<u64> = (0..WAITERS).map(|w| u64::from(w <= i)).collect();
        assert_eq!(wakeups(&locks), expected, "after waiter {i} got the lock");
        release_tx.send(()).unwrap();
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let total: u64 = wakeups(&locks).iter().sum();
    eprintln!(
        "{WAITERS} waiters, {total} wake-ups in all (a herd would be {})",
        { WAITERS * (WAITERS + 1) / 2 }
    );
    assert_eq!(total, WAITERS as u64);
}

#[test]
fn guard_reports_its_node_deleted() {
    let zk = connect();
    let path = unique_path("deleted");
    let lock = Lock::new(&zk, &path).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let lost = guard.lost();
    assert!(!guard.is_lost());
    connect().delete(guard.node(), None).unwrap();
    assert_eq!(
        lost.wait(Duration::from_secs(10)).unwrap(),
        Some(LockLost::NodeDeleted)
    );
    assert!(guard.is_lost());
    assert_eq!(guard.lost_reason(), Some(LockLost::NodeDeleted));
    // A late subscriber hears it at once.
    assert_eq!(guard.lost().try_get(), Some(Some(LockLost::NodeDeleted)));
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
}

#[test]
fn guard_reports_session_loss() {
    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap().split('/').next().unwrap();
    let proxy = Proxy::start(server);
    let zk = connect_to(&proxy.addr);
    let path = unique_path("expired");
    // Strict (default): a disconnection counts as a loss at once.
    let strict = Lock::new(&zk, &format!("{path}/strict")).unwrap();
    // Tolerant: waits for the verdict of the server.
    let tolerant = Lock::new(&zk, &format!("{path}/tolerant"))
        .unwrap()
        .with_disconnect_grace(Duration::from_secs(60));
    let strict_guard = strict.acquire(Timeout::Never).unwrap();
    let tolerant_guard = tolerant.acquire(Timeout::Never).unwrap();
    let strict_lost = strict_guard.lost();
    let tolerant_lost = tolerant_guard.lost();

    // Cut the holder off; end its session from a direct handle (the server deletes the
    // session's ephemeral nodes).
    proxy.cut();
    assert_eq!(
        strict_lost.wait(Duration::from_secs(20)).unwrap(),
        Some(LockLost::Disconnected)
    );
    let thief = ZooKeeper::builder(&hosts)
        .session(zk.client_id().unwrap())
        .connect()
        .unwrap();
    thief.close().unwrap();

    // Someone else takes both locks while the tolerant holder cannot know yet: that is
    // what the strict default protects against.
    let other = connect();
    let strict_again = Lock::new(&other, &format!("{path}/strict")).unwrap();
    let strict_other = strict_again
        .try_acquire()
        .unwrap()
        .expect("strict lock free");
    let tolerant_again = Lock::new(&other, &format!("{path}/tolerant")).unwrap();
    let tolerant_other = tolerant_again
        .try_acquire()
        .unwrap()
        .expect("tolerant lock free");
    assert!(!tolerant_guard.is_lost(), "nothing could tell it yet");

    // Back in touch, the holder hears that its session expired.
    proxy.restore();
    assert_eq!(
        tolerant_lost.wait(Duration::from_secs(20)).unwrap(),
        Some(LockLost::SessionExpired)
    );
    assert!(strict_guard.release().is_err());
    assert!(tolerant_guard.release().is_err());
    // Releasing the lost guards did not touch the new holders' nodes.
    assert!(!strict_other.is_lost() && !tolerant_other.is_lost());
    assert!(other.exists(strict_other.node()).unwrap().is_some());
    assert!(other.exists(tolerant_other.node()).unwrap().is_some());
}

#[test]
fn losses_before_the_first_lost_call_are_reported() {
    // A deletion before anyone asked: nothing watches the node until `lost()` (no watch
    // left registered by acquiring), and the first `lost()` still finds it.
    let zk = connect();
    let path = unique_path("late");
    let lock = Lock::new(&zk, &path).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    assert_no_leftover_contexts(&zk);
    connect().delete(guard.node(), None).unwrap();
    assert_eq!(
        guard.lost().wait(Duration::from_secs(10)).unwrap(),
        Some(LockLost::NodeDeleted)
    );
    assert_eq!(guard.lost_reason(), Some(LockLost::NodeDeleted));
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));

    // A disconnection before anyone asked (strict default): known without `lost()`, and
    // told to a later subscriber at once.
    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap().split('/').next().unwrap();
    let proxy = Proxy::start(server);
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &unique_path("late-disconnect")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    proxy.cut();
    wait_until("the disconnection reported", || guard.is_lost());
    assert_eq!(guard.lost_reason(), Some(LockLost::Disconnected));
    assert_eq!(guard.lost().try_get(), Some(Some(LockLost::Disconnected)));
    proxy.restore();
    zk.wait_connected(Duration::from_secs(20)).unwrap();
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
    // Back in touch, a new acquisition is not lost.
    let guard = lock.acquire(Timeout::Never).unwrap();
    assert!(!guard.is_lost());
    guard.release().unwrap();
}

#[test]
fn own_release_is_never_reported_as_a_loss() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("own-release")).unwrap();
    for _ in 0..3 {
        let guard = lock.acquire(Timeout::Never).unwrap();
        let lost = guard.lost();
        // Wait for the monitor to set the watch on the node, so the delete fires it.
        wait_until("own-node watch set", || zk.live_contexts() == 1);
        guard.release().unwrap();
        assert_eq!(
            lost.wait(Duration::from_secs(1)),
            Ok(None),
            "a released guard's signal resolves without a loss"
        );
    }
    // The fired watches are gone; a guard nobody asked about sets none.
    assert_no_leftover_contexts(&zk);
    let guard = lock.acquire(Timeout::Never).unwrap();
    assert_no_leftover_contexts(&zk);
    guard.release().unwrap();
}

#[test]
fn holder_killed_in_another_process_releases_the_lock() {
    let path = unique_path("killed");
    let mut child = Child::start("child_lock_holder", CHILD_ENV, &path);
    let node = child.wait_for_marker("LOCKED ");

    let zk = connect();
    let lock = Lock::new(&zk, &path).unwrap();
    assert!(lock.try_acquire().unwrap().is_none(), "the child holds it");
    assert!(zk.exists(&node).unwrap().is_some());

    let killed_at = Instant::now();
    child.kill(); // SIGKILL: no cleanup, the session just stops talking
    let guard = lock
        .acquire(Duration::from_secs(30))
        .optional()
        .unwrap()
        .expect("the lock came back");
    let waited = killed_at.elapsed();
    eprintln!("lock acquired {waited:?} after SIGKILL (child session timeout {CHILD_SESSION:?})");
    assert!(
        waited < CHILD_SESSION + Duration::from_secs(4),
        "took {waited:?}"
    );
    assert_eq!(lock.wakeups(), 1, "woken once, by the holder's node going");
    guard.release().unwrap();
}

/// Not a test of its own: the child process of
/// `holder_killed_in_another_process_releases_the_lock` (does nothing unless the
/// environment variable is set). It takes the lock, reports its node, and hangs.
#[test]
fn child_lock_holder() {
    let Some((zk, path)) = child_session(CHILD_ENV, CHILD_SESSION) else {
        return;
    };
    let lock = Lock::new(&zk, &path).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    report_and_hang(&format!("LOCKED {}", guard.node()));
}

/// Timed-out acquisitions leave no watch registered.
#[test]
fn timed_out_acquisitions_leave_nothing_registered() {
    let path = unique_path("leak");
    let holder = Lock::new(connect(), &path).unwrap();
    let _guard = holder.acquire(Timeout::Never).unwrap();
    let zk = connect();
    let lock = Lock::new(&zk, &path).unwrap();
    for _ in 0..30 {
        assert!(lock
            .acquire(Duration::from_millis(10))
            .optional()
            .unwrap()
            .is_none());
    }
    assert_no_leftover_contexts(&zk);
    assert_eq!(
        zk.get_children(&path).unwrap().len(),
        1,
        "attempts withdrawn"
    );
}

/// The requests of `log` after the `index`-th one.
fn ops_after(log: &[ordered_support::Request], index: usize) -> Vec<i32> {
    log[index + 1..]
        .iter()
        .map(|r| r.op)
        .filter(|&op| op != 11) // pings
        .collect()
}

/// The create of a lock node applies but its reply is lost with the connection: after
/// reconnecting, the acquisition syncs before it looks for its node (a member that has
/// not applied the create yet would hide it), finds it and uses it: one node, no orphan.
#[test]
fn lost_create_reply_is_looked_up_after_a_sync() {
    let proxy = RequestProxy::start(&shared_server_addr());
    let path = unique_path("lost-create");
    zookeeper_mt_recipes::nodes::ensure_path(connect(), &path).unwrap();
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &path).unwrap();
    proxy.lose_reply_of(&[op::CREATE, op::CREATE2]);
    let guard = lock.acquire(Timeout::Never).unwrap();
    assert_eq!(proxy.connections(), 2, "one reconnection");
    let log = proxy.log();
    let create = log
        .iter()
        .position(|r| r.op == op::CREATE || r.op == op::CREATE2)
        .unwrap();
    let after = ops_after(&log, create);
    let sync = after.iter().position(|&o| o == op::SYNC);
    let list = after
        .iter()
        .position(|&o| o == op::GET_CHILDREN || o == op::GET_CHILDREN2);
    eprintln!("requests after the lost create: {after:?}");
    assert!(
        sync.is_some() && sync < list,
        "no sync before the recovery read: {after:?}"
    );
    let children = connect().get_children(&path).unwrap();
    assert_eq!(
        children.len(),
        1,
        "the lost create was not repeated: {children:?}"
    );
    assert!(guard.node().ends_with(&children[0]));
    guard.release().unwrap();
}

/// `acquire_timeout` keeps its deadline while its create's reply is lost and the server
/// stays unreachable: `Ok(None)` soon after the deadline (not `ConnectionLoss` after the
/// reconnect timeout), and the node the create made is removed once the connection is
/// back.
#[test]
fn acquire_timeout_keeps_its_deadline_during_the_create() {
    let proxy = RequestProxy::start(&shared_server_addr());
    let path = unique_path("deadline");
    let direct = connect();
    zookeeper_mt_recipes::nodes::ensure_path(&direct, &path).unwrap();
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &path).unwrap();
    proxy.set_up(false);
    proxy.lose_reply_of(&[op::CREATE, op::CREATE2]);
    let started = Instant::now();
    let outcome = lock.acquire(Duration::from_millis(500)).optional();
    let waited = started.elapsed();
    eprintln!("acquire_timeout(500 ms) with the reply lost: {outcome:?} after {waited:?}");
    assert!(matches!(outcome, Ok(None)), "{outcome:?}");
    // The reconnect timeout is 20 s: it did not wait for it.
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    assert_eq!(
        direct.get_children(&path).unwrap().len(),
        1,
        "the create applied"
    );
    proxy.set_up(true);
    assert!(
        eventually(Duration::from_secs(30), || direct
            .get_children(&path)
            .unwrap()
            .is_empty()),
        "the orphan lock node was never removed"
    );
}

/// Dropping a guard while the server is unreachable does not block for the reconnect
/// timeout: the delete goes on in the background and applies once the connection is back
/// (the session survived).
#[test]
fn dropping_a_guard_while_disconnected_is_cheap() {
    let proxy = RequestProxy::start(&shared_server_addr());
    let path = unique_path("cheap-drop");
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &path).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let node = guard.node().to_string();
    proxy.cut();
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    eprintln!("drop while disconnected took {took:?}");
    // Before: up to the reconnect timeout (twice the 10 s session timeout).
    assert!(took < Duration::from_secs(5), "drop blocked {took:?}");
    proxy.set_up(true);
    let direct = connect();
    assert!(
        eventually(Duration::from_secs(30), || direct
            .exists(&node)
            .unwrap()
            .is_none()),
        "the lock node was never deleted"
    );
    assert!(zk.state().is_connected(), "the session survived");
}

/// A guard acquired right after a reconnection is not reported lost because of the
/// disconnection before it.
#[test]
fn guard_acquired_after_a_reconnect_is_not_lost() {
    let proxy = RequestProxy::start(&shared_server_addr());
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &unique_path("after-reconnect")).unwrap();
    lock.acquire(Timeout::Never).unwrap().release().unwrap();
    for round in 0..5 {
        proxy.cut();
        wait_until("disconnected", || !zk.state().is_connected());
        proxy.set_up(true);
        let guard = lock.acquire(Timeout::Never).unwrap();
        assert_eq!(guard.lost_reason(), None, "round {round}");
        guard.release().unwrap();
    }
}

/// With an ACL for authenticated users only, another session cannot delete a holder's
/// node or queue a node of its own; the owner's sessions (same credentials) can.
#[test]
fn node_options_acl_protects_the_lock() {
    let path = unique_path("acl");
    let owner_only = NodeOptions::default().acl(vec![zookeeper_mt::Acl::new(
        zookeeper_mt::Perms::ALL,
        "auth",
        "",
    )]);
    let zk = connect();
    zk.add_auth("digest", b"locker:secret").unwrap();
    let lock = Lock::new(&zk, &path)
        .unwrap()
        .with_node_options(owner_only.clone());
    let guard = lock.acquire(Timeout::Never).unwrap();
    let stranger = connect();
    assert_eq!(
        stranger.delete(guard.node(), None),
        Err(zookeeper_mt::Error::NoAuth)
    );
    let rogue = Lock::new(&stranger, &path).unwrap();
    assert_eq!(
        rogue.try_acquire().err(),
        Some(RecipeError::ZooKeeper(zookeeper_mt::Error::NoAuth))
    );
    let friend = connect();
    friend.add_auth("digest", b"locker:secret").unwrap();
    let friend_lock = Lock::new(&friend, &path)
        .unwrap()
        .with_node_options(owner_only);
    assert!(friend_lock.try_acquire().unwrap().is_none());
    guard.release().unwrap();
    friend_lock
        .try_acquire()
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
}

/// A disconnection that is over before anyone asks the guard still counts as a loss (no
/// grace): the guard's view replays the session events in order when asked.
#[test]
fn a_disconnection_nobody_watched_still_counts() {
    let proxy = RequestProxy::start(&shared_server_addr());
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &unique_path("unwatched")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    proxy.cut();
    wait_until("disconnected", || !zk.state().is_connected());
    proxy.set_up(true);
    zk.wait_connected(Duration::from_secs(20)).unwrap();
    assert_eq!(guard.lost_reason(), Some(LockLost::Disconnected));
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
}

/// `acquire_timeout` keeps its deadline when the connection drops while it waits in
/// line: `Ok(None)` at the deadline (its node is withdrawn in the background once the
/// server is reachable again), not a wait for the reconnect timeout.
#[test]
fn acquire_timeout_keeps_its_deadline_while_waiting_disconnected() {
    let path = unique_path("deadline-wait");
    let direct = connect();
    let holder = Lock::new(&direct, &path).unwrap();
    let guard = holder.acquire(Timeout::Never).unwrap();
    let proxy = RequestProxy::start(&shared_server_addr());
    let zk = connect_to(&proxy.addr);
    let lock = Arc::new(Lock::new(&zk, &path).unwrap());
    let waiter = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            let started = Instant::now();
            let outcome = lock
                .acquire(Duration::from_secs(2))
                .optional()
                .map(|g| g.is_some());
            (outcome, started.elapsed())
        })
    };
    wait_until("waiting in line", || lock.waiting() == 1);
    proxy.cut();
    let (outcome, waited) = waiter.join().unwrap();
    eprintln!("acquire_timeout(2 s) cut off while waiting: {outcome:?} after {waited:?}");
    assert_eq!(outcome, Ok(false));
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    proxy.set_up(true);
    assert!(
        eventually(Duration::from_secs(30), || direct
            .get_children(&path)
            .unwrap()
            .len()
            == 1),
        "the waiter's node was never withdrawn"
    );
    guard.release().unwrap();
}

/// The foreign layouts keep the lost-create protection: with the create's reply lost,
/// the Curator- and kazoo-named node is found again after a sync, never made twice.
#[test]
fn foreign_layouts_find_a_lost_create() {
    use zookeeper_mt_recipes::locks::LockLayout;
    for layout in [LockLayout::Curator, LockLayout::Kazoo] {
        let proxy = RequestProxy::start(&shared_server_addr());
        let path = unique_path("lost-create-layout");
        zookeeper_mt_recipes::nodes::ensure_path(connect(), &path).unwrap();
        let zk = connect_to(&proxy.addr);
        let lock = Lock::new(&zk, &path).unwrap().with_layout(layout);
        proxy.lose_reply_of(&[op::CREATE, op::CREATE2]);
        let guard = lock.acquire(Timeout::Never).unwrap();
        proxy.wait_lost(1);
        let children = connect().get_children(&path).unwrap();
        eprintln!("{layout:?}: after the lost create: {children:?}");
        assert_eq!(children.len(), 1, "{layout:?}: the create was repeated");
        assert!(guard.node().ends_with(&children[0]));
        guard.release().unwrap();
    }
}

/// With a disconnect grace, the monitor times it: once the connection has been down for
/// the grace, the guard's `lost()` receiver hears of it without anyone asking, not
/// before.
#[test]
fn a_disconnection_past_the_grace_is_reported_when_it_runs_out() {
    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap().split('/').next().unwrap();
    let proxy = Proxy::start(server);
    let zk = connect_to(&proxy.addr);
    let grace = Duration::from_secs(1);
    let lock = Lock::new(&zk, &unique_path("grace"))
        .unwrap()
        .with_disconnect_grace(grace);
    let guard = lock.acquire(Timeout::Never).unwrap();
    let lost = guard.lost();
    let events = zk.session_events();
    proxy.cut();
    // The moment the client hears of the disconnection.
    loop {
        let event = events.recv_timeout(Duration::from_secs(20)).unwrap();
        if !event.state.is_connected() {
            break;
        }
    }
    let disconnected = Instant::now();
    assert_eq!(
        lost.wait(Duration::from_secs(20)).unwrap(),
        Some(LockLost::Disconnected)
    );
    let waited = disconnected.elapsed();
    eprintln!("reported {waited:?} after the disconnection (grace {grace:?})");
    assert!(
        waited + Duration::from_millis(50) >= grace,
        "reported after {waited:?}"
    );
    proxy.restore();
    zk.wait_connected(Duration::from_secs(20)).unwrap();
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
}

/// Closing the handle is reported to a guard waiting on `lost()`.
#[test]
fn closing_the_handle_is_reported() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("closed")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let lost = guard.lost();
    wait_until("own-node watch set", || zk.live_contexts() == 1);
    zk.close().unwrap();
    assert_eq!(
        lost.wait(Duration::from_secs(10)).unwrap(),
        Some(LockLost::Closed)
    );
    assert_eq!(guard.lost_reason(), Some(LockLost::Closed));
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
}
