//! Session lifecycle: connection states in Apache Curator's vocabulary, and an opt-in
//! client that starts a new session after the old one expired.
//!
//! # Connection states
//! [`ConnectionStates`] turns a handle's session events ([`ZooKeeper::session_events`])
//! into the states Curator's `ConnectionStateListener` reports:
//!
//! | state | meaning | what a recipe does |
//! |---|---|---|
//! | [`Connected`](ConnectionState::Connected) | first event: the session is connected | start |
//! | [`Suspended`](ConnectionState::Suspended) | the connection is lost; the session may still live | stop trusting what it holds (a lock may be gone), wait |
//! | [`Reconnected`](ConnectionState::Reconnected) | the *same* session is back: ephemeral nodes and watches survived | re-read what may have changed |
//! | [`ReadOnly`](ConnectionState::ReadOnly) | connected to a read-only server (only with `read_only(true)`) | reads only |
//! | [`Lost`](ConnectionState::Lost) | the session is over (expired, authentication failed, or closed): it never comes back | anything held on it is gone |
//! | [`NewSession`](ConnectionState::NewSession) | ([`ManagedZooKeeper`] only) a new session replaced the lost one | re-create state; never resume guards |
//!
//! The first event reports the state at subscription (`Connected`, or `Suspended`,
//! `ReadOnly`, `Lost` if the handle is in that state then). Repeats are not reported
//! (two connection losses in a row are one `Suspended`). On a plain handle the stream
//! ends after `Lost`; on a managed client it goes on with `NewSession`.
//!
//! Every event carries the session's *generation*: 1 for the first session, one more
//! for each new session of a [`ManagedZooKeeper`] (always 1 on a plain handle).
//!
//! Not guaranteed: a reader more than 64 events behind loses the oldest
//! `Suspended`/`Reconnected` pairs (see [`ConnectionStates`]). `Lost` means the server
//! said so (or the handle closed): while the client cannot reach any server it cannot
//! know that the session expired, so it stays `Suspended` (Curator can simulate the loss
//! after a session timeout of silence; this does not). Treat `Suspended` as "may be
//! lost" for anything exclusive.
//!
//! # A client that survives expiry
//! A [`ManagedZooKeeper`] holds one session at a time. When the server expires it (or
//! authentication fails), it reports `Lost`, connects again with the same connect string
//! and options (or the connector function it was given, which can also add credentials),
//! and reports `NewSession` with the next generation. [`current`](ManagedZooKeeper::current)
//! always returns the handle of the moment.
//!
//! The contract for recipes built on it:
//! - **Long-lived state** (caches, group membership, persistent ephemeral nodes) may
//!   recover by itself on `NewSession`: re-read, re-create, re-register. The caches of
//!   [`crate::cache`] do.
//! - **Guards** (locks, leases, leadership) are tied to the session, and so to the
//!   generation, they were taken on. A guard must remember its generation and report
//!   itself lost once [`ManagedZooKeeper::generation`] differs (or `Lost` was seen); it
//!   must never re-acquire silently on the new session: another process may have held
//!   the lock in between. Re-acquiring is the application's decision.
//!
//! ```no_run
//! use zookeeper_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};
//! use std::time::Duration;
//!
//! let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let states = client.states();
//! let taken_on = client.generation();
//! for event in states.iter() {
//!     match event.state {
//!         ConnectionState::Suspended => println!("connection lost, waiting"),
//!         ConnectionState::Lost => println!("session {} is over", event.generation),
//!         ConnectionState::NewSession => {
//!             assert_ne!(event.generation, taken_on); // guards of `taken_on` are gone
//!             println!("new session {}", client.current().client_id()?.session_id);
//!         }
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::LossReason;
use crate::events::{receiving_methods, Buffer, EventQueue};
use crate::{RecipeError, Result};
use crossbeam_channel::{select, Receiver, Select, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zookeeper::{EventType, SessionState, Timeout, WatchedEvent, ZooKeeper};

/// A connection state, as Apache Curator names them (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The session is connected (the first event of a stream).
    Connected,
    /// The connection is lost; the session may still be alive on the servers.
    Suspended,
    /// The same session is connected again after `Suspended` or `ReadOnly`.
    Reconnected,
    /// Connected to a read-only server: reads work, writes fail.
    ReadOnly,
    /// The session is over for good: expired, authentication failed, or closed.
    Lost,
    /// A [`ManagedZooKeeper`] established a new session after `Lost`; the event's
    /// generation is the new one.
    NewSession,
}

