//! The receivers of a config watch: each one its own stream holding only the newest state
//! it has not received.

use super::ConfigEvent;
use crate::events::{EventQueue, EventStream, Newest, RecvTimeoutError, Source, TryRecvError};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Instant;

type Queue = EventQueue<Newest<ConfigEvent>>;

/// The newest state and every live receiver: the follower task publishes to all.
#[derive(Default)]
pub(super) struct Hub {
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    /// The newest state (what a new receiver gets first).
    latest: Option<ConfigEvent>,
    /// The watch has stopped: no state will follow `latest`.
    ended: bool,
    next_id: u64,
    receivers: Vec<(u64, Weak<Queue>)>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Hub")
            .field("receivers", &state.receivers.len())
            .field("ended", &state.ended)
            .finish()
    }
}

impl Hub {
    /// Makes `event` the newest state, in every receiver's buffer too (replacing the
    /// state it has not received, if any). Nothing changes after the end.
    pub(super) fn publish(&self, event: ConfigEvent) {
        let mut state = self.state.lock();
        if state.ended {
            return;
        }
        for (_, receiver) in &state.receivers {
            if let Some(queue) = receiver.upgrade() {
                queue.update(|b| b.set(event.clone()));
            }
        }
        state.latest = Some(event);
    }

    /// Ends every receiver's stream (after the state it holds).
    pub(super) fn end(&self) {
        let mut state = self.state.lock();
        state.ended = true;
        for (_, receiver) in state.receivers.drain(..) {
            if let Some(queue) = receiver.upgrade() {
                queue.close();
            }
        }
    }

    pub(super) fn is_ended(&self) -> bool {
        self.state.lock().ended
    }

    /// A new receiver, holding the newest state unread.
    pub(super) fn subscribe(self: &Arc<Self>) -> EventStream<ConfigEvent> {
        EventStream::new(self.register(|state| Newest::holding(state.latest.clone())))
    }

    /// A receiver whose buffer is made by `seed` (under the lock: no state is published
    /// in between).
    fn register(
        self: &Arc<Self>,
        seed: impl FnOnce(&HubState) -> Newest<ConfigEvent>,
    ) -> Arc<Receiver> {
        let mut state = self.state.lock();
        let queue = EventQueue::new(seed(&state));
        let id = state.next_id;
        state.next_id += 1;
        if state.ended {
            queue.close();
        } else {
            state.receivers.push((id, Arc::downgrade(&queue)));
        }
        Arc::new(Receiver {
            queue,
            id,
            hub: Arc::downgrade(self),
        })
    }
}

/// One receiver's stream; dropping it unregisters it from the hub.
struct Receiver {
    queue: Arc<Queue>,
    id: u64,
    hub: Weak<Hub>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.state.lock().receivers.retain(|(id, _)| *id != self.id);
        }
    }
}

impl Source<ConfigEvent> for Receiver {
    fn try_recv(&self) -> Result<ConfigEvent, TryRecvError> {
        self.queue.try_recv()
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<ConfigEvent, RecvTimeoutError> {
        self.queue.recv_deadline(deadline)
    }

    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<ConfigEvent>> {
        self.queue.poll_recv(cx, waiter)
    }

    fn forget(&self, waiter: u64) {
        self.queue.forget(waiter);
    }

    fn wakers(&self) -> usize {
        Source::wakers(&*self.queue)
    }

    fn len(&self) -> usize {
        Source::len(&*self.queue)
    }

    fn is_ended(&self) -> bool {
        self.queue.is_ended()
    }

    /// A clone is a receiver of its own that has seen what this one has.
    fn fork(&self) -> Option<Arc<dyn Source<ConfigEvent>>> {
        let copy = || self.queue.inspect(|buffer, _| buffer.clone());
        let fork: Arc<dyn Source<ConfigEvent>> = match self.hub.upgrade() {
            Some(hub) => hub.register(|_| copy()),
            None => {
                // The watch is gone, so it has ended: a copy that has ended too.
                let queue = EventQueue::new(copy());
                queue.close();
                queue
            }
        };
        Some(fork)
    }

    /// A receiver of its own, as a clone is.
    fn subscribe(&self) -> Arc<dyn Source<ConfigEvent>> {
        self.fork().expect("a receiver always forks")
    }

    fn subscribers(&self) -> usize {
        self.hub
            .upgrade()
            .map_or(0, |hub| hub.state.lock().receivers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(version: i32) -> ConfigEvent {
        ConfigEvent::Value {
            data: vec![],
            stat: zookeeper_mt::Stat {
                version,
                ..zookeeper_mt::Stat::default()
            },
        }
    }

    fn version(event: ConfigEvent) -> i32 {
        event.stat().map_or(-1, |stat| stat.version)
    }

    #[test]
    fn each_receiver_keeps_the_newest_state_and_gets_the_final_one() {
        let hub = Arc::new(Hub::default());
        hub.publish(value(0));
        let first = hub.subscribe();
        let second = hub.subscribe();
        for v in 1..=100 {
            hub.publish(value(v));
        }
        assert_eq!(first.len(), 1, "only the newest state is kept");
        assert_eq!(first.try_recv().map(version), Ok(100));
        // A clone has seen what the original has: nothing unread.
        let clone = first.clone();
        assert_eq!(clone.try_recv(), Err(TryRecvError::Empty));
        hub.publish(value(101));
        hub.end();
        hub.publish(value(102)); // after the end: ignored
        for receiver in [&first, &second, &clone] {
            assert_eq!(receiver.try_recv().map(version), Ok(101));
            assert_eq!(receiver.try_recv(), Err(TryRecvError::Disconnected));
        }
        // A receiver made after the end gets the final state, then the end.
        let late = hub.subscribe();
        assert_eq!(late.iter().map(version).collect::<Vec<_>>(), vec![101]);
    }

    #[test]
    fn dropping_a_receiver_unregisters_it() {
        let hub = Arc::new(Hub::default());
        let kept = hub.subscribe();
        let clones: Vec<_> = (0..10).map(|_| kept.clone()).collect();
        assert_eq!(hub.state.lock().receivers.len(), 11);
        drop(clones);
        assert_eq!(hub.state.lock().receivers.len(), 1);
        // A subscriber is a receiver of its own too.
        let subscriber = kept.subscribe();
        assert_eq!(kept.subscribers(), 2);
        drop(subscriber);
        assert_eq!(kept.subscribers(), 1);
        hub.publish(value(1));
        assert_eq!(kept.try_recv().map(version), Ok(1));
    }
}
