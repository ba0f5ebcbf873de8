//! Connection states in Apache Curator's vocabulary: how session events translate to
//! them, and the bounded stream that reports them ([`ConnectionStates`]).
//!
//! Nothing here has a thread or a task: a stream is fed where the session events are
//! delivered (the C completion thread, or the thread that closes the handle), by a
//! [`Follower`] that records the new state and wakes readers, and never blocks.

use crate::client::ZooKeeper;
use crate::session::SessionEvents;
use crate::types::{EventType, SessionState};
use crossbeam_channel::{RecvError, RecvTimeoutError, TryRecvError};
use futures_core::stream::{FusedStream, Stream};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// A connection state, as Apache Curator names them.
///
/// | state | meaning | what a recipe does |
/// |---|---|---|
/// | [`Connected`](ConnectionState::Connected) | first event: the session is connected | start |
/// | [`Suspended`](ConnectionState::Suspended) | the connection is lost; the session may still live | stop trusting what it holds (a lock may be gone), wait |
/// | [`Reconnected`](ConnectionState::Reconnected) | the *same* session is back: ephemeral nodes and watches survived | re-read what may have changed |
/// | [`ReadOnly`](ConnectionState::ReadOnly) | connected to a read-only server (only with `read_only(true)`) | reads only |
/// | [`Lost`](ConnectionState::Lost) | the session is over (expired, authentication failed, or closed): it never comes back | anything held on it is gone |
/// | [`NewSession`](ConnectionState::NewSession) | ([`ManagedZooKeeper`](crate::ManagedZooKeeper) only) a new session replaced the lost one | re-create state; never resume guards |
///
/// A stream of them ([`connection_states`], [`ManagedZooKeeper::states`]) starts with the
/// state at subscription (`Connected`, or `Suspended`, `ReadOnly`, `Lost` if the handle
/// is in that state then). Repeats are not reported (two connection losses in a row are
/// one `Suspended`). On a plain handle the stream ends after `Lost`; on a managed client
/// it goes on with `NewSession`.
///
/// Every event carries the session's *generation*: 1 for the first session, one more
/// for each new session of a [`ManagedZooKeeper`](crate::ManagedZooKeeper) (always 1 on a
/// plain handle).
///
/// Not guaranteed: a reader more than 64 events behind loses the oldest
/// `Suspended`/`Reconnected` pairs (see [`ConnectionStates`]). `Lost` means the server
/// said so (or the handle closed): while the client cannot reach any server it cannot
/// know that the session expired, so it stays `Suspended` (Curator can simulate the loss
/// after a session timeout of silence; this does not). Treat `Suspended` as "may be
/// lost" for anything exclusive.
///
/// [`ManagedZooKeeper::states`]: crate::ManagedZooKeeper::states
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
    /// A [`ManagedZooKeeper`](crate::ManagedZooKeeper) established a new session after
    /// `Lost`; the event's generation is the new one.
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
    /// The generation of the session it concerns (1 for the first; see
    /// [`ConnectionState`]).
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
// The bounded queue behind a stream.
// ---------------------------------------------------------------------------------------

