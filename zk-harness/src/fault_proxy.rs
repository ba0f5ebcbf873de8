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
/// use zk_harness::{FaultProxy, OpCode};
///
/// let server = zk_harness::shared_server();
/// let proxy = FaultProxy::start(server.connect_string())?;
/// // Connect a client to `proxy.connect_string()`, then:
/// let mark = proxy.mark();
/// // ... run an operation fault-free ...
/// let sent = proxy.requests_since(mark);
/// println!("the operation sends {} requests: {sent:?}", sent.len());
/// proxy.cut_after(2); // the 2nd request from now is applied but its reply is lost
/// # Ok::<(), zk_harness::HarnessError>(())
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

struct Shared {
    protocol: Protocol,
    state: Mutex<State>,
    /// Signalled when a fault fires or a connection opens or closes.
    changed: Condvar,
    stalled: AtomicBool,
    hold_inbound: AtomicBool,
    shutdown: AtomicBool,
    pings: AtomicU64,
    /// Bytes handed on toward clients (replies, events, handshakes).
    to_clients: AtomicU64,
}

struct State {
    target: SocketAddr,
    blocked: bool,
    conns: Vec<Arc<Conn>>,
    threads: Vec<JoinHandle<()>>,
    next_conn: u64,
    refused: u64,
    requests: Vec<Request>,
    trigger: Option<Trigger>,
    fired: Vec<FiredFault>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conns(&self) -> Vec<Arc<Conn>> {
        self.lock().conns.clone()
    }
}

/// Direction of a byte stream through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    ToServer,
    ToClient,
}

struct Outbound {
    stream: TcpStream,
    /// Frames held back by a stall (or by `hold_inbound`), forwarded in order later.
    held: VecDeque<Vec<u8>>,
    /// The source ended while frames were held: close once they are flushed.
    eof_held: bool,
}

struct PendingFault {
    kind: FaultKind,
    request: Request,
}

struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    to_server: Mutex<Outbound>,
    to_client: Mutex<Outbound>,
    /// Faults waiting for the reply of their request, in request order.
    pending: Mutex<Vec<PendingFault>>,
    /// A cut is armed on this connection: later client frames are not forwarded.
    frozen: AtomicBool,
    closed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Conn {
    fn out(&self, dir: Dir) -> MutexGuard<'_, Outbound> {
        match dir {
            Dir::ToServer => lock(&self.to_server),
            Dir::ToClient => lock(&self.to_client),
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

fn resolve(target: impl ToSocketAddrs) -> Result<SocketAddr> {
    target
        .to_socket_addrs()
        .map_err(|e| HarnessError::io("resolving the proxy target", e))?
        .next()
        .ok_or_else(|| HarnessError::InvalidArgument("the proxy target has no address".into()))
}

/// The first address of a connect string (`"host:port,host:port/chroot"`).
fn first_of_connect_string(target: &str) -> Result<SocketAddr> {
    let hosts = target.split('/').next().unwrap_or(target);
    let first = hosts.split(',').next().unwrap_or(hosts).trim();
    resolve(first)
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

/// Spawns a thread counted in [`live_proxy_threads`].
fn spawn_counted(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    struct Count;
    impl Drop for Count {
        fn drop(&mut self) {
            LIVE_THREADS.fetch_sub(1, Ordering::SeqCst);
        }
    }
    LIVE_THREADS.fetch_add(1, Ordering::SeqCst);
    let count = Count;
    thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _count = count;
            f();
        })
    // On a spawn error the closure (and `count`) is dropped: the count is restored.
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for incoming in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let client = match incoming {
            Ok(client) => client,
            Err(_) => {
                // E.g. out of file descriptors: do not spin.
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let (blocked, target) = {
            let st = shared.lock();
            (st.blocked, st.target)
        };
        let refuse = |shared: &Shared| {
            shared.lock().refused += 1;
            shared.changed.notify_all();
        };
        if blocked {
            let _ = client.shutdown(Shutdown::Both);
            refuse(&shared);
            continue;
        }
        let server = match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT) {
            Ok(server) => server,
            Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                refuse(&shared);
                continue;
            }
        };
        // On failure the sockets are dropped, which closes them.
        if open_conn(&shared, client, server).is_err() {
            refuse(&shared);
        }
    }
}

