//! A leader latch: a long-lived participant in an election that knows, at every moment,
//! whether it leads; a leadership guard per term that reports the loss of leadership; a
//! stream of became-leader / lost-leadership events; and "run this while leader, then
//! relinquish". In three node layouts, so a Rust service can take part in the same
//! election as Apache Curator's `LeaderLatch` or kazoo's `Election`.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::leadership::{LatchLayout, LeaderLatch};
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let latch = LeaderLatch::builder("/app/leader")
//!     .id("worker-7")
//!     .layout(LatchLayout::CuratorLeaderLatch) // the Java services use Curator's LeaderLatch
//!     .build(&zk)?;
//! let guard = latch.await_leadership(Duration::from_secs(60))?;
//! while !guard.is_lost() {
//!     // ... lead; pass guard.token() to resources that accept a fencing token ...
//! #   break;
//! }
//! // Or: wait, run, then hand leadership to the next participant.
//! let done = latch.run_while_leader(Duration::from_secs(60), |guard| guard.token())?;
//! latch.close(); // leave the election
//! # let _ = done;
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Protocol
//! The latch runs as a task on the recipes' driver (no thread of its own: a thousand
//! latches cost a thousand small tasks). It creates an ephemeral sequential node in the
//! election directory, lists the children and orders them as its [`LatchLayout`] says.
//! First in line: it leads (a new *term*). Otherwise it watches only the node right
//! before its own (with `get`, which registers nothing on a node already gone) and looks
//! again when that node changes or goes: each departure wakes one participant, never
//! all of them. The leader watches the directory's children (one child watch), so it
//! learns at once when its own node is deleted or when a peer's node is ordered before
//! it (see [the counter's end](#the-sequence-counters-end)).
//!
//! A term ends when the latch relinquishes ([`LeaderLatch::relinquish`],
//! [`LeaderLatch::run_while_leader`]), is closed, or loses leadership. A term's node is
//! never reused: after any end the latch deletes it (when the session still holds it)
//! and joins again at the back of the line with a new node (unless closed). So the
//! fencing token of a term, its node's `czxid`, is larger than that of every term before
//! it, of any participant.
//!
//! **Lost-create protection**: each node name starts with a fresh unique tag (a guid, or
//! Curator's protected prefix `_c_<uuid>-`). When the reply to a create is lost with the
//! connection, the latch `sync`s the directory once reconnected (so the server it talks
//! to has caught up with the leader) and looks for its tag before creating again: a
//! create that applied is adopted, never duplicated.
//!
//! # Learning that leadership is lost
//! The current term's [`LeadershipGuard`] reports the first of ([`LeadershipLost`], the
//! vocabulary of [`crate::locks::lock::LockLost`]):
//! - `SessionExpired`: the session expired (its ephemeral node is gone);
//! - `NodeDeleted`: someone deleted the latch's node;
//! - `Preempted`: a node that the layout orders first appeared before ours (possible
//!   only with Curator or kazoo peers past the sequence counter's end);
//! - `Disconnected`: the connection has been down longer than the *disconnect grace*
//!   (default zero: a disconnection is a loss at once, Curator's default for `SUSPENDED`).
//!   While disconnected the latch cannot know whether the server has expired its session
//!   and let the next participant lead. Whatever the grace, the loss is reported no later
//!   than the earliest instant the server can expire the session as the client knows it
//!   (as for [`Lock`](crate::locks::lock) guards): any grace is safe;
//! - `Closed`: the handle was closed or authentication failed.
//!
//! Query it with [`LeadershipGuard::is_lost`] (no request), await (in `select!`, on any
//! executor) or [`wait`](crate::LossSignal::wait) on [`LeadershipGuard::lost`], or read
//! the events ([`LeaderLatch::events`]).
//!
//! # Sessions
//! With a plain [`ZooKeeper`] handle the latch ends when its session
//! does. With a [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper) it joins again in
//! each new session, as the lifecycle contract says for long-lived recipe objects, while
//! the guard of a term taken on an old session stays lost: a new term (a new guard, a
//! new token, a `BecameLeader` event) starts only after the latch has won the election
//! again in the new session. Nothing re-acquires silently.
//!
//! # Layouts
//! A latch excludes only participants that use the same layout on the same path (each
//! library ignores or misorders the others' nodes: Curator's `LeaderLatch` and
//! `LeaderSelector` on one path both lead). Pick one layout per path:
//!
//! | layout | node name | ordered by | excludes |
//! |---|---|---|---|
//! | [`Native`](LatchLayout::Native) | `candidate-<guid>-<seq>` | sequence number, only in-range numbers | [`crate::leadership::election::LeaderElection`] and native latches |
//! | [`CuratorLeaderLatch`](LatchLayout::CuratorLeaderLatch) | `_c_<uuid>-latch-<seq>` | Curator's order: the text after the last `latch-` (the whole name if none), every child counts | Curator 5.x `LeaderLatch` |
//! | [`KazooElection`](LatchLayout::KazooElection) | `<hex uuid>__lock__<seq>` | kazoo's order: the text of `-?\d{10}` after `__lock__`, only such names | kazoo 2.x `Election`, `Lock`, `WriteLock` |
//!
//! Each node holds the participant's id as UTF-8 (Curator's `LeaderLatch` id, kazoo's
//! identifier), readable with [`LeaderLatch::participants`].
//!
//! # The sequence counter's end
//! A sequential name is the directory's 32-bit child counter; after 2^31 creates the
//! 3.8 server repeats `2147483647` or hands out negative numbers. A latch never leads
//! with a node whose number is out of range ([`crate::nodes::SEQUENCE_LIMIT`]): it deletes
//! that node, and then restarts the counter by deleting the directory, which the server
//! allows only while it is empty (so it is safe against concurrent participants: one
//! that holds a node keeps the directory non-empty; one about to create gets `NoNode`
//! and creates the directory again). If the directory is not empty, the latch waits
//! (status [`LatchStatus::Exhausted`], one child watch, no node of its own) until it has
//! drained, then restarts it; it does not fail, as it is a long-lived participant, and it
//! never holds an out-of-range node. Native peers treat out-of-range nodes as not taking
//! part; Curator and kazoo order them by their text, so a negative number sorts first:
//! in those layouts the latch treats every node as its peers do (waits behind it), and a
//! leader that sees such a node appear before its own reports `Preempted`. kazoo objects
//! that made the directory once do not make it again: after a restart their next create
//! fails once with `NoNodeError`.
//!
//! # Cost
//! Joining is two requests (create, list); a waiting latch adds one `get` with a watch,
//! a new leader one listing with a child watch. Each departure wakes the one participant
//! behind it, and each join or departure wakes the leader (its child watch; one
//! listing). One watch is armed per latch at any time
//! ([`LeaderLatch::armed_watches`]); closing removes it and the node.
//!
//! # Guarantees
//! - At most one participant leads at a time among participants of one layout: a term
//!   runs from the moment the latch finds itself first to the moment it ends the term
//!   ([`LeadershipGuard::ended_at`]), which is as soon as its client hears of a cause
//!   (expiry, deletion, preemption) or the disconnect grace has passed, and terms of
//!   different participants never overlap (checked with real Curator and kazoo peers and
//!   under seeded faults). A thread holding the guard learns of the end a moment later.
//! - Fencing tokens (`czxid` of the term's node) strictly increase from term to term of
//!   this crate's latches, across participants, sessions and reconnections. (Past the
//!   counter's end a Curator or kazoo peer's term may carry a larger `czxid` than the
//!   next term; those libraries do not hand out tokens.)
//! - Each departure wakes at most the participant behind it, plus the leader.
//! - A wait that times out leaves nothing registered; a closed latch leaves no node and
//!   no watch behind (`ZooKeeper::live_contexts` is back to what it was).
//!
//! # Non-guarantees
//! - A leader paused (GC, SIGSTOP, swapped out) for longer than the session timeout may
//!   resume believing it leads before its guard hears the news: protect external
//!   resources with [`LeadershipGuard::token`].
//! - Fairness beyond join order; a latch that relinquishes joins again at the back.
//! - Exclusion with peers of another layout on the same path.