impl ConnectionState {
    /// Whether requests can be served in this state (`ReadOnly`: reads only).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected
                | ConnectionState::Reconnected
                | ConnectionState::ReadOnly
                | ConnectionState::NewSession
        )
    }
}

/// One connection-state change of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionEvent {
    /// The new state.
    pub state: ConnectionState,
    /// The generation of the session it concerns (1 for the first; see the
    /// [module docs](self)).
    pub generation: u64,
}

// ---------------------------------------------------------------------------------------
// Translating session events.
// ---------------------------------------------------------------------------------------

/// Turns C session states into connection states, dropping repeats.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Translator {
    last: Option<ConnectionState>,
}

impl Translator {
    /// A translator whose last reported state is `last`.
    pub(crate) fn after(last: ConnectionState) -> Translator {
        Translator { last: Some(last) }
    }

    /// The first event: the state at subscription.
    pub(crate) fn initial(&mut self, state: SessionState) -> ConnectionState {
        let first = match state {
            SessionState::Connected => ConnectionState::Connected,
            SessionState::ConnectedReadOnly => ConnectionState::ReadOnly,
            state if state.is_terminal() => ConnectionState::Lost,
            _ => ConnectionState::Suspended,
        };
        self.last = Some(first);
        first
    }

    /// The state a session event moves to, unless it repeats the last one.
    pub(crate) fn on_session(&mut self, state: SessionState) -> Option<ConnectionState> {
        use ConnectionState::*;
        if self.last == Some(Lost) {
            return None;
        }
        let next = match state {
            SessionState::Connected => match self.last {
                None => Connected,
                Some(Suspended) | Some(ReadOnly) => Reconnected,
                Some(_) => return None,
            },
            SessionState::ConnectedReadOnly => match self.last {
                Some(ReadOnly) => return None,
                _ => ReadOnly,
            },
            state if state.is_terminal() => Lost,
            SessionState::Connecting | SessionState::Associating | SessionState::NotConnected => {
                match self.last {
                    Some(Suspended) => return None,
                    _ => Suspended,
                }
            }
            _ => return None,
        };
        self.last = Some(next);
        Some(next)
    }

    /// The last state reported.
    pub(crate) fn last(&self) -> Option<ConnectionState> {
        self.last
    }
}

// ---------------------------------------------------------------------------------------
// The stream.
// ---------------------------------------------------------------------------------------

/// Most events a [`ConnectionStates`] keeps for a reader that does not read.
const STATE_CAPACITY: usize = 64;

/// Queued connection events, bounded: see [`ConnectionStates`].
#[derive(Debug, Default)]
pub(crate) struct StateBuffer {
    queue: VecDeque<ConnectionEvent>,
}

impl StateBuffer {
    pub(crate) fn push(&mut self, event: ConnectionEvent) {
        if self.queue.len() >= STATE_CAPACITY {
            self.make_room();
        }
        self.queue.push_back(event);
    }

    /// Drops the oldest `Suspended`/`Reconnected` pair of one session (a blip the reader
    /// no longer needs to hear about: later events tell the current state), else the
    /// oldest event that is neither `Lost` nor `NewSession`.
    fn make_room(&mut self) {
        use ConnectionState::*;
        let pair = (1..self.queue.len()).find(|&i| {
            let (a, b) = (self.queue[i - 1], self.queue[i]);
            a.state == Suspended && b.state == Reconnected && a.generation == b.generation
        });
        if let Some(i) = pair {
            self.queue.drain(i - 1..=i);
            return;
        }
        let droppable = self
            .queue
            .iter()
            .position(|e| !matches!(e.state, Lost | NewSession))
            .unwrap_or(0);
        self.queue.remove(droppable);
    }
}

impl Buffer for StateBuffer {
    type Item = ConnectionEvent;

