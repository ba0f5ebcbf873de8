//! `ConnectionStates::recv_timeout` takes a `Timeout` (a `Duration` converts; `Never`
//! waits without a deadline), and `subscribe` gives a reader that sees every state
//! while clones share theirs, against a real server.

mod common;

use common::{connect, WAIT};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::stream::{RecvTimeoutError, TryRecvError};
use zookeeper_mt::{connection_states, ConnectionState, Timeout};

#[test]
fn recv_timeout_takes_a_timeout_and_never_waits_for_the_end() {
    let zk = connect();
    let states = connection_states(&zk);
    assert_eq!(
        states.recv_timeout(Timeout::from(WAIT)).unwrap().state,
        ConnectionState::Connected
    );
    let started = Instant::now();
    assert_eq!(
        states.recv_timeout(Timeout::from(Duration::from_millis(100))),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        states.recv_timeout(Timeout::NOW),
        Err(RecvTimeoutError::Timeout)
    );
    // A plain `Duration` still works.
    assert_eq!(
        states.recv_timeout(Duration::ZERO),
        Err(RecvTimeoutError::Timeout)
    );

    // A subscriber (made now: nothing unread) and a clone wait without a deadline.
    let subscriber = states.subscribe();
    assert_eq!(states.subscribers(), 1);
    let waiting = states.clone();
    let lost = thread::spawn(move || waiting.recv_timeout(Timeout::Never));
    let heard = thread::spawn(move || {
        let lost = subscriber.recv_timeout(Timeout::Never);
        (lost, subscriber.recv_timeout(Timeout::Never))
    });
    zk.close().unwrap();
    let lost = zk_harness::testing::within("the wait", WAIT, move || lost.join().unwrap());
    assert_eq!(lost.map(|e| e.state), Ok(ConnectionState::Lost));
    let (lost, end) = zk_harness::testing::within("the wait", WAIT, move || heard.join().unwrap());
    assert_eq!(lost.map(|e| e.state), Ok(ConnectionState::Lost));
    assert_eq!(end, Err(RecvTimeoutError::Disconnected));
    // The clone took the stream's `Lost`: the stream has ended for it too.
    assert_eq!(states.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(
        states.recv_timeout(Timeout::Never),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(states.subscribers(), 0);
}

#[test]
fn a_managed_clients_subscriber_sees_every_state() {
    let managed = zookeeper_mt::ManagedZooKeeper::new(connect());
    let states = managed.states();
    // Made before the first state is read: it starts level, with `Connected` unread.
    let subscriber = states.subscribe();
    let clone = states.clone();
    for reader in [&states, &subscriber] {
        assert_eq!(
            reader.recv_timeout(WAIT).unwrap().state,
            ConnectionState::Connected
        );
    }
    assert_eq!(
        clone.try_recv(),
        Err(TryRecvError::Empty),
        "taken by its clone"
    );
    // The stream that made the subscriber goes: the subscriber is still fed.
    drop(states);
    drop(clone);
    managed.close();
    let subscriber = zk_harness::testing::within("the wait", WAIT, move || {
        let lost = subscriber.recv_timeout(Timeout::Never);
        assert_eq!(lost.map(|e| e.state), Ok(ConnectionState::Lost));
        subscriber
    });
    assert_eq!(
        subscriber.recv_timeout(Timeout::Never),
        Err(RecvTimeoutError::Disconnected)
    );
}

#[test]
fn a_plain_streams_subscriber_keeps_it_fed() {
    let zk = connect();
    let states = connection_states(&zk);
    let subscriber = states.subscribe();
    drop(states);
    zk.close().unwrap();
    let states: Vec<_> = zk_harness::testing::within("the wait", WAIT, move || {
        subscriber.iter().map(|e| e.state).collect()
    });
    assert_eq!(states, [ConnectionState::Connected, ConnectionState::Lost]);
}
