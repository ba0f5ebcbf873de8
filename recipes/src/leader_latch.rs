//! A leader latch: a long-lived participant in an election that knows, at every moment,
//! whether it leads; a leadership guard per term that reports the loss of leadership; a
//! stream of became-leader / lost-leadership events; and "run this while leader, then
//! relinquish". In three node layouts, so a Rust service can take part in the same
//! election as Apache Curator's `LeaderLatch` or kazoo's `Election`.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::leader_latch::{LatchLayout, LeaderLatch};
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let latch = LeaderLatch::builder("/app/leader")
//!     .id("worker-7")
//!     .layout(LatchLayout::CuratorLeaderLatch) // the Java services use Curator's LeaderLatch
//!     .start(&zk)?;
//! let guard = latch.await_leadership(Duration::from_secs(60))?;
//! while !guard.is_lost() {
//!     // ... lead; pass guard.token() to resources that accept a fencing token ...
//! #   break;
//! }
//! // Or: wait, run, then hand leadership to the next participant.
//! let done = latch.run_while_leader(Duration::from_secs(60), |guard| guard.token())?;
//! latch.close(); // leave the election
//! # let _ = done;
//! # Ok::<(), zookeeper_recipes::RecipeError>(())
//! ```
//!
//! # Protocol
//! The latch runs one thread of its own. It creates an ephemeral sequential node in the
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
//! vocabulary of [`crate::lock::LockLost`]):
//! - `SessionExpired`: the session expired (its ephemeral node is gone);
//! - `NodeDeleted`: someone deleted the latch's node;
//! - `Preempted`: a node that the layout orders first appeared before ours (possible
//!   only with Curator or kazoo peers past the sequence counter's end);
//! - `Disconnected`: the connection has been down longer than the *disconnect grace*
//!   (default zero: a disconnection is a loss at once, Curator's default for `SUSPENDED`).
//!   While disconnected the latch cannot know whether the server has expired its session
//!   and let the next participant lead. A grace below a third of the session timeout is
//!   still safe when the client detects the disconnection by its read timeout (two
//!   thirds of the session timeout);
//! - `Closed`: the handle was closed or authentication failed.
//!
//! Query it with [`LeadershipGuard::is_lost`] (no request), block on or `select!` over
//! [`LeadershipGuard::lost`], or read the events ([`LeaderLatch::events`]).
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
//! | [`Native`](LatchLayout::Native) | `candidate-<guid>-<seq>` | sequence number, only in-range numbers | [`crate::election::LeaderElection`] and native latches |
//! | [`CuratorLeaderLatch`](LatchLayout::CuratorLeaderLatch) | `_c_<uuid>-latch-<seq>` | Curator's order: the text after the last `latch-` (the whole name if none), every child counts | Curator 5.x `LeaderLatch` |
//! | [`KazooElection`](LatchLayout::KazooElection) | `<hex uuid>__lock__<seq>` | kazoo's order: the text of `-?\d{10}` after `__lock__`, only such names | kazoo 2.x `Election`, `Lock`, `WriteLock` |
//!
//! Each node holds the participant's id as UTF-8 (Curator's `LeaderLatch` id, kazoo's
//! identifier), readable with [`LeaderLatch::participants`].
//!
//! # The sequence counter's end
//! A sequential name is the directory's 32-bit child counter; after 2^31 creates the
//! 3.8 server repeats `2147483647` or hands out negative numbers. A latch never leads
//! with a node whose number is out of range ([`crate::util::SEQUENCE_LIMIT`]): it deletes
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

use crate::error::LossReason;
use crate::events::{receiving_methods, Buffer, EventQueue};
use crate::lifecycle::{Client, ConnectionEvent, ConnectionState, StateFeed};
use crate::support::{check_base_path, create_dir, finish_in_background, members, session_error};
use crate::util::{guid, sequence_in_range, sequence_of};
use crate::{NodeOptions, RecipeError, Result};
use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zookeeper::{CreateMode, Error, EventType, SessionState, Timeout, Watch, ZooKeeper};

// ---------------------------------------------------------------------------------------
// Layouts.
// ---------------------------------------------------------------------------------------

/// Name prefix of native nodes: the layout of [`crate::election::LeaderElection`].
const NATIVE_PREFIX: &str = "candidate-";
/// Curator `LeaderLatch`'s node name (`LOCK_NAME`), after the protected prefix.
const CURATOR_LATCH_NAME: &str = "latch-";
/// kazoo `Lock`'s node name (`_NODE_NAME`), after the hex uuid.
const KAZOO_LOCK_NAME: &str = "__lock__";
/// Curator's protected-mode prefix: `_c_<uuid>-` (`ProtectedUtils`).
const CURATOR_PROTECTED: &str = "_c_";

/// How a latch names and orders election nodes: whose participants it excludes (see the
/// [module docs](self#layouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LatchLayout {
    /// `candidate-<guid>-<seq>`, ordered by in-range sequence numbers: the nodes of
    /// [`crate::election::LeaderElection`], so latches and elections on one path exclude
    /// each other.
    #[default]
    Native,
    /// Apache Curator 5.x `LeaderLatch`: `_c_<uuid>-latch-<seq>` holding the id, every
    /// child ordered by the text after its last `latch-`.
    CuratorLeaderLatch,
    /// kazoo 2.x `Election` (a kazoo `Lock`): `<hex uuid>__lock__<seq>` holding the
    /// identifier; only names ending in `__lock__` and `-?\d{10}` count, ordered by that
    /// number's text.
    KazooElection,
}

impl LatchLayout {
    /// The name prefix of a new node, unique to it (lost-create protection).
    fn new_tag(self) -> String {
        match self {
            LatchLayout::Native => format!("{NATIVE_PREFIX}{}-", guid()),
            LatchLayout::CuratorLeaderLatch => {
                format!("{}{CURATOR_LATCH_NAME}", curator_protected_prefix())
            }
            LatchLayout::KazooElection => format!("{}{KAZOO_LOCK_NAME}", guid()),
        }
    }

