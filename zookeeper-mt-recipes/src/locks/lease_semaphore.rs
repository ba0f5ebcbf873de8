//! A semaphore with leases in the layouts of Curator's `InterProcessSemaphoreV2` and
//! kazoo's `Semaphore`, so Rust, Java and Python processes share one pool of leases.
//!
//! Both libraries guard the lease pool with a lock: the acquirer takes the lock, counts
//! the leases and, while the pool is full, waits (holding the lock) for a lease to go;
//! then it adds its lease and releases the lock. Since only the lock holder adds a lease,
//! the count cannot be exceeded by concurrent acquirers.
//!
//! | layout | lock | leases |
//! |---|---|---|
//! | [`SemaphoreLayout::Curator`] | `<path>/locks`, an `InterProcessMutex` | `<path>/leases/_c_<uuid>-lease-<seq>`; the new lease is created first, kept if the leases number at most `max` |
//! | [`SemaphoreLayout::Kazoo`] | `<path>-__lock__`, a kazoo `Lock` | `<path>/<uuid hex>`, created if fewer than `max` exist; `<path>` holds `max` as text |
//!
//! # Guarantees
//! - At most `max` leases held at once among all participants of one layout on one path
//!   (live sessions), ours and Curator's or kazoo's.
//! - [`LeaseSemaphore::acquire`] returns `n` leases or none: leases taken on the way are
//!   returned when the deadline passes or a step fails (as Curator's `acquire(n)`).
//! - A timed-out wait leaves no node and no watch behind; the guard lock is released.
//! - Each lease is a node: release one with [`LeaseGuard::release`] or by dropping it.
//!
//! # Non-guarantees
//! - A lease is tied to its session: if it expires the node goes and the lease is handed
//!   on. [`LeaseGuard::is_held`] (no request) and [`LeaseGuard::lost`] report it no later
//!   than the earliest instant the server can expire the session. No revocation.
//! - Not fair between acquirers beyond the guard lock's order, and an `acquire(n)` that
//!   holds some of its leases while waiting for more keeps them from others meanwhile.
//! - The kazoo layout's `max` is checked against the path's data once per value
//!   (`InvalidArgument` if it differs), as kazoo does; Curator stores no `max`.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::lease_semaphore::{LeaseSemaphore, SemaphoreLayout};
//! use zookeeper_mt_recipes::OptionalExtension;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let pool = LeaseSemaphore::new(&zk, "/app/pool", 5, SemaphoreLayout::Curator)?;
//! if let Some(leases) = pool.acquire(2, Duration::from_secs(10)).optional()? {
//!     // ... use two of the five ...
//!     drop(leases);
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::locks::lock::{uuid_text, Lock, LockLayout};
use crate::nodes::guid;
use crate::runtime::block_on;
use crate::support::liveness::Holding;
use crate::support::{
    await_watch_async, check_base_path, create_dir_async, create_member_async, delete_dropped,
    delete_eventually_async, op_deadline, retry_async, Deadline, DeleteOnDrop, Patience, SeqDir,
};
use crate::{NodeOptions, RecipeError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Error, Timeout, ZooKeeper};

/// Whose lease layout a [`LeaseSemaphore`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SemaphoreLayout {
    /// Curator 5.x `InterProcessSemaphoreV2` (`locks/` and `leases/` children).
    Curator,
    /// kazoo 2.x `Semaphore` (a `<path>-__lock__` lock, lease children of `<path>`).
    Kazoo,
}

/// A counting semaphore handing out leases (see the [module docs](self)). `Send + Sync` and
/// cheap to clone (clones are one value).
#[derive(Debug, Clone)]
pub struct LeaseSemaphore {
    client: Client,
    path: String,
    max: u32,
    layout: SemaphoreLayout,
    guard: Lock,
    leases_dir: String,
    nodes: NodeOptions,
    checked: Arc<AtomicBool>,
    waiting: Arc<AtomicU64>,
}

impl LeaseSemaphore {
    /// The semaphore at `path` with at most `max` leases. No request is sent here.
    pub fn new(
        client: impl Into<Client>,
        path: &str,
        max: u32,
        layout: SemaphoreLayout,
    ) -> Result<LeaseSemaphore> {
        check_base_path(path)?;
        let client = client.into();
        if max == 0 {
            return Err(RecipeError::InvalidArgument(
                "a semaphore needs at least one lease",
            ));
        }
        let (guard, leases_dir) = match layout {
            SemaphoreLayout::Curator => (
                Lock::new(&client, &format!("{path}/locks"))?.with_layout(LockLayout::Curator),
                format!("{path}/leases"),
            ),
            SemaphoreLayout::Kazoo => (
                Lock::new(&client, &format!("{path}-__lock__"))?.with_layout(LockLayout::Kazoo),
                path.to_string(),
            ),
        };
        Ok(LeaseSemaphore {
            client,
            path: path.to_string(),
            max,
            layout,
            guard,
            leases_dir,
            nodes: NodeOptions::default(),
            checked: Arc::default(),
            waiting: Arc::default(),
        })
    }

