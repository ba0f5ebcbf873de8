//! A distributed mutual-exclusion lock (the ZooKeeper lock recipe), whose
//! waiters watch only their predecessor and whose holder learns when the lock is lost.
//!
//! # Protocol
//! 1. Create `<path>/<guid>-lock-<seq>`, ephemeral and sequential. The guid finds the node
//!    again if the create's reply is lost with the connection (after a `sync`, so a
//!    reconnection to a member that has not applied the create yet cannot hide it): no
//!    orphan node that would block everyone until the session ends.
//! 2. List the children (no watch) and order them by sequence suffix. The lowest holds
//!    the lock.
//! 3. Otherwise watch only the next lower node (the predecessor) and wait for it to go,
//!    then go to 2. Each release or crash wakes exactly one waiter: no herd. The watch is
//!    set with `get_watch`, not `exists`: on a node that is already gone `get` registers
//!    nothing, where `exists` would leave a creation watch behind forever (the reason
//!    Curator uses `getData` here too). A wait that times out takes its watch off again.
//!
//! # The end of the sequence counter
//! Sequence numbers are the directory's 32-bit child counter, which a 3.8 server does
//! not wrap cleanly: past 2147483647 it repeats numbers or goes negative, and ordering by
//! them would admit two holders. So a lock node numbered at or past
//! [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or the limit set with
//! [`NodeOptions::sequence_limit`]) is deleted at once and takes no part: waiters skip
//! such nodes. The acquisition then restarts the counter: it deletes the directory, which
//! the server allows only once it is empty (atomically, so no holder or waiter can be in
//! it), and creates it afresh. While the directory still has holders or waiters, the
//! acquisition waits for them to finish, within its timeout: `acquire(Timeout::Never)`
//! waits as long as it takes, `acquire(duration)` returns `Err(Timeout)` at its
//! deadline, `try_acquire` returns `None` at once. This never admits two holders: every live lock node is in one
//! incarnation of the directory, ordered by numbers below the limit. Waiters that
//! arrive at the end are not ordered among themselves across the restart (whoever
//! creates first in the new directory goes first).
//!
//! # Layouts: sharing a path with Curator and kazoo
//! [`Lock::with_layout`] picks the node names and which children count
//! ([`LockLayout`]), one layout per path:
//! - [`LockLayout::Native`] (default) and [`LockLayout::Curator`] count every sequential
//!   child, as Curator's `InterProcessMutex` does, and order by the 10-digit suffix
//!   (Curator orders by the text after `lock-`, the same for these names). Both exclude
//!   Curator processes on the same path (tested against Curator 5.4: 0 overlaps).
//! - kazoo's `Lock` counts only `…__lock__<seq>` children: it does not see native
//!   nodes, so a kazoo `Lock` and a native lock on one path can both hold it (135
//!   overlapping critical sections in one measured run). [`LockLayout::Kazoo`] uses
//!   kazoo's names (`<guid>__lock__<seq>`) and counts kazoo's `__lock__` and `__rlock__`
//!   nodes (tested against kazoo 2.8: 0 overlaps).
//!
//! Every layout keeps the rules above: numbers past the sequence limit take no part
//! (also a foreign library's nodes), lost creates are found by the guid.
//!
//! # Fenced writes
//! [`LockGuard::fenced_multi`] runs writes as one `multi` that first checks the guard's
//! own lock node, so the server refuses them once the lock is gone, even when the holder
//! has not heard of the loss yet (Curator has nothing like it: CURATOR-689). See
//! [`fenced`](crate::locks::fenced).
//!
//! # Learning that the lock is lost
//! Neither kazoo nor Curator tells a lock holder that its lock is gone. Here a guard
//! reports the first of:
//! - [`LockLost::SessionExpired`]: the server expired the session, deleting the node;
//! - [`LockLost::NodeDeleted`]: someone deleted the node. Seen once [`LockGuard::lost`]
//!   has been called (that sets a watch; a deletion before the call is found too);
//! - [`LockLost::Disconnected`]: the session may have expired unheard. Reported at the
//!   earlier of two instants: the connection has been down longer than the *disconnect
//!   grace* (default zero: a disconnection is a loss at once, Curator's advice for
//!   `SUSPENDED`), and the earliest instant the server can expire the session, as the
//!   client knows it: the submit time of the latest request the server answered, plus
//!   the session timeout, less a clock margin (10 ms + 1% of the timeout). While a guard
//!   is held, one cheap read per handle (`exists("/")`) every third of the timeout keeps
//!   that bound fresh. So any grace is safe: the report never comes after another
//!   client can hold the lock. (The C client's read timeout is no such bound: it runs
//!   from the last receipt, a watch notification included, while the server counts from
//!   the client's last send.) A guard can still act late if its thread is paused past
//!   the report: see fencing below;
//! - [`LockLost::Closed`]: the handle was closed.
//!
//! Query it with [`LockGuard::is_lost`] (no request), or await (in `select!`, on any
//! executor) / [`wait`](crate::LossSignal::wait) on [`LockGuard::lost`]. A guard hears only of what happens after its acquisition: a
//! disconnection the client recovered from before the lock was granted is no loss.
//!
//! # Cost
//! An uncontended acquisition and release is three requests, as in the plain recipe:
//! create, list the children, delete. No thread is started per lock or per acquisition:
//! each `Lock` value follows the session through its own subscription to the session
//! events, read when a guard is asked ([`is_lost`](LockGuard::is_lost)) or acquired. One
//! task for the whole process, on the recipes' driver thread, serves what needs someone
//! awake: the guards asked for [`lost`](LockGuard::lost) (whose nodes it watches, one
//! more request each) and the grace timers of locks with a disconnect grace. It ends
//! when it has nothing to serve, and never keeps a handle open.
//! Dropping a guard waits for its delete only as long as a connected client needs (at
//! most two seconds); an unanswered delete goes on in the background.
//!
//! # Async
//! [`Lock::acquire_async`] and [`Lock::try_acquire_async`] are the protocol itself, as
//! async code over the client's futures and watches; [`acquire`](Lock::acquire) drives
//! the same future on the caller's thread. A pending async acquisition costs no thread
//! (a deadline is served by the recipes' one timer thread), and dropping its future at
//! any point withdraws it as a timed-out wait does: its node is deleted (in the
//! background if the server cannot be reached, or if the create's reply is still to
//! come), its watch released. A dropped acquisition never takes the lock later.
//!
//! ```no_run
//! # async fn demo(zk: zookeeper_mt::ZooKeeper) -> zookeeper_mt_recipes::Result<()> {
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::Lock;
//!
//! let lock = Lock::new(&zk, "/locks/report")?;
//! let guard = lock.acquire_async(Duration::from_secs(5)).await?;
//! // ... the critical section ...
//! drop(guard);
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Mutual exclusion among all holders of guards on the same path, in any thread or
//!   process, while their sessions live, also across the end of the sequence counter;
//!   fairness: waiters get the lock in the order they asked for it.
//! - [`LockGuard::fencing_token`] grows with every holder of the lock, across counter
//!   restarts and re-creation of the directory.
//! - A holder that crashes, is killed or loses its session releases the lock when the
//!   server expires its session (after the session timeout).
//! - Releasing, or a waiter giving up, wakes only that node's successor. A timed-out
//!   wait leaves no watch registered and withdraws its node.
//! - A guard reports a loss as soon as its client hears of it (the expiry notification,
//!   or, once [`LockGuard::lost`] has been called, the deletion notification), and, while
//!   disconnected, once the disconnect grace has passed.
//! - With [`NodeOptions::acl`], the lock's directory and nodes get that ACL: a client
//!   without the rights cannot delete a holder's node (deleting a child needs the
//!   parent's DELETE permission).
//!
//! # Non-guarantees
//! - Not reentrant: a second `acquire` on the same path from the same thread waits for
//!   the first guard (each acquisition is its own node). Use
//!   [`ReentrantLock`](crate::locks::reentrant_lock::ReentrantLock) for that, and
//!   [`MultiLock`](crate::locks::multi_lock::MultiLock) to hold several paths at once.
//! - Like every ZooKeeper lock, a holder paused (GC, SIGSTOP, swapped out) for longer
//!   than the session timeout can resume believing it still holds the lock before its
//!   guard hears the news. Protect external resources with the guard's
//!   [`fencing_token`](LockGuard::fencing_token).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::{locks::Lock, OptionalExtension};
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = Lock::new(&zk, "/locks/resource")?;
//! {
//!     let guard = lock.acquire(Timeout::Never)?;
//!     // ... the critical section, writing with guard.fencing_token() ...
//!     assert!(!guard.is_lost());
//! } // released here (or call guard.release() to see errors)
//! if let Some(guard) = lock.acquire(Duration::from_secs(1)).optional()? {
//!     guard.release()?;
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