mod events;
mod guard;
mod layout;
mod run;
mod shared;
mod worker;

use crate::RetryPolicy;
pub use events::*;
pub use guard::*;
pub use layout::*;
use shared::*;
use worker::*;

use crate::asynchronous::owner::SharedTask;
use crate::error::LossReason;
use crate::events::{Buffer, EventQueue, EventStream};
use crate::lifecycle::following::{Change, Following};
use crate::lifecycle::Client;
use crate::nodes::{guid, sequence_in_range, sequence_of};
use crate::runtime::driver::on_driver_thread;
use crate::runtime::{block_on, until, StopSignal};
use crate::support::{
    check_base_path, create_dir_async, delete_in_background, members, withdraw_tagged_in_background,
};
use crate::{NodeOptions, RecipeError, Result};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Error, EventType, SessionState, Timeout, Watch, ZooKeeper};

// ---------------------------------------------------------------------------------------
// The latch.
// ---------------------------------------------------------------------------------------

/// What a latch is doing (see [`LeaderLatch::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LatchStatus {
    /// Creating its node (at start, after a term ended, in a new session), or waiting for
    /// the connection to do so.
    Joining,
    /// In line behind other participants.
    Waiting,
    /// Leading.
    Leading,
    /// The directory's sequence counter is at its end: waiting, without a node, for the
    /// directory to drain so the counter can restart (see the
    /// [module docs](super#the-sequence-counters-end)).
    Exhausted,
    /// Stopped: closed, or the session of a plain handle ended (see
    /// [`LeaderLatch::end_reason`]).
    Ended,
}

