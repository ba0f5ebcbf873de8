//! The fault proxy with the real client in front of real servers: request counting, cut
//! after the k-th request, a dropped reply, stall/resume, redirect, block/unblock, and
//! cleanup on drop.
//!
//! The tests run one at a time (they share the machine with JVMs, and the cleanup test
//! counts the process's proxy threads and sockets).

use std::collections::HashSet;
use std::net::TcpStream;
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use zk_harness::fault_proxy::{live_proxy_threads, FaultKind};
use zk_harness::testing::{unique_path, wait_until, Seed};
use zk_harness::{four_letter, shared_server, FaultProxy, OpCode, Server, ServerOptions};
use zookeeper_mt::{CreateMode, Error, Op, SessionState, ZkFuture, ZooKeeper};

/// Upper bound of every wait; reached only when something is broken.
const WAIT: Duration = Duration::from_secs(20);

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn proxy_to_shared() -> FaultProxy {
    FaultProxy::start(shared_server().connect_string()).expect("proxy starts")
}

fn connect(hosts: &str, timeout: Duration) -> ZooKeeper {
    ZooKeeper::connect(hosts, timeout).unwrap_or_else(|e| panic!("connecting to {hosts}: {e}"))
}

/// Waits for `future` on a thread: the receiver can then be polled with several
/// deadlines (a `ZkFuture` is consumed by one bounded wait).
fn background<T: Send + 'static>(future: ZkFuture<T>) -> mpsc::Receiver<zookeeper_mt::Result<T>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(future.wait_timeout(WAIT));
    });
    rx
}

fn create(zk: &ZooKeeper, path: &str) -> zookeeper_mt::Result<String> {
    zk.create(path, b"", CreateMode::Persistent)
}

#[test]
fn requests_are_counted_per_operation_and_pings_are_not() {
    let _serial = serial();
    let proxy = proxy_to_shared();
    // A short session timeout makes the client ping often (every third of it).
    let zk = connect(&proxy.connect_string(), Duration::from_secs(2));
    let path = unique_path("count");

    let mark = proxy.mark();
    create(&zk, &path).unwrap();
    let sent = proxy.requests_since(mark);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].op == OpCode::CREATE || sent[0].op == OpCode::CREATE2,
        "{sent:?}"
    );
    assert!(sent[0].xid > 0);

    let mark = proxy.mark();
    assert!(zk.exists(&path).unwrap().is_some());
    let sent = proxy.requests_since(mark);
    assert_eq!(
        sent.iter().map(|r| r.op).collect::<Vec<_>>(),
        [OpCode::EXISTS]
    );

    let mark = proxy.mark();
    let child = format!("{path}/c");
    zk.multi(&[
        Op::create(&child, b"", CreateMode::Persistent),
        Op::delete(&child, -1),
    ])
    .unwrap();
    let sent = proxy.requests_since(mark);
    assert_eq!(
        sent.iter().map(|r| r.op).collect::<Vec<_>>(),
        [OpCode::MULTI]
    );
    // A fresh proxy: create, exists, multi.
    assert_eq!(proxy.requests_forwarded(), 3);

    // Idle: pings flow, no request is counted.
    let mark = proxy.mark();
    let pings = proxy.pings_forwarded();
    wait_until("two pings through the proxy", WAIT, || {
        proxy.pings_forwarded() >= pings + 2
    });
    assert_eq!(proxy.requests_since(mark), []);

    // Not ZooKeeper framing: forwarded as plain bytes.
    assert_eq!(
        four_letter(&proxy.connect_string(), "ruok", WAIT).unwrap(),
        "imok"
    );
    zk.delete(&path, None).unwrap();
}

#[test]
fn cut_after_the_kth_request_applies_it_and_the_session_survives() {
    let _serial = serial();
    let proxy = proxy_to_shared();
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    let session = zk.client_id().unwrap().session_id;
    let (a, b, c) = (
        unique_path("cut-a"),
        unique_path("cut-b"),
        unique_path("cut-c"),
    );
    let mark = proxy.mark();

    proxy.cut_after(2);
    assert!(proxy.is_armed());
    create(&zk, &a).expect("the first request is not cut");
    assert_eq!(create(&zk, &b), Err(Error::ConnectionLoss));
    let fired = proxy.wait_for_fired(1, WAIT).unwrap();
    assert!(!proxy.is_armed());
    assert_eq!(fired.len(), 1);
    let sent = proxy.requests_since(mark);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(fired[0].kind, FaultKind::CutAfterRequest);
    assert_eq!(fired[0].request, sent[1]);
    let reply = fired[0].reply.expect("the reply reached the proxy");
    assert_eq!(reply.err, 0, "the server applied the create");
    assert!(reply.zxid > 0);

    // The client reconnects through the proxy, to the same session.
    zk.wait_connected(WAIT).unwrap();
    assert_eq!(proxy.connections_accepted(), 2);
    assert_eq!(zk.client_id().unwrap().session_id, session);
    assert!(
        zk.exists(&b).unwrap().is_some(),
        "the cut write was applied"
    );
    assert_eq!(zk.exists(&b).unwrap().unwrap().czxid, reply.zxid);

    // Counting only creates: the exists calls in between do not count.
    proxy.cut_after_matching(1, |r| r.op == OpCode::CREATE || r.op == OpCode::CREATE2);
    assert!(zk.exists(&a).unwrap().is_some());
    assert_eq!(create(&zk, &c), Err(Error::ConnectionLoss));
    proxy.wait_for_fired(2, WAIT).unwrap();
    zk.wait_connected(WAIT).unwrap();
    assert!(zk.exists(&c).unwrap().is_some());
    for p in [&a, &b, &c] {
        zk.delete(p, None).unwrap();
    }
}

