//! Sessions: resuming with a saved client id, forced expiry (and everything that must
//! follow it), connect failures, chroots, timeouts, accessors.
//!
//! A client behind a [`Proxy`] can be cut off from the (shared) server without stopping
//! it, so another handle can take its session over deterministically.

mod common;

use common::{connect, create, create_mode, hosts, unique, wait_for_state, Proxy, WAIT};
use std::time::{Duration, Instant};
use zookeeper_mt::{ClientId, CreateMode, Error, EventType, SessionState, ZooKeeper};

fn connect_via(proxy: &Proxy, timeout: Duration) -> ZooKeeper {
    ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(timeout)
        .connect()
        .unwrap()
}

#[test]
fn accessors_of_a_live_session() {
    let zk = connect();
    assert_eq!(zk.state(), SessionState::Connected);
    assert!(!zk.is_unrecoverable());
    zk.wait_connected(Duration::ZERO).unwrap();
    let id = zk.client_id().unwrap();
    assert_ne!(id.session_id, 0);
    assert_ne!(id.password, [0; 16]);
    // The password is a credential: Debug does not show it.
    let shown = format!("{id:?}");
    assert!(shown.contains(&format!("{:#x}", id.session_id)), "{shown}");
    assert!(!shown.contains(&format!("{:?}", id.password)), "{shown}");
    assert_eq!(zk.current_server().unwrap(), Some(hosts()));
    assert_eq!(
        zk.connected_host().unwrap(),
        Some(hosts().parse().unwrap()),
        "the socket's peer is the server"
    );
    assert!(format!("{zk:?}").contains("Connected"));
    // Two sessions differ.
    assert_ne!(connect().client_id().unwrap().session_id, id.session_id);
}

#[test]
fn session_timeout_is_negotiated() {
    let asked = |timeout: Duration| {
        ZooKeeper::connect(&hosts(), timeout)
            .unwrap()
            .session_timeout()
            .unwrap()
    };
    // Inside the server's bounds (2 to 20 ticks, whatever the tick): granted as asked.
    assert_eq!(asked(Duration::from_secs(4)), Duration::from_secs(4));
    // Outside: clamped to the bounds.
    let low = asked(Duration::from_millis(100));
    assert!(low > Duration::from_millis(100), "{low:?}");
    let high = asked(Duration::from_secs(600));
    assert!(high < Duration::from_secs(600), "{high:?}");
}

#[test]
fn resume_a_session_with_its_client_id() {
    let proxy = Proxy::start(&hosts());
    let first = connect_via(&proxy, Duration::from_secs(10));
    let observer = connect();
    let ephemeral = unique("resume");
    create_mode(&first, &ephemeral, b"mine", CreateMode::Ephemeral);
    let id = first.client_id().unwrap();
    let events = first.session_events();

    // Cut the first handle off, then take its session over from a second one.
    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);
    let resumed = ZooKeeper::builder(&hosts())
        .session(id)
        .session_timeout(Duration::from_secs(10))
        .connect()
        .unwrap();
    assert_eq!(resumed.client_id().unwrap(), id, "same id and password");
    // The ephemeral survived and belongs to the resumed handle's session.
    let stat = resumed
        .exists(&ephemeral)
        .unwrap()
        .expect("ephemeral survived");
    assert_eq!(stat.ephemeral_owner, id.session_id);
    let second = format!("{ephemeral}-2");
    create_mode(&resumed, &second, b"", CreateMode::Ephemeral);
    assert_eq!(
        observer.exists(&second).unwrap().unwrap().ephemeral_owner,
        id.session_id
    );

    // Closing the cut-off handle cannot reach the server: the session lives on.
    first.close().unwrap();
    assert_eq!(resumed.get(&ephemeral).unwrap().0, b"mine");
    assert!(resumed.state().is_connected());

    // Closing the resumed handle ends the session: both ephemerals go.
    let (_, deleted) = observer.exists_watch(&ephemeral).unwrap();
    resumed.close().unwrap();
    assert_eq!(
        deleted.wait_timeout(WAIT).unwrap().event_type,
        EventType::NodeDeleted
    );
    assert_eq!(observer.exists(&second).unwrap(), None);
}

