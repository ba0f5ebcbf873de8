//! Session state shared between the global watcher (C completion thread) and users:
//! a condition variable to wait on, and a stream of events for any number of receivers.

use crate::stream::TryRecvError;
use crate::types::{ClientId, SessionState, WatchedEvent};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;
use zookeeper_mt_sys as sys;

pub(crate) struct Session {
    /// Registry key of the client this session belongs to.
    pub(crate) client: u64,
    state: Mutex<SessionState>,
    changed: Condvar,
    /// The session id and password, copied on the C completion thread when a session
    /// event reports the connection that made the session (see `record_client_id`), so
    /// that no user thread reads the C handle's `client_id` while the IO thread rewrites
    /// it on a reconnect. The flag: that copy came from a read-only connection.
    client_id: Mutex<(Option<ClientId>, bool)>,
    /// The negotiated session timeout in ms, copied with the session id (same rules).
    recv_timeout_ms: std::sync::atomic::AtomicU64,
    /// The server's address, read on the completion thread when a session event reports
    /// a connection and cleared at the next event that reports none.
    peer: Mutex<Option<std::net::SocketAddr>>,
    /// `None` once the handle is closed: later subscribers get an ended stream.
    subscribers: Mutex<Option<Vec<Subscriber>>>,
    /// Set under the state lock (and `changed` notified) once `zookeeper_close` has
    /// returned and everything was swept: a second `close` waits for it.
    closed: std::sync::atomic::AtomicBool,
    /// Futures waiting for a state change (an async connect), each under its own key:
    /// all are woken (and removed) by the next change, and a dropped future removes its
    /// own entry.
    state_wakers: Mutex<StateWakers>,
}

#[derive(Default)]
struct StateWakers {
    next: u64,
    wakers: Vec<(u64, Waker)>,
}

/// One [`SessionEvents`]' end of the stream: its channel and the waker of a task
/// awaiting it.
struct Subscriber {
    sender: Sender<WatchedEvent>,
    waker: Arc<Mutex<Option<Waker>>>,
}

impl Session {
    pub(crate) fn new(client: u64) -> Session {
        Session {
            client,
            state: Mutex::new(SessionState::NotConnected),
            changed: Condvar::new(),
            client_id: Mutex::new((None, false)),
            recv_timeout_ms: std::sync::atomic::AtomicU64::new(0),
            peer: Mutex::new(None),
            subscribers: Mutex::new(Some(Vec::new())),
            closed: std::sync::atomic::AtomicBool::new(false),
            state_wakers: Mutex::new(StateWakers::default()),
        }
    }

    /// Registers `waker` (under `key`, given or kept from an earlier call) to be woken by
    /// the next state change or the end of the close. Read the state after this call: a
    /// change made before it is in the state, one made after wakes the waker.
    pub(crate) fn wake_on_change(&self, key: &mut Option<u64>, waker: &Waker) {
        let mut registered = self.state_wakers.lock();
        if let Some(key) = *key {
            if let Some((_, known)) = registered.wakers.iter_mut().find(|(k, _)| *k == key) {
                if !known.will_wake(waker) {
                    known.clone_from(waker);
                }
                return;
            }
        }
        let next = registered.next;
        registered.next += 1;
        registered.wakers.push((next, waker.clone()));
        *key = Some(next);
    }

    /// Removes the waker registered under `key`, if it is still there.
    pub(crate) fn forget_waker(&self, key: Option<u64>) {
        if let Some(key) = key {
            self.state_wakers.lock().wakers.retain(|(k, _)| *k != key);
        }
    }

    fn wake_on_change_all(&self) {
        let woken = std::mem::take(&mut self.state_wakers.lock().wakers);
        // Woken outside the lock: a waker runs executor code.
        woken.into_iter().for_each(|(_, waker)| waker.wake());
    }

    /// Records that the handle's close has finished (see [`wait_closed`](Self::wait_closed)).
    pub(crate) fn mark_closed(&self) {
        let _state = self.state.lock();
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.changed.notify_all();
        drop(_state);
        self.wake_on_change_all();
    }

