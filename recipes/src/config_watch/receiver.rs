//! The receivers of a config watch: each gets the newest state it has not seen yet.

use super::ConfigEvent;
use crossbeam_channel::{RecvError, RecvTimeoutError, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The latest state, shared by the follower task and every receiver.
#[derive(Debug, Default)]
pub(super) struct Latest {
    /// Number of states delivered so far (0: none yet).
    pub(super) count: u64,
    /// The newest one.
    pub(super) event: Option<ConfigEvent>,
    /// The watch has stopped: no state will follow `event`.
    pub(super) ended: bool,
}

#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) latest: Mutex<Latest>,
    changed: Condvar,
}

impl Shared {
    pub(super) fn publish(&self, event: ConfigEvent) {
        let mut latest = self.latest.lock();
        latest.count += 1;
        latest.event = Some(event);
        self.changed.notify_all();
    }

    pub(super) fn end(&self) {
        self.latest.lock().ended = true;
        self.changed.notify_all();
    }
}

/// A receiver of a [`ConfigWatch`](super::ConfigWatch)'s states: each receiver gets the newest state it has
/// not seen yet, so a slow reader skips intermediate states rather than queueing them
/// (memory stays one value however busy the node is), and every receiver sees the final
/// state. A clone is an independent receiver that has seen what this one has.
///
/// Iterating blocks for each next state and ends once the watch has stopped and its
/// final state was received.
#[derive(Debug)]
pub struct ConfigReceiver {
    shared: Arc<Shared>,
    /// The count of the last state this receiver returned.
    seen: AtomicU64,
}

impl Clone for ConfigReceiver {
    fn clone(&self) -> ConfigReceiver {
        ConfigReceiver {
            shared: Arc::clone(&self.shared),
            seen: AtomicU64::new(self.seen.load(Ordering::Relaxed)),
        }
    }
}

impl ConfigReceiver {
    pub(super) fn new(shared: Arc<Shared>) -> ConfigReceiver {
        ConfigReceiver {
            shared,
            seen: AtomicU64::new(0),
        }
    }

    /// Takes the newest unseen state if there is one; `Err(true)`: the watch ended
    /// (and everything was seen), `Err(false)`: nothing new yet.
    fn take(&self, latest: &Latest) -> std::result::Result<ConfigEvent, bool> {
        if latest.count > self.seen.load(Ordering::Relaxed) {
            if let Some(event) = &latest.event {
                self.seen.store(latest.count, Ordering::Relaxed);
                return Ok(event.clone());
            }
        }
        Err(latest.ended)
    }

    /// Blocks until a state this receiver has not seen arrives (the newest one), or the
    /// watch has stopped and its final state was received (`Err`).
    pub fn recv(&self) -> std::result::Result<ConfigEvent, RecvError> {
        let mut latest = self.shared.latest.lock();
        loop {
            match self.take(&latest) {
                Ok(event) => return Ok(event),
                Err(true) => return Err(RecvError),
                Err(false) => self.shared.changed.wait(&mut latest),
            }
        }
    }

    /// [`recv`](Self::recv), waiting at most `timeout`.
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> std::result::Result<ConfigEvent, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut latest = self.shared.latest.lock();
        loop {
            match self.take(&latest) {
                Ok(event) => return Ok(event),
                Err(true) => return Err(RecvTimeoutError::Disconnected),
                Err(false) => match deadline {
                    None => self.shared.changed.wait(&mut latest),
                    Some(at) => {
                        if self.shared.changed.wait_until(&mut latest, at).timed_out() {
                            return self.take(&latest).map_err(|ended| {
                                if ended {
                                    RecvTimeoutError::Disconnected
                                } else {
                                    RecvTimeoutError::Timeout
                                }
                            });
                        }
                    }
                },
            }
        }
    }

    /// The newest unseen state, without blocking.
    pub fn try_recv(&self) -> std::result::Result<ConfigEvent, TryRecvError> {
        self.take(&self.shared.latest.lock()).map_err(|ended| {
            if ended {
                TryRecvError::Disconnected
            } else {
                TryRecvError::Empty
            }
        })
    }
}

impl Iterator for ConfigReceiver {
    type Item = ConfigEvent;

    fn next(&mut self) -> Option<ConfigEvent> {
        self.recv().ok()
    }
}