fn open_conn(shared: &Arc<Shared>, client: TcpStream, server: TcpStream) -> io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let mut st = shared.lock();
    if shared.shutdown.load(Ordering::SeqCst) {
        return Err(io::Error::other("proxy shut down"));
    }
    let conn = Arc::new(Conn {
        id: st.next_conn,
        to_server: Mutex::new(Outbound {
            stream: server.try_clone()?,
            held: VecDeque::new(),
            eof_held: false,
        }),
        to_client: Mutex::new(Outbound {
            stream: client.try_clone()?,
            held: VecDeque::new(),
            eof_held: false,
        }),
        client,
        server,
        pending: Mutex::new(Vec::new()),
        frozen: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    let from_client = conn.client.try_clone()?;
    let from_server = conn.server.try_clone()?;
    // Reap the threads of connections that are gone.
    let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut st.threads)
        .into_iter()
        .partition(|t| t.is_finished());
    st.threads = running;
    for t in done {
        let _ = t.join();
    }
    for (dir, source) in [(Dir::ToServer, from_client), (Dir::ToClient, from_server)] {
        let (c, s) = (Arc::clone(&conn), Arc::clone(shared));
        match spawn_counted("fault-proxy-pump", move || pump(&s, &c, dir, source)) {
            Ok(t) => st.threads.push(t),
            Err(e) => {
                drop(st);
                close_conn(shared, &conn);
                return Err(e);
            }
        }
    }
    st.next_conn += 1;
    st.conns.push(conn);
    drop(st);
    shared.changed.notify_all();
    Ok(())
}

/// Closes both sockets of `conn` and forgets it. Faults still waiting for a reply on it
/// are recorded as fired without a reply.
fn close_conn(shared: &Shared, conn: &Arc<Conn>) {
    if conn.closed.swap(true, Ordering::SeqCst) {
        return;
    }
    let _ = conn.client.shutdown(Shutdown::Both);
    let _ = conn.server.shutdown(Shutdown::Both);
    let orphaned = std::mem::take(&mut *lock(&conn.pending));
    let mut st = shared.lock();
    st.conns.retain(|c| !Arc::ptr_eq(c, conn));
    st.fired.extend(orphaned.into_iter().map(|p| FiredFault {
        kind: p.kind,
        request: p.request,
        reply: None,
    }));
    drop(st);
    shared.changed.notify_all();
}

fn may_flush(shared: &Shared, dir: Dir) -> bool {
    let held_inbound = dir == Dir::ToClient && shared.hold_inbound.load(Ordering::SeqCst);
    !shared.stalled.load(Ordering::SeqCst) && !held_inbound
}

fn flush_held(out: &mut Outbound) -> io::Result<()> {
    while let Some(bytes) = out.held.pop_front() {
        out.stream.write_all(&bytes)?;
    }
    Ok(())
}

/// Forwards `bytes` in direction `dir` unless held. `passes` marks a frame that goes
/// through while inbound frames are held (quorum pings and revalidations). Returns false
/// if the connection is broken.
fn forward(shared: &Shared, conn: &Conn, dir: Dir, bytes: Vec<u8>, passes: bool) -> bool {
    let mut out = conn.out(dir);
    if conn.is_closed() {
        return false;
    }
    if dir == Dir::ToClient {
        shared
            .to_clients
            .fetch_add(bytes.len() as u64, Ordering::SeqCst);
    }
    if shared.stalled.load(Ordering::SeqCst) {
        out.held.push_back(bytes);
        return true;
    }
    let inbound_held = dir == Dir::ToClient && shared.hold_inbound.load(Ordering::SeqCst);
    if inbound_held && !passes {
        out.held.push_back(bytes);
        return true;
    }
    if !inbound_held && flush_held(&mut out).is_err() {
        return false;
    }
    out.stream.write_all(&bytes).is_ok()
}

fn pump(shared: &Shared, conn: &Arc<Conn>, dir: Dir, mut source: TcpStream) {
    let framing = match (shared.protocol, dir) {
        (Protocol::Client, Dir::ToServer) => Framing::Requests,
        (Protocol::Client, Dir::ToClient) => Framing::Replies,
        (Protocol::Quorum, Dir::ToClient) => Framing::Quorum,
        _ => Framing::Raw,
    };
    let mut parser = Parser::new(framing);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        parser.push(&buf[..n]);
        while let Some(unit) = parser.next_unit() {
            if !handle_unit(shared, conn, dir, unit) {
                close_conn(shared, conn);
                return;
            }
        }
    }
    // The source ended (or the connection was closed). A trailing partial frame is
    // forwarded as is.
    if let Some(rest) = parser.take_rest() {
        let _ = forward(shared, conn, dir, rest, false);
    }
    // During a stall the end of the stream is held like its bytes.
    let held = {
        let mut out = conn.out(dir);
        if out.held.is_empty() && may_flush(shared, dir) {
            false
        } else {
            out.eof_held = true;
            true
        }
    };
    if !held {
        close_conn(shared, conn);
    }
}

