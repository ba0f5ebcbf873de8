//! A loopback TCP proxy that understands ZooKeeper's client protocol and injects faults
//! at exact protocol points: cut the connection after the k-th request (the server applied
//! it, the client never sees the reply), swallow one reply, stall both directions, cut or
//! refuse connections, redirect new connections to another server.
//!
//! # The protocol it parses
//! Every message of the client protocol is a frame: a 4-byte big-endian length, then the
//! body. The first client frame is the `ConnectRequest`, the first server frame the
//! `ConnectResponse`. After that a client frame starts with a `RequestHeader {xid: i32,
//! type: i32}` and a server frame with a `ReplyHeader {xid: i32, zxid: i64, err: i32}`.
//! Special xids: -2 ping, -1 watch notification, -4 auth, -8 setWatches. The server
//! answers requests in order, one reply per request; pings and notifications are
//! interleaved.
//!
//! The proxy splits both byte streams into frames and decides per frame, so a reply that
//! shares a TCP segment with other frames is still handled exactly. A stream that does
//! not look like ZooKeeper framing (a four-letter word, a TLS handshake, an absurd length)
//! is forwarded unparsed for the rest of that connection.
//!
//! # Requests
//! A *request* is a client frame after the handshake that is not a ping. Requests are
//! counted ([`FaultProxy::requests_forwarded`]) and logged with their xid and
//! [`OpCode`] ([`FaultProxy::requests_since`]), so a test can run an operation once
//! without faults, learn that it sends N requests, and then cut at each of them in turn.
//! Session-maintenance frames the client sends by itself after a reconnect (auth,
//! setWatches) are requests too; match on [`OpCode`] with the `_matching` variants to
//! count only some.
//!
//! # Threads and cleanup
//! One accept thread plus two forwarding threads per connection. Dropping the proxy
//! closes the listener and every connection and joins every thread.
//! [`live_proxy_threads`] counts the threads of all proxies of the process.

mod forwarding;
mod framing;

use forwarding::*;
use framing::*;

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};

/// Largest frame the parser accepts (a server's `jute.maxbuffer` is 1 MiB by default);
/// a longer length prefix means the stream is not ZooKeeper framing.
const MAX_FRAME: usize = 64 << 20;
/// Upper bound of one connect to the target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Read size of the forwarding threads.
const READ_CHUNK: usize = 64 * 1024;

/// Ping xid.
const PING_XID: i32 = -2;
/// Watch notification xid.
const NOTIFICATION_XID: i32 = -1;

