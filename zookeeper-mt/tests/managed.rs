//! Connection states and the managed client against real servers: an expiry gives
//! `Lost` then a new session of the next generation, made like the old one (credentials
//! too) or by a connector that is retried after a failure; a server restart gives
//! `Suspended` then `Reconnected` of the same session; closing the client (or its
//! handle, or a waker on the C completion thread dropping it) gives `Lost` and the end of
//! every stream, and waits for a connection attempt in progress; neither a plain stream
//! nor a managed client adds a thread while its session lives.
//!
//! A client behind a [`Proxy`] is cut off while another handle takes its session over
//! and closes it: the server expires it deterministically. The tests run one at a time
//! (they count the process's threads).

mod common;

use common::{create_mode, digest_id, hosts, unique, Proxy, WAIT};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zk_harness::executor::block_on;
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::stream::RecvTimeoutError;
use zookeeper_mt::{
    connection_states, Acl, ConnectionEvent, ConnectionState, ConnectionStates, CreateMode,
    CreateOptions, Error, ManagedZooKeeper, Perms, SessionState, ZooKeeper,
};

fn next(states: &ConnectionStates) -> ConnectionEvent {
    next_within(states, WAIT)
}

fn next_within(states: &ConnectionStates, wait: Duration) -> ConnectionEvent {
    states
        .recv_timeout(wait)
        .expect("no connection event in time")
}

fn event(state: ConnectionState, generation: u64) -> ConnectionEvent {
    ConnectionEvent { state, generation }
}

/// How long a reconnection after a server restart may take: the C client may have
/// connected while the server was starting and then waits two thirds of the session
/// timeout for an answer before it tries again (slow under valgrind).
const RECONNECT_WAIT: Duration = Duration::from_secs(90);

fn connect_via(proxy: &Proxy) -> ZooKeeper {
    connect_via_string(&proxy.connect_string()).unwrap()
}

/// Held by each test: they count the process's threads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Threads of this process now, but for the test proxies' and the C client's log
/// forwarder (started at its first message), which come and go on their own.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| !comm.starts_with("fault-proxy") && !comm.starts_with("zookeeper-c-log"))
        .count()
}

/// Has the server expire `zk`'s session (reached through `proxy`, whose cut `states`
/// reports as `Suspended`): another handle takes it over and closes it.
fn expire(zk: &ZooKeeper, proxy: &Proxy, states: &ConnectionStates, generation: u64) {
    let id = zk.client_id().unwrap();
    proxy.block();
    assert_eq!(next(states), event(ConnectionState::Suspended, generation));
    let thief = ZooKeeper::builder(&hosts()).session(id).connect().unwrap();
    thief.close().unwrap();
    proxy.unblock();
}