    /// The contenders among `children`, in the order this layout's peers use: the first
    /// leads (for a native latch, out-of-range nodes do not take part).
    pub(crate) fn order(self, children: Vec<String>) -> Vec<String> {
        match self {
            LatchLayout::Native => members(children, &[NATIVE_PREFIX])
                .into_iter()
                .filter(|m| m.in_range())
                .map(|m| m.name)
                .collect(),
            LatchLayout::CuratorLeaderLatch => {
                let mut all = children;
                // Curator sorts every child by `String.compareTo` of its sort key (a
                // stable sort: ties keep the listing's order; here ties go by name).
                all.sort_by(|a, b| {
                    java_compare(curator_sort_key(a), curator_sort_key(b)).then_with(|| a.cmp(b))
                });
                all
            }
            LatchLayout::KazooElection => {
                let mut contenders: Vec<(String, String)> = children
                    .into_iter()
                    .filter_map(|name| Some((kazoo_sequence(&name)?.to_string(), name)))
                    .collect();
                contenders.sort();
                contenders.into_iter().map(|(_, name)| name).collect()
            }
        }
    }
}

/// Curator's sort key (`StandardLockInternalsDriver.standardFixForSorting`): the text
/// after the last `latch-`, or the whole name.
fn curator_sort_key(name: &str) -> &str {
    match name.rfind(CURATOR_LATCH_NAME) {
        Some(at) => &name[at + CURATOR_LATCH_NAME.len()..],
        None => name,
    }
}

/// Java's `String.compareTo`: UTF-16 code units, lexicographically.
fn java_compare(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// What kazoo's contender pattern `(?:__lock__)(-?\d{10})$` captures in `name`, if it
/// matches.
fn kazoo_sequence(name: &str) -> Option<&str> {
    let bytes = name.as_bytes();
    for len in [10, 11] {
        let Some(start) = bytes.len().checked_sub(len) else {
            continue;
        };
        let tail = &bytes[start..];
        let digits = if len == 11 {
            if tail[0] != b'-' {
                continue;
            }
            &tail[1..]
        } else {
            tail
        };
        if digits.iter().all(u8::is_ascii_digit) && bytes[..start].ends_with(b"__lock__") {
            // The tail is ASCII, so `start` is a character boundary.
            return Some(&name[start..]);
        }
    }
    None
}

/// A random version-4 UUID in its text form (`8-4-4-4-12` lowercase hex), as Java's
/// `UUID.randomUUID().toString()` writes it.
pub(crate) fn uuid_v4() -> String {
    let mut hex = guid().into_bytes();
    hex[12] = b'4';
    let variant = match hex[16] {
        b'0'..=b'9' => hex[16] - b'0',
        other => other - b'a' + 10,
    };
    hex[16] = b"89ab"[usize::from(variant & 3)];
    let hex = String::from_utf8(hex).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Curator's protected prefix with a fresh uuid: `_c_<uuid>-`.
pub(crate) fn curator_protected_prefix() -> String {
    format!("{CURATOR_PROTECTED}{}-", uuid_v4())
}

// ---------------------------------------------------------------------------------------
// Losses, term ends, events.
// ---------------------------------------------------------------------------------------

/// Why leadership was lost (the vocabulary of [`crate::lock::LockLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipLost {
    /// The session expired: the server deleted the latch's node.
    SessionExpired,
    /// The latch's node was deleted by someone else.
    NodeDeleted,
    /// A node that the layout orders first appeared before the latch's node (Curator or
    /// kazoo peers past the sequence counter's end).
    Preempted,
    /// The connection was down longer than the disconnect grace: the session may have
    /// expired without this client hearing of it yet.
    Disconnected,
    /// The handle was closed (or authentication failed): the session is gone.
    Closed,
}

impl LeadershipLost {
    fn as_str(self) -> &'static str {
        match self {
            LeadershipLost::SessionExpired => "leadership lost: session expired",
            LeadershipLost::NodeDeleted => "leadership lost: latch node deleted",
            LeadershipLost::Preempted => "leadership lost: another node is ordered first",
            LeadershipLost::Disconnected => {
                "leadership lost: disconnected longer than the grace period"
            }
            LeadershipLost::Closed => "leadership lost: handle closed",
        }
    }
}

impl fmt::Display for LeadershipLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a term of leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TermEnd {
    /// The latch relinquished it ([`LeaderLatch::relinquish`],
    /// [`LeaderLatch::run_while_leader`]) and joined again at the back.
    Relinquished,
    /// The latch was closed.
    LatchClosed,
    /// Leadership was lost.
    Lost(LeadershipLost),
}

/// What a latch's event stream reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// The latch leads: a new term began.
    BecameLeader {
        /// The term's number (1 for the latch's first term, one more for each).
        term: u64,
        /// The term's fencing token (its node's `czxid`).
        token: i64,
        /// The generation of the session it leads on.
        generation: u64,
    },
    /// The term ended: the latch no longer leads.
    LostLeadership {
        /// The term's number.
        term: u64,
        /// Why.
        end: TermEnd,
    },
}

/// Most events kept for a reader that does not read.
const EVENT_CAPACITY: usize = 64;

/// Queued leadership events, bounded: see [`LeadershipEvents`].
#[derive(Debug, Default)]
struct LeadershipBuffer {
    queue: VecDeque<LeadershipEvent>,
}

impl LeadershipBuffer {
    fn push(&mut self, event: LeadershipEvent) {
        if self.queue.len() >= EVENT_CAPACITY {
            // Terms alternate (BecameLeader n, LostLeadership n, ...): drop the oldest
            // complete term, which later events supersede.
            let pair = (1..self.queue.len()).find(|&i| {
                matches!(
                    (self.queue[i - 1], self.queue[i]),
                    (
                        LeadershipEvent::BecameLeader { term: a, .. },
                        LeadershipEvent::LostLeadership { term: b, .. },
                    ) if a == b
                )
            });
            match pair {
                Some(i) => {
                    self.queue.drain(i - 1..=i);
                }
                None => {
                    self.queue.pop_front();
                }
            }
        }
        self.queue.push_back(event);
    }
}