static LIVE_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Threads currently run by all [`FaultProxy`] values of this process (accept and
/// forwarding threads). Zero once every proxy is dropped.
pub fn live_proxy_threads() -> usize {
    LIVE_THREADS.load(Ordering::SeqCst)
}

/// A request type (`ZooDefs.OpCode` of the server), as sent in the `type` field of a
/// request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpCode(pub i32);

impl OpCode {
    /// `create`.
    pub const CREATE: OpCode = OpCode(1);
    /// `delete`.
    pub const DELETE: OpCode = OpCode(2);
    /// `exists`.
    pub const EXISTS: OpCode = OpCode(3);
    /// `getData`.
    pub const GET_DATA: OpCode = OpCode(4);
    /// `setData`.
    pub const SET_DATA: OpCode = OpCode(5);
    /// `getACL`.
    pub const GET_ACL: OpCode = OpCode(6);
    /// `setACL`.
    pub const SET_ACL: OpCode = OpCode(7);
    /// `getChildren`.
    pub const GET_CHILDREN: OpCode = OpCode(8);
    /// `sync`.
    pub const SYNC: OpCode = OpCode(9);
    /// `ping` (never counted as a request).
    pub const PING: OpCode = OpCode(11);
    /// `getChildren2` (children and the parent's Stat).
    pub const GET_CHILDREN2: OpCode = OpCode(12);
    /// `check` (inside a multi).
    pub const CHECK: OpCode = OpCode(13);
    /// `multi`.
    pub const MULTI: OpCode = OpCode(14);
    /// `create2` (create returning the Stat).
    pub const CREATE2: OpCode = OpCode(15);
    /// `reconfig`.
    pub const RECONFIG: OpCode = OpCode(16);
    /// `checkWatches`.
    pub const CHECK_WATCHES: OpCode = OpCode(17);
    /// `removeWatches`.
    pub const REMOVE_WATCHES: OpCode = OpCode(18);
    /// `createContainer`.
    pub const CREATE_CONTAINER: OpCode = OpCode(19);
    /// `deleteContainer`.
    pub const DELETE_CONTAINER: OpCode = OpCode(20);
    /// `createTTL`.
    pub const CREATE_TTL: OpCode = OpCode(21);
    /// `multiRead`.
    pub const MULTI_READ: OpCode = OpCode(22);
    /// `auth` (sent with xid -4, also after every reconnect).
    pub const AUTH: OpCode = OpCode(100);
    /// `setWatches` (sent with xid -8 after a reconnect that has watches to restore).
    pub const SET_WATCHES: OpCode = OpCode(101);
    /// `sasl`.
    pub const SASL: OpCode = OpCode(102);
    /// `getEphemerals`.
    pub const GET_EPHEMERALS: OpCode = OpCode(103);
    /// `getAllChildrenNumber`.
    pub const GET_ALL_CHILDREN_NUMBER: OpCode = OpCode(104);
    /// `setWatches2` (with persistent watches).
    pub const SET_WATCHES2: OpCode = OpCode(105);
    /// `addWatch`.
    pub const ADD_WATCH: OpCode = OpCode(106);
    /// `whoAmI`.
    pub const WHO_AM_I: OpCode = OpCode(107);
    /// `closeSession`.
    pub const CLOSE_SESSION: OpCode = OpCode(-11);

    /// The server's name of the op, `None` for an unknown code.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "create",
            2 => "delete",
            3 => "exists",
            4 => "getData",
            5 => "setData",
            6 => "getACL",
            7 => "setACL",
            8 => "getChildren",
            9 => "sync",
            11 => "ping",
            12 => "getChildren2",
            13 => "check",
            14 => "multi",
            15 => "create2",
            16 => "reconfig",
            17 => "checkWatches",
            18 => "removeWatches",
            19 => "createContainer",
            20 => "deleteContainer",
            21 => "createTTL",
            22 => "multiRead",
            100 => "auth",
            101 => "setWatches",
            102 => "sasl",
            103 => "getEphemerals",
            104 => "getAllChildrenNumber",
            105 => "setWatches2",
            106 => "addWatch",
            107 => "whoAmI",
            -11 => "closeSession",
            _ => return None,
        })
    }

    /// True for ops that change the tree (and so get a zxid of their own).
    pub fn is_write(self) -> bool {
        matches!(self.0, 1 | 2 | 5 | 7 | 14 | 15 | 16 | 19 | 20 | 21)
    }
}

impl fmt::Display for OpCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "op{}", self.0),
        }
    }
}

/// One request seen by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The connection it came on (numbered from 0 per proxy, in accept order).
    pub connection: u64,
    /// The request's xid (the client's sequence number; -4 auth, -8 setWatches).
    pub xid: i32,
    /// The request type.
    pub op: OpCode,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (xid {}, connection {})",
            self.op, self.xid, self.connection
        )
    }
}

/// The header of a server reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyHeader {
    /// The xid of the request it answers.
    pub xid: i32,
    /// The server's last zxid (for a successful write: the write's own zxid).
    pub zxid: i64,
    /// The result code (0 ok; the server's `KeeperException.Code`, e.g. -101 no node,
    /// -110 node exists).
    pub err: i32,
}

/// A position in the request log, from [`FaultProxy::mark`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequestMark(usize);

/// What an armed fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The request is forwarded; its reply (and everything after it) is not returned and
    /// the client connection is closed.
    CutAfterRequest,
    /// The request is forwarded; its reply is swallowed; the connection stays up.
    DropReply,
}

/// A fault that fired, from [`FaultProxy::fired`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiredFault {
    /// What was done.
    pub kind: FaultKind,
    /// The request whose reply was withheld.
    pub request: Request,
    /// The withheld reply's header; `None` if the connection ended before the reply came.
    /// `err == 0` means the server applied the request.
    pub reply: Option<ReplyHeader>,
}

type RequestFilter = Arc<dyn Fn(&Request) -> bool + Send + Sync>;

struct Trigger {
    kind: FaultKind,
    remaining: u64,
    filter: Option<RequestFilter>,
}

/// Which protocol a proxy parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// ZooKeeper's client protocol.
    Client,
    /// A learner's connection to the leader's quorum port: the leader-to-learner stream is
    /// parsed as `QuorumPacket`s so that [`FaultProxy::hold_inbound`] can hold proposals
    /// and commits while pings and session revalidations pass.
    Quorum,
    /// Bytes only.
    Raw,
}