#[test]
fn a_dropped_reply_leaves_the_request_unanswered_until_the_next_reply() {
    let _serial = serial();
    let proxy = proxy_to_shared();
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    let path = unique_path("drop");

    proxy.drop_reply(1);
    let pending = background(zk.create_async(&path, b"", CreateMode::Persistent));
    let fired = proxy.wait_for_fired(1, WAIT).unwrap();
    assert_eq!(fired[0].kind, FaultKind::DropReply);
    assert_eq!(fired[0].reply.map(|r| r.err), Some(0));
    // The connection stays up and the request stays unanswered.
    assert!(pending.recv_timeout(Duration::from_millis(300)).is_err());
    assert_eq!(proxy.connections(), 1);

    // The next reply does not match the oldest pending request: the C client drops the
    // connection, fails both with ZRUNTIMEINCONSISTENCY, and reconnects.
    let next = zk.exists_async(&path);
    assert_eq!(next.wait_timeout(WAIT), Err(Error::RuntimeInconsistency));
    assert_eq!(
        pending.recv_timeout(WAIT).unwrap(),
        Err(Error::RuntimeInconsistency)
    );
    zk.wait_connected(WAIT).unwrap();
    assert!(
        zk.exists(&path).unwrap().is_some(),
        "the create was applied"
    );
    assert_eq!(proxy.connections_accepted(), 2);
    zk.delete(&path, None).unwrap();
}

#[test]
fn stall_holds_bytes_and_resume_delivers_them() {
    let _serial = serial();
    let proxy = proxy_to_shared();
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    let path = unique_path("stall");
    create(&zk, &path).unwrap();

    proxy.stall();
    assert!(proxy.is_stalled());
    let mark = proxy.mark();
    let held = background(zk.set_async(&path, b"held", None));
    assert!(held.recv_timeout(Duration::from_millis(500)).is_err());
    // The request reached the proxy and is queued there, not sent.
    wait_until("the request to reach the proxy", WAIT, || {
        proxy.requests_since(mark).len() == 1
    });
    let direct = connect(&shared_server().connect_string(), Duration::from_secs(10));
    assert_eq!(direct.get(&path).unwrap().0, b"");

    proxy.resume();
    assert!(!proxy.is_stalled());
    let stat = held
        .recv_timeout(WAIT)
        .unwrap()
        .expect("delivered after resume");
    assert_eq!(stat.version, 1);
    assert_eq!(direct.get(&path).unwrap().0, b"held");
    assert_eq!(
        proxy.connections_accepted(),
        1,
        "no reconnect: nothing was lost"
    );
    zk.delete(&path, None).unwrap();
}

/// The last zxid `server` applied (`Zxid:` of `srvr`).
fn zxid(server: &Server) -> i64 {
    let srvr = server.four_letter("srvr").unwrap();
    let hex = srvr
        .lines()
        .find_map(|l| l.strip_prefix("Zxid: 0x"))
        .unwrap_or_else(|| panic!("no zxid in {srvr}"));
    i64::from_str_radix(hex.trim(), 16).unwrap()
}

#[test]
fn redirect_sends_new_connections_to_another_server() {
    let _serial = serial();
    let shared = shared_server();
    let other = Server::start_with(&ServerOptions::for_tests()).expect("second server");
    let proxy = FaultProxy::start(other.connect_string()).unwrap();
    let old = connect(&proxy.connect_string(), Duration::from_secs(4));
    let events = old.session_events();
    let on_other = unique_path("redirect-other");
    create(&old, &on_other).unwrap();
    let on_shared = unique_path("redirect-shared");
    let direct_shared = connect(&shared.connect_string(), Duration::from_secs(10));
    create(&direct_shared, &on_shared).unwrap();

    proxy.redirect(shared.connect_string()).unwrap();
    assert_eq!(proxy.target().to_string(), shared.connect_string());
    let new = connect(&proxy.connect_string(), Duration::from_secs(10));
    assert!(
        new.exists(&on_shared).unwrap().is_some(),
        "the new client is on the shared server"
    );
    assert!(new.exists(&on_other).unwrap().is_none());
    // The open connection still goes to the other server.
    assert!(old.exists(&on_other).unwrap().is_some());

    // A server refuses a client that has seen a newer zxid than its own ("client must
    // try another server"): make sure the shared server is ahead of the other one.
    while zxid(shared) < zxid(&other) {
        direct_shared.set(&on_shared, b"", None).unwrap();
    }
    // Cut: the old client reconnects to the shared server, which does not know its
    // session.
    proxy.cut_all();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = events.recv_timeout(left).expect("a session event");
        if event.state == SessionState::Expired {
            break;
        }
    }
    assert!(proxy.connections_accepted() >= 3);
    direct_shared.delete(&on_shared, None).unwrap();
}

