//! The double barrier: participants enter together and leave together.

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::nodes::{guid, sequence_in_range, sequence_of};
use crate::recovery::{
    children_or_none_async, restart_dir_async, unwatch, wait_or_unwatch_async, Restart,
};
use crate::runtime::block_on;
use crate::support::{
    check_base_path, create_if_absent_async, create_sequential_async, delete_eventually_async,
    delete_node_async, delete_on_drop, members, op_deadline, retry_async, Deadline, DeleteOnDrop,
    Member,
};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{Error, Timeout, ZooKeeper};

/// Name prefix of participant nodes.
const PARTICIPANT: &str = "p-";
/// Name prefix of the nodes that release `enter`: `ready-<X>` releases the participants
/// numbered up to `X`.
const READY: &str = "ready-";

/// The threshold of a `ready-<X>` node.
fn ready_threshold(name: &str) -> Option<i32> {
    let number = name.strip_prefix(READY)?;
    (number.len() == 10 && number.bytes().all(|b| b.is_ascii_digit()))
        .then(|| number.parse().ok())
        .flatten()
}

/// A listing of the barrier directory.
struct Round {
    /// Participants whose number may be ordered by, in order.
    participants: Vec<Member>,
    /// Thresholds of the `ready-<X>` nodes, ascending.
    readies: Vec<i32>,
    /// Every child (participants past the counter's end included).
    count: usize,
}

impl Round {
    fn of(children: Vec<String>) -> Round {
        let count = children.len();
        let mut readies: Vec<i32> = children.iter().filter_map(|c| ready_threshold(c)).collect();
        readies.sort_unstable();
        let mut participants = members(children, &[PARTICIPANT]);
        participants.retain(Member::in_range);
        Round {
            participants,
            readies,
            count,
        }
    }

    /// `ready-<X>` nodes none of whose participants is left: they release nobody
    /// (numbers only grow), and go so the directory can empty.
    fn stale_readies(&self) -> Vec<i32> {
        let lowest = self.participants.first().map_or(i32::MAX, |m| m.seq);
        self.readies
            .iter()
            .copied()
            .filter(|x| *x < lowest)
            .collect()
    }
}

/// This participant's state between `enter` and `leave`.
#[derive(Debug, Clone)]
struct Entered {
    /// Its node's name.
    name: String,
    /// The threshold of the `ready-<X>` node that released it: its round is the
    /// participants numbered up to `X`, and `leave` waits only for those.
    round_max: i32,
}

/// What one participant is doing.
#[derive(Debug, Default)]
struct Participant {
    /// Set by a successful `enter`, cleared by a successful `leave`.
    entered: Option<Entered>,
    /// An `enter` or `leave` is in progress (its future may be pending anywhere).
    busy: bool,
}

/// Marks an `enter` or `leave` in progress while it lives (until it returns or its
/// future is dropped).
struct Busy<'a>(&'a Mutex<Participant>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.lock().busy = false;
    }
}

/// A double barrier for `count` participants (see the [module docs](super)). One value
/// is one participant; it may be used from any thread, one `enter` or `leave` at a
/// time: a call made while another is in progress fails with `InvalidArgument`. Cheap
/// to clone: clones are that one participant (as threads sharing a `&DoubleBarrier`
/// are); the last one's drop withdraws its node if entered.
#[derive(Debug, Clone)]
pub struct DoubleBarrier {
    client: Client,
    dir: String,
    count: usize,
    nodes: NodeOptions,
    state: Arc<SharedParticipant>,
}

/// The participant of a value and its clones.
#[derive(Debug)]
struct SharedParticipant {
    state: Mutex<Participant>,
    client: Client,
    dir: String,
}

impl std::ops::Deref for SharedParticipant {
    type Target = Mutex<Participant>;

    fn deref(&self) -> &Mutex<Participant> {
        &self.state
    }
}

