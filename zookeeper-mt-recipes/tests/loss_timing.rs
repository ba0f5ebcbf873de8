//! When a holder hears that it may have lost what it holds, against when another client
//! takes it over: the holder's link stalls (no FIN) right after a watch notification,
//! about 1.3 s after its last send, so the C client's read timeout (counted from the
//! last receipt) runs late against the server's session clock (counted from the
//! client's last send). The holder must report first, whatever its disconnect grace.
//!
//! Deterministic schedule, no seed: the offsets are the constants below. Every run is
//! bounded (each wait has a timeout) and runs behind its own fault proxy.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::FaultProxy;
use zookeeper_mt::{Version, ZooKeeper};
use zookeeper_mt_recipes::leadership::election::LeaderElection;
use zookeeper_mt_recipes::leadership::leader_latch::LeaderLatch;
use zookeeper_mt_recipes::locks::lock::Lock;
use zookeeper_mt_recipes::locks::semaphore::Semaphore;

/// The session timeout asked for (the shared server's ticks are 500 ms: it is granted).
const SESSION: Duration = Duration::from_secs(4);
/// When the notification is sent after the holder's last send: just before the C
/// client's ping (a third of the timeout after its last send).
const NOTIFY_AFTER: Duration = Duration::from_millis(1_250);
/// The grace the issue measured with, and the default.
const GRACES: [Duration; 2] = [Duration::from_millis(1_083), Duration::ZERO];
const RUNS: usize = 3;
/// Bound on every wait of a run.
const BOUND: Duration = Duration::from_secs(20);

/// What one run measured.
struct Outcome {
    grace: Duration,
    /// The holder's loss report, after the stall.
    loss: Duration,
    /// The other client's takeover, after the stall.
    takeover: Duration,
    /// How long the holder's status query took during the stall.
    query: Duration,
    /// Whether the holder sent nothing between its last send and the stall (the
    /// scenario proper; otherwise the run still checks safety).
    clean: bool,
}

/// Sends by the proxied client so far (requests and pings).
fn sends(proxy: &FaultProxy) -> u64 {
    proxy.requests_forwarded() + proxy.pings_forwarded()
}

/// Waits for the holder's next send (polled: nothing signals a ping), then has `b`
/// change `node` (which the holder watches) `NOTIFY_AFTER` later, waits for the holder's
/// notification and stalls the link. Returns the stall instant and whether no send of
/// the holder fell between.
fn stall_after_notification(
    proxy: &FaultProxy,
    a: &ZooKeeper,
    b: &ZooKeeper,
    node: &str,
) -> (Instant, bool) {
    let (_, watch) = a.exists_watch(node).expect("watch");
    let before = sends(proxy);
    let start = Instant::now();
    while sends(proxy) == before {
        assert!(start.elapsed() < BOUND, "the holder sent nothing");
        thread::sleep(Duration::from_millis(1));
    }
    let sent_at = Instant::now();
    let count = sends(proxy);
    thread::sleep(NOTIFY_AFTER.saturating_sub(sent_at.elapsed()));
    b.set(node, b"x", Version::Any).expect("notify");
    watch.wait_timeout(BOUND).expect("notification");
    proxy.stall();
    let stalled = Instant::now();
    let clean = sends(proxy) == count;
    eprintln!(
        "  stalled {:?} after the last send ({}), notification received",
        stalled - sent_at,
        if clean {
            "no send since"
        } else {
            "a send slipped in"
        }
    );
    (stalled, clean)
}

fn connect(hosts: &str) -> ZooKeeper {
    ZooKeeper::connect(hosts, SESSION).expect("connect")
}

