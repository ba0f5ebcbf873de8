//! The server dies under a client: blocked calls return ConnectionLoss instead of
//! hanging; after a restart the client reconnects to the same session and the watches
//! set before the crash still fire.
//!
//! Uses its own server (it is killed and restarted).

mod common;

use common::{connect_to, create, unique, wait_for_state, WAIT};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::{Error, EventType, SessionState};

#[test]
fn kill_and_restart_the_server() {
    let server = Server::start_with(&ServerOptions::for_tests()).unwrap();
    let hosts = server.connect_string();
    let zk = connect_to(&hosts);
    let id = zk.client_id().unwrap();
    let data = unique("reconnect-data");
    let missing = unique("reconnect-missing");
    create(&zk, &data, b"before");
    let (_, _, on_change) = zk.get_watch(&data).unwrap();
    let (_, on_create) = zk.exists_watch(&missing).unwrap();
    assert_eq!(zk.live_contexts(), 2);
    let events = zk.session_events();

    // Freeze the server so requests stay unanswered, then issue blocking calls.
    server.pause().unwrap();
    let (sender, results) = mpsc::channel();
    let callers: Vec<_> = (0..4)
        .map(|i| {
            let zk = zk.clone();
            let data = data.clone();
            let sender = sender.clone();
            thread::spawn(move || {
                let result = if i % 2 == 0 {
                    zk.get(&data).map(drop)
                } else {
                    zk.set(&data, b"lost?", None).map(drop)
                };
                sender.send(result).unwrap();
            })
        })
        .collect();
    common::poll_until("the blocking calls to be in flight", WAIT, || {
        zk.live_contexts() == 2 + 4
    });
    // A bounded wait on a request to a frozen server times out; the request lives on.
    assert_eq!(
        zk.exists_async(&data)
            .wait_timeout(Duration::from_millis(200))
            .unwrap_err(),
        Error::Timeout
    );
    assert_eq!(results.try_recv(), Err(mpsc::TryRecvError::Empty));

    // Kill it: every blocked call returns ConnectionLoss, promptly.
    let killed = Instant::now();
    server.kill();
    for _ in 0..4 {
        let result = results.recv_timeout(WAIT).expect("a blocked call hung");
        assert_eq!(result, Err(Error::ConnectionLoss));
    }
    assert!(killed.elapsed() < Duration::from_secs(5));
    for caller in callers {
        caller.join().unwrap();
    }
    wait_for_state(&events, SessionState::Connecting, WAIT);
    // While the server is down, a blocking call fails instead of hanging.
    assert_eq!(zk.get(&data).unwrap_err(), Error::ConnectionLoss);
    // The watches survive connection loss.
    assert_eq!(on_change.try_get(), Ok(None));
    assert_eq!(on_create.try_get(), Ok(None));
    assert_eq!(zk.live_contexts(), 2);

    // Restart (same port, same data): the client reconnects to the same session.
    server.restart().unwrap();
    let seen = wait_for_state(&events, SessionState::Connected, WAIT);
    assert!(
        seen.iter()
            .all(|e| e.event_type == EventType::Session && !e.state.is_terminal()),
        "{seen:?}"
    );
    zk.wait_connected(WAIT).unwrap();
    assert_eq!(zk.client_id().unwrap(), id);
    assert!(!zk.is_unrecoverable());

    // The watches set before the crash fire now.
    let other = connect_to(&hosts);
    other.set(&data, b"after", None).unwrap();
    create(&other, &missing, b"");
    let changed = on_change.wait_timeout(WAIT).expect("data watch fired");
    assert_eq!(
        (changed.event_type, changed.path.as_str()),
        (EventType::NodeDataChanged, data.as_str())
    );
    let created = on_create.wait_timeout(WAIT).expect("exists watch fired");
    assert_eq!(
        (created.event_type, created.path.as_str()),
        (EventType::NodeCreated, missing.as_str())
    );
    assert_eq!(zk.get(&data).unwrap().0, b"after");
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
    other.close().unwrap();
}
