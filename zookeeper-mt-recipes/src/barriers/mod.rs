//! Barriers: a single barrier that blocks processes until it is removed, and a double
//! barrier that lets `N` participants start and finish a computation together (both
//! from the ZooKeeper recipes page).
//!
//! # [`Barrier`]
//! A barrier is one znode: while it exists, [`Barrier::wait`] blocks; when someone
//! [removes](Barrier::remove) it, every waiter is released (each waiter holds one
//! `exists` watch on the node, so one deletion wakes exactly the waiters).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::barriers::Barrier;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let barrier = Barrier::new(&zk, "/app/start-gate");
//! barrier.set()?;                        // coordinator closes the gate
//! // ... workers call barrier.wait(timeout) and block ...
//! barrier.remove()?;                     // coordinator opens it: every waiter returns
//! barrier.wait(Duration::from_secs(1))?; // returns at once now
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! Guarantees: a waiter returns `Ok` only after it has seen the node absent; a removal
//! is never missed (the watch is set by the same call that checks the node); a wait
//! that times out takes its watch off again, so repeated timed-out waits leave nothing
//! registered. Non-guarantees: a set/remove/set sequence quicker than a waiter's
//! re-check may be seen only as "still set" (the waiter re-reads after every event and
//! keeps waiting). The barrier node is persistent: it survives the session that set it.
//!
//! # [`DoubleBarrier`]
//! `N` participants [`enter`](DoubleBarrier::enter): each creates an ephemeral
//! sequential node `p-<guid>-<seq>` under the barrier directory and returns once it is
//! released by a node `ready-<X>` with `X` at least its own number. A participant that
//! sees `N` participants not yet released (numbered above the highest `ready-<X>`)
//! creates `ready-<X>` with `X` the highest of them. They then
//! [`leave`](DoubleBarrier::leave): each deletes its node and returns once every
//! participant of its round (numbered up to its `X`) is gone. The lowest participant
//! waits on the highest, the others on the lowest, so a departure wakes at most the
//! processes that must re-check; whoever finds the round empty deletes its `ready-<X>`.
//! Waiting in `enter` uses a child watch on the directory (each arrival wakes the few
//! participants waiting).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::barriers::DoubleBarrier;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let barrier = DoubleBarrier::new(&zk, "/app/phase-1", 3)?;
//! barrier.enter(Duration::from_secs(30))?; // all 3 have arrived
//! // ... compute ...
//! barrier.leave(Duration::from_secs(30))?; // all 3 have finished
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! Guarantees: `enter` returns `Ok` only after at least `N` participants not released
//! before have entered; `leave` returns `Ok` only after every participant of its round
//! has left (or lost its session: participant nodes are ephemeral, so a crashed
//! participant counts as left). The directory can be reused round after round: a
//! `ready-<X>` node releases only participants numbered up to `X`, and numbers only
//! grow, so a round whose participants all died (its last one never deleting
//! `ready-<X>`) lets no later participant through; such leftovers are deleted by the
//! next participants. Timed-out waits take their watches off again.
//!
//! The end of the sequence counter: participants numbered at or past
//! [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or negative) are not counted and not
//! waited for. A participant whose own node gets such a number removes it, waits
//! (within its `enter` timeout) for the directory to hold nothing but leftover `ready`
//! nodes (other rounds finish, or their participants time out and withdraw), deletes
//! those and restarts the counter by deleting the empty directory, then enters again.
//! If the directory does not empty in time, `enter` fails with
//! [`SequenceExhausted`](crate::RecipeError::SequenceExhausted), leaving nothing behind.
//!
//! Non-guarantees: more than `N` participants may pass one round (all that arrived
//! before its `ready-<X>`), and a participant arriving after it belongs to the next
//! round. A participant whose session expires between enter and leave silently
//! "leaves". If `enter` times out (or its future is dropped), the participant withdraws
//! its node, but others may already have been released counting it.
//!
//! # Async
//! [`Barrier::wait_async`], [`DoubleBarrier::enter_async`],
//! [`DoubleBarrier::leave_async`] (and the other `*_async` calls) are the protocol
//! itself; the blocking calls drive the same futures on the caller's thread. A pending
//! wait holds one watch and no thread. Dropping a future cancels the call: a
//! dropped wait leaves no watch registered, a dropped `enter_async` withdraws its node
//! (in the background, also when its create was still unanswered) and has not entered,
//! a dropped `leave_async` leaves the participant entered, and `leave` resumes.

