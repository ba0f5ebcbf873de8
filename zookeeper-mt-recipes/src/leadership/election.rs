//! Leader election (ZooKeeper recipe): every candidate creates an ephemeral sequential
//! node under the election directory; the candidate with the lowest sequence number
//! leads. A waiting candidate watches only its immediate predecessor, so when a
//! candidate leaves, exactly one other candidate wakes up (no herd effect) and
//! re-checks whether it is now the lowest.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::leadership::LeaderElection;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let candidate = LeaderElection::new(&zk, "/app/election", b"worker-7")?;
//! candidate.wait_until_leader(Duration::from_secs(60))?;
//! assert!(candidate.is_leader()?);
//! // ... lead, checking `is_leader()` (or the session events) before acting, and
//! // passing candidate.fencing_token() to the resources it writes ...
//! candidate.resign()?; // the next candidate takes over
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - At any moment at most one candidate node is the lowest: among candidates that see
//!   a consistent server, at most one is told it leads.
//! - Handoff: when the leader resigns, is dropped, or its session closes or expires, its
//!   ephemeral node goes and its successor's watch fires; the successor becomes leader
//!   once every lower node is gone (a candidate that gave up in between is skipped).
//! - [`is_leader`](LeaderElection::is_leader) asks the server until this candidate is
//!   seen to lead; from then on it answers at once (no request) and fails with `Lost`
//!   from the instant the leadership may be lost: a disconnection, the session's end, or
//!   the earliest instant the server can expire the session (as its answers tell), which
//!   is never after another candidate can lead; [`lost`](LeaderElection::lost) pushes
//!   that instant. Reconnected, it asks the server again. `Lost` also if its node is gone
//!   (resigned, deleted), the session error (`SessionExpired`, `Closed`) if its session
//!   ended before it was seen to lead.
//! - [`fencing_token`](LeaderElection::fencing_token) (the candidate node's `czxid`)
//!   grows from each leader to the next, also across counter restarts and re-created
//!   directories.
//! - A [`wait_until_leader`](LeaderElection::wait_until_leader) that times out leaves no
//!   watch registered.
//! - With [`NodeOptions::acl`] (see [`LeaderElection::with_options`]) the directory
//!   and candidate nodes get that ACL: a client without the rights cannot delete a
//!   candidate.
//!
//! # The end of the sequence counter
//! Candidate numbers come from the directory's 32-bit child counter, which a 3.8 server
//! does not wrap cleanly (past 2147483647 it repeats numbers or goes negative: two
//! candidates could each find themselves lowest). A candidate node numbered at or past
//! [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or
//! [`NodeOptions::sequence_limit`]) is deleted at once and never counts; the joining
//! candidate then restarts the counter by deleting the directory, which the server allows
//! only when it is empty, and joins the new one. A leader may lead for a long time, so
//! a join does not wait for the directory to empty for longer than its request timeout
//! (the session timeout): then it fails with
//! [`RecipeError::SequenceExhausted`] and nothing is left behind. Joins succeed again
//! once every candidate of the old directory has left. Never two leaders.
//!
//! # Non-guarantees
//! - Leadership is only as good as the session: after a network partition the old
//!   leader may still *believe* it leads until its client notices the session expired,
//!   while the server has already let the next candidate lead. Leaders that act on
//!   external resources should watch [`ZooKeeper::session_events`] (a `Connecting` event
//!   means "stop acting until reconnected") and use
//!   [`fencing_token`](LeaderElection::fencing_token) where the resource supports one.
//! - No fairness beyond join order; a candidate that rejoins goes to the back.

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::nodes::guid;
use crate::runtime::block_on;
use crate::support::liveness::Holding;
use crate::support::{
    check_base_path, create_member_async, delete_eventually_async, op_deadline, ordered_members,
    retry_async, wait_for_change_async, Deadline, DeadlineExt, Member, NodeWait, Patience, SeqDir,
};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{Error, Timeout, ZooKeeper};

/// Name prefix of candidate nodes.
const CANDIDATE: &str = "candidate-";

/// One candidate in a leader election (see the [module docs](crate::leadership::election)).
/// Usable from any thread. Dropping it resigns (best effort). Cheap to clone: clones are
/// one candidate; dropping the last clone resigns, and [`resign`](Self::resign) on any
/// clone resigns for all.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    zk: ZooKeeper,
    dir: String,
    name: String,
    seq: i32,
    czxid: i64,
    /// The sequence limit of the election's nodes.
    limit: i32,
    resigned: Arc<Candidacy>,
    waiting: Arc<AtomicU64>,
    /// Set once this candidate was seen to lead: how it learns it may have lost that.
    leading: Arc<parking_lot::Mutex<Option<Holding>>>,
}

/// Whether the candidate resigned, shared by its clones: the last one's drop resigns
/// (best effort) if none did.
#[derive(Debug)]
struct Candidacy {
    resigned: AtomicBool,
    zk: ZooKeeper,
    node: String,
}

impl std::ops::Deref for Candidacy {
    type Target = AtomicBool;

    fn deref(&self) -> &AtomicBool {
        &self.resigned
    }
}

