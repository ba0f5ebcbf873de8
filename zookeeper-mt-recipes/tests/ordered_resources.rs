//! What the ordered recipes (lock, election, read-write lock, semaphore) cost in threads
//! and how long their background steps may keep a session: many lock paths alive at once
//! cost no thread each, and a cleanup that cannot reach the server gives up instead of
//! keeping the handle (and its session) forever.
//!
//! Also: container directories, which the server removes once idle and the recipes
//! create again.
//!
//! The tests count the process's threads, so they run one at a time.

mod common;
mod ordered_support;

use common::{connect, unique_path};
use ordered_support::{
    eventually, shared_server_addr, threads_named, under_valgrind, RequestProxy,
};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::Timeout;
use zookeeper_mt::{CreateMode, EventType, Op, ZooKeeper};
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::semaphore::Semaphore;
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::locks::{Lock, LockGuard, LockLost};
use zookeeper_mt_recipes::NodeOptions;

/// Held by each test: thread counts are only meaningful one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lock paths held at once (fewer under valgrind, or as `RECIPES_LOCK_PATHS` says).
fn lock_paths() -> usize {
    if let Some(n) = std::env::var("RECIPES_LOCK_PATHS")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        return n;
    }
    if under_valgrind() {
        1_000
    } else {
        10_000
    }
}

