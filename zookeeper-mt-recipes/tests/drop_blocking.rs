//! Drops that must not block, and blocking calls refused where they cannot wait:
//! - every guard dropped on a marked executor thread, the connection cut right after the
//!   drop, then reconnected on the same session: its node goes, a rival gets it;
//! - every follower dropped with its read unanswered (reply withheld on a live link) or
//!   its link stalled: the drop returns at once, its cleanup happens in the background;
//! - a blocking recipe call from a waker on the C completion thread fails at once.
//!
//! The faults are deterministic (no random choice): each test prints `seed: none`.

mod common;
mod ordered_support;

use common::{connect, connect_to, unique_path};
use ordered_support::{eventually, shared_server_addr};
use std::any::Any;
use std::future::Future;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{FaultProxy, OpCode};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::locks::lease_semaphore::SemaphoreLayout;
use zookeeper_mt_recipes::{
    ConfigWatch, DoubleBarrier, LeaderElection, LeaderLatch, LeaseSemaphore, Lock, NodeCache,
    PersistentNode, Queue, ReadWriteLock, RecipeError, Semaphore, TreeCache,
};

const WAIT: Duration = Duration::from_secs(20);
/// A drop that returns within this did not wait for a reply (before the fixes they took
/// seconds).
const DROP_BOUND: Duration = Duration::from_millis(500);

type Held = Box<dyn Any + Send>;

/// Drops `value` on a fresh thread marked as an executor thread; how long it took.
fn drop_on_marked_thread(value: Held) -> Duration {
    thread::spawn(move || {
        zookeeper_mt::refuse_waits_on_this_thread();
        let started = Instant::now();
        drop(value);
        started.elapsed()
    })
    .join()
    .unwrap()
}

/// The ephemeral nodes `session` owns under `path` (the whole subtree).
fn ephemerals_of(zk: &ZooKeeper, path: &str, session: i64) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![path.to_string()];
    while let Some(at) = todo.pop() {
        let Ok(children) = zk.get_children(&at) else {
            continue;
        };
        for name in children {
            let child = if at == "/" {
                format!("/{name}")
            } else {
                format!("{at}/{name}")
            };
            if let Ok(Some(stat)) = zk.exists(&child) {
                if stat.ephemeral_owner == session {
                    found.push(child.clone());
                }
            }
            todo.push(child);
        }
    }
    found
}

/// Creates `path` (persistent) and its missing parents.
fn create_with_parents(zk: &ZooKeeper, path: &str, data: &[u8]) {
    let mut at = String::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push('/');
        at.push_str(part);
        let bytes: &[u8] = if i + 1 == parts.len() { data } else { b"" };
        match zk.create(&at, bytes, zookeeper_mt::CreateMode::Persistent) {
            Ok(_) | Err(zookeeper_mt::Error::NodeExists) => {}
            Err(error) => panic!("creating {at}: {error}"),
        }
    }
}

/// A session through a fault proxy, and one straight to the server.
fn proxied() -> (FaultProxy, ZooKeeper, ZooKeeper) {
    let proxy = FaultProxy::start(shared_server_addr()).expect("proxy");
    let zk = connect_to(&proxy.connect_string());
    (proxy, zk, connect())
}

