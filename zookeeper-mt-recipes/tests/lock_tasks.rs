//! The lock's loss monitor is a task on the recipes' driver, not a thread: 200 guards on
//! one session asked for `lost()` add at most two threads (the driver, the timer) and
//! one task, each hears of its node's deletion by another session, and dropping
//! everything leaves no watch, task or thread behind.
//!
//! Alone in its binary: it counts the process's threads and tasks.

mod common;

use common::{connect, unique_path};
use std::time::Duration;
use zk_harness::testing::{process_threads as threads, process_threads_named as threads_named};
use zookeeper_mt::{CreateMode, Op};
use zookeeper_mt_recipes::live_background_tasks;
use zookeeper_mt_recipes::locks::{Lock, LockLost};
use zookeeper_mt_recipes::RecipeError;

const LOCKS: usize = 200;

/// Polls `condition` until it holds or 10 s pass; whether it held. For states nothing
/// signals (the driver's count of live tasks, a thread ending, a watch being set).
fn eventually(condition: impl FnMut() -> bool) -> bool {
    zk_harness::testing::poll_until(Duration::from_secs(10), condition)
}

#[test]
fn guards_asked_for_their_loss_share_one_task() {
    let zk = connect();
    let thief = connect();
    let base = unique_path("lost");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &base).unwrap();
    let paths: Vec<String> = (0..LOCKS).map(|i| format!("{base}/{i}")).collect();
    let ops: Vec<Op> = paths
        .iter()
        .map(|path| Op::create(path, b"", CreateMode::Persistent))
        .collect();
    zk.multi(&ops).unwrap();
    zk.exists("/").unwrap();
    let (tasks, threads_before, contexts) =
        (live_background_tasks(), threads(), zk.live_contexts());

    let locks: Vec<Lock> = paths
        .iter()
        .map(|path| Lock::new(&zk, path).unwrap())
        .collect();
    let guards: Vec<_> = locks
        .iter()
        .map(|lock| lock.try_acquire().unwrap().expect("a free lock"))
        .collect();
    let lost: Vec<_> = guards.iter().map(|guard| guard.lost()).collect();
    let added = threads().saturating_sub(threads_before);
    assert!(
        added <= 2,
        "{added} threads for {LOCKS} guards asked for lost()"
    );
    assert_eq!(threads_named("zk-lock-monitor"), 0, "no monitor thread");
    // The monitor, and the session's keep-alive (one per handle while guards are held).
    assert_eq!(live_background_tasks(), tasks + 2, "one monitor task");
    // One watch on each guard's node.
    assert!(
        eventually(|| zk.live_contexts() == contexts + LOCKS),
        "{} contexts, {contexts} + {LOCKS} expected",
        zk.live_contexts()
    );
    assert!(lost.iter().all(|signal| signal.try_get().is_none()));

    // Another session deletes every lock node: each guard hears of its own.
    let deletes: Vec<Op> = guards
        .iter()
        .map(|guard| Op::delete(guard.node(), None))
        .collect();
    thief.multi(&deletes).unwrap();
    for (i, receiver) in lost.iter().enumerate() {
        assert_eq!(
            receiver.wait(Duration::from_secs(10)),
            Ok(Some(LockLost::NodeDeleted)),
            "guard {i}"
        );
    }
    // The fired watches are gone.
    zk.exists("/").unwrap();
    assert_eq!(zk.live_contexts(), contexts);
    for guard in guards {
        assert!(guard.is_lost());
        assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
    }
    drop(lost);
    drop(locks);

    // With nothing left to serve the task ends; the driver thread follows a moment later.
    assert!(
        eventually(|| live_background_tasks() == tasks),
        "{} tasks left, {tasks} before",
        live_background_tasks()
    );
    zk.exists("/").unwrap();
    assert_eq!(zk.live_contexts(), contexts, "no watch left");
    assert!(
        eventually(|| threads() <= threads_before),
        "threads: {} after, {threads_before} before",
        threads()
    );
    for path in &paths {
        zk.delete(path, None).unwrap();
    }
    zk.delete(&base, None).unwrap();
}
