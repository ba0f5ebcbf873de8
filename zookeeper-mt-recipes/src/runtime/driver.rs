//! The driver: one process-wide thread that runs every background task of the recipes
//! (caches, latches, persistent nodes, value and config watches, managed sessions, loss
//! monitors, settling what a dropped future left in flight).
//!
//! A task is a future; the driver polls it when its waker fires (a reply, a watch, a
//! timer, a stop request) and never otherwise, so a thousand idle followers cost a
//! thousand small futures and no thread each. A task must never block: it awaits.
//!
//! The thread starts with the first task and ends once no task has been alive for
//! [`LINGER`], so a process without recipes running in the background has no driver
//! thread.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// How long the driver thread stays without a live task.
const LINGER: Duration = Duration::from_secs(1);

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Default)]
struct Queue {
    runnable: VecDeque<Arc<TaskCell>>,
    /// Tasks spawned and not finished.
    live: usize,
    thread_running: bool,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    runnable: VecDeque::new(),
    live: 0,
    thread_running: false,
});
static RUNNABLE: Condvar = Condvar::new();

thread_local! {
    static ON_DRIVER: Cell<bool> = const { Cell::new(false) };
}

/// Whether this is the driver thread (where nothing may block on a task).
pub(crate) fn on_driver_thread() -> bool {
    ON_DRIVER.with(Cell::get)
}

/// What a task's handle and its stop signal share.
struct Control {
    stop: AtomicBool,
    /// A stop that abandons what the task awaits (a drop's), not only its next round.
    cancel: AtomicBool,
    finished: Mutex<bool>,
    done: Condvar,
}

/// A task as the driver holds it .
struct TaskCell {
    name: String,
    future: Mutex<Option<BoxFuture>>,
    /// In the run queue (or being polled with a wake-up pending).
    queued: AtomicBool,
    control: Arc<Control>,
    on_panic: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Wake for TaskCell {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut queue = QUEUE.lock();
        // A live task keeps the thread running: with no thread, this task has ended (a
        // late wake-up of a finished task), and queuing it would keep it until the next
        // spawn.
        if !queue.thread_running || *self.control.finished.lock() {
            return;
        }
        queue.runnable.push_back(Arc::clone(self));
        drop(queue);
        RUNNABLE.notify_one();
    }
}

/// The handle of a background task: asks it to stop, waits for its end. Dropping the
/// handle asks it to stop without waiting.
pub(crate) struct Task {
    cell: Arc<TaskCell>,
    /// Whether dropping the handle asks the task to stop (not once detached).
    stop_on_drop: bool,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.cell.name)
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// A task's view of its stop request: checked, or awaited, at its await points.
#[derive(Clone)]
pub(crate) struct StopSignal {
    control: Arc<Control>,
}

impl StopSignal {
    /// Whether the task's handle asked it to stop (or was dropped).
    pub(crate) fn is_stopped(&self) -> bool {
        self.control.stop.load(Ordering::Acquire)
    }

    /// `future`'s output, or `None` as soon as the task is cancelled ([`Task::cancel`]):
    /// the future is then dropped, abandoning what it awaited (a read, a sync), so that
    /// the stop of a dropped owner never waits for a reply. A plain stop lets it finish.
    /// A cancel wakes the task itself, so nothing needs registering.
    pub(crate) async fn unless_cancelled<F: Future>(&self, future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(move |cx| {
            if self.control.cancel.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            future.as_mut().poll(cx).map(Some)
        })
        .await
    }

    /// Ready once a stop is requested. Nothing needs registering: a stop request wakes
    /// the task itself.
    pub(crate) fn poll_stopped(&self, _cx: &mut Context<'_>) -> Poll<()> {
        if self.is_stopped() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Starts `make(stop)` as a task on the driver. `on_panic` runs (on the driver thread)
/// if the task panics, so its owner can report the end; the driver carries on.
pub(crate) fn spawn<F, Fut>(
    name: impl Into<String>,
    make: F,
    on_panic: impl FnOnce() + Send + 'static,
) -> std::io::Result<Task>
where
    F: FnOnce(StopSignal) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let control = Arc::new(Control {
        stop: AtomicBool::new(false),
        cancel: AtomicBool::new(false),
        finished: Mutex::new(false),
        done: Condvar::new(),
    });
    let future = make(StopSignal {
        control: Arc::clone(&control),
    });
    let cell = Arc::new(TaskCell {
        name: name.into(),
        future: Mutex::new(Some(Box::pin(future))),
        queued: AtomicBool::new(true),
        control,
        on_panic: Mutex::new(Some(Box::new(on_panic))),
    });
    let mut queue = QUEUE.lock();
    if !queue.thread_running {
        std::thread::Builder::new()
            .name("zk-recipe-driver".into())
            .spawn(run)?;
        queue.thread_running = true;
    }
    queue.live += 1;
    queue.runnable.push_back(Arc::clone(&cell));
    drop(queue);
    RUNNABLE.notify_one();
    Ok(Task {
        cell,
        stop_on_drop: true,
    })
}

/// Starts `future` on the driver for work that must finish even though nobody waits
/// for it (settling a request a dropped future left in flight). If the driver thread
/// cannot be started, the future runs to completion on this thread instead: late,
/// never lost.
pub(crate) fn spawn_detached(name: &str, future: impl Future<Output = ()> + Send + 'static) {
    let slot = Arc::new(Mutex::new(Some(future)));
    let task_slot = Arc::clone(&slot);
    let spawned = spawn(
        name,
        move |_stop| async move {
            let future = task_slot.lock().take();
            if let Some(future) = future {
                future.await;
            }
        },
        || {},
    );
    match spawned {
        Ok(task) => task.detach(),
        Err(error) => {
            log::warn!("recipes: cannot start the driver ({error}); finishing {name} here");
            if let Some(future) = slot.lock().take() {
                super::drive(future);
            }
        }
    }
}

impl Task {
    /// Asks the task to stop: its [`StopSignal`] reports it, and the task is woken.
    pub(crate) fn stop(&self) {
        self.cell.control.stop.store(true, Ordering::Release);
        self.cell.wake_by_ref();
    }