/// The guard scenario: `hold` takes a guard on the proxied session; it is dropped on a
/// marked thread with the link stalled (so the delete it sends never arrives), the
/// connection is cut, then the client reconnects on the same session. The guard's node
/// must go, and `rival` (on the direct session) must get what it held.
fn guard_dropped_on_executor_thread(
    name: &str,
    hold: impl FnOnce(&ZooKeeper, &ZooKeeper, &str) -> Held,
    rival: impl FnOnce(&ZooKeeper, &str),
) {
    eprintln!("{name}: seed: none (deterministic fault)");
    let (proxy, zk, direct) = proxied();
    let path = unique_path(name);
    let session = zk.client_id().unwrap().session_id;
    let held = hold(&zk, &direct, &path);
    let owned = ephemerals_of(&direct, &path, session);
    assert!(!owned.is_empty(), "{name}: the guard holds a node");
    // Nothing more reaches the server: the delete the drop sends is held, then lost with
    // the connection.
    proxy.stall();
    let took = drop_on_marked_thread(held);
    proxy.block();
    proxy.cut_all();
    proxy.resume();
    assert!(
        eventually(WAIT, || !zk.state().is_connected()),
        "{name}: the client saw the cut"
    );
    let cut_at = Instant::now();
    proxy.unblock();
    let gone = eventually(WAIT, || ephemerals_of(&direct, &path, session).is_empty());
    eprintln!(
        "{name}: drop on a marked thread took {took:?}; node gone: {gone} {:?} after the \
         reconnect began",
        cut_at.elapsed()
    );
    assert!(gone, "{name}: {owned:?} still there after {WAIT:?}");
    assert_eq!(
        zk.client_id().unwrap().session_id,
        session,
        "{name}: the same session came back"
    );
    assert!(took < DROP_BOUND, "{name}: the drop took {took:?}");
    rival(&direct, &path);
}

#[test]
fn lock_guard_dropped_on_executor_thread_is_released() {
    guard_dropped_on_executor_thread(
        "lock",
        |zk, _, path| Box::new(Lock::new(zk, path).unwrap().acquire(WAIT).unwrap()),
        |direct, path| drop(Lock::new(direct, path).unwrap().acquire(WAIT).unwrap()),
    );
}

#[test]
fn semaphore_permit_dropped_on_executor_thread_is_released() {
    guard_dropped_on_executor_thread(
        "semaphore",
        |zk, _, path| Box::new(Semaphore::new(zk, path, 1).unwrap().acquire(WAIT).unwrap()),
        |direct, path| {
            drop(
                Semaphore::new(direct, path, 1)
                    .unwrap()
                    .acquire(WAIT)
                    .unwrap(),
            )
        },
    );
}

#[test]
fn lease_dropped_on_executor_thread_is_released() {
    let make = |zk: &ZooKeeper, path: &str| {
        LeaseSemaphore::new(zk, path, 1, SemaphoreLayout::Curator).unwrap()
    };
    guard_dropped_on_executor_thread(
        "lease",
        |zk, _, path| Box::new(make(zk, path).acquire(1, WAIT).unwrap()),
        |direct, path| drop(make(direct, path).acquire(1, WAIT).unwrap()),
    );
}

#[test]
fn read_guard_dropped_on_executor_thread_is_released() {
    guard_dropped_on_executor_thread(
        "read",
        |zk, _, path| Box::new(ReadWriteLock::new(zk, path).unwrap().read(WAIT).unwrap()),
        |direct, path| {
            drop(
                ReadWriteLock::new(direct, path)
                    .unwrap()
                    .write(WAIT)
                    .unwrap(),
            )
        },
    );
}

#[test]
fn write_guard_dropped_on_executor_thread_is_released() {
    guard_dropped_on_executor_thread(
        "write",
        |zk, _, path| Box::new(ReadWriteLock::new(zk, path).unwrap().write(WAIT).unwrap()),
        |direct, path| {
            drop(
                ReadWriteLock::new(direct, path)
                    .unwrap()
                    .write(WAIT)
                    .unwrap(),
            )
        },
    );
}

#[test]
fn election_candidate_dropped_on_executor_thread_withdraws() {
    guard_dropped_on_executor_thread(
        "election",
        |zk, _, path| {
            let candidate = LeaderElection::new(zk, path, b"me").unwrap();
            candidate.wait_until_leader(WAIT).unwrap();
            Box::new(candidate)
        },
        |direct, path| {
            let rival = LeaderElection::new(direct, path, b"rival").unwrap();
            rival.wait_until_leader(WAIT).unwrap();
        },
    );
}

#[test]
fn double_barrier_dropped_on_executor_thread_withdraws() {
    guard_dropped_on_executor_thread(
        "barrier",
        |zk, direct, path| {
            let other = DoubleBarrier::new(direct, path, 2).unwrap();
            let ours = DoubleBarrier::new(zk, path, 2).unwrap();
            thread::scope(|scope| {
                let entering = scope.spawn(|| other.enter(WAIT));
                ours.enter(WAIT).unwrap();
                entering.join().unwrap().unwrap();
            });
            Box::new(ours)
        },
        |_, _| {},
    );
}