/// Handles one frame; false to close the connection.
fn handle_unit(shared: &Shared, conn: &Conn, dir: Dir, unit: Unit) -> bool {
    match unit.kind {
        UnitKind::Ping => {
            if dir == Dir::ToServer {
                shared.pings.fetch_add(1, Ordering::SeqCst);
            }
            forward(shared, conn, dir, unit.bytes, true)
        }
        UnitKind::Request { xid, op } => {
            if conn.frozen.load(Ordering::SeqCst) {
                // A cut is pending on this connection: nothing after the cut request
                // reaches the server.
                return true;
            }
            let request = Request {
                connection: conn.id,
                xid,
                op: OpCode(op),
            };
            let fire = {
                let mut st = shared.lock();
                st.requests.push(request);
                let fire = match st.trigger.as_mut() {
                    Some(t) if t.filter.as_ref().map_or(true, |f| f(&request)) => {
                        t.remaining -= 1;
                        (t.remaining == 0).then_some(t.kind)
                    }
                    _ => None,
                };
                if fire.is_some() {
                    st.trigger = None;
                }
                fire
            };
            if let Some(kind) = fire {
                // Registered before the request is forwarded, so the reply cannot
                // overtake it.
                lock(&conn.pending).push(PendingFault { kind, request });
                if kind == FaultKind::CutAfterRequest {
                    conn.frozen.store(true, Ordering::SeqCst);
                }
            }
            forward(shared, conn, dir, unit.bytes, false)
        }
        UnitKind::Reply(header) => {
            let matched = {
                let mut pending = lock(&conn.pending);
                let i = pending.iter().position(|p| p.request.xid == header.xid);
                i.map(|i| pending.remove(i))
            };
            match matched {
                None => forward(shared, conn, dir, unit.bytes, false),
                Some(p) => {
                    shared.lock().fired.push(FiredFault {
                        kind: p.kind,
                        request: p.request,
                        reply: Some(header),
                    });
                    shared.changed.notify_all();
                    // Cut: close without forwarding this reply or anything after it.
                    p.kind == FaultKind::DropReply
                }
            }
        }
        UnitKind::Quorum { passes } => forward(shared, conn, dir, unit.bytes, passes),
        UnitKind::Other => forward(shared, conn, dir, unit.bytes, false),
    }
}

// ---------------------------------------------------------------- framing

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Client to server: ConnectRequest, then RequestHeader frames.
    Requests,
    /// Server to client: ConnectResponse, then ReplyHeader frames.
    Replies,
    /// Leader to learner: QuorumPackets (not length-prefixed).
    Quorum,
    /// Unparsed.
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitKind {
    /// Handshake frames, notifications, unparsed bytes, frames too short for a header.
    Other,
    Ping,
    Request {
        xid: i32,
        op: i32,
    },
    Reply(ReplyHeader),
    /// A QuorumPacket; `passes` for pings and revalidations.
    Quorum {
        passes: bool,
    },
}

struct Unit {
    kind: UnitKind,
    bytes: Vec<u8>,
}

/// Splits a byte stream into frames.
struct Parser {
    framing: Framing,
    buf: Vec<u8>,
    handshake_done: bool,
}

/// Quorum packet types that pass while the leader stream is held.
const QUORUM_PING: i32 = 5;
const QUORUM_REVALIDATE: i32 = 6;
/// After SNAP the leader writes a serialized snapshot that is not QuorumPacket framing.
const QUORUM_SNAP: i32 = 15;

fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(i64::from_be_bytes(a))
}

/// Outcome of measuring the next frame in a buffer.
enum Measure {
    /// The frame is this many bytes long.
    Complete(usize),
    /// More bytes are needed.
    Incomplete,
    /// Not this framing.
    Invalid,
}

/// A jute length-prefixed field (buffer or string) at `at`: -1 is null. Returns the end.
fn jute_field(b: &[u8], at: usize) -> std::result::Result<usize, Measure> {
    let len = be_i32(b, at).ok_or(Measure::Incomplete)?;
    if len == -1 {
        return Ok(at + 4);
    }
    if len < 0 || len as usize > MAX_FRAME {
        return Err(Measure::Invalid);
    }
    Ok(at + 4 + len as usize)
}

