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