#[test]
fn expiry_gives_lost_then_a_new_session_made_like_the_old_one() {
    let _serial = serial();
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy);
    zk.add_auth("digest", b"managed:secret").unwrap();
    let observer = common::connect();
    let guarded = unique("managed-acl");
    let acl = vec![Acl::new(
        Perms::ALL,
        "digest",
        &digest_id("managed", "secret"),
    )];
    zk.create(
        &guarded,
        b"mine",
        CreateOptions::new(CreateMode::Persistent).with_acl(&acl),
    )
    .unwrap();
    let ephemeral = create_mode(&zk, &unique("managed-eph"), b"", CreateMode::Ephemeral);
    let old_id = zk.client_id().unwrap().session_id;

    // No thread of its own (the handle's two C threads exist already).
    let before = threads();
    let managed = ManagedZooKeeper::new(zk.clone());
    let states = managed.states();
    let old_states = connection_states(&zk);
    assert!(
        threads() <= before,
        "a managed client and a stream add no thread"
    );
    let with_client = threads();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    assert_eq!(next(&old_states), event(ConnectionState::Connected, 1));

    expire(&zk, &proxy, &states, 1);
    assert_eq!(next(&old_states), event(ConnectionState::Suspended, 1));
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    assert_eq!(next(&states), event(ConnectionState::NewSession, 2));
    assert_eq!(observer.exists(&ephemeral).unwrap(), None);
    // The thread that made the new session ends once it closed the old handle (whose C
    // threads end; the new handle's took their place).
    common::poll_until("the new session's thread to end", WAIT, || {
        threads() == with_client
    });
    assert_eq!(next(&old_states), event(ConnectionState::Lost, 1));
    assert_eq!(
        old_states.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected),
        "a plain stream ends after Lost"
    );

    // The new session: the next generation, through the same proxy, with the credentials.
    assert!(!managed.is_current(1));
    assert!(managed.is_current(2));
    assert_eq!(managed.state(), ConnectionState::NewSession);
    let second = managed.wait_connected(WAIT).unwrap();
    assert_eq!(second.generation, 2);
    assert_ne!(second.zk.client_id().unwrap().session_id, old_id);
    assert_eq!(
        second.zk.connected_host().unwrap(),
        Some(proxy.connect_string().parse().unwrap())
    );
    assert_eq!(second.zk.get(&guarded).unwrap().0, b"mine");
    assert_eq!(observer.get(&guarded).unwrap_err(), Error::NoAuth);
    assert!(zk.state().is_terminal());
    // A late subscriber starts with the current state.
    let late = managed.states();
    assert_eq!(next(&late), event(ConnectionState::Connected, 2));

    // A second expiry: generation 3, made like the second session (credentials again).
    expire(&second.zk, &proxy, &states, 2);
    assert_eq!(next(&states), event(ConnectionState::Lost, 2));
    assert_eq!(next(&states), event(ConnectionState::NewSession, 3));
    let third = managed.wait_connected(WAIT).unwrap();
    assert_eq!(third.generation, 3);
    third.zk.delete(&guarded, None).unwrap();

    managed.close();
    assert_eq!(next(&states), event(ConnectionState::Lost, 3));
    assert_eq!(
        states.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(next(&late), event(ConnectionState::Suspended, 2));
    assert_eq!(next(&late), event(ConnectionState::Lost, 2));
    assert_eq!(next(&late), event(ConnectionState::NewSession, 3));
    assert_eq!(next(&late), event(ConnectionState::Lost, 3));
    assert!(late.recv().is_err());
    assert_eq!(managed.current().exists("/").unwrap_err(), Error::Closed);
    assert_eq!(third.zk.state(), SessionState::Closed);
}

#[test]
fn a_failing_connector_is_retried() {
    let _serial = serial();
    let proxy = Proxy::start(&hosts());
    let via_proxy = proxy.connect_string();
    // The second attempt fails: the client must keep trying.
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&attempts);
    let managed = ManagedZooKeeper::with_connector(move || {
        if counted.fetch_add(1, Ordering::SeqCst) == 1 {
            return Err(Error::ConnectionLoss);
        }
        ZooKeeper::builder(&via_proxy)
            .session_timeout(Duration::from_secs(6))
            .connect()
    })
    .unwrap();
    let states = managed.states();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    let first = managed.session();
    assert_eq!(first.generation, 1);

    expire(&first.zk, &proxy, &states, 1);
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    // Suspended is not lost, Lost is: a guard of generation 1 is gone once NewSession
    // is reported.
    assert_eq!(next(&states), event(ConnectionState::NewSession, 2));
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "one initial, one failed, one new"
    );
    assert_eq!(managed.wait_connected(WAIT).unwrap().generation, 2);
    managed.current().exists("/").unwrap();
    assert_eq!(first.zk.live_contexts(), 0);
    drop(managed);
    assert_eq!(next(&states), event(ConnectionState::Lost, 2));
    assert!(states.recv().is_err(), "the last clone dropped closes it");
}