#[test]
fn resume_with_a_wrong_password_or_unknown_id_fails() {
    let zk = connect();
    let id = zk.client_id().unwrap();
    let mut wrong = id;
    wrong.password[0] ^= 0xff;
    let result = ZooKeeper::builder(&hosts())
        .session(wrong)
        .connect_timeout(WAIT)
        .connect();
    assert_eq!(result.unwrap_err(), Error::SessionExpired);
    // The real session was not disturbed: still valid (a loaded machine may drop its
    // connection for a moment, which it rides out).
    loop {
        match zk.exists("/") {
            Ok(_) => break,
            Err(e) if e.is_connection_loss() => zk.wait_connected(WAIT).unwrap(),
            Err(e) => panic!("the real session was disturbed: {e}"),
        }
    }

    let unknown = ClientId {
        session_id: 0x7fff_0000_dead_beef,
        password: [7; 16],
    };
    let result = ZooKeeper::builder(&hosts())
        .session(unknown)
        .connect_timeout(WAIT)
        .connect();
    assert_eq!(result.unwrap_err(), Error::SessionExpired);
}

#[test]
fn forced_expiry_ends_everything() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(6));
    let observer = connect();
    let base = unique("expiry");
    create(&zk, &base, b"");
    let ephemeral = format!("{base}/eph");
    create_mode(&zk, &ephemeral, b"", CreateMode::Ephemeral);
    let (_, on_missing) = zk.exists_watch(&format!("{base}/missing")).unwrap();
    let (_, _, on_data) = zk.get_watch(&base).unwrap();
    let (_, on_children) = zk.get_children_watch(&base).unwrap();
    assert_eq!(zk.live_contexts(), 3);
    let events = zk.session_events();
    let id = zk.client_id().unwrap();

    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);
    // Connection loss alone does not consume watches.
    assert_eq!(on_data.try_get(), Ok(None));

    // Another handle with the same id and password takes the session and closes it.
    let thief = ZooKeeper::builder(&hosts()).session(id).connect().unwrap();
    assert_eq!(thief.client_id().unwrap().session_id, id.session_id);
    thief.close().unwrap();
    assert_eq!(observer.exists(&ephemeral).unwrap(), None);

    // When the first handle gets through again, the server tells it the session is gone.
    proxy.unblock();
    let seen = wait_for_state(&events, SessionState::Expired, WAIT);
    let last = seen.last().unwrap();
    assert_eq!(last.event_type, EventType::Session);
    assert_eq!(zk.state(), SessionState::Expired);
    assert!(zk.is_unrecoverable());

    // Every pending watch got a final Session/Expired event, then ended.
    for watch in [&on_missing, &on_data, &on_children] {
        let event = watch.wait_timeout(WAIT).expect("final event");
        assert_eq!(event.event_type, EventType::Session);
        assert_eq!(event.state, SessionState::Expired);
        assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
    }
    assert_eq!(zk.live_contexts(), 0);

    // Later calls fail at once with SessionExpired.
    assert_eq!(zk.get(&base).unwrap_err(), Error::SessionExpired);
    assert_eq!(
        zk.create(&base, b"", CreateMode::Persistent).unwrap_err(),
        Error::SessionExpired
    );
    assert_eq!(
        common::block_on(zk.exists_async(&base)).unwrap_err(),
        Error::SessionExpired
    );
    assert_eq!(zk.exists_watch(&base).unwrap_err(), Error::SessionExpired);
    assert_eq!(
        zk.wait_connected(Duration::from_millis(10)).unwrap_err(),
        Error::SessionExpired
    );
    assert!(Error::SessionExpired.is_session_terminal());
    assert_eq!(zk.live_contexts(), 0);

    // Closing an expired handle works, and is final.
    zk.close().unwrap();
    assert_eq!(zk.get(&base).unwrap_err(), Error::Closed);
    common::wait_for_stream_end(&events, WAIT);
}

