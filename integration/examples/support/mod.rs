//! Shared by the examples that show a session expiring.

use std::error::Error;
use std::time::Duration;
use zookeeper_mt::ZooKeeper;

/// How long the expiry may take (it is over in milliseconds unless the servers are down).
const EXPIRE: Duration = Duration::from_secs(30);

/// Makes the server expire the session of `zk` and returns its id. The testing crate's
/// `expire_session` ends it from its id and password on a connection of its own and
/// confirms it is gone (it retries if `zk`, connected meanwhile, takes the session back),
/// so `zk` needs no proxy and may stay connected: it sees `SessionExpired` at its next
/// contact with the server.
pub fn expire_session(zk: &ZooKeeper, hosts: &str) -> Result<i64, Box<dyn Error>> {
    let id = zk.client_id()?;
    zookeeper_testing::expire_session(hosts, id.session_id, &id.password, EXPIRE)?;
    Ok(id.session_id)
}