    fn pop(&mut self) -> Option<ConnectionEvent> {
        self.queue.pop_front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// A stream of [`ConnectionEvent`]s (see the [module docs](self)): from a plain handle
/// ([`ConnectionStates::new`]) or a [`ManagedZooKeeper`] ([`ManagedZooKeeper::states`]).
/// Read it blocking ([`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout),
/// [`iter`](Self::iter)), without waiting ([`try_recv`](Self::try_recv)) or as a future
/// ([`next`](Self::next)).
///
/// Memory is bounded: at most 64 events are kept for a reader that does not read; beyond
/// that, the oldest `Suspended`/`Reconnected` pair is dropped (`Lost` and `NewSession`
/// are kept), so the last event always tells the current state.
///
/// The stream of a plain handle ends after `Lost` (expiry, authentication failure, or
/// close); that of a managed client ends when the client is closed. A stream does not
/// keep its session open.
pub struct ConnectionStates {
    queue: Arc<EventQueue<StateBuffer>>,
    /// The forwarding thread of a plain handle's stream (stopped when dropped).
    _pump: Option<Pump>,
}

struct Pump {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for ConnectionStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionStates")
            .field("queued", &self.queue.len())
            .field("ended", &self.queue.is_closed())
            .finish()
    }
}

impl ConnectionStates {
    /// The connection states of a plain handle, from now on (generation 1). A small
    /// thread forwards the handle's session events until the stream is dropped or ends.
    pub fn new(zk: &ZooKeeper) -> Result<ConnectionStates> {
        let queue = EventQueue::new(StateBuffer::default());
        let events = zk.session_events().into_receiver();
        let mut translator = Translator::default();
        let first = translator.initial(zk.state());
        queue.update(|b| {
            b.push(ConnectionEvent {
                state: first,
                generation: 1,
            })
        });
        if first == ConnectionState::Lost {
            queue.close();
            return Ok(ConnectionStates { queue, _pump: None });
        }
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let feed = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name("zk-connection-states".into())
            .spawn(move || pump(events, translator, &feed, &stop_rx))
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ConnectionStates {
            queue,
            _pump: Some(Pump {
                stop: Some(stop),
                thread: Some(thread),
            }),
        })
    }

    fn managed(queue: Arc<EventQueue<StateBuffer>>) -> ConnectionStates {
        ConnectionStates { queue, _pump: None }
    }

    receiving_methods!(ConnectionEvent);

    /// Rings when an event was queued or the stream ended (for a recipe thread's
    /// `Select`; drain it before the queue).
    pub(crate) fn doorbell(&self) -> &Receiver<()> {
        self.queue.doorbell()
    }
}

fn pump(
    events: Receiver<WatchedEvent>,
    mut translator: Translator,
    queue: &EventQueue<StateBuffer>,
    stop: &Receiver<()>,
) {
    loop {
        select! {
            recv(events) -> event => {
                let state = match event {
                    Ok(event) if event.event_type == EventType::Session => {
                        translator.on_session(event.state)
                    }
                    Ok(_) => None,
                    // The handle closed.
                    Err(_) => translator.on_session(SessionState::Closed),
                };
                if let Some(state) = state {
                    queue.update(|b| b.push(ConnectionEvent { state, generation: 1 }));
                }
                if translator.last() == Some(ConnectionState::Lost) {
                    break;
                }
            }
            recv(stop) -> _ => break,
        }
    }
    queue.close();
}

// ---------------------------------------------------------------------------------------
// The managed client.
// ---------------------------------------------------------------------------------------

/// One session of a [`ManagedZooKeeper`]: its handle and generation.
#[derive(Debug, Clone)]
pub struct ManagedSession {
    /// 1 for the first session, one more for each new session.
    pub generation: u64,
    /// The session's handle.
    pub zk: ZooKeeper,
}

type Connector = dyn Fn() -> zookeeper::Result<ZooKeeper> + Send + Sync;

struct ManagedState {
    generation: u64,
    zk: ZooKeeper,
    last: ConnectionState,
    closed: bool,
    subscribers: Vec<Weak<EventQueue<StateBuffer>>>,
}

