//! The producer's side of a stream: a queue with a coalescing buffer, fanned out to its
//! subscribers' queues.

use super::{RecvTimeoutError, TryRecvError};
use parking_lot::{Condvar, Mutex};
use zookeeper_mt::stream::ReaderWakers;

use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// How a stream stores what its reader has not taken yet (and coalesces it). `Clone`: a
/// subscriber starts with a copy of what its source holds unread.
pub(crate) trait Buffer: Clone + Send + 'static {
    /// What the reader receives.
    type Item;
    /// The next item for the reader, if any.
    fn pop(&mut self) -> Option<Self::Item>;
    /// Items queued (what `pop` would still return, give or take the coalescing).
    fn len(&self) -> usize;
}

struct State<B> {
    buffer: B,
    closed: bool,
    /// One waker per waiting reader (a stream value or a `next()` future), keyed by its
    /// [`waiter_id`]: replaced on each poll, removed when the reader is dropped, so a
    /// reader that stops polling leaves nothing behind.
    wakers: ReaderWakers,
}

pub(crate) use zookeeper_mt::stream::reader_id as waiter_id;

/// A queue fed by one recipe task and read by any number of threads or tasks (each
/// item goes to one of them).
///
/// The queue the producer feeds also feeds its subscribers' queues
/// ([`EventStream::subscribe`](super::EventStream::subscribe)): each one a queue of its
/// own with a buffer of the same kind, so bounded by the same rule. The lock order is the
/// feeder's `subscribers`, then a queue's `state`; a reader takes only its own `state`.
pub(crate) struct EventQueue<B> {
    state: Mutex<State<B>>,
    ready: Condvar,
    /// This queue's place in its feeder's `subscribers` (never reused).
    id: u64,
    /// The queue the producer feeds: this one itself, or (a subscriber's) the one whose
    /// `subscribers` hold it.
    feed: Weak<EventQueue<B>>,
    /// The subscribers' queues (always empty on a subscriber's own queue).
    subscribers: Mutex<Vec<(u64, Weak<EventQueue<B>>)>>,
}

impl<B: Buffer> EventQueue<B> {
    pub(crate) fn new(buffer: B) -> Arc<EventQueue<B>> {
        Arc::new_cyclic(|me| EventQueue::with(buffer, false, me.clone()))
    }

    fn with(buffer: B, closed: bool, feed: Weak<EventQueue<B>>) -> EventQueue<B> {
        EventQueue {
            state: Mutex::new(State {
                buffer,
                closed,
                wakers: ReaderWakers::default(),
            }),
            ready: Condvar::new(),
            id: waiter_id(),
            feed,
            subscribers: Mutex::new(Vec::new()),
        }
    }

    /// Changes the buffer (the producer's side), and each subscriber's buffer alike (a
    /// copy of `change` each), and wakes readers. Nothing is added once the queue is
    /// closed.
    pub(crate) fn update(&self, change: impl FnOnce(&mut B) + Clone) {
        let mut wakers = Vec::new();
        let subscribers = self.subscribers.lock();
        let live: Vec<Arc<EventQueue<B>>> = subscribers
            .iter()
            .filter_map(|(_, queue)| queue.upgrade())
            .collect();
        for queue in &live {
            queue.update_one(change.clone(), &mut wakers);
        }
        self.update_one(change, &mut wakers);
        drop(subscribers);
        wakers.into_iter().for_each(Waker::wake);
        // Dropped after the lock: the last reference to a subscriber's queue may be one
        // of these, and its drop takes the subscribers' lock.
        drop(live);
    }

    fn update_one(&self, change: impl FnOnce(&mut B), wakers: &mut Vec<Waker>) {
        let mut state = self.state.lock();
        if state.closed {
            return;
        }
        change(&mut state.buffer);
        state.wakers.drain_into(wakers);
        self.ready.notify_all();
    }

    /// Ends the stream and its subscribers': readers get what is queued, then the end.
    pub(crate) fn close(&self) {
        let mut wakers = Vec::new();
        let live: Vec<Arc<EventQueue<B>>> = {
            let mut subscribers = self.subscribers.lock();
            let live: Vec<_> = subscribers
                .drain(..)
                .filter_map(|(_, queue)| queue.upgrade())
                .collect();
            for queue in &live {
                queue.close_one(&mut wakers);
            }
            self.close_one(&mut wakers);
            live
        };
        wakers.into_iter().for_each(Waker::wake);
        drop(live);
    }

    fn close_one(&self, wakers: &mut Vec<Waker>) {
        let mut state = self.state.lock();
        state.closed = true;
        state.wakers.drain_into(wakers);
        self.ready.notify_all();
    }

    /// Reads the buffer and the closed flag (e.g. to copy them for a new reader).
    pub(crate) fn inspect<R>(&self, read: impl FnOnce(&B, bool) -> R) -> R {
        let state = self.state.lock();
        read(&state.buffer, state.closed)
    }

    pub(crate) fn len(&self) -> usize {
        self.state.lock().buffer.len()
    }

    /// A subscriber's queue: a copy of what this one holds unread, then fed as this one
    /// is (closed already if this one is, or if its feeder is gone).
    fn subscribe_queue(&self) -> Arc<EventQueue<B>> {
        let copy = || self.inspect(|buffer, closed| (buffer.clone(), closed));
        let Some(feeder) = self.feed.upgrade() else {
            let (buffer, _) = copy();
            return Arc::new(EventQueue::with(buffer, true, Weak::new()));
        };
        // Under the feeder's lock: no item is added between the copy and the
        // registration.
        let mut subscribers = feeder.subscribers.lock();
        let (buffer, closed) = copy();
        let queue = Arc::new(EventQueue::with(buffer, closed, Arc::downgrade(&feeder)));
        if !closed {
            subscribers.push((queue.id, Arc::downgrade(&queue)));
        }
        drop(subscribers);
        queue
    }
}