impl Buffer for LeadershipBuffer {
    type Item = LeadershipEvent;

    fn pop(&mut self) -> Option<LeadershipEvent> {
        self.queue.pop_front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// A latch's stream of [`LeadershipEvent`]s: read it blocking
/// ([`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout), [`iter`](Self::iter)),
/// without waiting ([`try_recv`](Self::try_recv)) or as a future ([`next`](Self::next)).
///
/// Bounded: at most 64 events are kept for a reader that does not read; beyond that the
/// oldest complete term (its `BecameLeader` and `LostLeadership`) is dropped, so the
/// last event always tells whether the latch leads. The stream ends when the latch
/// stops (closed, or its plain handle's session ended).
///
/// Clones read the same stream (each event goes to one reader); a clone outlives the
/// latch, so the events of [`LeaderLatch::close`] can still be read.
#[derive(Clone)]
pub struct LeadershipEvents {
    queue: Arc<EventQueue<LeadershipBuffer>>,
}

impl fmt::Debug for LeadershipEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeadershipEvents")
            .field("queued", &self.queue.len())
            .finish()
    }
}

impl LeadershipEvents {
    receiving_methods!(LeadershipEvent);
}

// ---------------------------------------------------------------------------------------
// Terms and guards.
// ---------------------------------------------------------------------------------------

/// One term of leadership, shared by its guards and the latch thread.
struct Term {
    number: u64,
    token: i64,
    node: String,
    generation: u64,
    inner: Mutex<TermInner>,
}

#[derive(Default)]
struct TermInner {
    end: Option<TermEnd>,
    ended_at: Option<Instant>,
    /// Loss receivers; dropped (disconnecting them) when the term ends without a loss.
    subscribers: Vec<Sender<LeadershipLost>>,
}

impl Term {
    /// Ends the term (the first end counts); tells the loss receivers.
    fn finish(&self, end: TermEnd) -> bool {
        let mut inner = self.inner.lock();
        if inner.end.is_some() {
            return false;
        }
        inner.end = Some(end);
        inner.ended_at = Some(Instant::now());
        let subscribers = std::mem::take(&mut inner.subscribers);
        if let TermEnd::Lost(reason) = end {
            for subscriber in subscribers {
                let _ = subscriber.try_send(reason);
            }
        }
        true
    }

    fn end(&self) -> Option<TermEnd> {
        self.inner.lock().end
    }
}

/// Requests to the latch thread.
enum Command {
    /// End the term numbered so (any term if `None`) and join again at the back; then
    /// answer whether a term ended.
    Relinquish {
        term: Option<u64>,
        done: Sender<bool>,
    },
}

/// One term of leadership (see the [module docs](self)): a cheap handle, cloned freely.
/// Dropping it changes nothing: the latch leads until the term ends (relinquished,
/// closed or lost).
#[derive(Clone)]
pub struct LeadershipGuard {
    term: Arc<Term>,
    commands: Sender<Command>,
}

impl fmt::Debug for LeadershipGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeadershipGuard")
            .field("term", &self.term.number)
            .field("token", &self.term.token)
            .field("node", &self.term.node)
            .field("end", &self.term.end())
            .finish()
    }
}

impl LeadershipGuard {
    /// The term's number within its latch (1, 2, ...).
    pub fn term(&self) -> u64 {
        self.term.number
    }

    /// The fencing token: the `czxid` of the term's node. It is larger than the token of
    /// every earlier term of any participant of the election, so a resource that
    /// remembers the largest token it has seen can refuse a stale leader.
    pub fn token(&self) -> i64 {
        self.term.token
    }

    /// The path of the term's node.
    pub fn node(&self) -> &str {
        &self.term.node
    }

    /// The generation of the session the term was won on (always 1 on a plain handle).
    pub fn generation(&self) -> u64 {
        self.term.generation
    }

    /// Whether the term still lasts (not relinquished, closed or lost). No request.
    pub fn is_leader(&self) -> bool {
        self.term.end().is_none()
    }

    /// Whether leadership is known to be lost (see [`LeadershipLost`]). No request.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why leadership was lost, if it was.
    pub fn lost_reason(&self) -> Option<LeadershipLost> {
        match self.term.end() {
            Some(TermEnd::Lost(reason)) => Some(reason),
            _ => None,
        }
    }

    /// How the term ended, if it has.
    pub fn end(&self) -> Option<TermEnd> {
        self.term.end()
    }

    /// When the latch ended the term (learned of the loss, relinquished, or closed), if
    /// it has: the end of the critical section as the latch saw it, which a thread
    /// holding the guard may learn of a little later.
    pub fn ended_at(&self) -> Option<Instant> {
        self.term.inner.lock().ended_at
    }

    /// `Ok` while the term lasts, else `RecipeError::Lost` (for `?` before acting).
    pub fn check(&self) -> Result<()> {
        match self.term.end() {
            None => Ok(()),
            Some(TermEnd::Lost(reason)) => Err(RecipeError::Lost(LossReason::Leadership(reason))),
            Some(TermEnd::Relinquished) => Err(RecipeError::Lost(LossReason::Relinquished)),
            Some(TermEnd::LatchClosed) => Err(RecipeError::Lost(LossReason::Closed)),
        }
    }