mod guard;
mod loss;

pub use guard::*;
use loss::*;

use crate::error::LossReason;
use crate::lifecycle::{Client, ManagedSession};
use crate::nodes::guid;
use crate::runtime::block_on;
use crate::support::LossSignal;
use crate::support::{
    check_base_path, create_member_async, delete_eventually_async, delete_on_drop, ordered_members,
    retry_async, wait_for_change_async, Deadline, DeleteOnDrop, Member, NodeWait, Patience, SeqDir,
    ANY_NAME,
};
use crate::{NodeOptions, RetryPolicy};
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_mt::{Error, SessionState, Timeout, ZooKeeper};

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockLost {
    /// The session expired: the server deleted the lock node.
    SessionExpired,
    /// The lock node was deleted by someone else.
    NodeDeleted,
    /// The connection was down longer than the disconnect grace, or the session may
    /// have expired by now as far as the server's answers tell (see the module docs):
    /// another client may hold the lock.
    Disconnected,
    /// The handle was closed (or authentication failed): the session is gone.
    Closed,
}

impl fmt::Display for LockLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LockLost {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LockLost::SessionExpired => "lock lost: session expired",
            LockLost::NodeDeleted => "lock lost: lock node deleted",
            LockLost::Disconnected => "lock lost: disconnected longer than the grace period",
            LockLost::Closed => "lock lost: handle closed",
        }
    }
}

