//! Using the recipes from async code, on any executor (no runtime dependency).
//!
//! Every recipe's protocol is written once, as async code over the client's futures
//! and watches; each blocking call has an async form of the same name ending in
//! `_async` (`acquire_async`, `take_async`, `wait_until_leader_async`, `release_async`
//! on the guards, ...), and the blocking call drives that same future on the caller's
//! thread. No thread waits for an `*_async` future.
//!
//! # Owning a recipe in a task
//! Every recipe type is cheap to clone (its state lives behind `Arc`s) and
//! `Clone + Send + Sync + 'static`. A clone is the same value, not a new one: clones
//! share everything the value keeps (a queue's cached listing and child watch, a
//! generator's reserved ids, a latch's node and task, a lock's view of its session),
//! exactly as threads sharing one `&R` or `Arc<R>` do. So the way to use a recipe from a
//! spawned task is to move a clone into the task and call the `*_async` forms on it; the
//! future is then `Send + 'static`:
//!
//! ```no_run
//! # async fn f(spawn: impl Fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>))
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use zookeeper_mt::{Timeout, ZooKeeper};
//! use zookeeper_mt_recipes::{locks::Lock, queues::Queue};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = Lock::new(&zk, "/locks/report")?;
//! let guard = lock.acquire_async(Duration::from_secs(5)).await?;
//! // ... the critical section ...
//! guard.release_async().await?;
//!
//! let jobs = Queue::new(&zk, "/jobs")?;
//! let worker = jobs.clone();
//! spawn(Box::pin(async move {
//!     while let Ok(job) = worker.take_async(Timeout::Never).await {
//!         // ... handle `job` ...
//! #       drop(job);
//!     }
//! }));
//! jobs.put_async(b"job 1").await?;
//! # Ok(()) }
//! ```
//!
//! Values that run something in the background (caches, latches, persistent nodes,
//! group members, config watches, election candidates, an entered double-barrier
//! participant) stop it when their **last** clone is dropped; an explicit `close`
//! (`stop`, `leave`, `resign`) on any clone stops it for all of them.
//!
//! # Cancellation
//! An `*_async` future is cancelled by dropping it: what it started is withdrawn (a lock
//! request's node and watch, an election candidate's node, a lease), and a queue take
//! dropped with its claim in flight has the claim settled in the background: an item it
//! took is put back at the tail (with its priority or due time for the priority and
//! delayed queues), on a new session made like the old one if the taking session ended
//! meanwhile. So `select!`-ing a take against a shutdown signal loses nothing.
//! A dropped [`run_while_leader_async`](crate::leadership::LeaderLatch::run_while_leader_async)
//! drops its job and relinquishes the term; a dropped
//! [`run_once_async`](crate::leadership::leader_latch::LatchBuilder::run_once_async) also
//! withdraws the candidate.
//!
//! # Not covered
//! [`ReentrantLock`](crate::locks::reentrant_lock::ReentrantLock) has no async form and
//! is not `Clone`: its owner is the calling thread, which an async task is not tied to.
//! The event streams (cache, group, latch, connection, config and value events) need no
//! async form: an [`EventStream`](crate::events::EventStream) is awaited directly
//! (`next().await`, or as a `futures_core::Stream`).

pub(crate) mod owner;
pub(crate) mod unblock;

pub(crate) use unblock::unblock;
