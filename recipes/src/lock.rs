//! A distributed mutual-exclusion lock (seed 001 and the ZooKeeper lock recipe), whose
//! waiters watch only their predecessor and whose holder learns when the lock is lost.
//!
//! # Protocol
//! 1. Create `<path>/<guid>-lock-<seq>`, ephemeral and sequential. The guid finds the node
//!    again if the create's reply is lost with the connection (no orphan node that would
//!    block everyone until the session ends).
//! 2. List the children (no watch) and order them by sequence suffix. The lowest holds
//!    the lock.
//! 3. Otherwise watch only the next lower node (the predecessor) and wait for it to go,
//!    then go to 2. Each release or crash wakes exactly one waiter: no herd. The watch is
//!    set with `get_watch`, not `exists`: on a node that is already gone `get` registers
//!    nothing, where `exists` would leave a creation watch behind forever (the reason
//!    Curator uses `getData` here too).
//!
//! # Learning that the lock is lost
//! Neither kazoo nor Curator tells a lock holder that its lock is gone. Here every
//! [`LockGuard`] runs a small monitor thread over the session events and a watch on its
//! own node, and reports the first of:
//! - [`LockLost::SessionExpired`]: the server expired the session, deleting the node;
//! - [`LockLost::NodeDeleted`]: someone deleted the node;
//! - [`LockLost::Disconnected`]: the connection has been down longer than the
//!   *disconnect grace* (default zero). While disconnected the holder cannot know whether
//!   the server has already expired the session and handed the lock on, so by default a
//!   disconnection counts as a loss (Curator's advice for `SUSPENDED`). A grace below a
//!   third of the session timeout is still safe when the disconnection was detected by
//!   the client's read timeout (two thirds of the session timeout), as the server
//!   cannot expire the session before the remaining third has passed;
//! - [`LockLost::Closed`]: the handle was closed.
//!
//! Query it with [`LockGuard::is_lost`], or block on / `select!` over
//! [`LockGuard::lost`].
//!
//! # Guarantees
//! - Mutual exclusion among all holders of guards on the same path, in any thread or
//!   process, while their sessions live; fairness: waiters get the lock in the order they
//!   asked for it.
//! - A holder that crashes, is killed or loses its session releases the lock when the
//!   server expires its session (after the session timeout).
//! - Releasing, or a waiter giving up, wakes only that node's successor.
//! - A guard reports a loss as soon as its client hears of it (the deletion or expiry
//!   notification), and, while disconnected, once the disconnect grace has passed.
//!
//! # Non-guarantees
//! - Not reentrant: a second `acquire` on the same path from the same thread waits for
//!   the first guard (each acquisition is its own node).
//! - Like every ZooKeeper lock, a holder paused (GC, SIGSTOP, swapped out) for longer
//!   than the session timeout can resume believing it still holds the lock before its
//!   guard hears the news. Protect external resources with the guard's
//!   [`sequence`](LockGuard::sequence) as a fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::lock::Lock;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = Lock::new(&zk, "/locks/resource")?;
//! {
//!     let guard = lock.acquire()?;
//!     // ... the critical section ...
//!     assert!(!guard.is_lost());
//! } // released here (or call guard.release() to see errors)
//! if let Some(guard) = lock.acquire_timeout(Duration::from_secs(1))? {
//!     guard.release()?;
//! }
//! # Ok::<(), recipes::RecipeError>(())
//! ```

use crate::support::{
    check_base_path, create_sequential, default_reconnect_timeout, delete_eventually, members,
    retry, wait_for_change, Deadline, Member, NodeWait, Patience, ANY_NAME,
};
use crate::util::{ensure_path, guid, sequence_of};
use crate::{RecipeError, Result};
use crossbeam_channel::{Receiver, RecvError, Select, Sender};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zookeeper::{Error, EventType, SessionState, Watch, WatchedEvent, ZooKeeper};

/// Why a held lock was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockLost {
    /// The session expired: the server deleted the lock node.
    SessionExpired,
    /// The lock node was deleted by someone else.
    NodeDeleted,
    /// The connection was down longer than the disconnect grace: the session may have
    /// expired without this client hearing of it yet.
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
    fn as_str(self) -> &'static str {
        match self {
            LockLost::SessionExpired => "lock lost: session expired",
            LockLost::NodeDeleted => "lock lost: lock node deleted",
            LockLost::Disconnected => "lock lost: disconnected longer than the grace period",
            LockLost::Closed => "lock lost: handle closed",
        }
    }
}

