//! Either client: what the long-lived recipes take (a plain handle or a managed client).

use super::*;

// ---------------------------------------------------------------------------------------
// Either client.
// ---------------------------------------------------------------------------------------

/// The client a long-lived recipe follows: a plain handle (one session: its loss ends
/// the recipe) or a [`ManagedZooKeeper`] (the recipe carries on in each new session).
/// Made from `&ZooKeeper`, `ZooKeeper`, `&ManagedZooKeeper` or `ManagedZooKeeper`.
///
/// A recipe holds a clone, so the session (or managed client) stays open while the
/// recipe runs, even if the application dropped its own handle.
#[derive(Debug, Clone)]
pub enum Client {
    /// One session.
    Plain(ZooKeeper),
    /// New sessions after expiry.
    Managed(ManagedZooKeeper),
}

impl From<ZooKeeper> for Client {
    fn from(zk: ZooKeeper) -> Client {
        Client::Plain(zk)
    }
}

impl From<&ZooKeeper> for Client {
    fn from(zk: &ZooKeeper) -> Client {
        Client::Plain(zk.clone())
    }
}

impl From<ManagedZooKeeper> for Client {
    fn from(managed: ManagedZooKeeper) -> Client {
        Client::Managed(managed)
    }
}

impl From<&ManagedZooKeeper> for Client {
    fn from(managed: &ManagedZooKeeper) -> Client {
        Client::Managed(managed.clone())
    }
}

impl Client {
    /// The current session (generation 1 for a plain handle).
    pub fn session(&self) -> ManagedSession {
        match self {
            Client::Plain(zk) => ManagedSession {
                generation: 1,
                zk: zk.clone(),
            },
            Client::Managed(managed) => managed.session(),
        }
    }

    /// Whether a new session follows the loss of one.
    pub fn renews_sessions(&self) -> bool {
        matches!(self, Client::Managed(_))
    }

    /// A stream of the client's connection states.
    pub fn states(&self) -> Result<ConnectionStates> {
        match self {
            Client::Plain(zk) => ConnectionStates::new(zk),
            Client::Managed(managed) => Ok(managed.states()),
        }
    }

    /// The connection states for a recipe thread that waits in a `Select` (no extra
    /// thread for a plain handle).
    pub(crate) fn feed(&self) -> StateFeed {
        match self {
            Client::Plain(zk) => {
                let events = zk.session_events().into_receiver();
                let mut translator = Translator::default();
                let first = translator.initial(zk.state());
                StateFeed::Plain {
                    events,
                    translator,
                    first: Some(first),
                    ended: false,
                }
            }
            Client::Managed(managed) => StateFeed::Managed(managed.states()),
        }
    }
}

/// A recipe thread's view of its client's connection states.
pub(crate) enum StateFeed {
    Plain {
        events: Receiver<WatchedEvent>,
        translator: Translator,
        first: Option<ConnectionState>,
        ended: bool,
    },
    Managed(ConnectionStates),
}

impl StateFeed {
    /// Adds what to wait on to `select`.
    pub(crate) fn add_to<'a>(&'a self, select: &mut Select<'a>) -> usize {
        match self {
            StateFeed::Plain { events, .. } => select.recv(events),
            StateFeed::Managed(states) => select.recv(states.doorbell()),
        }
    }

    /// Every event available now, without blocking; the flag says whether the feed
    /// has ended (nothing more will come).
    pub(crate) fn drain(&mut self) -> (Vec<ConnectionEvent>, bool) {
        let mut out = Vec::new();
        match self {
            StateFeed::Plain {
                events,
                translator,
                first,
                ended,
            } => {
                if let Some(state) = first.take() {
                    out.push(ConnectionEvent {
                        state,
                        generation: 1,
                    });
                }
                while !*ended {
                    let state = match events.try_recv() {
                        Ok(event) if event.event_type == EventType::Session => event.state,
                        Ok(_) => continue,
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => SessionState::Closed,
                    };
                    if let Some(state) = translator.on_session(state) {
                        out.push(ConnectionEvent {
                            state,
                            generation: 1,
                        });
                    }
                    if translator.last() == Some(ConnectionState::Lost) {
                        *ended = true;
                    }
                }
                (out, *ended)
            }
            StateFeed::Managed(states) => {
                while states.doorbell().try_recv().is_ok() {}
                loop {
                    match states.try_recv() {
                        Ok(event) => out.push(event),
                        Err(TryRecvError::Empty) => return (out, false),
                        Err(TryRecvError::Disconnected) => return (out, true),
                    }
                }
            }
        }
    }
}
