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
//! Neither kazoo nor Curator tells a lock holder that its lock is gone. Here each [`Lock`]
//! value has one small monitor thread, started by its first acquisition and shared by all
//! of its guards, that follows the session events; the first [`LockGuard::lost`] call on
//! a guard also has it watch that guard's own node. A guard reports the first of:
//! - [`LockLost::SessionExpired`]: the server expired the session, deleting the node;
//! - [`LockLost::NodeDeleted`]: someone deleted the node. Seen once [`LockGuard::lost`]
//!   has been called (that sets the watch; a deletion before the call is found too);
//! - [`LockLost::Disconnected`]: the connection has been down longer than the
//!   *disconnect grace* (default zero). While disconnected the holder cannot know whether
//!   the server has already expired the session and handed the lock on, so by default a
//!   disconnection counts as a loss (Curator's advice for `SUSPENDED`). A grace below a
//!   third of the session timeout is still safe when the disconnection was detected by
//!   the client's read timeout (two thirds of the session timeout), as the server
//!   cannot expire the session before the remaining third has passed;
//! - [`LockLost::Closed`]: the handle was closed.
//!
//! Query it with [`LockGuard::is_lost`] (no request), or block on / `select!` over
//! [`LockGuard::lost`].
//!
//! # Cost
//! An uncontended acquisition and release is three requests, as in the plain recipe:
//! create, list the children, delete. No thread is started per acquisition (the monitor
//! thread is one per `Lock` value), and the watch on the guard's own node (one more
//! request) is set only for guards asked for [`lost`](LockGuard::lost).
//!
//! # Guarantees
//! - Mutual exclusion among all holders of guards on the same path, in any thread or
//!   process, while their sessions live; fairness: waiters get the lock in the order they
//!   asked for it.
//! - A holder that crashes, is killed or loses its session releases the lock when the
//!   server expires its session (after the session timeout).
//! - Releasing, or a waiter giving up, wakes only that node's successor.
//! - A guard reports a loss as soon as its client hears of it (the expiry notification,
//!   or, once [`LockGuard::lost`] has been called, the deletion notification), and, while
//!   disconnected, once the disconnect grace has passed.
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
use crate::NodeOptions;
use crate::{RecipeError, Result};
use crossbeam_channel::{Receiver, RecvError, Select, Sender};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
    /// The loss monitor of this value's guards, started by the first acquisition. Before
    /// `zk`: its thread ends before our handle clone goes.
    monitor: OnceLock<Arc<Monitor>>,
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
            monitor: OnceLock::new(),
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
        // A monitor already started keeps serving its guards with the old grace; later
        // acquisitions start one with the new grace.
        self.monitor = OnceLock::new();
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
        // Before the node exists: the monitor follows the session from then on.
        let monitor = Arc::clone(
            self.monitor
                .get_or_init(|| Arc::new(Monitor::start(&self.zk, self.grace))),
        );
        let tag = format!("{}-lock-", guid());
        let name = create_sequential(
            &self.zk,
            &self.dir,
            &tag,
            &self.label,
            &NodeOptions::default(),
            self.patience,
        )?;
        let node = format!("{}/{name}", self.dir);
        let sequence = sequence_of(&name).unwrap_or_default();
        match self.wait_turn(&name, wait) {
            Ok(true) => Ok(Some(LockGuard::new(
                self.zk.clone(),
                node,
                sequence,
                monitor,
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

/// A guard's loss state, shared with the monitor thread of its [`Lock`].
struct GuardState {
    node: String,
    inner: Mutex<GuardInner>,
}

#[derive(Default)]
struct GuardInner {
    /// The first loss, if any.
    reason: Option<LockLost>,
    /// Set by the release (before the node is deleted): no loss is recorded after it, so
    /// our own delete is never reported.
    released: bool,
    /// Whether the monitor was asked to watch the node (first [`LockGuard::lost`]).
    watched: bool,
    subscribers: Vec<Sender<LockLost>>,
}

impl GuardState {
    fn new(node: String) -> GuardState {
        GuardState {
            node,
            inner: Mutex::default(),
        }
    }

    /// Records the first loss and tells every subscriber (nothing once released).
    fn declare(&self, reason: LockLost) {
        let mut inner = self.inner.lock();
        if inner.released || inner.reason.is_some() {
            return;
        }
        inner.reason = Some(reason);
        for subscriber in inner.subscribers.drain(..) {
            let _ = subscriber.try_send(reason);
        }
    }

    /// A new receiver of the loss, and whether the node watch is to be asked for now
    /// (the first subscription of a guard not lost yet).
    fn subscribe(&self) -> (Receiver<LockLost>, bool) {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.inner.lock();
        if let Some(reason) = inner.reason {
            let _ = sender.try_send(reason);
            return (receiver, false);
        }
        if inner.released {
            return (receiver, false); // the sender is dropped: it never fires
        }
        inner.subscribers.push(sender);
        let first = !std::mem::replace(&mut inner.watched, true);
        (receiver, first)
    }

    fn reason(&self) -> Option<LockLost> {
        self.inner.lock().reason
    }

    fn is_released(&self) -> bool {
        self.inner.lock().released
    }

    /// Marks the guard released (no loss is recorded from now on; subscribers see their
    /// channel close) and returns the loss recorded before, if any.
    fn finish(&self) -> Option<LockLost> {
        let mut inner = self.inner.lock();
        inner.released = true;
        inner.subscribers.clear();
        inner.reason
    }
}

/// What the monitor of a [`Lock`] knows of the session, and the guards it serves.
struct Shared {
    grace: Duration,
    inner: Mutex<SessionView>,
}

#[derive(Default)]
struct SessionView {
    /// The guards held now (registered when acquired, removed when released).
    guards: Vec<Arc<GuardState>>,
    /// The session is over (expired, closed): every guard is lost, now and later.
    ended: Option<LockLost>,
    /// Disconnected since then (`None`: connected).
    disconnected_since: Option<Instant>,
    /// The current disconnection has outlasted the grace (and was reported).
    grace_over: bool,
}

impl Shared {
    /// A new guard: from now on it hears of every session loss. One that happened
    /// already (the session ended, or the connection is down past the grace) is recorded
    /// at once.
    fn register(&self, guard: &Arc<GuardState>) {
        let mut view = self.inner.lock();
        if let Some(reason) = view.ended {
            guard.declare(reason);
        } else if view.grace_over
            || view
                .disconnected_since
                .is_some_and(|since| since.elapsed() >= self.grace)
        {
            guard.declare(LockLost::Disconnected);
        }
        view.guards.push(Arc::clone(guard));
    }

    /// A released guard.
    fn forget(&self, guard: &Arc<GuardState>) {
        let mut view = self.inner.lock();
        if let Some(index) = view.guards.iter().position(|g| Arc::ptr_eq(g, guard)) {
            view.guards.swap_remove(index);
        }
    }

    /// The session is over: every guard, held now or later, is lost.
    fn end(&self, reason: LockLost) {
        let mut view = self.inner.lock();
        view.ended.get_or_insert(reason);
        for guard in &view.guards {
            guard.declare(reason);
        }
    }

    fn disconnected(&self) {
        let mut view = self.inner.lock();
        let since = *view.disconnected_since.get_or_insert_with(Instant::now);
        if !view.grace_over && since.elapsed() >= self.grace {
            Self::grace_over(&mut view);
        }
    }

    fn reconnected(&self) {
        let mut view = self.inner.lock();
        view.disconnected_since = None;
        view.grace_over = false;
    }

    /// When the current disconnection outlasts the grace, unless reported already.
    fn grace_deadline(&self) -> Option<Instant> {
        let view = self.inner.lock();
        match view.disconnected_since {
            Some(since) if !view.grace_over => Some(since + self.grace),
            _ => None,
        }
    }

    /// Called at the grace deadline: reports the disconnection if it still lasts.
    fn check_grace(&self) {
        let mut view = self.inner.lock();
        if let Some(since) = view.disconnected_since {
            if !view.grace_over && since.elapsed() >= self.grace {
                Self::grace_over(&mut view);
            }
        }
    }

    fn grace_over(view: &mut SessionView) {
        view.grace_over = true;
        for guard in &view.guards {
            guard.declare(LockLost::Disconnected);
        }
    }
}

/// The loss monitor of one [`Lock`] value: one thread for all of its guards, started by
/// the first acquisition. It ends when the `Lock` and all of its guards are gone (or the
/// handle is closed).
struct Monitor {
    shared: Arc<Shared>,
    /// Guards whose node is to be watched. `None` once dropping (ends the thread).
    watch_requests: Option<Sender<Arc<GuardState>>>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    fn start(zk: &ZooKeeper, grace: Duration) -> Monitor {
        // Subscribe first, then read the state: no change falls between the two.
        let session_events = zk.session_events();
        let mut view = SessionView::default();
        match zk.state() {
            state if state.is_connected() => {}
            SessionState::Expired => view.ended = Some(LockLost::SessionExpired),
            state if state.is_terminal() => view.ended = Some(LockLost::Closed),
            _ => view.disconnected_since = Some(Instant::now()),
        }
        let shared = Arc::new(Shared {
            grace,
            inner: Mutex::new(view),
        });
        let (watch_requests, requests) = crossbeam_channel::unbounded();
        let worker = MonitorThread {
            zk: zk.clone(),
            shared: Arc::clone(&shared),
            session_events,
            requests,
            watched: Vec::new(),
        };
        let thread = match std::thread::Builder::new()
            .name("zk-lock-monitor".into())
            .spawn(move || worker.run())
        {
            Ok(handle) => Some(handle),
            Err(error) => {
                log::warn!("lock: cannot start the loss monitor: {error}");
                None
            }
        };
        Monitor {
            shared,
            watch_requests: Some(watch_requests),
            thread,
        }
    }

    /// Asks the monitor thread to watch the guard's node.
    fn watch(&self, guard: &Arc<GuardState>) {
        if let Some(requests) = &self.watch_requests {
            // Fails only if the thread has ended (the handle was closed): the guard has
            // been told `Closed` then.
            let _ = requests.send(Arc::clone(guard));
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        drop(self.watch_requests.take()); // wakes the thread, which then ends
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A held lock. Dropping it releases the lock; [`release`](Self::release) does the same
/// and reports errors. `Send + Sync`.
pub struct LockGuard {
    // Before `zk`: the monitor thread ends (if this is its last user) before our handle
    // clone goes.
    monitor: Arc<Monitor>,
    zk: ZooKeeper,
    node: String,
    sequence: i32,
    state: Arc<GuardState>,
    patience: Patience,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.node)
            .field("lost", &self.state.reason())
            .finish()
    }
}

impl LockGuard {
    /// The guard of the lock node `node` just acquired, served by `monitor`.
    fn new(
        zk: ZooKeeper,
        node: String,
        sequence: i32,
        monitor: Arc<Monitor>,
        patience: Patience,
    ) -> LockGuard {
        let state = Arc::new(GuardState::new(node.clone()));
        monitor.shared.register(&state);
        LockGuard {
            monitor,
            zk,
            node,
            sequence,
            state,
            patience,
            released: false,
        }
    }

    /// The lock node's path.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The lock node's sequence number: grows with every acquisition of this lock, so it
    /// can serve as a fencing token for resources the lock protects.
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// Whether the lock is known to be lost (see [`LockLost`]). Cheap: no request, no
    /// blocking.
    ///
    /// Session expiry, a closed handle and a disconnection past the grace are known as
    /// soon as the client hears of them. That someone else deleted the lock node is known
    /// only once [`lost`](Self::lost) has been called on this guard (which sets the watch
    /// on the node; a deletion before that call is found too).
    pub fn is_lost(&self) -> bool {
        self.state.reason().is_some()
    }

    /// Why the lock was lost, if it was (known as for [`is_lost`](Self::is_lost)).
    pub fn lost_reason(&self) -> Option<LockLost> {
        self.state.reason()
    }

    /// A receiver that gets the reason once the lock is lost (at once if it already is
    /// known to be). Each call makes an independent receiver; use it with `recv_timeout`
    /// or `crossbeam_channel::select!`. It never fires after a normal release.
    ///
    /// The first call also has the lock's monitor thread watch the lock node (one `get`
    /// with a watch), so that its deletion by someone else is reported as
    /// [`LockLost::NodeDeleted`], including a deletion that happened before the call.
    /// Acquisitions whose guard is never asked cost no such request.
    pub fn lost(&self) -> Receiver<LockLost> {
        let (receiver, first) = self.state.subscribe();
        if first {
            self.monitor.watch(&self.state);
        }
        receiver
    }

    /// Releases the lock (deletes the node). Fails with `RecipeError::Lost` if the lock
    /// had been lost before (the critical section was not protected to the end).
    pub fn release(mut self) -> Result<()> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        // From here on no loss is recorded: our own delete is not reported.
        let lost = self.state.finish();
        self.monitor.shared.forget(&self.state);
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

/// The monitor thread of a [`Lock`]: follows the session events for all guards, and
/// watches the nodes of the guards asked about ([`LockGuard::lost`]).
struct MonitorThread {
    zk: ZooKeeper,
    shared: Arc<Shared>,
    session_events: Receiver<WatchedEvent>,
    requests: Receiver<Arc<GuardState>>,
    watched: Vec<Watched>,
}

/// A guard whose node the monitor watches.
struct Watched {
    guard: Arc<GuardState>,
    /// `None`: to be (re)armed once connected.
    watch: Option<Watch>,
}

enum Wake {
    /// The `Lock` and all its guards are gone.
    Stop,
    Request(Arc<GuardState>),
    Session(std::result::Result<WatchedEvent, RecvError>),
    Node(usize, std::result::Result<WatchedEvent, RecvError>),
    /// The grace deadline or the re-arm retry time came.
    Timer,
}

/// How soon an own-node watch that could not be set for a connection loss is tried
/// again while the session says it is connected (it may have reconnected meanwhile).
const REARM_RETRY: Duration = Duration::from_millis(100);

impl MonitorThread {
    fn run(mut self) {
        loop {
            // Watches still to be armed for guards released meanwhile are not needed.
            self.watched
                .retain(|w| w.watch.is_some() || !w.guard.is_released());
            match self.next_wake() {
                Wake::Stop => return,
                Wake::Request(guard) => self.watch(guard),
                Wake::Session(Err(_)) => {
                    // The handle was closed: the stream has ended.
                    self.shared.end(LockLost::Closed);
                    for watched in self.watched.drain(..) {
                        watched.guard.declare(LockLost::Closed);
                    }
                    return;
                }
                Wake::Session(Ok(event)) => match event.state {
                    SessionState::Expired => self.shared.end(LockLost::SessionExpired),
                    SessionState::AuthFailed | SessionState::Closed => {
                        self.shared.end(LockLost::Closed)
                    }
                    state if state.is_connected() => {
                        self.shared.reconnected();
                        self.rearm();
                    }
                    _ => self.shared.disconnected(),
                },
                Wake::Node(index, Err(_)) => {
                    self.watched
                        .swap_remove(index)
                        .guard
                        .declare(LockLost::Closed);
                }
                Wake::Node(index, Ok(event)) => match event.event_type {
                    EventType::NodeDeleted => {
                        let guard = self.watched.swap_remove(index).guard;
                        guard.declare(LockLost::NodeDeleted);
                    }
                    EventType::Session => {
                        let guard = self.watched.swap_remove(index).guard;
                        guard.declare(match event.state {
                            SessionState::Expired => LockLost::SessionExpired,
                            _ => LockLost::Closed,
                        });
                    }
                    // Data changed or the watch was removed: watch again.
                    _ => {
                        let guard = self.watched.swap_remove(index).guard;
                        self.watch(guard);
                    }
                },
                Wake::Timer => {
                    self.shared.check_grace();
                    self.rearm();
                }
            }
        }
    }

    /// Waits for the next thing to handle.
    fn next_wake(&self) -> Wake {
        let retry =
            self.watched.iter().any(|w| w.watch.is_none()) && self.zk.state().is_connected();
        let retry_at = retry.then(|| Instant::now() + REARM_RETRY);
        let deadline = match (self.shared.grace_deadline(), retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut select = Select::new();
        let requests_index = select.recv(&self.requests);
        let session_index = select.recv(&self.session_events);
        // The node watches follow, in the order of `watched` (armed ones only).
        let first_watch = session_index + 1;
        let mut armed = Vec::with_capacity(self.watched.len());
        for (index, watched) in self.watched.iter().enumerate() {
            if let Some(watch) = &watched.watch {
                select.recv(watch.receiver());
                armed.push(index);
            }
        }
        let operation = match deadline {
            Some(deadline) => match select.select_deadline(deadline) {
                Ok(operation) => operation,
                Err(_) => return Wake::Timer,
            },
            None => select.select(),
        };
        match operation.index() {
            index if index == requests_index => match operation.recv(&self.requests) {
                Ok(guard) => Wake::Request(guard),
                Err(_) => Wake::Stop,
            },
            index if index == session_index => Wake::Session(operation.recv(&self.session_events)),
            index => {
                let position = armed[index - first_watch];
                let watch = self.watched[position].watch.as_ref();
                match watch {
                    Some(watch) => Wake::Node(position, operation.recv(watch.receiver())),
                    None => Wake::Timer, // not reached: only armed watches are selected
                }
            }
        }
    }

    /// Starts watching the guard's node.
    fn watch(&mut self, guard: Arc<GuardState>) {
        if guard.is_released() {
            return;
        }
        match self.arm(&guard.node) {
            Ok(watch) => self.watched.push(Watched { guard, watch }),
            Err(reason) => guard.declare(reason),
        }
    }

    /// Arms again the watches that a connection loss kept from being set.
    fn rearm(&mut self) {
        let mut index = 0;
        while index < self.watched.len() {
            if self.watched[index].watch.is_none() {
                match self.arm(&self.watched[index].guard.node) {
                    Ok(watch) => self.watched[index].watch = watch,
                    Err(reason) => {
                        self.watched.swap_remove(index).guard.declare(reason);
                        continue;
                    }
                }
            }
            index += 1;
        }
    }

    /// Sets the watch on a lock node: `Ok(None)` if the connection is down (armed again
    /// on reconnect), `Err(reason)` if the node or the session is gone.
    fn arm(&self, node: &str) -> std::result::Result<Option<Watch>, LockLost> {
        match self.zk.get_watch(node) {
            Ok((_, _, watch)) => Ok(Some(watch)),
            Err(Error::NoNode) => Err(LockLost::NodeDeleted),
            Err(error) if error.is_retryable() => Ok(None),
            Err(Error::SessionExpired) => Err(LockLost::SessionExpired),
            Err(_) => Err(LockLost::Closed),
        }
    }
}
