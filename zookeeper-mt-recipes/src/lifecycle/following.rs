//! Following a client's sessions: the part every background recipe (cache, latch,
//! persistent node, value and config watch) shares, written once.
//!
//! A follower is a task on the [driver](crate::runtime::driver). It holds a
//! [`Following`]: the session it works on (handle and generation), whether requests can
//! be made now, whether the next reads must `sync` first (after a reconnection), and the
//! back-off between retries of a failed request. Its loop is:
//!
//! 1. stop if asked ([`StopSignal`]);
//! 2. apply [`changes`](Following::changes) (the common rules are applied here: a stale
//!    generation is ignored, `Lost` ends a follower of a plain handle, `NewSession`
//!    switches the handle), and react to each in the recipe's own way;
//! 3. do the recipe's work while [`due`](Following::due);
//! 4. await [`wait`](Following::wait): a stop, a state change, one of the recipe's own
//!    sources (its watches, its commands) or a deadline.

use super::*;
use crate::runtime::{timer::sleep_at, StopSignal};
use crate::support::session_error;
use crate::RetryPolicy;
use std::future::{poll_fn, Future};
use zookeeper_mt::Error;

/// A connection-state change, after the common rules were applied.
#[derive(Debug)]
pub(crate) enum Change {
    /// The first connection of the session.
    Connected,
    /// The connection is lost (or only a read-only server is reachable, `read_only`);
    /// the session may still live.
    Suspended { read_only: bool },
    /// The same session is back; watches survived. `sync_first` is set.
    Reconnected,
    /// The session is over; its ephemeral nodes and watches are gone. A follower of a
    /// plain handle ends with `end`; on a managed client `end` is `None` and a
    /// `NewSession` follows.
    Lost { end: Option<RecipeError> },
    /// A new session replaced the lost one: [`Following::zk`] is its handle now.
    NewSession,
}

/// The session a follower works on, and its retry state (see the [module docs](self)).
pub(crate) struct Following {
    pub(crate) client: Client,
    feed: StateFeed,
    /// The current session's handle.
    pub(crate) zk: ZooKeeper,
    pub(crate) generation: u64,
    /// Whether requests can be made now.
    pub(crate) connected: bool,
    /// Whether a read-only server counts as connected (readers: yes; writers: no).
    read_only_serves: bool,
    /// `sync` before the next reads (recovery reads after a reconnection).
    pub(crate) sync_first: bool,
    /// No retry before this.
    retry_at: Option<Instant>,
    /// Consecutive failed requests, for the pause before the next try.
    failures: u32,
    /// Its pauses pace the retries.
    retry: RetryPolicy,
    /// The state of the session last reported `Lost` (expired, closed, authentication
    /// failed), read when the change was applied: by the time a follower handles the
    /// change, `zk` may be the next session's handle already.
    pub(crate) lost_state: Option<SessionState>,
}

impl Following {
    /// Follows `client` (subscribed before anything is read, so no change is missed).
    /// `read_only_serves`: whether the follower only reads. `retry`'s pauses pace the
    /// retries of failed requests (the followers' default: [`RetryPolicy::FOLLOWING`]);
    /// its reconnect timeout is not used, a follower waits for a reconnection as long
    /// as it takes.
    pub(crate) fn new(client: Client, read_only_serves: bool, retry: RetryPolicy) -> Self {
        let feed = client.feed();
        let session = client.session();
        Following {
            client,
            feed,
            zk: session.zk,
            generation: session.generation,
            connected: false,
            read_only_serves,
            sync_first: false,
            retry_at: None,
            failures: 0,
            retry,
            lost_state: None,
        }
    }

    /// The changes since the last call. `Err` when the follower must end: the client
    /// was closed (after a `Lost` change, when the feed reported one).
    pub(crate) fn changes(&mut self) -> std::result::Result<Vec<Change>, RecipeError> {
        let (events, ended) = self.feed.drain();
        let mut changes = Vec::new();
        for event in events {
            if let Some(change) = self.apply(event) {
                let end = matches!(&change, Change::Lost { end: Some(_) });
                changes.push(change);
                if end {
                    return Ok(changes);
                }
            }
        }
        if ended {
            if changes.is_empty() {
                return Err(RecipeError::ZooKeeper(Error::Closed));
            }
            // Report what came first; the next call reports the end.
            changes.push(Change::Lost {
                end: Some(RecipeError::ZooKeeper(Error::Closed)),
            });
        }
        Ok(changes)
    }

