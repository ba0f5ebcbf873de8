//! The lock's async face: pending acquisitions cost no thread, and a dropped acquisition
//! leaves nothing behind (no node, no watch) and never takes the lock later.

mod common;

use common::{connect, unique_path};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zk_harness::testing::under_valgrind;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::locks::{Lock, LockGuard};
use zookeeper_mt_recipes::Result;

type Task = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>>;

/// A one-thread executor: polls every task whenever one was woken, until told to stop;
/// then drops every task still pending (a `select!` that gave up on them) and reports
/// how many completed.
struct Executor {
    woken: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
}

impl Wake for Executor {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        *self.woken.lock().unwrap() = true;
        self.wake.notify_one();
    }
}

fn run(executor: Arc<Executor>, mut tasks: Vec<Task>) -> usize {
    let waker = Waker::from(Arc::clone(&executor));
    let mut completed = 0;
    loop {
        tasks.retain_mut(
            |task| match task.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(outcome) => {
                    completed += 1;
                    drop(outcome);
                    false
                }
                Poll::Pending => true,
            },
        );
        let mut woken = executor.woken.lock().unwrap();
        while !*woken && !executor.stop.load(Ordering::SeqCst) {
            woken = executor.wake.wait(woken).unwrap();
        }
        *woken = false;
        if executor.stop.load(Ordering::SeqCst) {
            return completed;
        }
    }
}

/// Waits (polling: nothing signals these states) up to a minute for `condition`.
fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    zk_harness::testing::wait_until(what, Duration::from_secs(60), condition);
}

