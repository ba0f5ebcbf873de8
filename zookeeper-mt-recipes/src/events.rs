//! One event-stream type for every long-lived recipe: [`EventStream<T>`].
//!
//! | stream | items | from |
//! |---|---|---|
//! | cache changes | [`CacheEvent`](crate::caches::CacheEvent) | [`NodeCache::events`](crate::caches::NodeCache::events), [`ChildrenCache::events`](crate::caches::ChildrenCache::events), [`TreeCache::events`](crate::caches::TreeCache::events) |
//! | leadership | [`LeadershipEvent`](crate::leadership::leader_latch::LeadershipEvent) | [`LeaderLatch::events`](crate::leadership::leader_latch::LeaderLatch::events) |
//! | group members | [`GroupEvent`](crate::nodes::GroupEvent) | [`Group::events`](crate::nodes::Group::events) |
//! | config states | [`ConfigEvent`](crate::caches::config_watch::ConfigEvent) | [`ConfigWatch::receiver`](crate::caches::config_watch::ConfigWatch::receiver) |
//! | values | `Result<`[`Versioned<T>`](crate::shared::Versioned)`>` | [`ValueWatch::into_stream`](crate::shared::ValueWatch::into_stream) |
//!
//! Connection states are the client crate's own stream,
//! [`ConnectionStates`](crate::lifecycle::ConnectionStates) (from
//! [`connection_states`](crate::lifecycle::connection_states),
//! [`ManagedZooKeeper::states`](crate::lifecycle::ManagedZooKeeper::states),
//! [`Client::states`](crate::lifecycle::Client::states)): the same contract and the same
//! forms, fed where the C client delivers session events.
//!
//! # The stream contract
//! - **One producer, any readers.** A recipe's own task feeds the stream; threads read
//!   it blocking ([`recv`](EventStream::recv), [`recv_timeout`](EventStream::recv_timeout),
//!   [`iter`](EventStream::iter), a `for` loop) or without waiting
//!   ([`try_recv`](EventStream::try_recv)); tasks on any executor await
//!   [`next`](EventStream::next) or use it as a [`futures_core::Stream`]. No runtime is
//!   needed: the producer wakes the reader.
//! - **Bounded.** What a reader has not taken yet is kept by the producer's coalescing
//!   rule, never by how far behind the reader is: a cache keeps one entry per changed
//!   node plus at most 32 connection signals; a latch keeps at most 64 events (dropping
//!   the oldest complete term); a config receiver keeps only the newest state; a value
//!   stream the newest value and the reason it ended. See each producer's docs for its
//!   rule.
//! - **Never missing the final value.** Coalescing drops or merges only older items: the
//!   last item queued is always kept. When the producer ends the stream (the recipe
//!   stopped, its session ended), every item still queued is received, *then* the end:
//!   `recv` fails with [`RecvError`], `recv_timeout` and `try_recv` with `Disconnected`,
//!   `next().await` and the `Stream` yield `None`, the iterator stops. Nothing is added
//!   after the end.
//! - **Clones.** A clone reads the same queue, and each item goes to one reader (like a
//!   crossbeam `Receiver`), except a config receiver's clone, which is a receiver of its
//!   own that has seen what the original has (both see every later state, and the final
//!   one).
//! - **Wakers.** Each [`next`](EventStream::next) future keeps one waker until it
//!   completes or is dropped; a stream value polled as a `Stream` keeps one, the last
//!   given. A `select!` loop that drops its `next()` each round leaves nothing behind.
//! - **Errors, not panics.** Receiving never panics; the error types are crossbeam's
//!   (re-exported here).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::caches::{CacheEvent, NodeCache};
//! use zookeeper_mt_recipes::events::{EventStream, RecvTimeoutError};
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let cache = NodeCache::new(&zk, "/app/flag")?;
//! // Blocking, with a timeout.
//! match cache.events().recv_timeout(Duration::from_secs(5)) {
//!     Ok(event) => println!("{event:?}"),
//!     Err(RecvTimeoutError::Timeout) => println!("nothing new"),
//!     Err(RecvTimeoutError::Disconnected) => println!("the cache has stopped"),
//! }
//! // Async, on any executor: `next().await` (or the `Stream` impl).
//! async fn follow(events: EventStream<CacheEvent>) {
//!     while let Some(event) = events.next().await {
//!         println!("{event:?}");
//!     }
//!     // The cache stopped and every queued event was received.
//! }
//! let _reader = follow(cache.events().clone()); // hand it to an executor
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use crossbeam_channel::{RecvError, RecvTimeoutError, TryRecvError};

