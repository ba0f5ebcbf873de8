//! The receiving end of a one-shot watch.

use crate::error::{Error, Result};
use crate::timeout::Timeout;
use crate::types::WatchedEvent;
use crate::watch_table::{WatchKind, WatchTable};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The waker of a task awaiting a [`Watch`].
#[derive(Default)]
pub(crate) struct WakerSlot(Mutex<Option<Waker>>);

impl WakerSlot {
    fn wake(&self) {
        let waker = self.0.lock().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Where a watch's one event goes: its channel, and the task awaiting it (if any).
/// `send` and `close` run the waker, which is executor code: never call them with a
/// lock held.
pub(crate) struct Sink {
    sender: Sender<WatchedEvent>,
    waker: Arc<WakerSlot>,
}

impl Sink {
    /// Delivers the event (never blocks: the channel holds one and gets at most one).
    pub(crate) fn send(self, event: WatchedEvent) {
        let _ = self.sender.try_send(event);
        self.waker.wake();
    }

    /// Ends the watch without an event: waiting on it returns `Closed`.
    pub(crate) fn close(self) {
        let Sink { sender, waker } = self;
        drop(sender);
        waker.wake();
    }
}

/// A new watch's channel: the sending end for the table, the parts of the `Watch`.
pub(crate) fn channel() -> (Sink, Receiver<WatchedEvent>, Arc<WakerSlot>) {
    let (sender, receiver) = crossbeam_channel::bounded(1);
    let waker = Arc::new(WakerSlot::default());
    let sink = Sink {
        sender,
        waker: Arc::clone(&waker),
    };
    (sink, receiver, waker)
}

/// A one-shot watch set by a watching read (`exists_watch`, `get_watch`,
/// `get_children_watch`, ...). It delivers exactly one [`WatchedEvent`]:
///
/// - the node event (created, deleted, data or children changed), or
/// - `EventType::NotWatching` if the watch was removed with `remove_watches` or
///   `remove_watch`, or
/// - `EventType::Session` with state `Expired`/`AuthFailed` when the session ends for
///   good (the watch can never fire then; `state()` already says so when it arrives).
///
/// Connection loss does not consume a watch: the C client re-registers it on reconnect
/// and it fires later (watch the session stream for connection changes). If the handle
/// is closed first, waiting returns `Error::Closed`.
///
/// All the watches of a handle on one path and kind share one registration in the C
/// client (and the server keeps one watch per path and type anyway). A watch set by a
/// read whose reply came after a change waits for the next change, as the read has
/// already seen the new data. Dropping a `Watch` withdraws its interest; when the last
/// one on a path and kind goes, the C registration is released on the client (the
/// server's watch stays until it fires or `remove_watches` removes it).
///
/// A `Watch` is also a `Future` of the same outcome (`Err(Closed)` if the handle closes
/// first) for any executor: it is woken from the C completion thread.
pub struct Watch {
    receiver: Receiver<WatchedEvent>,
    waker: Arc<WakerSlot>,
    pub(crate) table: Arc<WatchTable>,
    pub(crate) registration: u64,
    pub(crate) id: u64,
    path: String,
    kind: WatchKind,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("id", &self.id)
            .finish()
    }
}

impl Watch {
    pub(crate) fn new(
        receiver: Receiver<WatchedEvent>,
        waker: Arc<WakerSlot>,
        table: Arc<WatchTable>,
        registration: u64,
        id: u64,
        path: &str,
        kind: WatchKind,
    ) -> Watch {
        Watch {
            receiver,
            waker,
            table,
            registration,
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

    /// Blocks until the event arrives or `timeout` passes (`Err(Timeout)`, like every
    /// wait; the watch stays armed and can be waited for again).
    pub fn wait_timeout(&self, timeout: impl Into<Timeout>) -> Result<WatchedEvent> {
        let Some(timeout) = timeout.into().duration() else {
            return self.wait();
        };
        match self.receiver.recv_timeout(timeout) {
            Ok(event) => Ok(event),
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout),
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

impl Future for Watch {
    type Output = Result<WatchedEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(outcome) = self.outcome() {
            return Poll::Ready(outcome);
        }
        *self.waker.0.lock() = Some(cx.waker().clone());
        // Again: a delivery between the first look and storing the waker found no waker.
        match self.outcome() {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    }
}

impl Watch {
    fn outcome(&self) -> Option<Result<WatchedEvent>> {
        match self.receiver.try_recv() {
            Ok(event) => Some(Ok(event)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(Error::Closed)),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.table.drop_watch(self.registration, self.id);
    }
}
