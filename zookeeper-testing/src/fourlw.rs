//! Four-letter words (`ruok`, `srvr`, `stat`, `mntr`, ...) over a plain TCP connection.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{HarnessError, Result};

/// Sends the four-letter word `cmd` to `addr` (`"host:port"`) and returns the whole reply
/// (the server closes the connection after answering).
///
/// `timeout` bounds the connect and each read or write. The server must whitelist the
/// command (`4lw.commands.whitelist`; harness servers allow all).
pub fn four_letter(addr: &str, cmd: &str, timeout: Duration) -> Result<String> {
    if cmd.len() != 4 || !cmd.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(HarnessError::InvalidArgument(format!(
            "`{cmd}` is not a four-letter word"
        )));
    }
    let fail = |source: io::Error| HarnessError::FourLetter {
        addr: addr.to_string(),
        cmd: cmd.to_string(),
        source,
    };
    let sockaddr: SocketAddr = addr
        .to_socket_addrs()
        .map_err(fail)?
        .next()
        .ok_or_else(|| fail(io::Error::new(io::ErrorKind::NotFound, "no address")))?;
    let mut stream = TcpStream::connect_timeout(&sockaddr, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    stream.set_write_timeout(Some(timeout)).map_err(fail)?;
    stream.write_all(cmd.as_bytes()).map_err(fail)?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).map_err(fail)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The role a server reports in the `Mode:` line of `srvr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A single server without a quorum configuration.
    Standalone,
    /// The ensemble leader.
    Leader,
    /// An ensemble follower.
    Follower,
    /// An observer.
    Observer,
    /// A read-only server (partitioned, `readonlymode.enabled`).
    ReadOnly,
}

impl Mode {
    /// Parses the `Mode:` line of a `srvr`/`stat` reply. `None` if the server is not
    /// serving (e.g. "This ZooKeeper instance is not currently serving requests").
    pub fn from_srvr(reply: &str) -> Option<Mode> {
        let mode = reply.lines().find_map(|l| l.strip_prefix("Mode:"))?.trim();
        match mode {
            "standalone" => Some(Mode::Standalone),
            "leader" => Some(Mode::Leader),
            "follower" => Some(Mode::Follower),
            "observer" => Some(Mode::Observer),
            "read-only" => Some(Mode::ReadOnly),
            _ => None,
        }
    }

    /// True for modes in which the server serves clients as part of a quorum or alone.
    pub fn is_serving_quorum(self) -> bool {
        matches!(self, Mode::Standalone | Mode::Leader | Mode::Follower)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Standalone => "standalone",
            Mode::Leader => "leader",
            Mode::Follower => "follower",
            Mode::Observer => "observer",
            Mode::ReadOnly => "read-only",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_modes() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(Mode::from_srvr(srvr), Some(Mode::Follower));
        assert_eq!(Mode::from_srvr("Mode: leader\n"), Some(Mode::Leader));
        assert_eq!(Mode::from_srvr("Mode: standalone"), Some(Mode::Standalone));
        assert_eq!(
            Mode::from_srvr("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }

    #[test]
    fn rejects_bad_words() {
        assert!(matches!(
            four_letter("127.0.0.1:1", "ruokk", Duration::from_millis(10)),
            Err(HarnessError::InvalidArgument(_))
        ));
    }
}