/// 10,000 lock paths, each with its own `Lock` value holding a guard, on one handle: the
/// process has no more threads than before (no thread per lock), and the guards still
/// hear of losses; asking 100 of them for `lost()` costs one shared monitor task (on the driver thread).
#[test]
fn many_lock_paths_cost_no_thread_each() {
    let _serial = serial();
    let n = lock_paths();
    let zk = connect();
    let base = unique_path("many");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &base).unwrap();
    // The lock directories first, 1,000 per multi (the test is about threads, not about
    // creating directories).
    let paths: Vec<String> = (0..n).map(|i| format!("{base}/{i}")).collect();
    for chunk in paths.chunks(1000) {
        let ops: Vec<Op> = chunk
            .iter()
            .map(|p| Op::create(p, b"", CreateMode::Persistent))
            .collect();
        zk.multi(&ops).unwrap();
    }
    let threads_before = threads_named("");
    let started = Instant::now();
    let workers = 4;
    let held: Vec<(Lock, LockGuard)> = thread::scope(|scope| {
        let handles: Vec<_> = paths
            .chunks(n.div_ceil(workers))
            .map(|chunk| {
                let zk = zk.clone();
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|path| {
                            let lock = Lock::new(&zk, path).unwrap();
                            let guard = lock.try_acquire().unwrap().expect("a free lock");
                            (lock, guard)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let threads_held = threads_named("");
    eprintln!(
        "{n} lock paths held on one handle in {:?}: threads {threads_before} -> {threads_held}",
        started.elapsed()
    );
    assert_eq!(held.len(), n);
    // At most the recipes' two shared threads (driver and timer), which run the
    // handle's one keep-alive while guards are held: nothing per lock.
    assert!(
        threads_held <= threads_before + 2,
        "threads grew from {threads_before} to {threads_held} with {n} locks held"
    );
    // Loss reports still work: 100 guards asked, one node deleted behind its back.
    let asked: Vec<_> = held.iter().take(100).map(|(_, g)| g.lost()).collect();
    let threads_asked = threads_named("");
    assert!(
        threads_asked <= threads_before + 2,
        "more than the driver and timer threads: {threads_before} -> {threads_asked}"
    );
    connect().delete(held[7].1.node(), None).unwrap();
    assert_eq!(
        asked[7].wait(Duration::from_secs(20)).unwrap(),
        Some(LockLost::NodeDeleted)
    );
    for (i, receiver) in asked.iter().enumerate() {
        if i != 7 {
            assert!(receiver.try_get().is_none(), "guard {i} reported lost");
        }
    }
    drop(asked);
    let started = Instant::now();
    drop(held);
    eprintln!("{n} guards released in {:?}", started.elapsed());
    assert!(
        eventually(Duration::from_secs(10), || threads_named("")
            <= threads_before),
        "the driver thread did not end"
    );
    for path in paths.iter().step_by(97) {
        assert!(zk.get_children(path).unwrap().is_empty(), "{path}");
    }
}

/// The server goes away for good while a guard is dropped, and then the user drops the
/// last handle: the pending background delete does not keep the handle open (the worker
/// holds it weakly), so the handle closes and the client's threads end; the node goes
/// with the session. (A cleanup whose user still holds the handle is never given up:
/// `cleanup_outlives_outage.rs`.)
#[test]
fn background_cleanup_lets_the_session_go_with_the_last_handle() {
    let _serial = serial();
    let proxy = RequestProxy::start(&shared_server_addr());
    // Warm up what lives as long as the process (the client library's own threads).
    connect().close().unwrap();
    let baseline = threads_named("");
    {
        let zk = ZooKeeper::connect(&proxy.addr, Duration::from_secs(2)).unwrap();
        let lock = Lock::new(&zk, &unique_path("gone")).unwrap();
        let guard = lock.acquire(Timeout::Never).unwrap();
        proxy.cut(); // the server is unreachable from now on
        drop(guard);
    }
    let gave_up = eventually(Duration::from_secs(40), || threads_named("") <= baseline);
    assert!(
        gave_up,
        "threads stayed above the baseline {baseline}: {} (cleanup threads: {})",
        threads_named(""),
        threads_named("zk-recipe-clean")
    );
}

/// A lock with a disconnect grace has the monitor task time it while a guard is held;
/// once the guard is released and the user drops the lock and the handle, the monitor
/// lets go of the handle too: the client's threads, the monitor and the driver end.
#[test]
fn the_monitor_lets_go_of_the_handle() {
    let _serial = serial();
    connect().close().unwrap(); // warm up what lives as long as the process
                                // Drops hand their work to the driver: let an earlier test's background deletes end
                                // before the baseline is read.
    eventually(Duration::from_secs(20), || {
        zookeeper_mt_recipes::live_background_tasks() == 0
    });
    let baseline = threads_named("");
    let tasks = zookeeper_mt_recipes::live_background_tasks();
    {
        let zk = connect();
        let lock = Lock::new(&zk, &unique_path("grace"))
            .unwrap()
            .with_disconnect_grace(Duration::from_secs(5));
        let guard = lock.acquire(Timeout::Never).unwrap();
        // The monitor times the grace; the session's keep-alive (one per handle while
        // a guard is held) keeps its liveness bound fresh.
        assert_eq!(
            zookeeper_mt_recipes::live_background_tasks(),
            tasks + 2,
            "the grace is timed by the monitor task"
        );
        guard.release().unwrap();
    }
    assert!(
        eventually(Duration::from_secs(20), || threads_named("") <= baseline
            && zookeeper_mt_recipes::live_background_tasks() == tasks),
        "threads stayed above the baseline {baseline}: {} (driver: {}, tasks: {})",
        threads_named(""),
        threads_named("zk-recipe-driver"),
        zookeeper_mt_recipes::live_background_tasks()
    );
}

/// With `container_dirs(true)` the lock, read-write lock, semaphore and election
/// directories are container nodes: the server removes each once it is empty, and the
/// next use creates it again (the semaphore's with its permit count). The server here
/// checks containers every 200 ms (the default is a minute).
#[test]
fn container_directories_go_when_idle_and_come_back() {
    let _serial = serial();
    let server = Server::start_with(
        &ServerOptions::for_tests().jvm_arg("-Dznode.container.checkIntervalMs=200"),
    )
    .unwrap();
    let zk = ZooKeeper::connect(&server.connect_string(), Duration::from_secs(10)).unwrap();
    let containers = NodeOptions::default().container_dirs(true);
    let lock = Lock::new(&zk, "/c/lock")
        .unwrap()
        .with_node_options(containers.clone());
    let rw = ReadWriteLock::new(&zk, "/c/rw")
        .unwrap()
        .with_node_options(containers.clone());
    let sem = Semaphore::new(&zk, "/c/sem", 2)
        .unwrap()
        .with_node_options(containers.clone());
    let wait = Duration::from_secs(20);
    for round in 0..2 {
        let guard = lock.acquire(Timeout::Never).unwrap();
        let write = rw.write(wait).unwrap();
        let lease = sem.acquire(wait).unwrap();
        let candidate =
            LeaderElection::with_options(&zk, "/c/election", b"x", containers.clone()).unwrap();
        for dir in ["/c/lock", "/c/rw", "/c/sem", "/c/election"] {
            assert!(zk.exists(dir).unwrap().is_some(), "{dir} created again");
        }
        assert_eq!(zk.get("/c/sem").unwrap().0, b"2", "round {round}");
        guard.release().unwrap();
        write.release().unwrap();
        lease.release().unwrap();
        candidate.resign().unwrap();
        // Nobody deletes them but the server's container check (a client cannot tell a
        // container from its stat: the server reports its ephemeral owner as 0).
        for dir in ["/c/lock", "/c/rw", "/c/sem", "/c/election"] {
            let (stat, watch) = zk.exists_watch(dir).unwrap();
            if stat.is_some() {
                let event = watch.wait_timeout(wait).unwrap_or_else(|e| {
                    panic!(
                        "{dir} not removed ({e}): {:?} {:?}",
                        zk.get_children2(dir),
                        zk.get_acl(dir)
                    )
                });
                assert_eq!(event.event_type, EventType::NodeDeleted, "{dir}");
            }
        }
    }
    zk.close().unwrap();
}
