//! Receiving the event streams of the long-lived recipes ([`lifecycle`](crate::lifecycle)
//! connection states, [`cache`](crate::cache) changes): blocking, with a timeout, without
//! waiting, or as a future on any executor.
//!
//! Threads (or tasks) reading one stream share it: each event goes to one of them.
//!
//! Every stream is a queue with one producer (a recipe's own task) whose memory is
//! bounded by the recipe's coalescing rule (see each stream's docs), never by how far a
//! slow reader is behind. A stream ends once its recipe has stopped and every queued
//! event was received: receiving then fails with `Disconnected` (blocking forms) or
//! yields `None` ([`Next`]).

use crossbeam_channel::{RecvTimeoutError, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How a stream stores what its reader has not taken yet (and coalesces it).
pub(crate) trait Buffer: Send + 'static {
    /// What the reader receives.
    type Item;
    /// The next item for the reader, if any.
    fn pop(&mut self) -> Option<Self::Item>;
    /// Items queued (an upper bound on what `pop` would still return).
    fn len(&self) -> usize;
}

struct State<B> {
    buffer: B,
    closed: bool,
    wakers: Vec<Waker>,
}

/// A queue fed by one recipe task and read by any number of threads or tasks (each
/// item goes to one of them).
pub(crate) struct EventQueue<B> {
    state: Mutex<State<B>>,
    ready: Condvar,
}

impl<B: Buffer> EventQueue<B> {
    pub(crate) fn new(buffer: B) -> Arc<EventQueue<B>> {
        Arc::new(EventQueue {
            state: Mutex::new(State {
                buffer,
                closed: false,
                wakers: Vec::new(),
            }),
            ready: Condvar::new(),
        })
    }

    /// Changes the buffer (the producer's side) and wakes readers. Nothing is added once
    /// the queue is closed.
    pub(crate) fn update(&self, change: impl FnOnce(&mut B)) {
        let wakers = {
            let mut state = self.state.lock();
            if state.closed {
                return;
            }
            change(&mut state.buffer);
            std::mem::take(&mut state.wakers)
        };
        self.ready.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Ends the stream: readers get what is queued, then the end.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.wakers)
        };
        self.ready.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.state.lock().buffer.len()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    pub(crate) fn try_recv(&self) -> Result<B::Item, TryRecvError> {
        let mut state = self.state.lock();
        match state.buffer.pop() {
            Some(item) => Ok(item),
            None if state.closed => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Blocks until an item, the end, or `deadline` (`None`: no deadline).
    pub(crate) fn recv_deadline(
        &self,
        deadline: Option<Instant>,
    ) -> Result<B::Item, RecvTimeoutError> {
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
                        return state.buffer.pop().ok_or(RecvTimeoutError::Timeout);
                    }
                }
            }
        }
    }

    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<B::Item>> {
        let mut state = self.state.lock();
        if let Some(item) = state.buffer.pop() {
            return Poll::Ready(Some(item));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Type-erased polling, so [`Next`] does not name the buffer type.
pub(crate) trait PollNext<T>: Send + Sync {
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<T>>;
}

impl<B: Buffer> PollNext<B::Item> for EventQueue<B> {
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<B::Item>> {
        self.poll_recv(cx)
    }
}

/// The future of a stream's `next()`: the next event, or `None` once the stream has
/// ended. It needs no runtime (the recipe's thread wakes it) and works on any executor.
/// Dropping it before it completes loses nothing.
#[must_use = "a future does nothing unless polled"]
pub struct Next<'a, T> {
    queue: &'a dyn PollNext<T>,
}

impl<'a, T> Next<'a, T> {
    pub(crate) fn new(queue: &'a dyn PollNext<T>) -> Next<'a, T> {
        Next { queue }
    }
}

impl<T> Future for Next<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.queue.poll_next(cx)
    }
}

impl<T> std::fmt::Debug for Next<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Next")
    }
}

/// A blocking iterator over a stream's events; it ends with the stream.
pub struct Iter<'a, T> {
    next: Box<dyn FnMut() -> Option<T> + 'a>,
}

impl<'a, T> Iter<'a, T> {
    pub(crate) fn new(next: impl FnMut() -> Option<T> + 'a) -> Iter<'a, T> {
        Iter {
            next: Box::new(next),
        }
    }
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        (self.next)()
    }
}

impl<T> std::fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Iter")
    }
}

/// The receiving methods of a stream type whose field `queue` is an
/// `Arc<EventQueue<_>>` with items `$item`.
macro_rules! receiving_methods {
    ($item:ty) => {
        /// Blocks until the next event; `Err` once the stream has ended and every event
        /// was received.
        pub fn recv(&self) -> Result<$item, crossbeam_channel::RecvError> {
            self.queue
                .recv_deadline(None)
                .map_err(|_| crossbeam_channel::RecvError)
        }

        /// Blocks until the next event or until `timeout` passes.
        pub fn recv_timeout(
            &self,
            timeout: std::time::Duration,
        ) -> Result<$item, crossbeam_channel::RecvTimeoutError> {
            self.queue
                .recv_deadline(Some($crate::events::deadline_after(timeout)))
        }

        /// The next event if one is queued.
        pub fn try_recv(&self) -> Result<$item, crossbeam_channel::TryRecvError> {
            self.queue.try_recv()
        }

        /// The next event as a future (`None` once the stream has ended), for any
        /// executor.
        pub fn next(&self) -> $crate::events::Next<'_, $item> {
            $crate::events::Next::new(&*self.queue)
        }

        /// A blocking iterator over the events; it ends with the stream.
        pub fn iter(&self) -> $crate::events::Iter<'_, $item> {
            $crate::events::Iter::new(move || self.recv().ok())
        }

        /// Events queued and not yet received (bounded: see the type's docs).
        pub fn len(&self) -> usize {
            self.queue.len()
        }

        /// Whether no event is queued.
        pub fn is_empty(&self) -> bool {
            self.queue.len() == 0
        }

        /// Whether the stream has ended (events may still be queued).
        pub fn is_ended(&self) -> bool {
            self.queue.is_closed()
        }
    };
}
pub(crate) use receiving_methods;

/// `now + timeout`, saturating at a very distant instant.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(10 * 365 * 24 * 3600))
}
