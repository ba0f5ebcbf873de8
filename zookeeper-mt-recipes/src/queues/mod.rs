//! Queues: the FIFO [`Queue`] with blocking take, its bounded ([`BoundedQueue`]),
//! priority ([`PriorityQueue`]) and delayed ([`DelayedQueue`]) forms, and the locking
//! [`WorkQueue`] whose items are claimed, then released or completed.
//!
//! The main types are re-exported here; each sub-module documents its recipe's
//! protocol, layouts and failure handling.

pub mod bounded_queue;
pub mod delayed_queue;
pub mod priority_queue;
pub mod queue;
pub mod work_queue;

pub use bounded_queue::{BoundedQueue, Offer};
pub use delayed_queue::DelayedQueue;
pub use priority_queue::PriorityQueue;
pub use queue::Queue;
pub use work_queue::{WorkItem, WorkQueue, WorkQueueStats};
