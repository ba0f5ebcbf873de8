//! Sessions without a client library: forcing a session's expiry from its id and
//! password ([`expire_session`], Curator's `KillSession`, kazoo's `expire_session`), and
//! the tiny wire client it is built on ([`WireSession`]).

mod wire;

pub use wire::WireSession;

use crate::error::{HarnessError, Result};
use std::time::{Duration, Instant};
use wire::{attach_and_close, members, Attach};

/// Ends the session `session_id` on the server, for whichever client holds it, and
/// returns once the server confirms it is gone: its ephemeral nodes are deleted and the
/// holder's next contact with the server reports the session expired (a ZooKeeper
/// client sees `SessionExpired`, exactly as after a real expiry).
///
/// How: on a connection of its own it attaches to the session with its id and
/// `password` and sends closeSession in the same write (the server reads it as soon as
/// the handshake is done, so a holder has no gap to take the session back in), and
/// waits for the reply (the close is then committed, through the leader on an
/// ensemble); then it attaches again, and the server
/// refusing the session confirms it. If the holder takes the session back in between (a
/// connected client whose connection the takeover closed reconnects, and the server
/// closes ours before the close reply), it starts over; it tries each member of
/// `connect_string` in turn, so a member that is down or not serving is skipped. It
/// works whether or not the holder is connected at that moment, and never depends on
/// timing: nothing is waited for but replies.
///
/// A wrong password looks the same as a gone session to the server's answer, so pass
/// the holder's own (a client's `client_id()`).
///
/// One race belongs to the server: on an ensemble member, a holder's reconnect that the
/// leader revalidated just before the close committed can complete just after it, on
/// a connection the close did not find; that member then goes on answering the holder's
/// pings on it although the session is gone (its ephemeral nodes deleted, every new
/// handshake refused), and the holder hears of the expiry only when that connection
/// next breaks. It needs a holder reconnecting at that instant to the member the expiry
/// goes through: list other members first in `connect_string` (the holder's own
/// connection is then closed by the close itself, never by a takeover, and it has
/// nothing to reconnect during). Seen with a holder retaking the session back to back
/// on a 3.8 ensemble, in a few rounds in a hundred.
///
/// Fails with [`HarnessError::Timeout`] (the attempts made and the last error) when the
/// expiry is not confirmed within `timeout`, [`HarnessError::InvalidArgument`] for a
/// connect string without servers.
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_testing::{expire_session, Server, WireSession};
///
/// let server = Server::start()?;
/// let wait = Duration::from_secs(10);
/// // Any client's session: its id and password (here the crate's own wire client).
/// let client = WireSession::connect(&server.connect_string(), wait, wait)?;
/// expire_session(&server.connect_string(), client.session_id(), client.password(), wait)?;
/// assert!(WireSession::resume(&server.connect_string(), client.session_id(), client.password(), wait).is_err());
/// # Ok::<(), zookeeper_testing::HarnessError>(())
/// ```
pub fn expire_session(
    connect_string: &str,
    session_id: i64,
    password: &[u8],
    timeout: Duration,
) -> Result<()> {
    let started = Instant::now();
    let deadline = started + timeout;
    let members = members(connect_string)?;
    let mut attempt = Attempts::default();
    let mut member = 0;
    let mut failed_in_a_row = 0;
    loop {
        if Instant::now() >= deadline {
            return Err(attempt.timed_out(session_id, connect_string, started.elapsed()));
        }
        let at = &members[member % members.len()];
        let bound = deadline.min(Instant::now() + PER_MEMBER);
        match attach_and_close(at, session_id, password, bound) {
            Ok(Attach::Refused) => return Ok(()),
            Ok(Attach::Attached(session)) => {
                failed_in_a_row = 0;
                attempt.closes += 1;
                match session.await_close(bound.saturating_duration_since(Instant::now())) {
                    // Committed: the next round's handshake confirms it.
                    Ok(()) => attempt.closed += 1,
                    // Our connection was closed before the reply: most likely the holder
                    // took the session back. Attach again, on the same member.
                    Err(e) => attempt.last = Some(e),
                }
            }
            Err(e) => {
                // Down, not serving, or electing: try the next member.
                attempt.last = Some(e);
                member += 1;
                attempt.unreachable += 1;
                failed_in_a_row += 1;
                if failed_in_a_row % members.len() == 0 {
                    std::thread::sleep(
                        BACKOFF.min(deadline.saturating_duration_since(Instant::now())),
                    );
                }
            }
        }
    }
}

/// The longest one handshake or close may take before the next member is tried (a
/// paused member accepts connections and never answers).
const PER_MEMBER: Duration = Duration::from_secs(5);
/// The pause after every member failed in a row (refused connections fail at once).
const BACKOFF: Duration = Duration::from_millis(20);

/// What [`expire_session`] tried, for its timeout error.
#[derive(Default)]
struct Attempts {
    closes: u32,
    closed: u32,
    unreachable: u32,
    last: Option<HarnessError>,
}

impl Attempts {
    fn timed_out(self, session_id: i64, connect_string: &str, waited: Duration) -> HarnessError {
        let last = self
            .last
            .map_or_else(|| "none".to_owned(), |e| e.to_string());
        HarnessError::Timeout {
            what: format!("session {session_id:#x} to be expired on {connect_string}"),
            waited,
            details: format!(
                "{} takeovers sent closeSession, {} got its reply, {} handshakes failed; last \
                 error: {last}",
                self.closes, self.closed, self.unreachable
            ),
        }
    }
}
