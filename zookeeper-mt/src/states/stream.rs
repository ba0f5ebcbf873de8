//! The stream of a plain handle's (or a managed client's) connection states.

use super::*;

/// A plain handle's stream: generation 1, ends after `Lost`.
struct PlainTarget {
    queue: Weak<StateQueue>,
}

impl Target for PlainTarget {
    fn report(&self, state: ConnectionState, _raw: SessionState, after: &mut After) -> bool {
        let Some(queue) = self.queue.upgrade() else {
            return false;
        };
        queue.push(
            ConnectionEvent {
                state,
                generation: 1,
            },
            after,
        );
        if state == ConnectionState::Lost {
            queue.end(after);
        }
        true
    }
}

/// The connection states of a plain handle, from now on (generation 1; see
/// [`ConnectionState`]). No thread or task: the events are translated where the C
/// client delivers them. The stream does not keep its session open.
///
/// Bounded as every [`ConnectionStates`]; it ends after `Lost` (expiry, authentication
/// failure, or close).
///
/// ```no_run
/// use zookeeper_mt::{connection_states, ConnectionState, ZooKeeper};
/// # fn main() -> zookeeper_mt::Result<()> {
/// let zk = ZooKeeper::connect("127.0.0.1:2181", std::time::Duration::from_secs(10))?;
/// for event in connection_states(&zk) {
///     if event.state == ConnectionState::Suspended {
///         println!("connection lost; what this session holds may be gone");
///     }
/// }
/// // The session is over (the stream ended after `Lost`).
/// # Ok(())
/// # }
/// ```
pub fn connection_states(zk: &ZooKeeper) -> ConnectionStates {
    let queue = StateQueue::new();
    let target = PlainTarget {
        queue: Arc::downgrade(&queue),
    };
    let follower = Follower::start(zk, Translator::default(), target);
    ConnectionStates {
        reader: Arc::new(Reader {
            queue,
            follower: Some(follower),
            origin: None,
        }),
        waiter: waiter_id(),
    }
}

/// Detaches a plain stream's follower once the last clone of the stream, and of its
/// subscribers, is gone.
struct Reader {
    queue: Arc<StateQueue>,
    follower: Option<Arc<Follower<PlainTarget>>>,
    /// A subscriber's: the reader of the queue that feeds it (kept alive, and so its
    /// follower, as long as the subscriber lives).
    origin: Option<Arc<Reader>>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(follower) = &self.follower {
            follower.detach();
        }
    }
}

/// A stream of [`ConnectionEvent`]s ([`connection_states`],
/// [`ManagedZooKeeper::states`](crate::ManagedZooKeeper::states)): received blocking
/// ([`recv`](Self::recv), [`recv_timeout`](Self::recv_timeout), [`iter`](Self::iter), a
/// `for` loop), without waiting ([`try_recv`](Self::try_recv)), or asynchronously on any
/// executor ([`next`](Self::next), [`futures_core::Stream`]). The errors are
/// [`crate::stream`]'s.
///
/// - **Bounded**: at most 64 events are kept for a reader that does not read; beyond
///   that, the oldest `Suspended`/`Reconnected` pair is dropped (`Lost` and `NewSession`
///   are kept), so the last event always tells the current state.
/// - **The end comes last**: when the stream ends (after `Lost` on a plain handle, at
///   close on a managed client) every queued event is still received, then the end:
///   `recv` fails with `RecvError`, `recv_timeout` and `try_recv` with `Disconnected`,
///   `next().await` and the `Stream` yield `None`, the iterator stops.
/// - **Clones share the work**: a clone reads the same queue, so each event goes to one
///   of the readers (for threads that split the handling).
/// - **Subscribers see everything**: [`subscribe`](Self::subscribe) makes a second,
///   independent reader that gets every event this one has not received yet and every
///   later one, in its own queue bounded alike; dropping it (and its clones)
///   unsubscribes.
/// - **Wakers**: polled as a `Stream` (or with [`poll_recv`](Self::poll_recv)), a stream
///   value keeps one waker, the last given; each [`next`](Self::next) future keeps its
///   own until it completes or is dropped. Nothing a dropped reader gave stays.
/// - **On the C completion thread** (a waker running its task inline), which delivers
///   the events, `recv` and `recv_timeout` do not wait: with nothing queued they fail
///   at once (`RecvError`, `Timeout`).
pub struct ConnectionStates {
    reader: Arc<Reader>,
    /// This value's place among the queue's wakers (polls of the stream itself).
    waiter: u64,
}

impl Clone for ConnectionStates {
    /// A reader of the same queue, with its own place among the wakers: each event goes
    /// to one of the clones (see [`subscribe`](ConnectionStates::subscribe) for a reader
    /// that sees every event).
    fn clone(&self) -> ConnectionStates {
        ConnectionStates {
            reader: Arc::clone(&self.reader),
            waiter: waiter_id(),
        }
    }
}

impl Drop for ConnectionStates {
    fn drop(&mut self) {
        self.queue().forget(self.waiter);
    }
}

impl ConnectionStates {
    /// A reader of `queue`, fed by someone else (a managed client).
    pub(crate) fn reading(queue: Arc<StateQueue>) -> ConnectionStates {
        ConnectionStates {
            reader: Arc::new(Reader {
                queue,
                follower: None,
                origin: None,
            }),
            waiter: waiter_id(),
        }
    }

    fn queue(&self) -> &StateQueue {
        &self.reader.queue
    }