use futures_core::stream::{FusedStream, Stream};
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// The producer's side: a queue with a coalescing buffer.
// ---------------------------------------------------------------------------------------

/// How a stream stores what its reader has not taken yet (and coalesces it).
pub(crate) trait Buffer: Send + 'static {
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
    wakers: HashMap<u64, Waker>,
}

/// A fresh id for a reader's place among a queue's wakers (unique in the process, so
/// an id is never reused for another reader).
pub(crate) fn waiter_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Records `cx`'s waker as `waiter`'s (one per waiter, the last given).
pub(crate) fn register(wakers: &mut HashMap<u64, Waker>, waiter: u64, cx: &Context<'_>) {
    match wakers.get_mut(&waiter) {
        Some(known) if known.will_wake(cx.waker()) => {}
        Some(known) => known.clone_from(cx.waker()),
        None => {
            wakers.insert(waiter, cx.waker().clone());
        }
    }
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
                wakers: HashMap::new(),
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
        self.wake(wakers);
    }

    /// Ends the stream: readers get what is queued, then the end.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.wakers)
        };
        self.wake(wakers);
    }

    fn wake(&self, wakers: HashMap<u64, Waker>) {
        self.ready.notify_all();
        for waker in wakers.into_values() {
            waker.wake();
        }
    }

    /// Reads the buffer and the closed flag (e.g. to copy them for a new reader).
    pub(crate) fn inspect<R>(&self, read: impl FnOnce(&B, bool) -> R) -> R {
        let state = self.state.lock();
        read(&state.buffer, state.closed)
    }

    pub(crate) fn len(&self) -> usize {
        self.state.lock().buffer.len()
    }
}

/// What an [`EventStream`] reads from: a queue, or a view of one.
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
        let ready = match state.buffer.pop() {
            Some(item) => Some(item),
            None if state.closed => None,
            None => {
                register(&mut state.wakers, waiter, cx);
                return Poll::Pending;
            }
        };
        // Done waiting: its waker (dropped outside the lock) is of no more use.
        let done = state.wakers.remove(&waiter);
        drop(state);
        drop(done);
        Poll::Ready(ready)
    }

    fn forget(&self, waiter: u64) {
        let gone = self.state.lock().wakers.remove(&waiter);
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

impl<T: Send + 'static> Buffer for Newest<T> {
    type Item = T;

    fn pop(&mut self) -> Option<T> {
        self.value.take().or_else(|| self.last.take())
    }

    fn len(&self) -> usize {
        usize::from(self.value.is_some()) + usize::from(self.last.is_some())
    }
}

// ---------------------------------------------------------------------------------------
// The reader's side.
// ---------------------------------------------------------------------------------------

/// A recipe's event stream (see the [module docs](self) for the contract): receive its
/// items blocking, with a timeout, without waiting, by iterating, or asynchronously
/// ([`next`](Self::next), [`Stream`]). Its memory is bounded by the producer's
/// coalescing rule, and after the producer ends it every queued item is still received
/// before the end.
pub struct EventStream<T> {
    source: Arc<dyn Source<T>>,
    /// This value's place among the source's wakers (polls of the stream itself).
    reader: u64,
    /// Whatever must live as long as the stream (e.g. the task feeding it).
    keep_alive: Option<Arc<dyn Any + Send + Sync>>,
}

