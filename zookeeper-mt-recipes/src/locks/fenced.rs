//! Fenced writes: writes that the server applies only while the writer still holds its
//! lock.
//!
//! A lock holder can lose its lock without knowing it yet: its session expired during a
//! pause (GC, SIGSTOP, a slow disk), or someone deleted its node. Another process then
//! holds the lock, and a write the former holder sends afterwards would break mutual
//! exclusion on the data the lock protects. Curator offers no protection against this
//! (CURATOR-689); a fencing token protects only stores that check it.
//!
//! For data in ZooKeeper itself the check can be exact: a guard's
//! [`fenced_multi`](crate::locks::lock::LockGuard::fenced_multi) sends the caller's operations as
//! one `multi` whose first operation is a `Check` of the guard's own lock node at
//! version 0. The server applies the operations only if that node still exists, which
//! is exactly "this guard still holds the lock":
//! - the node is ephemeral and owned by the guard's session: once the session has
//!   expired, the node is gone (and the multi, sent on the dead session, fails anyway);
//! - a node deleted by someone else is gone too; its path, which carries a random guid,
//!   is never created again;
//! - while the node exists no other contender can hold the lock (contenders are ordered
//!   behind it), and the recipes never change a lock node's data, so version 0 also
//!   catches a node that was replaced by a foreign writer.
//!
//! All of this is decided by the server in one transaction, so no pause between the
//! check and the write can let a stale holder through.
//!
//! # Errors
//! - [`RecipeError::Lost`] when the check fails (the lock is gone) or the guard already
//!   knows it lost the lock (then nothing is sent);
//! - the caller's operation that failed otherwise, as
//!   [`Error::MultiFailed`] with its index among the
//!   caller's operations (the check is not counted);
//! - a connection loss as is: the multi may or may not have been applied (it is not
//!   retried, since it need not be idempotent).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::Lock;
//! use zookeeper_mt::{Op, Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = Lock::new(&zk, "/locks/config")?;
//! let guard = lock.acquire(Timeout::Never)?;
//! // Applied only if this guard still holds the lock when the server runs it.
//! guard.fenced_multi(&[Op::set_data("/config/current", b"v2", -1)])?;
//! guard.release()?;
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::error::LossReason;
use crate::{RecipeError, Result};
use zookeeper_mt::{Error, Op, OpResult, ZooKeeper};

/// The version of a lock node that nobody wrote to.
const LOCK_NODE_VERSION: i32 = 0;

/// Runs `ops` on `zk` as one multi that first checks every node of `held` (lock nodes
/// of the caller) at version 0. Returns the results of `ops` alone.
pub(crate) fn fenced_multi(zk: &ZooKeeper, held: &[&str], ops: &[Op]) -> Result<Vec<OpResult>> {
    if ops.is_empty() {
        return Err(RecipeError::InvalidArgument(
            "a fenced multi needs at least one operation",
        ));
    }
    let mut all: Vec<Op> = held
        .iter()
        .map(|node| Op::check(node, LOCK_NODE_VERSION))
        .collect();
    all.extend_from_slice(ops);
    match zk.multi(&all) {
        Ok(mut results) => Ok(results.split_off(held.len())),
        Err(Error::MultiFailed { index, .. }) if index < held.len() => {
            Err(RecipeError::Lost(LossReason::NodeGone))
        }
        Err(Error::MultiFailed { index, error }) => {
            Err(RecipeError::ZooKeeper(Error::MultiFailed {
                index: index - held.len(),
                error,
            }))
        }
        Err(error) => Err(error.into()),
    }
}
