//! Read-write lock (ZooKeeper recipe). Every request is an ephemeral sequential node
//! under the lock directory, `read-…` or `write-…`; sequence numbers order all requests.
//!
//! - A reader holds the lock once no *write* request precedes it; it watches only the
//!   last writer before it (readers queued behind one writer all wake when it leaves,
//!   which is what they should do: they may all read).
//! - A writer holds the lock once no request at all precedes it; it watches only its
//!   immediate predecessor.
//!
//! Guards are RAII: dropping a [`ReadGuard`] / [`WriteGuard`] releases the lock.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::rwlock::ReadWriteLock;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = ReadWriteLock::new(&zk, "/app/catalog-lock")?;
//! {
//!     let _read = lock.read(Duration::from_secs(10))?;   // shared with other readers
//!     // ... read ...
//! }
//! let write = lock.write(Duration::from_secs(10))?;      // exclusive
//! // ... write ...
//! write.release()?;
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - While a write guard is held (and its session lives) no other read or write guard
//!   on the same directory is granted; read guards may be held concurrently.
//! - FIFO: requests are granted in sequence order (a reader queued behind a writer does
//!   not overtake it, so writers are not starved).
//! - A request that times out withdraws its node, so it blocks nobody afterwards.
//!
//! # Non-guarantees
//! - The lock is tied to the ZooKeeper session: if the session expires, the node goes
//!   and another process may acquire while this process still holds a guard. Use
//!   [`ReadGuard::is_held`] / [`WriteGuard::is_held`] or the session events
//!   ([`ZooKeeper::session_events`]) to detect this; the lock does not revoke.
//! - Not reentrant: a process holding a read guard that asks for a write guard on the
//!   same lock waits for itself (until its timeout).

use crate::support::{
    create_sequential, default_op_timeout, ensure_dir, members, op_deadline, owned_node_guard,
    retry, wait_watch, Deadline, Member, OwnedNode,
};
use crate::util::guid;
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::time::Duration;
use zookeeper::ZooKeeper;

const READ: &str = "read-";
const WRITE: &str = "write-";

/// A distributed read-write lock on a directory (see the [module docs](self)).
/// Cheap to clone; usable from any thread.
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    zk: ZooKeeper,
    dir: String,
}

impl ReadWriteLock {
    /// The lock in `dir` (created if missing).
    pub fn new(zk: &ZooKeeper, dir: &str) -> Result<ReadWriteLock> {
        ensure_dir(zk, dir, &NodeOptions::default(), op_deadline(zk))?;
        Ok(ReadWriteLock {
            zk: zk.clone(),
            dir: dir.to_string(),
        })
    }

    /// The lock directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Acquires a shared (read) lock, waiting up to `timeout` for preceding writers.
    pub fn read(&self, timeout: Duration) -> Result<ReadGuard> {
        self.acquire(READ, timeout).map(|node| ReadGuard { node })
    }

    /// Acquires an exclusive (write) lock, waiting up to `timeout` for every preceding
    /// request.
    pub fn write(&self, timeout: Duration) -> Result<WriteGuard> {
        self.acquire(WRITE, timeout).map(|node| WriteGuard { node })
    }

    /// A read lock if it can be had without waiting, else `None`.
    pub fn try_read(&self) -> Result<Option<ReadGuard>> {
        optional(self.read(Duration::ZERO))
    }

    /// A write lock if it can be had without waiting, else `None`.
    pub fn try_write(&self) -> Result<Option<WriteGuard>> {
        optional(self.write(Duration::ZERO))
    }

    fn acquire(&self, kind: &'static str, timeout: Duration) -> Result<OwnedNode> {
        let deadline = Deadline::after(timeout);
        // Creating the request is not bounded by a zero timeout: `try_*` must try once.
        let create_deadline = Deadline::after(timeout.max(default_op_timeout(&self.zk)));
        let tag = format!("{kind}{}-", guid());
        let name = create_sequential(
            &self.zk,
            &self.dir,
            &tag,
            b"",
            &NodeOptions::default(),
            create_deadline,
        )?;
        let node = OwnedNode::new(&self.zk, &self.dir, name);
        // On error `node` is dropped here, which withdraws the request.
        self.wait_granted(&node, kind, deadline, create_deadline)?;
        Ok(node)
    }

    fn wait_granted(
        &self,
        node: &OwnedNode,
        kind: &str,
        deadline: Deadline,
        read_deadline: Deadline,
    ) -> Result<()> {
        loop {
            let children = retry(&self.zk, read_deadline, || self.zk.get_children(&self.dir))?;
            let list = members(children, &[READ, WRITE]);
            let index = list
                .iter()
                .position(|m| m.name == node.name())
                .ok_or(RecipeError::Lost("the lock request node is gone"))?;
            let blocker: Option<&Member> = if kind == READ {
                list[..index].iter().rev().find(|m| m.is(WRITE))
            } else {
                index.checked_sub(1).map(|i| &list[i])
            };
            let Some(blocker) = blocker else {
                return Ok(());
            };
            deadline.check()?;
            let path = format!("{}/{}", self.dir, blocker.name);
            let (stat, watch) = retry(&self.zk, deadline, || self.zk.exists_watch(&path))?;
            if stat.is_some() {
                wait_watch(&watch, deadline)?;
            }
        }
    }
}

fn optional<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(RecipeError::Timeout) => Ok(None),
        Err(error) => Err(error),
    }
}

/// A held read lock; dropping it releases the lock.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct ReadGuard {
    node: OwnedNode,
}

/// A held write lock; dropping it releases the lock.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct WriteGuard {
    node: OwnedNode,
}

owned_node_guard!(ReadGuard, "lock");
owned_node_guard!(WriteGuard, "lock");