impl Drop for Candidacy {
    fn drop(&mut self) {
        if !self.resigned.swap(true, Ordering::SeqCst) {
            crate::support::delete_on_drop(&self.zk, &self.node);
        }
    }
}

impl LeaderElection {
    /// Joins the election at `path` (created if missing) as a new candidate carrying
    /// `data` (e.g. its address, readable by others through [`leader_data`]).
    /// `client`: a plain handle or a managed client; the candidate belongs to the session
    /// current when it joins (its node goes with that session).
    ///
    /// [`leader_data`]: LeaderElection::leader_data
    pub fn new(client: impl Into<Client>, path: &str, data: &[u8]) -> Result<LeaderElection> {
        Self::with_options(client, path, data, NodeOptions::default())
    }

    /// [`new`](Self::new), async. Dropped before it returns, it withdraws the
    /// candidate node it may have created.
    pub async fn new_async(
        client: impl Into<Client>,
        path: &str,
        data: &[u8],
    ) -> Result<LeaderElection> {
        Self::with_options_async(client, path, data, NodeOptions::default()).await
    }

    /// [`new`](Self::new), creating the directory (if missing) and the candidate node
    /// as `nodes` say: their ACL, a container directory (removed by the server once every
    /// candidate has left), the sequence limit. Fails with
    /// [`RecipeError::SequenceExhausted`] at the end of the directory's counter while
    /// other candidates remain (see the module docs).
    pub fn with_options(
        client: impl Into<Client>,
        path: &str,
        data: &[u8],
        nodes: NodeOptions,
    ) -> Result<LeaderElection> {
        block_on(Self::with_options_async(client, path, data, nodes))
    }

    /// [`with_options`](Self::with_options), async (see
    /// [`new_async`](Self::new_async)).
    pub async fn with_options_async(
        client: impl Into<Client>,
        path: &str,
        data: &[u8],
        nodes: NodeOptions,
    ) -> Result<LeaderElection> {
        check_base_path(path)?;
        // A candidate belongs to one session: on a managed client, the current one.
        let zk = &client.into().session().zk;
        let deadline = op_deadline(zk);
        let seq_dir = SeqDir {
            path,
            data: b"",
            nodes: &nodes,
        };
        let tag = format!("{CANDIDATE}{}-", guid());
        let created =
            create_member_async(zk, &seq_dir, &tag, data, deadline.into(), deadline).await?;
        Ok(LeaderElection {
            zk: zk.clone(),
            dir: path.to_string(),
            name: created.name.clone(),
            seq: created.seq,
            czxid: created.czxid,
            limit: nodes.limit(),
            resigned: Arc::new(Candidacy {
                resigned: AtomicBool::new(false),
                zk: zk.clone(),
                node: format!("{path}/{}", created.name),
            }),
            waiting: Arc::default(),
            leading: Arc::default(),
        })
    }

    /// This candidate's node name.
    pub fn node(&self) -> &str {
        &self.name
    }

    /// This candidate's sequence number: orders the candidates of one incarnation of the
    /// directory, and starts again from 0 when the directory is re-created (a counter
    /// restart, a container directory removed while empty). Not a fencing token: use
    /// [`fencing_token`](Self::fencing_token).
    pub fn sequence(&self) -> i32 {
        self.seq
    }