fn lock_run(grace: Duration, run: usize) -> Outcome {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).expect("proxy");
    let a = connect(&proxy.connect_string());
    let b = connect(&hosts);
    let path = common::unique_path(&format!("lock-{run}"));
    let node = format!("{path}-notify");
    zookeeper_mt_recipes::nodes::ensure_path(&b, &node).expect("node");
    let lock_a = Lock::new(&a, &path).unwrap().with_disconnect_grace(grace);
    let guard = lock_a.acquire(BOUND).expect("A holds");
    let lost = guard.lost();
    let (took_tx, took_rx) = mpsc::channel();
    let waiter = {
        let b = b.clone();
        let path = path.clone();
        thread::spawn(move || {
            let lock_b = Lock::new(&b, &path).unwrap();
            let held = lock_b.acquire(BOUND).expect("B takes over");
            took_tx.send(Instant::now()).unwrap();
            drop(held);
        })
    };
    common::wait_until("B waits", || {
        b.get_children(&path).is_ok_and(|c| c.len() == 2)
    });
    let (stalled, clean) = stall_after_notification(&proxy, &a, &b, &node);
    let asked = Instant::now();
    let _ = guard.is_lost();
    let query = asked.elapsed();
    let reason = lost
        .wait(BOUND)
        .ok()
        .flatten()
        .expect("A hears of the loss");
    let loss = Instant::now() - stalled;
    let takeover = took_rx.recv_timeout(BOUND).expect("B's takeover") - stalled;
    eprintln!("  lock: A lost ({reason:?})");
    waiter.join().unwrap();
    proxy.resume();
    drop(guard);
    Outcome {
        grace,
        loss,
        takeover,
        query,
        clean,
    }
}

fn latch_run(grace: Duration, run: usize) -> Outcome {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).expect("proxy");
    let a = connect(&proxy.connect_string());
    let b = connect(&hosts);
    let path = common::unique_path(&format!("latch-{run}"));
    let node = format!("{path}-notify");
    zookeeper_mt_recipes::nodes::ensure_path(&b, &node).expect("node");
    let latch_a = LeaderLatch::builder(&path)
        .disconnect_grace(grace)
        .build(&a)
        .unwrap();
    let guard = latch_a.await_leadership(BOUND).expect("A leads");
    let lost = guard.lost();
    let latch_b = LeaderLatch::builder(&path).build(&b).unwrap();
    common::wait_until("B waits", || {
        b.get_children(&path).is_ok_and(|c| c.len() == 2)
    });
    let (took_tx, took_rx) = mpsc::channel();
    let (stalled, clean, query, reason, loss) = thread::scope(|scope| {
        scope.spawn(|| {
            let term = latch_b.await_leadership(BOUND).expect("B leads");
            took_tx.send(Instant::now()).unwrap();
            drop(term);
        });
        let (stalled, clean) = stall_after_notification(&proxy, &a, &b, &node);
        let asked = Instant::now();
        let _ = latch_a.has_leadership();
        let _ = guard.is_leader();
        let query = asked.elapsed();
        let reason = lost
            .wait(BOUND)
            .ok()
            .flatten()
            .expect("A hears of the loss");
        (stalled, clean, query, reason, Instant::now() - stalled)
    });
    let takeover = took_rx.recv_timeout(BOUND).expect("B's takeover") - stalled;
    eprintln!("  latch: A lost ({reason:?})");
    proxy.resume();
    Outcome {
        grace,
        loss,
        takeover,
        query,
        clean,
    }
}

/// A Semaphore permit (one permit): `is_held` during the stall, `lost()` against the
/// other client's grant. (No grace: a permit counts a disconnection as a loss.)
fn permit_run(grace: Duration, run: usize) -> Outcome {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).expect("proxy");
    let a = connect(&proxy.connect_string());
    let b = connect(&hosts);
    let path = common::unique_path(&format!("permit-{run}"));
    let node = format!("{path}-notify");
    zookeeper_mt_recipes::nodes::ensure_path(&b, &node).expect("node");
    let semaphore_a = Semaphore::new(&a, &path, 1).unwrap();
    let permit = semaphore_a.acquire(BOUND).expect("A holds");
    let lost = permit.lost();
    let semaphore_b = Semaphore::new(&b, &path, 1).unwrap();
    let (took_tx, took_rx) = mpsc::channel();
    let (stalled, clean, query, reason, loss) = thread::scope(|scope| {
        scope.spawn(|| {
            let held = semaphore_b.acquire(BOUND).expect("B takes over");
            took_tx.send(Instant::now()).unwrap();
            drop(held);
        });
        common::wait_until("B waits", || semaphore_b.requests().is_ok_and(|n| n == 2));
        let (stalled, clean) = stall_after_notification(&proxy, &a, &b, &node);
        let asked = Instant::now();
        assert!(permit.is_held().expect("is_held"), "held at the stall");
        let query = asked.elapsed();
        let reason = lost
            .wait(BOUND)
            .ok()
            .flatten()
            .expect("A hears of the loss");
        let loss = Instant::now() - stalled;
        let asked = Instant::now();
        assert!(
            !permit.is_held().expect("is_held"),
            "not held after the loss"
        );
        let query = query.max(asked.elapsed());
        (stalled, clean, query, reason, loss)
    });
    let takeover = took_rx.recv_timeout(BOUND).expect("B's takeover") - stalled;
    eprintln!("  permit: A lost ({reason:?})");
    proxy.resume();
    drop(permit);
    Outcome {
        grace,
        loss,
        takeover,
        query,
        clean,
    }
}

