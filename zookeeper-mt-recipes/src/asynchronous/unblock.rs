//! Running a blocking call off the driver: a small pool of worker threads and the future
//! ([`Unblock`]) that completes when the call returns. Crate-private: only the queue's
//! put-back of a stray item uses it, for the one client call with no async form
//! (`ZooKeeper::new_session`).
//!
//! The pool grows on demand (one thread per call in flight beyond the idle ones, so a
//! call waiting for a lock never delays another call) and a worker idle for
//! [`IDLE_EXIT`] exits, so an idle process keeps no threads.

use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

/// How long a worker waits for another call before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    /// Workers waiting for a job. A submitter takes one (decrements) under this lock
    /// before sending; a worker leaves only under it with no job queued, so a sent job
    /// always has a worker to run it.
    idle: Mutex<usize>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (jobs, queue) = crossbeam_channel::unbounded();
        Pool {
            jobs,
            queue,
            idle: Mutex::new(0),
        }
    })
}

impl Pool {
    fn submit(&'static self, job: Job) {
        let mut idle = self.idle.lock();
        if *idle > 0 {
            *idle -= 1;
        } else if let Err(error) = std::thread::Builder::new()
            .name("zk-recipes-unblock".into())
            .spawn(move || self.work())
        {
            // No thread to be had: run the call here rather than never (the caller's
            // executor thread blocks, which is still correct).
            log::warn!("cannot start a worker thread ({error}); running the call inline");
            drop(idle);
            job();
            return;
        }
        // The receiver lives in the pool (static): sending cannot fail.
        let _ = self.jobs.send(job);
    }

    fn work(&self) {
        loop {
            match self.queue.recv_timeout(IDLE_EXIT) {
                Ok(job) => {
                    job();
                    *self.idle.lock() += 1;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = self.idle.lock();
                    if self.queue.is_empty() && *idle > 0 {
                        *idle -= 1;
                        return;
                    }
                    // A submitter counted on this worker: its job is queued.
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

enum State<T> {
    Running(Option<Waker>),
    Done(std::thread::Result<T>),
    /// The result was handed to the future's owner.
    Taken,
    /// The future was dropped before the call returned.
    Abandoned,
}

/// What a worker and its future share.
struct Shared<T> {
    state: State<T>,
}

/// The future of a blocking recipe call run on a worker thread: completes with the
/// call's result. Works on any executor (it needs no runtime: the worker wakes the task).
///
/// **Dropping it does not stop the call**: the call runs to its end (its own timeout
/// bounds it) and its result is then disposed of as its type's `Drop` does (a guard
/// releases, a work item goes back to the queue).
#[must_use = "futures do nothing unless awaited; the call runs anyway"]
pub(crate) struct Unblock<T: Send + 'static> {
    shared: Arc<Mutex<Shared<T>>>,
}

impl<T: Send + 'static> std::fmt::Debug for Unblock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.shared.lock().state {
            State::Running(_) => "running",
            State::Done(_) => "done",
            State::Taken => "taken",
            State::Abandoned => "abandoned",
        };
        f.debug_struct("Unblock").field("state", &state).finish()
    }
}

/// Runs `call` on a worker thread; the returned future completes with its result.
/// A panic in `call` is resumed in the task that polls the future.
pub(crate) fn unblock<T, F>(call: F) -> Unblock<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    spawn(call)
}

fn spawn<T, F>(call: F) -> Unblock<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let shared = Arc::new(Mutex::new(Shared {
        state: State::Running(None),
    }));
    let worker_side = Arc::clone(&shared);
    pool().submit(Box::new(move || {
        let result = catch_unwind(AssertUnwindSafe(call));
        let mut shared = worker_side.lock();
        match std::mem::replace(&mut shared.state, State::Taken) {
            State::Running(waker) => {
                shared.state = State::Done(result);
                drop(shared);
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
            // Nobody receives it: dropped here, on the worker (a guard's drop may wait
            // for the server).
            State::Abandoned => {
                drop(shared);
                dispose(result);
            }
            State::Done(_) | State::Taken => unreachable!("a call completes once"),
        }
    }));
    Unblock { shared }
}

/// Drops a result nobody receives (no lock held).
fn dispose<T>(result: std::thread::Result<T>) {
    if catch_unwind(AssertUnwindSafe(move || drop(result))).is_err() {
        log::error!("dropping an abandoned result panicked");
    }
}

impl<T: Send + 'static> Future for Unblock<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut shared = self.shared.lock();
        match std::mem::replace(&mut shared.state, State::Taken) {
            State::Running(_) => {
                shared.state = State::Running(Some(cx.waker().clone()));
                Poll::Pending
            }
            State::Done(Ok(value)) => Poll::Ready(value),
            State::Done(Err(panic)) => {
                drop(shared);
                resume_unwind(panic)
            }
            State::Taken | State::Abandoned => panic!("`Unblock` polled after completion"),
        }
    }
}

impl<T: Send + 'static> Drop for Unblock<T> {
    fn drop(&mut self) {
        let mut shared = self.shared.lock();
        match std::mem::replace(&mut shared.state, State::Abandoned) {
            // The worker disposes of the result when the call returns.
            State::Running(_) => {}
            State::Done(result) => {
                // Done but never received: dispose of it on a worker, never here (a
                // guard's drop may wait for the server; this may be an executor thread).
                drop(shared);
                pool().submit(Box::new(move || dispose(result)));
            }
            State::Taken | State::Abandoned => shared.state = State::Taken,
        }
    }
}