impl<T> EventStream<T> {
    pub(crate) fn new(source: Arc<dyn Source<T>>) -> EventStream<T> {
        EventStream {
            source,
            reader: waiter_id(),
            keep_alive: None,
        }
    }

    /// This stream, keeping `value` alive as long as it (or a clone) lives.
    pub(crate) fn keeping(mut self, value: impl Any + Send + Sync) -> EventStream<T> {
        self.keep_alive = Some(Arc::new(value));
        self
    }

    /// The items of this stream that `map` turns into some (the others are taken and
    /// skipped).
    pub(crate) fn filter_map<U>(
        self,
        map: impl Fn(T) -> Option<U> + Send + Sync + 'static,
    ) -> EventStream<U>
    where
        T: 'static,
        U: 'static,
    {
        EventStream::new(Arc::new(FilterMap {
            inner: self,
            map: Arc::new(map),
        }))
    }

    /// Blocks until the next item; `Err` once the stream has ended and every item was
    /// received.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.source.recv_deadline(None).map_err(|_| RecvError)
    }

    /// Blocks until the next item, the end (`Disconnected`) or until `timeout` passes
    /// (`Timeout`).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.source.recv_deadline(Some(deadline_after(timeout)))
    }

    /// The next item if one is queued: `Empty` if none is yet, `Disconnected` once the
    /// stream has ended and every item was received.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.source.try_recv()
    }

    /// The next item as a future: `None` once the stream has ended and every item was
    /// received. It works on any executor; dropping it before it completes loses
    /// nothing.
    pub fn next(&self) -> Next<'_, T> {
        Next {
            stream: self,
            waiter: waiter_id(),
        }
    }

    /// A blocking iterator over the items; it ends with the stream.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { stream: self }
    }

    /// Items queued and not yet received (bounded by the producer's rule; for a
    /// filtered stream, such as a group's, an upper bound).
    pub fn len(&self) -> usize {
        self.source.len()
    }

    /// Whether no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the producer has ended the stream (items may still be queued).
    pub fn is_ended(&self) -> bool {
        self.source.is_ended()
    }

    /// Wakers this stream's queue keeps for waiting readers now (at most one per
    /// pending `next()` future and one per stream value polled as a `Stream`).
    // For tests: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakers(&self) -> usize {
        self.source.wakers()
    }

    /// Polls for the next item (what the [`Stream`] does): this stream value keeps one
    /// waker, the last given (the `Stream` contract); each [`next`](Self::next) future
    /// keeps its own, so tasks sharing one value each await `next()`.
    pub(crate) fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.source.poll_recv(cx, self.reader)
    }

    /// Whether polling would return `None` at once.
    fn is_terminated(&self) -> bool {
        self.source.is_ended() && self.source.len() == 0
    }
}

impl<T> Clone for EventStream<T> {
    /// A clone reads the same queue (each item goes to one reader), except for a config
    /// receiver: see the [module docs](self).
    fn clone(&self) -> EventStream<T> {
        EventStream {
            source: self
                .source
                .fork()
                .unwrap_or_else(|| Arc::clone(&self.source)),
            reader: waiter_id(),
            keep_alive: self.keep_alive.clone(),
        }
    }
}

impl<T> Drop for EventStream<T> {
    fn drop(&mut self) {
        self.source.forget(self.reader);
    }
}

impl<T> std::fmt::Debug for EventStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("queued", &self.len())
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl<T> Stream for EventStream<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_recv(cx)
    }
}

impl<T> FusedStream for EventStream<T> {
    fn is_terminated(&self) -> bool {
        EventStream::is_terminated(self)
    }
}

/// A shared reference is a stream too, e.g. `cache.events()`.
impl<T> Stream for &EventStream<T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.poll_recv(cx)
    }
}

impl<T> FusedStream for &EventStream<T> {
    fn is_terminated(&self) -> bool {
        EventStream::is_terminated(self)
    }
}

