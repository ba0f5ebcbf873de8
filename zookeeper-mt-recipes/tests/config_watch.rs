//! Config watch against a real server: order, no duplicates, the final value under rapid
//! updates, every value when the writer waits, deletion/re-creation, stopping, following
//! a managed client into a new session.

mod common;

use common::{connect, unique_path};
use std::thread;
use std::time::Duration;
use zookeeper_mt::{CreateMode, Error, ZooKeeper};
use zookeeper_mt_recipes::caches::{ConfigEvent, ConfigWatch};
use zookeeper_mt_recipes::events::RecvTimeoutError;
use zookeeper_mt_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};
use zookeeper_mt_recipes::RecipeError;

const WAIT: Duration = Duration::from_secs(10);

fn create(zk: &ZooKeeper, path: &str, data: &[u8]) {
    zookeeper_mt_recipes::nodes::ensure_path(zk, path.rsplit_once('/').unwrap().0).unwrap();
    zk.create(path, data, CreateMode::Persistent).unwrap();
}

fn next(watch: &ConfigWatch) -> ConfigEvent {
    watch.next(WAIT).expect("an event in time")
}

fn value_of(event: &ConfigEvent) -> (String, i32) {
    match event {
        ConfigEvent::Value { data, stat } => {
            (String::from_utf8(data.clone()).unwrap(), stat.version)
        }
        ConfigEvent::Deleted => panic!("expected a value, got Deleted"),
    }
}

/// Updates faster than the watch can re-arm: values may be coalesced, but those
/// delivered are in strictly increasing version order, each one genuine (data matches
/// the version it was written at), and the final value always arrives.
#[test]
fn rapid_updates_arrive_in_order_with_the_final_value() {
    let zk = connect();
    let path = unique_path("rapid");
    create(&zk, &path, b"v0");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    assert_eq!(value_of(&next(&watch)), ("v0".to_string(), 0));

    let updates = 300;
    let writer = {
        let (zk, path) = (connect(), path.clone());
        thread::spawn(move || {
            for i in 1..=updates {
                let stat = zk.set(&path, format!("v{i}").as_bytes(), None).unwrap();
                assert_eq!(stat.version, i);
            }
        })
    };
    let mut versions = vec![0];
    loop {
        let (data, version) = value_of(&next(&watch));
        assert_eq!(data, format!("v{version}"), "data matches its version");
        assert!(
            version > *versions.last().unwrap(),
            "out of order: {versions:?} then {version}"
        );
        versions.push(version);
        if version == updates {
            break;
        }
    }
    writer.join().unwrap();
    println!(
        "{updates} rapid updates: {} values delivered, {} coalesced",
        versions.len() - 1,
        updates as usize + 1 - versions.len()
    );
    // Nothing after the final value.
    assert!(matches!(
        watch.next(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    ));
}

/// A writer that waits for each value to be seen before the next write gets every
/// single value, exactly once.
#[test]
fn every_update_arrives_when_the_writer_waits() {
    let zk = connect();
    let path = unique_path("paced");
    create(&zk, &path, b"0");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    assert_eq!(value_of(&next(&watch)).1, 0);
    for i in 1..=30 {
        zk.set(&path, i.to_string().as_bytes(), None).unwrap();
        assert_eq!(value_of(&next(&watch)), (i.to_string(), i));
    }
    assert!(watch.latest().is_none(), "no duplicates");
}

#[test]
fn deletion_and_recreation() {
    let zk = connect();
    let path = unique_path("lifecycle");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, path.rsplit_once('/').unwrap().0).unwrap();
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    assert_eq!(next(&watch), ConfigEvent::Deleted, "absent at start");

    zk.create(&path, b"a", CreateMode::Persistent).unwrap();
    let first = next(&watch);
    assert_eq!(first.data(), Some(&b"a"[..]));

    zk.set(&path, b"b", None).unwrap();
    assert_eq!(next(&watch).data(), Some(&b"b"[..]));

    zk.delete(&path, None).unwrap();
    assert_eq!(next(&watch), ConfigEvent::Deleted);

    zk.create(&path, b"c", CreateMode::Persistent).unwrap();
    let again = next(&watch);
    assert_eq!(again.data(), Some(&b"c"[..]));
    // A new incarnation: version restarts, czxid and mzxid move on.
    assert_eq!(again.stat().unwrap().version, 0);
    assert!(again.stat().unwrap().czxid > first.stat().unwrap().czxid);
}

