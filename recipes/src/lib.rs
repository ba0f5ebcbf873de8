//! Coordination recipes built only on the safe client (`zookeeper-rs`), never on the
//! raw bindings: blocking APIs with timeouts, thread-safe, typed errors.
//!
//! | recipe | module | from |
//! |---|---|---|
//! | FIFO queue with blocking take | [`queue`] | seed 000 |
//! | lock watching only its predecessor | [`lock`] | seed 001 |
//! | locking work queue without herd effect | [`work_queue`] | seed 002 |
//! | id generator (CAS, batched) | [`id_generator`] | seed 003 |
//! | config watch | [`config_watch`] | seed 003's next step |
//! | barrier, double barrier | [`barrier`] | ZooKeeper recipes |
//! | leader election | [`election`] | ZooKeeper recipes |
//! | read-write lock | [`rwlock`] | ZooKeeper recipes |
//! | semaphore | [`semaphore`] | ZooKeeper recipes |
//! | connection states, client renewing expired sessions | [`lifecycle`] | Curator |
//! | node, children and tree caches | [`cache`] | Curator |
//! | shared count, atomic long, kazoo counter | [`shared_value`] | Curator, kazoo |
//! | leader latch (leadership guard, events, run while leader) | [`leader_latch`] | Curator, kazoo |
//! | persistent ephemeral node, group membership | [`membership`] | Curator, kazoo |
#![warn(missing_docs)]

pub mod barrier;
pub mod cache;
pub mod config_watch;
pub mod election;
pub mod error;
pub mod events;
pub mod id_generator;
pub mod leader_latch;
pub mod lifecycle;
pub mod lock;
pub mod membership;
mod nodes;
pub mod queue;
pub mod rwlock;
pub mod semaphore;
pub mod shared_value;
pub(crate) mod support;
pub mod util;
pub mod work_queue;

pub use error::{RecipeError, Result};
pub use nodes::NodeOptions;
