//! Leader election (ZooKeeper recipe): every candidate creates an ephemeral sequential
//! node under the election directory; the candidate with the lowest sequence number
//! leads. A waiting candidate watches only its immediate predecessor, so when a
//! candidate leaves, exactly one other candidate wakes up (no herd effect) and
//! re-checks whether it is now the lowest.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::election::LeaderElection;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let candidate = LeaderElection::join(&zk, "/app/election", b"worker-7")?;
//! candidate.wait_until_leader(Duration::from_secs(60))?;
//! assert!(candidate.is_leader()?);
//! // ... lead, checking `is_leader()` (or the session events) before acting ...
//! candidate.resign()?; // the next candidate takes over
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - At any moment at most one candidate node is the lowest: among candidates that see
//!   a consistent server, at most one is told it leads.
//! - Handoff: when the leader resigns, is dropped, or its session closes or expires, its
//!   ephemeral node goes and its successor's watch fires; the successor becomes leader
//!   once every lower node is gone (a candidate that gave up in between is skipped).
//! - [`is_leader`](LeaderElection::is_leader) asks the server; it fails once this
//!   candidate cannot lead any more: `Lost` if its node is gone (resigned, deleted),
//!   the session error (`SessionExpired`, `Closed`) if its session ended.
//!
//! # Non-guarantees
//! - Leadership is only as good as the session: after a network partition the old
//!   leader may still *believe* it leads until its client notices the session expired,
//!   while the server has already let the next candidate lead. Leaders that act on
//!   external resources should watch [`ZooKeeper::session_events`] (a `Connecting` event
//!   means "stop acting until reconnected") and use [`sequence`](LeaderElection::sequence)
//!   as a fencing token where the resource supports one.
//! - No fairness beyond join order; a candidate that rejoins goes to the back.

use crate::support::{
    create_sequential, delete_node, ensure_dir, members, op_deadline, retry, wait_watch, Deadline,
    Member,
};
use crate::util::{guid, sequence_of};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use zookeeper::ZooKeeper;

/// Name prefix of candidate nodes.
const CANDIDATE: &str = "candidate-";

/// One candidate in a leader election (see the [module docs](crate::election)).
/// Usable from any thread. Dropping it resigns (best effort).
#[derive(Debug)]
pub struct LeaderElection {
    zk: ZooKeeper,
    dir: String,
    name: String,
    seq: i32,
    resigned: AtomicBool,
}

impl LeaderElection {
    /// Joins the election in `dir` (created if missing) as a new candidate carrying
    /// `data` (e.g. its address, readable by others through [`leader_data`]).
    ///
    /// [`leader_data`]: LeaderElection::leader_data
    pub fn join(zk: &ZooKeeper, dir: &str, data: &[u8]) -> Result<LeaderElection> {
        let deadline = op_deadline(zk);
        ensure_dir(zk, dir, &NodeOptions::default(), deadline)?;
        let tag = format!("{CANDIDATE}{}-", guid());
        let name = create_sequential(zk, dir, &tag, data, &NodeOptions::default(), deadline)?;
        let seq = sequence_of(&name).unwrap_or_default();
        Ok(LeaderElection {
            zk: zk.clone(),
            dir: dir.to_string(),
            name,
            seq,
            resigned: AtomicBool::new(false),
        })
    }

    /// This candidate's node name.
    pub fn node(&self) -> &str {
        &self.name
    }

    /// This candidate's sequence number: increases with join order, so a leader's
    /// sequence can serve as a fencing token.
    pub fn sequence(&self) -> i32 {
        self.seq
    }

    fn candidates(&self, deadline: Deadline) -> Result<Vec<Member>> {
        let children = retry(&self.zk, deadline, || self.zk.get_children(&self.dir))?;
        Ok(members(children, &[CANDIDATE]))
    }

    fn check_joined(&self) -> Result<()> {
        if self.resigned.load(Ordering::SeqCst) {
            return Err(RecipeError::Lost("this candidate has resigned"));
        }
        Ok(())
    }

    /// Whether this candidate leads now (one `get_children` on the server).
    /// `Err(Lost)` if its node is gone; a session error if the session ended.
    pub fn is_leader(&self) -> Result<bool> {
        self.check_joined()?;
        let list = self.candidates(op_deadline(&self.zk))?;
        match list.iter().position(|m| m.name == self.name) {
            Some(index) => Ok(index == 0),
            None => Err(RecipeError::Lost("the candidate node is gone")),
        }
    }

    /// Blocks until this candidate leads. Waits on its immediate predecessor only.
    /// `Err(Timeout)` after `timeout` (the candidate stays in the election);
    /// `Err(Lost)` if its node disappears; a session error if the session ends.
    pub fn wait_until_leader(&self, timeout: Duration) -> Result<()> {
        self.check_joined()?;
        let deadline = Deadline::after(timeout);
        loop {
            let list = self.candidates(deadline)?;
            let index = list
                .iter()
                .position(|m| m.name == self.name)
                .ok_or(RecipeError::Lost("the candidate node is gone"))?;
            if index == 0 {
                return Ok(());
            }
            let predecessor = format!("{}/{}", self.dir, list[index - 1].name);
            let (stat, watch) = retry(&self.zk, deadline, || self.zk.exists_watch(&predecessor))?;
            if stat.is_some() {
                wait_watch(&watch, deadline)?;
            }
        }
    }

    /// The data of the current leader (the lowest candidate), if there is one.
    pub fn leader_data(&self) -> Result<Option<Vec<u8>>> {
        let deadline = op_deadline(&self.zk);
        loop {
            let Some(first) = self.candidates(deadline)?.into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{}/{}", self.dir, first.name);
            match retry(&self.zk, deadline, || self.zk.get(&path)) {
                Ok((data, _)) => return Ok(Some(data)),
                // The leader left between the two reads: look again.
                Err(RecipeError::ZooKeeper(zookeeper::Error::NoNode)) => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Leaves the election (deletes the candidate node), handing leadership to the
    /// next candidate if this one led.
    pub fn resign(self) -> Result<()> {
        self.resign_inner()
    }

    fn resign_inner(&self) -> Result<()> {
        if self.resigned.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let path = format!("{}/{}", self.dir, self.name);
        delete_node(&self.zk, &path, op_deadline(&self.zk))
    }
}

impl Drop for LeaderElection {
    fn drop(&mut self) {
        if let Err(error) = self.resign_inner() {
            log::debug!("recipes: election: resigning {}: {error}", self.name);
        }
    }
}