#[test]
fn stops_when_dropped() {
    let zk = connect();
    let path = unique_path("drop");
    create(&zk, &path, b"x");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    let receiver = watch.receiver();
    assert!(watch.is_running());
    drop(watch);
    // The initial value is still there, then the channel is closed.
    assert_eq!(receiver.recv().unwrap().data(), Some(&b"x"[..]));
    assert_eq!(
        receiver.recv_timeout(WAIT),
        Err(RecvTimeoutError::Disconnected)
    );
    // The session itself is untouched.
    zk.set(&path, b"y", None).unwrap();
}

#[test]
fn stops_when_the_session_closes() {
    let zk = connect();
    let path = unique_path("close");
    create(&zk, &path, b"x");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    next(&watch);
    zk.close().unwrap();
    assert!(matches!(
        watch.next(WAIT),
        Err(RecipeError::ZooKeeper(Error::Closed))
    ));
    assert!(!watch.is_running());
}

/// Expires `zk`'s session: a second handle resumes it and closes it. The two handles
/// can steal the connection from each other (a resumed session closes the other
/// connection), so the close may not get through: repeat until `zk` sees the expiry.
fn expire(zk: &ZooKeeper, hosts: &str) {
    let events = zk.session_events();
    let id = zk.client_id().unwrap();
    for _ in 0..10 {
        match ZooKeeper::builder(hosts).session(id).connect() {
            Ok(twin) => twin.close().unwrap(),
            Err(Error::SessionExpired) => {}
            Err(error) => panic!("resuming the session: {error}"),
        }
        while let Ok(event) = events.recv_timeout(Duration::from_secs(3)) {
            if event.state.is_terminal() {
                return;
            }
        }
    }
    panic!("could not expire the session");
}

#[test]
fn stops_when_the_session_expires() {
    let hosts = zk_harness::shared_test_connect_string();
    let zk = connect();
    let path = unique_path("expire");
    create(&zk, &path, b"x");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    next(&watch);
    expire(&zk, &hosts);
    assert!(matches!(
        watch.next(WAIT),
        Err(RecipeError::ZooKeeper(Error::SessionExpired))
    ));
    assert_eq!(
        watch.end_reason(),
        Some(RecipeError::ZooKeeper(Error::SessionExpired))
    );
}

/// On a managed client the watch outlives an expired session: it reads the node again,
/// with a fresh watch, in the new session (a write made while no session watched is
/// delivered), follows later writes there, and stops when the client is closed.
#[test]
fn follows_a_managed_client_into_a_new_session() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let writer = connect();
    let path = unique_path("managed");
    create(&writer, &path, b"v0");
    let states = managed.states();
    let watch = ConfigWatch::new(&managed, &path).unwrap();
    assert_eq!(value_of(&next(&watch)), ("v0".to_string(), 0));

    let old = managed.current();
    expire(&old, &hosts);
    // Written while no session of the client watches the node.
    writer.set(&path, b"v1", None).unwrap();
    loop {
        let event = states.recv_timeout(WAIT).expect("a new session in time");
        if event.state == ConnectionState::NewSession {
            break;
        }
    }
    assert_eq!(value_of(&next(&watch)), ("v1".to_string(), 1));
    // The new session's watch is armed: later writes arrive too.
    writer.set(&path, b"v2", None).unwrap();
    assert_eq!(value_of(&next(&watch)), ("v2".to_string(), 2));
    assert!(watch.is_running());
    assert_eq!(watch.end_reason(), None);
    assert_eq!(old.live_contexts(), 0, "nothing left on the old session");

    let current = managed.current();
    managed.close();
    assert!(matches!(
        watch.next(WAIT),
        Err(RecipeError::ZooKeeper(Error::Closed))
    ));
    assert_eq!(
        watch.end_reason(),
        Some(RecipeError::ZooKeeper(Error::Closed))
    );
    assert!(!watch.is_running());
    assert_eq!(current.live_contexts(), 0);
    writer.delete(&path, None).unwrap();
}

