//! The errors of receiving from a stream: [`ConnectionStates`](crate::ConnectionStates),
//! [`SessionEvents::try_recv`](crate::SessionEvents::try_recv) and the recipes' event
//! streams (`zookeeper_mt_recipes::events`, which re-exports them). They are this
//! crate's own types, so no channel crate appears in the API.
//!
//! Every stream ends the same way: each item still queued is received first, then
//! [`recv`](crate::ConnectionStates::recv) fails with [`RecvError`],
//! `recv_timeout` with [`RecvTimeoutError::Disconnected`] and `try_recv` with
//! [`TryRecvError::Disconnected`].

use std::fmt;

/// The stream has ended and every item was received (from `recv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RecvError;

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the stream has ended")
    }
}

impl std::error::Error for RecvError {}

/// Why `try_recv` returned no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TryRecvError {
    /// Nothing is queued yet; the stream goes on.
    Empty,
    /// The stream has ended and every item was received.
    Disconnected,
}

impl TryRecvError {
    /// Whether nothing is queued yet (the stream goes on).
    pub fn is_empty(self) -> bool {
        self == TryRecvError::Empty
    }

    /// Whether the stream has ended.
    pub fn is_disconnected(self) -> bool {
        self == TryRecvError::Disconnected
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("nothing is queued yet"),
            TryRecvError::Disconnected => f.write_str("the stream has ended"),
        }
    }
}

impl std::error::Error for TryRecvError {}

impl From<RecvError> for TryRecvError {
    fn from(_: RecvError) -> TryRecvError {
        TryRecvError::Disconnected
    }
}

/// Why `recv_timeout` returned no item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvTimeoutError {
    /// The timeout passed with nothing queued (on the thread that delivers the items, at
    /// once: it never waits there).
    Timeout,
    /// The stream has ended and every item was received.
    Disconnected,
}

impl RecvTimeoutError {
    /// Whether the timeout passed.
    pub fn is_timeout(self) -> bool {
        self == RecvTimeoutError::Timeout
    }

    /// Whether the stream has ended.
    pub fn is_disconnected(self) -> bool {
        self == RecvTimeoutError::Disconnected
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("timed out waiting for the next item"),
            RecvTimeoutError::Disconnected => f.write_str("the stream has ended"),
        }
    }
}

impl std::error::Error for RecvTimeoutError {}

impl From<RecvError> for RecvTimeoutError {
    fn from(_: RecvError) -> RecvTimeoutError {
        RecvTimeoutError::Disconnected
    }
}

impl From<TryRecvError> for RecvTimeoutError {
    /// `Empty` is a timeout of zero.
    fn from(error: TryRecvError) -> RecvTimeoutError {
        match error {
            TryRecvError::Empty => RecvTimeoutError::Timeout,
            TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_display_and_convert() {
        fn error<E: std::error::Error + Send + Sync + Copy + 'static>(_: E) {}
        error(RecvError);
        error(TryRecvError::Empty);
        error(RecvTimeoutError::Timeout);
        assert_eq!(RecvError.to_string(), "the stream has ended");
        assert_eq!(
            RecvTimeoutError::from(TryRecvError::Empty),
            RecvTimeoutError::Timeout
        );
        assert!(TryRecvError::from(RecvError).is_disconnected());
        assert!(RecvTimeoutError::Timeout.is_timeout());
    }
}

/// The wakers of a stream queue's waiting readers, one per reader: a reader (a stream
/// value or a `next()` future) is named by a [`reader_id`], its waker replaced on each
/// poll and removed when it is done or dropped, so a reader that stops polling leaves
/// nothing behind. Shared by this crate's streams and the recipes' (not a public API).
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct ReaderWakers(std::collections::HashMap<u64, std::task::Waker>);

/// A fresh id for a reader's place among a queue's wakers (unique in the process, so an
/// id is never reused for another reader).
#[doc(hidden)]
pub fn reader_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl ReaderWakers {
    /// Records `cx`'s waker as `reader`'s (the last one given).
    pub fn register(&mut self, reader: u64, cx: &std::task::Context<'_>) {
        match self.0.get_mut(&reader) {
            Some(known) if known.will_wake(cx.waker()) => {}
            Some(known) => known.clone_from(cx.waker()),
            None => {
                self.0.insert(reader, cx.waker().clone());
            }
        }
    }

    /// One poll of `reader` given what its queue had: the item popped (if any) and
    /// whether the queue has ended. `Pending` (no item, not ended) keeps `cx`'s waker as
    /// the reader's; otherwise the reader is done waiting and its waker is handed back,
    /// to be dropped outside the queue's lock.
    pub fn poll_with<T>(
        &mut self,
        reader: u64,
        cx: &std::task::Context<'_>,
        popped: Option<T>,
        ended: bool,
    ) -> (std::task::Poll<Option<T>>, Option<std::task::Waker>) {
        match popped {
            None if !ended => {
                self.register(reader, cx);
                (std::task::Poll::Pending, None)
            }
            ready => (std::task::Poll::Ready(ready), self.remove(reader)),
        }
    }

    /// Takes `reader`'s waker out (to drop it outside the queue's lock).
    pub fn remove(&mut self, reader: u64) -> Option<std::task::Waker> {
        self.0.remove(&reader)
    }

    /// Wakers kept now.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves every waker to `out` (to wake outside the queue's lock).
    pub fn drain_into(&mut self, out: &mut Vec<std::task::Waker>) {
        out.extend(self.0.drain().map(|(_, waker)| waker));
    }
}