/// A LeaderElection leader: `is_leader` during the stall, `lost()` against the next
/// candidate's leadership.
fn election_run(grace: Duration, run: usize) -> Outcome {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).expect("proxy");
    let a = connect(&proxy.connect_string());
    let b = connect(&hosts);
    let path = common::unique_path(&format!("election-{run}"));
    let node = format!("{path}-notify");
    zookeeper_mt_recipes::nodes::ensure_path(&b, &node).expect("node");
    let candidate_a = LeaderElection::new(&a, &path, b"a").unwrap();
    candidate_a.wait_until_leader(BOUND).expect("A leads");
    let lost = candidate_a.lost();
    let candidate_b = LeaderElection::new(&b, &path, b"b").unwrap();
    let (took_tx, took_rx) = mpsc::channel();
    let (stalled, clean, query, reason, loss) = thread::scope(|scope| {
        scope.spawn(|| {
            candidate_b.wait_until_leader(BOUND).expect("B leads");
            took_tx.send(Instant::now()).unwrap();
        });
        let (stalled, clean) = stall_after_notification(&proxy, &a, &b, &node);
        let asked = Instant::now();
        assert!(
            candidate_a.is_leader().expect("is_leader"),
            "leads at the stall"
        );
        let query = asked.elapsed();
        let reason = lost
            .wait(BOUND)
            .ok()
            .flatten()
            .expect("A hears of the loss");
        let loss = Instant::now() - stalled;
        let asked = Instant::now();
        assert!(candidate_a.is_leader().is_err(), "no leader after the loss");
        let query = query.max(asked.elapsed());
        (stalled, clean, query, reason, loss)
    });
    let takeover = took_rx.recv_timeout(BOUND).expect("B's takeover") - stalled;
    eprintln!("  election: A lost ({reason:?})");
    proxy.resume();
    Outcome {
        grace,
        loss,
        takeover,
        query,
        clean,
    }
}

/// Runs `RUNS` runs per grace (graces in parallel) and checks each: the holder reports
/// before the takeover, and its status query answered at once.
fn check(what: &str, run: fn(Duration, usize) -> Outcome) {
    check_with(what, &GRACES, run)
}

fn check_with(what: &str, graces: &[Duration], run: fn(Duration, usize) -> Outcome) {
    let outcomes: Vec<Outcome> = thread::scope(|scope| {
        let handles: Vec<_> = graces
            .iter()
            .enumerate()
            .map(|(g, &grace)| {
                scope.spawn(move || {
                    (0..RUNS)
                        .map(|i| run(grace, g * RUNS + i))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut failures = Vec::new();
    for o in &outcomes {
        let margin = o.takeover.as_millis() as i128 - o.loss.as_millis() as i128;
        eprintln!(
            "{what}: grace {:?}: A reported {:?} after the stall, B took over {:?} after it: A first by {margin} ms; status query took {:?}{}",
            o.grace,
            o.loss,
            o.takeover,
            o.query,
            if o.clean { "" } else { " (a send slipped in before the stall)" }
        );
        if o.loss >= o.takeover {
            failures.push(format!("grace {:?}: B ahead by {} ms", o.grace, -margin));
        }
        if o.query > Duration::from_millis(50) {
            failures.push(format!(
                "grace {:?}: status query took {:?}",
                o.grace, o.query
            ));
        }
    }
    assert!(failures.is_empty(), "{what}: {failures:?}");
}

// Holder first, with any grace. (Takeover needs expiry: about 4 s per run.)

#[test]
fn lock_holder_reports_before_takeover() {
    check("Lock", lock_run);
}

#[test]
fn latch_leader_reports_before_takeover() {
    check("LeaderLatch", latch_run);
}

#[test]
fn permit_holder_reports_before_takeover() {
    check_with("Semaphore permit", &[Duration::ZERO], permit_run);
}

#[test]
fn election_leader_reports_before_takeover() {
    check_with("LeaderElection", &[Duration::ZERO], election_run);
}