/// A distributed lock on a ZooKeeper path (see the [module docs](self)).
///
/// `Send + Sync`: threads may share one `Lock`; each acquisition is independent (threads
/// of one process exclude each other through ZooKeeper like separate processes do).
pub struct Lock {
    zk: ZooKeeper,
    dir: String,
    label: Vec<u8>,
    patience: Patience,
    grace: Duration,
    wakeups: AtomicU64,
    waiting: AtomicU64,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock").field("path", &self.dir).finish()
    }
}

/// How an acquisition waits.
#[derive(Clone, Copy)]
enum Wait {
    /// `try_acquire`: never.
    No,
    /// Until the deadline.
    Until(Deadline),
}

impl Lock {
    /// A lock on `path` (created with its parents if missing; lock nodes are its
    /// children).
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<Lock> {
        check_base_path(path)?;
        ensure_path(zk, path)?;
        Ok(Lock {
            zk: zk.clone(),
            dir: path.to_string(),
            label: Vec::new(),
            patience: Patience::reconnect(default_reconnect_timeout(zk)),
            grace: Duration::ZERO,
            wakeups: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        })
    }

    /// Data stored in this value's lock nodes, shown by [`holder`](Self::holder) (e.g. a
    /// host name and pid).
    pub fn with_label(mut self, label: &str) -> Lock {
        self.label = label.as_bytes().to_vec();
        self
    }

    /// How long a guard tolerates a dropped connection before it reports
    /// [`LockLost::Disconnected`] (default zero; see the module docs).
    pub fn with_disconnect_grace(mut self, grace: Duration) -> Lock {
        self.grace = grace;
        self
    }

    /// How long an operation waits for a dropped connection to come back before failing
    /// with `ConnectionLoss` (default: twice the session timeout).
    pub fn with_reconnect_timeout(mut self, timeout: Duration) -> Lock {
        self.patience = Patience::reconnect(timeout);
        self
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// Blocks until the lock is held.
    pub fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(Wait::Until(Deadline::never()))?
            .ok_or(RecipeError::Lost("lock wait ended without the lock"))
    }

