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
//! Cost: one read of the coarse monotonic clock per submit, one atomic max per server
//! reply.

use crate::client::ZooKeeper;
use crate::in_flight::InFlight;
use crate::session::Session;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use zookeeper_mt_sys as sys;

/// The process's time origin: instants are kept as nanoseconds after it.
/// A submit instant: nanoseconds of the monotonic clock, read from its coarse variant
/// (one tick, a few milliseconds, behind the precise clock, at a fraction of its cost).
/// Reading early only moves the bound earlier: the safe direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

/// The precise clock's `Instant` and the raw clock's reading together, to map stamps to
/// instants. The raw reading is taken after the `Instant`, so a mapped stamp is never
/// later than the instant it stands for.
fn origin() -> (Instant, u64) {
    static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let instant = Instant::now();
        (instant, raw_nanos(false))
    })
}

#[cfg(target_os = "linux")]
fn raw_nanos(coarse: bool) -> u64 {
    let clock = if coarse {
        libc::CLOCK_MONOTONIC_COARSE
    } else {
        libc::CLOCK_MONOTONIC
    };
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write; both clocks exist on every Linux.
    unsafe { libc::clock_gettime(clock, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// Elsewhere: nanoseconds since a process-wide instant, from `Instant` (precise only).
#[cfg(not(target_os = "linux"))]
fn raw_nanos(_coarse: bool) -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Stamp {
    /// The instant this stamp stands for (never later than the submit it was taken at).
    fn to_instant(self) -> Instant {
        let (instant, raw) = origin();
        if self.0 >= raw {
            instant + Duration::from_nanos(self.0 - raw)
        } else {
            instant
                .checked_sub(Duration::from_nanos(raw - self.0))
                .unwrap_or(instant)
        }
    }

    #[cfg(test)]
    fn later_by(self, by: Duration) -> Stamp {
        Stamp(self.0 + u64::try_from(by.as_nanos()).unwrap())
    }
}

#[derive(Default)]
pub(crate) struct Liveness {
    /// Nanoseconds after [`origin`] plus one; 0: nothing answered yet.
    confirmed: AtomicU64,
}

impl Liveness {
    /// Records that the server answered a request submitted at `sent` with `rc`.
    pub(crate) fn heard(&self, sent: Stamp, rc: i32) {
        if !answered_by_server(rc) {
            return;
        }
        // 0 stands for "never": a stamp is stored plus one.
        self.confirmed
            .fetch_max(sent.0.saturating_add(1), Ordering::AcqRel);
    }

    pub(crate) fn confirmed(&self) -> Option<Instant> {
        match self.confirmed.load(Ordering::Acquire) {
            0 => None,
            stamp => Some(Stamp(stamp - 1).to_instant()),
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
pub(crate) fn stamp() -> Stamp {
    let _ = origin(); // taken before any stamp, so no stamp precedes it
    Stamp(raw_nanos(true))
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
        let second = first.later_by(Duration::from_millis(5));
        liveness.heard(second, sys::ZOK);
        liveness.heard(first, sys::ZNONODE);
        assert_eq!(liveness.confirmed(), Some(second.to_instant()));
        // Made up by the client: no news of the server.
        liveness.heard(
            second.later_by(Duration::from_secs(1)),
            sys::ZCONNECTIONLOSS,
        );
        liveness.heard(second.later_by(Duration::from_secs(1)), sys::ZCLOSING);
        assert_eq!(liveness.confirmed(), Some(second.to_instant()));
    }

    #[test]
    fn a_stamp_is_never_later_than_its_instant() {
        for _ in 0..1_000 {
            let stamp = stamp();
            let after = Instant::now();
            assert!(stamp.to_instant() <= after);
        }
    }
}