/// Polls `pending` until `reached` holds (it then waits where the test wants it) and
/// asserts it did not complete first; fails after a minute.
fn drive_until<F: Future + ?Sized>(
    mut pending: Pin<&mut F>,
    what: &str,
    mut reached: impl FnMut() -> bool,
) {
    let outcome = zk_harness::executor::block_on_timeout(
        std::future::poll_fn(|cx| {
            if pending.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            if reached() {
                return Poll::Ready(true);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }),
        Duration::from_secs(60),
    );
    assert_eq!(outcome, Some(true), "{what}");
}

fn nodes(zk: &ZooKeeper, path: &str) -> usize {
    zk.get_children(path).map(|c| c.len()).unwrap_or(0)
}

#[test]
fn a_thousand_pending_acquires_cost_no_thread_and_dropping_them_leaves_nothing() {
    // Every waiter lists every other's node: quadratic, so fewer under valgrind.
    let waiters: usize = if under_valgrind() { 100 } else { 1000 };
    let zk = connect();
    let admin = connect();
    let path = unique_path("async-lock-many");
    let holder_lock = Lock::new(&admin, &path).unwrap();
    let held = holder_lock.acquire(Timeout::Never).unwrap();
    let lock = Lock::new(&zk, &path).unwrap();
    let contexts_before = zk.live_contexts();

    let executor = Arc::new(Executor {
        woken: Mutex::new(false),
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
    });
    let tasks: Vec<Task> = (0..waiters)
        .map(|_| -> Task {
            let lock = lock.clone();
            Box::pin(async move { lock.acquire_async(Timeout::Never).await })
        })
        .collect();
    let before = threads();
    let running = {
        let executor = Arc::clone(&executor);
        thread::spawn(move || run(executor, tasks))
    };
    wait_until("every acquire waiting on its predecessor", || {
        lock.waiting() == waiters
    });
    // The executor's own thread is the test's; the recipes may add a fixed few.
    let added = threads().saturating_sub(before + 1);
    println!("{waiters} pending async acquires added {added} threads");
    assert!(
        added <= 4,
        "{waiters} pending acquires added {added} threads"
    );
    assert_eq!(nodes(&admin, &path), waiters + 1);

    // Give up on every one of them (as a select! against a shutdown signal would).
    executor.stop.store(true, Ordering::SeqCst);
    executor.wake.notify_one();
    assert_eq!(
        running.join().unwrap(),
        0,
        "an acquire completed while held"
    );
    wait_until("the dropped acquires' nodes withdrawn", || {
        nodes(&admin, &path) == 1
    });
    wait_until("their watches released", || {
        zk.live_contexts() == contexts_before
    });
    assert_eq!(lock.waiting(), 0);

    // None of them takes the lock later: once released it is free at once.
    held.release().unwrap();
    let again = holder_lock
        .try_acquire()
        .unwrap()
        .expect("free after the release");
    assert_eq!(nodes(&admin, &path), 1);
    drop(again);
    wait_until("threads back", || threads() <= before + 2);
}

#[test]
fn a_dropped_acquire_gives_way_and_a_later_one_gets_the_lock() {
    let zk = connect();
    let path = unique_path("async-lock-drop");
    let lock = Arc::new(Lock::new(&zk, &path).unwrap());
    let held = lock.acquire(Timeout::Never).unwrap();
    // Poll an acquire until it waits, then drop it.
    {
        let waiting = Arc::clone(&lock);
        let mut pending: Task =
            Box::pin(async move { waiting.acquire_async(Timeout::Never).await });
        drive_until(pending.as_mut(), "the acquire waiting", || {
            lock.waiting() == 1
        });
    }
    assert_eq!(
        lock.waiting(),
        0,
        "the dropped acquire still counts as waiting"
    );
    wait_until("the dropped acquire's node withdrawn", || {
        nodes(&zk, &path) == 1
    });
    drop(held);
    let next = zk_harness::executor::block_on(lock.acquire_async(Duration::from_secs(20)))
        .expect("the lock is free for the next acquire");
    assert_eq!(nodes(&zk, &path), 1);
    drop(next);
}

#[test]
fn a_dropped_multi_lock_acquire_releases_what_it_took() {
    use zookeeper_mt_recipes::locks::MultiLock;
    let zk = connect();
    let admin = connect();
    let (first, second) = (unique_path("async-multi-a"), unique_path("async-multi-b"));
    let blocker = Lock::new(&admin, &second).unwrap();
    let held = blocker.acquire(Timeout::Never).unwrap();
    let both = MultiLock::new(&zk, &[&first, &second]).unwrap();
    {
        let mut pending = std::pin::pin!(both.acquire_async(Timeout::Never));
        // Drive it until it holds the first lock and waits in line for the second.
        drive_until(
            pending.as_mut(),
            "holding the first, waiting for the second",
            || nodes(&admin, &first) == 1 && nodes(&admin, &second) == 2,
        );
    } // dropped here
    wait_until(
        "the first lock released and the second's node withdrawn",
        || nodes(&admin, &first) == 0 && nodes(&admin, &second) == 1,
    );
    drop(held);
    let guard = zk_harness::executor::block_on(both.acquire_async(Duration::from_secs(20)))
        .expect("both free now");
    drop(guard);
}

#[test]
fn a_dropped_write_request_is_withdrawn() {
    use zookeeper_mt_recipes::locks::ReadWriteLock;
    let zk = connect();
    let admin = connect();
    let path = unique_path("async-rwlock");
    let readers = ReadWriteLock::new(&admin, &path).unwrap();
    let reading = readers.read(Timeout::Never).unwrap();
    let lock = ReadWriteLock::new(&zk, &path).unwrap();
    {
        let mut pending = std::pin::pin!(lock.write_async(Timeout::Never));
        drive_until(
            pending.as_mut(),
            "the write request queued behind the reader",
            || nodes(&admin, &path) == 2,
        );
    }
    wait_until("the dropped write request withdrawn", || {
        nodes(&admin, &path) == 1
    });
    // A second reader is not held up by a phantom writer.
    let second = zk_harness::executor::block_on(lock.read_async(Duration::from_secs(20)))
        .expect("readers share the lock");
    drop((second, reading));
}

#[test]
fn a_dropped_semaphore_request_is_withdrawn() {
    use zookeeper_mt_recipes::locks::semaphore::Semaphore;
    let zk = connect();
    let admin = connect();
    let path = unique_path("async-semaphore");
    let holder = Semaphore::new(&admin, &path, 1).unwrap();
    let lease = holder.acquire(Timeout::Never).unwrap();
    let semaphore = Semaphore::new(&zk, &path, 1).unwrap();
    let contexts = zk.live_contexts();
    {
        let mut pending = std::pin::pin!(semaphore.acquire_async(Timeout::Never));
        drive_until(pending.as_mut(), "the request waits for the permit", || {
            nodes(&admin, &path) == 2 && zk.live_contexts() > contexts
        });
    }
    wait_until("the dropped request withdrawn", || {
        nodes(&admin, &path) == 1
    });
    wait_until("its watch released", || zk.live_contexts() == contexts);
    drop(lease);
    let next = zk_harness::executor::block_on(semaphore.acquire_async(Duration::from_secs(20)))
        .expect("the permit is free for the next request");
    drop(next);
}

#[test]
fn a_dropped_release_still_releases() {
    let zk = connect();
    let path = unique_path("async-release-drop");
    let lock = Lock::new(&zk, &path).unwrap();
    for polls in 0..3 {
        let guard = lock.acquire(Duration::from_secs(10)).unwrap();
        let mut release = Box::pin(guard.release_async());
        for _ in 0..polls {
            if zk_harness::executor::poll_once(&mut release).is_ready() {
                break;
            }
        }
        drop(release);
        wait_until("the lock free again", || nodes(&zk, &path) == 0);
    }
}