/// A loopback proxy between ZooKeeper clients and a server that injects faults at exact
/// protocol points (see the [module docs](self)).
///
/// ```no_run
/// use zookeeper_testing::{FaultProxy, OpCode};
///
/// let server = zookeeper_testing::shared_server();
/// let proxy = FaultProxy::start(server.connect_string())?;
/// // Connect a client to `proxy.connect_string()`, then:
/// let mark = proxy.mark();
/// // ... run an operation fault-free ...
/// let sent = proxy.requests_since(mark);
/// println!("the operation sends {} requests: {sent:?}", sent.len());
/// proxy.cut_after(2); // the 2nd request from now is applied but its reply is lost
/// # Ok::<(), zookeeper_testing::HarnessError>(())
/// ```
///
/// All methods take `&self`; a proxy can be shared between threads.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &st.target)
            .field("protocol", &self.shared.protocol)
            .field("connections", &st.conns.len())
            .field("blocked", &st.blocked)
            .field("stalled", &self.shared.stalled.load(Ordering::SeqCst))
            .finish()
    }
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `target`, a `host:port`
    /// (or a connect string: its first server is used).
    pub fn start(target: impl AsRef<str>) -> Result<FaultProxy> {
        let addr = first_of_connect_string(target.as_ref())?;
        Self::start_addr(addr, Protocol::Client)
    }

    /// Like [`start`](Self::start), listening on `ip` (e.g. another loopback address of
    /// 127.0.0.0/8, so that a client sees proxies as different hosts).
    pub fn start_on(ip: IpAddr, target: impl AsRef<str>) -> Result<FaultProxy> {
        let addr = first_of_connect_string(target.as_ref())?;
        Self::start_full(SocketAddr::new(ip, 0), addr, Protocol::Client)
    }

    /// A proxy that forwards bytes without parsing them: stall, cut, block and redirect
    /// work; request counting and the request-triggered faults do not.
    pub fn raw(target: impl AsRef<str>) -> Result<FaultProxy> {
        let addr = first_of_connect_string(target.as_ref())?;
        Self::start_addr(addr, Protocol::Raw)
    }

    pub(crate) fn start_addr(target: SocketAddr, protocol: Protocol) -> Result<FaultProxy> {
        Self::start_full((Ipv4Addr::LOCALHOST, 0).into(), target, protocol)
    }

    fn start_full(bind: SocketAddr, target: SocketAddr, protocol: Protocol) -> Result<FaultProxy> {
        let listener = TcpListener::bind(bind)
            .map_err(|e| HarnessError::io(format!("binding the fault proxy on {bind}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the fault proxy's address", e))?;
        let shared = Arc::new(Shared {
            protocol,
            state: Mutex::new(State {
                target,
                blocked: false,
                conns: Vec::new(),
                threads: Vec::new(),
                next_conn: 0,
                refused: 0,
                requests: Vec::new(),
                trigger: None,
                fired: Vec::new(),
            }),
            changed: Condvar::new(),
            stalled: AtomicBool::new(false),
            hold_inbound: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            pings: AtomicU64::new(0),
            to_clients: AtomicU64::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = spawn_counted("fault-proxy-accept", move || {
            accept_loop(listener, accept_shared)
        })
        .map_err(|e| HarnessError::io("starting the fault proxy's accept thread", e))?;
        Ok(FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `"IP:PORT"` of the proxy (`127.0.0.1` unless started with
    /// [`start_on`](Self::start_on)): give this to the client instead of the server's
    /// address.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// The address the proxy listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where new connections go.
    pub fn target(&self) -> SocketAddr {
        self.shared.lock().target
    }

    /// Sends future connections to `target` (`host:port`, e.g. another ensemble member).
    /// Open connections keep their server; [`cut_all`](Self::cut_all) them to make the
    /// client reconnect through the proxy to the new target.
    pub fn redirect(&self, target: impl AsRef<str>) -> Result<()> {
        let addr = first_of_connect_string(target.as_ref())?;
        self.shared.lock().target = addr;
        Ok(())
    }

    /// Refuses new connections: each is accepted and closed at once (the client sees the
    /// connection fail and retries). Open connections are not touched; call
    /// [`cut_all`](Self::cut_all) after this to isolate the client completely.
    pub fn block(&self) {
        self.shared.lock().blocked = true;
    }

    /// Accepts and forwards new connections again.
    pub fn unblock(&self) {
        self.shared.lock().blocked = false;
    }

    /// True while new connections are refused.
    pub fn is_blocked(&self) -> bool {
        self.shared.lock().blocked
    }

    /// [`block`](Self::block) plus [`cut_all`](Self::cut_all): the client is cut off
    /// from the server (which keeps running) until [`unblock`](Self::unblock).
    pub fn isolate(&self) {
        self.block();
        self.cut_all();
    }

    /// Closes every open connection now (both sides; the client sees connection loss,
    /// the server sees the client go away and keeps the session until it expires).
    pub fn cut_all(&self) {
        for conn in self.shared.conns() {
            close_conn(&self.shared, &conn);
        }
    }

    /// Stalls both directions of every connection, open and new: bytes are read and held
    /// in memory, nothing is delivered and nothing is dropped, as on a network that stops
    /// delivering. When this returns no further byte reaches either side.
    /// [`resume`](Self::resume) delivers everything held, in order.
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::SeqCst);
        // Forwarding happens under the outbound lock after checking the flag: taking
        // each lock once waits out a write that started before the flag was set.
        for conn in self.shared.conns() {
            drop(conn.out(Dir::ToServer));
            drop(conn.out(Dir::ToClient));
        }
    }

    /// Ends a [`stall`](Self::stall): delivers every held byte in order, then forwards
    /// as usual.
    pub fn resume(&self) {
        self.shared.stalled.store(false, Ordering::SeqCst);
        self.flush_all();
    }

    /// True while stalled.
    pub fn is_stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::SeqCst)
    }

    /// Quorum links only: holds the leader-to-learner stream except pings and session
    /// revalidations (see [`Protocol::Quorum`]).
    pub(crate) fn hold_inbound(&self) {
        self.shared.hold_inbound.store(true, Ordering::SeqCst);
        for conn in self.shared.conns() {
            drop(conn.out(Dir::ToClient));
        }
    }

    /// Ends [`hold_inbound`](Self::hold_inbound), delivering what was held.
    pub(crate) fn release_inbound(&self) {
        self.shared.hold_inbound.store(false, Ordering::SeqCst);
        self.flush_all();
    }

    fn flush_all(&self) {
        for conn in self.shared.conns() {
            for dir in [Dir::ToServer, Dir::ToClient] {
                let ok = {
                    let mut out = conn.out(dir);
                    if may_flush(&self.shared, dir) {
                        flush_held(&mut out).map(|()| !(out.eof_held && out.held.is_empty()))
                    } else {
                        Ok(true)
                    }
                };
                if !matches!(ok, Ok(true)) {
                    close_conn(&self.shared, &conn);
                }
            }
        }
    }

    /// Arms a cut: when the `k`-th request from now (`k >= 1`, counted over all
    /// connections) has been forwarded, its reply and everything after it are withheld
    /// and that client connection is closed once the reply arrives. The server applied
    /// the request; the client sees connection loss for it (and for anything it sent
    /// after it, which is not forwarded) and reconnects through the proxy with the same
    /// session. Replaces any armed fault. `k == 0` disarms.
    pub fn cut_after(&self, k: u64) {
        self.arm(FaultKind::CutAfterRequest, k, None);
    }

    /// Like [`cut_after`](Self::cut_after), counting only requests for which `filter`
    /// returns true (e.g. `|r| r.op == OpCode::CREATE`).
    pub fn cut_after_matching(
        &self,
        k: u64,
        filter: impl Fn(&Request) -> bool + Send + Sync + 'static,
    ) {
        self.arm(FaultKind::CutAfterRequest, k, Some(Arc::new(filter)));
    }

    /// Arms a dropped reply: the reply of the `k`-th request from now (`k >= 1`) is
    /// swallowed and the connection stays up. The C client notices only when a later
    /// reply arrives (its xid does not match the oldest pending request): it then
    /// drops the connection, fails every pending request with `ZRUNTIMEINCONSISTENCY`
    /// and reconnects. Until then the request simply has no answer. Replaces any armed
    /// fault. `k == 0` disarms.
    pub fn drop_reply(&self, k: u64) {
        self.arm(FaultKind::DropReply, k, None);
    }

    /// Like [`drop_reply`](Self::drop_reply), counting only requests for which `filter`
    /// returns true.
    pub fn drop_reply_matching(
        &self,
        k: u64,
        filter: impl Fn(&Request) -> bool + Send + Sync + 'static,
    ) {
        self.arm(FaultKind::DropReply, k, Some(Arc::new(filter)));
    }

    fn arm(&self, kind: FaultKind, k: u64, filter: Option<RequestFilter>) {
        self.shared.lock().trigger = (k > 0).then_some(Trigger {
            kind,
            remaining: k,
            filter,
        });
    }

    /// Disarms a fault that has not fired yet (one already waiting for its reply still
    /// acts).
    pub fn disarm(&self) {
        self.shared.lock().trigger = None;
    }

    /// True while a fault is armed and its request has not been seen yet.
    pub fn is_armed(&self) -> bool {
        self.shared.lock().trigger.is_some()
    }

    /// Every fault that fired, in order.
    pub fn fired(&self) -> Vec<FiredFault> {
        self.shared.lock().fired.clone()
    }

    /// Waits until at least `n` faults have fired in total; returns them all, or an error
    /// after `timeout`.
    pub fn wait_for_fired(&self, n: usize, timeout: Duration) -> Result<Vec<FiredFault>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if st.fired.len() >= n {
                return Ok(st.fired.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("{n} fired faults at the proxy {}", self.addr),
                    waited: timeout,
                    details: format!(
                        "fired so far: {:?}; armed: {}; requests seen: {}",
                        st.fired,
                        st.trigger.is_some(),
                        st.requests.len()
                    ),
                });
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The first request since `mark` on a connection opened after connection `after`
    /// (a client's reconnection), session upkeep (pings, setWatches, auth) left out;
    /// `None` if none came within `timeout` (e.g. the new server refused the client).
    pub fn first_request_after(
        &self,
        mark: RequestMark,
        after: u64,
        timeout: Duration,
    ) -> Option<OpCode> {
        let upkeep = [
            OpCode::PING,
            OpCode::SET_WATCHES,
            OpCode::SET_WATCHES2,
            OpCode::AUTH,
        ];
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(first) = self
                .requests_since(mark)
                .iter()
                .find(|r| r.connection > after && !upkeep.contains(&r.op))
            {
                return Some(first.op);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Requests forwarded so far, over all connections (pings excluded).
    pub fn requests_forwarded(&self) -> u64 {
        self.shared.lock().requests.len() as u64
    }

    /// Bytes forwarded toward clients so far (what a client's reads cost on the wire).
    pub fn bytes_to_clients(&self) -> u64 {
        self.shared.to_clients.load(Ordering::SeqCst)
    }

    /// Pings forwarded from clients so far.
    pub fn pings_forwarded(&self) -> u64 {
        self.shared.pings.load(Ordering::SeqCst)
    }

    /// The current end of the request log.
    pub fn mark(&self) -> RequestMark {
        RequestMark(self.shared.lock().requests.len())
    }

    /// Requests forwarded since `mark`, in order. A request is logged when the proxy
    /// takes it for forwarding (during a stall: when it is queued).
    pub fn requests_since(&self, mark: RequestMark) -> Vec<Request> {
        let st = self.shared.lock();
        st.requests.get(mark.0..).unwrap_or_default().to_vec()
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.shared.lock().conns.len()
    }

    /// Connections accepted and forwarded so far.
    pub fn connections_accepted(&self) -> u64 {
        self.shared.lock().next_conn
    }

    /// Connections refused so far (while blocked, or because the target did not answer).
    pub fn connections_refused(&self) -> u64 {
        self.shared.lock().refused
    }

    /// Waits until `cond` holds for the proxy's state, re-checking whenever a connection
    /// opens or closes or a fault fires.
    fn wait_state(&self, timeout: Duration, cond: impl Fn(&State) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if cond(&st) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until at least `n` connections have been accepted in total (e.g. a client's
    /// reconnect); false after `timeout`.
    pub fn wait_for_accepted(&self, n: u64, timeout: Duration) -> bool {
        self.wait_state(timeout, |st| st.next_conn >= n)
    }

    /// Waits until at least `n` connections have been refused in total; false after
    /// `timeout`.
    pub fn wait_for_refused(&self, n: u64, timeout: Duration) -> bool {
        self.wait_state(timeout, |st| st.refused >= n)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // Wake the accept thread, which then sees `shutdown` and ends (dropping the
        // listener). If the connect fails the listener is gone already.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        // No connection can be added any more.
        self.cut_all();
        let threads = std::mem::take(&mut self.shared.lock().threads);
        for t in threads {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;