#[test]
fn invalid_path_is_reported_at_start() {
    let zk = connect();
    assert!(matches!(
        ConfigWatch::new(&zk, "no-slash"),
        Err(RecipeError::ZooKeeper(Error::InvalidPath { .. }))
    ));
}

/// Writes `v1..=count` and waits (on the watch's own receiver) until it has seen the
/// final value.
fn write_burst(watch: &ConfigWatch, path: &str, count: i32) {
    let writer = connect();
    for i in 1..=count {
        writer.set(path, format!("v{i}").as_bytes(), None).unwrap();
    }
    while value_of(&next(watch)).1 != count {}
}

/// A reader that does not read while the node changes 300 times holds only the newest
/// value, not a backlog: its first receive is the final value (it used to be the first
/// of hundreds queued, growing without bound for a large, busy config).
#[test]
fn a_slow_reader_gets_the_latest_value_not_a_backlog() {
    let zk = connect();
    let path = unique_path("slow-reader");
    create(&zk, &path, b"v0");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    let slow = watch.receiver();
    write_burst(&watch, &path, 300);
    assert_eq!(
        value_of(&slow.recv_timeout(WAIT).unwrap()),
        ("v300".to_string(), 300)
    );
    assert!(
        slow.try_recv().is_err(),
        "more than the latest value was kept"
    );
}

/// Every receiver (each `receiver()` and each clone) sees the final value: clones used
/// to share one queue, each event going to one of them.
#[test]
fn every_receiver_sees_the_final_value() {
    let zk = connect();
    let path = unique_path("receivers");
    create(&zk, &path, b"v0");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    let first = watch.receiver();
    let receivers = vec![first.clone(), first, watch.receiver()];
    let readers: Vec<_> = receivers
        .into_iter()
        .map(|receiver| {
            thread::spawn(move || loop {
                let (_, version) = value_of(&receiver.recv_timeout(WAIT).expect("final value"));
                if version == 100 {
                    return;
                }
            })
        })
        .collect();
    write_burst(&watch, &path, 100);
    for reader in readers {
        reader.join().expect("a receiver missed the final value");
    }
}

/// `next_async` on a clone owned by its future: the same watch (a state it takes is not
/// seen again by the original), a timeout when nothing changes, and the next change.
#[test]
fn next_async_on_a_clone() {
    let zk = connect();
    let path = unique_path("next-async");
    create(&zk, &path, b"0");
    let watch = ConfigWatch::new(&zk, &path).unwrap();
    let on_clone = |timeout: Duration| {
        let watch = watch.clone();
        async move { watch.next_async(timeout).await }
    };
    let first = zk_harness::executor::block_on(Box::pin(on_clone(WAIT))).unwrap();
    assert_eq!(value_of(&first), ("0".to_string(), 0));
    assert!(watch.latest().is_none(), "the clone took it for both");
    let quiet = zk_harness::executor::block_on(on_clone(Duration::from_millis(200)));
    assert!(matches!(quiet, Err(RecipeError::Timeout)), "{quiet:?}");
    zk.set(&path, b"1", None).unwrap();
    let changed = zk_harness::executor::block_on(on_clone(WAIT)).unwrap();
    assert_eq!(value_of(&changed), ("1".to_string(), 1));
}
