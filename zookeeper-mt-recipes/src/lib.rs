//! Coordination recipes built only on the safe client (`zookeeper-mt`), never on the
//! raw bindings: blocking APIs with timeouts, thread-safe, typed errors, and an async
//! form of every blocking call for any executor ([`asynchronous::Async`]).
//!
//! | recipe | module | from |
//! |---|---|---|
//! | FIFO queue with blocking take | [`queue`] | ZooKeeper recipes |
//! | lock watching only its predecessor | [`lock`] | ZooKeeper recipes |
//! | locking work queue without herd effect | [`work_queue`] | ZooKeeper recipes |
//! | id generator (CAS, batched) | [`id_generator`] | ZooKeeper recipes |
//! | config watch | [`config_watch`] | ZooKeeper recipes |
//! | barrier, double barrier | [`barrier`] | ZooKeeper recipes |
//! | leader election | [`election`] | ZooKeeper recipes |
//! | read-write lock | [`rwlock`] | ZooKeeper recipes |
//! | semaphore | [`semaphore`] | ZooKeeper recipes |
//! | lock layouts for Curator `InterProcessMutex` / `InterProcessReadWriteLock` and kazoo `Lock` / `ReadLock` / `WriteLock` | [`lock::LockLayout`] | Curator, kazoo |
//! | reentrant lock | [`reentrant_lock`] | Curator |
//! | multi-lock (all or nothing) | [`multi_lock`] | Curator |
//! | semaphore with leases (Curator `InterProcessSemaphoreV2`, kazoo `Semaphore` layouts) | [`lease_semaphore`] | Curator, kazoo |
//! | fenced writes (a multi checking the lock node) | [`fenced`] | CURATOR-689 |
//! | connection states, client renewing expired sessions | [`lifecycle`] | Curator |
//! | node, children and tree caches | [`cache`] | Curator |
//! | shared count, atomic long, kazoo counter | [`shared_value`] | Curator, kazoo |
//! | bounded, priority and delayed queues | [`bounded_queue`], [`priority_queue`], [`delayed_queue`] | Curator |
//! | leader latch (leadership guard, events, run while leader) | [`leader_latch`] | Curator, kazoo |
//! | persistent ephemeral node, group membership | [`membership`] | Curator, kazoo |
//!
//! ## Deletes that could not reach the server
//!
//! When a recipe must remove one of its nodes (a released lock, a withdrawn wait, a
//! released work item) and the server cannot be reached in time, the call reports the
//! error and one process-wide cleanup thread sends the delete once the session is
//! connected again. It keeps trying for as long as the session lives and some clone of
//! the handle is still held: an ensemble without a quorum expires no session, so a
//! client can come back after any outage with its ephemeral nodes, and a lock node left
//! behind would block every later acquirer. It stops when the session ends (the nodes
//! went with it) or once every clone of the handle is dropped (which closes it and ends
//! the session); it never keeps a session open by itself.
//!
//! ## Riding out a lost connection
//!
//! The queues, the lock and the work queue wait at most their reconnect timeout for a
//! dropped connection to come back, then fail with `ConnectionLoss`; a [`RetryPolicy`]
//! (`with_retry_policy`) sets it and the pauses between tries of a failed request. The
//! other waiting recipes ride out a loss until the call's own deadline, and the
//! background ones (caches, latches, watches) for as long as it takes.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod asynchronous;
pub mod barrier;
pub mod bounded_queue;
pub mod cache;
pub mod config_watch;
pub mod delayed_queue;
pub mod election;
pub mod error;
pub mod events;
pub mod fenced;
pub mod id_generator;
pub mod leader_latch;
pub mod lease_semaphore;
pub mod lifecycle;
pub mod lock;
pub mod membership;
pub mod multi_lock;
mod nodes;
pub mod priority_queue;
pub mod queue;
mod recovery;
pub mod reentrant_lock;
pub(crate) mod runtime;
pub mod rwlock;
pub mod semaphore;
pub mod shared_value;
pub(crate) mod support;
pub mod util;
pub mod work_queue;

pub use error::{LossReason, OptionalExtension, RecipeError, Result};
pub use events::EventStream;
pub use nodes::NodeOptions;
pub use support::{PauseGrowth, RetryPolicy};

/// Background tasks alive on the recipes' driver (caches, latches, persistent nodes,
/// value and config watches, settling what dropped futures left in flight): for tests
/// and the thread-count programs.
#[doc(hidden)]
pub fn live_background_tasks() -> usize {
    runtime::driver::live_tasks()
}
