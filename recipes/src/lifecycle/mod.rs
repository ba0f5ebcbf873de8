//! Session lifecycle: connection states in Apache Curator's vocabulary, and an opt-in
//! client that starts a new session after the old one expired.
//!
//! # Connection states
//! [`connection_states`] turns a handle's session events
//! ([`ZooKeeper::session_events`]) into an [`EventStream`] of the states Curator's
//! `ConnectionStateListener` reports (see the
//! [stream contract](crate::events#the-stream-contract)):
//!
//! | state | meaning | what a recipe does |
//! |---|---|---|
//! | [`Connected`](ConnectionState::Connected) | first event: the session is connected | start |
//! | [`Suspended`](ConnectionState::Suspended) | the connection is lost; the session may still live | stop trusting what it holds (a lock may be gone), wait |
//! | [`Reconnected`](ConnectionState::Reconnected) | the *same* session is back: ephemeral nodes and watches survived | re-read what may have changed |
//! | [`ReadOnly`](ConnectionState::ReadOnly) | connected to a read-only server (only with `read_only(true)`) | reads only |
//! | [`Lost`](ConnectionState::Lost) | the session is over (expired, authentication failed, or closed): it never comes back | anything held on it is gone |
//! | [`NewSession`](ConnectionState::NewSession) | ([`ManagedZooKeeper`] only) a new session replaced the lost one | re-create state; never resume guards |
//!
//! The first event reports the state at subscription (`Connected`, or `Suspended`,
//! `ReadOnly`, `Lost` if the handle is in that state then). Repeats are not reported
//! (two connection losses in a row are one `Suspended`). On a plain handle the stream
//! ends after `Lost`; on a managed client it goes on with `NewSession`.
//!
//! Every event carries the session's *generation*: 1 for the first session, one more
//! for each new session of a [`ManagedZooKeeper`] (always 1 on a plain handle).
//!
//! Not guaranteed: a reader more than 64 events behind loses the oldest
//! `Suspended`/`Reconnected` pairs (see [`connection_states`]). `Lost` means the server
//! said so (or the handle closed): while the client cannot reach any server it cannot
//! know that the session expired, so it stays `Suspended` (Curator can simulate the loss
//! after a session timeout of silence; this does not). Treat `Suspended` as "may be
//! lost" for anything exclusive.
//!
//! # A client that survives expiry
//! A [`ManagedZooKeeper`] holds one session at a time. When the server expires it (or
//! authentication fails), it reports `Lost`, connects again with the same connect string
//! and options (or the connector function it was given, which can also add credentials),
//! and reports `NewSession` with the next generation. [`current`](ManagedZooKeeper::current)
//! always returns the handle of the moment.
//!
//! The contract for recipes built on it:
//! - **Long-lived state** (caches, group membership, persistent ephemeral nodes) may
//!   recover by itself on `NewSession`: re-read, re-create, re-register. The caches of
//!   [`crate::cache`] do.
//! - **Guards** (locks, leases, leadership) are tied to the session, and so to the
//!   generation, they were taken on. A guard must remember its generation and report
//!   itself lost once [`ManagedZooKeeper::generation`] differs (or `Lost` was seen); it
//!   must never re-acquire silently on the new session: another process may have held
//!   the lock in between. Re-acquiring is the application's decision.
//!
//! ```no_run
//! use zookeeper_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};
//! use std::time::Duration;
//!
//! let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let states = client.states();
//! let taken_on = client.generation();
//! for event in states.iter() {
//!     match event.state {
//!         ConnectionState::Suspended => println!("connection lost, waiting"),
//!         ConnectionState::Lost => println!("session {} is over", event.generation),
//!         ConnectionState::NewSession => {
//!             assert_ne!(event.generation, taken_on); // guards of `taken_on` are gone
//!             println!("new session {}", client.current().client_id()?.session_id);
//!         }
//!         _ => {}
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
pub(crate) mod following;
mod managed;
mod states;

pub use client::*;
pub use managed::*;
pub use states::*;

use crate::error::LossReason;
use crate::events::{Buffer, EventQueue, EventStream};
use crate::{RecipeError, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use zookeeper::{EventType, SessionState, Timeout, ZooKeeper};

/// A connection state, as Apache Curator names them (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionState {
    /// The session is connected (the first event of a stream).
    Connected,
    /// The connection is lost; the session may still be alive on the servers.
    Suspended,
    /// The same session is connected again after `Suspended` or `ReadOnly`.
    Reconnected,
    /// Connected to a read-only server: reads work, writes fail.
    ReadOnly,
    /// The session is over for good: expired, authentication failed, or closed.
    Lost,
    /// A [`ManagedZooKeeper`] established a new session after `Lost`; the event's
    /// generation is the new one.
    NewSession,
}

impl ConnectionState {
    /// Whether requests can be served in this state (`ReadOnly`: reads only).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            ConnectionState::Connected
                | ConnectionState::Reconnected
                | ConnectionState::ReadOnly
                | ConnectionState::NewSession
        )
    }
}

/// One connection-state change of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionEvent {
    /// The new state.
    pub state: ConnectionState,
    /// The generation of the session it concerns (1 for the first; see the
    /// [module docs](self)).
    pub generation: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_follows_curator() {
        use ConnectionState::*;
        let mut t = Translator::default();
        assert_eq!(t.initial(SessionState::Connected), Connected);
        assert_eq!(t.on_session(SessionState::Connected), None);
        assert_eq!(t.on_session(SessionState::Connecting), Some(Suspended));
        assert_eq!(t.on_session(SessionState::Connecting), None);
        assert_eq!(t.on_session(SessionState::Connected), Some(Reconnected));
        assert_eq!(
            t.on_session(SessionState::ConnectedReadOnly),
            Some(ReadOnly)
        );
        assert_eq!(t.on_session(SessionState::Connected), Some(Reconnected));
        assert_eq!(t.on_session(SessionState::Expired), Some(Lost));
        assert_eq!(t.on_session(SessionState::Connected), None);
        assert_eq!(t.on_session(SessionState::Closed), None);

        let mut fresh = Translator::after(NewSession);
        assert_eq!(fresh.on_session(SessionState::Connected), None);
        assert_eq!(fresh.on_session(SessionState::Connecting), Some(Suspended));
        assert_eq!(fresh.on_session(SessionState::AuthFailed), Some(Lost));

        let mut late = Translator::default();
        assert_eq!(late.initial(SessionState::Connecting), Suspended);
        assert_eq!(late.initial(SessionState::Expired), Lost);
    }

    #[test]
    fn state_buffer_is_bounded_and_keeps_losses() {
        use ConnectionState::*;
        let mut buffer = StateBuffer::default();
        let at = |state, generation| ConnectionEvent { state, generation };
        buffer.push(at(Connected, 1));
        buffer.push(at(Lost, 1));
        buffer.push(at(NewSession, 2));
        for _ in 0..1000 {
            buffer.push(at(Suspended, 2));
            buffer.push(at(Reconnected, 2));
        }
        buffer.push(at(Suspended, 2));
        assert!(buffer.len() <= STATE_CAPACITY);
        let all: Vec<_> = std::iter::from_fn(|| buffer.pop()).collect();
        assert!(all.contains(&at(Lost, 1)));
        assert!(all.contains(&at(NewSession, 2)));
        assert_eq!(all.last(), Some(&at(Suspended, 2)));
    }
}