    /// A receiver that gets the reason once leadership is lost (at once if it already
    /// is). If the term ends without a loss (relinquished, latch closed), the receiver
    /// disconnects instead (`recv` fails). Each call makes an independent receiver; use it
    /// with `recv_timeout` or `crossbeam_channel::select!`.
    pub fn lost(&self) -> Receiver<LeadershipLost> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.term.inner.lock();
        match inner.end {
            Some(TermEnd::Lost(reason)) => {
                let _ = sender.try_send(reason);
            }
            Some(_) => {}
            None => inner.subscribers.push(sender),
        }
        receiver
    }

    /// Ends this term if it still lasts: the latch deletes the term's node (the next
    /// participant leads) and joins again at the back. Returns whether the term was
    /// still current. Waits for the latch thread to do it.
    pub fn relinquish(&self) -> Result<bool> {
        relinquish(&self.commands, Some(self.term.number))
    }
}

fn relinquish(commands: &Sender<Command>, term: Option<u64>) -> Result<bool> {
    let (done, answer) = crossbeam_channel::bounded(1);
    if commands.send(Command::Relinquish { term, done }).is_err() {
        return Ok(false); // the latch has stopped: no term left
    }
    Ok(answer.recv().unwrap_or(false))
}

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
    /// [module docs](self#the-sequence-counters-end)).
    Exhausted,
    /// Stopped: closed, or the session of a plain handle ended (see
    /// [`LeaderLatch::end_reason`]).
    Ended,
}

/// What the latch thread shares with the latch's owner.
struct Shared {
    state: Mutex<SharedState>,
    changed: Condvar,
    wakeups: AtomicU64,
    armed: AtomicUsize,
}

struct SharedState {
    status: LatchStatus,
    term: Option<Arc<Term>>,
    node: Option<String>,
    end: Option<RecipeError>,
}

/// A latch's fixed settings.
struct Config {
    dir: String,
    id: String,
    layout: LatchLayout,
    grace: Duration,
    nodes: NodeOptions,
}

/// How to start a [`LeaderLatch`]; from [`LeaderLatch::builder`].
#[derive(Debug, Clone)]
pub struct LatchBuilder {
    path: String,
    id: String,
    layout: LatchLayout,
    grace: Duration,
    nodes: NodeOptions,
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

    /// Starts the latch: it joins the election in the background (see
    /// [`LeaderLatch::await_leadership`]). Fails at once on a bad path or an id over the
    /// node data limit.
    pub fn start(self, client: impl Into<Client>) -> Result<LeaderLatch> {
        LeaderLatch::start_with(client.into(), self)
    }

    /// Joins, waits up to `timeout` for leadership, runs `work` as leader, then leaves
    /// the election (the next participant leads), like kazoo's `Election.run`. On a
    /// timeout the latch leaves too (`Err(Timeout)`): nothing stays registered.
    pub fn run_once<T>(
        self,
        client: impl Into<Client>,
        timeout: Duration,
        work: impl FnOnce(&LeadershipGuard) -> T,
    ) -> Result<T> {
        let latch = self.start(client)?;
        let guard = latch.await_leadership(timeout);
        let result = guard.map(|guard| work(&guard));
        latch.close();
        result
    }
}

