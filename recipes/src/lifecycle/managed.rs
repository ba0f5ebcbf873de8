//! The managed client: a new session after expiry, its generation, and its stream.

use super::*;
use crate::runtime::{until, StopSignal, Task};
use zookeeper::Deadline;

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

pub(super) type Connector = dyn Fn() -> zookeeper::Result<ZooKeeper> + Send + Sync;

pub(super) struct ManagedState {
    pub(super) generation: u64,
    pub(super) zk: ZooKeeper,
    pub(super) last: ConnectionState,
    pub(super) closed: bool,
    pub(super) subscribers: Vec<Weak<EventQueue<StateBuffer>>>,
}

pub(super) struct Shared {
    pub(super) state: Mutex<ManagedState>,
    pub(super) changed: Condvar,
    pub(super) connector: Box<Connector>,
}

impl Shared {
    /// Records and reports a state of `generation` (ignored once closed).
    pub(super) fn publish(&self, state: ConnectionState, generation: u64) {
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

pub(super) struct Owner {
    pub(super) shared: Arc<Shared>,
    /// The monitor task (on the recipes' driver).
    pub(super) monitor: Mutex<Option<Task>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Owner {
    pub(super) fn close(&self) {
        let monitor = self.monitor.lock().take();
        if let Some(monitor) = monitor {
            monitor.stop_and_join();
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
/// server expired the old one (see the [module docs](super) for the contract with
/// guards). Cheap to clone; the last clone dropped closes it.
#[derive(Clone)]
pub struct ManagedZooKeeper {
    pub(super) owner: Arc<Owner>,
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
    /// error is returned; later ones on a worker thread, as it may block). It may set
    /// any option of [`ZooKeeper::builder`] and add
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
        let monitor = Arc::clone(&shared);
        let task = crate::runtime::spawn(
            "managed session",
            move |stop| async move { run_monitor(monitor, stop).await },
            || log::error!("recipes: the managed client's monitor failed; no new session"),
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ManagedZooKeeper {
            owner: Arc::new(Owner {
                shared,
                monitor: Mutex::new(Some(task)),
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
    /// closed. Bounded as [`connection_states`] (see the
    /// [stream contract](crate::events#the-stream-contract)).
    pub fn states(&self) -> EventStream<ConnectionEvent> {
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
        EventStream::new(queue)
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
pub(super) enum SessionEnd {
    /// Stop requested.
    Stop,
    /// The session expired or failed authentication.
    Terminal,
    /// The handle was closed (not by the managed client).
    Closed,
}

/// The monitor task: follows the current session, replaces it after expiry.
pub(super) async fn run_monitor(shared: Arc<Shared>, stop: StopSignal) {
    let mut last = ConnectionState::Connected;
    loop {
        let (zk, generation) = {
            let state = shared.state.lock();
            (state.zk.clone(), state.generation)
        };
        match follow_session(&shared, &zk, generation, last, &stop).await {
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
        drop(zk);
        // The session is gone: make a new one. The connector is the user's and may
        // block, so it runs on a worker thread, as does closing the old handle.
        let mut pause = Duration::from_millis(100);
        let new = loop {
            let connect = Arc::clone(&shared);
            match crate::asynchronous::unblock(move || (connect.connector)()).await {
                Ok(zk) => break zk,
                Err(error) => {
                    log::warn!("recipes: managed client: new session failed: {error}");
                    if until(Deadline::after(pause), stop.stopped())
                        .await
                        .is_some()
                    {
                        return;
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
            }
        };
        let old = {
            let mut state = shared.state.lock();
            if state.closed || stop.is_stopped() {
                drop(state);
                close_elsewhere(new);
                return;
            }
            state.generation += 1;
            std::mem::replace(&mut state.zk, new)
        };
        close_elsewhere(old);
        shared.publish(ConnectionState::NewSession, generation + 1);
        last = ConnectionState::NewSession;
        if stop.is_stopped() {
            return;
        }
    }
}

/// Closes a handle the monitor is done with, off the driver (closing waits for the
/// server's answer).
fn close_elsewhere(zk: ZooKeeper) {
    drop(crate::asynchronous::unblock(move || {
        let _ = zk.close();
    }));
}

/// Reports one session's states until it ends.
pub(super) async fn follow_session(
    shared: &Shared,
    zk: &ZooKeeper,
    generation: u64,
    last: ConnectionState,
    stop: &StopSignal,
) -> SessionEnd {
    let mut events = zk.session_events();
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
        let event = std::future::poll_fn(|cx| {
            if stop.poll_stopped(cx).is_ready() {
                return Poll::Ready(None);
            }
            events.poll_recv(cx).map(Some)
        })
        .await;
        match event {
            None => return SessionEnd::Stop,
            Some(Some(event)) if event.event_type == EventType::Session => seen = Some(event.state),
            Some(Some(_)) => {}
            Some(None) => seen = Some(SessionState::Closed),
        }
    }
}