/// A latch's fixed settings.
struct Config {
    dir: String,
    id: String,
    layout: LatchLayout,
    grace: Duration,
    nodes: NodeOptions,
    retry: RetryPolicy,
}

/// How to start a [`LeaderLatch`]; from [`LeaderLatch::builder`].
#[derive(Debug, Clone)]
pub struct LatchBuilder {
    path: String,
    id: String,
    layout: LatchLayout,
    grace: Duration,
    nodes: NodeOptions,
    retry: RetryPolicy,
}

impl LatchBuilder {
    /// The participant's id, stored in its node (UTF-8) for
    /// [`participants`](LeaderLatch::participants), Curator's `getLeader` and kazoo's
    /// `contenders()`. Default: empty.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// The node layout (default [`LatchLayout::Native`]).
    pub fn layout(mut self, layout: LatchLayout) -> Self {
        self.layout = layout;
        self
    }

    /// How long a leader tolerates a dropped connection before it reports
    /// [`LeadershipLost::Disconnected`] (default zero; see the module docs).
    pub fn disconnect_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// ACL of the nodes, and whether the directory is a container.
    pub fn node_options(mut self, nodes: NodeOptions) -> Self {
        self.nodes = nodes;
        self
    }

    /// How the background task rides out failed requests: the pauses between tries
    /// (see [`RetryPolicy`]; its reconnect timeout is not used: a follower waits for the
    /// connection as long as it takes). Default: [`RetryPolicy::for_followers`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Starts the latch: it joins the election in the background (see
    /// [`LeaderLatch::await_leadership`]). Fails at once on a bad path or an id over the
    /// node data limit.
    pub fn build(self, client: impl Into<Client>) -> Result<LeaderLatch> {
        LeaderLatch::start_with(client.into(), self)
    }
}

/// A participant in a leader election (see the [module docs](self)). Dropping it (or
/// [`close`](Self::close)) leaves the election. `Send + Sync` and cheap to clone: clones
/// are one participant (one node, one task, one event stream); dropping the last clone
/// leaves the election, and `close` on any clone leaves it for all.
#[derive(Clone)]
pub struct LeaderLatch {
    shared: Arc<Shared>,
    events: EventStream<LeadershipEvent>,
    commands: Arc<Commands>,
    task: SharedTask,
    config: Arc<Config>,
    client: Client,
}

impl fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("LeaderLatch")
            .field("path", &self.config.dir)
            .field("layout", &self.config.layout)
            .field("status", &state.status)
            .field("node", &state.node)
            .finish()
    }
}

impl LeaderLatch {
    /// A builder for a latch on the election directory `path`.
    pub fn builder(path: &str) -> LatchBuilder {
        LatchBuilder {
            path: path.to_string(),
            id: String::new(),
            layout: LatchLayout::Native,
            grace: Duration::ZERO,
            nodes: NodeOptions::default(),
            retry: RetryPolicy::for_followers(),
        }
    }