#[test]
fn server_restart_is_suspended_then_reconnected_with_the_same_session() {
    let _serial = serial();
    // A server of our own (the shared one must not restart).
    let server =
        Server::start_with(&ServerOptions::for_tests().max_session_timeout_ms(Some(60_000)))
            .unwrap();
    let hosts = server.connect_string();
    // The server restores sessions with a fresh timeout when it restarts, so the
    // session survives however long the restart takes.
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(20)).unwrap();
    let states = managed.states();
    let plain = ZooKeeper::connect(&hosts, Duration::from_secs(20)).unwrap();
    let plain_states = connection_states(&plain);
    let id = managed.current().client_id().unwrap().session_id;
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    // The async form: a future per event, woken from the C completion thread.
    assert_eq!(
        block_on(plain_states.next()),
        Some(event(ConnectionState::Connected, 1))
    );

    server.restart().unwrap();

    assert_eq!(next(&states), event(ConnectionState::Suspended, 1));
    assert_eq!(
        next_within(&states, RECONNECT_WAIT),
        event(ConnectionState::Reconnected, 1)
    );
    assert_eq!(
        block_on(plain_states.next()),
        Some(event(ConnectionState::Suspended, 1))
    );
    assert_eq!(
        block_on(plain_states.next()),
        Some(event(ConnectionState::Reconnected, 1))
    );
    assert_eq!(managed.generation(), 1);
    assert_eq!(managed.current().client_id().unwrap().session_id, id);
    assert_eq!(managed.wait_connected(WAIT).unwrap().generation, 1);
    managed.current().exists("/").unwrap();

    // Closing a plain handle: Lost, then the stream ends (also for the async form).
    plain.close().unwrap();
    assert_eq!(
        block_on(plain_states.next()),
        Some(event(ConnectionState::Lost, 1))
    );
    assert_eq!(block_on(plain_states.next()), None);
    drop(managed);
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    assert!(
        states.recv().is_err(),
        "dropping the last clone closes the client"
    );
}

#[test]
fn closing_ends_every_stream() {
    let _serial = serial();
    let managed = ManagedZooKeeper::connect(&hosts(), Duration::from_secs(10)).unwrap();
    let clone = managed.clone();
    let states = managed.states();
    let zk = managed.current();
    let plain_states = connection_states(&zk);
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    assert_eq!(next(&plain_states), event(ConnectionState::Connected, 1));

    clone.close();
    assert!(managed.is_closed());
    assert_eq!(managed.state(), ConnectionState::Lost);
    let collected: Vec<_> = states.iter().collect();
    assert_eq!(collected, vec![event(ConnectionState::Lost, 1)]);
    let collected: Vec<_> = plain_states.into_iter().collect();
    assert_eq!(collected, vec![event(ConnectionState::Lost, 1)]);
    assert_eq!(zk.state(), SessionState::Closed);
    assert_eq!(
        managed
            .wait_connected(Duration::from_millis(10))
            .unwrap_err(),
        Error::Closed
    );
    // Subscribing afterwards: the end at once.
    let after = managed.states();
    assert_eq!(next(&after), event(ConnectionState::Lost, 1));
    assert!(after.recv().is_err());
    let after = connection_states(&zk);
    assert_eq!(next(&after), event(ConnectionState::Lost, 1));
    assert!(after.recv().is_err());
    // A managed client made of a closed handle is closed.
    let of_closed = ManagedZooKeeper::new(zk);
    assert!(of_closed.is_closed());
}

#[test]
fn a_handle_closed_directly_ends_the_managed_client() {
    let _serial = serial();
    let managed = ManagedZooKeeper::connect(&hosts(), Duration::from_secs(10)).unwrap();
    let states = managed.states();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    managed.current().close().unwrap();
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    assert!(states.recv_timeout(WAIT).is_err());
    assert!(managed.is_closed());
    assert_eq!(
        managed.generation(),
        1,
        "no new session after a deliberate close"
    );
}