/// The future of [`EventStream::next`]: the next item, or `None` once the stream has
/// ended. Dropping it before it completes loses nothing.
#[must_use = "a future does nothing unless polled"]
pub struct Next<'a, T> {
    stream: &'a EventStream<T>,
    /// This future's place among the source's wakers: dropped with it.
    waiter: u64,
}

impl<T> Future for Next<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.stream.source.poll_recv(cx, self.waiter)
    }
}

impl<T> Drop for Next<'_, T> {
    fn drop(&mut self) {
        self.stream.source.forget(self.waiter);
    }
}

impl<T> std::fmt::Debug for Next<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Next")
    }
}

/// A blocking iterator over a stream's items ([`EventStream::iter`]); it ends with the
/// stream.
pub struct Iter<'a, T> {
    stream: &'a EventStream<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.stream.recv().ok()
    }
}

impl<T> std::fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Iter")
    }
}

/// A blocking iterator that owns its stream (`for item in stream`); it ends with the
/// stream.
pub struct IntoIter<T> {
    stream: EventStream<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.stream.recv().ok()
    }
}

impl<T> std::fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IntoIter")
    }
}

impl<T> IntoIterator for EventStream<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        IntoIter { stream: self }
    }
}

impl<'a, T> IntoIterator for &'a EventStream<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// A stream's items turned into others, some skipped ([`EventStream::filter_map`]).
struct FilterMap<T, U> {
    inner: EventStream<T>,
    map: Arc<dyn Fn(T) -> Option<U> + Send + Sync>,
}