struct Shared {
    state: Mutex<ManagedState>,
    changed: Condvar,
    connector: Box<Connector>,
}

impl Shared {
    /// Records and reports a state of `generation` (ignored once closed).
    fn publish(&self, state: ConnectionState, generation: u64) {
        let mut current = self.state.lock();
        if current.closed || current.generation != generation {
            return;
        }
        current.last = state;
        let event = ConnectionEvent { state, generation };
        current.subscribers.retain(|weak| match weak.upgrade() {
            Some(queue) => {
                queue.update(|b| b.push(event));
                true
            }
            None => false,
        });
        drop(current);
        self.changed.notify_all();
    }
}

struct Owner {
    shared: Arc<Shared>,
    stop: Mutex<Option<Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Owner {
    fn close(&self) {
        self.stop.lock().take();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        let (zk, queues) = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return;
            }
            let lost = state.last != ConnectionState::Lost;
            let event = ConnectionEvent {
                state: ConnectionState::Lost,
                generation: state.generation,
            };
            state.last = ConnectionState::Lost;
            state.closed = true;
            let queues: Vec<_> = state
                .subscribers
                .drain(..)
                .filter_map(|w| w.upgrade())
                .collect();
            if lost {
                for queue in &queues {
                    queue.update(|b| b.push(event));
                }
            }
            (state.zk.clone(), queues)
        };
        self.shared.changed.notify_all();
        if let Err(error) = zk.close() {
            log::debug!("recipes: closing the managed session: {error}");
        }
        for queue in queues {
            queue.close();
        }
    }
}

/// A client that holds one session at a time and establishes a new one after the
/// server expired the old one (see the [module docs](self) for the contract with
/// guards). Cheap to clone; the last clone dropped closes it.
#[derive(Clone)]
pub struct ManagedZooKeeper {
    owner: Arc<Owner>,
}

impl std::fmt::Debug for ManagedZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.owner.shared.state.lock();
        f.debug_struct("ManagedZooKeeper")
            .field("generation", &state.generation)
            .field("state", &state.last)
            .field("closed", &state.closed)
            .finish()
    }
}

impl ManagedZooKeeper {
    /// Connects to `hosts` with `session_timeout` (as [`ZooKeeper::connect`]) and does
    /// the same for each new session.
    pub fn connect(hosts: &str, session_timeout: Duration) -> Result<ManagedZooKeeper> {
        let hosts = hosts.to_string();
        ManagedZooKeeper::with_connector(move || ZooKeeper::connect(&hosts, session_timeout))
    }

