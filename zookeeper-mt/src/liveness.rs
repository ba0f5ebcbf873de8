//! What the binding knows of the server's session clock.
//!
//! A server expires a session no earlier than a session timeout after it last heard
//! from the client (its session tracker rounds the expiry *up* to a tick). Every request
//! the server answered was received after it was submitted here, so the submit instant
//! of the latest answered request is a lower bound of "the server last heard from us",
//! and that instant plus the session timeout is a lower bound of the earliest expiry.
//! The C client's read timeout cannot give that bound: it runs from the last *receipt*
//! (a watch notification counts), while the server's clock runs from the last *send*,
//! and the C client's own pings are invisible here.
//!
//! Cost: one `Instant::now()` per submit, one atomic max per server reply.

use crate::client::ZooKeeper;
use crate::in_flight::InFlight;
use crate::session::Session;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use zookeeper_mt_sys as sys;

/// The process's time origin: instants are kept as nanoseconds after it.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Per handle: the latest submit instant of a request the server answered.
#[derive(Default)]
pub(crate) struct Liveness {
    /// Nanoseconds after [`origin`] plus one; 0: nothing answered yet.
    confirmed: AtomicU64,
}

impl Liveness {
    /// Records that the server answered a request submitted at `sent` with `rc`.
    pub(crate) fn heard(&self, sent: Instant, rc: i32) {
        if !answered_by_server(rc) {
            return;
        }
        let nanos = sent.saturating_duration_since(origin()).as_nanos();
        let stamp = u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1;
        self.confirmed.fetch_max(stamp, Ordering::AcqRel);
    }

    pub(crate) fn confirmed(&self) -> Option<Instant> {
        match self.confirmed.load(Ordering::Acquire) {
            0 => None,
            stamp => Some(origin() + Duration::from_nanos(stamp - 1)),
        }
    }
}

/// Whether `rc` can only have come in a server's reply. The C client makes up
/// connection loss, timeouts, closing and expiry codes locally (failing requests in
/// flight), so only success and the server's own verdicts on a request count.
fn answered_by_server(rc: i32) -> bool {
    matches!(
        rc,
        sys::ZOK
            | sys::ZNONODE
            | sys::ZNOAUTH
            | sys::ZBADVERSION
            | sys::ZNOCHILDRENFOREPHEMERALS
            | sys::ZNODEEXISTS
            | sys::ZNOTEMPTY
            | sys::ZINVALIDACL
    )
}

/// The instant a request is stamped with (before it is handed to C, so no later than
/// its send).
pub(crate) fn stamp() -> Instant {
    let now = Instant::now();
    let _ = origin(); // set before any stamp, so no stamp precedes it
    now
}

impl ZooKeeper {
    /// The submit instant of the latest request the server answered (a success or a
    /// server verdict such as `NoNode`; not a connection loss the client made up), or
    /// `None` if none was answered yet.
    ///
    /// The server cannot expire the session before this instant plus the session
    /// timeout: it received that request after it was submitted, and counts the session
    /// timeout from the last request it received. The C client's own pings are not seen
    /// here, so the bound is fresh only while requests are answered; send a cheap read
    /// (e.g. `exists("/")`) to refresh it.
    pub fn confirmed_alive_since(&self) -> Option<Instant> {
        self.liveness().confirmed()
    }

    /// [`confirmed_alive_since`](Self::confirmed_alive_since) plus the negotiated
    /// session timeout: no server can have expired the session before this instant
    /// (up to the rate difference of the two clocks). `None` before any answered request
    /// or on a closed handle.
    pub fn earliest_expiry(&self) -> Option<Instant> {
        let since = self.confirmed_alive_since()?;
        Some(since + self.session_timeout().ok()?)
    }

    /// A view of [`earliest_expiry`](Self::earliest_expiry) that does not keep the
    /// handle open: safe to hold and read from any thread, even one where dropping the
    /// last handle clone would block.
    pub fn session_clock(&self) -> SessionClock {
        let (in_flight, session) = self.clock_parts();
        SessionClock { in_flight, session }
    }

    /// A number unique to this handle in the process (shared by its clones).
    #[doc(hidden)]
    pub fn handle_key(&self) -> u64 {
        self.client_key()
    }
}

/// What a handle knows of its server's session clock (see
/// [`ZooKeeper::session_clock`]). `Clone`, `Send`, `Sync`; reading it costs two atomic
/// loads and never blocks.
#[derive(Clone)]
pub struct SessionClock {
    in_flight: Arc<InFlight>,
    session: Arc<Session>,
}

impl std::fmt::Debug for SessionClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionClock")
            .field("confirmed_alive_since", &self.confirmed_alive_since())
            .finish()
    }
}

impl SessionClock {
    /// As [`ZooKeeper::confirmed_alive_since`].
    pub fn confirmed_alive_since(&self) -> Option<Instant> {
        self.in_flight.liveness.confirmed()
    }

    /// The negotiated session timeout, once known.
    pub fn session_timeout(&self) -> Option<Duration> {
        self.session.recv_timeout()
    }

    /// As [`ZooKeeper::earliest_expiry`].
    pub fn earliest_expiry(&self) -> Option<Instant> {
        Some(self.confirmed_alive_since()? + self.session_timeout()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_answered_submit() {
        let liveness = Liveness::default();
        assert_eq!(liveness.confirmed(), None);
        let first = stamp();
        let second = first + Duration::from_millis(5);
        liveness.heard(second, sys::ZOK);
        liveness.heard(first, sys::ZNONODE);
        assert_eq!(liveness.confirmed(), Some(second));
        // Made up by the client: no news of the server.
        liveness.heard(second + Duration::from_secs(1), sys::ZCONNECTIONLOSS);
        liveness.heard(second + Duration::from_secs(1), sys::ZCLOSING);
        assert_eq!(liveness.confirmed(), Some(second));
    }
}