#[test]
fn plain_streams_add_no_thread_and_end_with_their_session() {
    let _serial = serial();
    let zk = common::connect();
    let doomed = common::connect();
    let before = threads();
    let streams: Vec<ConnectionStates> = (0..200)
        .map(|i| connection_states(if i % 2 == 0 { &zk } else { &doomed }))
        .collect();
    assert!(threads() <= before, "200 streams, no thread");
    for stream in &streams {
        assert_eq!(
            stream.try_recv().unwrap(),
            event(ConnectionState::Connected, 1),
            "the first event is there at once"
        );
    }
    doomed.close().unwrap();
    for stream in streams.iter().skip(1).step_by(2) {
        // Delivered by the closing thread before `close` returned.
        assert_eq!(stream.try_recv().unwrap(), event(ConnectionState::Lost, 1));
        assert!(stream.is_ended() && stream.is_empty());
    }
    for stream in streams.iter().step_by(2) {
        assert!(stream.is_empty() && !stream.is_ended());
    }
    // Dropped streams unsubscribe: the handle still works and closes cleanly.
    drop(streams);
    zk.exists("/").unwrap();
    zk.close().unwrap();
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn the_last_clone_dropped_by_a_waker_on_the_completion_thread_closes_it() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    let _serial = serial();
    /// Drops the managed client it holds when woken (on the C completion thread).
    struct DropOnWake(std::sync::Mutex<Option<ManagedZooKeeper>>);
    impl Wake for DropOnWake {
        fn wake(self: Arc<Self>) {
            let taken = self.0.lock().unwrap().take();
            drop(taken);
        }
    }
    let managed = ManagedZooKeeper::connect(&hosts(), Duration::from_secs(10)).unwrap();
    let zk = managed.current();
    let states = managed.states();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    let path = unique("managed-waker");
    let (_, mut watch) = zk.exists_watch(&path).unwrap();
    let waker = Waker::from(Arc::new(DropOnWake(std::sync::Mutex::new(Some(managed)))));
    assert!(std::pin::Pin::new(&mut watch)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    drop(waker);
    // The watch event wakes the waker on the completion thread, which closes the client
    // there without waiting (the handle's close is finished by the closer thread).
    let other = common::connect();
    other.create(&path, b"", CreateMode::Ephemeral).unwrap();
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    assert!(states.recv().is_err());
    common::poll_until("the handle to close", WAIT, || {
        zk.state() == SessionState::Closed
    });
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn close_waits_for_a_connection_attempt_in_progress() {
    let _serial = serial();
    let proxy = Proxy::start(&hosts());
    let via_proxy = proxy.connect_string();
    let (started, attempt_started) = crossbeam_channel::unbounded::<()>();
    let (release, released) = crossbeam_channel::unbounded::<()>();
    let made = Arc::new(std::sync::Mutex::new(Vec::<ZooKeeper>::new()));
    let kept = Arc::clone(&made);
    let calls = AtomicUsize::new(0);
    let managed = ManagedZooKeeper::with_connector(move || {
        if calls.fetch_add(1, Ordering::SeqCst) == 1 {
            // The attempt after the expiry waits for the test.
            started.send(()).unwrap();
            released.recv_timeout(WAIT).unwrap();
        }
        let zk = connect_via_string(&via_proxy)?;
        kept.lock().unwrap().push(zk.clone());
        Ok(zk)
    })
    .unwrap();
    let states = managed.states();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    expire(&managed.current(), &proxy, &states, 1);
    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    attempt_started.recv_timeout(WAIT).unwrap();

    let closing = managed.clone();
    let closer = std::thread::spawn(move || closing.close());
    // The stream ends as the close starts; the close then waits for the attempt.
    assert!(states.recv_timeout(WAIT).is_err());
    assert!(!closer.is_finished(), "close returned during the attempt");
    release.send(()).unwrap();
    closer.join().unwrap();
    assert_eq!(managed.generation(), 1, "no session installed after close");
    let made = made.lock().unwrap();
    assert_eq!(made.len(), 2);
    assert_eq!(made[0].state(), SessionState::Expired);
    assert_eq!(
        made[1].state(),
        SessionState::Closed,
        "the session made during the close was closed"
    );
}

fn connect_via_string(hosts: &str) -> zookeeper_mt::Result<ZooKeeper> {
    ZooKeeper::builder(hosts)
        .session_timeout(Duration::from_secs(6))
        .connect()
}
