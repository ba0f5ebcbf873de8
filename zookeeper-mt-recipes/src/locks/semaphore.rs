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
//! use zookeeper_mt_recipes::locks::semaphore::Semaphore;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let pool = Semaphore::new(&zk, "/app/db-connections", 4)?;
//! let lease = pool.acquire(Duration::from_secs(10))?; // one of 4 permits
//! // ... use the resource ...
//! drop(lease);                                        // releases the permit
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - At most `N` leases are held at once (among live sessions), because a lease is
//!   granted only to one of the `N` lowest request nodes; also across the end of the
//!   sequence counter (below).
//! - Requests are granted in FIFO order; a request that times out withdraws its node and
//!   leaves no watch registered.
//! - All participants agree on `N`: it is stored in the directory node when first
//!   created (by the first acquisition, or by [`Semaphore::new`] finding it), and a
//!   [`Semaphore::new`] or first acquisition with a different `N` fails with
//!   `InvalidArgument`.
//! - With [`NodeOptions::acl`] ([`Semaphore::with_node_options`]) the directory and
//!   lease nodes get that ACL: a client without the rights cannot delete a lease.
//!
//! # The end of the sequence counter
//! Request numbers come from the directory's 32-bit child counter, which a 3.8 server
//! does not wrap cleanly (past 2147483647 it repeats numbers or goes negative, and
//! counting "the `N` lowest" by them could admit more than `N`). A request numbered at or
//! past [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or
//! [`NodeOptions::sequence_limit`]) is deleted at once and ignored by everyone; the
//! requester restarts the counter by deleting the directory, which the server allows only
//! once it is empty (so no lease can be held meanwhile), and creates it again holding
//! `N`. Until the directory has drained, the request waits within its timeout, then fails
//! with `Timeout` as with no free permit (`try_acquire`: `None`).
//!
//! # Non-guarantees
//! - A lease is tied to its session: if the session expires the node goes and the permit
//!   is handed to someone else. [`PermitGuard::is_held`] (no request) and
//!   [`PermitGuard::lost`] report the loss no later than the earliest instant the server
//!   can expire the session (as its answers tell; see
//!   [`Lock`](crate::locks::lock#learning-that-the-lock-is-lost)), and at once on a
//!   disconnection. A holder paused past that report can still act late: no revocation.
//! - With container directories, the permit count is checked when a [`Semaphore`] value
//!   first meets the directory; a directory the server removed while idle is created
//!   again by the next acquisition with its own `N`.

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::nodes::guid;
use crate::runtime::block_on;
use crate::support::liveness::Holding;
use crate::support::{
    await_watch_async, check_base_path, create_member_async, default_op_timeout, op_deadline,
    ordered_members, owned_node_guard, retry_async, watch_node, withdraw_watch, Deadline,
    DeadlineExt, OwnedNode, Patience, SeqDir,
};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{Error, Timeout};

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
    client: Client,
    dir: String,
    permits: u32,
    /// `permits` as the directory holds it.
    count: String,
    nodes: NodeOptions,
    /// Whether this value (and its clones) has made sure the directory holds `count`.
    checked: Arc<AtomicBool>,
}

impl Semaphore {
    /// The semaphore at `path` with `permits` permits. If the directory exists with
    /// another permit count, this fails with `InvalidArgument`. A missing directory is
    /// created (holding `permits` as decimal text, with the node options then set:
    /// [`with_node_options`](Self::with_node_options)) by the first acquisition.
    ///
    /// `client`: a plain handle or a managed client. On a managed client each
    /// acquisition runs on the session current when it starts, and its permit belongs to
    /// that session.
    pub fn new(client: impl Into<Client>, path: &str, permits: u32) -> Result<Semaphore> {
        let client = client.into();
        if permits == 0 {
            return Err(RecipeError::InvalidArgument(
                "a semaphore needs at least one permit",
            ));
        }
        check_base_path(path)?;
        let semaphore = Semaphore {
            client,
            dir: path.to_string(),
            permits,
            count: permits.to_string(),
            nodes: NodeOptions::default(),
            checked: Arc::new(AtomicBool::new(false)),
        };
        let deadline = op_deadline(&semaphore.client.session().zk);
        semaphore.check_count(false, deadline)?;
        Ok(semaphore)
    }