impl<T: 'static, U: 'static> Source<U> for FilterMap<T, U> {
    fn try_recv(&self) -> Result<U, TryRecvError> {
        loop {
            if let Some(item) = (self.map)(self.inner.source.try_recv()?) {
                return Ok(item);
            }
        }
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<U, RecvTimeoutError> {
        loop {
            if let Some(item) = (self.map)(self.inner.source.recv_deadline(deadline)?) {
                return Ok(item);
            }
        }
    }

    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<U>> {
        loop {
            match self.inner.source.poll_recv(cx, waiter) {
                Poll::Ready(Some(item)) => {
                    if let Some(item) = (self.map)(item) {
                        return Poll::Ready(Some(item));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn forget(&self, waiter: u64) {
        self.inner.source.forget(waiter);
    }

    fn wakers(&self) -> usize {
        self.inner.source.wakers()
    }

    fn len(&self) -> usize {
        self.inner.source.len()
    }

    fn is_ended(&self) -> bool {
        self.inner.source.is_ended()
    }

    fn fork(&self) -> Option<Arc<dyn Source<U>>> {
        let inner = EventStream {
            source: self.inner.source.fork()?,
            reader: waiter_id(),
            keep_alive: self.inner.keep_alive.clone(),
        };
        Some(Arc::new(FilterMap {
            inner,
            map: Arc::clone(&self.map),
        }))
    }
}

/// `now + timeout`, saturating at a very distant instant.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(10 * 365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::Wake;
    use std::thread;

    /// Keeps the last `CAP` items (a coalescing rule that drops the oldest).
    #[derive(Default)]
    struct Capped(VecDeque<u32>);
    const CAP: usize = 4;

    impl Buffer for Capped {
        type Item = u32;
        fn pop(&mut self) -> Option<u32> {
            self.0.pop_front()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
    }

    fn capped() -> (Arc<EventQueue<Capped>>, EventStream<u32>) {
        let queue = EventQueue::new(Capped::default());
        (Arc::clone(&queue), EventStream::new(queue))
    }

    fn push(queue: &EventQueue<Capped>, item: u32) {
        queue.update(|b| {
            if b.0.len() == CAP {
                b.0.pop_front();
            }
            b.0.push_back(item);
        });
    }

    /// A minimal executor: polls on this thread, parks until woken.
    fn block_on<F: Future>(future: F) -> F::Output {
        struct Unpark(thread::Thread, AtomicBool);
        impl Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.1.store(true, Ordering::Release);
                self.0.unpark();
            }
        }
        let unpark = Arc::new(Unpark(thread::current(), AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&unpark));
        let mut cx = Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            while !unpark.1.swap(false, Ordering::Acquire) {
                thread::park_timeout(Duration::from_secs(5));
            }
        }
    }

    #[test]
    fn memory_is_bounded_by_the_buffer_and_the_newest_item_stays() {
        let (queue, stream) = capped();
        for i in 0..10_000 {
            push(&queue, i);
            assert!(stream.len() <= CAP);
        }
        let items: Vec<u32> = std::iter::from_fn(|| stream.try_recv().ok()).collect();
        assert_eq!(items, vec![9_996, 9_997, 9_998, 9_999]);

        let newest = EventQueue::new(Newest::default());
        let values = EventStream::new(Arc::clone(&newest) as Arc<dyn Source<u32>>);
        for i in 0..10_000 {
            newest.update(|b| b.set(i));
        }
        newest.update(|b| b.set_final(u32::MAX));
        newest.close();
        assert_eq!(values.len(), 2);
        assert_eq!(values.iter().collect::<Vec<_>>(), vec![9_999, u32::MAX]);
    }

    #[test]
    fn the_end_comes_after_every_queued_item() {
        let (queue, stream) = capped();
        push(&queue, 1);
        push(&queue, 2);
        queue.close();
        push(&queue, 3); // ignored: the stream has ended
        assert!(stream.is_ended());
        assert_eq!(stream.len(), 2);
        assert!(!FusedStream::is_terminated(&stream));
        assert_eq!(stream.recv_timeout(Duration::ZERO), Ok(1));
        assert_eq!(block_on(stream.next()), Some(2));
        assert_eq!(stream.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(stream.recv(), Err(RecvError));
        assert_eq!(
            stream.recv_timeout(Duration::from_secs(1)),
            Err(RecvTimeoutError::Disconnected)
        );
        assert_eq!(block_on(stream.next()), None);
        assert!(FusedStream::is_terminated(&stream));
    }

    #[test]
    fn waiting_readers_get_items_and_the_end() {
        let (queue, stream) = capped();
        assert_eq!(stream.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(
            stream.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        let producer = thread::spawn(move || {
            for i in 0..3 {
                thread::sleep(Duration::from_millis(5));
                push(&queue, i);
            }
            queue.close();
        });
        let received: Vec<u32> = stream.clone().into_iter().collect();
        producer.join().unwrap();
        assert_eq!(received, vec![0, 1, 2]);
    }

    #[test]
    fn the_stream_impl_works_on_a_minimal_executor() {
        let (queue, stream) = capped();
        let evens = stream.filter_map(|i| (i % 2 == 0).then_some(i * 10));
        let producer = thread::spawn(move || {
            for i in 0..6 {
                // Slower than the reader: every item is seen (nothing coalesced).
                thread::sleep(Duration::from_millis(5));
                push(&queue, i);
            }
            queue.close();
        });
        let mut evens = evens;
        let received = block_on(async {
            let mut received = Vec::new();
            while let Some(item) =
                std::future::poll_fn(|cx| Pin::new(&mut evens).poll_next(cx)).await
            {
                received.push(item);
            }
            received
        });
        producer.join().unwrap();
        assert_eq!(received, vec![0, 20, 40]);
        assert!(FusedStream::is_terminated(&evens));
    }

    #[test]
    fn clones_share_the_queue() {
        let (queue, first) = capped();
        let second = first.clone();
        push(&queue, 1);
        push(&queue, 2);
        assert_eq!(first.try_recv(), Ok(1));
        assert_eq!(second.try_recv(), Ok(2));
        assert!(first.is_empty() && second.is_empty());
    }

    #[test]
    fn streams_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<EventStream<u32>>();
        both::<Next<'static, u32>>();
        both::<IntoIter<u32>>();
    }
}
