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
//! - **Clones share the work; subscribers see everything.** A clone reads the same
//!   queue, and each item goes to one of the readers (threads that split the handling).
//!   [`subscribe`](EventStream::subscribe) makes an independent reader: it gets what its
//!   source has not received yet and every later item, in its own queue bounded by the
//!   same rule; dropping it unsubscribes. A config receiver's clone is a receiver of its
//!   own that has seen what the original has (both see every later state, and the final
//!   one), as its subscriber is.
//! - **Timeouts.** `recv_timeout` takes `impl Into<`[`Timeout`]`>`: a `Duration`, or
//!   [`Timeout::Never`] to wait without a deadline.
//! - **Wakers.** Each [`next`](EventStream::next) future keeps one waker until it
//!   completes or is dropped; a stream value polled as a `Stream` keeps one, the last
//!   given. A `select!` loop that drops its `next()` each round leaves nothing behind.
//! - **Errors, not panics.** Receiving never panics; the error types are
//!   [`zookeeper_mt::stream`]'s (re-exported here), plain `Copy` values.
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

pub use zookeeper_mt::stream::{RecvError, RecvTimeoutError, TryRecvError};

mod filter;
mod queue;
#[cfg(test)]
mod tests;

pub(crate) use queue::{waiter_id, Buffer, EventQueue, Newest, Source};

use filter::FilterMap;
use futures_core::stream::{FusedStream, Stream};
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zookeeper_mt::Timeout;

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
    /// (`Timeout`); [`Timeout::Never`] waits without a deadline (a `Duration` converts).
    pub fn recv_timeout(&self, timeout: impl Into<Timeout>) -> Result<T, RecvTimeoutError> {
        self.source
            .recv_deadline(timeout.into().deadline().instant())
    }

    /// A second, independent reader of this stream: it receives what this stream value
    /// has not received yet (the items queued for it now), then every later item, in a
    /// queue of its own bounded by the same coalescing rule. Unlike a
    /// [`clone`](Clone::clone), which shares this queue (each item goes to one of the two
    /// readers), the stream and its subscriber both see every item, and either may fall
    /// behind without holding the other back.
    ///
    /// It starts level with its source, rather than empty, so that nothing falls between
    /// "queued before" and "pushed after": what the source's readers have not taken yet
    /// depends on how fast they read, and a cache's queued items are what brings a reader
    /// up to date (its `Initialized`, the changes it has not seen), which a subscriber
    /// needs as much.
    ///
    /// Dropping the subscriber (and its clones) unsubscribes. It keeps what the stream
    /// keeps alive (e.g. a value watch's task). Subscribing to a subscriber gives another
    /// subscriber of the same producer. A config receiver's subscriber is a new receiver,
    /// as its clone is.
    pub fn subscribe(&self) -> EventStream<T> {
        EventStream {
            source: self.source.subscribe(),
            reader: waiter_id(),
            keep_alive: self.keep_alive.clone(),
        }
    }

    /// Subscribers the stream's producer feeds now, besides its own queue.
    // For tests: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn subscribers(&self) -> usize {
        self.source.subscribers()
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
    /// A clone reads the same queue: each item goes to one of the readers, so clones
    /// share the work (see [`subscribe`](EventStream::subscribe) for a reader that sees
    /// every item). Except for a config receiver: see the [module docs](self).
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
