//! TTL and container nodes, which the server deletes by itself.
//!
//! Needs special servers: one with extended types and a fast container/TTL sweep
//! (`znode.container.checkIntervalMs`), and one stock server without extended types.

mod common;

use common::{create, unique, WAIT};
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::{CreateMode, Error, EventType, ZooKeeper, MAX_TTL};

/// Extended types on; the container manager runs every 100 ms instead of every minute.
fn sweeping_server() -> Server {
    Server::start_with(&ServerOptions::for_tests().jvm_arg("-Dznode.container.checkIntervalMs=100"))
        .expect("starting the sweeping server")
}

/// One server for both sweeping scenarios (run one after the other), dropped at the end.
#[test]
fn server_deletes_expired_ttl_nodes_and_empty_containers() {
    let server = sweeping_server();
    let zk = common::connect_to(&server.connect_string());
    ttl_nodes_are_created_and_expire(&zk);
    containers_go_when_their_last_child_goes(&zk);
    zk.close().unwrap();
}

/// Waits for `path` to be deleted by the server, through an exists watch.
fn wait_deleted(zk: &ZooKeeper, path: &str) -> Duration {
    let started = Instant::now();
    let (stat, watch) = zk.exists_watch(path).unwrap();
    if stat.is_none() {
        return started.elapsed();
    }
    let event = watch
        .wait_timeout(WAIT)
        .unwrap_or_else(|e| panic!("{path} was not deleted by the server: {e}"));
    assert_eq!(event.event_type, EventType::NodeDeleted);
    started.elapsed()
}

fn ttl_nodes_are_created_and_expire(zk: &ZooKeeper) {
    let base = unique("ttl");
    create(zk, &base, b"");
    let ttl = format!("{base}/short");
    assert_eq!(
        zk.create(
            &ttl,
            b"t",
            CreateMode::PersistentWithTtl(Duration::from_millis(300))
        )
        .unwrap(),
        ttl
    );
    let (seq, stat) = zk
        .create2(
            &format!("{base}/seq-"),
            b"",
            CreateMode::PersistentSequentialWithTtl(Duration::from_millis(300)),
        )
        .unwrap();
    assert!(seq.starts_with(&format!("{base}/seq-")) && seq.len() == base.len() + 15);
    // The TTL is not shown to clients as an ephemeral owner.
    assert_eq!(stat.ephemeral_owner, 0);
    // A long TTL (the largest the server accepts) and one with a child stay.
    let long = format!("{base}/long");
    zk.create(&long, b"", CreateMode::PersistentWithTtl(MAX_TTL))
        .unwrap();
    let parent = format!("{base}/parent");
    zk.create(
        &parent,
        b"",
        CreateMode::PersistentWithTtl(Duration::from_millis(300)),
    )
    .unwrap();
    create(zk, &format!("{parent}/child"), b"");

    wait_deleted(zk, &ttl);
    wait_deleted(zk, &seq);
    assert!(zk.exists(&long).unwrap().is_some());
    assert!(
        zk.exists(&parent).unwrap().is_some(),
        "a TTL node with children stays"
    );
    // Once childless, it goes too.
    zk.delete(&format!("{parent}/child"), None).unwrap();
    wait_deleted(zk, &parent);
}

fn containers_go_when_their_last_child_goes(zk: &ZooKeeper) {
    let never_used = unique("container-unused");
    let container = unique("container");
    assert_eq!(
        zk.create(&never_used, b"", CreateMode::Container).unwrap(),
        never_used
    );
    assert_eq!(
        zk.create(&container, b"", CreateMode::Container).unwrap(),
        container
    );
    let child = format!("{container}/child");
    create(zk, &child, b"");
    let (seq, _) = zk
        .create2(
            &format!("{container}/e-"),
            b"",
            CreateMode::EphemeralSequential,
        )
        .unwrap();
    zk.delete(&child, None).unwrap();
    // Still has a child: stays.
    assert!(zk.exists(&container).unwrap().is_some());
    zk.delete(&seq, None).unwrap();
    wait_deleted(zk, &container);
    // A container that never had a child is not collected.
    assert!(zk.exists(&never_used).unwrap().is_some());
}

#[test]
fn ttl_bounds_are_checked_before_c() {
    let zk = common::connect();
    let path = unique("ttl-bounds");
    for mode in [
        CreateMode::PersistentWithTtl(Duration::ZERO),
        CreateMode::PersistentWithTtl(Duration::from_micros(999)),
        CreateMode::PersistentWithTtl(MAX_TTL + Duration::from_millis(1)),
        CreateMode::PersistentSequentialWithTtl(Duration::ZERO),
    ] {
        assert!(
            matches!(zk.create(&path, b"", mode), Err(Error::InvalidArgument(_))),
            "{mode:?}"
        );
    }
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(zk.exists(&path).unwrap(), None);
}

#[test]
fn ttl_on_a_server_without_extended_types() {
    let server = Server::start_with(&ServerOptions::default().force_sync(false)).unwrap();
    let zk = common::connect_to(&server.connect_string());
    let path = unique("ttl-stock");
    for mode in [
        CreateMode::PersistentWithTtl(Duration::from_secs(10)),
        CreateMode::PersistentSequentialWithTtl(Duration::from_secs(10)),
    ] {
        assert_eq!(
            zk.create(&path, b"", mode).unwrap_err(),
            Error::Unimplemented,
            "{mode:?}"
        );
        assert_eq!(
            common::block_on(zk.create2_async(&path, b"", mode)).unwrap_err(),
            Error::Unimplemented
        );
    }
    assert_eq!(zk.exists(&path).unwrap(), None);
    // The session is fine afterwards; containers work without extended types.
    create(&zk, &path, b"");
    zk.create(&format!("{path}-c"), b"", CreateMode::Container)
        .unwrap();
}