/// Most events a connection-state stream keeps for a reader that does not read.
pub(crate) const STATE_CAPACITY: usize = 64;

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

    pub(crate) fn pop(&mut self) -> Option<ConnectionEvent> {
        self.queue.pop_front()
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

/// What to do once no lock is held: wake readers (a waker runs executor code, maybe the
/// reader's task inline), and other deferred steps.
#[derive(Default)]
pub(crate) struct After {
    wakers: Vec<Waker>,
    steps: Vec<Box<dyn FnOnce() + Send>>,
}

impl After {
    pub(crate) fn then(&mut self, step: impl FnOnce() + Send + 'static) {
        self.steps.push(Box::new(step));
    }

    pub(crate) fn run(self) {
        self.wakers.into_iter().for_each(Waker::wake);
        self.steps.into_iter().for_each(|step| step());
    }
}

struct QueueState {
    buffer: StateBuffer,
    ended: bool,
    wakers: Vec<Waker>,
}

/// One stream's queue: fed by a [`Follower`] (plain handle) or a managed client, read by
/// any number of threads or tasks (each event goes to one of them).
pub(crate) struct StateQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

impl StateQueue {
    pub(crate) fn new() -> Arc<StateQueue> {
        Arc::new(StateQueue {
            state: Mutex::new(QueueState {
                buffer: StateBuffer::default(),
                ended: false,
                wakers: Vec::new(),
            }),
            ready: Condvar::new(),
        })
    }

    /// Queues `event` (nothing once ended); readers' wakers go to `after`.
    pub(crate) fn push(&self, event: ConnectionEvent, after: &mut After) {
        let mut state = self.state.lock();
        if state.ended {
            return;
        }
        state.buffer.push(event);
        after.wakers.append(&mut state.wakers);
        self.ready.notify_all();
    }

    /// Ends the stream: readers get what is queued, then the end.
    pub(crate) fn end(&self, after: &mut After) {
        let mut state = self.state.lock();
        state.ended = true;
        after.wakers.append(&mut state.wakers);
        self.ready.notify_all();
    }

    fn try_recv(&self) -> Result<ConnectionEvent, TryRecvError> {
        let mut state = self.state.lock();
        match state.buffer.pop() {
            Some(event) => Ok(event),
            None if state.ended => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Blocks until an event, the end, or `deadline` (`None`: no deadline).
    fn recv_deadline(
        &self,
        deadline: Option<Instant>,
    ) -> Result<ConnectionEvent, RecvTimeoutError> {
        let mut state = self.state.lock();
        loop {
            if let Some(event) = state.buffer.pop() {
                return Ok(event);
            }
            if state.ended {
                return Err(RecvTimeoutError::Disconnected);
            }
            match deadline {
                None => self.ready.wait(&mut state),
                Some(deadline) => {
                    if self.ready.wait_until(&mut state, deadline).timed_out() {
                        return match state.buffer.pop() {
                            Some(event) => Ok(event),
                            None if state.ended => Err(RecvTimeoutError::Disconnected),
                            None => Err(RecvTimeoutError::Timeout),
                        };
                    }
                }
            }
        }
    }

    fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        let mut state = self.state.lock();
        if let Some(event) = state.buffer.pop() {
            return Poll::Ready(Some(event));
        }
        if state.ended {
            return Poll::Ready(None);
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    fn len(&self) -> usize {
        self.state.lock().buffer.len()
    }

    fn is_ended(&self) -> bool {
        self.state.lock().ended
    }
}

// ---------------------------------------------------------------------------------------
// Following one session's events where they are delivered.
// ---------------------------------------------------------------------------------------

/// Where a [`Follower`] reports the states of its session.
pub(crate) trait Target: Send + Sync + 'static {
    /// Reports `state`, translated from the session state `raw`; called in event order,
    /// under the follower's lock: it must not block or run user code (queue it in
    /// `after`). `false`: stop following.
    fn report(&self, state: ConnectionState, raw: SessionState, after: &mut After) -> bool;
}

struct Subscription {
    events: SessionEvents,
    translator: Translator,
    /// The state at subscription, reported before any event.
    initial: Option<SessionState>,
}

/// Follows one session without a thread: it is the waker of its own session-event
/// subscription, so the thread that delivers an event (the C completion thread, or the
/// closing thread for the end) translates it and reports it, under a short lock of plain
/// data, in delivery order. It ends after `Lost` or once detached.
pub(crate) struct Follower<T: Target> {
    target: T,
    subscription: Mutex<Option<Subscription>>,
}

impl<T: Target> Follower<T> {
    /// Follows `zk` from now on: its state now is reported first (through `translator`:
    /// a fresh one reports it whatever it is, one made with [`Translator::after`] only if
    /// it differs), then every change. The subscription keeps the follower alive; it does
    /// not keep the session open.
    pub(crate) fn start(zk: &ZooKeeper, translator: Translator, target: T) -> Arc<Follower<T>> {
        let (events, state) = zk.session_events_with_state();
        let follower = Arc::new(Follower {
            target,
            subscription: Mutex::new(Some(Subscription {
                events,
                translator,
                initial: Some(state),
            })),
        });
        follower.drain();
        follower
    }

    /// Reports everything delivered so far, and registers itself as the waker for more.
    fn drain(self: &Arc<Self>) {
        let mut after = After::default();
        {
            let mut guard = self.subscription.lock();
            let waker = Waker::from(Arc::clone(self));
            let mut cx = Context::from_waker(&waker);
            while let Some(sub) = guard.as_mut() {
                let raw = match sub.initial.take() {
                    Some(state) => state,
                    None => match sub.events.poll_recv(&mut cx) {
                        Poll::Ready(Some(event)) if event.event_type == EventType::Session => {
                            event.state
                        }
                        Poll::Ready(Some(_)) => continue,
                        // The handle closed.
                        Poll::Ready(None) => SessionState::Closed,
                        Poll::Pending => break,
                    },
                };
                let state = match sub.translator.last() {
                    None => Some(sub.translator.initial(raw)),
                    Some(_) => sub.translator.on_session(raw),
                };
                let go_on = state.map_or(true, |state| self.target.report(state, raw, &mut after));
                if !go_on || sub.translator.last() == Some(ConnectionState::Lost) {
                    // Unsubscribed: the session prunes the subscription at its next event.
                    *guard = None;
                }
            }
        }
        after.run();
    }

    /// Stops following (the reader is gone).
    pub(crate) fn detach(&self) {
        let ended = self.subscription.lock().take();
        drop(ended);
    }
}

impl<T: Target> Wake for Follower<T> {
    fn wake(self: Arc<Self>) {
        self.drain();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.drain();
    }
}

/// A plain handle's stream: generation 1, ends after `Lost`.
struct PlainTarget {
    queue: Weak<StateQueue>,
}

impl Target for PlainTarget {
    fn report(&self, state: ConnectionState, _raw: SessionState, after: &mut After) -> bool {
        let Some(queue) = self.queue.upgrade() else {
            return false;
        };
        queue.push(
            ConnectionEvent {
                state,
                generation: 1,
            },
            after,
        );
        if state == ConnectionState::Lost {
            queue.end(after);
        }
        true
    }
}

// ---------------------------------------------------------------------------------------
// The stream.
// ---------------------------------------------------------------------------------------

/// The connection states of a plain handle, from now on (generation 1; see
/// [`ConnectionState`]). No thread or task: the events are translated where the C
/// client delivers them. The stream does not keep its session open.
///
/// Bounded as every [`ConnectionStates`]; it ends after `Lost` (expiry, authentication
/// failure, or close).
///
/// ```no_run
/// use zookeeper::{connection_states, ConnectionState, ZooKeeper};
/// # fn main() -> zookeeper::Result<()> {
/// let zk = ZooKeeper::connect("127.0.0.1:2181", std::time::Duration::from_secs(10))?;
/// for event in connection_states(&zk) {
///     if event.state == ConnectionState::Suspended {
///         println!("connection lost; what this session holds may be gone");
///     }
/// }
/// // The session is over (the stream ended after `Lost`).
/// # Ok(())
/// # }
/// ```
pub fn connection_states(zk: &ZooKeeper) -> ConnectionStates {
    let queue = StateQueue::new();
    let target = PlainTarget {
        queue: Arc::downgrade(&queue),
    };
    let follower = Follower::start(zk, Translator::default(), target);
    ConnectionStates {
        reader: Arc::new(Reader {
            queue,
            follower: Some(follower),
        }),
    }
}

/// Detaches a plain stream's follower once the last clone of the stream is gone.
struct Reader {
    queue: Arc<StateQueue>,
    follower: Option<Arc<Follower<PlainTarget>>>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(follower) = &self.follower {
            follower.detach();
        }
    }
}

/// A stream of [`ConnectionEvent`]s ([`connection_states`],
/// [`ManagedZooKeeper::states`](crate::ManagedZooKeeper::states)): received blocking
/// ([`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout), [`iter`](Self::iter), a
/// `for` loop), without waiting ([`try_recv`](Self::try_recv)), or asynchronously on any
/// executor ([`next`](Self::next), [`futures_core::Stream`]). The errors are crossbeam's
/// ([`crate::crossbeam_channel`]).
///
/// - **Bounded**: at most 64 events are kept for a reader that does not read; beyond
///   that, the oldest `Suspended`/`Reconnected` pair is dropped (`Lost` and `NewSession`
///   are kept), so the last event always tells the current state.
/// - **The end comes last**: when the stream ends (after `Lost` on a plain handle, at
///   close on a managed client) every queued event is still received, then the end:
///   `recv` fails with `RecvError`, `recv_timeout` and `try_recv` with `Disconnected`,
///   `next().await` and the `Stream` yield `None`, the iterator stops.
/// - **Clones** read the same queue: each event goes to one reader.
/// - **On the C completion thread** (a waker running its task inline), which delivers
///   the events, `recv` and `recv_timeout` do not wait: with nothing queued they fail
///   at once (`RecvError`, `Timeout`).
#[derive(Clone)]
pub struct ConnectionStates {
    reader: Arc<Reader>,
}

impl ConnectionStates {
    /// A reader of `queue`, fed by someone else (a managed client).
    pub(crate) fn reading(queue: Arc<StateQueue>) -> ConnectionStates {
        ConnectionStates {
            reader: Arc::new(Reader {
                queue,
                follower: None,
            }),
        }
    }

    fn queue(&self) -> &StateQueue {
        &self.reader.queue
    }

    /// Blocks until the next event; `Err` once the stream has ended and every event was
    /// received.
    pub fn recv(&self) -> Result<ConnectionEvent, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Blocks until the next event, the end (`Disconnected`) or until `timeout` passes
    /// (`Timeout`).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<ConnectionEvent, RecvTimeoutError> {
        self.recv_until(Some(crate::reply::deadline_after(timeout)))
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<ConnectionEvent, RecvTimeoutError> {
        if crate::context::in_c_callback() || crate::closer::is_closing_here() {
            // The thread that would deliver the next event: never wait for it here.
            return self.try_recv().map_err(|error| match error {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            });
        }
        self.queue().recv_deadline(deadline)
    }

    /// The next event if one is queued: `Empty` if none is yet, `Disconnected` once the
    /// stream has ended and every event was received.
    pub fn try_recv(&self) -> Result<ConnectionEvent, TryRecvError> {
        self.queue().try_recv()
    }

    /// The next event as a future: `None` once the stream has ended and every event was
    /// received. It works on any executor; dropping it before it completes loses nothing.
    pub fn next(&self) -> NextConnectionEvent<'_> {
        NextConnectionEvent { states: self }
    }

    /// Polls for the next event (what [`next`](Self::next) and the `Stream` do), for
    /// hand-written futures that wait on several sources: `Pending` registers `cx`'s
    /// waker.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.queue().poll_recv(cx)
    }

    /// A blocking iterator over the events; it ends with the stream.
    pub fn iter(&self) -> ConnectionStatesIter<'_> {
        ConnectionStatesIter { states: self }
    }

    /// Events queued and not yet received (at most 64).
    pub fn len(&self) -> usize {
        self.queue().len()
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the stream has ended (events may still be queued).
    pub fn is_ended(&self) -> bool {
        self.queue().is_ended()
    }
}