// ---------------------------------------------------------------------------------------
// Followers.
// ---------------------------------------------------------------------------------------

/// How the follower's pending read is left unanswered.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Its reply is swallowed; the connection stays up.
    Withheld,
    /// Its reply is swallowed and then the link stalls (nothing more is delivered).
    Stalled,
}

/// Times the drop of `follower` (on this, an ordinary, thread).
fn timed_drop(what: &str, fault: Fault, follower: Held) -> Duration {
    let started = Instant::now();
    drop(follower);
    let took = started.elapsed();
    eprintln!("{what} ({fault:?}): drop took {took:?}");
    took
}

/// Once the link is back, the abandoned reads leave no watch or request registered.
fn assert_nothing_left(what: &str, fault: Fault, zk: &ZooKeeper) {
    let clean = eventually(WAIT, || zk.exists("/").is_ok() && zk.live_contexts() == 0);
    assert!(
        clean,
        "{what} ({fault:?}): {} contexts left",
        zk.live_contexts()
    );
}

/// Arms the proxy to swallow the reply of the next request with `ops`.
fn withhold(proxy: &FaultProxy, ops: &'static [OpCode]) {
    proxy.drop_reply_matching(1, move |request| ops.contains(&request.op));
}

/// Waits until the withheld reply's request was forwarded; stalls for `Fault::Stalled`.
fn apply(proxy: &FaultProxy, fault: Fault) {
    proxy
        .wait_for_fired(1, WAIT)
        .expect("the follower's read was sent");
    if let Fault::Stalled = fault {
        proxy.stall();
    }
}

const READS: &[OpCode] = &[
    OpCode::GET_DATA,
    OpCode::GET_CHILDREN,
    OpCode::GET_CHILDREN2,
    OpCode::EXISTS,
];
const CREATES: &[OpCode] = &[OpCode::CREATE, OpCode::CREATE2];

/// A cache-like follower: started and initialized, then the node changes so that it
/// reads again, and that read is left unanswered.
fn reading_follower_dropped(
    what: &str,
    fault: Fault,
    start: impl FnOnce(&ZooKeeper, &str) -> Held,
) {
    eprintln!("{what}: seed: none (deterministic fault)");
    let (proxy, zk, direct) = proxied();
    let path = unique_path(what);
    create_with_parents(&direct, &path, b"one");
    let follower = start(&zk, &path);
    withhold(&proxy, READS);
    direct.set(&path, b"two", None).unwrap();
    apply(&proxy, fault);
    let took = timed_drop(what, fault, follower);
    proxy.resume();
    assert!(
        took < DROP_BOUND,
        "{what} ({fault:?}): the drop took {took:?}"
    );
    assert_nothing_left(what, fault, &zk);
    drop(zk);
    direct.delete(&path, None).unwrap();
}

fn node_cache(zk: &ZooKeeper, path: &str) -> Held {
    let cache = NodeCache::new(zk, path).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    Box::new(cache)
}

fn tree_cache(zk: &ZooKeeper, path: &str) -> Held {
    let cache = TreeCache::new(zk, path).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    Box::new(cache)
}

fn config_watch(zk: &ZooKeeper, path: &str) -> Held {
    let watch = ConfigWatch::new(zk, path).unwrap();
    watch.next(WAIT).unwrap();
    Box::new(watch)
}

#[test]
fn node_cache_drop_with_its_read_withheld_returns_at_once() {
    reading_follower_dropped("node-cache", Fault::Withheld, node_cache);
    reading_follower_dropped("node-cache", Fault::Stalled, node_cache);
}

#[test]
fn tree_cache_drop_with_its_read_withheld_returns_at_once() {
    reading_follower_dropped("tree-cache", Fault::Withheld, tree_cache);
    reading_follower_dropped("tree-cache", Fault::Stalled, tree_cache);
}

#[test]
fn config_watch_drop_with_its_read_withheld_returns_at_once() {
    reading_follower_dropped("config-watch", Fault::Withheld, config_watch);
    reading_follower_dropped("config-watch", Fault::Stalled, config_watch);
}

