//! Locks and their kin: mutual exclusion ([`Lock`], [`ReentrantLock`], [`MultiLock`]),
//! shared and exclusive holders ([`ReadWriteLock`]), bounded holders ([`Semaphore`],
//! [`LeaseSemaphore`]), and writes fenced by a held lock ([`fenced`]).
//!
//! The main types are re-exported here; each sub-module documents its recipe's
//! protocol, layouts and failure handling.

pub mod fenced;
pub mod lease_semaphore;
pub mod lock;
pub mod multi_lock;
pub mod read_write_lock;
pub mod reentrant_lock;
pub mod semaphore;

pub use crate::support::LossSignal;
pub use lease_semaphore::{LeaseGuard, LeaseSemaphore, SemaphoreLayout};
pub use lock::{Lock, LockGuard, LockLayout, LockLost};
pub use multi_lock::{MultiGuard, MultiLock};
pub use read_write_lock::{ReadGuard, ReadWriteLock, WriteGuard};
pub use reentrant_lock::{ReentrantGuard, ReentrantLock};
pub use semaphore::{PermitGuard, Semaphore};