    /// The ACL, directory kind and sequence limit of the nodes this semaphore creates
    /// (default: open ACL, persistent directory).
    pub fn with_node_options(mut self, nodes: NodeOptions) -> Semaphore {
        self.nodes = nodes;
        self
    }

    /// Makes sure the directory holds our permit count (`InvalidArgument` if it holds
    /// another): a directory created by someone else without a count (e.g. as a parent)
    /// is claimed; a missing one is created if `create`, else left to later.
    fn check_count(&self, create: bool, deadline: Deadline) -> Result<()> {
        block_on(self.check_count_async(create, deadline))
    }

    async fn check_count_async(&self, create: bool, deadline: Deadline) -> Result<()> {
        let zk = &self.client.session().zk;
        let (dir, text) = (self.dir.as_str(), self.count.as_bytes());
        let patience = Patience::from(deadline);
        loop {
            let (data, stat) = match retry_async(zk, patience, || zk.get_async(dir)).await {
                Err(RecipeError::ZooKeeper(Error::NoNode)) if !create => return Ok(()),
                Err(RecipeError::ZooKeeper(Error::NoNode)) => {
                    self.seq_dir().create_async(zk, patience).await?;
                    continue;
                }
                other => other?,
            };
            if data.is_empty() {
                let set = retry_async(zk, patience, || zk.set_async(dir, text, Some(stat.version)));
                match set.await {
                    Ok(_) | Err(RecipeError::ZooKeeper(Error::BadVersion)) => {
                        // Read again after a sync: if the reply was lost and the client
                        // moved to a member that lags, it would not show our write yet.
                        retry_async(zk, patience, || zk.sync_async(dir)).await?;
                        continue;
                    }
                    Err(error) => return Err(error),
                }
            }
            if data != text {
                return Err(RecipeError::InvalidArgument(
                    "the semaphore exists with a different number of permits",
                ));
            }
            self.checked.store(true, Ordering::Relaxed);
            return Ok(());
        }
    }

    /// The directory, holding the permit count.
    fn seq_dir(&self) -> SeqDir<'_> {
        SeqDir {
            path: &self.dir,
            data: self.count.as_bytes(),
            nodes: &self.nodes,
        }
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Number of lease requests (held and waiting) right now.
    pub fn requests(&self) -> Result<usize> {
        block_on(self.requests_async())
    }

    /// [`requests`](Self::requests), async.
    pub async fn requests_async(&self) -> Result<usize> {
        let zk = &self.client.session().zk;
        let listed = retry_async(zk, op_deadline(zk).into(), || {
            zk.get_children_async(&self.dir)
        })
        .await;
        match listed {
            Ok(children) => Ok(ordered_members(children, &[LEASE], self.nodes.limit()).len()),
            Err(RecipeError::ZooKeeper(Error::NoNode)) => Ok(0),
            Err(error) => Err(error),
        }
    }

    /// Acquires a permit, waiting up to `timeout`. On timeout the request is withdrawn.
    pub fn acquire(&self, timeout: impl Into<Timeout>) -> Result<PermitGuard> {
        block_on(self.acquire_async(timeout))
    }