    /// A fencing token for the resources a leader acts on: the zxid that created this
    /// candidate's node (`czxid`). Leaders lead in the order their nodes were created,
    /// and a re-created directory is newer than every node of the old one, so each
    /// leader's token is greater than every earlier leader's.
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// The candidates that take part (numbered below the limit), in order; none while
    /// the directory is missing.
    async fn candidates(&self, deadline: Deadline) -> Result<Vec<Member>> {
        let listed = retry_async(&self.zk, deadline.into(), || {
            self.zk.get_children_async(&self.dir)
        })
        .await;
        match listed {
            Ok(children) => Ok(ordered_members(children, &[CANDIDATE], self.limit)),
            Err(RecipeError::ZooKeeper(Error::NoNode)) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    fn check_joined(&self) -> Result<()> {
        if self.resigned.load(Ordering::SeqCst) {
            return Err(RecipeError::Lost(LossReason::Resigned));
        }
        Ok(())
    }

    /// Whether this candidate leads now. Once it was seen to lead, answered at once
    /// from what the client knows (no request): `Err(Lost)` from the instant its session
    /// may have expired or its connection dropped (see [`lost`](Self::lost)). Otherwise
    /// (and again once reconnected after such a loss) one `get_children` on the server.
    /// `Err(Lost)` if its node is gone; a session error if the session ended.
    pub fn is_leader(&self) -> Result<bool> {
        block_on(self.is_leader_async())
    }

    /// [`is_leader`](Self::is_leader), async.
    pub async fn is_leader_async(&self) -> Result<bool> {
        self.check_joined()?;
        if let Some(known) = self.known_leader() {
            return known;
        }
        let list = self.candidates(op_deadline(&self.zk)).await?;
        match list.iter().position(|m| m.name == self.name) {
            Some(index) => {
                if index == 0 {
                    self.now_leading();
                }
                Ok(index == 0)
            }
            None => Err(RecipeError::Lost(LossReason::NodeGone)),
        }
    }

    /// What is known without a request: `Ok(true)` while a seen leadership holds,
    /// `Err(Lost)` once it may be lost while the connection is down; `None` when a
    /// request must tell (never seen leading, or connected again after a loss).
    fn known_leader(&self) -> Option<Result<bool>> {
        let mut wakes = crate::support::Wakes::new();
        let mut leading = self.leading.lock();
        let reason = leading.as_ref()?.lost_reason_with(&mut wakes);
        match reason {
            None => Some(Ok(true)),
            // Connected again since, and heard from: the server can tell. (Connected
            // alone is not enough: the C client still says connected on a link that
            // went silent, until its read timeout, and a request there would wait.)
            Some(_)
                if self.zk.state().is_connected()
                    && !crate::support::liveness::past_deadline(
                        &self.zk.session_clock(),
                        std::time::Instant::now(),
                    ) =>
            {
                *leading = None;
                None
            }
            Some(reason) => Some(Err(RecipeError::Lost(LossReason::Lock(reason)))),
        }
    }

    fn now_leading(&self) {
        let mut leading = self.leading.lock();
        if leading.is_none() {
            *leading = Some(Holding::new(&self.zk));
        }
    }

    /// The loss of a leadership seen by [`is_leader`](Self::is_leader) or
    /// [`wait_until_leader`](Self::wait_until_leader), as a
    /// [`LossSignal`](crate::LossSignal): `Some(reason)` at the instant it may be lost (the
    /// session expired or closed, the connection dropped, or the session's earliest
    /// possible expiry came): never after another candidate can lead. Never reports a
    /// loss while this candidate was not seen leading: then it resolves to `None` at
    /// once (there is no leadership to lose).
    pub fn lost(&self) -> crate::LossSignal<crate::locks::LockLost> {
        // Settled signals are woken after the lock (declared first, dropped last).
        let mut wakes = crate::support::Wakes::new();
        match &*self.leading.lock() {
            Some(holding) => holding.lost_with(&mut wakes),
            None => crate::LossSignal::ended(),
        }
    }

    /// Blocks until this candidate leads. Waits on its immediate predecessor only.
    /// `Err(Timeout)` after `timeout` (the candidate stays in the election; no watch
    /// stays registered); `Err(Lost)` if its node disappears; a session error if the
    /// session ends.
    pub fn wait_until_leader(&self, timeout: impl Into<Timeout>) -> Result<()> {
        block_on(self.wait_until_leader_async(timeout))
    }

    /// [`wait_until_leader`](Self::wait_until_leader), async. A dropped future leaves no
    /// watch registered (the candidate stays in the election).
    pub async fn wait_until_leader_async(&self, timeout: impl Into<Timeout>) -> Result<()> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        self.check_joined()?;
        let deadline = Deadline::after(timeout);
        loop {
            let list = self.candidates(deadline).await?;
            let index = list
                .iter()
                .position(|m| m.name == self.name)
                .ok_or(RecipeError::Lost(LossReason::NodeGone))?;
            if index == 0 {
                self.now_leading();
                return Ok(());
            }
            deadline.check()?;
            let predecessor = format!("{}/{}", self.dir, list[index - 1].name);
            let change = wait_for_change_async(
                &self.zk,
                &predecessor,
                Patience::from(deadline),
                &self.waiting,
            );
            match change.await? {
                NodeWait::Fired | NodeWait::LookAgain => {}
                NodeWait::TimedOut => return Err(RecipeError::Timeout),
            }
        }
    }

    /// The data of the current leader (the lowest candidate), if there is one.
    pub fn leader_data(&self) -> Result<Option<Vec<u8>>> {
        block_on(self.leader_data_async())
    }

    /// [`leader_data`](Self::leader_data), async.
    pub async fn leader_data_async(&self) -> Result<Option<Vec<u8>>> {
        let deadline = op_deadline(&self.zk);
        loop {
            let Some(first) = self.candidates(deadline).await?.into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{}/{}", self.dir, first.name);
            match retry_async(&self.zk, deadline.into(), || self.zk.get_async(&path)).await {
                Ok((data, _)) => return Ok(Some(data)),
                // The leader left between the two reads: look again.
                Err(RecipeError::ZooKeeper(Error::NoNode)) => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Leaves the election (deletes the candidate node), handing leadership to the
    /// next candidate if this one led.
    pub fn resign(self) -> Result<()> {
        block_on(self.resign_async())
    }

    /// [`resign`](Self::resign), async. Dropped before the delete was answered, it
    /// hands the delete to the background: the candidate leaves either way.
    pub async fn resign_async(self) -> Result<()> {
        if self.resigned.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Released after the lock: the release wakes the loss signals.
        let leading = self.leading.lock().take();
        if let Some(holding) = leading {
            holding.release();
        }
        let path = format!("{}/{}", self.dir, self.name);
        delete_eventually_async(&self.zk, &path, op_deadline(&self.zk).into()).await
    }
}