impl DoubleBarrier {
    /// The current session (on a managed client, the latest).
    fn zk(&self) -> ZooKeeper {
        self.client.session().zk
    }

    /// A participant of the double barrier at `path` (created when first
    /// needed) for `count` participants. Every participant must use the same `count`.
    ///
    /// `client`: a plain handle or a managed client. A participant's node belongs to the
    /// session it entered on: if that session ends before `leave`, `leave` fails with
    /// the loss (the node went with the session).
    pub fn new(client: impl Into<Client>, path: &str, count: usize) -> Result<DoubleBarrier> {
        if count == 0 {
            return Err(RecipeError::InvalidArgument(
                "a double barrier needs at least one participant",
            ));
        }
        check_base_path(path)?;
        let client = client.into();
        Ok(DoubleBarrier {
            client: client.clone(),
            dir: path.to_string(),
            count,
            nodes: NodeOptions::default(),
            state: Arc::new(SharedParticipant {
                state: Mutex::new(Participant::default()),
                client,
                dir: path.to_string(),
            }),
        })
    }

    /// The ACL of the nodes this participant creates (directory, participant and ready
    /// nodes) and whether the directory is a container (removed by the server once
    /// empty, recreated by the next `enter`). Default: open ACL, persistent.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> DoubleBarrier {
        self.nodes = nodes;
        self
    }

    /// Number of participants the barrier waits for.
    pub fn count(&self) -> usize {
        self.count
    }

    /// This participant's node name while entered.
    pub fn node(&self) -> Option<String> {
        self.state.lock().entered.as_ref().map(|e| e.name.clone())
    }

    fn child(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    fn ready_path(&self, threshold: i32) -> String {
        format!("{}/{READY}{threshold:010}", self.dir)
    }

    /// Starts an `enter` or `leave` (refused while another is in progress): the marker,
    /// and whether this participant has entered.
    fn begin(&self) -> Result<(Busy<'_>, Option<Entered>)> {
        let mut state = self.state.lock();
        if state.busy {
            return Err(RecipeError::InvalidArgument(
                "another enter or leave of this participant is in progress",
            ));
        }
        state.busy = true;
        let entered = state.entered.clone();
        drop(state);
        Ok((Busy(&self.state), entered))
    }

    /// Deletes `ready-<X>` nodes that release nobody any more (best effort: any
    /// participant may do it, the names make it exact).
    async fn clear_stale(&self, round: &Round, deadline: Deadline) -> Result<()> {
        for threshold in round.stale_readies() {
            delete_node_async(&self.zk(), &self.ready_path(threshold), deadline.into()).await?;
        }
        Ok(())
    }

    /// Enters: registers this participant and blocks until `count` participants have
    /// entered. On timeout the participant withdraws (its node is deleted) and
    /// `Err(Timeout)` is returned. Entering twice without leaving is an
    /// `InvalidArgument` error. At the end of the directory's sequence counter it waits
    /// (within the timeout) for the directory to empty and restarts it; if it does not
    /// empty in time the error is [`RecipeError::SequenceExhausted`].
    pub fn enter(&self, timeout: impl Into<Timeout>) -> Result<()> {
        block_on(self.enter_async(timeout))
    }

    /// [`enter`](Self::enter), async. Dropped before it returns, it withdraws as a
    /// failed enter does: its node is deleted (in the background, also when its create
    /// was still unanswered) and the participant has not entered.
    pub async fn enter_async(&self, timeout: impl Into<Timeout>) -> Result<()> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = Deadline::after(timeout);
        let (busy, entered) = self.begin()?;
        if entered.is_some() {
            return Err(RecipeError::InvalidArgument(
                "this participant has already entered",
            ));
        }
        let (name, seq) = self.register(deadline).await?;
        let path = self.child(&name);
        // The node is ours from here: a dropped future withdraws it.
        let zk = self.zk();
        let mut withdraw = DeleteOnDrop::armed(&zk, &path);
        let outcome = self.await_round(&name, seq, deadline).await;
        withdraw.disarm();
        match outcome {
            Ok(round_max) => {
                self.state.lock().entered = Some(Entered { name, round_max });
                drop(busy);
                Ok(())
            }
            Err(error) => {
                // Withdraw: a participant that gave up must not be counted.
                let patience = op_deadline(&self.zk()).into();
                let _ = delete_eventually_async(&self.zk(), &path, patience).await;
                Err(error)
            }
        }
    }

    /// Creates this participant's node; returns its name and number. A node numbered
    /// past the directory counter's end is removed at once (its number cannot be
    /// ordered) and the directory restarted once it is empty (waiting within the
    /// deadline: participants of other rounds leave, or time out and withdraw).
    async fn register(&self, deadline: Deadline) -> Result<(String, i32)> {
        loop {
            let tag = format!("{PARTICIPANT}{}-", guid());
            let name = create_sequential_async(
                &self.zk(),
                &self.dir,
                &tag,
                b"",
                &self.nodes,
                deadline.into(),
            )
            .await?;
            match sequence_of(&name) {
                Some(seq) if sequence_in_range(seq) => return Ok((name, seq)),
                _ => {}
            }
            delete_eventually_async(&self.zk(), &self.child(&name), deadline.into()).await?;
            self.restart_when_empty(deadline).await?;
        }
    }

    /// Waits for the directory to hold nothing but stale `ready` nodes, then restarts
    /// its counter. `SequenceExhausted` at the deadline.
    async fn restart_when_empty(&self, deadline: Deadline) -> Result<()> {
        let exhausted = || RecipeError::SequenceExhausted {
            dir: self.dir.clone(),
        };
        loop {
            let listed = retry_async(&self.zk(), deadline.into(), || {
                self.zk().get_children_watch_async(&self.dir)
            })
            .await;
            let (children, mut watch) = match listed {
                Ok(found) => found,
                Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(()), // restarted
                Err(RecipeError::Timeout) => return Err(exhausted()),
                Err(error) => return Err(error),
            };
            let round = Round::of(children);
            self.clear_stale(&round, deadline).await?;
            if round.participants.is_empty() && round.count == round.stale_readies().len() {
                let restarted =
                    restart_dir_async(&self.zk(), &self.dir, &[], &self.nodes, deadline.into())
                        .await;
                match restarted {
                    Ok(Restart::Restarted) => {
                        unwatch(&self.zk(), &watch);
                        return Ok(());
                    }
                    Ok(Restart::NotEmpty) => {} // someone arrived: wait for the change
                    Err(RecipeError::Timeout) => {
                        unwatch(&self.zk(), &watch);
                        return Err(exhausted());
                    }
                    Err(error) => {
                        unwatch(&self.zk(), &watch);
                        return Err(error);
                    }
                }
            }
            match wait_or_unwatch_async(&self.zk(), &mut watch, deadline).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(RecipeError::Timeout) => return Err(exhausted()),
                Err(error) => return Err(error),
            }
        }
    }

    /// Blocks until a `ready-<X>` node with `X >= seq` exists, creating one when `count`
    /// participants not yet released are present; returns `X`.
    async fn await_round(&self, name: &str, seq: i32, deadline: Deadline) -> Result<i32> {
        loop {
            // A child watch set by the listing: any arrival or `ready` node after it
            // wakes us. (Participants are few; each re-lists on each arrival.)
            let (children, mut watch) = retry_async(&self.zk(), deadline.into(), || {
                self.zk().get_children_watch_async(&self.dir)
            })
            .await?;
            let mine = children.iter().any(|c| c == name);
            let round = Round::of(children);
            let decided = if !mine {
                Err(RecipeError::Lost(LossReason::NodeGone))
            } else if let Some(x) = round.readies.iter().copied().find(|x| *x >= seq) {
                Ok(Some(x))
            } else {
                // Released so far: everyone up to the highest `ready`; a stale one from
                // a round whose last participant died releases nobody new.
                let released = round.readies.last().copied().unwrap_or(-1);
                let pending: Vec<&Member> = round
                    .participants
                    .iter()
                    .filter(|m| m.seq > released)
                    .collect();
                if pending.len() >= self.count {
                    let x = pending.last().map_or(seq, |m| m.seq.max(seq));
                    let ready = self.ready_path(x);
                    create_if_absent_async(&self.zk(), &ready, b"", &self.nodes, deadline.into())
                        .await
                        .map(|()| Some(x))
                } else {
                    Ok(None)
                }
            };
            match decided {
                Ok(Some(x)) => {
                    unwatch(&self.zk(), &watch);
                    // Released: tidying up leftovers must not undo that.
                    if let Err(error) = self.clear_stale(&round, deadline).await {
                        log::debug!("recipes: double barrier: clearing stale ready nodes: {error}");
                    }
                    return Ok(x);
                }
                Ok(None) => {}
                Err(error) => {
                    unwatch(&self.zk(), &watch);
                    return Err(error);
                }
            }
            if wait_or_unwatch_async(&self.zk(), &mut watch, deadline)
                .await?
                .is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// Leaves: deletes this participant's node and blocks until the node of every
    /// participant of its round is gone; whoever finds the round empty deletes its
    /// `ready` node (so a dead last participant leaves nothing that releases anyone).
    /// Leaving without having entered is an `InvalidArgument` error. After a timeout
    /// this participant has usually left already (unless it was the lowest, which leaves
    /// last); calling `leave` again resumes.
    pub fn leave(&self, timeout: impl Into<Timeout>) -> Result<()> {
        block_on(self.leave_async(timeout))
    }

    /// [`leave`](Self::leave), async. Dropped before it returns, it ends as a timed-out
    /// leave does: the participant counts as entered still (its node may be gone
    /// already) and calling `leave` again resumes; no watch stays registered.
    pub async fn leave_async(&self, timeout: impl Into<Timeout>) -> Result<()> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = Deadline::after(timeout);
        let (busy, entered) = self.begin()?;
        let Some(Entered { name, round_max }) = entered else {
            return Err(RecipeError::InvalidArgument(
                "this participant has not entered",
            ));
        };
        let outcome = self.leave_round(&name, round_max, deadline).await;
        if outcome.is_ok() {
            self.state.lock().entered = None;
        }
        drop(busy);
        outcome
    }

    /// The protocol of [`leave`](Self::leave) for the participant `name` of the round
    /// released by `ready-<round_max>`. Resumable: its own node may be gone already.
    async fn leave_round(&self, name: &str, round_max: i32, deadline: Deadline) -> Result<()> {
        let my_path = self.child(name);
        let ready = self.ready_path(round_max);
        loop {
            let children = children_or_none_async(&self.zk(), &self.dir, deadline.into()).await?;
            let mut list = members(children, &[PARTICIPANT]);
            list.retain(|m| m.in_range() && m.seq <= round_max);
            let Some(lowest) = list.first() else {
                // Everyone of the round is gone (the last one may have died): clear its
                // `ready` node.
                return delete_node_async(&self.zk(), &ready, deadline.into()).await;
            };
            let me = list.iter().position(|m| m.name == name);
            if list.len() == 1 && me == Some(0) {
                // Last one out: clear `ready` first, then leave.
                delete_node_async(&self.zk(), &ready, deadline.into()).await?;
                return delete_node_async(&self.zk(), &my_path, deadline.into()).await;
            }
            let target = if me == Some(0) {
                // Lowest: wait for the highest to go (the others wait on us).
                list.last().map_or_else(String::new, |m| m.name.clone())
            } else {
                let lowest = lowest.name.clone();
                if me.is_some() {
                    delete_node_async(&self.zk(), &my_path, deadline.into()).await?;
                }
                lowest
            };
            let target_path = self.child(&target);
            let (stat, mut watch) = retry_async(&self.zk(), deadline.into(), || {
                self.zk().exists_watch_async(&target_path)
            })
            .await?;
            if stat.is_none() {
                unwatch(&self.zk(), &watch);
            } else if wait_or_unwatch_async(&self.zk(), &mut watch, deadline)
                .await?
                .is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }
}

impl Drop for SharedParticipant {
    /// A participant dropped while entered withdraws its node: the delete is sent and
    /// settled in the background; the drop never waits for it.
    fn drop(&mut self) {
        if let Some(entered) = self.state.get_mut().entered.take() {
            let path = format!("{}/{}", self.dir, entered.name);
            delete_on_drop(&self.client.session().zk, &path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_names() {
        assert_eq!(ready_threshold("ready-0000000042"), Some(42));
        assert_eq!(ready_threshold("ready"), None);
        assert_eq!(ready_threshold("ready-42"), None);
        assert_eq!(ready_threshold("p-x-0000000042"), None);
    }

    #[test]
    fn rounds_ignore_participants_past_the_end() {
        let round = Round::of(vec![
            "p-a-0000000003".to_string(),
            "p-b-2147483647".to_string(),
            "p-c--2147483648".to_string(),
            "ready-0000000001".to_string(),
            "ready-0000000009".to_string(),
        ]);
        let seqs: Vec<i32> = round.participants.iter().map(|m| m.seq).collect();
        assert_eq!(seqs, [3]);
        assert_eq!(round.readies, [1, 9]);
        assert_eq!(round.stale_readies(), [1]);
        assert_eq!(round.count, 5);
    }

    /// On a real server: at the counter's end a participant restarts the directory once
    /// only leftover `ready` nodes remain, and gives up with `SequenceExhausted` (leaving
    /// no watch) while a participant of another round holds it.
    #[test]
    fn restart_waits_for_the_directory_to_empty() {
        use zookeeper_mt::{Acl, CreateMode};
        let hosts = zk_harness::shared_test_connect_string();
        let zk = ZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
        let dir = format!("/recipes-unit/double-end-{}", guid());
        let barrier = DoubleBarrier::new(&zk, &dir, 2).unwrap();
        crate::nodes::ensure_path(&zk, &dir).unwrap();
        let open = Acl::OPEN_UNSAFE;
        let peer = ZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
        let other = peer
            .create(
                &format!("{dir}/p-x-"),
                b"",
                zookeeper_mt::CreateOptions::new(CreateMode::EphemeralSequential).with_acl(open),
            )
            .unwrap();
        zk.create(
            &format!("{dir}/ready-0000000000"),
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open),
        )
        .unwrap();
        let short = Deadline::after(Duration::from_millis(300));
        assert_eq!(
            block_on(barrier.restart_when_empty(short)),
            Err(RecipeError::SequenceExhausted { dir: dir.clone() })
        );
        assert!(zk.exists(&other).unwrap().is_some());
        zk.exists("/").unwrap();
        assert_eq!(zk.live_contexts(), 0, "a watch was left behind");

        // The other round's participant goes: the leftover `ready` (releasing nobody) is
        // cleared and the counter restarts.
        peer.close().unwrap();
        block_on(barrier.restart_when_empty(Deadline::after(Duration::from_secs(10)))).unwrap();
        assert!(zk.get_children(&dir).unwrap().is_empty());
        let fresh = zk
            .create(
                &format!("{dir}/p-y-"),
                b"",
                zookeeper_mt::CreateOptions::new(CreateMode::EphemeralSequential).with_acl(open),
            )
            .unwrap();
        assert_eq!(sequence_of(&fresh), Some(0), "the counter did not restart");
        drop(barrier);
        zk.close().unwrap();
    }
}