    /// Async [`acquire`](Self::acquire): no thread waits for it; dropping it withdraws
    /// the request (its node is deleted, its watch released).
    pub async fn acquire_async(&self, timeout: impl Into<Timeout>) -> Result<PermitGuard> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = Deadline::after(timeout);
        let zk = &self.client.session().zk;
        let step_deadline = Deadline::after(timeout.max(default_op_timeout(zk)));
        if !self.checked.load(Ordering::Relaxed) {
            self.check_count_async(true, step_deadline).await?;
        }
        let dir = self.seq_dir();
        let tag = format!("{LEASE}{}-", guid());
        let created = create_member_async(zk, &dir, &tag, WAITING, step_deadline.into(), deadline)
            .await
            .map_err(|error| match error {
                // At the counter's end the directory is busy: as with no free permit.
                RecipeError::SequenceExhausted { .. } => RecipeError::Timeout,
                other => other,
            })?;
        let lease = PermitGuard {
            node: OwnedNode::new(zk, &self.dir, created),
            holding: None,
        };
        // A dropped future drops `lease`, which withdraws the request in the background.
        let granted = match self.wait_granted(&lease, deadline, step_deadline).await {
            // Tell a successor that watches this node that it may now be the first waiter.
            Ok(()) => retry_async(zk, step_deadline.into(), || {
                zk.set_async(lease.node.path(), HELD, None)
            })
            .await
            .map(drop),
            Err(error) => Err(error),
        };
        match granted {
            Ok(()) => Ok(PermitGuard {
                node: lease.node.hand_out(),
                holding: Some(Holding::new(zk)),
            }),
            Err(error) => {
                lease.node.withdraw().await;
                Err(error)
            }
        }
    }

    /// A permit if one is free now, else `None`.
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        block_on(self.try_acquire_async())
    }

    /// Async [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_async(&self) -> Result<Option<PermitGuard>> {
        match self.acquire_async(Duration::ZERO).await {
            Ok(lease) => Ok(Some(lease)),
            Err(RecipeError::Timeout) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn wait_granted(
        &self,
        lease: &PermitGuard,
        deadline: Deadline,
        read_deadline: Deadline,
    ) -> Result<()> {
        let zk = lease.node.client();
        let permits = self.permits as usize;
        let limit = self.nodes.limit();
        let waiting = AtomicU64::new(0);
        loop {
            // The first waiter watches the children; the others do not need a watch
            // on this read (the predecessor watch below covers them).
            let listing = retry_async(zk, read_deadline.into(), || {
                zk.get_children_async(&self.dir)
            });
            let children = match listing.await {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => Vec::new(),
                other => other?,
            };
            let list = ordered_members(children, &[LEASE], limit);
            let index = list
                .iter()
                .position(|m| m.name == lease.node())
                .ok_or(RecipeError::Lost(LossReason::NodeGone))?;
            if index < permits {
                return Ok(());
            }
            deadline.check()?;
            if index == permits {
                // First waiter: wake on any change of the children (a release).
                let (children, mut watch) = retry_async(zk, deadline.into(), || {
                    zk.get_children_watch_async(&self.dir)
                })
                .await?;
                let list = ordered_members(children, &[LEASE], limit);
                if list.iter().position(|m| m.name == lease.node()) != Some(permits) {
                    // Moved on meanwhile: look again, without the watch.
                    withdraw_watch(zk, &watch);
                    continue;
                }
                if await_watch_async(zk, &mut watch, deadline, &waiting)
                    .await?
                    .is_none()
                {
                    return Err(RecipeError::Timeout);
                }
            } else {
                // Later waiter: wake when the predecessor goes or obtains its permit.
                let predecessor = format!("{}/{}", self.dir, list[index - 1].name);
                let Some((_, stat, mut watch)) =
                    watch_node(zk, &predecessor, Patience::from(deadline)).await?
                else {
                    continue;
                };
                if stat.version != 0 {
                    // It holds its permit already: look again, without the watch.
                    withdraw_watch(zk, &watch);
                    continue;
                }
                if await_watch_async(zk, &mut watch, deadline, &waiting)
                    .await?
                    .is_none()
                {
                    return Err(RecipeError::Timeout);
                }
            }
        }
    }
}

/// A held permit; dropping it releases the permit (deletes the lease node).
#[derive(Debug)]
#[must_use = "dropping the guard releases the permit at once"]
pub struct PermitGuard {
    node: OwnedNode,
    /// How it learns of its loss (from the grant on).
    holding: Option<Holding>,
}

owned_node_guard!(PermitGuard, "lease");