    /// Takes the lock if it is free now; never waits for a holder.
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::No)
    }

    /// Blocks at most `timeout` for the lock: `None` if it was not acquired in time (this
    /// attempt's node is removed again).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::Until(Deadline::after(timeout)))
    }

    /// The label ([`with_label`](Self::with_label)) of the current holder's node, `None`
    /// if nobody holds the lock.
    pub fn holder(&self) -> Result<Option<String>> {
        loop {
            let Some(first) = self.sorted_nodes()?.into_iter().next() else {
                return Ok(None);
            };
            let path = format!("{}/{}", self.dir, first.name);
            match retry(&self.zk, self.patience, || self.zk.get(&path)) {
                Ok((data, _)) => return Ok(Some(String::from_utf8_lossy(&data).into_owned())),
                Err(RecipeError::ZooKeeper(Error::NoNode)) => continue, // released meanwhile
                Err(e) => return Err(e),
            }
        }
    }

    /// How many times a waiter of this value was woken by its predecessor's watch.
    /// With the predecessor-only protocol each release wakes one waiter, so after `n`
    /// waiters got the lock in turn the sum over all waiters is `n`.
    pub fn wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Threads of this value blocked right now on their predecessor's watch (for
    /// monitoring and tests).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed) as usize
    }

    fn acquire_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        // Subscribe before anything else: the guard must see every session event from
        // the moment its node exists.
        let session_events = self.zk.session_events();
        let tag = format!("{}-lock-", guid());
        let name = create_sequential(&self.zk, &self.dir, &tag, &self.label, self.patience)?;
        let node = format!("{}/{name}", self.dir);
        let sequence = sequence_of(&name).unwrap_or_default();
        match self.wait_turn(&name, wait) {
            Ok(true) => Ok(Some(LockGuard::start(
                self.zk.clone(),
                node,
                sequence,
                session_events,
                self.grace,
                self.patience,
            ))),
            not_acquired => {
                // Gave up or failed: withdraw the node, so it blocks nobody.
                if let Err(error) = delete_eventually(&self.zk, &node, self.patience) {
                    log::debug!("lock: withdrawing {node}: {error}");
                }
                not_acquired.map(|_| None)
            }
        }
    }

    /// The lock nodes, ordered by sequence number.
    fn sorted_nodes(&self) -> Result<Vec<Member>> {
        let children = retry(&self.zk, self.patience, || self.zk.get_children(&self.dir))?;
        Ok(members(children, ANY_NAME))
    }

    /// Steps 2 and 3 of the protocol: `true` once `name` is the lowest node, `false` if
    /// the wait ended first.
    fn wait_turn(&self, name: &str, wait: Wait) -> Result<bool> {
        loop {
            let nodes = self.sorted_nodes()?;
            let Some(position) = nodes.iter().position(|node| node.name == name) else {
                return Err(RecipeError::Lost(
                    "the lock node vanished while waiting (session expired or node deleted)",
                ));
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
            let patience = self.patience.before(deadline);
            match wait_for_change(&self.zk, &predecessor, patience, &self.waiting)? {
                NodeWait::Fired => {
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
                NodeWait::LookAgain => {}
                NodeWait::TimedOut => return Ok(false),
            }
        }
    }
}

/// Loss state shared by a guard and its monitor thread.
#[derive(Default)]
struct LossState {
    inner: Mutex<LossInner>,
}

#[derive(Default)]
struct LossInner {
    reason: Option<LockLost>,
    subscribers: Vec<Sender<LockLost>>,
}

impl LossState {
    /// Records the first loss and tells every subscriber.
    fn declare(&self, reason: LockLost) {
        let mut inner = self.inner.lock();
        if inner.reason.is_some() {
            return;
        }
        inner.reason = Some(reason);
        for subscriber in inner.subscribers.drain(..) {
            let _ = subscriber.try_send(reason);
        }
    }

    fn subscribe(&self) -> Receiver<LockLost> {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.inner.lock();
        match inner.reason {
            Some(reason) => {
                let _ = sender.try_send(reason);
            }
            None => inner.subscribers.push(sender),
        }
        receiver
    }

    fn reason(&self) -> Option<LockLost> {
        self.inner.lock().reason
    }
}

/// A held lock. Dropping it releases the lock; [`release`](Self::release) does the same
/// and reports errors. `Send + Sync`.
pub struct LockGuard {
    zk: ZooKeeper,
    node: String,
    sequence: u64,
    loss: Arc<LossState>,
    stop: Option<Sender<()>>,
    monitor: Option<JoinHandle<()>>,
    patience: Patience,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.node)
            .field("lost", &self.loss.reason())
            .finish()
    }
}

impl LockGuard {
    fn start(
        zk: ZooKeeper,
        node: String,
        sequence: u64,
        session_events: Receiver<WatchedEvent>,
        grace: Duration,
        patience: Patience,
    ) -> LockGuard {
        let loss = Arc::new(LossState::default());
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let monitor = Monitor {
            zk: zk.clone(),
            node: node.clone(),
            session_events,
            stopped,
            loss: Arc::clone(&loss),
            grace,
        };
        let monitor = match std::thread::Builder::new()
            .name("zk-lock-monitor".into())
            .spawn(move || monitor.run())
        {
            Ok(handle) => Some(handle),
            Err(error) => {
                log::warn!("lock: cannot start the loss monitor: {error}");
                None
            }
        };
        LockGuard {
            zk,
            node,
            sequence,
            loss,
            stop: Some(stop),
            monitor,
            patience,
        }
    }

    /// The lock node's path.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The lock node's sequence number: grows with every acquisition of this lock, so it
    /// can serve as a fencing token for resources the lock protects.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether the lock is known to be lost (see [`LockLost`]).
    pub fn is_lost(&self) -> bool {
        self.loss.reason().is_some()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LockLost> {
        self.loss.reason()
    }

    /// A receiver that gets the reason once the lock is lost (at once if it already is).
    /// Each call makes an independent receiver; use it with `recv_timeout` or
    /// `crossbeam_channel::select!`. It never fires after a normal release.
    pub fn lost(&self) -> Receiver<LockLost> {
        self.loss.subscribe()
    }

    /// Releases the lock (deletes the node). Fails with `RecipeError::Lost` if the lock
    /// had been lost before (the critical section was not protected to the end).
    pub fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        let Some(stop) = self.stop.take() else {
            return Ok(());
        };
        drop(stop); // ends the monitor, so our own delete is not reported as a loss
        if let Some(monitor) = self.monitor.take() {
            let _ = monitor.join();
        }
        let lost = self.loss.reason();
        match delete_eventually(&self.zk, &self.node, self.patience) {
            Ok(()) => {}
            // Left to the background: report that the release is not done yet.
            Err(RecipeError::ZooKeeper(e)) if e.is_connection_loss() => {
                return Err(RecipeError::ZooKeeper(e))
            }
            Err(_) if lost.is_some() => {}
            Err(e) => return Err(e),
        }
        match lost {
            Some(reason) => Err(RecipeError::Lost(reason.as_str())),
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Err(error) = self.release_inner() {
            log::debug!("lock: release of {} on drop: {error}", self.node);
        }
    }
}

/// The per-guard loss monitor.
struct Monitor {
    zk: ZooKeeper,
    node: String,
    session_events: Receiver<WatchedEvent>,
    stopped: Receiver<()>,
    loss: Arc<LossState>,
    grace: Duration,
}

enum Wake {
    Stop,
    Session(std::result::Result<WatchedEvent, RecvError>),
    Node(std::result::Result<WatchedEvent, RecvError>),
    GraceOver,
}

impl Monitor {
    fn run(self) {
        if let Some(reason) = self.watch_loop() {
            self.loss.declare(reason);
        }
    }