    /// Starts a native-layout latch with an empty id on `path` (see
    /// [`builder`](Self::builder) for the options).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<LeaderLatch> {
        LeaderLatch::builder(path).build(client)
    }

    fn start_with(client: Client, builder: LatchBuilder) -> Result<LeaderLatch> {
        check_base_path(&builder.path)?;
        zookeeper_mt::validate_path(
            &format!("{}/{}", builder.path, builder.layout.new_tag()),
            true,
        )?;
        if builder.id.len() > zookeeper_mt::MAX_DATA_LEN {
            return Err(RecipeError::InvalidArgument(
                "the latch id is larger than a node's data may be",
            ));
        }
        let config = Arc::new(Config {
            dir: builder.path,
            id: builder.id,
            layout: builder.layout,
            grace: builder.grace,
            nodes: builder.nodes,
            retry: builder.retry,
        });
        let shared = Arc::new(Shared::new());
        let queue = EventQueue::new(LeadershipBuffer::default());
        let commands = Arc::new(Commands::default());
        let worker = Worker::new(
            client.clone(),
            Arc::clone(&config),
            Arc::clone(&shared),
            Arc::clone(&queue),
            Arc::clone(&commands),
        );
        let (panic_shared, panic_queue) = (Arc::clone(&shared), Arc::clone(&queue));
        let task = crate::runtime::spawn(
            format!("latch {}", config.dir),
            move |stop| worker.run(stop),
            move || {
                // A bug must not leave the latch looking alive: report it as the end. (The
                // dropped worker has refused further commands.)
                // The term's loss signals are woken after the state's lock.
                let mut wakes = crate::support::Wakes::new();
                let mut state = panic_shared.state.lock();
                if let Some(term) = state.term.take() {
                    term.finish_with(TermEnd::Lost(LeadershipLost::Closed), &mut wakes);
                }
                state.status = LatchStatus::Ended;
                state.end = Some(RecipeError::Lost(LossReason::WorkerFailed));
                drop(state);
                panic_shared.notify();
                panic_queue.close();
            },
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(LeaderLatch {
            shared,
            events: EventStream::new(queue),
            commands,
            task: SharedTask::new(task),
            config,
            client,
        })
    }

    /// The election directory.
    pub fn path(&self) -> &str {
        &self.config.dir
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// The node layout.
    pub fn layout(&self) -> LatchLayout {
        self.config.layout
    }

    /// Whether the latch leads now (no request).
    pub fn has_leadership(&self) -> bool {
        // A term whose session may have expired ends at this look (see `Term::end`).
        let term = self.shared.state.lock().term.clone();
        term.is_some_and(|term| term.end().is_none())
    }

    /// The current term's guard if the latch leads now.
    pub fn leadership(&self) -> Option<LeadershipGuard> {
        let term = self.shared.state.lock().term.clone()?;
        Some(LeadershipGuard {
            term,
            commands: Arc::clone(&self.commands),
        })
    }

    /// Waits until the latch leads and returns the term's guard: `Err(Timeout)` after
    /// `timeout` (the latch stays in line; the wait itself registers nothing), or the
    /// reason the latch stopped (`Lost(LossReason::Closed)`, a session error). Fails
    /// with `InvalidArgument` on the recipes' driver thread, where the latch's task runs
    /// (use [`await_leadership_async`](Self::await_leadership_async) there).
    pub fn await_leadership(&self, timeout: impl Into<Timeout>) -> Result<LeadershipGuard> {
        refuse_on_driver()?;
        block_on(self.await_leadership_async(timeout))
    }

    /// Async [`await_leadership`](Self::await_leadership), for any executor; no thread
    /// waits for it. Dropping the future leaves the latch in line, as a timed-out wait
    /// does.
    pub async fn await_leadership_async(
        &self,
        timeout: impl Into<Timeout>,
    ) -> Result<LeadershipGuard> {
        let deadline = timeout.into().deadline();
        let waiter = StateWaiter::new(&self.shared);
        let leading = poll_fn(|cx| {
            let mut state = self.shared.state.lock();
            if let Some(term) = state.term.clone() {
                return Poll::Ready(Ok(LeadershipGuard {
                    term,
                    commands: Arc::clone(&self.commands),
                }));
            }
            if state.status == LatchStatus::Ended {
                return Poll::Ready(Err(state
                    .end
                    .clone()
                    .unwrap_or(RecipeError::Lost(LossReason::Closed))));
            }
            waiter.register(&mut state, cx);
            Poll::Pending
        });
        until(deadline, leading)
            .await
            .unwrap_or(Err(RecipeError::Timeout))
    }

    /// Ends the current term if the latch leads (see [`LeadershipGuard::relinquish`]);
    /// returns whether it led. Fails with `InvalidArgument` on the recipes' driver
    /// thread (use [`relinquish_async`](Self::relinquish_async) there).
    pub fn relinquish(&self) -> Result<bool> {
        blocking_relinquish(&self.commands, None)
    }

    /// Async [`relinquish`](Self::relinquish), for any executor; no thread waits for it.
    /// Once polled, the request stands: dropping the future does not take it back.
    pub async fn relinquish_async(&self) -> Result<bool> {
        relinquish(&self.commands, None).await
    }

    /// What the latch is doing now.
    pub fn status(&self) -> LatchStatus {
        self.shared.state.lock().status
    }

    /// The path of the latch's current node, if it has one.
    pub fn node(&self) -> Option<String> {
        self.shared.state.lock().node.clone()
    }

    /// The latch's [`LeadershipEvent`]s, an [`EventStream`] (see the
    /// [stream contract](crate::events#the-stream-contract)).
    ///
    /// Bounded: at most 64 events are kept for a reader that does not read; beyond that
    /// the oldest complete term (its `BecameLeader` and `LostLeadership`) is dropped, so
    /// the last event always tells whether the latch leads. The stream ends when the
    /// latch stops (closed, or its plain handle's session ended).
    ///
    /// Clones read the same stream (each event goes to one reader); a clone outlives the
    /// latch, so the events of [`close`](Self::close) can still be read.
    pub fn events(&self) -> &EventStream<LeadershipEvent> {
        &self.events
    }

    /// The participants in the layout's order (the first leads, as the layout's peers
    /// see it), with their ids; read from the server (one listing, one read per node).
    /// Fails with `InvalidArgument` on the recipes' driver thread (use
    /// [`participants_async`](Self::participants_async) there).
    pub fn participants(&self) -> Result<Vec<Participant>> {
        refuse_on_driver()?;
        block_on(self.participants_async())
    }

    /// Async [`participants`](Self::participants), for any executor; no thread waits
    /// for it.
    pub async fn participants_async(&self) -> Result<Vec<Participant>> {
        let zk = self.client.session().zk;
        let children = match zk.get_children_async(&self.config.dir).await {
            Ok(children) => children,
            Err(Error::NoNode) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        let mut out = Vec::new();
        for name in self.config.layout.order(children) {
            let path = format!("{}/{name}", self.config.dir);
            match zk.get_async(&path).await {
                Ok((data, _)) => out.push(Participant {
                    id: String::from_utf8_lossy(&data).into_owned(),
                    node: path,
                }),
                Err(Error::NoNode) => {} // left meanwhile
                Err(error) => return Err(error.into()),
            }
        }
        Ok(out)
    }

    /// How many times the latch was woken by the watch on the node before its own (each
    /// departure wakes only the participant behind it).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakeups(&self) -> u64 {
        self.shared.wakeups.load(Ordering::Relaxed)
    }

    /// Watches the latch holds armed now: at most one.
    pub fn armed_watches(&self) -> usize {
        self.shared.armed.load(Ordering::Relaxed)
    }

    /// Why the latch stopped by itself (its plain handle's session ended, a request
    /// failed for good); `None` while it runs and after [`close`](Self::close).
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.shared.state.lock().end.clone()
    }

    /// Leaves the election: ends the term if leading ([`TermEnd::LatchClosed`]), deletes
    /// the node and removes the watch (a deletion the connection does not allow now goes
    /// on in the background until the session ends). The event stream ends. Dropping
    /// the latch does the same.
    ///
    /// `close` waits for the task's end (not where blocking is refused: there it returns
    /// at once); a drop asks the task to stop and returns at once, the task withdrawing
    /// the node on the driver.
    pub fn close(self) {
        self.task.stop_and_join();
    }
}