impl<B> Drop for EventQueue<B> {
    fn drop(&mut self) {
        // A subscriber's queue leaves its feeder's list (a feeder's own `feed` cannot be
        // upgraded any more: it is this queue).
        if let Some(feeder) = self.feed.upgrade() {
            let id = self.id;
            feeder.subscribers.lock().retain(|(other, _)| *other != id);
        }
        // A feeder that goes ends its subscribers' streams: nothing will feed them.
        let live: Vec<Arc<EventQueue<B>>> = self
            .subscribers
            .get_mut()
            .drain(..)
            .filter_map(|(_, queue)| queue.upgrade())
            .collect();
        let mut wakers = Vec::new();
        for queue in &live {
            let mut state = queue.state.lock();
            state.closed = true;
            state.wakers.drain_into(&mut wakers);
            queue.ready.notify_all();
        }
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// What an [`EventStream`](super::EventStream) reads from: a queue, or a view of one.
pub(crate) trait Source<T>: Send + Sync {
    fn try_recv(&self) -> Result<T, TryRecvError>;
    /// Blocks until an item, the end, or `deadline` (`None`: no deadline).
    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError>;
    /// Polls for `waiter` (a [`waiter_id`]): `Pending` keeps `cx`'s waker as that
    /// waiter's one waker until the next item, the end, or [`forget`](Self::forget).
    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<T>>;
    /// Drops `waiter`'s waker, if any (the waiter is gone).
    fn forget(&self, waiter: u64);
    /// Wakers kept for waiting readers now.
    fn wakers(&self) -> usize;
    fn len(&self) -> usize;
    fn is_ended(&self) -> bool;
    /// The source a clone reads; `None`: this one, shared.
    fn fork(&self) -> Option<Arc<dyn Source<T>>> {
        None
    }
    /// A new source that gets what this one holds unread, then every later item.
    fn subscribe(&self) -> Arc<dyn Source<T>>;
    /// Subscribers the producer feeds now, besides its own queue.
    fn subscribers(&self) -> usize;
}

impl<B: Buffer> Source<B::Item> for EventQueue<B> {
    fn try_recv(&self) -> Result<B::Item, TryRecvError> {
        let mut state = self.state.lock();
        match state.buffer.pop() {
            Some(item) => Ok(item),
            None if state.closed => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<B::Item, RecvTimeoutError> {
        let mut state = self.state.lock();
        loop {
            if let Some(item) = state.buffer.pop() {
                return Ok(item);
            }
            if state.closed {
                return Err(RecvTimeoutError::Disconnected);
            }
            match deadline {
                None => self.ready.wait(&mut state),
                Some(deadline) => {
                    if self.ready.wait_until(&mut state, deadline).timed_out() {
                        return match state.buffer.pop() {
                            Some(item) => Ok(item),
                            None if state.closed => Err(RecvTimeoutError::Disconnected),
                            None => Err(RecvTimeoutError::Timeout),
                        };
                    }
                }
            }
        }
    }

    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<B::Item>> {
        let mut state = self.state.lock();
        let popped = state.buffer.pop();
        let ended = state.closed;
        let (poll, done) = state.wakers.poll_with(waiter, cx, popped, ended);
        drop(state);
        // Done waiting: its waker (dropped outside the lock) is of no more use.
        drop(done);
        poll
    }

    fn forget(&self, waiter: u64) {
        let gone = self.state.lock().wakers.remove(waiter);
        drop(gone);
    }

    fn wakers(&self) -> usize {
        self.state.lock().wakers.len()
    }

    fn len(&self) -> usize {
        EventQueue::len(self)
    }

    fn is_ended(&self) -> bool {
        self.state.lock().closed
    }

    fn subscribe(&self) -> Arc<dyn Source<B::Item>> {
        self.subscribe_queue()
    }

    fn subscribers(&self) -> usize {
        self.feed
            .upgrade()
            .map_or(0, |feeder| feeder.subscribers.lock().len())
    }
}

/// A buffer that keeps the newest item only (latest-value streams), and optionally a
/// final item after it (why the stream ended).
#[derive(Debug, Clone)]
pub(crate) struct Newest<T> {
    value: Option<T>,
    last: Option<T>,
}

impl<T> Default for Newest<T> {
    fn default() -> Self {
        Newest {
            value: None,
            last: None,
        }
    }
}

impl<T> Newest<T> {
    /// A buffer holding `value` unread.
    pub(crate) fn holding(value: Option<T>) -> Newest<T> {
        Newest { value, last: None }
    }

    /// Replaces the unread value, if any.
    pub(crate) fn set(&mut self, value: T) {
        self.value = Some(value);
    }

    /// The item read after the newest value (just before the end).
    pub(crate) fn set_final(&mut self, item: T) {
        self.last = Some(item);
    }
}

impl<T: Clone + Send + 'static> Buffer for Newest<T> {
    type Item = T;

    fn pop(&mut self) -> Option<T> {
        self.value.take().or_else(|| self.last.take())
    }

    fn len(&self) -> usize {
        usize::from(self.value.is_some()) + usize::from(self.last.is_some())
    }
}