impl std::fmt::Debug for ConnectionStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionStates")
            .field("queued", &self.len())
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl Stream for ConnectionStates {
    type Item = ConnectionEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.poll_recv(cx)
    }
}

impl FusedStream for ConnectionStates {
    fn is_terminated(&self) -> bool {
        self.is_ended() && self.is_empty()
    }
}

/// A shared reference is a stream too.
impl Stream for &ConnectionStates {
    type Item = ConnectionEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.poll_recv(cx)
    }
}

impl FusedStream for &ConnectionStates {
    fn is_terminated(&self) -> bool {
        self.is_ended() && self.is_empty()
    }
}

/// The future of [`ConnectionStates::next`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct NextConnectionEvent<'a> {
    states: &'a ConnectionStates,
}

impl Future for NextConnectionEvent<'_> {
    type Output = Option<ConnectionEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.states.poll_recv(cx)
    }
}

/// A blocking iterator over a stream's events ([`ConnectionStates::iter`]).
#[derive(Debug)]
pub struct ConnectionStatesIter<'a> {
    states: &'a ConnectionStates,
}

impl Iterator for ConnectionStatesIter<'_> {
    type Item = ConnectionEvent;

    fn next(&mut self) -> Option<ConnectionEvent> {
        self.states.recv().ok()
    }
}

