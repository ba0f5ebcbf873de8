//! The managed client: a new session after expiry, its generation, and its stream.
//!
//! No thread of its own while a session lives: a [`Follower`] on the current session
//! records each state and wakes readers where the C client delivers the event. Only an
//! expiry (or failed authentication) starts a thread, which runs the connector (user
//! code that blocks), installs the new session, and closes the old handle; it ends then.

use crate::client::ZooKeeper;
use crate::error::{Error, Result};
use crate::states::{
    After, ConnectionEvent, ConnectionState, ConnectionStates, Follower, StateQueue, Target,
    Translator,
};
use crate::timeout::Timeout;
use crate::types::SessionState;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// One session of a [`ManagedZooKeeper`]: its handle and generation.
#[derive(Debug, Clone)]
pub struct ManagedSession {
    /// 1 for the first session, one more for each new session.
    pub generation: u64,
    /// The session's handle.
    pub zk: ZooKeeper,
}

/// How each new session is made.
enum Connector {
    /// [`ZooKeeper::new_session`] of the session it replaces.
    LikeTheLast,
    /// The user's function.
    Custom(Box<dyn Fn() -> Result<ZooKeeper> + Send + Sync>),
}

/// Whether a thread is making a new session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    Idle,
    /// From the moment it is decided until the new session is installed, or, if the
    /// client was closed meanwhile, until what was made is closed (`close` waits for it).
    Running,
    /// The thread could not be started; [`ManagedZooKeeper::wait_connected`] tries again.
    SpawnFailed,
}

thread_local! {
    /// Set on a renewal thread: a `close` run there (by a waker) must not wait for it.
    static RENEWING: Cell<bool> = const { Cell::new(false) };
}

struct ManagedState {
    generation: u64,
    zk: ZooKeeper,
    last: ConnectionState,
    closed: bool,
    subscribers: Vec<Weak<StateQueue>>,
    renewal: Renewal,
}

impl ManagedState {
    /// Queues `event` for every live subscriber (readers' wakers go to `after`).
    fn publish(&mut self, event: ConnectionEvent, after: &mut After) {
        self.subscribers.retain(|weak| match weak.upgrade() {
            Some(queue) => {
                queue.push(event, after);
                true
            }
            None => false,
        });
    }

    /// Ends every subscriber's stream.
    fn end_streams(&mut self, after: &mut After) {
        for queue in self.subscribers.drain(..).filter_map(|weak| weak.upgrade()) {
            queue.end(after);
        }
    }
}

struct Shared {
    state: Mutex<ManagedState>,
    /// Notified at every change of `state` (for `wait_connected` and a renewal's pause).
    changed: Condvar,
    connector: Connector,
}

impl Shared {
    /// A state of the session of `generation`, from its follower (on the thread that
    /// delivered the event: never blocks). `false` once that session is not followed.
    fn on_state(
        self: &Arc<Self>,
        generation: u64,
        state: ConnectionState,
        raw: SessionState,
        after: &mut After,
    ) -> bool {
        let mut current = self.state.lock();
        if current.closed || current.generation != generation {
            return false;
        }
        current.last = state;
        current.publish(ConnectionEvent { state, generation }, after);
        if state == ConnectionState::Lost {
            if raw == SessionState::Closed {
                // Someone closed the handle itself: the managed client is over too.
                current.closed = true;
                current.end_streams(after);
            } else if current.renewal != Renewal::Running {
                current.renewal = Renewal::Running;
                let shared = Arc::clone(self);
                after.then(move || start_renewal(shared, generation));
            }
        }
        drop(current);
        self.changed.notify_all();
        true
    }

    /// Follows the session of `generation` (`zk`) from now on.
    fn follow(self: &Arc<Self>, zk: &ZooKeeper, generation: u64, translator: Translator) {
        let target = ManagedTarget {
            shared: Arc::downgrade(self),
            generation,
        };
        // Kept alive by its subscription to the session's events.
        drop(Follower::start(zk, translator, target));
    }
}

/// Reports one session's states to its managed client.
struct ManagedTarget {
    shared: Weak<Shared>,
    generation: u64,
}

impl Target for ManagedTarget {
    fn report(&self, state: ConnectionState, raw: SessionState, after: &mut After) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let go_on = shared.on_state(self.generation, state, raw, after);
        // If the client was dropped meanwhile this is the last reference: its connector
        // (the user's) is dropped once no lock is held.
        after.then(move || drop(shared));
        go_on
    }
}

