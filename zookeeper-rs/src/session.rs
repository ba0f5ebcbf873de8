//! Session state shared between the global watcher (C completion thread) and users:
//! a condition variable to wait on, and a stream of events for any number of receivers.

use crate::types::{SessionState, WatchedEvent};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::time::Instant;

pub(crate) struct Session {
    /// Registry key of the client this session belongs to.
    pub(crate) client: u64,
    state: Mutex<SessionState>,
    changed: Condvar,
    /// `None` once the handle is closed: later subscribers get an ended stream.
    subscribers: Mutex<Option<Vec<Sender<WatchedEvent>>>>,
}

impl Session {
    pub(crate) fn new(client: u64) -> Session {
        Session {
            client,
            state: Mutex::new(SessionState::NotConnected),
            changed: Condvar::new(),
            subscribers: Mutex::new(Some(Vec::new())),
        }
    }

    pub(crate) fn state(&self) -> SessionState {
        *self.state.lock()
    }

    /// Records a new state. A terminal state is never left (C sends nothing after it,
    /// and `Closed` is ours).
    pub(crate) fn on_state(&self, state: SessionState) {
        {
            let mut current = self.state.lock();
            if current.is_terminal() {
                return;
            }
            *current = state;
        }
        self.changed.notify_all();
    }

    /// Waits until connected, terminal, or `deadline`; returns the state then.
    pub(crate) fn wait_connected(&self, deadline: Instant) -> SessionState {
        let mut state = self.state.lock();
        while !state.is_connected() && !state.is_terminal() {
            if self.changed.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        *state
    }

    /// Sends `event` to every live subscriber without blocking (the channels are
    /// unbounded), dropping subscribers whose receiver is gone.
    pub(crate) fn publish(&self, event: WatchedEvent) {
        if let Some(subscribers) = self.subscribers.lock().as_mut() {
            subscribers.retain(|subscriber| subscriber.send(event.clone()).is_ok());
        }
    }

    pub(crate) fn subscribe(&self) -> Receiver<WatchedEvent> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        // After close the sender is dropped at once: the stream has already ended.
        if let Some(subscribers) = self.subscribers.lock().as_mut() {
            subscribers.push(sender);
        }
        receiver
    }

    /// Ends every subscription (receivers see the channel close after the last event),
    /// including those made later.
    pub(crate) fn close_subscribers(&self) {
        self.subscribers.lock().take();
    }
}
