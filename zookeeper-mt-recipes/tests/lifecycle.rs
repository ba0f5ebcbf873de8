//! The recipes' view of the session lifecycle: the connection states and the managed
//! client are the client crate's (re-exported by `lifecycle`; their own tests are in
//! `zookeeper-mt/tests/managed.rs`), and a `Client` of either kind reports them through
//! the one stream type, `ConnectionStates`.

mod cache_common;
mod common;

use cache_common::WAIT;
use std::time::Duration;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::lifecycle::{
    connection_states, Client, ConnectionEvent, ConnectionState, ConnectionStates, ManagedZooKeeper,
};

fn event(state: ConnectionState, generation: u64) -> ConnectionEvent {
    ConnectionEvent { state, generation }
}

fn next(states: &ConnectionStates) -> ConnectionEvent {
    states
        .recv_timeout(WAIT)
        .expect("no connection event in time")
}

#[test]
fn the_lifecycle_types_are_the_client_crates() {
    fn same<T>(value: T) -> T {
        value
    }
    let hosts = zk_harness::shared_test_connect_string();
    let managed: zookeeper_mt::ManagedZooKeeper = same::<ManagedZooKeeper>(
        ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap(),
    );
    let _: zookeeper_mt::ConnectionStates = same::<ConnectionStates>(managed.states());
    let _: fn(&ZooKeeper) -> zookeeper_mt::ConnectionStates = connection_states;
    let _: zookeeper_mt::ManagedSession = managed.session();
    managed.close();
}

#[test]
fn a_client_of_either_kind_reports_its_states() {
    let hosts = zk_harness::shared_test_connect_string();
    let plain = common::connect();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let clients = [Client::from(&plain), Client::from(&managed)];
    let states: Vec<ConnectionStates> = clients.iter().map(Client::states).collect();
    for (client, states) in clients.iter().zip(&states) {
        assert_eq!(next(states), event(ConnectionState::Connected, 1));
        assert_eq!(client.session().generation, 1);
    }
    assert!(!clients[0].renews_sessions() && clients[1].renews_sessions());

    plain.close().unwrap();
    managed.close();
    for states in &states {
        let rest: Vec<_> = states.iter().collect();
        assert_eq!(rest, vec![event(ConnectionState::Lost, 1)]);
        assert!(states.is_ended());
    }
}
