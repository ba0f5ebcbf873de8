//! The forwarding machinery: connections, their pumps, holding and releasing bytes,
//! and firing the armed fault on the request it names.

use super::*;

pub(super) struct Shared {
    pub(super) protocol: Protocol,
    pub(super) state: Mutex<State>,
    /// Signalled when a fault fires or a connection opens or closes.
    pub(super) changed: Condvar,
    pub(super) stalled: AtomicBool,
    pub(super) hold_inbound: AtomicBool,
    pub(super) shutdown: AtomicBool,
    pub(super) pings: AtomicU64,
    /// Bytes handed on toward clients (replies, events, handshakes).
    pub(super) to_clients: AtomicU64,
}

pub(super) struct State {
    pub(super) target: SocketAddr,
    pub(super) blocked: bool,
    pub(super) conns: Vec<Arc<Conn>>,
    pub(super) threads: Vec<JoinHandle<()>>,
    pub(super) next_conn: u64,
    pub(super) refused: u64,
    pub(super) requests: Vec<Request>,
    pub(super) trigger: Option<Trigger>,
    pub(super) fired: Vec<FiredFault>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn conns(&self) -> Vec<Arc<Conn>> {
        self.lock().conns.clone()
    }
}

/// Direction of a byte stream through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    ToServer,
    ToClient,
}

pub(super) struct Outbound {
    pub(super) stream: TcpStream,
    /// Frames held back by a stall (or by `hold_inbound`), forwarded in order later.
    pub(super) held: VecDeque<Vec<u8>>,
    /// The source ended while frames were held: close once they are flushed.
    pub(super) eof_held: bool,
}

pub(super) struct PendingFault {
    pub(super) kind: FaultKind,
    pub(super) request: Request,
}

pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) client: TcpStream,
    pub(super) server: TcpStream,
    pub(super) to_server: Mutex<Outbound>,
    pub(super) to_client: Mutex<Outbound>,
    /// Faults waiting for the reply of their request, in request order.
    pub(super) pending: Mutex<Vec<PendingFault>>,
    /// A cut is armed on this connection: later client frames are not forwarded.
    pub(super) frozen: AtomicBool,
    pub(super) closed: AtomicBool,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Conn {
    pub(super) fn out(&self, dir: Dir) -> MutexGuard<'_, Outbound> {
        match dir {
            Dir::ToServer => lock(&self.to_server),
            Dir::ToClient => lock(&self.to_client),
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

pub(super) fn resolve(target: impl ToSocketAddrs) -> Result<SocketAddr> {
    target
        .to_socket_addrs()
        .map_err(|e| HarnessError::io("resolving the proxy target", e))?
        .next()
        .ok_or_else(|| HarnessError::InvalidArgument("the proxy target has no address".into()))
}

/// The first address of a connect string (`"host:port,host:port/chroot"`).
pub(super) fn first_of_connect_string(target: &str) -> Result<SocketAddr> {
    let hosts = target.split('/').next().unwrap_or(target);
    let first = hosts.split(',').next().unwrap_or(hosts).trim();
    resolve(first)
}

/// Spawns a thread counted in [`live_proxy_threads`].
pub(super) fn spawn_counted(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<()>> {
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

pub(super) fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
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

pub(super) fn open_conn(
    shared: &Arc<Shared>,
    client: TcpStream,
    server: TcpStream,
) -> io::Result<()> {
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
pub(super) fn close_conn(shared: &Shared, conn: &Arc<Conn>) {
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

pub(super) fn may_flush(shared: &Shared, dir: Dir) -> bool {
    let held_inbound = dir == Dir::ToClient && shared.hold_inbound.load(Ordering::SeqCst);
    !shared.stalled.load(Ordering::SeqCst) && !held_inbound
}

pub(super) fn flush_held(out: &mut Outbound) -> io::Result<()> {
    while let Some(bytes) = out.held.pop_front() {
        out.stream.write_all(&bytes)?;
    }
    Ok(())
}

/// Forwards `bytes` in direction `dir` unless held. `passes` marks a frame that goes
/// through while inbound frames are held (quorum pings and revalidations). Returns false
/// if the connection is broken.
pub(super) fn forward(
    shared: &Shared,
    conn: &Conn,
    dir: Dir,
    bytes: Vec<u8>,
    passes: bool,
) -> bool {
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

pub(super) fn pump(shared: &Shared, conn: &Arc<Conn>, dir: Dir, mut source: TcpStream) {
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
pub(super) fn handle_unit(shared: &Shared, conn: &Conn, dir: Dir, unit: Unit) -> bool {
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
                    Some(t) if t.filter.as_ref().is_none_or(|f| f(&request)) => {
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