    /// The maximum number of leases.
    pub fn max_leases(&self) -> u32 {
        self.max
    }

    /// The number of leases held right now (all participants).
    pub fn held(&self) -> Result<usize> {
        block_on(self.held_async())
    }

    /// [`held`](Self::held), async.
    pub async fn held_async(&self) -> Result<usize> {
        let zk = &self.client.session().zk;
        let listed = retry_async(zk, op_deadline(zk).into(), || {
            zk.get_children_async(&self.leases_dir)
        })
        .await;
        match listed {
            Ok(children) => Ok(children.len()),
            Err(RecipeError::ZooKeeper(Error::NoNode)) => Ok(0),
            Err(error) => Err(error),
        }
    }

    /// `n` leases within `timeout` (one deadline for all; [`Timeout::Never`]: as long as
    /// it takes), or `Err(Timeout)` and none held.
    pub fn acquire(&self, n: u32, timeout: impl Into<Timeout>) -> Result<Vec<LeaseGuard>> {
        block_on(self.acquire_async(n, timeout))
    }

    /// [`acquire`](Self::acquire), async. Dropped before it returns, it withdraws what it
    /// started: the leases taken so far are released, a lease request and the guard lock
    /// are withdrawn.
    pub async fn acquire_async(
        &self,
        n: u32,
        timeout: impl Into<Timeout>,
    ) -> Result<Vec<LeaseGuard>> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        if n == 0 || n > self.max {
            return Err(RecipeError::InvalidArgument(
                "asked for no leases or more than the maximum",
            ));
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut leases = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let left = deadline.map_or(Duration::MAX, |at| {
                at.saturating_duration_since(Instant::now())
            });
            let outcome = match self.acquire_one(left).await {
                Ok(Some(lease)) => {
                    leases.push(lease);
                    continue;
                }
                Ok(None) => Err(RecipeError::Timeout),
                Err(error) => Err(error),
            };
            // All or nothing: the leases taken so far go back (awaited).
            for lease in leases {
                if let Err(error) = lease.release_async().await {
                    log::debug!("recipes: lease semaphore: returning a lease: {error}");
                }
            }
            return outcome;
        }
        for lease in &mut leases {
            lease.handed_out = true;
            lease.holding = Some(Holding::new(&lease.zk));
        }
        Ok(leases)
    }

    /// One lease within `timeout`.
    async fn acquire_one(&self, timeout: Duration) -> Result<Option<LeaseGuard>> {
        let deadline = Deadline::after(timeout);
        let Some(lock) = self.guard.acquire_within_async(timeout).await? else {
            return Ok(None);
        };
        let result = match self.layout {
            SemaphoreLayout::Curator => self.curator_lease(deadline).await,
            SemaphoreLayout::Kazoo => self.kazoo_lease(deadline).await,
        };
        // The guard lock goes in any case (also on error or timeout).
        if let Err(error) = lock.release_async().await {
            log::debug!("recipes: lease semaphore: releasing the guard lock: {error}");
        }
        result
    }

    /// Curator: create the lease, keep it once the leases number at most `max`.
    async fn curator_lease(&self, deadline: Deadline) -> Result<Option<LeaseGuard>> {
        let zk = &self.client.session().zk;
        let patience = Patience::from(op_deadline(zk));
        let dir = SeqDir {
            path: &self.leases_dir,
            data: b"",
            nodes: &self.nodes,
        };
        let tag = format!("_c_{}-lease-", uuid_text());
        let created = create_member_async(zk, &dir, &tag, b"", patience, deadline).await?;
        let lease = LeaseGuard {
            zk: zk.clone(),
            path: format!("{}/{}", self.leases_dir, created.name),
            handed_out: false,
            holding: None,
        };
        loop {
            let (children, mut watch) = retry_async(zk, op_deadline(zk).into(), || {
                zk.get_children_watch_async(&self.leases_dir)
            })
            .await?;
            if !children.contains(&created.name) {
                crate::support::withdraw_watch(zk, &watch);
                return Err(RecipeError::Lost(LossReason::NodeGone));
            }
            if children.len() <= self.max as usize {
                crate::support::withdraw_watch(zk, &watch);
                return Ok(Some(lease));
            }
            let fired = await_watch_async(zk, &mut watch, deadline, &self.waiting).await?;
            if fired.is_none() {
                // Withdrawn (awaited: nothing is left when the call returns).
                if let Err(error) = lease.release_async().await {
                    log::debug!("recipes: lease semaphore: withdrawing a lease: {error}");
                }
                return Ok(None);
            }
        }
    }

    /// kazoo: check `max` in the path's data; create a lease once fewer than `max` exist.
    async fn kazoo_lease(&self, deadline: Deadline) -> Result<Option<LeaseGuard>> {
        let zk = &self.client.session().zk;
        let step: Patience = op_deadline(zk).into();
        if !self.checked.load(Ordering::Relaxed) {
            let open = NodeOptions::default();
            retry_async(zk, step, || create_dir_async(zk, &self.path, &open)).await?;
            let text = self.max.to_string();
            let (data, stat) = retry_async(zk, step, || zk.get_async(&self.path)).await?;
            if data.is_empty() {
                let set = retry_async(zk, step, || {
                    zk.set_async(&self.path, text.as_bytes(), Some(stat.version))
                })
                .await;
                match set {
                    Ok(_) | Err(RecipeError::ZooKeeper(Error::BadVersion)) => {}
                    Err(error) => return Err(error),
                }
                retry_async(zk, step, || zk.sync_async(&self.path)).await?;
                let (data, _) = retry_async(zk, step, || zk.get_async(&self.path)).await?;
                if data != text.as_bytes() {
                    return Err(RecipeError::InvalidArgument("inconsistent max leases"));
                }
            } else if data != text.as_bytes() {
                return Err(RecipeError::InvalidArgument("inconsistent max leases"));
            }
            self.checked.store(true, Ordering::Relaxed);
        }
        loop {
            let (children, mut watch) =
                retry_async(zk, step, || zk.get_children_watch_async(&self.leases_dir)).await?;
            if children.len() < self.max as usize {
                crate::support::withdraw_watch(zk, &watch);
                let path = format!("{}/{}", self.leases_dir, guid());
                // From the first send the node may exist: a dropped or failed create
                // leaves none behind.
                let mut pending = DeleteOnDrop::armed(zk, &path);
                // A unique name: after a lost reply, NodeExists is our own create.
                let created = retry_async(zk, step, || {
                    zk.create_async(&path, b"", CreateMode::Ephemeral)
                })
                .await;
                match created {
                    Ok(_) | Err(RecipeError::ZooKeeper(Error::NodeExists)) => pending.disarm(),
                    Err(error) => return Err(error),
                }
                drop(pending);
                return Ok(Some(LeaseGuard {
                    zk: zk.clone(),
                    path,
                    handed_out: false,
                    holding: None,
                }));
            }
            if await_watch_async(zk, &mut watch, deadline, &self.waiting)
                .await?
                .is_none()
            {
                return Ok(None);
            }
        }
    }
}

