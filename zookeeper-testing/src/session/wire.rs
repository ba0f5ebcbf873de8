//! A tiny ZooKeeper client on `std::net`: the session handshake, pings and closeSession,
//! enough to create, hold, resume and end a session without any client library.
//!
//! Wire format (jute, big-endian): every packet is a 4-byte length and the record.
//! ConnectRequest = protocolVersion i32, lastZxidSeen i64, timeOut i32, sessionId i64,
//! passwd (i32 length + bytes), readOnly bool; ConnectResponse = protocolVersion i32,
//! timeOut i32, sessionId i64, passwd, readOnly bool. Then RequestHeader (xid i32, type
//! i32) + body, answered by ReplyHeader (xid i32, zxid i64, err i32) + body.

use crate::error::{HarnessError, Result};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// xid of pings (the server answers with the same xid).
const PING_XID: i32 = -2;
/// xid of watch notifications pushed by the server.
const NOTIFICATION_XID: i32 = -1;
const OP_PING: i32 = 11;
const OP_CLOSE_SESSION: i32 = -11;
/// No reply to the few records this client reads is anywhere near this big.
const MAX_FRAME: usize = 1 << 20;
const PASSWORD_LEN: usize = 16;

/// One server address of a connect string.
pub(crate) type Member = String;

/// The `host:port` members of a connect string (`h1:p1,h2:p2/chroot`: the chroot is
/// dropped, it does not matter to a session).
pub(crate) fn members(connect_string: &str) -> Result<Vec<Member>> {
    let hosts = connect_string.split('/').next().unwrap_or("");
    let members: Vec<Member> = hosts
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect();
    if members.is_empty() {
        return Err(HarnessError::InvalidArgument(format!(
            "connect string {connect_string:?} names no server"
        )));
    }
    Ok(members)
}

/// What one server answered to a handshake.
pub(crate) enum Attach {
    /// The session is ours on this connection.
    Attached(WireSession),
    /// The server refused the session: it is expired or closed (or the password is wrong;
    /// the server answers both the same way).
    Refused,
}

/// A session held on one connection by this crate's own wire client.
///
/// Made for tests: create a session ([`connect`](WireSession::connect)), keep it alive
/// ([`ping`](WireSession::ping)), resume one from its id and password
/// ([`resume`](WireSession::resume), which fails with [`HarnessError::SessionExpired`]
/// when the server refuses it) and end it ([`close`](WireSession::close)). Dropping it
/// drops the connection only: the session lives on until it times out, as after a
/// client's crash.
#[derive(Debug)]
pub struct WireSession {
    stream: TcpStream,
    server: Member,
    session_id: i64,
    password: Vec<u8>,
    negotiated: Duration,
    next_xid: i32,
}