    /// Asks the task to stop at once, abandoning what it awaits where it says so
    /// ([`StopSignal::unless_cancelled`]): for the drop of its owner, which returns at
    /// once while the task ends on the driver.
    pub(crate) fn cancel(&self) {
        self.cell.control.cancel.store(true, Ordering::Release);
        self.stop();
    }

    /// Whether the task has ended.
    pub(crate) fn is_finished(&self) -> bool {
        *self.cell.control.finished.lock()
    }

    /// Waits until the task has ended, for an explicit blocking close (never a drop).
    /// Where no blocking wait is allowed (the driver thread itself, the C completion
    /// thread, a close's sweep) it returns at once: the
    /// stopped task ends on the driver all the same.
    pub(crate) fn join(&self) {
        if super::refused_here() {
            return;
        }
        let mut finished = self.cell.control.finished.lock();
        while !*finished {
            self.cell.control.done.wait(&mut finished);
        }
    }

    /// Stops the task and waits for its end (see [`join`](Self::join)).
    pub(crate) fn stop_and_join(&self) {
        self.stop();
        self.join();
    }

    /// Lets the task run on without a handle (a stop is never requested).
    pub(crate) fn detach(mut self) {
        self.stop_on_drop = false;
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.stop_on_drop {
            self.stop();
        }
    }
}

/// The driver thread: polls runnable tasks; sleeps when none is.
fn run() {
    ON_DRIVER.with(|on| on.set(true));
    // The client never waits here either: a full handle fails a request at once (a
    // retryable error the tasks ride out), a blocking wait fails instead of stalling
    // every task, and a handle whose last clone a task drops is closed elsewhere.
    zookeeper_mt::refuse_waits_on_this_thread();
    let mut queue = QUEUE.lock();
    loop {
        if let Some(cell) = queue.runnable.pop_front() {
            drop(queue);
            poll_task(&cell);
            queue = QUEUE.lock();
            continue;
        }
        if queue.live > 0 {
            RUNNABLE.wait(&mut queue);
        } else if RUNNABLE.wait_for(&mut queue, LINGER).timed_out()
            && queue.live == 0
            && queue.runnable.is_empty()
        {
            queue.thread_running = false;
            return;
        }
    }
}

/// Polls `cell` once; a task that completes (or panics) is counted out and its handle
/// told, in that order: whoever joined it sees the live count without it.
fn poll_task(cell: &Arc<TaskCell>) {
    // Cleared before the poll: a wake during the poll queues it again.
    cell.queued.store(false, Ordering::Release);
    let mut slot = cell.future.lock();
    let Some(future) = slot.as_mut() else {
        return; // finished already; a stale wake-up
    };
    let waker = Waker::from(Arc::clone(cell));
    let mut cx = Context::from_waker(&waker);
    let outcome = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)));
    let panicked = match outcome {
        Ok(Poll::Pending) => return,
        Ok(Poll::Ready(())) => false,
        Err(_) => true,
    };
    let future = slot.take();
    drop(slot);
    // Dropping the future runs its guards (removing watches, withdrawing nodes).
    if catch_unwind(AssertUnwindSafe(move || drop(future))).is_err() {
        log::error!("recipes: task {} panicked while ending", cell.name);
    }
    if panicked {
        log::error!("recipes: task {} panicked; it has ended", cell.name);
        if let Some(on_panic) = cell.on_panic.lock().take() {
            let _ = catch_unwind(AssertUnwindSafe(on_panic));
        }
    }
    cell.on_panic.lock().take();
    QUEUE.lock().live -= 1;
    *cell.control.finished.lock() = true;
    cell.control.done.notify_all();
}

/// Tasks alive now (for tests and the thread-count programs).
pub(crate) fn live_tasks() -> usize {
    QUEUE.lock().live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::sleep_for;

    #[test]
    fn runs_stops_and_joins_tasks_on_one_thread() {
        let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<Task> = (0..100)
            .map(|_| {
                let counter = Arc::clone(&counter);
                spawn(
                    "test",
                    move |stop| async move {
                        std::future::poll_fn(|cx| stop.poll_stopped(cx)).await;
                        counter.fetch_add(1, Ordering::SeqCst);
                    },
                    || {},
                )
                .unwrap()
            })
            .collect();
        for task in &tasks {
            assert!(!task.is_finished());
        }
        for task in &tasks {
            task.stop_and_join();
        }
        assert_eq!(counter.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn a_panicking_task_reports_and_the_driver_goes_on() {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let task = spawn(
            "panics",
            |_stop| async {
                sleep_for(Duration::from_millis(5)).await;
                panic!("on purpose");
            },
            move || sender.send(()).unwrap(),
        )
        .unwrap();
        receiver.recv().unwrap();
        task.join();
        let (done, finished) = crossbeam_channel::bounded(1);
        spawn_detached("after", async move { done.send(7).unwrap() });
        assert_eq!(finished.recv().unwrap(), 7);
    }
}