/// One lease; dropping it releases the lease (deletes its node).
#[derive(Debug)]
#[must_use = "dropping the lease releases it at once"]
pub struct LeaseGuard {
    zk: ZooKeeper,
    /// Empty once released.
    path: String,
    /// Handed to the caller. A drop never waits: the delete is sent and settled in the
    /// background.
    handed_out: bool,
    /// How it learns of its loss (from the hand-out on).
    holding: Option<Holding>,
}

impl LeaseGuard {
    /// The lease node's path.
    pub fn node(&self) -> &str {
        &self.path
    }

    /// Whether the lease is still held as far as the client knows: no request,
    /// answered at once (see [`lost_reason`](Self::lost_reason)). `Ok(false)` from the
    /// instant the session may have expired.
    /// A closed handle is an error (`Closed`), as for every call on it.
    pub fn is_held(&self) -> Result<bool> {
        crate::support::held_answer(self.lost_reason())
    }

    /// [`is_held`](Self::is_held), async (answered at once as well).
    pub async fn is_held_async(&self) -> Result<bool> {
        self.is_held()
    }

    /// Whether the lease may be lost. Cheap: no request.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease may be lost, if it may: the session expired or closed, the
    /// connection dropped, or the session's earliest possible expiry has come (as the
    /// server's answers tell), whichever is first: never after another client can take
    /// the lease. A deletion of the node by someone else is not seen.
    pub fn lost_reason(&self) -> Option<crate::locks::LockLost> {
        self.holding.as_ref().and_then(|h| h.lost_reason())
    }

    /// The loss as a [`LossSignal`](crate::LossSignal): `Some(reason)` at the instant the
    /// loss is known (at once if it is already), `None` after a release. Each call makes
    /// an independent signal.
    pub fn lost(&self) -> crate::LossSignal<crate::locks::LockLost> {
        match &self.holding {
            Some(holding) => holding.lost(),
            None => crate::LossSignal::ended(),
        }
    }

    /// Releases the lease, reporting a failure to delete the node (if the server could
    /// not be reached, the delete goes on in the background).
    pub fn release(self) -> Result<()> {
        block_on(self.release_async())
    }

    /// [`release`](Self::release), async. Dropped before the delete was answered, it
    /// hands the delete to the background: the lease goes either way.
    pub async fn release_async(mut self) -> Result<()> {
        if let Some(holding) = &self.holding {
            holding.release();
        }
        let path = std::mem::take(&mut self.path);
        delete_eventually_async(&self.zk, &path, op_deadline(&self.zk).into()).await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        delete_dropped(&self.zk, &mut self.path, self.handed_out);
    }
}