/// Starts the thread that makes the session after `generation` (`renewal` is
/// `Running`).
fn start_renewal(shared: Arc<Shared>, generation: u64) {
    let runner = Arc::clone(&shared);
    let spawned = std::thread::Builder::new()
        .name("zk-new-session".into())
        .spawn(move || renew(runner, generation));
    if let Err(error) = spawned {
        log::error!("zookeeper-mt: managed client: no thread for a new session: {error}");
        let mut state = shared.state.lock();
        state.renewal = Renewal::SpawnFailed;
        drop(state);
        shared.changed.notify_all();
    }
}

/// Ends a renewal (`renewal` back to `Idle`, `close` woken) when dropped, unless the
/// new session was installed (which ends it under the same lock).
struct Renewing<'a> {
    shared: &'a Shared,
    installed: bool,
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        if !self.installed {
            self.shared.state.lock().renewal = Renewal::Idle;
            self.shared.changed.notify_all();
        }
    }
}

/// The renewal thread: connects until it succeeds or the client is closed, installs
/// the new session, follows it, and closes the old handle.
fn renew(shared: Arc<Shared>, lost: u64) {
    RENEWING.with(|flag| flag.set(true));
    let mut renewing = Renewing {
        shared: &shared,
        installed: false,
    };
    let mut pause = Duration::from_millis(100);
    let new = loop {
        let old = {
            let state = shared.state.lock();
            if state.closed {
                return;
            }
            state.zk.clone()
        };
        let attempt =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &shared.connector {
                Connector::LikeTheLast => old.new_session(),
                Connector::Custom(connect) => connect(),
            }));
        drop(old);
        match attempt {
            Ok(Ok(zk)) => break zk,
            Ok(Err(error)) => {
                log::warn!("zookeeper-mt: managed client: new session failed: {error}")
            }
            Err(_) => log::error!("zookeeper-mt: managed client: the connector panicked"),
        }
        let deadline = Instant::now() + pause;
        let mut state = shared.state.lock();
        while !state.closed && !shared.changed.wait_until(&mut state, deadline).timed_out() {}
        if state.closed {
            return;
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    };
    let generation = lost + 1;
    let mut after = After::default();
    let old = {
        let mut state = shared.state.lock();
        if state.closed {
            drop(state);
            // Closed before `renewing` ends: `close` returns after this.
            close_quietly(&new, "a new session made as the client closed");
            return;
        }
        state.generation = generation;
        state.last = ConnectionState::NewSession;
        state.renewal = Renewal::Idle;
        renewing.installed = true;
        state.publish(
            ConnectionEvent {
                state: ConnectionState::NewSession,
                generation,
            },
            &mut after,
        );
        std::mem::replace(&mut state.zk, new.clone())
    };
    drop(renewing);
    shared.changed.notify_all();
    after.run();
    // What happened to the new session since it connected is reported now.
    shared.follow(
        &new,
        generation,
        Translator::after(ConnectionState::NewSession),
    );
    close_quietly(&old, "the lost session");
}

fn close_quietly(zk: &ZooKeeper, what: &str) {
    if let Err(error) = zk.close() {
        log::debug!("zookeeper-mt: managed client: closing {what}: {error}");
    }
}

/// The last clone of a [`ManagedZooKeeper`] closes it.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Owner {
    /// Marks the client closed and reports it; the handle to close, or `None` if it was
    /// closed already (then the last handle too).
    fn shut(&self) -> std::result::Result<ZooKeeper, ZooKeeper> {
        let mut after = After::default();
        let zk = {
            let mut state = self.shared.state.lock();
            if state.closed {
                return Err(state.zk.clone());
            }
            state.closed = true;
            if state.last != ConnectionState::Lost {
                state.last = ConnectionState::Lost;
                let event = ConnectionEvent {
                    state: ConnectionState::Lost,
                    generation: state.generation,
                };
                state.publish(event, &mut after);
            }
            state.end_streams(&mut after);
            state.zk.clone()
        };
        self.shared.changed.notify_all();
        after.run();
        Ok(zk)
    }

    fn close(&self) {
        let Ok(zk) = self.shut() else {
            return;
        };
        // A connection attempt in progress ends (and closes what it made) before this
        // returns, except where the renewal could be waiting for this thread: on a C
        // thread (the renewal closes the old handle, which joins them), in a close's
        // final sweep, or on the renewal thread itself (a waker it ran).
        let may_wait = !crate::no_wait::here() && !RENEWING.with(Cell::get);
        if may_wait {
            let mut state = self.shared.state.lock();
            while state.renewal == Renewal::Running {
                self.shared.changed.wait(&mut state);
            }
        }
        close_quietly(&zk, "the session");
    }
}