/// The node names of a lock and which children of its directory count as contenders:
/// compatible with another library's lock on the same path. One layout per path: every
/// participant must count every other's nodes, or two can hold the lock at once.
///
/// All layouts order contenders by the 10-digit sequence suffix and, as everywhere in
/// these recipes, leave out numbers at or past the sequence limit (a foreign library may
/// still order by them; see the module docs on the counter's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockLayout {
    /// Nodes `<guid>-lock-<seq>`; every child with a sequence suffix is a contender.
    /// Compatible with Curator's `InterProcessMutex` (which orders every child by the
    /// text after `lock-`), but **not** with kazoo's `Lock`: kazoo counts only children
    /// named `…__lock__<seq>`, so it ignores these nodes and both sides can hold the
    /// lock at once (measured: 135 overlapping critical sections in one run). Use
    /// [`LockLayout::Kazoo`] on paths that kazoo processes lock.
    #[default]
    Native,
    /// Curator 5.x `InterProcessMutex`: nodes `_c_<guid>-lock-<seq>` (Curator's
    /// protected-mode name), every child with a sequence suffix a contender, as Curator
    /// counts them. Curator's and ours exclude each other.
    Curator,
    /// kazoo 2.x `Lock`: nodes `<guid>__lock__<seq>`; contenders are the children whose
    /// sequence suffix follows `__lock__` or `__rlock__` (kazoo's `WriteLock` rule, so this
    /// lock also excludes kazoo `ReadLock` holders). A kazoo `Lock` counts only
    /// `__lock__` nodes: it sees ours, and we see its.
    Kazoo,
}

impl LockLayout {
    /// The name prefix of a new lock node (before the server's sequence suffix).
    fn tag(self) -> String {
        match self {
            LockLayout::Native => format!("{}-lock-", guid()),
            LockLayout::Curator => format!("_c_{}-lock-", uuid_text()),
            LockLayout::Kazoo => format!("{}__lock__", guid()),
        }
    }

    /// The contenders among `children`, in order, numbers out of range left out.
    fn contenders(self, children: Vec<String>, limit: i32) -> Vec<Member> {
        match self {
            LockLayout::Native | LockLayout::Curator => ordered_members(children, ANY_NAME, limit),
            LockLayout::Kazoo => {
                let kazoo: Vec<String> = children
                    .into_iter()
                    .filter(|name| kazoo_marker(name).is_some())
                    .collect();
                ordered_members(kazoo, ANY_NAME, limit)
            }
        }
    }
}

/// The kazoo lock marker (`__lock__` or `__rlock__`) that directly precedes `name`'s
/// sequence suffix (kazoo's contender pattern `(?:marker)(-?\d{10})$`), if any.
pub(crate) fn kazoo_marker(name: &str) -> Option<&'static str> {
    crate::nodes::sequence_of(name)?;
    let head = &name[..name.len() - 10];
    ["__lock__", "__rlock__"]
        .into_iter()
        .find(|marker| head.ends_with(marker))
}