impl WireSession {
    /// Creates a new session on the first member of `connect_string` that answers,
    /// asking for `session_timeout`; gives up after `timeout`.
    pub fn connect(
        connect_string: &str,
        session_timeout: Duration,
        timeout: Duration,
    ) -> Result<WireSession> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        for member in members(connect_string)? {
            match attach(&member, 0, &[0; PASSWORD_LEN], session_timeout, deadline) {
                Ok(Attach::Attached(s)) => return Ok(s),
                Ok(Attach::Refused) => {
                    last = Some(HarnessError::NotRunning {
                        what: format!("{member} refused a new session"),
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("members() is never empty"))
    }

    /// Resumes the session `session_id` with `password` on the first member of
    /// `connect_string` that answers. Fails with [`HarnessError::SessionExpired`] when a
    /// server refuses the session (expired, closed, or a wrong password). Taking a
    /// session over moves it: its previous connection on the same server is closed.
    pub fn resume(
        connect_string: &str,
        session_id: i64,
        password: &[u8],
        timeout: Duration,
    ) -> Result<WireSession> {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        for member in members(connect_string)? {
            match attach(&member, session_id, password, RESUME_TIMEOUT, deadline) {
                Ok(Attach::Attached(s)) => return Ok(s),
                Ok(Attach::Refused) => return Err(HarnessError::SessionExpired { session_id }),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("members() is never empty"))
    }

    /// The session id.
    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The session password.
    pub fn password(&self) -> &[u8] {
        &self.password
    }

    /// The session timeout the server granted.
    pub fn negotiated_timeout(&self) -> Duration {
        self.negotiated
    }

    /// The `host:port` this session is connected to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Sends a ping and waits for its answer: keeps the session alive for another
    /// session timeout. Fails when the connection is gone (closed by the server because
    /// the session ended or moved, or the server died) or after `timeout`.
    pub fn ping(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.request(PING_XID, OP_PING, deadline)
            .and_then(|err| match err {
                0 => Ok(()),
                e => Err(self.io(io::Error::other(format!("ping answered with error {e}")))),
            })
    }

    /// Ends the session (closeSession) and waits for the server's answer. `Ok` means
    /// the close is committed: the session and its ephemeral nodes are gone.
    pub fn close(mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let xid = self.next_xid();
        match self.request(xid, OP_CLOSE_SESSION, deadline)? {
            0 => Ok(()),
            e => Err(self.io(io::Error::other(format!(
                "closeSession answered with error {e}"
            )))),
        }
    }

    fn next_xid(&mut self) -> i32 {
        self.next_xid = self.next_xid.wrapping_add(1).max(1);
        self.next_xid
    }

    /// Waits for the answer to the closeSession [`attach_and_close`] sent: `Ok` means
    /// the close is committed.
    pub(crate) fn await_close(mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        match self.reply_to(CLOSE_XID, deadline)? {
            0 => Ok(()),
            e => Err(self.io(io::Error::other(format!(
                "closeSession answered with error {e}"
            )))),
        }
    }

    /// Sends a body-less request and reads frames until its reply; returns its err.
    fn request(&mut self, xid: i32, op: i32, deadline: Instant) -> Result<i32> {
        set_deadline(&self.stream, deadline).map_err(|e| self.io(e))?;
        self.stream
            .write_all(&request_frame(xid, op))
            .map_err(|e| self.io(e))?;
        self.reply_to(xid, deadline)
    }

    /// Reads frames until the reply to `xid`; returns its err.
    fn reply_to(&mut self, xid: i32, deadline: Instant) -> Result<i32> {
        loop {
            set_deadline(&self.stream, deadline).map_err(|e| self.io(e))?;
            let reply = read_frame(&mut self.stream).map_err(|e| self.io(e))?;
            let (Some(rxid), Some(err)) = (be_i32(&reply, 0), be_i32(&reply, 12)) else {
                return Err(self.io(invalid("a reply shorter than its header")));
            };
            if rxid == xid {
                return Ok(err);
            }
            if rxid != NOTIFICATION_XID && rxid != PING_XID {
                return Err(self.io(invalid(format!("a reply to xid {rxid}, not {xid}"))));
            }
        }
    }

    fn io(&self, source: io::Error) -> HarnessError {
        HarnessError::io(
            format!("session {:#x} on {}", self.session_id, self.server),
            source,
        )
    }
}

/// The xid of the closeSession sent with a handshake.
const CLOSE_XID: i32 = 1;

/// A body-less request's frame: length, xid, op code.
fn request_frame(xid: i32, op: i32) -> [u8; 12] {
    let mut frame = [0u8; 12];
    frame[..4].copy_from_slice(&8i32.to_be_bytes());
    frame[4..8].copy_from_slice(&xid.to_be_bytes());
    frame[8..].copy_from_slice(&op.to_be_bytes());
    frame
}

/// The timeout a resume asks for. The server re-arms the session with it; it is clamped
/// to the server's bounds (2 to 20 ticks).
pub(crate) const RESUME_TIMEOUT: Duration = Duration::from_secs(10);

/// One handshake with one member. A member that closes the connection without an
/// answer (not serving: electing, starting, or a client that saw a newer zxid) is an
/// error, not a refusal.
pub(crate) fn attach(
    member: &str,
    session_id: i64,
    password: &[u8],
    session_timeout: Duration,
    deadline: Instant,
) -> Result<Attach> {
    attach_then(
        member,
        session_id,
        password,
        session_timeout,
        deadline,
        false,
    )
}

/// [`attach`], with a closeSession (xid 1) sent in the same write as the handshake: the
/// server reads it only once the handshake is done (it stops reading a connection while
/// it revalidates its session) and then at once, so a holder that takes the session
/// back has no gap between the two to do it in. Read its answer with
/// [`WireSession::await_close`].
pub(crate) fn attach_and_close(
    member: &str,
    session_id: i64,
    password: &[u8],
    deadline: Instant,
) -> Result<Attach> {
    attach_then(member, session_id, password, RESUME_TIMEOUT, deadline, true)
}

fn attach_then(
    member: &str,
    session_id: i64,
    password: &[u8],
    session_timeout: Duration,
    deadline: Instant,
    close_too: bool,
) -> Result<Attach> {
    let ctx = || format!("handshake for session {session_id:#x} with {member}");
    let stream = open(member, deadline).map_err(|e| HarnessError::io(ctx(), e))?;
    let mut stream = stream;
    let timeout_ms = i32::try_from(session_timeout.as_millis()).unwrap_or(i32::MAX);
    let password_len = i32::try_from(password.len()).map_err(|_| {
        HarnessError::InvalidArgument(format!("a {}-byte password", password.len()))
    })?;
    let mut body = Vec::with_capacity(45 + password.len());
    body.extend_from_slice(&0i32.to_be_bytes()); // protocolVersion
    body.extend_from_slice(&0i64.to_be_bytes()); // lastZxidSeen: never newer than the server
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    body.extend_from_slice(&session_id.to_be_bytes());
    body.extend_from_slice(&password_len.to_be_bytes());
    body.extend_from_slice(password);
    body.push(0); // readOnly: false
    let mut frame = Vec::with_capacity(16 + body.len());
    frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    if close_too {
        frame.extend_from_slice(&request_frame(CLOSE_XID, OP_CLOSE_SESSION));
    }
    let exchange = |stream: &mut TcpStream| -> io::Result<Vec<u8>> {
        set_deadline(stream, deadline)?;
        stream.write_all(&frame)?;
        read_frame(stream)
    };
    let reply = exchange(&mut stream).map_err(|e| HarnessError::io(ctx(), e))?;
    let parsed = (|| {
        let timeout = be_i32(&reply, 4)?;
        let id = be_i64(&reply, 8)?;
        let len = usize::try_from(be_i32(&reply, 16)?).ok()?;
        let passwd = reply.get(20..20 + len)?.to_vec();
        Some((timeout, id, passwd))
    })();
    let Some((timeout, id, passwd)) = parsed else {
        return Err(HarnessError::io(
            ctx(),
            invalid("a malformed ConnectResponse"),
        ));
    };
    if timeout <= 0 || id == 0 {
        return Ok(Attach::Refused);
    }
    Ok(Attach::Attached(WireSession {
        stream,
        server: member.to_owned(),
        session_id: id,
        password: passwd,
        negotiated: Duration::from_millis(timeout as u64),
        next_xid: if close_too { CLOSE_XID } else { 0 },
    }))
}

fn open(member: &str, deadline: Instant) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = member.to_socket_addrs()?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in addrs {
        let left = left(deadline)?;
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    Ok(left)
}

fn set_deadline(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = left(deadline)?;
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or_else(|| invalid(format!("a frame of length {len}")))?;
    let mut frame = vec![0u8; len];
    stream.read_exact(&mut frame)?;
    Ok(frame)
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_drop_the_chroot_and_blanks() {
        assert_eq!(
            members("a:1, b:2,/chroot/x").unwrap(),
            vec!["a:1".to_owned(), "b:2".to_owned()]
        );
        assert!(matches!(
            members("/only-chroot"),
            Err(HarnessError::InvalidArgument(_))
        ));
    }

    #[test]
    fn big_endian_reads_are_bounded() {
        assert_eq!(be_i32(&[0, 0, 1, 0], 0), Some(256));
        assert_eq!(be_i32(&[0, 0, 1], 0), None);
        assert_eq!(be_i64(&[0; 7], 0), None);
    }
}
