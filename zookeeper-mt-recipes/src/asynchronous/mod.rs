//! Async forms of the blocking recipe calls, for any executor (no runtime dependency).
//!
//! Wrap a recipe value in [`Async`]: it is cheap to clone, and every blocking call of
//! the recipe has an async form of the same name.
//!
//! Every recipe's protocol is written once, as async code over the client's futures
//! and watches; the blocking call drives that same future on the caller's thread. The
//! recipe types carry the async forms themselves (`acquire_async`, `take_async`,
//! `wait_until_leader_async`, `release_async` on the guards, ...), and the `Async<R>`
//! forms here return them as [`RecipeFuture`]s: no thread waits for them, and dropping
//! one withdraws what the call started. Only [`Async::run`] and [`unblock`], for any
//! other blocking code, return an [`Unblock`] future: the call runs on a small pool of
//! worker threads (grown on demand, idle threads exit after 10 s), so a waiting task
//! occupies no executor thread.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use zookeeper_mt::{Timeout, ZooKeeper};
//! use zookeeper_mt_recipes::{asynchronous::Async, locks::Lock, queues::Queue};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = Async::new(Lock::new(&zk, "/locks/report")?);
//! let guard = lock.acquire(Duration::from_secs(5)).await?;
//! // ... the critical section ...
//! guard.release_async().await?;
//!
//! let jobs = Async::new(Queue::new(&zk, "/jobs")?);
//! jobs.put(b"job 1".to_vec()).await?;
//! let job = jobs.take(Timeout::Never).await?;
//! # Ok(()) }
//! ```
//!
//! # Cancellation
//! A [`RecipeFuture`] is cancelled by dropping it: what it started is withdrawn (a lock
//! request's node and watch, an election candidate's node), and a queue take dropped
//! with its claim in flight has the claim settled in the background: an item it took
//! is put back at the tail (with its priority or due time for the priority and delayed
//! queues), on a new session made like the old one if the taking session ended
//! meanwhile. So `select!`-ing a take against a shutdown signal loses nothing.
//!
//! An [`Unblock`] future ([`Async::run`], [`unblock`]) is not cancelled: dropping it
//! does not stop its call, which runs until it returns, and its result is disposed of
//! as dropping it would: a guard releases its lock, a work item goes back to its queue.
//!
//! # Not covered
//! [`ReentrantLock`](crate::locks::reentrant_lock::ReentrantLock) has no async form: its
//! owner is the calling thread, which an async task is not tied to. The event streams
//! (cache, group, latch, connection, config and value events) need no async form: an
//! [`EventStream`](crate::events::EventStream) is awaited directly (`next().await`, or
//! as a `futures_core::Stream`).

mod forms;
mod unblock;

use std::sync::Arc;

pub use unblock::{unblock, Unblock};

/// The future of a recipe call written as async code (no thread waits for it; dropping
/// it withdraws what the call started).
pub type RecipeFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// A recipe value usable from async code: every blocking call of `R` has an async form
/// of the same name on `Async<R>` (see the [module docs](self)). Cloning shares the
/// value (as an `Arc` does).
pub struct Async<R> {
    recipe: Arc<R>,
}

impl<R> Clone for Async<R> {
    fn clone(&self) -> Self {
        Async {
            recipe: Arc::clone(&self.recipe),
        }
    }
}

impl<R: std::fmt::Debug> std::fmt::Debug for Async<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Async").field(&self.recipe).finish()
    }
}

impl<R: Send + Sync + 'static> Async<R> {
    /// Wraps `recipe` for async use.
    pub fn new(recipe: R) -> Self {
        Async {
            recipe: Arc::new(recipe),
        }
    }

    /// The wrapped value, for its calls that do not block (paths, counters, states).
    pub fn get_ref(&self) -> &R {
        &self.recipe
    }

    /// The wrapped value, if this is its only handle.
    pub fn into_inner(self) -> Option<R> {
        Arc::into_inner(self.recipe)
    }

    /// The shared value, for an async form that owns it.
    pub(crate) fn shared(&self) -> Arc<R> {
        Arc::clone(&self.recipe)
    }

    /// Runs any blocking `call` on the value on a worker thread.
    pub fn run<T, F>(&self, call: F) -> Unblock<T>
    where
        T: Send + 'static,
        F: FnOnce(&R) -> T + Send + 'static,
    {
        let recipe = Arc::clone(&self.recipe);
        unblock(move || call(&recipe))
    }
}

impl<R> From<R> for Async<R>
where
    R: Send + Sync + 'static,
{
    fn from(recipe: R) -> Self {
        Async::new(recipe)
    }
}
