//! Leader latches run as tasks on the recipes' driver, not on threads of their own: 200
//! latches on one session add a few threads at most (the driver's, the timers'), exactly
//! one of them leads, and once they are dropped the live background tasks, the threads,
//! the nodes and the watches are back to what they were. Also the latch's native async
//! forms.
//!
//! A test binary of its own: it counts the process's threads, which tests running
//! beside it in the same process would disturb (its tests take turns for that reason).

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path, wait_until};
use std::sync::Mutex;
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::leadership::{LatchStatus, LeaderLatch, TermEnd};
use zookeeper_mt_recipes::live_background_tasks;

/// The tests of this binary take turns: one counts threads.
static SERIAL: Mutex<()> = Mutex::new(());

const LATCHES: usize = 200;

/// The recipes' own threads now (the driver, the timers): their names start so.
fn recipe_threads() -> usize {
    zk_harness::testing::process_threads_named("zk-recipe")
}

#[test]
fn two_hundred_latches_cost_no_thread_each_and_leave_nothing() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let zk = connect();
    let admin = connect();
    let dir = unique_path("many");
    // Nothing of the recipes runs in the background: the baseline (threads of an
    // earlier test linger for a second after their last task or timer).
    wait_until("no background task or thread", || {
        live_background_tasks() == 0 && recipe_threads() == 0
    });
    let (tasks_before, threads_before) = (live_background_tasks(), threads());

    let latches: Vec<LeaderLatch> = (0..LATCHES)
        .map(|i| {
            LeaderLatch::builder(&dir)
                .id(format!("latch-{i}"))
                .build(&zk)
                .unwrap()
        })
        .collect();
    wait_until("every latch is in line", || {
        latches
            .iter()
            .all(|l| matches!(l.status(), LatchStatus::Waiting | LatchStatus::Leading))
    });
    // One task per latch, and the session's keep-alive once a latch leads (one per
    // handle, however many guards it holds).
    let tasks = live_background_tasks() - tasks_before;
    assert!(
        tasks == LATCHES || tasks == LATCHES + 1,
        "{tasks} tasks for {LATCHES} latches"
    );
    let added = threads().saturating_sub(threads_before);
    eprintln!("{LATCHES} latches: {added} more threads");
    assert!(added <= 4, "{LATCHES} latches added {added} threads");
    let leaders: Vec<&LeaderLatch> = latches.iter().filter(|l| l.has_leadership()).collect();
    assert_eq!(leaders.len(), 1, "exactly one latch leads");
    assert_eq!(admin.get_children(&dir).unwrap().len(), LATCHES);
    let armed: usize = latches.iter().map(LeaderLatch::armed_watches).sum();
    assert_eq!(armed, LATCHES, "one watch per latch");
    // The leader is the first in line, as every participant sees it.
    let first = &latches[0].participants().unwrap()[0];
    assert_eq!(Some(&first.node), leaders[0].node().as_ref());

    // A drop asks the task to stop without waiting: the task withdraws its node and
    // its watch on the driver.
    drop(latches);
    wait_until("every node is withdrawn", || {
        admin.get_children(&dir).unwrap().is_empty()
    });
    wait_until("no context is left", || {
        zk.exists("/").unwrap();
        zk.live_contexts() == 0
    });
    assert_no_leftover_contexts(&zk);
    // (The driver counts a task out just after it has ended.)
    wait_until("every task has ended", || {
        live_background_tasks() == tasks_before
    });
    // The driver's and the timers' threads end a second after their last task.
    wait_until("the threads are back to the baseline", || {
        threads() <= threads_before && recipe_threads() == 0
    });
}

#[test]
fn native_async_forms_wait_relinquish_and_list() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // (Waits without a timeout: a timer dropped early keeps the timers' thread until
    // its deadline, which the other test would count.)
    let zk = connect();
    let dir = unique_path("async");
    let first = LeaderLatch::builder(&dir).id("first").build(&zk).unwrap();
    // The futures can go to any executor (made, never polled: nothing is sent).
    fn assert_send<T: Send>(_: &T) {}
    assert_send(&first.await_leadership_async(Timeout::Never));
    assert_send(&first.relinquish_async());
    assert_send(&first.participants_async());
    let guard =
        zk_harness::executor::block_on(first.await_leadership_async(Timeout::Never)).unwrap();
    let second = LeaderLatch::builder(&dir).id("second").build(&zk).unwrap();
    wait_until("the second latch is in line", || {
        second.status() == LatchStatus::Waiting
    });
    // A short wait times out and leaves the latch in line.
    let waited =
        zk_harness::executor::block_on(second.await_leadership_async(Duration::from_millis(20)));
    assert!(matches!(
        waited,
        Err(zookeeper_mt_recipes::RecipeError::Timeout)
    ));
    let ids: Vec<String> = zk_harness::executor::block_on(second.participants_async())
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["first", "second"]);

    assert!(zk_harness::executor::block_on(guard.relinquish_async()).unwrap());
    assert_eq!(guard.end(), Some(TermEnd::Relinquished));
    let next =
        zk_harness::executor::block_on(second.await_leadership_async(Timeout::Never)).unwrap();
    assert!(next.token() > guard.token());
    // Relinquishing a term already over changes nothing.
    assert!(!zk_harness::executor::block_on(guard.relinquish_async()).unwrap());
    assert!(zk_harness::executor::block_on(second.relinquish_async()).unwrap());
    let again =
        zk_harness::executor::block_on(first.await_leadership_async(Timeout::Never)).unwrap();
    assert_eq!(again.term(), 2);

    first.close();
    // The guard of a closed latch: its term ended with the latch, nothing to relinquish.
    assert_eq!(again.end(), Some(TermEnd::LatchClosed));
    assert!(!zk_harness::executor::block_on(again.relinquish_async()).unwrap());
    assert!(!again.relinquish().unwrap());
    second.close();
    assert_no_leftover_contexts(&zk);
}