impl<'a> IntoIterator for &'a ConnectionStates {
    type Item = ConnectionEvent;
    type IntoIter = ConnectionStatesIter<'a>;

    fn into_iter(self) -> ConnectionStatesIter<'a> {
        self.iter()
    }
}

/// A blocking iterator that owns its stream (`for event in states`).
#[derive(Debug)]
pub struct ConnectionStatesIntoIter {
    states: ConnectionStates,
}

impl Iterator for ConnectionStatesIntoIter {
    type Item = ConnectionEvent;

    fn next(&mut self) -> Option<ConnectionEvent> {
        self.states.recv().ok()
    }
}

impl IntoIterator for ConnectionStates {
    type Item = ConnectionEvent;
    type IntoIter = ConnectionStatesIntoIter;

    fn into_iter(self) -> ConnectionStatesIntoIter {
        ConnectionStatesIntoIter { states: self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(state: ConnectionState, generation: u64) -> ConnectionEvent {
        ConnectionEvent { state, generation }
    }

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

    #[test]
    fn the_end_comes_after_every_queued_event() {
        use ConnectionState::*;
        let queue = StateQueue::new();
        let states = ConnectionStates::reading(Arc::clone(&queue));
        let mut after = After::default();
        queue.push(at(Connected, 1), &mut after);
        queue.push(at(Lost, 1), &mut after);
        queue.end(&mut after);
        queue.push(at(NewSession, 2), &mut after); // ignored: the stream has ended
        after.run();
        assert!(states.is_ended());
        assert_eq!(states.len(), 2);
        assert!(!FusedStream::is_terminated(&states));
        assert_eq!(states.recv_timeout(Duration::ZERO), Ok(at(Connected, 1)));
        assert_eq!(states.clone().try_recv(), Ok(at(Lost, 1)));
        assert_eq!(states.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(states.recv(), Err(RecvError));
        assert_eq!(
            states.recv_timeout(Duration::from_secs(1)),
            Err(RecvTimeoutError::Disconnected)
        );
        assert!(FusedStream::is_terminated(&states));
        assert_eq!(states.iter().count(), 0);
    }

    #[test]
    fn streams_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<ConnectionStates>();
        both::<NextConnectionEvent<'static>>();
        both::<ConnectionStatesIntoIter>();
    }
}
