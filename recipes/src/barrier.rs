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
//! use recipes::barrier::Barrier;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let barrier = Barrier::new(&zk, "/app/start-gate");
//! barrier.set()?;                        // coordinator closes the gate
//! // ... workers call barrier.wait(timeout) and block ...
//! barrier.remove()?;                     // coordinator opens it: every waiter returns
//! barrier.wait(Duration::from_secs(1))?; // returns at once now
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! Guarantees: a waiter returns `Ok` only after it has seen the node absent; a removal
//! is never missed (the watch is set by the same call that checks the node).
//! Non-guarantees: a set/remove/set sequence quicker than a waiter's re-check may be
//! seen only as "still set" (the waiter re-reads after every event and keeps waiting).
//! The barrier node is persistent: it survives the session that set it.
//!
//! # [`DoubleBarrier`]
//! `N` participants [`enter`](DoubleBarrier::enter): each creates an ephemeral
//! sequential node under the barrier directory and returns once `N` nodes exist (the
//! `N`-th creates a `ready` node that releases the others). They then
//! [`leave`](DoubleBarrier::leave): each deletes its node and returns once every
//! participant's node is gone. The lowest participant waits on the highest, the others
//! on the lowest, so a departure wakes at most the processes that must re-check.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::barrier::DoubleBarrier;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let barrier = DoubleBarrier::new(&zk, "/app/phase-1", 3)?;
//! barrier.enter(Duration::from_secs(30))?; // all 3 have arrived
//! // ... compute ...
//! barrier.leave(Duration::from_secs(30))?; // all 3 have finished
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! Guarantees: `enter` returns `Ok` only after at least `N` participants have entered;
//! `leave` returns `Ok` only after every participant of its round has left (or lost
//! its session: participant nodes are ephemeral, so a crashed participant counts as
//! left). The directory can be reused round after round: the last participant out
//! removes `ready` before its own node, and `leave` ignores nodes of a next round.
//!
//! Non-guarantees: a participant's round is the set of nodes it sees right after
//! passing `enter`; more than `N` participants may pass one round, and a surplus
//! participant arriving after that is not waited for by `leave`. A participant whose
//! session expires between enter and leave silently "leaves". If `enter` times out,
//! the participant withdraws its node, but others may already have been released
//! counting it.

use crate::support::{
    create_if_absent, create_sequential, delete_node, ensure_dir, members, op_deadline, retry,
    wait_watch, Deadline,
};
use crate::util::{guid, sequence_of};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::time::Duration;
use zookeeper::ZooKeeper;

/// A barrier znode: [`wait`](Self::wait) blocks while it exists. Cheap to clone
/// (`Clone` shares the session); usable from any thread.
#[derive(Debug, Clone)]
pub struct Barrier {
    zk: ZooKeeper,
    path: String,
}

impl Barrier {
    /// A barrier at `path` (nothing is created until [`set`](Self::set)).
    pub fn new(zk: &ZooKeeper, path: &str) -> Barrier {
        Barrier {
            zk: zk.clone(),
            path: path.to_string(),
        }
    }

    /// The barrier's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Raises the barrier: creates the node (and missing parents). Setting a barrier
    /// that is already set is fine.
    pub fn set(&self) -> Result<()> {
        create_if_absent(
            &self.zk,
            &self.path,
            b"",
            &NodeOptions::default(),
            op_deadline(&self.zk),
        )
    }

    /// Removes the barrier, releasing every waiter. Removing an absent barrier is fine.
    pub fn remove(&self) -> Result<()> {
        delete_node(&self.zk, &self.path, op_deadline(&self.zk))
    }

    /// Whether the barrier is currently set.
    pub fn is_set(&self) -> Result<bool> {
        Ok(retry(&self.zk, op_deadline(&self.zk), || {
            self.zk.exists(&self.path)
        })?
        .is_some())
    }

    /// Blocks until the barrier is absent. `Err(Timeout)` if it is still set after
    /// `timeout`; a session error if the session ends while waiting.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let deadline = Deadline::after(timeout);
        loop {
            let (stat, watch) = retry(&self.zk, deadline, || self.zk.exists_watch(&self.path))?;
            if stat.is_none() {
                return Ok(());
            }
            wait_watch(&watch, deadline)?;
        }
    }
}

/// Name prefix of participant nodes.
const PARTICIPANT: &str = "p-";
/// Name of the node that releases `enter`.
const READY: &str = "ready";

/// This participant's state between `enter` and `leave`.
#[derive(Debug, Clone)]
struct Entered {
    /// Its node's name.
    name: String,
    /// Highest participant sequence of its round (read after passing `enter`): `leave`
    /// waits only for nodes up to it, so early entrants of a next round are not waited
    /// for.
    round_max: i32,
}

/// A double barrier for `count` participants (see the [module docs](self)). One value
/// is one participant; it may be used from any thread, but `enter`/`leave` calls on one
/// value are serialized.
#[derive(Debug)]
pub struct DoubleBarrier {
    zk: ZooKeeper,
    dir: String,
    count: usize,
    entered: Mutex<Option<Entered>>,
}