    fn apply(&mut self, event: ConnectionEvent) -> Option<Change> {
        if event.generation < self.generation {
            return None; // about a session already replaced
        }
        Some(match event.state {
            ConnectionState::Connected => {
                self.connected = true;
                Change::Connected
            }
            ConnectionState::Suspended => {
                self.connected = false;
                Change::Suspended { read_only: false }
            }
            ConnectionState::ReadOnly => {
                self.connected = self.read_only_serves;
                Change::Suspended { read_only: true }
            }
            ConnectionState::Reconnected => {
                self.connected = true;
                self.sync_first = true;
                self.retry_now();
                Change::Reconnected
            }
            ConnectionState::Lost => {
                self.connected = false;
                let state = self.zk.state();
                self.lost_state = Some(state);
                let end = (!self.client.renews_sessions()).then(|| {
                    if state.is_terminal() {
                        session_error(state)
                    } else {
                        RecipeError::ZooKeeper(Error::Closed)
                    }
                });
                Change::Lost { end }
            }
            ConnectionState::NewSession => {
                let session = self.client.session();
                if session.generation <= self.generation {
                    return None;
                }
                self.zk = session.zk;
                self.generation = session.generation;
                self.connected = true;
                self.sync_first = false;
                self.retry_now();
                Change::NewSession
            }
            // A state added to the client crate later: nothing a follower acts on yet.
            _ => return None,
        })
    }

    /// Whether requests can be made now (connected, and no retry pending).
    pub(crate) fn due(&self) -> bool {
        self.connected && self.retry_at.is_none_or(|at| Instant::now() >= at)
    }

    /// After a failed request: retryable ones are tried again after a growing pause
    /// (the state feed may not show the loss yet); others mean the session is over and
    /// `Lost` is on its way.
    pub(crate) fn failed(&mut self, error: &Error) {
        if error.is_retryable() {
            self.failures = self.failures.saturating_add(1);
            self.retry_at = Some(Instant::now() + self.retry.pause(self.failures));
        } else {
            self.connected = false;
        }
    }

    /// After a request succeeded: the next failure waits the shortest pause again.
    pub(crate) fn succeeded(&mut self) {
        self.retry_at = None;
        self.failures = 0;
    }

    /// Drops a pending retry pause (fresh work after a reconnection).
    pub(crate) fn retry_now(&mut self) {
        self.retry_at = None;
        self.failures = 0;
    }

    /// Whether a retry pause is pending.
    pub(crate) fn retry_pending(&self) -> bool {
        self.retry_at.is_some()
    }

    /// When work pending now can be done: `None` while disconnected (a state change
    /// wakes the follower), else now or the end of the retry pause.
    pub(crate) fn work_deadline(&self) -> Option<Instant> {
        if !self.connected {
            return None;
        }
        Some(self.retry_at.unwrap_or_else(Instant::now))
    }

    /// Waits until there is something to handle: a stop request, a state change, one
    /// of the follower's own `sources` (ready when polled `Ready`; they register `cx`'s
    /// waker otherwise), or `deadline`.
    pub(crate) async fn wait(
        &mut self,
        stop: &StopSignal,
        deadline: Option<Instant>,
        mut sources: impl FnMut(&mut Context<'_>) -> Poll<()>,
    ) {
        if deadline.is_some_and(|at| at <= Instant::now()) {
            return;
        }
        let mut timer = std::pin::pin!(sleep_at(deadline));
        poll_fn(|cx| {
            if stop.poll_stopped(cx).is_ready()
                || self.feed.poll_ready(cx).is_ready()
                || sources(cx).is_ready()
                || timer.as_mut().poll(cx).is_ready()
            {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}
