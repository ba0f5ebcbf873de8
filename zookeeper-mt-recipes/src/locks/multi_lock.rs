//! All-or-nothing locking of several paths (Curator's `InterProcessMultiLock`).
//!
//! A [`MultiLock`] holds a [`Lock`] per path. It acquires them one by one in one global
//! order, the byte order of the paths, whatever order they were given in: two multi-locks
//! over overlapping sets then never wait for each other in a cycle, so they cannot
//! deadlock (each waits only for a lock "above" the ones it holds). If a lock cannot be
//! had within the deadline, or an acquisition fails, the locks taken so far are released
//! again and the call reports it: the caller holds all or none.
//!
//! # Guarantees
//! - While a [`MultiGuard`] is held (and its session lives), its holder holds every one
//!   of the locks, each with [`Lock`]'s guarantees; other multi-locks and plain locks
//!   on those paths exclude it.
//! - No deadlock among multi-locks (and plain single-path locks), by the global order.
//! - A failed or timed-out acquisition leaves no node and no watch behind.
//! - [`MultiGuard::fenced_multi`] writes only while every lock is still held.
//!
//! # Non-guarantees
//! - Not atomic across paths: the locks are taken one after another, so a holder of
//!   some paths may wait (and make others wait) for the rest, until its deadline.
//! - A deadlock is possible with code that holds a plain lock on one of the paths while
//!   acquiring another out of order; use the multi-lock for every multi-path section.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::MultiLock;
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let both = MultiLock::new(&zk, &["/locks/account-2", "/locks/account-1"])?;
//! if let Ok(guard) = both.acquire(Duration::from_secs(5)) {
//!     // ... move money between the two accounts ...
//!     guard.release()?;
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::locks::lock::{Lock, LockGuard, LockLayout, LockLost};
use crate::runtime::block_on;
use crate::{NodeOptions, RecipeError, Result};
use zookeeper_mt::{Op, OpResult, Timeout};

/// Several locks taken together (see the [module docs](self)). `Send + Sync` and cheap
/// to clone (clones are one value).
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// In acquisition order (sorted by path, no duplicates).
    locks: Vec<Lock>,
}

impl MultiLock {
    /// A multi-lock over `paths` (duplicates are taken once). Fails with
    /// `InvalidArgument` for no paths or an invalid path. No request is sent here.
    /// `client`: a plain handle or a managed client, as for [`Lock::new`].
    pub fn new(client: impl Into<Client>, paths: &[&str]) -> Result<MultiLock> {
        let client = client.into();
        let mut sorted: Vec<&str> = paths.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.is_empty() {
            return Err(RecipeError::InvalidArgument("a multi-lock needs a path"));
        }
        let locks = sorted
            .into_iter()
            .map(|path| Lock::new(client.clone(), path))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock { locks })
    }

    /// The node layout of every lock (see [`LockLayout`]).
    pub fn with_layout(mut self, layout: LockLayout) -> MultiLock {
        self.locks = self
            .locks
            .into_iter()
            .map(|l| l.with_layout(layout))
            .collect();
        self
    }

    /// Node options of every lock (see [`Lock::with_node_options`]).
    pub fn with_node_options(mut self, nodes: NodeOptions) -> MultiLock {
        self.locks = self
            .locks
            .into_iter()
            .map(|l| l.with_node_options(nodes.clone()))
            .collect();
        self
    }

    /// The paths, in acquisition order.
    pub fn paths(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::path).collect()
    }

    /// Every lock if all are free now; else none is held and the answer is `None`.
    pub fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        block_on(self.try_acquire_async())
    }

    /// Async [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_async(&self) -> Result<Option<MultiGuard>> {
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.try_acquire_async().await? {
                Some(guard) => guards.push(guard),
                None => return Ok(None),
            }
        }
        Ok(Some(self.guard(guards)))
    }

    /// Every lock within `timeout` (one deadline for all; [`Timeout::Never`]: as long as
    /// it takes); `Err(Timeout)` if not all could be had in time, and then none is held.
    pub fn acquire(&self, timeout: impl Into<Timeout>) -> Result<MultiGuard> {
        block_on(self.acquire_async(timeout))
    }

    /// Async [`acquire`](Self::acquire): no thread waits for it. Dropping the future
    /// releases the locks taken so far and withdraws the pending acquisition (see
    /// [`Lock::acquire_async`]).
    pub async fn acquire_async(&self, timeout: impl Into<Timeout>) -> Result<MultiGuard> {
        let deadline = timeout.into().deadline();
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            let left = Timeout::from(deadline.remaining());
            // On error (or a dropped future) the guards taken so far are dropped:
            // released.
            guards.push(lock.acquire_async(left).await?);
        }
        Ok(self.guard(guards))
    }

    fn guard(&self, guards: Vec<LockGuard>) -> MultiGuard {
        MultiGuard { guards }
    }
}

/// Every lock of a [`MultiLock`], held. Dropping it releases them all (in reverse
/// order); [`release`](Self::release) does the same and reports errors.
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    /// At least one (a multi-lock has a path).
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The lock guards, in acquisition order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the locks is known to be lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// The first known loss among the locks.
    pub fn lost_reason(&self) -> Option<LockLost> {
        self.guards.iter().find_map(LockGuard::lost_reason)
    }

    /// Runs `ops` as one multi that first checks every lock node: applied only while
    /// all locks are held (see [`fenced`](crate::locks::fenced)).
    pub fn fenced_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        if let Some(reason) = self.lost_reason() {
            return Err(RecipeError::Lost(LossReason::Lock(reason)));
        }
        let nodes: Vec<&str> = self.guards.iter().map(LockGuard::node).collect();
        // Every guard's session: a node of an ended session fails the check.
        crate::locks::fenced::fenced_multi(self.guards[0].client(), &nodes, ops)
    }

    /// Releases every lock (in reverse order); the first error is reported after all
    /// were tried.
    pub fn release(self) -> Result<()> {
        block_on(self.release_async())
    }

    /// [`release`](Self::release), async. Dropped part way, the locks not released yet
    /// are released as their guards' drops do.
    pub async fn release_async(mut self) -> Result<()> {
        let mut first = Ok(());
        while let Some(guard) = self.guards.pop() {
            if let Err(error) = guard.release_async().await {
                if first.is_ok() {
                    first = Err(error);
                }
            }
        }
        first
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        while let Some(guard) = self.guards.pop() {
            drop(guard);
        }
    }
}
