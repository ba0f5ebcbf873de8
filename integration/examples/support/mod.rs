//! Shared by the examples that show a session expiring.

use std::error::Error;
use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;
use zookeeper_testing::FaultProxy;

/// How long the client may take to notice it was cut off.
const NOTICE: Duration = Duration::from_secs(30);

/// Makes the server expire the session of `zk`, which reaches the server only through
/// `proxy`, the way ZooKeeper's own tests do: another handle resumes the session with its
/// id and password, and closes it.
///
/// The client is cut off first and this waits until it has noticed: a client still
/// connected would take its session back between the takeover and the close, and the
/// close would then end nothing (`close()` returning `Ok` does not say the session
/// ended). It checks that the session is gone (resuming it now fails with
/// `SessionExpired`) before it lets the client reach the server again, and returns the
/// session id.
pub fn expire_session(
    zk: &ZooKeeper,
    proxy: &FaultProxy,
    hosts: &str,
) -> Result<i64, Box<dyn Error>> {
    let events = zk.session_events();
    proxy.isolate();
    let deadline = Instant::now() + NOTICE;
    while zk.state().is_connected() {
        let left = deadline.saturating_duration_since(Instant::now());
        if events.recv_timeout(left).is_err() {
            return Err("the client did not notice it was cut off".into());
        }
    }
    let id = zk.client_id()?;
    let thief = ZooKeeper::builder(hosts).session(id).connect()?;
    if thief.client_id()?.session_id != id.session_id {
        return Err("the takeover got a session of its own".into());
    }
    thief.close()?;
    match ZooKeeper::builder(hosts).session(id).connect() {
        Err(zookeeper_mt::Error::SessionExpired) => {}
        Ok(_) => {
            return Err(format!("session {:#x} still alive after close", id.session_id).into())
        }
        Err(other) => return Err(other.into()),
    }
    proxy.unblock();
    Ok(id.session_id)
}