    /// Uses `connect` to establish each session (the first one before this returns, its
    /// error is returned; later ones on the client's monitor thread). It may set any option of [`ZooKeeper::builder`] and add
    /// credentials (`add_auth`) before returning the handle; it must not resume a session
    /// (`builder(..).session(..)`): each call must start a new one. A failing call is
    /// retried with a growing pause (0.1 s up to 5 s) until it succeeds or the client is
    /// closed.
    pub fn with_connector(
        connect: impl Fn() -> zookeeper::Result<ZooKeeper> + Send + Sync + 'static,
    ) -> Result<ManagedZooKeeper> {
        let zk = connect()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(ManagedState {
                generation: 1,
                zk,
                last: ConnectionState::Connected,
                closed: false,
                subscribers: Vec::new(),
            }),
            changed: Condvar::new(),
            connector: Box::new(connect),
        });
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let monitor = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("zk-managed-session".into())
            .spawn(move || run_monitor(&monitor, &stop_rx))
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ManagedZooKeeper {
            owner: Arc::new(Owner {
                shared,
                stop: Mutex::new(Some(stop)),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The handle of the current session. Keep it only for work tied to this session;
    /// call again for later work (after a new session it is a different handle, and the
    /// old one fails with `SessionExpired` or `Closed`).
    pub fn current(&self) -> ZooKeeper {
        self.owner.shared.state.lock().zk.clone()
    }

    /// The current session's generation: 1 for the first, one more for each new session.
    pub fn generation(&self) -> u64 {
        self.owner.shared.state.lock().generation
    }

    /// The current session's handle and generation, read together.
    pub fn session(&self) -> ManagedSession {
        let state = self.owner.shared.state.lock();
        ManagedSession {
            generation: state.generation,
            zk: state.zk.clone(),
        }
    }

    /// Whether `generation` is still the current session's (a guard's check).
    pub fn is_current(&self, generation: u64) -> bool {
        let state = self.owner.shared.state.lock();
        !state.closed && state.generation == generation
    }

    /// The last state reported (`Lost` between an expiry and the next session, and once
    /// closed).
    pub fn state(&self) -> ConnectionState {
        self.owner.shared.state.lock().last
    }

    /// A new stream of this client's connection states, starting with the current one
    /// (`Connected` when connected, whatever the generation). It ends when the client is
    /// closed.
    pub fn states(&self) -> ConnectionStates {
        let queue = EventQueue::new(StateBuffer::default());
        let mut state = self.owner.shared.state.lock();
        let first = match state.last {
            ConnectionState::Reconnected | ConnectionState::NewSession => {
                ConnectionState::Connected
            }
            other => other,
        };
        let generation = state.generation;
        queue.update(|b| {
            b.push(ConnectionEvent {
                state: first,
                generation,
            })
        });
        if state.closed {
            queue.close();
        } else {
            state.subscribers.push(Arc::downgrade(&queue));
        }
        ConnectionStates::managed(queue)
    }

    /// Waits until a session is connected (the current one, or the next one after an
    /// expiry) and returns it; `Timeout`, or `Closed` once the client is closed.
    pub fn wait_connected(&self, timeout: impl Into<Timeout>) -> Result<ManagedSession> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = crate::events::deadline_after(timeout);
        let mut state = self.owner.shared.state.lock();
        loop {
            if state.closed {
                return Err(RecipeError::ZooKeeper(zookeeper::Error::Closed));
            }
            if state.last.is_connected() && state.zk.state().is_connected() {
                return Ok(ManagedSession {
                    generation: state.generation,
                    zk: state.zk.clone(),
                });
            }
            // The monitor learns of a reconnection a moment after the handle: re-check
            // the handle's own state at short intervals too.
            let wake = deadline.min(Instant::now() + Duration::from_millis(50));
            let _ = self.owner.shared.changed.wait_until(&mut state, wake);
            if Instant::now() >= deadline {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// Whether [`close`](Self::close) was called (or the current handle was closed
    /// directly, which ends the client too).
    pub fn is_closed(&self) -> bool {
        self.owner.shared.state.lock().closed
    }

    /// Closes the current session and stops making new ones; streams report `Lost` and
    /// end. Idempotent; later calls on handles from [`current`](Self::current) fail with
    /// `Closed`. Waits for a connection attempt in progress to finish.
    pub fn close(&self) {
        self.owner.close();
    }
}

/// Why a session's monitoring ended.
enum SessionEnd {
    /// Stop requested.
    Stop,
    /// The session expired or failed authentication.
    Terminal,
    /// The handle was closed (not by the managed client).
    Closed,
}

/// The monitor thread: follows the current session, replaces it after expiry.
fn run_monitor(shared: &Shared, stop: &Receiver<()>) {
    let mut last = ConnectionState::Connected;
    loop {
        let (zk, generation) = {
            let state = shared.state.lock();
            (state.zk.clone(), state.generation)
        };
        match follow_session(shared, &zk, generation, last, stop) {
            SessionEnd::Stop => return,
            SessionEnd::Closed => {
                // Someone closed the handle itself: the managed client is over too.
                let mut state = shared.state.lock();
                state.closed = true;
                let queues: Vec<_> = state
                    .subscribers
                    .drain(..)
                    .filter_map(|w| w.upgrade())
                    .collect();
                drop(state);
                shared.changed.notify_all();
                for queue in queues {
                    queue.close();
                }
                return;
            }
            SessionEnd::Terminal => {}
        }
        // The session is gone: make a new one (the old handle is closed once replaced).
        let mut pause = Duration::from_millis(100);
        let new = loop {
            match (shared.connector)() {
                Ok(zk) => break zk,
                Err(error) => {
                    log::warn!("recipes: managed client: new session failed: {error}");
                    select! {
                        recv(stop) -> _ => return,
                        default(pause) => {}
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        };
        let old = {
            let mut state = shared.state.lock();
            if state.closed {
                drop(state);
                let _ = new.close();
                return;
            }
            state.generation += 1;
            std::mem::replace(&mut state.zk, new)
        };
        let _ = old.close();
        shared.publish(ConnectionState::NewSession, generation + 1);
        last = ConnectionState::NewSession;
        if matches!(stop.try_recv(), Err(TryRecvError::Disconnected)) {
            return;
        }
    }
}

/// Reports one session's states until it ends.
fn follow_session(
    shared: &Shared,
    zk: &ZooKeeper,
    generation: u64,
    last: ConnectionState,
    stop: &Receiver<()>,
) -> SessionEnd {
    let events = zk.session_events().into_receiver();
    let mut translator = Translator::after(last);
    // Whatever happened before the subscription.
    let mut seen = Some(zk.state());
    loop {
        if let Some(session_state) = seen.take() {
            if let Some(state) = translator.on_session(session_state) {
                shared.publish(state, generation);
            }
            if translator.last() == Some(ConnectionState::Lost) {
                return if session_state == SessionState::Closed {
                    SessionEnd::Closed
                } else {
                    SessionEnd::Terminal
                };
            }
        }
        select! {
            recv(events) -> event => match event {
                Ok(event) if event.event_type == EventType::Session => seen = Some(event.state),
                Ok(_) => {}
                Err(_) => seen = Some(SessionState::Closed),
            },
            recv(stop) -> _ => return SessionEnd::Stop,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Either client.
// ---------------------------------------------------------------------------------------

/// The client a long-lived recipe follows: a plain handle (one session: its loss ends
/// the recipe) or a [`ManagedZooKeeper`] (the recipe carries on in each new session).
/// Made from `&ZooKeeper`, `ZooKeeper`, `&ManagedZooKeeper` or `ManagedZooKeeper`.
///
/// A recipe holds a clone, so the session (or managed client) stays open while the
/// recipe runs, even if the application dropped its own handle.
#[derive(Debug, Clone)]
pub enum Client {
    /// One session.
    Plain(ZooKeeper),
    /// New sessions after expiry.
    Managed(ManagedZooKeeper),
}

impl From<ZooKeeper> for Client {
    fn from(zk: ZooKeeper) -> Client {
        Client::Plain(zk)
    }
}

impl From<&ZooKeeper> for Client {
    fn from(zk: &ZooKeeper) -> Client {
        Client::Plain(zk.clone())
    }
}

impl From<ManagedZooKeeper> for Client {
    fn from(managed: ManagedZooKeeper) -> Client {
        Client::Managed(managed)
    }
}

impl From<&ManagedZooKeeper> for Client {
    fn from(managed: &ManagedZooKeeper) -> Client {
        Client::Managed(managed.clone())
    }
}

impl Client {
    /// The current session (generation 1 for a plain handle).
    pub fn session(&self) -> ManagedSession {
        match self {
            Client::Plain(zk) => ManagedSession {
                generation: 1,
                zk: zk.clone(),
            },
            Client::Managed(managed) => managed.session(),
        }
    }

    /// Whether a new session follows the loss of one.
    pub fn renews_sessions(&self) -> bool {
        matches!(self, Client::Managed(_))
    }

    /// A stream of the client's connection states.
    pub fn states(&self) -> Result<ConnectionStates> {
        match self {
            Client::Plain(zk) => ConnectionStates::new(zk),
            Client::Managed(managed) => Ok(managed.states()),
        }
    }

    /// The connection states for a recipe thread that waits in a `Select` (no extra
    /// thread for a plain handle).
    pub(crate) fn feed(&self) -> StateFeed {
        match self {
            Client::Plain(zk) => {
                let events = zk.session_events().into_receiver();
                let mut translator = Translator::default();
                let first = translator.initial(zk.state());
                StateFeed::Plain {
                    events,
                    translator,
                    first: Some(first),
                    ended: false,
                }
            }
            Client::Managed(managed) => StateFeed::Managed(managed.states()),
        }
    }
}

/// A recipe thread's view of its client's connection states.
pub(crate) enum StateFeed {
    Plain {
        events: Receiver<WatchedEvent>,
        translator: Translator,
        first: Option<ConnectionState>,
        ended: bool,
    },
    Managed(ConnectionStates),
}

impl StateFeed {
    /// Adds what to wait on to `select`.
    pub(crate) fn add_to<'a>(&'a self, select: &mut Select<'a>) -> usize {
        match self {
            StateFeed::Plain { events, .. } => select.recv(events),
            StateFeed::Managed(states) => select.recv(states.doorbell()),
        }
    }

    /// Every event available now, without blocking; the flag says whether the feed
    /// has ended (nothing more will come).
    pub(crate) fn drain(&mut self) -> (Vec<ConnectionEvent>, bool) {
        let mut out = Vec::new();
        match self {
            StateFeed::Plain {
                events,
                translator,
                first,
                ended,
            } => {
                if let Some(state) = first.take() {
                    out.push(ConnectionEvent {
                        state,
                        generation: 1,
                    });
                }
                while !*ended {
                    let state = match events.try_recv() {
                        Ok(event) if event.event_type == EventType::Session => event.state,
                        Ok(_) => continue,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => SessionState::Closed,
                    };
                    if let Some(state) = translator.on_session(state) {
                        out.push(ConnectionEvent {
                            state,
                            generation: 1,
                        });
                    }
                    if translator.last() == Some(ConnectionState::Lost) {
                        *ended = true;
                    }
                }
                (out, *ended)
            }
            StateFeed::Managed(states) => {
                while states.doorbell().try_recv().is_ok() {}
                loop {
                    match states.try_recv() {
                        Ok(event) => out.push(event),
                        Err(TryRecvError::Empty) => return (out, false),
                        Err(TryRecvError::Disconnected) => return (out, true),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_follows_curator() {
        use ConnectionState::*;
        let mut t = Translator::default();
        assert_eq!(t.initial(SessionState::Connected), Connected);
        assert_eq!(t.on_session(SessionState::Connected), None);
        assert_eq!(t.on_session(SessionState::Connecting), Some(Suspended));
        assert_eq!(t.on_session(SessionState::Connecting), None);
        assert_eq!(t.on_session(SessionState::Connected), Some(Reconnected));
        assert_eq!(
            t.on_session(SessionState::ConnectedReadOnly),
            Some(ReadOnly)
        );
        assert_eq!(t.on_session(SessionState::Connected), Some(Reconnected));
        assert_eq!(t.on_session(SessionState::Expired), Some(Lost));
        assert_eq!(t.on_session(SessionState::Connected), None);
        assert_eq!(t.on_session(SessionState::Closed), None);

        let mut fresh = Translator::after(NewSession);
        assert_eq!(fresh.on_session(SessionState::Connected), None);
        assert_eq!(fresh.on_session(SessionState::Connecting), Some(Suspended));
        assert_eq!(fresh.on_session(SessionState::AuthFailed), Some(Lost));

        let mut late = Translator::default();
        assert_eq!(late.initial(SessionState::Connecting), Suspended);
        assert_eq!(late.initial(SessionState::Expired), Lost);
    }

    #[test]
    fn state_buffer_is_bounded_and_keeps_losses() {
        use ConnectionState::*;
        let mut buffer = StateBuffer::default();
        let at = |state, generation| ConnectionEvent { state, generation };
        buffer.push(at(Connected, 1));
        buffer.push(at(Lost, 1));
        buffer.push(at(NewSession, 2));
        for _ in 0..1000 {
            buffer.push(at(Suspended, 2));
            buffer.push(at(Reconnected, 2));
        }
        buffer.push(at(Suspended, 2));
        assert!(buffer.len() <= STATE_CAPACITY);
        let all: Vec<_> = std::iter::from_fn(|| buffer.pop()).collect();
        assert!(all.contains(&at(Lost, 1)));
        assert!(all.contains(&at(NewSession, 2)));
        assert_eq!(all.last(), Some(&at(Suspended, 2)));
    }
}
