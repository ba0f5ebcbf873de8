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

    /// A stream of the client's connection states ([`connection_states`] of a plain
    /// handle, [`ManagedZooKeeper::states`]).
    pub fn states(&self) -> Result<EventStream<ConnectionEvent>> {
        match self {
            Client::Plain(zk) => connection_states(zk),
            Client::Managed(managed) => Ok(managed.states()),
        }
    }

    /// The connection states for a recipe's follower (a task on the driver): drained
    /// without waiting, or polled.
    pub(crate) fn feed(&self) -> StateFeed {
        let source = match self {
            Client::Plain(zk) => {
                let events = zk.session_events();
                let mut translator = Translator::default();
                let first = translator.initial(zk.state());
                let mut pending = VecDeque::new();
                pending.push_back(ConnectionEvent {
                    state: first,
                    generation: 1,
                });
                let ended = first == ConnectionState::Lost;
                return StateFeed {
                    source: Source::Plain { events, translator },
                    pending,
                    ended,
                };
            }
            Client::Managed(managed) => Source::Managed(managed.states()),
        };
        StateFeed {
            source,
            pending: VecDeque::new(),
            ended: false,
        }
    }
}

/// Where a [`StateFeed`] reads from.
enum Source {
    Plain {
        events: zookeeper::SessionEvents,
        translator: Translator,
    },
    Managed(EventStream<ConnectionEvent>),
}

/// A recipe follower's view of its client's connection states.
pub(crate) struct StateFeed {
    source: Source,
    /// Received and not drained yet.
    pending: VecDeque<ConnectionEvent>,
    /// Nothing more will come.
    ended: bool,
}

impl StateFeed {
    /// Moves what has arrived into `pending`; `cx` (if any) is woken by the next arrival.
    fn receive(&mut self, cx: Option<&mut Context<'_>>) {
        let StateFeed {
            source,
            pending,
            ended,
        } = self;
        match source {
            Source::Plain { events, translator } => {
                let mut noop = Context::from_waker(crate::runtime::noop_waker());
                let cx = cx.unwrap_or(&mut noop);
                while !*ended {
                    let state = match events.poll_recv(cx) {
                        Poll::Ready(Some(event)) if event.event_type == EventType::Session => {
                            event.state
                        }
                        Poll::Ready(Some(_)) => continue,
                        Poll::Ready(None) => SessionState::Closed,
                        Poll::Pending => break,
                    };
                    if let Some(state) = translator.on_session(state) {
                        pending.push_back(ConnectionEvent {
                            state,
                            generation: 1,
                        });
                    }
                    if translator.last() == Some(ConnectionState::Lost) {
                        *ended = true;
                    }
                }
            }
            Source::Managed(states) => {
                let mut noop = Context::from_waker(crate::runtime::noop_waker());
                let cx = cx.unwrap_or(&mut noop);
                while !*ended {
                    match states.poll_recv(cx) {
                        Poll::Ready(Some(event)) => pending.push_back(event),
                        Poll::Ready(None) => *ended = true,
                        Poll::Pending => break,
                    }
                }
            }
        }
    }

    /// Ready when [`drain`](Self::drain) has something to report (an event, or the end).
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.receive(Some(cx));
        if self.pending.is_empty() && !self.ended {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// Every event available now, without blocking; the flag says whether the feed
    /// has ended (nothing more will come).
    pub(crate) fn drain(&mut self) -> (Vec<ConnectionEvent>, bool) {
        self.receive(None);
        (self.pending.drain(..).collect(), self.ended)
    }
}