#[test]
fn requests_while_cut_off_fail_with_connection_loss() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(10));
    let path = unique("cutoff");
    create(&zk, &path, b"v");
    let events = zk.session_events();
    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);

    // The C client fails queued requests on each failed connection attempt: blocking
    // calls return ConnectionLoss instead of hanging.
    let started = Instant::now();
    let error = zk.get(&path).unwrap_err();
    assert_eq!(error, Error::ConnectionLoss);
    assert!(error.is_connection_loss() && error.is_retryable());
    assert!(started.elapsed() < WAIT);
    assert!(zk.wait_connected(Duration::from_millis(50)).is_err());

    // Reconnects with the same session when the way is open again.
    proxy.unblock();
    wait_for_state(&events, SessionState::Connected, WAIT);
    zk.wait_connected(WAIT).unwrap();
    assert_eq!(zk.get(&path).unwrap().0, b"v");
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn connect_to_a_refused_port_times_out_quickly() {
    let port = zk_harness::free_port().unwrap();
    let started = Instant::now();
    let result = ZooKeeper::builder(&format!("127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .connect();
    let took = started.elapsed();
    assert_eq!(result.unwrap_err(), Error::Timeout);
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
}

/// Connects with only a session timeout (so the connect timeout is its default) to
/// `hosts`, which never accept a session; returns how long `connect` waited.
fn failed_connect_time(hosts: &str, session_timeout: Duration) -> Duration {
    let started = Instant::now();
    let result = ZooKeeper::connect(hosts, session_timeout);
    let took = started.elapsed();
    assert_eq!(result.unwrap_err(), Error::Timeout, "{hosts}");
    took
}

#[test]
fn connect_timeout_defaults_to_the_session_timeout() {
    // Shorter than the builder's default session timeout (10 s), from which the connect
    // timeout used to be fixed before `session_timeout(..)` applied.
    let session = Duration::from_secs(3);
    let refused = format!("127.0.0.1:{}", zk_harness::free_port().unwrap());
    // Accepts connections (the kernel completes the handshake into the backlog) but
    // never answers the connect request.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_hosts = silent.local_addr().unwrap().to_string();
    for hosts in [refused.as_str(), silent_hosts.as_str()] {
        let took = failed_connect_time(hosts, session);
        assert!(took >= session, "{hosts}: gave up after {took:?}");
        assert!(
            took < Duration::from_secs(10),
            "{hosts}: waited {took:?}, the 10 s default, not the 3 s session timeout"
        );
    }
    // An explicit connect timeout wins, whichever is set first.
    for builder in [
        ZooKeeper::builder(&refused)
            .connect_timeout(Duration::from_millis(300))
            .session_timeout(Duration::from_secs(30)),
        ZooKeeper::builder(&refused)
            .session_timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_millis(300)),
    ] {
        let started = Instant::now();
        assert_eq!(builder.connect().unwrap_err(), Error::Timeout);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    drop(silent);
}

/// `client_id()` while the connection drops and comes back again and again: every
/// reconnect makes the C IO thread rewrite its copy of the id and password. The binding
/// reads its own copy, taken on the completion thread when a connection is reported,
/// so a reader never races that rewrite (the race itself is a data race without a
/// visible symptom on x86-64: under ThreadSanitizer, `scripts/tsan.sh`, reading the C
/// struct here is reported as a race with the IO thread's `check_events`).
#[test]
fn client_id_is_stable_across_reconnects() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(10));
    let id = zk.client_id().unwrap();
    let events = zk.session_events();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let zk = zk.clone();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(zk.client_id().unwrap(), id);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    const RECONNECTS: usize = 8;
    for _ in 0..RECONNECTS {
        proxy.block();
        wait_for_state(&events, SessionState::Connecting, WAIT);
        proxy.unblock();
        wait_for_state(&events, SessionState::Connected, WAIT);
        assert_eq!(zk.client_id().unwrap(), id);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    zk.exists("/").unwrap();
    zk.close().unwrap();
    assert_eq!(zk.client_id().unwrap_err(), Error::Closed);
}

#[test]
fn connect_to_an_unresolvable_host() {
    let started = Instant::now();
    let result = ZooKeeper::builder("no-such-host.invalid:2181")
        .connect_timeout(Duration::from_secs(5))
        .connect();
    assert!(
        matches!(&result, Err(Error::Unresolvable { hosts, .. }) if hosts == "no-such-host.invalid:2181"),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // One resolvable host among unresolvable ones is enough.
    let mixed = format!("no-such-host.invalid:2181,{}", hosts());
    let zk = ZooKeeper::builder(&mixed)
        .connect_timeout(WAIT)
        .connect()
        .unwrap();
    zk.exists("/").unwrap();
}

#[test]
fn bad_host_lists_are_typed_errors() {
    assert!(matches!(
        ZooKeeper::connect("", Duration::from_secs(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ZooKeeper::connect("  ", Duration::from_secs(1)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        ZooKeeper::connect("127.0.0.1:2181\0", Duration::from_secs(1)).unwrap_err(),
        Error::InteriorNul("host list")
    );
}

#[test]
fn chroot_in_the_host_string() {
    let root = connect();
    let chroot = unique("chroot");
    create(&root, &chroot, b"");
    let zk = connect_to_chroot(&chroot);

    assert_eq!(create(&zk, "/a", b"in chroot"), "/a");
    assert_eq!(root.get(&format!("{chroot}/a")).unwrap().0, b"in chroot");
    assert_eq!(zk.get_children("/").unwrap(), ["a"]);
    let seq = create_mode(&zk, "/s-", b"", CreateMode::PersistentSequential);
    assert!(seq.starts_with("/s-") && seq.len() == 13, "{seq}");
    let (created, _) = zk.create2("/b", b"", CreateMode::Persistent).unwrap();
    assert_eq!(created, "/b");
    assert_eq!(zk.sync("/a").unwrap(), "/a");

    // Watch events carry chroot-relative paths.
    let (_, watch) = zk.exists_watch("/c").unwrap();
    root.create(&format!("{chroot}/c"), b"", CreateMode::Persistent)
        .unwrap();
    let event = watch.wait_timeout(WAIT).unwrap();
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeCreated, "/c")
    );
    // Multi results too.
    let results = zk
        .multi(&[zookeeper_mt::Op::create("/m", b"", CreateMode::Persistent)])
        .unwrap();
    assert_eq!(results, [zookeeper_mt::OpResult::Created("/m".into())]);

    // A chroot that does not exist: the session works, node operations fail NoNode.
    let missing = connect_to_chroot(&format!("{chroot}/missing"));
    assert_eq!(
        missing
            .create("/x", b"", CreateMode::Persistent)
            .unwrap_err(),
        Error::NoNode
    );
}

fn connect_to_chroot(chroot: &str) -> ZooKeeper {
    ZooKeeper::connect(&format!("{}{chroot}", hosts()), Duration::from_secs(10)).unwrap()
}

#[test]
fn session_events_reach_every_subscriber() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(10));
    let first = zk.session_events();
    let second = zk.clone().session_events();
    proxy.block();
    // (The initial Connected event may still reach a receiver subscribed right after
    // connect returned: waiting for Connecting first skips it.)
    for events in [&first, &second] {
        wait_for_state(events, SessionState::Connecting, WAIT);
    }
    proxy.unblock();
    for events in [&first, &second] {
        let seen = wait_for_state(events, SessionState::Connected, WAIT);
        assert!(
            seen.iter()
                .all(|e| e.event_type == EventType::Session && e.path.is_empty()),
            "{seen:?}"
        );
    }
    // A dropped receiver does not disturb the others.
    drop(second);
    proxy.block();
    wait_for_state(&first, SessionState::Connecting, WAIT);
    proxy.unblock();
    wait_for_state(&first, SessionState::Connected, WAIT);
    zk.exists("/").unwrap();
}

/// Connects through a proxy on `proxy_ip`, moves the client to the shared server
/// (127.0.0.1) with `set_servers`, then cuts the proxy: the client must end up on the
/// server, in the same session.
fn set_servers_moves_the_client(proxy_ip: &str) {
    let proxy = Proxy::start_on(proxy_ip, &hosts());
    let zk = connect_via(&proxy, Duration::from_secs(10));
    let id = zk.client_id().unwrap();
    assert_eq!(zk.current_server().unwrap(), Some(proxy.connect_string()));
    assert_eq!(
        zk.connected_host().unwrap(),
        Some(proxy.connect_string().parse().unwrap())
    );
    // SAFETY (all three): the first two are refused before C is called; for the third
    // the connection is up and idle (no reconnect or connection error under way), as
    // `set_servers` requires.
    assert!(matches!(
        unsafe { zk.set_servers(" ") },
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        unsafe { zk.set_servers("127.0.0.1:1\0") }.unwrap_err(),
        Error::InteriorNul("host list")
    );

    // The old server is not in the new list: the client must move (now, or at the
    // latest when its connection breaks).
    unsafe { zk.set_servers(&hosts()) }.unwrap();
    proxy.block();
    common::poll_until("the client to reconnect to the new list", WAIT, || {
        zk.state().is_connected() && zk.current_server().ok().flatten() == Some(hosts())
    });
    assert_eq!(zk.client_id().unwrap(), id, "same session");
    zk.exists("/").unwrap();
    assert_eq!(zk.connected_host().unwrap(), Some(hosts().parse().unwrap()));

    // With one server in the list, cycling lands on it again.
    // SAFETY: connected and idle, as `cycle_next_server` requires.
    unsafe { zk.cycle_next_server() }.unwrap();
    zk.exists("/").unwrap();
}

#[test]
fn set_servers_moves_the_client_to_the_new_list() {
    // A different IP than the server's: see the ignored test below for why.
    set_servers_moves_the_client("127.0.0.2");
}

#[test]
#[ignore = "libzookeeper_mt 3.8.0 bug: addrvec_contains/addrvec_eq compare IPs but not \
            ports, so a new list differing only in ports (127.0.0.1:A -> 127.0.0.1:B) is \
            taken as unchanged and the client never moves"]
fn set_servers_to_another_port_on_the_same_host() {
    set_servers_moves_the_client("127.0.0.1");
}

/// A subscriber made once `connect` has returned hears of later events only: the state
/// change and the event that announces it are one step for subscribers, so the
/// connection that `connect` waited for is not reported to it a moment later.
#[test]
fn a_subscriber_made_after_connect_hears_no_earlier_event() {
    for round in 0..50 {
        let zk = connect();
        let events = zk.session_events();
        // The reply comes through the same completion queue, after the Connected event.
        zk.exists("/").unwrap();
        let heard: Vec<SessionState> = events.try_iter().map(|e| e.state).collect();
        assert!(heard.is_empty(), "round {round}: heard {heard:?}");
        zk.close().unwrap();
    }
}

#[test]
fn the_connected_host_and_timeout_follow_the_session_events() {
    // Both are recorded on the completion thread from the session events, never read
    // from the C handle on the caller's thread (its IO thread closes and rewrites them).
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(8));
    let events = zk.session_events();
    let proxy_addr = Some(proxy.connect_string().parse().unwrap());
    assert_eq!(zk.connected_host().unwrap(), proxy_addr);
    let negotiated = zk.session_timeout().unwrap();
    assert!(negotiated > Duration::ZERO && negotiated <= Duration::from_secs(8));

    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);
    assert_eq!(zk.connected_host().unwrap(), None, "disconnected");
    assert_eq!(zk.current_server().unwrap(), None);
    assert_eq!(zk.session_timeout().unwrap(), negotiated);
    proxy.unblock();
    wait_for_state(&events, SessionState::Connected, WAIT);
    assert_eq!(zk.connected_host().unwrap(), proxy_addr);
    zk.close().unwrap();
}
