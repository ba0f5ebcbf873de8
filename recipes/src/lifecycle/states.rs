//! Connection states from session events, and the bounded stream of them.

use super::*;
use crate::runtime::StopSignal;

// ---------------------------------------------------------------------------------------
// Translating session events.
// ---------------------------------------------------------------------------------------

/// Turns C session states into connection states, dropping repeats.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Translator {
    pub(super) last: Option<ConnectionState>,
}

impl Translator {
    /// A translator whose last reported state is `last`.
    pub(crate) fn after(last: ConnectionState) -> Translator {
        Translator { last: Some(last) }
    }

    /// The first event: the state at subscription.
    pub(crate) fn initial(&mut self, state: SessionState) -> ConnectionState {
        let first = match state {
            SessionState::Connected => ConnectionState::Connected,
            SessionState::ConnectedReadOnly => ConnectionState::ReadOnly,
            state if state.is_terminal() => ConnectionState::Lost,
            _ => ConnectionState::Suspended,
        };
        self.last = Some(first);
        first
    }

    /// The state a session event moves to, unless it repeats the last one.
    pub(crate) fn on_session(&mut self, state: SessionState) -> Option<ConnectionState> {
        use ConnectionState::*;
        if self.last == Some(Lost) {
            return None;
        }
        let next = match state {
            SessionState::Connected => match self.last {
                None => Connected,
                Some(Suspended) | Some(ReadOnly) => Reconnected,
                Some(_) => return None,
            },
            SessionState::ConnectedReadOnly => match self.last {
                Some(ReadOnly) => return None,
                _ => ReadOnly,
            },
            state if state.is_terminal() => Lost,
            SessionState::Connecting | SessionState::Associating | SessionState::NotConnected => {
                match self.last {
                    Some(Suspended) => return None,
                    _ => Suspended,
                }
            }
            _ => return None,
        };
        self.last = Some(next);
        Some(next)
    }

    /// The last state reported.
    pub(crate) fn last(&self) -> Option<ConnectionState> {
        self.last
    }
}

// ---------------------------------------------------------------------------------------
// The stream.
// ---------------------------------------------------------------------------------------

/// Most events a connection-state stream keeps for a reader that does not read.
pub(super) const STATE_CAPACITY: usize = 64;

/// Queued connection events, bounded: see [`connection_states`].
#[derive(Debug, Default)]
pub(crate) struct StateBuffer {
    pub(super) queue: VecDeque<ConnectionEvent>,
}

impl StateBuffer {
    pub(crate) fn push(&mut self, event: ConnectionEvent) {
        if self.queue.len() >= STATE_CAPACITY {
            self.make_room();
        }
        self.queue.push_back(event);
    }

    /// Drops the oldest `Suspended`/`Reconnected` pair of one session (a blip the reader
    /// no longer needs to hear about: later events tell the current state), else the
    /// oldest event that is neither `Lost` nor `NewSession`.
    pub(super) fn make_room(&mut self) {
        use ConnectionState::*;
        let pair = (1..self.queue.len()).find(|&i| {
            let (a, b) = (self.queue[i - 1], self.queue[i]);
            a.state == Suspended && b.state == Reconnected && a.generation == b.generation
        });
        if let Some(i) = pair {
            self.queue.drain(i - 1..=i);
            return;
        }
        let droppable = self
            .queue
            .iter()
            .position(|e| !matches!(e.state, Lost | NewSession))
            .unwrap_or(0);
        self.queue.remove(droppable);
    }
}

impl Buffer for StateBuffer {
    type Item = ConnectionEvent;

    fn pop(&mut self) -> Option<ConnectionEvent> {
        self.queue.pop_front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// The connection states of a plain handle, from now on (generation 1), as an
/// [`EventStream`] (see the [module docs](super) and the
/// [stream contract](crate::events#the-stream-contract)). A task on the recipes' driver
/// forwards the handle's session events while the stream (or a clone of it) lives.
///
/// Bounded: at most 64 events are kept for a reader that does not read; beyond that, the
/// oldest `Suspended`/`Reconnected` pair is dropped (`Lost` and `NewSession` are kept),
/// so the last event always tells the current state. The stream ends after `Lost`
/// (expiry, authentication failure, or close). It does not keep its session open.
pub fn connection_states(zk: &ZooKeeper) -> Result<EventStream<ConnectionEvent>> {
    let queue = EventQueue::new(StateBuffer::default());
    let events = zk.session_events();
    let mut translator = Translator::default();
    let first = translator.initial(zk.state());
    queue.update(|b| {
        b.push(ConnectionEvent {
            state: first,
            generation: 1,
        })
    });
    if first == ConnectionState::Lost {
        queue.close();
        return Ok(EventStream::new(queue));
    }
    let (feed, ends) = (Arc::clone(&queue), Arc::clone(&queue));
    let pump = crate::runtime::spawn(
        "connection states",
        move |stop| pump(events, translator, feed, stop),
        move || ends.close(),
    )
    .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
    // Dropping the last clone of the stream drops the task, which stops it.
    Ok(EventStream::new(queue).keeping(pump))
}

/// Forwards session events as connection states until `Lost` or a stop request.
async fn pump(
    mut events: zookeeper::SessionEvents,
    mut translator: Translator,
    queue: Arc<EventQueue<StateBuffer>>,
    stop: StopSignal,
) {
    loop {
        let event = std::future::poll_fn(|cx| {
            if stop.poll_stopped(cx).is_ready() {
                return Poll::Ready(None);
            }
            events.poll_recv(cx).map(Some)
        })
        .await;
        let state = match event {
            None => break, // stop requested
            Some(Some(event)) if event.event_type == EventType::Session => {
                translator.on_session(event.state)
            }
            Some(Some(_)) => None,
            // The handle closed.
            Some(None) => translator.on_session(SessionState::Closed),
        };
        if let Some(state) = state {
            queue.update(|b| {
                b.push(ConnectionEvent {
                    state,
                    generation: 1,
                })
            });
        }
        if translator.last() == Some(ConnectionState::Lost) {
            break;
        }
    }
    queue.close();
}