/// A participant of an election, from [`LeaderLatch::participants`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Participant {
    /// Its node's path.
    pub node: String,
    /// Its id (the node's data as UTF-8, invalid sequences replaced).
    pub id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn curator_order_is_text_after_the_last_latch() {
        let children = names(&[
            "_c_b-latch-0000000003",
            "_c_a-latch-0000000001",
            "_c_x-lock-0000000000", // a LeaderSelector node: sorts by its whole name
            "_c_n-latch--2147483648", // past the counter's end: '-' sorts first
            "_c_m-latch-2147483647",
            "0000000002",
        ]);
        let order = LatchLayout::CuratorLeaderLatch.order(children);
        assert_eq!(
            order,
            names(&[
                "_c_n-latch--2147483648",
                "_c_a-latch-0000000001",
                "0000000002", // a foreign name: its whole text is the key
                "_c_b-latch-0000000003",
                "_c_m-latch-2147483647",
                "_c_x-lock-0000000000",
            ])
        );
    }

    #[test]
    fn kazoo_order_counts_only_lock_nodes() {
        let children = names(&[
            "b__lock__0000000003",
            "a__lock__0000000001",
            "c__rlock__0000000000", // a read lock: not a contender for kazoo's Lock
            "d__lock__-2147483648", // 11 characters: matched, sorts first
            "e__lock__-000000005",  // `-` and nine digits: kazoo's pattern misses it
            "_c_f-latch-0000000000", // Curator's: ignored
            "g__lock__00000000002", // eleven digits: ignored
        ]);
        assert_eq!(
            LatchLayout::KazooElection.order(children),
            names(&[
                "d__lock__-2147483648",
                "a__lock__0000000001",
                "b__lock__0000000003"
            ])
        );
        assert_eq!(kazoo_sequence("x__lock__0000000007"), Some("0000000007"));
        assert_eq!(kazoo_sequence("é__lock__-0000000007"), Some("-0000000007"));
        assert_eq!(kazoo_sequence("__lock__"), None);
    }

    #[test]
    fn native_order_skips_out_of_range_and_foreign_nodes() {
        let children = names(&[
            "candidate-b-0000000002",
            "candidate-a-0000000005",
            "candidate-c--2147483648",
            "candidate-d-2147483647",
            "_c_e-latch-0000000000",
            "f__lock__0000000001",
        ]);
        assert_eq!(
            LatchLayout::Native.order(children),
            names(&["candidate-b-0000000002", "candidate-a-0000000005"])
        );
    }

    #[test]
    fn tags_are_unique_and_in_the_peers_format() {
        let native = LatchLayout::Native.new_tag();
        assert!(native.starts_with("candidate-") && native.ends_with('-'));
        let curator = LatchLayout::CuratorLeaderLatch.new_tag();
        assert_eq!(curator.len(), "_c_".len() + 36 + "-latch-".len());
        assert!(curator.starts_with("_c_") && curator.ends_with("-latch-"));
        let uuid = &curator[3..39];
        let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(groups, vec![8, 4, 4, 4, 12]);
        assert_eq!(uuid.as_bytes()[14], b'4');
        assert!(b"89ab".contains(&uuid.as_bytes()[19]));
        let kazoo = LatchLayout::KazooElection.new_tag();
        assert_eq!(kazoo.len(), 32 + "__lock__".len());
        assert!(kazoo[..32].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(kazoo, LatchLayout::KazooElection.new_tag());
    }

    #[test]
    fn java_string_order_is_utf16() {
        // U+FF5E (one UTF-16 unit) sorts after U+1F600 (a surrogate pair, 0xD83D...) in
        // Java, before it in UTF-8 byte order.
        assert_eq!(
            java_compare("\u{FF5E}", "\u{1F600}"),
            std::cmp::Ordering::Greater
        );
        assert!("\u{FF5E}" < "\u{1F600}");
    }

    #[test]
    fn event_buffer_is_bounded_and_keeps_the_latest_term() {
        let mut buffer = LeadershipBuffer::default();
        for term in 1..=1000 {
            buffer.push(LeadershipEvent::BecameLeader {
                term,
                token: term as i64,
                generation: 1,
            });
            buffer.push(LeadershipEvent::LostLeadership {
                term,
                end: TermEnd::Relinquished,
            });
        }
        buffer.push(LeadershipEvent::BecameLeader {
            term: 1001,
            token: 1001,
            generation: 1,
        });
        assert!(buffer.len() <= EVENT_CAPACITY);
        let all: Vec<_> = std::iter::from_fn(|| buffer.pop()).collect();
        assert!(matches!(
            all.last(),
            Some(LeadershipEvent::BecameLeader { term: 1001, .. })
        ));
        assert!(matches!(
            all.first(),
            Some(LeadershipEvent::BecameLeader { .. })
        ));
    }
}
