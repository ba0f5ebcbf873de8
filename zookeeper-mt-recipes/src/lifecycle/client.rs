//! Either client: what the long-lived recipes take (a plain handle or a managed client).

use super::*;

/// The client a long-lived recipe follows: a plain handle (one session: its loss ends
/// the recipe) or a [`ManagedZooKeeper`] (the recipe carries on in each new session).
/// Made from `&ZooKeeper`, `ZooKeeper`, `&ManagedZooKeeper`, `ManagedZooKeeper` or
/// `&Client`: every recipe constructor takes `impl Into<Client>`.
///
/// On a managed client, a call-style recipe (a lock, a queue, ...) runs each call on the
/// session current when the call starts, so a call never mixes two sessions; what a
/// call leaves held (a lock guard, a lease, a claimed work item) belongs to that session
/// and ends with it. The call after an expiry runs on the new session.
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

impl From<&Client> for Client {
    fn from(client: &Client) -> Client {
        client.clone()
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
    pub fn states(&self) -> ConnectionStates {
        match self {
            Client::Plain(zk) => connection_states(zk),
            Client::Managed(managed) => managed.states(),
        }
    }

    /// The connection states for a recipe's follower (a task on the driver): drained
    /// without waiting, or polled.
    pub(crate) fn feed(&self) -> StateFeed {
        StateFeed {
            states: self.states(),
            pending: VecDeque::new(),
            ended: false,
        }
    }
}

/// A recipe follower's view of its client's connection states: the client crate's
/// stream (fed where the C client delivers session events), read without blocking.
pub(crate) struct StateFeed {
    states: ConnectionStates,
    /// Received and not drained yet.
    pending: VecDeque<ConnectionEvent>,
    /// Nothing more will come.
    ended: bool,
}

impl StateFeed {
    /// Ready when [`drain`](Self::drain) has something to report (an event, or the end);
    /// otherwise `cx` is woken by the next one.
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while !self.ended {
            match self.states.poll_recv(cx) {
                Poll::Ready(Some(event)) => self.pending.push_back(event),
                Poll::Ready(None) => self.ended = true,
                Poll::Pending => break,
            }
        }
        if self.pending.is_empty() && !self.ended {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// Every event available now, without blocking; the flag says whether the feed
    /// has ended (nothing more will come).
    pub(crate) fn drain(&mut self) -> (Vec<ConnectionEvent>, bool) {
        use zookeeper_mt::stream::TryRecvError;
        while !self.ended {
            match self.states.try_recv() {
                Ok(event) => self.pending.push_back(event),
                Err(TryRecvError::Disconnected) => self.ended = true,
                Err(TryRecvError::Empty) => break,
            }
        }
        (self.pending.drain(..).collect(), self.ended)
    }
}