/// Length of the QuorumPacket at the start of `b`: type i32, zxid i64, data buffer,
/// authinfo vector of Id {scheme string, id string}.
fn measure_quorum_packet(b: &[u8]) -> Measure {
    let walk = || -> std::result::Result<usize, Measure> {
        let mut at = jute_field(b, 12)?;
        let count = be_i32(b, at).ok_or(Measure::Incomplete)?;
        at += 4;
        if !(-1..=1 << 20).contains(&count) {
            return Err(Measure::Invalid);
        }
        for _ in 0..count.max(0) {
            at = jute_field(b, at)?;
            at = jute_field(b, at)?;
        }
        Ok(at)
    };
    match walk() {
        Ok(end) if end <= b.len() => Measure::Complete(end),
        Ok(_) => Measure::Incomplete,
        Err(m) => m,
    }
}

impl Parser {
    fn new(framing: Framing) -> Parser {
        Parser {
            framing,
            buf: Vec::new(),
            handshake_done: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    fn take_rest(&mut self) -> Option<Vec<u8>> {
        (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf))
    }

    fn split(&mut self, len: usize, kind: UnitKind) -> Unit {
        let rest = self.buf.split_off(len);
        let bytes = std::mem::replace(&mut self.buf, rest);
        Unit { kind, bytes }
    }

    fn next_unit(&mut self) -> Option<Unit> {
        if self.buf.is_empty() {
            return None;
        }
        let measure = match self.framing {
            Framing::Raw => Measure::Invalid,
            Framing::Quorum => measure_quorum_packet(&self.buf),
            Framing::Requests | Framing::Replies => match be_i32(&self.buf, 0) {
                None => Measure::Incomplete,
                Some(len) if len < 0 || len as usize > MAX_FRAME => Measure::Invalid,
                Some(len) if self.buf.len() < 4 + len as usize => Measure::Incomplete,
                Some(len) => Measure::Complete(4 + len as usize),
            },
        };
        let len = match measure {
            Measure::Incomplete => return None,
            Measure::Invalid => {
                // Not (or no longer) this framing: forward the rest of the stream as is.
                self.framing = Framing::Raw;
                let bytes = std::mem::take(&mut self.buf);
                return Some(Unit {
                    kind: UnitKind::Other,
                    bytes,
                });
            }
            Measure::Complete(len) => len,
        };
        let b = &self.buf;
        let kind = match self.framing {
            Framing::Quorum => {
                let typ = be_i32(b, 0).unwrap_or(0);
                if typ == QUORUM_SNAP {
                    self.framing = Framing::Raw;
                }
                UnitKind::Quorum {
                    passes: typ == QUORUM_PING || typ == QUORUM_REVALIDATE,
                }
            }
            _ if !self.handshake_done => {
                self.handshake_done = true;
                UnitKind::Other
            }
            Framing::Requests => match (be_i32(b, 4), be_i32(b, 8)) {
                (Some(PING_XID), Some(_)) => UnitKind::Ping,
                (Some(xid), Some(op)) => UnitKind::Request { xid, op },
                _ => UnitKind::Other,
            },
            Framing::Replies => match (be_i32(b, 4), be_i64(b, 8), be_i32(b, 16)) {
                (Some(PING_XID), _, _) => UnitKind::Ping,
                (Some(NOTIFICATION_XID), _, _) => UnitKind::Other,
                (Some(xid), Some(zxid), Some(err)) if len >= 20 => {
                    UnitKind::Reply(ReplyHeader { xid, zxid, err })
                }
                _ => UnitKind::Other,
            },
            Framing::Raw => UnitKind::Other,
        };
        Some(self.split(len, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    fn request(xid: i32, op: i32, payload: &[u8]) -> Vec<u8> {
        let mut body = xid.to_be_bytes().to_vec();
        body.extend_from_slice(&op.to_be_bytes());
        body.extend_from_slice(payload);
        frame(&body)
    }

    fn reply(xid: i32, zxid: i64, err: i32) -> Vec<u8> {
        let mut body = xid.to_be_bytes().to_vec();
        body.extend_from_slice(&zxid.to_be_bytes());
        body.extend_from_slice(&err.to_be_bytes());
        body.extend_from_slice(b"payload");
        frame(&body)
    }

    #[test]
    fn requests_split_exactly_across_arbitrary_reads() {
        let mut stream = frame(b"connect-request");
        stream.extend(request(1, 1, b"/a"));
        stream.extend(request(PING_XID, 11, b""));
        stream.extend(request(2, 3, b"/b"));
        for chunk in [1, 3, 5, 7, stream.len()] {
            let mut p = Parser::new(Framing::Requests);
            let mut kinds = Vec::new();
            let mut total = 0;
            for piece in stream.chunks(chunk) {
                p.push(piece);
                while let Some(u) = p.next_unit() {
                    total += u.bytes.len();
                    kinds.push(u.kind);
                }
            }
            assert_eq!(total, stream.len());
            assert_eq!(
                kinds,
                vec![
                    UnitKind::Other,
                    UnitKind::Request { xid: 1, op: 1 },
                    UnitKind::Ping,
                    UnitKind::Request { xid: 2, op: 3 },
                ],
                "chunk size {chunk}"
            );
        }
    }

    #[test]
    fn replies_in_one_read_are_separate_units() {
        let mut stream = frame(b"connect-response");
        stream.extend(reply(PING_XID, 5, 0));
        stream.extend(reply(7, 0x1_0000_0003, 0));
        stream.extend(reply(NOTIFICATION_XID, 0, 0));
        stream.extend(reply(8, 0x1_0000_0003, -101));
        let mut p = Parser::new(Framing::Replies);
        p.push(&stream);
        let kinds: Vec<UnitKind> = std::iter::from_fn(|| p.next_unit().map(|u| u.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                UnitKind::Other,
                UnitKind::Ping,
                UnitKind::Reply(ReplyHeader {
                    xid: 7,
                    zxid: 0x1_0000_0003,
                    err: 0
                }),
                UnitKind::Other,
                UnitKind::Reply(ReplyHeader {
                    xid: 8,
                    zxid: 0x1_0000_0003,
                    err: -101
                }),
            ]
        );
    }

    #[test]
    fn a_four_letter_word_falls_back_to_raw() {
        let mut p = Parser::new(Framing::Requests);
        p.push(b"ruok");
        let u = p.next_unit().expect("a unit");
        assert_eq!(u.bytes, b"ruok");
        assert_eq!(u.kind, UnitKind::Other);
        p.push(b"more");
        assert_eq!(p.next_unit().unwrap().bytes, b"more");
    }

    fn quorum_packet(typ: i32, data: Option<&[u8]>, auth: &[(&str, &str)]) -> Vec<u8> {
        let mut b = typ.to_be_bytes().to_vec();
        b.extend_from_slice(&0x42i64.to_be_bytes());
        match data {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(d) => {
                b.extend_from_slice(&(d.len() as i32).to_be_bytes());
                b.extend_from_slice(d);
            }
        }
        b.extend_from_slice(&(auth.len() as i32).to_be_bytes());
        for (scheme, id) in auth {
            for s in [scheme, id] {
                b.extend_from_slice(&(s.len() as i32).to_be_bytes());
                b.extend_from_slice(s.as_bytes());
            }
        }
        b
    }

    #[test]
    fn quorum_packets_are_measured_and_snap_switches_to_raw() {
        let mut stream = quorum_packet(2, Some(b"proposal"), &[]);
        stream.extend(quorum_packet(QUORUM_PING, None, &[("digest", "u:x")]));
        stream.extend(quorum_packet(4, None, &[]));
        stream.extend(quorum_packet(QUORUM_SNAP, None, &[]));
        stream.extend(b"snapshot bytes that are not packets");
        let mut p = Parser::new(Framing::Quorum);
        let mut kinds = Vec::new();
        for byte in stream.chunks(1) {
            p.push(byte);
            while let Some(u) = p.next_unit() {
                kinds.push((u.kind, u.bytes.len()));
            }
        }
        assert_eq!(kinds[0].0, UnitKind::Quorum { passes: false });
        assert_eq!(kinds[1].0, UnitKind::Quorum { passes: true });
        assert_eq!(kinds[2].0, UnitKind::Quorum { passes: false });
        assert_eq!(kinds[3].0, UnitKind::Quorum { passes: false });
        assert!(kinds[4..].iter().all(|(k, _)| *k == UnitKind::Other));
        let total: usize = kinds.iter().map(|(_, n)| n).sum();
        assert_eq!(total, stream.len());
    }

    #[test]
    fn op_codes_have_names() {
        assert_eq!(OpCode::CREATE.to_string(), "create");
        assert_eq!(OpCode(999).to_string(), "op999");
        assert!(OpCode::MULTI.is_write());
        assert!(!OpCode::EXISTS.is_write());
    }
}