/// A follower that owns a node: dropped while its create's reply is withheld; the drop
/// returns at once, and once the link is back no node of the session is left.
fn creating_follower_dropped(
    what: &str,
    fault: Fault,
    start: impl FnOnce(&ZooKeeper, &str) -> Held,
) {
    eprintln!("{what}: seed: none (deterministic fault)");
    let (proxy, zk, direct) = proxied();
    let path = unique_path(what);
    let session = zk.client_id().unwrap().session_id;
    withhold(&proxy, CREATES);
    let follower = start(&zk, &path);
    apply(&proxy, fault);
    let took = timed_drop(what, fault, follower);
    proxy.resume();
    let parent = path.rsplit_once('/').unwrap().0.to_string();
    let cleaned = eventually(WAIT, || ephemerals_of(&direct, &parent, session).is_empty());
    assert!(
        took < DROP_BOUND,
        "{what} ({fault:?}): the drop took {took:?}"
    );
    assert!(
        cleaned,
        "{what} ({fault:?}): a node of the dropped follower was left"
    );
    assert_nothing_left(what, fault, &zk);
}

#[test]
fn persistent_node_drop_with_its_create_withheld_returns_and_deletes() {
    let start = |zk: &ZooKeeper, path: &str| -> Held {
        Box::new(PersistentNode::new(zk, path, b"x").unwrap())
    };
    creating_follower_dropped("persistent-node", Fault::Withheld, start);
    creating_follower_dropped("persistent-node", Fault::Stalled, start);
}

#[test]
fn leader_latch_drop_with_its_create_withheld_returns_and_withdraws() {
    let start =
        |zk: &ZooKeeper, path: &str| -> Held { Box::new(LeaderLatch::new(zk, path).unwrap()) };
    creating_follower_dropped("leader-latch", Fault::Withheld, start);
    creating_follower_dropped("leader-latch", Fault::Stalled, start);
}

// ---------------------------------------------------------------------------------------
// Blocking calls where they must not wait.
// ---------------------------------------------------------------------------------------

/// What the call made from the waker returned, and how long it took.
type Reported = (zookeeper_mt_recipes::Result<usize>, Duration);

/// A waker that makes a blocking recipe call when woken (on the C completion thread,
/// which delivers the reply that wakes it) and reports its result and duration.
struct CallOnWake {
    queue: Arc<Queue>,
    report: Mutex<Option<mpsc::Sender<Reported>>>,
}

impl Wake for CallOnWake {
    fn wake(self: Arc<Self>) {
        let Some(report) = self.report.lock().unwrap().take() else {
            return;
        };
        let started = Instant::now();
        let result = self.queue.len();
        let _ = report.send((result, started.elapsed()));
    }
}

#[test]
fn blocking_call_from_a_completion_thread_waker_is_refused() {
    let zk = connect();
    let queue = Arc::new(Queue::new(&zk, &unique_path("waker-len")).unwrap());
    queue.put(b"one").unwrap();
    let (sender, results) = mpsc::channel();
    let waker = Waker::from(Arc::new(CallOnWake {
        queue: Arc::clone(&queue),
        report: Mutex::new(Some(sender)),
    }));
    let mut reply = zk.exists_async("/");
    let mut cx = Context::from_waker(&waker);
    // Pending: the reply wakes the waker on the completion thread.
    let polled = std::pin::Pin::new(&mut reply).poll(&mut cx);
    assert!(polled.is_pending(), "the reply came before the poll");
    let (result, took) = results
        .recv_timeout(Duration::from_secs(10))
        .expect("the call from the waker returned (before the fix it never did)");
    eprintln!("Queue::len on the completion thread: {result:?} after {took:?}");
    assert!(
        matches!(
            result,
            Err(RecipeError::ZooKeeper(
                zookeeper_mt::Error::InvalidArgument(_)
            ))
        ),
        "{result:?}"
    );
    assert!(took < DROP_BOUND, "refused at once, not after {took:?}");
    // The handle still answers, and closes.
    assert_eq!(queue.len().unwrap(), 1);
    drop(reply);
    drop(queue);
    zk.close().unwrap();
}