    /// Waits until the handle's close, started elsewhere, has finished.
    pub(crate) fn wait_closed(&self) {
        let mut state = self.state.lock();
        while !self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            self.changed.wait(&mut state);
        }
    }

    pub(crate) fn state(&self) -> SessionState {
        *self.state.lock()
    }

    /// Records a new state. A terminal state is never left (C sends nothing after it,
    /// and `Closed` is ours).
    pub(crate) fn on_state(&self, state: SessionState) {
        self.set_state(state);
        self.wake_on_change_all();
    }

    /// `on_state` without waking the futures (for a caller holding a lock a waker may
    /// want: it wakes them after).
    fn set_state(&self, state: SessionState) {
        {
            let mut current = self.state.lock();
            if current.is_terminal() {
                return;
            }
            *current = state;
        }
        self.changed.notify_all();
    }

    /// The session id and password as of the last connection, if any.
    pub(crate) fn client_id(&self) -> Option<ClientId> {
        self.client_id.lock().0
    }

    /// Copies the C handle's session id and password, once: on the C completion thread,
    /// for the session event that reports the connection that made the session. The IO
    /// thread wrote them before it queued that event (the completion queue's lock orders
    /// the two). It rewrites the same values, unsynchronised, on every later handshake, so
    /// reading them at a later reconnect's event could race a still later one (a data race
    /// ThreadSanitizer reports); those reads are skipped. The one exception: a session
    /// made on a read-only server gets a new id when it first reaches a read-write server,
    /// so the copy is taken again at the first read-write connection after read-only ones.
    ///
    /// # Safety
    /// `zh` is the live handle whose global watcher is running.
    pub(crate) unsafe fn record_client_id(&self, zh: *mut sys::zhandle_t, state: SessionState) {
        let read_only = state == SessionState::ConnectedReadOnly;
        let mut recorded = self.client_id.lock();
        let (known, from_read_only) = (recorded.0.is_some(), recorded.1);
        let leaves_read_only = from_read_only && !read_only;
        if known && !leaves_read_only {
            return;
        }
        // SAFETY: per the contract `zh` is live; C returns a pointer into it.
        let Some(raw) = (unsafe { sys::zoo_client_id(zh).as_ref() }) else {
            return;
        };
        let mut password = [0u8; 16];
        for (dst, src) in password.iter_mut().zip(raw.passwd) {
            *dst = src as u8;
        }
        // SAFETY: as above; written by the IO thread before it queued this event.
        let timeout_ms = unsafe { sys::zoo_recv_timeout(zh) };
        self.recv_timeout_ms.store(
            timeout_ms.max(0) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        if raw.client_id != 0 {
            *recorded = (
                Some(ClientId {
                    session_id: raw.client_id,
                    password,
                }),
                read_only,
            );
        }
    }

    /// The negotiated session timeout, once the session was made.
    pub(crate) fn recv_timeout(&self) -> Option<std::time::Duration> {
        match self
            .recv_timeout_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// The server the session is connected to, as of the last session event.
    pub(crate) fn peer(&self) -> Option<std::net::SocketAddr> {
        *self.peer.lock()
    }

    /// Records the server's address for a session event reporting a connection, and
    /// forgets it for any other session event.
    ///
    /// # Safety
    /// `zh` is the live handle whose global watcher is running.
    pub(crate) unsafe fn record_peer(&self, zh: *mut sys::zhandle_t, state: SessionState) {
        let peer = if state.is_connected() {
            // SAFETY: per the contract.
            unsafe { crate::peer::peer_of(zh) }
        } else {
            None
        };
        *self.peer.lock() = peer;
    }

    #[cfg_attr(not(feature = "sasl"), allow(dead_code))]
    /// Waits until the state is terminal (expired, auth failed, closed) or `deadline`
    /// passes; returns whether it is terminal.
    pub(crate) fn wait_terminal(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while !state.is_terminal() {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.is_terminal()
    }

    /// Waits until connected, terminal, or `deadline` (`None`: no deadline); returns the
    /// state then.
    pub(crate) fn wait_connected(&self, deadline: Option<Instant>) -> SessionState {
        let mut state = self.state.lock();
        while !state.is_connected() && !state.is_terminal() {
            match deadline {
                None => self.changed.wait(&mut state),
                Some(deadline) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        break;
                    }
                }
            }
        }
        *state
    }

    /// Sends `event` to every live subscriber without blocking (the channels are
    /// unbounded), dropping subscribers whose receiver is gone.
    pub(crate) fn publish(&self, event: WatchedEvent) {
        self.publish_then(event, || ());
    }

    /// Moves to `event`'s state and publishes it as one step for [`subscribe`]: a
    /// subscriber made before hears the event; one made after (say, right after `connect`
    /// returned, woken by this state) sees the new state and does not hear of it.
    ///
    /// [`subscribe`]: Self::subscribe
    pub(crate) fn transition(&self, event: WatchedEvent) {
        let state = event.state;
        self.publish_then(event, || self.set_state(state));
        self.wake_on_change_all();
    }

    /// Runs `before` and sends `event` to the subscribers, both under the subscriber
    /// lock (`before` may take the state lock: the order is always subscribers, then
    /// state).
    fn publish_then(&self, event: WatchedEvent, before: impl FnOnce()) {
        let mut to_wake = Vec::new();
        {
            let mut subscribers = self.subscribers.lock();
            before();
            if let Some(subscribers) = subscribers.as_mut() {
                subscribers.retain(|subscriber| {
                    let live = subscriber.sender.send(event.clone()).is_ok();
                    if live {
                        to_wake.extend(subscriber.waker.lock().take());
                    }
                    live
                });
            }
        }
        // Woken outside the lock: a waker runs executor code.
        to_wake.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn subscribe(&self) -> SessionEvents {
        self.subscribe_with_state().0
    }

    /// A subscription and the state it starts from, read as one step (see
    /// [`transition`](Self::transition)): every later state change reaches the
    /// subscription, every earlier one is in the state.
    pub(crate) fn subscribe_with_state(&self) -> (SessionEvents, SessionState) {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let waker = Arc::new(Mutex::new(None));
        let mut subscribers = self.subscribers.lock();
        // After close the sender is dropped at once: the stream has already ended.
        if let Some(subscribers) = subscribers.as_mut() {
            subscribers.push(Subscriber {
                sender,
                waker: Arc::clone(&waker),
            });
        }
        // The order is always subscribers, then state (as in `publish_then`).
        let state = self.state();
        drop(subscribers);
        (SessionEvents { receiver, waker }, state)
    }

    /// Ends every subscription (receivers see the channel close after the last event),
    /// including those made later.
    pub(crate) fn close_subscribers(&self) {
        let ended = self.subscribers.lock().take().unwrap_or_default();
        for subscriber in ended {
            drop(subscriber.sender);
            // Taken first, woken after the guard is gone: a waker may poll the stream,
            // which takes the same lock.
            let waker = subscriber.waker.lock().take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// The global watcher handed to C: records the session id and password when a session
/// event reports a connection, before `context::session_watcher` publishes the new state
/// (so a caller that saw `Connected` finds the id), then delegates to it.
pub(crate) unsafe extern "C" fn global_watcher(
    zh: *mut sys::zhandle_t,
    event_type: std::os::raw::c_int,
    state: std::os::raw::c_int,
    path: *const std::os::raw::c_char,
    context: *mut std::os::raw::c_void,
) {
    use crate::types::EventType;
    if !context.is_null() && EventType::from_c(event_type) == EventType::Session {
        let state = SessionState::from_c(state);
        // Nothing below can unwind (a lock without poisoning, plain copies); the guard
        // keeps a panic from crossing into C all the same.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the context is the `Arc<Session>` leaked at init and reclaimed only
            // after `zookeeper_close` has joined this thread; `zh` is the live handle C
            // is calling back for.
            let session = unsafe { &*(context as *const Session) };
            if state.is_connected() {
                // SAFETY: as above.
                unsafe { session.record_client_id(zh, state) };
            }
            // SAFETY: as above.
            unsafe { session.record_peer(zh, state) };
        }));
    }
    // SAFETY: the arguments are C's, passed on unchanged.
    unsafe { crate::context::session_watcher(zh, event_type, state, path, context) }
}

/// Session events from [`ZooKeeper::session_events`](crate::ZooKeeper::session_events):
/// a blocking receiver ([`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout),
/// [`try_recv`](Self::try_recv), [`try_iter`](Self::try_iter)) and an async stream ([`futures_core::Stream`], or
/// [`next_event`](Self::next_event) on any executor). The stream ends when the handle closes.
///
/// ```no_run
/// # async fn demo(zk: zookeeper_mt::ZooKeeper) {
/// let mut events = zk.session_events();
/// while let Some(event) = events.next_event().await {
///     println!("session: {:?}", event.state);
/// }
/// # }
/// ```
pub struct SessionEvents {
    receiver: Receiver<WatchedEvent>,
    waker: Arc<Mutex<Option<Waker>>>,
}

impl SessionEvents {
    /// The next event if one is queued: `Empty` if none is yet, `Disconnected` once the
    /// handle has closed and every event was received.
    pub fn try_recv(&self) -> Result<WatchedEvent, TryRecvError> {
        self.receiver.try_recv().map_err(|error| match error {
            crossbeam_channel::TryRecvError::Empty => TryRecvError::Empty,
            crossbeam_channel::TryRecvError::Disconnected => TryRecvError::Disconnected,
        })
    }

    /// The events queued now, without waiting.
    pub fn try_iter(&self) -> impl Iterator<Item = WatchedEvent> + '_ {
        self.receiver.try_iter()
    }

    /// Events queued and not yet received.
    pub fn len(&self) -> usize {
        self.receiver.len()
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    /// Blocks until the next event; `Err(Closed)` once the handle has closed and every
    /// event was received.
    ///
    /// On the C completion thread (a waker running its task inline) this fails at once
    /// instead: that thread delivers the events, so blocking it would wait forever.
    pub fn recv(&self) -> crate::Result<WatchedEvent> {
        self.recv_timeout(crate::Timeout::Never)
    }

    /// Blocks until the next event or until `timeout` passes (`Err(Timeout)`), as
    /// [`recv`](Self::recv).
    pub fn recv_timeout(&self, timeout: impl Into<crate::Timeout>) -> crate::Result<WatchedEvent> {
        use crossbeam_channel::RecvTimeoutError;
        if crate::no_wait::here() {
            return match self.try_recv() {
                Ok(event) => Ok(event),
                Err(TryRecvError::Disconnected) => Err(crate::Error::Closed),
                Err(TryRecvError::Empty) => Err(crate::reply::COMPLETION_THREAD_WAIT),
            };
        }
        let outcome = match timeout.into().duration() {
            Some(timeout) => self.receiver.recv_timeout(timeout),
            None => self
                .receiver
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
        };
        outcome.map_err(|error| match error {
            RecvTimeoutError::Timeout => crate::Error::Timeout,
            RecvTimeoutError::Disconnected => crate::Error::Closed,
        })
    }

    /// The next event, awaitable on any executor: `None` once the handle has closed.
    pub fn next_event(&mut self) -> NextSessionEvent<'_> {
        NextSessionEvent { events: self }
    }

    /// Polls for the next event: `Ready(None)` once the handle has closed and every event
    /// was received; `Pending` registers `cx`'s waker (the last one given is woken).
    /// For hand-written futures that wait on several sources at once.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchedEvent>> {
        self.poll_event(cx)
    }

    /// Whether a task's waker is kept for the next event (at most one: the last given).
    // For tests: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn has_waker(&self) -> bool {
        self.waker.lock().is_some()
    }

    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<WatchedEvent>> {
        match self.try_recv() {
            Ok(event) => return Poll::Ready(Some(event)),
            Err(TryRecvError::Disconnected) => return Poll::Ready(None),
            Err(TryRecvError::Empty) => {}
        }
        *self.waker.lock() = Some(cx.waker().clone());
        // An event published between the first look and storing the waker found no
        // waker to wake: look again.
        match self.try_recv() {
            Ok(event) => Poll::Ready(Some(event)),
            Err(TryRecvError::Disconnected) => Poll::Ready(None),
            Err(TryRecvError::Empty) => Poll::Pending,
        }
    }
}

impl std::fmt::Debug for SessionEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEvents")
            .field("pending", &self.receiver.len())
            .finish()
    }
}

impl futures_core::Stream for SessionEvents {
    type Item = WatchedEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchedEvent>> {
        self.poll_event(cx)
    }
}

/// The future of [`SessionEvents::next_event`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct NextSessionEvent<'a> {
    events: &'a mut SessionEvents,
}

impl std::future::Future for NextSessionEvent<'_> {
    type Output = Option<WatchedEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchedEvent>> {
        self.events.poll_event(cx)
    }
}

impl Drop for NextSessionEvent<'_> {
    /// A dropped future leaves no waker behind (the stream keeps one, the last given,
    /// for whoever polls it next).
    fn drop(&mut self) {
        let gone = self.events.waker.lock().take();
        drop(gone);
    }
}
