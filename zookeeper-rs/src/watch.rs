//! The receiving end of a one-shot watch.

use crate::context::WatchKind;
use crate::error::{Error, Result};
use crate::types::WatchedEvent;
use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::Duration;

/// A one-shot watch set by a watching read (`exists_watch`, `get_watch`,
/// `get_children_watch`, ...). It delivers exactly one [`WatchedEvent`]:
///
/// - the node event (created, deleted, data or children changed), or
/// - `EventType::NotWatching` if the watch was removed with `remove_watches`, or
/// - `EventType::Session` with state `Expired`/`AuthFailed` when the session ends for
///   good (the watch can never fire then).
///
/// Connection loss does not consume a watch: the C client re-registers it on reconnect
/// and it fires later (watch the session stream for connection changes). If the handle
/// is closed first, waiting returns `Error::Closed`.
///
/// Dropping a `Watch` does not unregister it on the server; the event is then
/// discarded when it comes.
#[derive(Debug)]
pub struct Watch {
    receiver: Receiver<WatchedEvent>,
    pub(crate) client: u64,
    pub(crate) id: u64,
    pub(crate) path: String,
    pub(crate) kind: WatchKind,
}

impl Watch {
    pub(crate) fn new(
        receiver: Receiver<WatchedEvent>,
        client: u64,
        id: u64,
        path: &str,
        kind: WatchKind,
    ) -> Watch {
        Watch {
            receiver,
            client,
            id,
            path: path.to_string(),
            kind,
        }
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Blocks until the event arrives.
    pub fn wait(&self) -> Result<WatchedEvent> {
        self.receiver.recv().map_err(|_| Error::Closed)
    }

    /// Blocks until the event arrives or `timeout` passes (`Ok(None)`).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<Option<WatchedEvent>> {
        match self.receiver.recv_timeout(timeout) {
            Ok(event) => Ok(Some(event)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }

    /// The event if it has arrived.
    pub fn try_get(&self) -> Result<Option<WatchedEvent>> {
        match self.receiver.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::Closed),
        }
    }

    /// The underlying channel, e.g. for `crossbeam_channel::select!` over many watches.
    pub fn receiver(&self) -> &Receiver<WatchedEvent> {
        &self.receiver
    }
}
