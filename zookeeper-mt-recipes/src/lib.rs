//! Coordination recipes built only on the safe client (`zookeeper-mt`), never on the
//! raw bindings: blocking APIs with timeouts, thread-safe, typed errors, and an async
//! form of every blocking call for any executor (`*_async` methods on the recipe types;
//! every recipe type is cheap to clone, so a task owns a clone: see [`asynchronous`]).
//!
//! | recipe | types | from |
//! |---|---|---|
//! | FIFO queue with blocking take | [`queues::queue`] | ZooKeeper recipes |
//! | lock watching only its predecessor | [`locks::lock`] | ZooKeeper recipes |
//! | locking work queue without herd effect | [`queues::work_queue`] | ZooKeeper recipes |
//! | id generator (CAS, batched) | [`shared::id_generator`] | ZooKeeper recipes |
//! | config watch | [`caches::config_watch`] | ZooKeeper recipes |
//! | barrier, double barrier | [`barriers`] | ZooKeeper recipes |
//! | leader election | [`leadership::election`] | ZooKeeper recipes |
//! | read-write lock | [`locks::read_write_lock`] | ZooKeeper recipes |
//! | semaphore | [`locks::semaphore`] | ZooKeeper recipes |
//! | lock layouts for Curator `InterProcessMutex` / `InterProcessReadWriteLock` and kazoo `Lock` / `ReadLock` / `WriteLock` | [`locks::LockLayout`] | Curator, kazoo |
//! | reentrant lock | [`locks::reentrant_lock`] | Curator |
//! | multi-lock (all or nothing) | [`locks::multi_lock`] | Curator |
//! | semaphore with leases (Curator `InterProcessSemaphoreV2`, kazoo `Semaphore` layouts) | [`locks::lease_semaphore`] | Curator, kazoo |
//! | fenced writes (a multi checking the lock node) | [`locks::fenced`] | CURATOR-689 |
//! | connection states, client renewing expired sessions | [`lifecycle`] | Curator |
//! | node, children and tree caches | [`caches`] | Curator |
//! | shared count, atomic long, kazoo counter | [`shared`] | Curator, kazoo |
//! | bounded, priority and delayed queues | [`queues::bounded_queue`], [`queues::priority_queue`], [`queues::delayed_queue`] | Curator |
//! | leader latch (leadership guard, events, run while leader) | [`leadership::leader_latch`] | Curator, kazoo |
//! | persistent ephemeral node, group membership | [`nodes`] | Curator, kazoo |
//!
//! Every waiting call takes a `zookeeper_mt::Timeout` (a `Duration` or `Timeout::Never`)
//! and reports [`RecipeError::Timeout`] when it passes ([`OptionalExtension::optional`]
//! turns that into `None`). Dropping the future of an `*_async` call withdraws what it
//! started (a lock request's node and watch, a lease); a queue take dropped with its
//! claim in flight puts the item back. Each recipe's docs state its guarantees and
//! non-guarantees, with an example; the workspace's `docs/recipes.md` collects them in
//! one table.
//!
//! Every constructor takes the same handle type, [`Client`]: a plain
//! `zookeeper_mt::ZooKeeper` (one session) or a `zookeeper_mt::ManagedZooKeeper` (a new
//! session after each expiry), by reference or by value. Call-style recipes run each
//! call on the session current when it starts; the followers (caches, latches,
//! persistent nodes, watches) carry on in each new session.
//!
//! ## Deletes that could not reach the server
//!
//! When a recipe must remove one of its nodes (a released lock, a withdrawn wait, a
//! released work item) and the server cannot be reached in time, the call reports the
//! error and the process-wide background driver (one thread for all background work
//! of every recipe) sends the delete once the session is connected again. It keeps trying for as long as the session lives and some clone of
//! the handle is still held: an ensemble without a quorum expires no session, so a
//! client can come back after any outage with its ephemeral nodes, and a lock node left
//! behind would block every later acquirer. It stops when the session ends (the nodes
//! went with it) or once every clone of the handle is dropped (which closes it and ends
//! the session); it never keeps a session open by itself.
//!
//! ## Riding out a lost connection
//!
//! The queues, the lock and the work queue wait at most their reconnect timeout for a
//! dropped connection to come back, then fail with `ConnectionLoss`; a `RetryPolicy`
//! (`with_retry_policy`) sets it and the pauses between tries of a failed request. The
//! other waiting recipes ride out a loss until the call's own deadline, and the
//! background ones (caches, latches, watches) for as long as it takes.
//!
//! ## Feature flags
//!
//! By default the system `libzookeeper_mt` is linked (Debian: `libzookeeper-mt-dev`).
//! These features are forwarded through `zookeeper-mt` to `zookeeper-mt-sys`:
//!
//! - `vendored`: build the pinned C client from source and link it statically.
//! - `tls`: TLS connections (`ZooKeeperBuilder::tls`); implies `vendored`, links the
//!   system OpenSSL.
//! - `sasl`: SASL authentication (`ZooKeeperBuilder::sasl`); implies `vendored`, links
//!   Cyrus SASL.
//! - `tracing`: the C client's log as structured `tracing` events (C function, line,
//!   session id) instead of `log` records (which a `tracing` subscriber sees through
//!   `tracing-log`).
//!
//! MSRV: Rust 1.82 or newer; it is raised only in a new minor release (see `docs/msrv.md`
//! in the repository).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod asynchronous;
pub mod barriers;
pub mod caches;
pub mod error;
pub mod events;
pub mod leadership;
pub mod lifecycle;
pub mod locks;
pub mod nodes;
pub mod queues;
mod recovery;
pub(crate) mod runtime;
pub mod shared;
pub(crate) mod support;

pub use barriers::{Barrier, DoubleBarrier};
pub use caches::{ChildrenCache, ConfigWatch, NodeCache, TreeCache};
pub use error::{LossReason, OptionalExtension, RecipeError, Result};
pub use events::EventStream;
pub use leadership::{LeaderElection, LeaderLatch};
pub use lifecycle::Client;
pub use locks::{LeaseSemaphore, Lock, MultiLock, ReadWriteLock, ReentrantLock, Semaphore};
pub use nodes::{Group, GroupMember, NodeOptions, PersistentNode};
pub use queues::{BoundedQueue, DelayedQueue, PriorityQueue, Queue, WorkQueue};
pub use shared::{AtomicLong, IdGenerator, KazooCounter, SharedCount};
pub use support::{LossSignal, PauseGrowth, RetryPolicy};

/// Background tasks alive on the recipes' driver (caches, latches, persistent nodes,
/// value and config watches, settling what dropped futures left in flight): for tests
/// and the thread-count programs.
#[doc(hidden)]
pub fn live_background_tasks() -> usize {
    runtime::driver::live_tasks()
}

/// The README's examples, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