impl DoubleBarrier {
    /// A participant of the double barrier in directory `dir` (created if missing) for
    /// `count` participants. Every participant must use the same `count`.
    pub fn new(zk: &ZooKeeper, dir: &str, count: usize) -> Result<DoubleBarrier> {
        if count == 0 {
            return Err(RecipeError::InvalidArgument(
                "a double barrier needs at least one participant",
            ));
        }
        ensure_dir(zk, dir, &NodeOptions::default(), op_deadline(zk))?;
        Ok(DoubleBarrier {
            zk: zk.clone(),
            dir: dir.to_string(),
            count,
            entered: Mutex::new(None),
        })
    }

    /// Number of participants the barrier waits for.
    pub fn count(&self) -> usize {
        self.count
    }

    /// This participant's node name while entered.
    pub fn node(&self) -> Option<String> {
        self.entered.lock().as_ref().map(|e| e.name.clone())
    }

    /// Enters: registers this participant and blocks until `count` participants have
    /// entered. On timeout the participant withdraws (its node is deleted) and
    /// `Err(Timeout)` is returned. Entering twice without leaving is an
    /// `InvalidArgument` error.
    pub fn enter(&self, timeout: Duration) -> Result<()> {
        let deadline = Deadline::after(timeout);
        let mut entered = self.entered.lock();
        if entered.is_some() {
            return Err(RecipeError::InvalidArgument(
                "this participant has already entered",
            ));
        }
        let ready = format!("{}/{READY}", self.dir);
        // Watch for `ready` before registering, so its creation cannot be missed.
        let (mut ready_stat, mut watch) =
            retry(&self.zk, deadline, || self.zk.exists_watch(&ready))?;
        let tag = format!("{PARTICIPANT}{}-", guid());
        let name = create_sequential(
            &self.zk,
            &self.dir,
            &tag,
            b"",
            &NodeOptions::default(),
            deadline,
        )?;
        let my_seq = sequence_of(&name).unwrap_or_default();
        let outcome = (|| loop {
            let children = retry(&self.zk, deadline, || self.zk.get_children(&self.dir))?;
            let list = members(children, &[PARTICIPANT]);
            let round_max = list.last().map_or(my_seq, |m| m.seq.max(my_seq));
            if ready_stat.is_some() {
                return Ok(round_max);
            }
            if list.len() >= self.count {
                create_if_absent(&self.zk, &ready, b"", &NodeOptions::default(), deadline)?;
                return Ok(round_max);
            }
            wait_watch(&watch, deadline)?;
            (ready_stat, watch) = retry(&self.zk, deadline, || self.zk.exists_watch(&ready))?;
        })();
        match outcome {
            Ok(round_max) => {
                *entered = Some(Entered { name, round_max });
                Ok(())
            }
            Err(error) => {
                // Withdraw: a participant that gave up must not be counted.
                let path = format!("{}/{name}", self.dir);
                let _ = delete_node(&self.zk, &path, op_deadline(&self.zk));
                Err(error)
            }
        }
    }

    /// Leaves: deletes this participant's node and blocks until the node of every
    /// participant of its round is gone. The last one out also deletes the `ready`
    /// node, so the directory can serve a next round. Leaving without having entered is
    /// an `InvalidArgument` error. After a timeout this participant has usually left
    /// already (unless it was the lowest, which leaves last); calling `leave` again
    /// resumes.
    pub fn leave(&self, timeout: Duration) -> Result<()> {
        let deadline = Deadline::after(timeout);
        let mut entered = self.entered.lock();
        let Some(Entered { name, round_max }) = entered.clone() else {
            return Err(RecipeError::InvalidArgument(
                "this participant has not entered",
            ));
        };
        let my_path = format!("{}/{name}", self.dir);
        let ready = format!("{}/{READY}", self.dir);
        let outcome = (|| loop {
            let children = retry(&self.zk, deadline, || self.zk.get_children(&self.dir))?;
            let mut list = members(children, &[PARTICIPANT]);
            list.retain(|m| m.seq <= round_max);
            let Some(lowest) = list.first() else {
                return Ok(());
            };
            let me = list.iter().position(|m| m.name == name);
            if list.len() == 1 && me == Some(0) {
                // Last one out: clear `ready` first, so no new entrant sees a stale one.
                delete_node(&self.zk, &ready, deadline)?;
                delete_node(&self.zk, &my_path, deadline)?;
                return Ok(());
            }
            let target = if me == Some(0) {
                // Lowest: wait for the highest to go (the others wait on us).
                list.last().map_or_else(String::new, |m| m.name.clone())
            } else {
                if me.is_some() {
                    delete_node(&self.zk, &my_path, deadline)?;
                }
                lowest.name.clone()
            };
            let target_path = format!("{}/{target}", self.dir);
            let (stat, watch) = retry(&self.zk, deadline, || self.zk.exists_watch(&target_path))?;
            if stat.is_some() {
                wait_watch(&watch, deadline)?;
            }
        })();
        if outcome.is_ok() {
            *entered = None;
        }
        outcome
    }
}

impl Drop for DoubleBarrier {
    /// A participant dropped while entered withdraws its node (best effort).
    fn drop(&mut self) {
        if let Some(entered) = self.entered.get_mut().take() {
            let path = format!("{}/{}", self.dir, entered.name);
            if let Err(error) = delete_node(&self.zk, &path, op_deadline(&self.zk)) {
                log::debug!("recipes: double barrier: withdrawing {path}: {error}");
            }
        }
    }
}
