//! Connection states in Apache Curator's vocabulary: how session events translate to
//! them, and the bounded stream that reports them ([`ConnectionStates`]).
//!
//! Nothing here has a thread or a task: a stream is fed where the session events are
//! delivered (the C completion thread, or the thread that closes the handle), by a
//! [`Follower`] that records the new state and wakes readers, and never blocks.

use crate::client::ZooKeeper;
use crate::session::SessionEvents;
use crate::stream::ReaderWakers;
use crate::stream::{RecvError, RecvTimeoutError, TryRecvError};
use crate::types::{EventType, SessionState};
use futures_core::stream::{FusedStream, Stream};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

mod follower;
mod stream;

pub(crate) use follower::{Follower, Target};
pub use stream::*;

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
#[derive(Debug, Default, Clone)]
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
    /// One waker per waiting reader (a stream value or a `next()` future), keyed by its
    /// [`waiter_id`]: replaced on each poll, removed when the reader is dropped, so a
    /// reader that stops polling leaves nothing behind.
    wakers: ReaderWakers,
}

use crate::stream::reader_id as waiter_id;

/// One stream's queue: fed by a [`Follower`] (plain handle) or a managed client, read by
/// any number of threads or tasks (each event goes to one of them).
///
/// A queue the producer feeds directly also feeds its subscribers' queues
/// ([`ConnectionStates::subscribe`]): each a queue of its own, bounded alike. The lock
/// order is `subscribers`, then a queue's `state`; a reader takes only its own `state`.
pub(crate) struct StateQueue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// This queue's place in its feeder's `subscribers` (never reused).
    id: u64,
    /// The queue the producer pushes to: this one itself, or (a subscriber's) the one
    /// whose `subscribers` hold it.
    feed: Weak<StateQueue>,
    /// The subscribers' queues (always empty on a subscriber's own queue).
    subscribers: Mutex<Vec<(u64, Weak<StateQueue>)>>,
}

impl StateQueue {
    pub(crate) fn new() -> Arc<StateQueue> {
        Arc::new_cyclic(|me| StateQueue::with(StateBuffer::default(), false, me.clone()))
    }