use crate::lifecycle::Client;
use crate::recovery::{unwatch, wait_or_unwatch_async};
use crate::runtime::block_on;
use crate::support::{
    create_if_absent_async, delete_node_async, op_deadline, retry_async, Deadline,
};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::time::Duration;
use zookeeper_mt::{Timeout, ZooKeeper};

/// A barrier znode: [`wait`](Self::wait) blocks while it exists. Cheap to clone
/// (`Clone` shares the session); usable from any thread.
#[derive(Debug, Clone)]
pub struct Barrier {
    client: Client,
    path: String,
    nodes: NodeOptions,
}

impl Barrier {
    /// The current session (on a managed client, the latest).
    fn zk(&self) -> ZooKeeper {
        self.client.session().zk
    }

    /// A barrier at `path` (nothing is created until [`set`](Self::set)).
    /// `client`: a plain handle or a managed client (each request then goes to the
    /// current session).
    pub fn new(client: impl Into<Client>, path: &str) -> Barrier {
        Barrier {
            client: client.into(),
            path: path.to_string(),
            nodes: NodeOptions::default(),
        }
    }

    /// The ACL of the barrier node (and of missing parents `set` creates). Default: open.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> Barrier {
        self.nodes = nodes;
        self
    }

    /// The barrier's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Raises the barrier: creates the node (and missing parents). Setting a barrier
    /// that is already set is fine.
    pub fn set(&self) -> Result<()> {
        block_on(self.set_async())
    }

    /// [`set`](Self::set), async. Dropped, a create already sent may still raise the
    /// barrier (as after a call that timed out).
    pub async fn set_async(&self) -> Result<()> {
        let patience = op_deadline(&self.zk()).into();
        create_if_absent_async(&self.zk(), &self.path, b"", &self.nodes, patience).await
    }

    /// Removes the barrier, releasing every waiter. Removing an absent barrier is fine.
    pub fn remove(&self) -> Result<()> {
        block_on(self.remove_async())
    }

    /// [`remove`](Self::remove), async. Dropped, a delete already sent may still
    /// remove the barrier.
    pub async fn remove_async(&self) -> Result<()> {
        delete_node_async(&self.zk(), &self.path, op_deadline(&self.zk()).into()).await
    }

    /// Whether the barrier is currently set.
    pub fn is_set(&self) -> Result<bool> {
        block_on(self.is_set_async())
    }

    /// [`is_set`](Self::is_set), async.
    pub async fn is_set_async(&self) -> Result<bool> {
        let patience = op_deadline(&self.zk()).into();
        let stat = retry_async(&self.zk(), patience, || self.zk().exists_async(&self.path)).await?;
        Ok(stat.is_some())
    }

    /// Blocks until the barrier is absent. `Err(Timeout)` if it is still set after
    /// `timeout` (the wait's watch is taken off again); a session error if the session
    /// ends while waiting.
    pub fn wait(&self, timeout: impl Into<Timeout>) -> Result<()> {
        block_on(self.wait_async(timeout))
    }

    /// [`wait`](Self::wait), async. A dropped future leaves no watch registered.
    pub async fn wait_async(&self, timeout: impl Into<Timeout>) -> Result<()> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = Deadline::after(timeout);
        loop {
            let (stat, mut watch) = retry_async(&self.zk(), deadline.into(), || {
                self.zk().exists_watch_async(&self.path)
            })
            .await?;
            if stat.is_none() {
                // Nothing to wait for; the exists watch (set on the absent node) would
                // stay registered until the barrier is next set.
                unwatch(&self.zk(), &watch);
                return Ok(());
            }
            if wait_or_unwatch_async(&self.zk(), &mut watch, deadline)
                .await?
                .is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }
}

mod double;
pub use double::DoubleBarrier;
