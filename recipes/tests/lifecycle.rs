//! Connection states and the managed client against real servers: a forced expiry
//! gives `Lost` then a new session (with a failing connection attempt in between), a
//! server restart gives `Suspended` then `Reconnected` of the same session, closing
//! gives `Lost` and the end of the stream; the async form of the stream.

mod cache_common;
mod common;

use cache_common::{expire, WAIT};
use common::{unique_path, Proxy};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zk_harness::executor::block_on;
use zk_harness::{Server, ServerOptions};
use zookeeper::{CreateMode, Error, SessionState, ZooKeeper};
use zookeeper_recipes::events::EventStream;
use zookeeper_recipes::lifecycle::{
    connection_states, Client, ConnectionEvent, ConnectionState, ManagedZooKeeper,
};
use zookeeper_recipes::RecipeError;

fn next(states: &EventStream<ConnectionEvent>) -> ConnectionEvent {
    next_within(states, WAIT)
}

fn next_within(states: &EventStream<ConnectionEvent>, wait: Duration) -> ConnectionEvent {
    states
        .recv_timeout(wait)
        .expect("no connection event in time")
}

/// How long a reconnection after a server restart may take: the C client may have
/// connected while the server was starting and then waits two thirds of the session
/// timeout for an answer before it tries again (slow under valgrind).
const RECONNECT_WAIT: Duration = Duration::from_secs(90);

fn event(state: ConnectionState, generation: u64) -> ConnectionEvent {
    ConnectionEvent { state, generation }
}

#[test]
fn expiry_reports_lost_then_a_new_session() {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = Proxy::start(&hosts);
    let via_proxy = proxy.addr.clone();
    // The second connection attempt fails: the client must keep trying.
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
    let first = managed.session();
    assert_eq!(first.generation, 1);
    let old_states = connection_states(&first.zk).unwrap();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    assert_eq!(next(&old_states), event(ConnectionState::Connected, 1));

    // Something that lives and dies with the session.
    let observer = common::connect();
    let base = unique_path("expiry");
    zookeeper_recipes::util::ensure_path(&observer, &base).unwrap();
    let ephemeral = format!("{base}/eph");
    first
        .zk
        .create(&ephemeral, b"", CreateMode::Ephemeral)
        .unwrap();
    let old_id = first.zk.client_id().unwrap().session_id;

    proxy.cut();
    assert_eq!(next(&states), event(ConnectionState::Suspended, 1));
    assert_eq!(next(&old_states), event(ConnectionState::Suspended, 1));
    // Suspended is not lost: the guard of generation 1 still stands.
    assert!(managed.is_current(1));

    expire(&first.zk, &hosts);
    assert_eq!(observer.exists(&ephemeral).unwrap(), None);
    proxy.restore();

    assert_eq!(next(&states), event(ConnectionState::Lost, 1));
    assert_eq!(next(&states), event(ConnectionState::NewSession, 2));
    assert_eq!(next(&old_states), event(ConnectionState::Lost, 1));
    assert!(
        old_states.recv_timeout(WAIT).is_err(),
        "a plain stream ends after Lost"
    );
    assert!(old_states.is_ended());
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        3,
        "one initial, one failed, one new"
    );

    // A guard taken on generation 1 can tell it is gone; the old handle is finished.
    assert!(!managed.is_current(1));
    assert!(managed.is_current(2));
    assert!(first.zk.state().is_terminal());
    assert_eq!(first.zk.live_contexts(), 0);
    let second = managed.wait_connected(WAIT).unwrap();
    assert_eq!(second.generation, 2);
    assert_ne!(second.zk.client_id().unwrap().session_id, old_id);
    assert_eq!(managed.state(), ConnectionState::NewSession);
    // The new session works, and nothing was re-created behind the application's back.
    assert_eq!(managed.current().exists(&ephemeral).unwrap(), None);
    managed
        .current()
        .create(&ephemeral, b"", CreateMode::Ephemeral)
        .unwrap();
    // A late subscriber starts with the current state.
    let late = managed.states();
    assert_eq!(next(&late), event(ConnectionState::Connected, 2));

    managed.close();
    assert_eq!(next(&states), event(ConnectionState::Lost, 2));
    assert!(states.recv_timeout(WAIT).is_err());
    assert_eq!(next(&late), event(ConnectionState::Lost, 2));
    assert_eq!(observer.exists(&ephemeral).unwrap(), None);
    assert_eq!(
        managed.current().exists("/").unwrap_err(),
        Error::Closed,
        "handles of a closed client are closed"
    );
    cache_common::delete_tree(&observer, &base);
}

#[test]
fn server_restart_is_suspended_then_reconnected_with_the_same_session() {
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
    let plain_states = Client::from(&plain).states().unwrap();
    let id = managed.current().client_id().unwrap().session_id;
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    // The async form: a future per event, woken by the stream's thread.
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
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let clone = managed.clone();
    let states = managed.states();
    let zk = managed.current();
    let plain_states = connection_states(&zk).unwrap();
    assert_eq!(next(&states), event(ConnectionState::Connected, 1));
    assert_eq!(next(&plain_states), event(ConnectionState::Connected, 1));

    clone.close();
    assert!(managed.is_closed());
    assert_eq!(managed.state(), ConnectionState::Lost);
    let collected: Vec<_> = states.iter().collect();
    assert_eq!(collected, vec![event(ConnectionState::Lost, 1)]);
    let collected: Vec<_> = plain_states.iter().collect();
    assert_eq!(collected, vec![event(ConnectionState::Lost, 1)]);
    assert_eq!(zk.state(), SessionState::Closed);
    assert!(matches!(
        managed.wait_connected(Duration::from_millis(10)),
        Err(RecipeError::ZooKeeper(Error::Closed))
    ));
    // Subscribing afterwards: the end at once.
    let after = managed.states();
    assert_eq!(next(&after), event(ConnectionState::Lost, 1));
    assert!(after.recv().is_err());
    let after = connection_states(&zk).unwrap();
    assert_eq!(next(&after), event(ConnectionState::Lost, 1));
    assert!(after.recv().is_err());
}

#[test]
fn a_handle_closed_directly_ends_the_managed_client() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
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