/// A participant in a leader election (see the [module docs](self)). Dropping it (or
/// [`close`](Self::close)) leaves the election. `Send + Sync`.
pub struct LeaderLatch {
    shared: Arc<Shared>,
    events: LeadershipEvents,
    commands: Sender<Command>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
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
        }
    }

    /// Starts a native-layout latch with an empty id on `path` (see
    /// [`builder`](Self::builder) for the options).
    pub fn start(client: impl Into<Client>, path: &str) -> Result<LeaderLatch> {
        LeaderLatch::builder(path).start(client)
    }

    fn start_with(client: Client, builder: LatchBuilder) -> Result<LeaderLatch> {
        check_base_path(&builder.path)?;
        zookeeper::validate_path(
            &format!("{}/{}", builder.path, builder.layout.new_tag()),
            true,
        )?;
        if builder.id.len() > zookeeper::MAX_DATA_LEN {
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
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(SharedState {
                status: LatchStatus::Joining,
                term: None,
                node: None,
                end: None,
            }),
            changed: Condvar::new(),
            wakeups: AtomicU64::new(0),
            armed: AtomicUsize::new(0),
        });
        let queue = EventQueue::new(LeadershipBuffer::default());
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let worker = Worker::new(
            client.clone(),
            Arc::clone(&config),
            Arc::clone(&shared),
            Arc::clone(&queue),
            command_rx,
            stop_rx,
        );
        let (guard_shared, guard_queue) = (Arc::clone(&shared), Arc::clone(&queue));
        let thread = std::thread::Builder::new()
            .name(format!("zk-latch {}", config.dir))
            .spawn(move || {
                // A bug must not leave the latch looking alive: report it as the end.
                let run = std::panic::AssertUnwindSafe(move || worker.run());
                if std::panic::catch_unwind(run).is_err() {
                    let mut state = guard_shared.state.lock();
                    if let Some(term) = state.term.take() {
                        term.finish(TermEnd::Lost(LeadershipLost::Closed));
                    }
                    state.status = LatchStatus::Ended;
                    state.end = Some(RecipeError::Lost(LossReason::WorkerFailed));
                    drop(state);
                    guard_shared.changed.notify_all();
                    guard_queue.close();
                }
            })
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(LeaderLatch {
            shared,
            events: LeadershipEvents { queue },
            commands,
            stop: Some(stop),
            thread: Some(thread),
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
        self.shared.state.lock().term.is_some()
    }

    /// The current term's guard if the latch leads now.
    pub fn leadership(&self) -> Option<LeadershipGuard> {
        let term = self.shared.state.lock().term.clone()?;
        Some(LeadershipGuard {
            term,
            commands: self.commands.clone(),
        })
    }

    /// Waits until the latch leads and returns the term's guard: `Err(Timeout)` after
    /// `timeout` (the latch stays in line; the wait itself registers nothing), or the
    /// reason the latch stopped (`Lost(LossReason::Closed)`, a session error).
    pub fn await_leadership(&self, timeout: impl Into<Timeout>) -> Result<LeadershipGuard> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = crate::events::deadline_after(timeout);
        let mut state = self.shared.state.lock();
        loop {
            if let Some(term) = state.term.clone() {
                return Ok(LeadershipGuard {
                    term,
                    commands: self.commands.clone(),
                });
            }
            if state.status == LatchStatus::Ended {
                return Err(state
                    .end
                    .clone()
                    .unwrap_or(RecipeError::Lost(LossReason::Closed)));
            }
            if self
                .shared
                .changed
                .wait_until(&mut state, deadline)
                .timed_out()
                && state.term.is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// Waits up to `timeout` for leadership, runs `work` with the term's guard, then
    /// relinquishes the term (if it still lasts): the next participant leads and this
    /// latch joins again at the back. `work` should watch the guard
    /// ([`is_lost`](LeadershipGuard::is_lost), [`lost`](LeadershipGuard::lost)) and stop
    /// acting once leadership is lost; it is not interrupted.
    pub fn run_while_leader<T>(
        &self,
        timeout: Duration,
        work: impl FnOnce(&LeadershipGuard) -> T,
    ) -> Result<T> {
        let guard = self.await_leadership(timeout)?;
        let result = work(&guard);
        guard.relinquish()?;
        Ok(result)
    }

    /// Ends the current term if the latch leads (see [`LeadershipGuard::relinquish`]);
    /// returns whether it led.
    pub fn relinquish(&self) -> Result<bool> {
        relinquish(&self.commands, None)
    }

    /// What the latch is doing now.
    pub fn status(&self) -> LatchStatus {
        self.shared.state.lock().status
    }

    /// The path of the latch's current node, if it has one.
    pub fn node(&self) -> Option<String> {
        self.shared.state.lock().node.clone()
    }

    /// The latch's events (see [`LeadershipEvents`]).
    pub fn events(&self) -> &LeadershipEvents {
        &self.events
    }

    /// The participants in the layout's order (the first leads, as the layout's peers
    /// see it), with their ids; read from the server (one listing, one read per node).
    pub fn participants(&self) -> Result<Vec<Participant>> {
        let zk = self.client.session().zk;
        let children = match zk.get_children(&self.config.dir) {
            Ok(children) => children,
            Err(Error::NoNode) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        let mut out = Vec::new();
        for name in self.config.layout.order(children) {
            let path = format!("{}/{name}", self.config.dir);
            match zk.get(&path) {
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
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LeaderLatch {
    fn drop(&mut self) {
        self.shutdown();
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

// ---------------------------------------------------------------------------------------
// The latch thread.
// ---------------------------------------------------------------------------------------

/// The longest pause between retries after a failed request.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the latch's one watch is on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// The node before ours (a name in the directory).
    Predecessor(String),
    /// The directory's children (the leader's watch, or waiting for it to drain).
    Children,
}

struct Armed {
    watch: Watch,
    target: Target,
}

/// Our node in the directory.
struct OwnNode {
    name: String,
    token: i64,
}

/// Whether the thread goes on, or stops for good with an error.
enum Flow {
    Go,
    Stop(RecipeError),
}

struct Worker {
    config: Arc<Config>,
    client: Client,
    feed: StateFeed,
    zk: ZooKeeper,
    generation: u64,
    shared: Arc<Shared>,
    out: Arc<EventQueue<LeadershipBuffer>>,
    commands: Receiver<Command>,
    stop: Receiver<()>,
    /// Whether requests can be made now.
    connected: bool,
    /// Since when the connection is down (for the grace).
    disconnected_since: Option<Instant>,
    /// `sync` before the next listing (a recovery read after a reconnection).
    sync_first: bool,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// Work to do once connected.
    dirty: bool,
    node: Option<OwnNode>,
    /// The tag of a create whose reply was lost: its node may exist.
    creating: Option<String>,
    /// Our nodes of ended terms, to delete (full paths).
    stale: Vec<String>,
    /// The counter is at its end: wait for the directory to drain.
    exhausted: bool,
    watch: Option<Armed>,
    term: Option<Arc<Term>>,
    terms: u64,
}

impl Worker {
    fn new(
        client: Client,
        config: Arc<Config>,
        shared: Arc<Shared>,
        out: Arc<EventQueue<LeadershipBuffer>>,
        commands: Receiver<Command>,
        stop: Receiver<()>,
    ) -> Worker {
        // Subscribe before the first request, so no state change is missed.
        let feed = client.feed();
        let session = client.session();
        Worker {
            config,
            client,
            feed,
            zk: session.zk,
            generation: session.generation,
            shared,
            out,
            commands,
            stop,
            connected: false,
            disconnected_since: None,
            sync_first: false,
            retry_at: None,
            backoff: Duration::from_millis(10),
            dirty: true,
            node: None,
            creating: None,
            stale: Vec::new(),
            exhausted: false,
            watch: None,
            term: None,
            terms: 0,
        }
    }

    fn run(mut self) {
        let end = self.follow();
        // Leave: end the term, take the watch off, delete our nodes.
        let term_end = match &end {
            None => TermEnd::LatchClosed,
            Some(_) => TermEnd::Lost(LeadershipLost::Closed),
        };
        self.end_term(term_end, true);
        self.unwatch();
        self.leave();
        if let Some(reason) = &end {
            log::debug!("recipes: latch on {} stopped: {reason}", self.config.dir);
        }
        {
            let mut state = self.shared.state.lock();
            state.status = LatchStatus::Ended;
            state.node = None;
            state.end = end;
        }
        self.shared.changed.notify_all();
        self.out.close();
    }

    fn stop_requested(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// The main loop: `None` when asked to stop, else why the latch stopped by itself.
    fn follow(&mut self) -> Option<RecipeError> {
        loop {
            if self.stop_requested() {
                return None;
            }
            let (states, ended) = self.feed.drain();
            for event in states {
                if let Flow::Stop(error) = self.on_state(event) {
                    return Some(error);
                }
            }
            if ended {
                self.lose(LeadershipLost::Closed, false);
                return Some(RecipeError::ZooKeeper(Error::Closed));
            }
            self.collect_fired();
            self.check_grace();
            while let Ok(command) = self.commands.try_recv() {
                self.on_command(command);
            }
            if self.connected && self.dirty && self.retry_at.map_or(true, |at| Instant::now() >= at)
            {
                self.retry_at = None;
                if let Flow::Stop(error) = self.step() {
                    return Some(error);
                }
                self.publish_status();
                if self.dirty && self.retry_at.is_none() {
                    continue; // more to do at once (a stop request is checked first)
                }
            }
            self.publish_status();
            self.wait();
        }
    }

    /// Blocks until something to handle: a stop, a state change, a command, the watch,
    /// the grace deadline or a retry.
    fn wait(&self) {
        let mut select = Select::new();
        select.recv(&self.stop);
        self.feed.add_to(&mut select);
        select.recv(&self.commands);
        if let Some(armed) = &self.watch {
            select.recv(armed.watch.receiver());
        }
        let grace = match (&self.term, self.disconnected_since) {
            (Some(_), Some(since)) => Some(since + self.config.grace),
            _ => None,
        };
        let retry = match (self.connected && self.dirty, self.retry_at) {
            (true, Some(at)) => Some(at),
            (true, None) => Some(Instant::now()),
            _ => None,
        };
        let deadline = match (grace, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match deadline {
            Some(at) => {
                let _ = select.ready_deadline(at);
            }
            None => {
                select.ready();
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Connection states, commands, the watch.
    // -----------------------------------------------------------------------------------

    fn on_state(&mut self, event: ConnectionEvent) -> Flow {
        if event.generation < self.generation {
            return Flow::Go; // about a session already replaced
        }
        match event.state {
            ConnectionState::Connected => {
                self.connected = true;
                self.disconnected_since = None;
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly => {
                // A read-only server cannot take our writes: as good as disconnected.
                self.connected = false;
                self.disconnected_since.get_or_insert_with(Instant::now);
                self.check_grace();
            }
            ConnectionState::Reconnected => {
                self.connected = true;
                self.disconnected_since = None;
                // Watches survived; look again (after catching up) at what changed.
                self.sync_first = true;
                self.dirty = true;
                self.retry_at = None;
            }
            ConnectionState::Lost => {
                self.connected = false;
                self.disconnected_since = None;
                let state = self.zk.state();
                let reason = match state {
                    SessionState::Expired => LeadershipLost::SessionExpired,
                    _ => LeadershipLost::Closed,
                };
                // The session's nodes and watches went with it.
                self.lose(reason, false);
                self.forget_watch();
                self.node = None;
                self.creating = None;
                self.stale.clear();
                if !self.client.renews_sessions() {
                    return Flow::Stop(if state.is_terminal() {
                        session_error(state)
                    } else {
                        RecipeError::ZooKeeper(Error::Closed)
                    });
                }
            }
            ConnectionState::NewSession => {
                let session = self.client.session();
                if session.generation <= self.generation {
                    return Flow::Go;
                }
                // Normally done on `Lost` already: the old session's nodes are gone.
                self.lose(LeadershipLost::SessionExpired, false);
                self.node = None;
                self.creating = None;
                self.stale.clear();
                self.forget_watch();
                self.zk = session.zk;
                self.generation = session.generation;
                self.connected = true;
                self.disconnected_since = None;
                self.sync_first = false;
                self.dirty = true;
                self.retry_at = None;
            }
        }
        Flow::Go
    }

    /// Reports a disconnection that outlasted the grace.
    fn check_grace(&mut self) {
        if let (Some(_), Some(since)) = (&self.term, self.disconnected_since) {
            if since.elapsed() >= self.config.grace {
                self.lose(LeadershipLost::Disconnected, true);
            }
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Relinquish { term, done } => {
                let current = self.term.as_ref().map(|t| t.number);
                let ended = current.is_some() && (term.is_none() || term == current);
                if ended {
                    self.end_term(TermEnd::Relinquished, true);
                    if self.connected {
                        // Hand over now; the next step joins again at the back.
                        self.delete_stale();
                    }
                    self.dirty = true;
                    self.publish_status();
                }
                let _ = done.send(ended);
            }
        }
    }

    /// Takes the watch's event if it fired.
    fn collect_fired(&mut self) {
        let Some(armed) = &self.watch else {
            return;
        };
        let event = match armed.watch.try_get() {
            Ok(None) => return,
            Ok(Some(event)) => Some(event),
            Err(_) => None, // the handle closed: the state feed reports it
        };
        let armed = self.watch.take();
        self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        let Some(event) = event else {
            return;
        };
        if event.event_type == EventType::Session {
            return; // the session ended: the state feed reports it
        }
        if matches!(
            armed,
            Some(Armed {
                target: Target::Predecessor(_),
                ..
            })
        ) {
            self.shared.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        self.dirty = true;
    }

    /// Replaces the watch (the old one is taken off).
    fn set_watch(&mut self, watch: Watch, target: Target) {
        self.unwatch();
        self.watch = Some(Armed { watch, target });
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the watch off (locally: the server's copy fires into nothing).
    fn unwatch(&mut self) {
        if let Some(armed) = self.watch.take() {
            let _ = self.zk.remove_watch(&armed.watch);
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Drops the watch of a session that ended (the client freed it already).
    fn forget_watch(&mut self) {
        if self.watch.take().is_some() {
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    // -----------------------------------------------------------------------------------
    // Terms.
    // -----------------------------------------------------------------------------------

    fn elect(&mut self, token: i64, node: String) {
        self.terms += 1;
        let term = Arc::new(Term {
            number: self.terms,
            token,
            node,
            generation: self.generation,
            inner: Mutex::default(),
        });
        self.term = Some(Arc::clone(&term));
        self.shared.state.lock().term = Some(term);
        self.out.update(|b| {
            b.push(LeadershipEvent::BecameLeader {
                term: self.terms,
                token,
                generation: self.generation,
            })
        });
        self.publish_status();
    }

    /// Ends the current term, if any. Its node is never reused: if the session may still
    /// hold it (`node_may_live`), it is deleted once connected; else it went with the
    /// session (or someone deleted it).
    fn end_term(&mut self, end: TermEnd, node_may_live: bool) {
        let Some(term) = self.term.take() else {
            return;
        };
        self.shared.state.lock().term = None;
        term.finish(end);
        self.out.update(|b| {
            b.push(LeadershipEvent::LostLeadership {
                term: term.number,
                end,
            })
        });
        if let Some(node) = self.node.take() {
            if node_may_live {
                self.stale
                    .push(format!("{}/{}", self.config.dir, node.name));
            }
        }
        if matches!(
            self.watch,
            Some(Armed {
                target: Target::Children,
                ..
            })
        ) {
            self.unwatch();
        }
        self.shared.changed.notify_all();
    }

    /// Reports a loss of leadership (if leading). `node_may_live`: the session may still
    /// hold our node (it is deleted once connected); else it is gone with the session.
    fn lose(&mut self, reason: LeadershipLost, node_may_live: bool) {
        if self.term.is_none() {
            return;
        }
        log::info!("recipes: latch on {}: {reason}", self.config.dir);
        self.end_term(TermEnd::Lost(reason), node_may_live);
        self.dirty = true;
    }

    fn publish_status(&self) {
        let status = if self.term.is_some() {
            LatchStatus::Leading
        } else if self.exhausted {
            LatchStatus::Exhausted
        } else if self.node.is_some() {
            LatchStatus::Waiting
        } else {
            LatchStatus::Joining
        };
        let node = self
            .node
            .as_ref()
            .map(|n| format!("{}/{}", self.config.dir, n.name));
        let mut state = self.shared.state.lock();
        if state.status != status || state.node != node {
            state.status = status;
            state.node = node;
            drop(state);
            self.shared.changed.notify_all();
        }
    }

    // -----------------------------------------------------------------------------------
    // The steps.
    // -----------------------------------------------------------------------------------

    /// After a failed request: retry later, or stop for an error that retrying cannot
    /// cure.
    fn failed(&mut self, error: Error) -> Flow {
        self.dirty = true;
        if error.is_retryable() {
            // The state feed may not show the loss yet: retry after a pause.
            self.retry_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            Flow::Go
        } else if error.is_session_terminal() {
            // `Lost` is on its way through the state feed.
            self.connected = false;
            Flow::Go
        } else {
            Flow::Stop(error.into())
        }
    }

    /// One round of work while connected: delete old nodes, join, find our place.
    fn step(&mut self) -> Flow {
        self.dirty = false;
        if !self.delete_stale() {
            return self.failed(Error::ConnectionLoss);
        }
        if self.node.is_none() {
            if self.exhausted {
                return self.restart_counter();
            }
            match self.join() {
                Flow::Go => {}
                stop => return stop,
            }
            if self.node.is_none() {
                return Flow::Go; // try again later (dirty is set)
            }
        }
        let flow = self.decide();
        if matches!(flow, Flow::Go) && !self.dirty {
            self.backoff = Duration::from_millis(10);
        }
        flow
    }

    /// Deletes our nodes of ended terms; `false` if the connection failed meanwhile.
    fn delete_stale(&mut self) -> bool {
        while let Some(path) = self.stale.last() {
            match self.zk.delete(path, None) {
                Ok(()) | Err(Error::NoNode) => {
                    self.stale.pop();
                }
                Err(error) if error.is_retryable() || error.is_session_terminal() => {
                    return false;
                }
                Err(error) => {
                    log::warn!("recipes: latch cannot delete {path}: {error}");
                    self.stale.pop();
                }
            }
        }
        true
    }

    /// Creates our node (or adopts the one a create with a lost reply made).
    fn join(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        if let Some(tag) = self.creating.take() {
            // The last create's outcome is unknown: catch up with the leader, then look
            // for its tag. Found: it applied (adopt it). Not found: it did not.
            if let Err(error) = self.zk.sync(&dir) {
                self.creating = Some(tag);
                return self.failed(error);
            }
            let children = match self.zk.get_children(&dir) {
                Ok(children) => children,
                Err(Error::NoNode) => Vec::new(),
                Err(error) => {
                    self.creating = Some(tag);
                    return self.failed(error);
                }
            };
            if let Some(name) = children.into_iter().find(|c| c.starts_with(&tag)) {
                let path = format!("{dir}/{name}");
                match self.zk.exists(&path) {
                    Ok(Some(stat)) => return self.adopt(name, stat.czxid),
                    Ok(None) => {} // gone again (deleted): create anew
                    Err(error) => {
                        self.creating = Some(tag);
                        return self.failed(error);
                    }
                }
            }
        }
        let tag = self.config.layout.new_tag();
        match self.zk.create2(
            &format!("{dir}/{tag}"),
            self.config.id.as_bytes(),
            zookeeper::CreateOptions::new(CreateMode::EphemeralSequential)
                .with_acl(self.config.nodes.acl_list()),
        ) {
            Ok((path, stat)) => {
                let name = path.rsplit('/').next().unwrap_or_default().to_string();
                self.adopt(name, stat.czxid)
            }
            Err(Error::NoNode) => {
                if let Err(error) = create_dir(&self.zk, &dir, &self.config.nodes) {
                    return self.failed(error);
                }
                self.dirty = true;
                Flow::Go
            }
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(tag);
                }
                self.failed(error)
            }
        }
    }

    /// Takes `name` (just created, or found by its tag) as our node, unless its number
    /// is past the counter's end.
    fn adopt(&mut self, name: String, token: i64) -> Flow {
        match sequence_of(&name) {
            Some(seq) if sequence_in_range(seq) => {
                self.node = Some(OwnNode { name, token });
                Flow::Go
            }
            seq => {
                // Never take part with a number that cannot be ordered: remove the node
                // and restart the directory's counter.
                log::warn!(
                    "recipes: latch on {}: node {name} has sequence {seq:?}, past the \
                     counter's end; restarting the directory",
                    self.config.dir
                );
                self.stale.push(format!("{}/{name}", self.config.dir));
                self.exhausted = true;
                self.dirty = true;
                Flow::Go
            }
        }
    }

    /// Restarts the directory's sequence counter by deleting the directory (only
    /// possible while it is empty), or waits for it to drain.
    fn restart_counter(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        match self.zk.delete(&dir, None) {
            Ok(()) | Err(Error::NoNode) => {
                log::info!("recipes: latch restarted the sequence counter of {dir}");
                self.exhausted = false;
                if let Err(error) = create_dir(&self.zk, &dir, &self.config.nodes) {
                    return self.failed(error);
                }
                self.dirty = true;
                Flow::Go
            }
            Err(Error::NotEmpty) => {
                if matches!(
                    self.watch,
                    Some(Armed {
                        target: Target::Children,
                        ..
                    })
                ) {
                    return Flow::Go; // still waiting for a change
                }
                match self.zk.get_children_watch(&dir) {
                    Ok((children, watch)) => {
                        self.set_watch(watch, Target::Children);
                        if children.is_empty() {
                            self.dirty = true; // drained meanwhile
                        }
                        Flow::Go
                    }
                    Err(Error::NoNode) => {
                        self.dirty = true;
                        Flow::Go
                    }
                    Err(error) => self.failed(error),
                }
            }
            Err(error) => self.failed(error),
        }
    }

    /// Lists the participants and acts on our place: lead, or watch the node before ours.
    fn decide(&mut self) -> Flow {
        let dir = self.config.dir.clone();
        loop {
            let Some(own) = self.node.as_ref().map(|n| n.name.clone()) else {
                return Flow::Go;
            };
            if self.sync_first {
                if let Err(error) = self.zk.sync(&dir) {
                    return self.failed(error);
                }
                self.sync_first = false;
            }
            // The leader keeps a child watch on the directory; the others list without.
            let leader_watch = self.term.is_some()
                && !matches!(
                    self.watch,
                    Some(Armed {
                        target: Target::Children,
                        ..
                    })
                );
            let listing = if leader_watch {
                self.zk
                    .get_children_watch(&dir)
                    .map(|(children, watch)| (children, Some(watch)))
            } else {
                self.zk.get_children(&dir).map(|children| (children, None))
            };
            let children = match listing {
                Ok((children, watch)) => {
                    if let Some(watch) = watch {
                        self.set_watch(watch, Target::Children);
                    }
                    children
                }
                Err(Error::NoNode) => Vec::new(), // the directory is gone, our node too
                Err(error) => return self.failed(error),
            };
            let order = self.config.layout.order(children);
            match order.iter().position(|name| *name == own) {
                None => {
                    // Our node is gone: deleted by someone (or a stale read of a session
                    // that is about to be reported expired). Join again.
                    if self.term.is_some() {
                        self.lose(LeadershipLost::NodeDeleted, false);
                    } else {
                        self.unwatch();
                    }
                    self.node = None;
                    self.dirty = true;
                    return Flow::Go;
                }
                Some(0) => {
                    if self.term.is_none() {
                        let token = self.node.as_ref().map_or(0, |n| n.token);
                        self.elect(token, format!("{dir}/{own}"));
                        continue; // arm the leader's child watch (and look again)
                    }
                    return Flow::Go;
                }
                Some(position) => {
                    if self.term.is_some() {
                        self.lose(LeadershipLost::Preempted, true);
                        return Flow::Go;
                    }
                    let predecessor = order[position - 1].clone();
                    if matches!(&self.watch, Some(Armed { target: Target::Predecessor(p), .. }) if *p == predecessor)
                    {
                        return Flow::Go; // already watching it
                    }
                    match self.zk.get_watch(&format!("{dir}/{predecessor}")) {
                        Ok((_, _, watch)) => {
                            self.set_watch(watch, Target::Predecessor(predecessor));
                            return Flow::Go;
                        }
                        Err(Error::NoNode) => continue, // gone already: look again
                        Err(error) => return self.failed(error),
                    }
                }
            }
        }
    }

    /// At the end: deletes our nodes (in the background if the connection is down now).
    fn leave(&mut self) {
        if let Some(node) = self.node.take() {
            self.stale
                .push(format!("{}/{}", self.config.dir, node.name));
        }
        if self.zk.state().is_terminal() {
            return; // the session's nodes are gone with it
        }
        if self.connected {
            self.delete_stale();
        }
        for path in self.stale.drain(..) {
            let what = format!("deleting {path}");
            finish_in_background(self.zk.clone(), what, move |zk| {
                match zk.delete(&path, None) {
                    Ok(()) | Err(Error::NoNode) => Ok(()),
                    Err(error) => Err(error),
                }
            });
        }
        if let Some(tag) = self.creating.take() {
            // A create whose outcome is unknown: find its node by the tag and delete it.
            let dir = self.config.dir.clone();
            finish_in_background(self.zk.clone(), format!("withdrawing {tag}"), move |zk| {
                zk.sync(&dir)?;
                let children = match zk.get_children(&dir) {
                    Ok(children) => children,
                    Err(Error::NoNode) => return Ok(()),
                    Err(error) => return Err(error),
                };
                for name in children.into_iter().filter(|c| c.starts_with(&tag)) {
                    match zk.delete(&format!("{dir}/{name}"), None) {
                        Ok(()) | Err(Error::NoNode) => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            });
        }
    }
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