    fn with(buffer: StateBuffer, ended: bool, feed: Weak<StateQueue>) -> StateQueue {
        StateQueue {
            state: Mutex::new(QueueState {
                buffer,
                ended,
                wakers: ReaderWakers::default(),
            }),
            ready: Condvar::new(),
            id: waiter_id(),
            feed,
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// Queues `event` here and in every subscriber's queue (nothing once ended);
    /// readers' wakers go to `after`.
    pub(crate) fn push(&self, event: ConnectionEvent, after: &mut After) {
        self.each(after, |queue, after| queue.push_one(event, after));
    }

    /// Ends the stream and its subscribers': readers get what is queued, then the end.
    pub(crate) fn end(&self, after: &mut After) {
        self.each(after, |queue, after| queue.end_one(after));
    }

    /// Runs `step` on each live subscriber's queue, then on this one, under the
    /// subscribers' lock (so a subscription falls wholly before or after it).
    fn each(&self, after: &mut After, step: impl Fn(&StateQueue, &mut After)) {
        let subscribers = self.subscribers.lock();
        let live: Vec<Arc<StateQueue>> = subscribers
            .iter()
            .filter_map(|(_, queue)| queue.upgrade())
            .collect();
        for queue in &live {
            step(queue, after);
        }
        step(self, after);
        drop(subscribers);
        // The last reference to a subscriber's queue may be one of these: its drop takes
        // the subscribers' lock, and the caller may hold others (a follower's): later.
        after.then(move || drop(live));
    }

    fn push_one(&self, event: ConnectionEvent, after: &mut After) {
        let mut state = self.state.lock();
        if state.ended {
            return;
        }
        state.buffer.push(event);
        state.wakers.drain_into(&mut after.wakers);
        self.ready.notify_all();
    }

    fn end_one(&self, after: &mut After) {
        let mut state = self.state.lock();
        state.ended = true;
        state.wakers.drain_into(&mut after.wakers);
        self.ready.notify_all();
    }

    /// A new subscriber's queue holding a copy of what this one holds unread, fed from
    /// now on as this one is (ended already if this one has ended, or its feeder is
    /// gone).
    fn subscribe(&self) -> Arc<StateQueue> {
        let copy = || {
            let state = self.state.lock();
            (state.buffer.clone(), state.ended)
        };
        let Some(feeder) = self.feed.upgrade() else {
            let (buffer, _) = copy();
            return Arc::new(StateQueue::with(buffer, true, Weak::new()));
        };
        let mut subscribers = feeder.subscribers.lock();
        let (buffer, ended) = copy();
        let queue = Arc::new(StateQueue::with(buffer, ended, Arc::downgrade(&feeder)));
        if !ended {
            subscribers.push((queue.id, Arc::downgrade(&queue)));
        }
        drop(subscribers);
        queue
    }

    /// Subscribers' queues the feeder of this one keeps now.
    fn subscribers(&self) -> usize {
        self.feed
            .upgrade()
            .map_or(0, |feeder| feeder.subscribers.lock().len())
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

    /// Polls for `waiter` (a [`waiter_id`]): `Pending` keeps `cx`'s waker as that
    /// waiter's one waker until the next event, the end, or [`forget`](Self::forget).
    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<ConnectionEvent>> {
        let mut state = self.state.lock();
        let popped = state.buffer.pop();
        let ended = state.ended;
        let (poll, done) = state.wakers.poll_with(waiter, cx, popped, ended);
        drop(state);
        // Done waiting: its waker (dropped outside the lock) is of no more use.
        drop(done);
        poll
    }

    /// Drops `waiter`'s waker, if any (the waiter is gone).
    fn forget(&self, waiter: u64) {
        let gone = self.state.lock().wakers.remove(waiter);
        drop(gone);
    }

    fn wakers(&self) -> usize {
        self.state.lock().wakers.len()
    }

    fn len(&self) -> usize {
        self.state.lock().buffer.len()
    }

    fn is_ended(&self) -> bool {
        self.state.lock().ended
    }
}

impl Drop for StateQueue {
    fn drop(&mut self) {
        // A subscriber's queue leaves its feeder's list (a feeder's own `feed` cannot be
        // upgraded any more: it is this queue).
        if let Some(feeder) = self.feed.upgrade() {
            let id = self.id;
            feeder.subscribers.lock().retain(|(other, _)| *other != id);
        }
        // A feeder that goes ends its subscribers' streams: nothing will feed them.
        let mut after = After::default();
        let live: Vec<Arc<StateQueue>> = self
            .subscribers
            .get_mut()
            .drain(..)
            .filter_map(|(_, queue)| queue.upgrade())
            .collect();
        for queue in &live {
            queue.end_one(&mut after);
        }
        after.run();
        drop(live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timeout;
    use std::time::Duration;

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
    fn subscribers_see_every_event_and_clones_split_them() {
        use ConnectionState::*;
        let queue = StateQueue::new();
        let states = ConnectionStates::reading(Arc::clone(&queue));
        let mut after = After::default();
        queue.push(at(Connected, 1), &mut after);
        // The subscriber starts level with its source: the unread `Connected` too.
        let subscriber = states.subscribe();
        let clone = states.clone();
        assert_eq!(states.subscribers(), 1);
        for _ in 0..10 {
            queue.push(at(Suspended, 1), &mut after);
            queue.push(at(Reconnected, 1), &mut after);
        }
        queue.end(&mut after);
        after.run();
        let seen: Vec<_> = subscriber.iter().collect();
        assert_eq!(seen.len(), 21);
        assert_eq!(seen[0], at(Connected, 1));
        // Clones share one queue: together they get each event once.
        let (mut a, mut b) = (0, 0);
        loop {
            match (states.try_recv(), clone.try_recv()) {
                (Err(_), Err(_)) => break,
                (x, y) => {
                    a += usize::from(x.is_ok());
                    b += usize::from(y.is_ok());
                }
            }
        }
        assert_eq!(a + b, 21);
        assert_eq!(
            subscriber.recv_timeout(Timeout::Never),
            Err(RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn dropped_subscribers_leave_nothing_behind() {
        use ConnectionState::*;
        let queue = StateQueue::new();
        let states = ConnectionStates::reading(Arc::clone(&queue));
        for _ in 0..1000 {
            let subscriber = states.subscribe();
            let mut after = After::default();
            queue.push(at(Suspended, 1), &mut after);
            after.run();
            assert_eq!(subscriber.try_recv(), Ok(at(Suspended, 1)));
            assert_eq!(states.try_recv(), Ok(at(Suspended, 1)));
        }
        assert_eq!(states.subscribers(), 0);
        // A subscriber of a subscriber is fed by the producer too (one flat list).
        let first = states.subscribe();
        let second = first.subscribe();
        assert_eq!(states.subscribers(), 2);
        drop(first);
        let mut after = After::default();
        queue.push(at(Reconnected, 1), &mut after);
        after.run();
        assert_eq!(
            second.recv_timeout(Timeout::from(Duration::from_secs(1))),
            Ok(at(Reconnected, 1))
        );
        drop(second);
        assert_eq!(states.subscribers(), 0);
        assert_eq!(states.try_recv(), Ok(at(Reconnected, 1)));
        assert_eq!(
            states.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
    }

    #[test]
    fn streams_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<ConnectionStates>();
        both::<NextConnectionEvent<'static>>();
        both::<ConnectionStatesIntoIter>();
    }
}
