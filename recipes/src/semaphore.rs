//! Counting semaphore with `N` permits. A lease is an ephemeral sequential node under
//! the semaphore directory; a request holds a permit once fewer than `N` requests
//! precede it (in sequence order).
//!
//! Waking without a herd: only the *first* waiter (the request at position `N`) watches
//! the directory's children, so a release wakes one process. Every other waiter watches
//! its immediate predecessor's node; a request that obtains its permit bumps its own
//! node's version (`set` of `held`), which fires its successor's watch, and the
//! successor becomes the new first waiter.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::semaphore::Semaphore;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let pool = Semaphore::new(&zk, "/app/db-connections", 4)?;
//! let lease = pool.acquire(Duration::from_secs(10))?; // one of 4 permits
//! // ... use the resource ...
//! drop(lease);                                        // releases the permit
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - At most `N` leases are held at once (among live sessions), because a lease is
//!   granted only to one of the `N` lowest request nodes.
//! - Requests are granted in FIFO order; a request that times out withdraws its node.
//! - All participants agree on `N`: it is stored in the directory node when first
//!   created, and [`Semaphore::new`] with a different `N` fails with `InvalidArgument`.
//!
//! # Non-guarantees
//! - A lease is tied to its session: if the session expires the node goes and the permit
//!   is handed to someone else while this process may still believe it holds it (check
//!   [`Lease::is_held`] or watch [`ZooKeeper::session_events`]). No revocation.

use crate::support::{
    create_if_absent, create_sequential, default_op_timeout, members, op_deadline,
    owned_node_guard, retry, wait_watch, Deadline, OwnedNode,
};
use crate::util::guid;
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::time::Duration;
use zookeeper::{Error, ZooKeeper};

/// Name prefix of lease nodes.
const LEASE: &str = "lease-";
/// Data of a request that is still waiting.
const WAITING: &[u8] = b"waiting";
/// Data of a request that holds its permit.
const HELD: &[u8] = b"held";

/// A distributed counting semaphore (see the [module docs](self)). Cheap to clone;
/// usable from any thread.
#[derive(Debug, Clone)]
pub struct Semaphore {
    zk: ZooKeeper,
    dir: String,
    permits: u32,
}

impl Semaphore {
    /// The semaphore in `dir` with `permits` permits. The directory is created (holding
    /// `permits` as decimal text) if missing; if it exists with another permit count,
    /// this fails with `InvalidArgument`.
    pub fn new(zk: &ZooKeeper, dir: &str, permits: u32) -> Result<Semaphore> {
        if permits == 0 {
            return Err(RecipeError::InvalidArgument(
                "a semaphore needs at least one permit",
            ));
        }
        let deadline = op_deadline(zk);
        let text = permits.to_string();
        create_if_absent(zk, dir, text.as_bytes(), &NodeOptions::default(), deadline)?;
        loop {
            let (data, stat) = retry(zk, deadline, || zk.get(dir))?;
            if data.is_empty() {
                // Created by someone else without a count (e.g. as a parent): claim it.
                match retry(zk, deadline, || {
                    zk.set(dir, text.as_bytes(), Some(stat.version))
                }) {
                    Ok(_) | Err(RecipeError::ZooKeeper(Error::BadVersion)) => continue,
                    Err(error) => return Err(error),
                }
            }
            if data != text.as_bytes() {
                return Err(RecipeError::InvalidArgument(
                    "the semaphore exists with a different number of permits",
                ));
            }
            break;
        }
        Ok(Semaphore {
            zk: zk.clone(),
            dir: dir.to_string(),
            permits,
        })
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Number of lease requests (held and waiting) right now.
    pub fn requests(&self) -> Result<usize> {
        let children = retry(&self.zk, op_deadline(&self.zk), || {
            self.zk.get_children(&self.dir)
        })?;
        Ok(members(children, &[LEASE]).len())
    }

    /// Acquires a permit, waiting up to `timeout`. On timeout the request is withdrawn.
    pub fn acquire(&self, timeout: Duration) -> Result<Lease> {
        let deadline = Deadline::after(timeout);
        let step_deadline = Deadline::after(timeout.max(default_op_timeout(&self.zk)));
        let tag = format!("{LEASE}{}-", guid());
        let name = create_sequential(
            &self.zk,
            &self.dir,
            &tag,
            WAITING,
            &NodeOptions::default(),
            step_deadline,
        )?;
        let lease = Lease {
            node: OwnedNode::new(&self.zk, &self.dir, name),
        };
        // On error `lease` is dropped, which withdraws the request.
        self.wait_granted(&lease, deadline, step_deadline)?;
        // Tell a successor that watches this node that it may now be the first waiter.
        retry(&self.zk, step_deadline, || {
            self.zk.set(lease.node.path(), HELD, None).map(drop)
        })?;
        Ok(lease)
    }

    /// A permit if one is free now, else `None`.
    pub fn try_acquire(&self) -> Result<Option<Lease>> {
        match self.acquire(Duration::ZERO) {
            Ok(lease) => Ok(Some(lease)),
            Err(RecipeError::Timeout) => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn wait_granted(
        &self,
        lease: &Lease,
        deadline: Deadline,
        read_deadline: Deadline,
    ) -> Result<()> {
        let permits = self.permits as usize;
        loop {
            // The first waiter watches the children; the others do not need a watch
            // on this read (the predecessor watch below covers them).
            let children = retry(&self.zk, read_deadline, || self.zk.get_children(&self.dir))?;
            let list = members(children, &[LEASE]);
            let index = list
                .iter()
                .position(|m| m.name == lease.node())
                .ok_or(RecipeError::Lost("the lease request node is gone"))?;
            if index < permits {
                return Ok(());
            }
            deadline.check()?;
            if index == permits {
                // First waiter: wake on any change of the children (a release).
                let (children, watch) =
                    retry(&self.zk, deadline, || self.zk.get_children_watch(&self.dir))?;
                let list = members(children, &[LEASE]);
                match list.iter().position(|m| m.name == lease.node()) {
                    Some(index) if index > permits => continue,
                    Some(index) if index == permits => {
                        wait_watch(&watch, deadline)?;
                    }
                    _ => continue,
                }
            } else {
                // Later waiter: wake when the predecessor goes or obtains its permit.
                let predecessor = format!("{}/{}", self.dir, list[index - 1].name);
                let (stat, watch) =
                    retry(&self.zk, deadline, || self.zk.exists_watch(&predecessor))?;
                match stat {
                    // Still waiting (never `set`): wait for it to change.
                    Some(stat) if stat.version == 0 => {
                        wait_watch(&watch, deadline)?;
                    }
                    _ => continue,
                }
            }
        }
    }
}

/// A held permit; dropping it releases the permit (deletes the lease node).
#[derive(Debug)]
#[must_use = "dropping the lease releases the permit at once"]
pub struct Lease {
    node: OwnedNode,
}

owned_node_guard!(Lease, "lease");