    /// Blocks until the next event; `Err` once the stream has ended and every event was
    /// received.
    pub fn recv(&self) -> Result<ConnectionEvent, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Blocks until the next event, the end (`Disconnected`) or until `timeout` passes
    /// (`Timeout`); [`Timeout::Never`](crate::Timeout::Never) waits without a deadline (a
    /// `Duration` converts).
    pub fn recv_timeout(
        &self,
        timeout: impl Into<crate::Timeout>,
    ) -> Result<ConnectionEvent, RecvTimeoutError> {
        self.recv_until(timeout.into().deadline().instant())
    }

    /// A second, independent reader of this stream: it receives every event this stream
    /// value has not received yet (what is queued for it now: the two start level, so
    /// nothing falls between "queued before" and "pushed after"), then every later event,
    /// in its own queue bounded as this one (64 events). Unlike a [`clone`](Clone), which
    /// shares this queue (each event goes to one of the two), both see every event.
    /// Dropping the subscriber (and its clones) unsubscribes; a subscriber keeps the
    /// stream fed (a plain handle's follower stays while any reader lives).
    pub fn subscribe(&self) -> ConnectionStates {
        let origin = self
            .reader
            .origin
            .clone()
            .unwrap_or_else(|| Arc::clone(&self.reader));
        ConnectionStates {
            reader: Arc::new(Reader {
                queue: self.queue().subscribe(),
                follower: None,
                origin: Some(origin),
            }),
            waiter: waiter_id(),
        }
    }

    /// Subscribers the stream's producer feeds now, besides the stream it made.
    // For tests: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn subscribers(&self) -> usize {
        self.queue().subscribers()
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<ConnectionEvent, RecvTimeoutError> {
        if crate::no_wait::here() {
            // The thread that would deliver the next event: never wait for it here.
            return self.try_recv().map_err(|error| match error {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            });
        }
        self.queue().recv_deadline(deadline)
    }

    /// The next event if one is queued: `Empty` if none is yet, `Disconnected` once the
    /// stream has ended and every event was received.
    pub fn try_recv(&self) -> Result<ConnectionEvent, TryRecvError> {
        self.queue().try_recv()
    }

    /// The next event as a future: `None` once the stream has ended and every event was
    /// received. It works on any executor; dropping it before it completes loses nothing.
    pub fn next(&self) -> NextConnectionEvent<'_> {
        NextConnectionEvent {
            states: self,
            waiter: waiter_id(),
        }
    }

    /// Polls for the next event (what the `Stream` does), for hand-written futures that
    /// wait on several sources: `Pending` registers `cx`'s waker as this stream value's
    /// one waker (the last one given is woken).
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.queue().poll_recv(cx, self.waiter)
    }

    /// Wakers the stream's queue keeps for waiting readers now.
    // For tests: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakers(&self) -> usize {
        self.queue().wakers()
    }

    /// A blocking iterator over the events; it ends with the stream.
    pub fn iter(&self) -> ConnectionStatesIter<'_> {
        ConnectionStatesIter { states: self }
    }

    /// Events queued and not yet received (at most 64).
    pub fn len(&self) -> usize {
        self.queue().len()
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the stream has ended (events may still be queued).
    pub fn is_ended(&self) -> bool {
        self.queue().is_ended()
    }
}

impl std::fmt::Debug for ConnectionStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionStates")
            .field("queued", &self.len())
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl Stream for ConnectionStates {
    type Item = ConnectionEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.poll_recv(cx)
    }
}

impl FusedStream for ConnectionStates {
    fn is_terminated(&self) -> bool {
        self.is_ended() && self.is_empty()
    }
}

/// A shared reference is a stream too.
impl Stream for &ConnectionStates {
    type Item = ConnectionEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.poll_recv(cx)
    }
}

impl FusedStream for &ConnectionStates {
    fn is_terminated(&self) -> bool {
        self.is_ended() && self.is_empty()
    }
}

/// The future of [`ConnectionStates::next`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct NextConnectionEvent<'a> {
    states: &'a ConnectionStates,
    /// This future's place among the queue's wakers: dropped with it.
    waiter: u64,
}

impl Future for NextConnectionEvent<'_> {
    type Output = Option<ConnectionEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ConnectionEvent>> {
        self.states.queue().poll_recv(cx, self.waiter)
    }
}

impl Drop for NextConnectionEvent<'_> {
    fn drop(&mut self) {
        self.states.queue().forget(self.waiter);
    }
}

/// A blocking iterator over a stream's events ([`ConnectionStates::iter`]).
#[derive(Debug)]
pub struct ConnectionStatesIter<'a> {
    states: &'a ConnectionStates,
}

impl Iterator for ConnectionStatesIter<'_> {
    type Item = ConnectionEvent;

    fn next(&mut self) -> Option<ConnectionEvent> {
        self.states.recv().ok()
    }
}

impl<'a> IntoIterator for &'a ConnectionStates {
    type Item = ConnectionEvent;
    type IntoIter = ConnectionStatesIter<'a>;

    fn into_iter(self) -> ConnectionStatesIter<'a> {
        self.iter()
    }
}

/// A blocking iterator that owns its stream (`for event in states`).
#[derive(Debug)]
pub struct ConnectionStatesIntoIter {
    states: ConnectionStates,
}

impl Iterator for ConnectionStatesIntoIter {
    type Item = ConnectionEvent;

    fn next(&mut self) -> Option<ConnectionEvent> {
        self.states.recv().ok()
    }
}

impl IntoIterator for ConnectionStates {
    type Item = ConnectionEvent;
    type IntoIter = ConnectionStatesIntoIter;

    fn into_iter(self) -> ConnectionStatesIntoIter {
        ConnectionStatesIntoIter { states: self }
    }
}