#[test]
fn block_refuses_new_connections_until_unblock() {
    let _serial = serial();
    // On another loopback address, as a client sees a different host.
    let ip = std::net::Ipv4Addr::new(127, 0, 0, 2).into();
    let proxy = FaultProxy::start_on(ip, shared_server().connect_string()).unwrap();
    assert_eq!(proxy.local_addr().ip(), ip);
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    let session = zk.client_id().unwrap().session_id;

    proxy.isolate();
    assert!(proxy.is_blocked());
    assert!(
        proxy.wait_for_refused(2, WAIT),
        "the client retried while blocked"
    );
    assert_eq!(proxy.connections(), 0);
    assert!(!zk.state().is_connected());

    proxy.unblock();
    zk.wait_connected(WAIT).unwrap();
    assert_eq!(zk.client_id().unwrap().session_id, session);
    assert!(zk.exists("/").unwrap().is_some());
    assert_eq!(proxy.connections_accepted(), 2);
}

/// Socket inodes of this process (`/proc/self/fd` links `socket:[N]`).
fn sockets() -> HashSet<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.display().to_string())
        .filter(|l| l.starts_with("socket:"))
        .collect()
}

#[test]
fn drop_joins_every_thread_and_closes_every_socket() {
    let _serial = serial();
    // Started (with its probe connections closed) before the snapshot.
    shared_server();
    // Other tests' proxies are gone (the tests run one at a time).
    assert_eq!(live_proxy_threads(), 0);
    let before = sockets();

    let proxy = proxy_to_shared();
    let addr = proxy.local_addr();
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    assert!(zk.exists("/").unwrap().is_some());
    assert_eq!(
        live_proxy_threads(),
        3,
        "accept thread + two per connection"
    );
    // Stalled with bytes held, to drop a proxy in its most tangled state.
    proxy.stall();
    let held = zk.exists_async("/");
    wait_until("the request to be held", WAIT, || {
        proxy.requests_forwarded() == 2
    });
    drop(proxy);
    assert_eq!(live_proxy_threads(), 0);
    assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    assert_eq!(held.wait_timeout(WAIT), Err(Error::ConnectionLoss));
    zk.close().unwrap();
    drop(zk);

    let left: Vec<String> = sockets().difference(&before).cloned().collect();
    assert!(left.is_empty(), "sockets left open: {left:?}");
}

/// Creates `<dir>/0` .. `<dir>/3`, stopping at the first error.
fn four_creates(zk: &ZooKeeper, dir: &str) -> zookeeper_mt::Result<()> {
    for i in 0..4 {
        create(zk, &format!("{dir}/{i}"))?;
    }
    Ok(())
}

#[test]
fn a_seeded_cut_point_is_exact() {
    let _serial = serial();
    let seed = Seed::from_env_or_random("ZK_FAULT_SEED").unwrap();
    let mut rng = seed.rng();
    let proxy = proxy_to_shared();
    let zk = connect(&proxy.connect_string(), Duration::from_secs(10));
    let base = unique_path("seeded");
    let (dry, run) = (format!("{base}/dry"), format!("{base}/run"));
    for p in [&base, &dry, &run] {
        create(&zk, p).unwrap();
    }

    // Learn the operation's requests without faults.
    let mark = proxy.mark();
    four_creates(&zk, &dry).unwrap();
    let n = proxy.requests_since(mark).len() as u64;
    assert_eq!(n, 4);

    let k = 1 + rng.below(n);
    eprintln!("cutting at request {k} of {n}");
    proxy.cut_after(k);
    assert_eq!(four_creates(&zk, &run), Err(Error::ConnectionLoss));
    zk.wait_connected(WAIT).unwrap();
    // Requests 1..=k were applied (the k-th without the client knowing), none after.
    let mut children = zk.get_children(&run).unwrap();
    children.sort();
    let expected: Vec<String> = (0..k).map(|i| i.to_string()).collect();
    assert_eq!(children, expected, "seed={seed}");

    for dir in [&dry, &run] {
        for child in zk.get_children(dir).unwrap() {
            zk.delete(&format!("{dir}/{child}"), None).unwrap();
        }
        zk.delete(dir, None).unwrap();
    }
    zk.delete(&base, None).unwrap();
}