/// A random UUID in its 8-4-4-4-12 text form (as Curator's protected names hold).
pub(crate) fn uuid_text() -> String {
    let g = guid();
    format!(
        "{}-{}-{}-{}-{}",
        &g[0..8],
        &g[8..12],
        &g[12..16],
        &g[16..20],
        &g[20..32]
    )
}

/// A distributed lock on a ZooKeeper path (see the [module docs](self)).
///
/// `Send + Sync` and cheap to clone (clones are one value, as threads sharing a `&Lock`
/// are): threads and tasks may share one `Lock`; each acquisition is independent
/// (threads of one process exclude each other through ZooKeeper like separate processes
/// do).
#[derive(Clone)]
pub struct Lock {
    client: Client,
    dir: String,
    label: Vec<u8>,
    nodes: NodeOptions,
    patience: Patience,
    grace: Duration,
    layout: LockLayout,
    /// What this value's guards know of their session (and its generation), made by the
    /// first acquisition on each session.
    shared: Arc<Mutex<Option<SessionShared>>>,
    wakeups: Arc<AtomicU64>,
    waiting: Arc<AtomicU64>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock").field("path", &self.dir).finish()
    }
}

/// What a value's guards share on one session: the session's generation and the state.
type SessionShared = (u64, Arc<Shared>);

/// How an acquisition waits.
#[derive(Clone, Copy)]
enum Wait {
    /// `try_acquire`: never.
    No,
    /// Until the deadline.
    Until(Deadline),
}