    /// Arms the watch on our own node: `Err(reason)` if the node is gone.
    fn arm(&self) -> std::result::Result<Option<Watch>, LockLost> {
        match self.zk.get_watch(&self.node) {
            Ok((_, _, watch)) => Ok(Some(watch)),
            Err(Error::NoNode) => Err(LockLost::NodeDeleted),
            Err(error) if error.is_connection_loss() => Ok(None), // re-armed on reconnect
            Err(Error::SessionExpired) => Err(LockLost::SessionExpired),
            Err(_) => Err(LockLost::Closed),
        }
    }

    /// Runs until the guard stops it (`None`) or the lock is lost.
    fn watch_loop(&self) -> Option<LockLost> {
        let mut watch = match self.arm() {
            Ok(watch) => watch,
            Err(reason) => return Some(reason),
        };
        let mut disconnected_since = match self.zk.state() {
            state if state.is_connected() => None,
            SessionState::Expired => return Some(LockLost::SessionExpired),
            state if state.is_terminal() => return Some(LockLost::Closed),
            _ => Some(Instant::now()),
        };
        loop {
            let wake = {
                let mut select = Select::new();
                let stop_index = select.recv(&self.stopped);
                let session_index = select.recv(&self.session_events);
                if let Some(w) = &watch {
                    select.recv(w.receiver());
                }
                let selected = match disconnected_since {
                    Some(since) => select.select_deadline(since + self.grace).ok(),
                    None => Some(select.select()),
                };
                match selected {
                    None => Wake::GraceOver,
                    Some(op) if op.index() == stop_index => {
                        let _ = op.recv(&self.stopped);
                        Wake::Stop
                    }
                    Some(op) if op.index() == session_index => {
                        Wake::Session(op.recv(&self.session_events))
                    }
                    // The only other operation registered is the node watch.
                    Some(op) => match &watch {
                        Some(w) => Wake::Node(op.recv(w.receiver())),
                        None => Wake::Stop,
                    },
                }
            };
            match wake {
                Wake::Stop => return None,
                Wake::GraceOver => return Some(LockLost::Disconnected),
                Wake::Session(Err(_)) => return Some(LockLost::Closed),
                Wake::Session(Ok(event)) => match event.state {
                    SessionState::Expired => return Some(LockLost::SessionExpired),
                    SessionState::AuthFailed | SessionState::Closed => {
                        return Some(LockLost::Closed)
                    }
                    state if state.is_connected() => {
                        disconnected_since = None;
                        if watch.is_none() {
                            match self.arm() {
                                Ok(armed) => watch = armed,
                                Err(reason) => return Some(reason),
                            }
                        }
                    }
                    _ => {
                        disconnected_since.get_or_insert_with(Instant::now);
                    }
                },
                Wake::Node(Err(_)) => return Some(LockLost::Closed),
                Wake::Node(Ok(event)) => match event.event_type {
                    EventType::NodeDeleted => return Some(LockLost::NodeDeleted),
                    EventType::Session => {
                        return Some(match event.state {
                            SessionState::Expired => LockLost::SessionExpired,
                            _ => LockLost::Closed,
                        })
                    }
                    _ => match self.arm() {
                        // Data changed or the watch was removed: watch again.
                        Ok(armed) => watch = armed,
                        Err(reason) => return Some(reason),
                    },
                },
            }
        }
    }
}