/// A client that holds one session at a time and establishes a new one after the
/// server expired the old one. Cheap to clone; the last clone dropped closes it.
///
/// When the server expires the session (or authentication fails), it reports `Lost`,
/// makes a new session ([`ZooKeeper::new_session`] of the lost one: the same connect
/// string, options and credentials; or the connector function it was given), and
/// reports `NewSession` with the next generation. [`current`](Self::current) always
/// returns the handle of the moment. See [`ConnectionState`] for the states.
///
/// It has no thread of its own while its session lives: the session's states are
/// followed where the C client delivers them. A thread is started after an expiry to
/// make the new session (the connector may block), and ends once it is made.
///
/// The contract for recipes built on it:
/// - **Long-lived state** (caches, group membership, persistent ephemeral nodes) may
///   recover by itself on `NewSession`: re-read, re-create, re-register.
/// - **Guards** (locks, leases, leadership) are tied to the session, and so to the
///   generation, they were taken on. A guard must remember its generation and report
///   itself lost once [`generation`](Self::generation) differs (or `Lost` was seen); it
///   must never re-acquire silently on the new session: another process may have held
///   the lock in between. Re-acquiring is the application's decision.
///
/// ```no_run
/// use zookeeper_mt::{ConnectionState, ManagedZooKeeper};
/// use std::time::Duration;
///
/// let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let states = client.states();
/// let taken_on = client.generation();
/// for event in states.iter() {
///     match event.state {
///         ConnectionState::Suspended => println!("connection lost, waiting"),
///         ConnectionState::Lost => println!("session {} is over", event.generation),
///         ConnectionState::NewSession => {
///             assert_ne!(event.generation, taken_on); // guards of `taken_on` are gone
///             println!("new session {}", client.current().client_id()?.session_id);
///         }
///         _ => {}
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    /// Manages `zk`'s session (generation 1) and makes each new one with
    /// [`ZooKeeper::new_session`] of the session it replaces: the same connect string,
    /// options, TLS/SASL settings, and the credentials given to `add_auth`. The client
    /// owns the session from now on: closing it closes `zk`. A failing attempt is
    /// retried with a growing pause (0.1 s up to 5 s) until it succeeds or the client
    /// is closed.
    pub fn new(zk: ZooKeeper) -> ManagedZooKeeper {
        ManagedZooKeeper::starting(zk, Connector::LikeTheLast)
    }

    /// Connects to `hosts` with `session_timeout` (as [`ZooKeeper::connect`]) and makes
    /// each new session the same way (see [`new`](Self::new)).
    pub fn connect(hosts: &str, session_timeout: Duration) -> Result<ManagedZooKeeper> {
        Ok(ManagedZooKeeper::new(ZooKeeper::connect(
            hosts,
            session_timeout,
        )?))
    }

    /// Uses `connect` to establish each session (the first one before this returns, its
    /// error is returned; later ones on a thread of their own, as it may block). It may
    /// set any option of [`ZooKeeper::builder`] and add credentials (`add_auth`) before
    /// returning the handle; it must not resume a session (`builder(..).session(..)`):
    /// each call must start a new one. A failing call (or one that panics) is retried
    /// with a growing pause (0.1 s up to 5 s) until it succeeds or the client is closed.
    pub fn with_connector(
        connect: impl Fn() -> Result<ZooKeeper> + Send + Sync + 'static,
    ) -> Result<ManagedZooKeeper> {
        let zk = connect()?;
        Ok(ManagedZooKeeper::starting(
            zk,
            Connector::Custom(Box::new(connect)),
        ))
    }

    fn starting(zk: ZooKeeper, connector: Connector) -> ManagedZooKeeper {
        let shared = Arc::new(Shared {
            state: Mutex::new(ManagedState {
                generation: 1,
                zk: zk.clone(),
                // Replaced at once by the state the follower finds.
                last: ConnectionState::Connected,
                closed: false,
                subscribers: Vec::new(),
                renewal: Renewal::Idle,
            }),
            changed: Condvar::new(),
            connector,
        });
        shared.follow(&zk, 1, Translator::default());
        ManagedZooKeeper {
            owner: Arc::new(Owner { shared }),
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// The handle of the current session. Keep it only for work tied to this session;
    /// call again for later work (after a new session it is a different handle, and the
    /// old one fails with `SessionExpired` or `Closed`).
    pub fn current(&self) -> ZooKeeper {
        self.shared().state.lock().zk.clone()
    }

    /// The current session's generation: 1 for the first, one more for each new session.
    pub fn generation(&self) -> u64 {
        self.shared().state.lock().generation
    }

    /// The current session's handle and generation, read together.
    pub fn session(&self) -> ManagedSession {
        let state = self.shared().state.lock();
        ManagedSession {
            generation: state.generation,
            zk: state.zk.clone(),
        }
    }

    /// Whether `generation` is still the current session's (a guard's check).
    pub fn is_current(&self, generation: u64) -> bool {
        let state = self.shared().state.lock();
        !state.closed && state.generation == generation
    }

    /// The last state reported (`Lost` between an expiry and the next session, and once
    /// closed).
    pub fn state(&self) -> ConnectionState {
        self.shared().state.lock().last
    }

    /// A new stream of this client's connection states, starting with the current one
    /// (`Connected` when connected, whatever the generation). It ends when the client is
    /// closed. Bounded as every [`ConnectionStates`].
    pub fn states(&self) -> ConnectionStates {
        let queue = StateQueue::new();
        let mut after = After::default();
        let mut state = self.shared().state.lock();
        let first = match state.last {
            ConnectionState::Reconnected | ConnectionState::NewSession => {
                ConnectionState::Connected
            }
            other => other,
        };
        let event = ConnectionEvent {
            state: first,
            generation: state.generation,
        };
        queue.push(event, &mut after);
        if state.closed {
            queue.end(&mut after);
        } else {
            // Streams dropped since the last event go now.
            state.subscribers.retain(|weak| weak.strong_count() > 0);
            state.subscribers.push(Arc::downgrade(&queue));
        }
        drop(state);
        after.run(); // nobody is waiting on a new queue: nothing to wake
        ConnectionStates::reading(queue)
    }

    /// Waits until a session is connected (the current one, or the next one after an
    /// expiry) and returns it; `Timeout`, or `Closed` once the client is closed. On the
    /// C completion thread (a waker running its task inline) it does not wait: it fails
    /// at once unless a session is connected.
    pub fn wait_connected(&self, timeout: impl Into<Timeout>) -> Result<ManagedSession> {
        let deadline = timeout.into().deadline().instant();
        let may_wait = !crate::no_wait::here();
        let shared = self.shared();
        let mut state = shared.state.lock();
        loop {
            if state.closed {
                return Err(Error::Closed);
            }
            if state.last.is_connected() && state.zk.state().is_connected() {
                return Ok(ManagedSession {
                    generation: state.generation,
                    zk: state.zk.clone(),
                });
            }
            if !may_wait {
                return Err(crate::reply::COMPLETION_THREAD_WAIT);
            }
            if state.renewal == Renewal::SpawnFailed {
                let generation = state.generation;
                state.renewal = Renewal::Running;
                drop(state);
                start_renewal(Arc::clone(shared), generation);
                state = shared.state.lock();
                continue;
            }
            // The follower reports a reconnection a moment after the handle's own state
            // changed: re-check the handle at short intervals too.
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(Error::Timeout);
            }
            let wake = now + Duration::from_millis(50);
            let wake = deadline.map_or(wake, |deadline| deadline.min(wake));
            let _ = shared.changed.wait_until(&mut state, wake);
        }
    }

    /// Whether [`close`](Self::close) was called (or the current handle was closed
    /// directly, which ends the client too).
    pub fn is_closed(&self) -> bool {
        self.shared().state.lock().closed
    }

    /// Closes the current session and stops making new ones; streams report `Lost` and
    /// end. Idempotent; later calls on handles from [`current`](Self::current) fail with
    /// `Closed`. Waits for a connection attempt in progress to finish.
    pub fn close(&self) {
        self.owner.close();
    }

    /// As [`close`](Self::close), as a future that blocks no thread (see
    /// [`ZooKeeper::close_async`]): the client is closed when this returns (streams report
    /// `Lost` and end, later calls on its handles fail with `Closed`), and the future
    /// completes once the current handle's C close has finished. It does not wait for a
    /// connection attempt in progress: that attempt closes what it makes, in the
    /// background.
    pub fn close_async(&self) -> crate::ZkFuture<()> {
        match self.owner.shut() {
            Ok(zk) | Err(zk) => zk.close_async(),
        }
    }

    /// As [`connect`](Self::connect), as a future that blocks no thread while it waits
    /// (see [`ZooKeeper::connect_async`]). Later sessions are made as for
    /// [`new`](Self::new).
    pub fn connect_async(
        hosts: &str,
        session_timeout: Duration,
    ) -> impl std::future::Future<Output = Result<ManagedZooKeeper>> + Send + 'static {
        let connecting = ZooKeeper::connect_async(hosts, session_timeout);
        async move { Ok(ManagedZooKeeper::new(connecting.await?)) }
    }
}