impl Lock {
    /// A lock on `path`; lock nodes are its children. The directory (and its parents) is
    /// created by the first acquisition if missing, with the node options then set
    /// ([`with_node_options`](Self::with_node_options)). No request is sent here.
    ///
    /// `client` is a plain handle or a managed client (`&zk`, `&managed`). On a managed
    /// client each acquisition runs on the session current when it starts, and its guard
    /// belongs to that session (its expiry is a loss); later acquisitions use the next
    /// session.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<Lock> {
        check_base_path(path)?;
        let client = client.into();
        let zk = client.session().zk;
        Ok(Lock {
            client,
            dir: path.to_string(),
            label: Vec::new(),
            nodes: NodeOptions::default(),
            patience: Patience::of(&zk, RetryPolicy::new()),
            grace: Duration::ZERO,
            layout: LockLayout::Native,
            shared: Arc::default(),
            wakeups: Arc::default(),
            waiting: Arc::default(),
        })
    }

    /// Data stored in this value's lock nodes, shown by [`holder`](Self::holder) (e.g. a
    /// host name and pid).
    pub fn with_label(mut self, label: &str) -> Lock {
        self.label = label.as_bytes().to_vec();
        self
    }

    /// The ACL, directory kind and sequence limit of the nodes this lock creates (default:
    /// open ACL, persistent directory). With a container directory the server removes
    /// the directory once the lock is idle; the next acquisition creates it again.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> Lock {
        self.nodes = nodes;
        self
    }

    /// The names of this lock's nodes and which nodes of the directory it counts (default
    /// [`LockLayout::Native`]). Every participant on one path must use a layout that
    /// counts the others' nodes: see [`LockLayout`].
    pub fn with_layout(mut self, layout: LockLayout) -> Lock {
        self.layout = layout;
        self
    }

    /// The layout set with [`with_layout`](Self::with_layout).
    pub fn layout(&self) -> LockLayout {
        self.layout
    }

    /// How long a guard tolerates a dropped connection before it reports
    /// [`LockLost::Disconnected`] (default zero; see the module docs). Any grace is
    /// safe: the report comes no later than the session's earliest possible expiry,
    /// whatever the grace.
    pub fn with_disconnect_grace(mut self, grace: Duration) -> Lock {
        self.grace = grace;
        // Guards acquired already keep the old grace; later acquisitions use the new one.
        self.shared = Arc::default();
        self
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> Lock {
        let policy = self.retry_policy().with_reconnect_timeout(timeout);
        self.with_retry_policy(policy)
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Lock {
        self.patience = Patience::of(&self.client.session().zk, policy);
        self
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.patience.policy()
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// Waits for the lock, at most `timeout` ([`Timeout::Never`]: as long as it takes);
    /// `Err(Timeout)` if it was not acquired in time (this attempt's node is removed
    /// again, in the background if the server cannot be reached). The deadline holds for
    /// every step, including a connection loss during the create or the listing.
    pub fn acquire(&self, timeout: impl Into<Timeout>) -> Result<LockGuard> {
        block_on(self.acquire_async(timeout))
    }

    /// Async [`acquire`](Self::acquire), for any executor; no thread waits for it.
    ///
    /// Dropping the future at any point withdraws the attempt, as a timed-out wait does:
    /// its node is deleted (in the background if the server cannot be reached or the
    /// create's reply is still to come), and its watch is released.
    pub async fn acquire_async(&self, timeout: impl Into<Timeout>) -> Result<LockGuard> {
        self.acquire_with(Wait::Until(timeout.into().deadline()))
            .await?
            .ok_or(RecipeError::Timeout)
    }

    /// [`acquire`](Self::acquire) for the recipes built on this lock: `None` on timeout.
    pub(crate) async fn acquire_within_async(
        &self,
        timeout: impl Into<Timeout>,
    ) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::Until(timeout.into().deadline()))
            .await
    }

    /// Takes the lock if it is free now; never waits for a holder (`None`: it is held).
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        block_on(self.try_acquire_async())
    }

    /// Async [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_async(&self) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::No).await
    }

    /// The label ([`with_label`](Self::with_label)) of the current holder's node, `None`
    /// if nobody holds the lock.
    pub fn holder(&self) -> Result<Option<String>> {
        block_on(self.holder_async())
    }

    /// [`holder`](Self::holder), async.
    pub async fn holder_async(&self) -> Result<Option<String>> {
        let zk = &self.client.session().zk;
        loop {
            let nodes = self.sorted_nodes_async(zk, self.patience).await?;
            let Some(first) = nodes.into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{}/{}", self.dir, first.name);
            match retry_async(zk, self.patience, || zk.get_async(&path)).await {
                Ok((data, _)) => return Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                Err(RecipeError::ZooKeeper(Error::NoNode)) => continue, // released meanwhile
                Err(e) => return Err(e),
            }
        }
    }

    /// How many times a waiter of this value was woken by its predecessor's watch.
    /// With the predecessor-only protocol each release wakes one waiter, so after `n`
    /// waiters got the lock in turn the sum over all waiters is `n`.
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Threads of this value blocked right now on their predecessor's watch (for
    /// monitoring and tests).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed) as usize
    }

    /// This session's view for guards (made before the node exists: the subscription
    /// follows the session from then on).
    fn shared_for(&self, session: &ManagedSession) -> Arc<Shared> {
        let mut shared = self.shared.lock();
        match &*shared {
            Some((generation, view)) if *generation == session.generation => Arc::clone(view),
            _ => {
                let view = Arc::new(Shared::new(&session.zk, self.grace));
                *shared = Some((session.generation, Arc::clone(&view)));
                view
            }
        }
    }

    async fn acquire_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        let session = self.client.session();
        let zk = &session.zk;
        let shared = self.shared_for(&session);
        let (patience, drain) = match wait {
            Wait::No => (self.patience, Deadline::after(Duration::ZERO)),
            Wait::Until(deadline) => (self.patience.before(deadline), deadline),
        };
        let dir = SeqDir {
            path: &self.dir,
            data: b"",
            nodes: &self.nodes,
        };
        let tag = self.layout.tag();
        let created = match create_member_async(zk, &dir, &tag, &self.label, patience, drain).await
        {
            Ok(created) => created,
            Err(error) => return not_acquired(error, wait),
        };
        let node = format!("{}/{}", self.dir, created.name);
        // Until a guard owns the node: a dropped future withdraws it in the background.
        let mut withdraw = DeleteOnDrop::armed(zk, &node);
        let turn = self.wait_turn(zk, &created.name, wait, patience).await;
        if let Ok(true) = turn {
            withdraw.disarm();
            return Ok(Some(LockGuard::new(
                zk.clone(),
                node.clone(),
                created.seq,
                created.czxid,
                shared,
                self.patience,
            )));
        }
        // Gave up or failed: withdraw the node, so it blocks nobody (past the deadline
        // the delete goes on in the background).
        if let Err(error) = delete_eventually_async(zk, &node, patience).await {
            log::debug!("lock: withdrawing {node}: {error}");
        }
        withdraw.disarm();
        match turn {
            Ok(_) => Ok(None),
            Err(error) => not_acquired(error, wait),
        }
    }

    /// The lock nodes that take part (numbered below the limit), in order; none while
    /// the directory is missing.
    async fn sorted_nodes_async(&self, zk: &ZooKeeper, patience: Patience) -> Result<Vec<Member>> {
        match retry_async(zk, patience, || zk.get_children_async(&self.dir)).await {
            Ok(children) => Ok(self.layout.contenders(children, self.nodes.limit())),
            Err(RecipeError::ZooKeeper(Error::NoNode)) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// Steps 2 and 3 of the protocol: `true` once `name` is the lowest node, `false` if
    /// the wait ended first.
    async fn wait_turn(
        &self,
        zk: &ZooKeeper,
        name: &str,
        wait: Wait,
        patience: Patience,
    ) -> Result<bool> {
        loop {
            let nodes = self.sorted_nodes_async(zk, patience).await?;
            let Some(position) = nodes.iter().position(|node| node.name == name) else {
                return Err(RecipeError::Lost(LossReason::NodeGone));
            };
            if position == 0 {
                return Ok(true);
            }
            let deadline = match wait {
                Wait::No => return Ok(false),
                Wait::Until(deadline) => deadline,
            };
            if deadline.expired() {
                return Ok(false);
            }
            let predecessor = format!("{}/{}", self.dir, nodes[position - 1].name);
            match wait_for_change_async(zk, &predecessor, patience, &self.waiting).await? {
                NodeWait::Fired => {
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
                NodeWait::LookAgain => {}
                NodeWait::TimedOut => return Ok(false),
            }
        }
    }
}

/// The outcome of an acquisition that failed with `error`: "not acquired" (`Ok(None)`)
/// if its deadline passed (whatever step it was in) or, for `try_acquire`, at the
/// counter's end while others hold the lock; otherwise the error.
fn not_acquired(error: RecipeError, wait: Wait) -> Result<Option<LockGuard>> {
    let at_deadline = match &error {
        RecipeError::Timeout | RecipeError::SequenceExhausted { .. } => true,
        RecipeError::ZooKeeper(e) => e.is_retryable(),
        _ => false,
    };
    match wait {
        Wait::No if matches!(error, RecipeError::SequenceExhausted { .. }) => Ok(None),
        Wait::Until(deadline) if at_deadline && deadline.expired() => Ok(None),
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: Vec<Member>) -> Vec<String> {
        list.into_iter().map(|m| m.name).collect()
    }

    #[test]
    fn kazoo_layout_counts_kazoo_markers_only() {
        let children = vec![
            "bbb__lock__0000000003".to_string(),
            "aaa__rlock__0000000001".to_string(),
            "g-lock-0000000000".to_string(),
            "ccc__lock__0000000002".to_string(),
            "lease_holder".to_string(),
            "ddd__lock__x000000004".to_string(),
        ];
        assert_eq!(
            names(LockLayout::Kazoo.contenders(children.clone(), i32::MAX)),
            vec![
                "aaa__rlock__0000000001",
                "ccc__lock__0000000002",
                "bbb__lock__0000000003"
            ]
        );
        // Native and Curator count every sequential child, as Curator does.
        assert_eq!(LockLayout::Curator.contenders(children, i32::MAX).len(), 4);
        assert_eq!(kazoo_marker("x__rlock__0000000001"), Some("__rlock__"));
        assert_eq!(kazoo_marker("x__lock__-000000001"), Some("__lock__"));
        assert_eq!(kazoo_marker("x__lock__"), None);
    }

    #[test]
    fn foreign_layouts_never_order_by_out_of_range_numbers() {
        let children = vec![
            "a__lock__2147483647".to_string(),
            "b__lock__-000000005".to_string(),
            "c__lock__0000000007".to_string(),
            "_c_x-lock-2147483647".to_string(),
            "_c_y-lock-0000000009".to_string(),
        ];
        assert_eq!(
            names(LockLayout::Kazoo.contenders(children.clone(), i32::MAX)),
            vec!["c__lock__0000000007"]
        );
        assert_eq!(
            names(LockLayout::Curator.contenders(children, i32::MAX)),
            vec!["c__lock__0000000007", "_c_y-lock-0000000009"]
        );
    }

    #[test]
    fn layout_tags() {
        let curator = LockLayout::Curator.tag();
        assert!(curator.starts_with("_c_") && curator.ends_with("-lock-"));
        assert_eq!(curator.len(), "_c_".len() + 36 + "-lock-".len());
        assert!(LockLayout::Kazoo.tag().ends_with("__lock__"));
        assert!(LockLayout::Native.tag().ends_with("-lock-"));
    }
}
