//! A reply settles only the request that sent it: when a watching read's future is
//! dropped, a newer read on the same path and kind may take its watch slot before the
//! old reply arrives; that old reply must neither end the newer watch nor arm it.
//!
//! Each case stalls the link (the fault proxy holds every byte), pipelines the requests,
//! then resumes: the server answers them in order, after the newer read has taken the
//! slot. Deterministic (no random choices: no seed); every wait is bounded by `WAIT`.

mod common;

use common::{connect, connect_to, create, hosts, unique, WAIT};
use zk_harness::FaultProxy;
use zookeeper_mt::{CreateMode, EventType, ZooKeeper};

/// A session behind a proxy, so that its link can be stalled.
fn proxied() -> (FaultProxy, ZooKeeper) {
    let proxy = FaultProxy::start(hosts()).expect("proxy");
    let zk = connect_to(&proxy.connect_string());
    (proxy, zk)
}

#[test]
fn a_stale_no_node_reply_does_not_end_the_watch_that_reused_its_slot() {
    let (proxy, zk) = proxied();
    let path = unique("reuse-nonode");
    proxy.stall();
    // Answered NoNode: C registers nothing for it. Its watch is dropped with the future.
    drop(zk.get_watch_async(&path));
    let created = zk.create_async(&path, b"v1", CreateMode::Persistent);
    // Takes the slot the dropped watch left.
    let second = zk.get_watch_async(&path);
    proxy.resume();
    assert_eq!(created.wait_timeout(WAIT), Ok(path.clone()));
    let (data, _, watch) = second.wait_timeout(WAIT).expect("the second read");
    assert_eq!(data, b"v1");
    assert_eq!(watch.try_get(), Ok(None), "the stale reply ended the new watch");

    connect().set(&path, b"v2", None).unwrap();
    let event = watch.wait_timeout(WAIT).expect("the second watch fires");
    assert_eq!(event.event_type, EventType::NodeDataChanged);
    assert_eq!(event.path, path);
    // Every registration (the stale read's too) is released once its event came.
    drop(watch);
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}

#[test]
fn a_stale_registering_reply_does_not_arm_the_watch_that_reused_its_slot() {
    let (proxy, zk) = proxied();
    let path = unique("reuse-armed");
    create(&zk, &path, b"v1");
    proxy.stall();
    // Answered with v1 and registered in C; the change below fires that registration.
    drop(zk.get_watch_async(&path));
    let set = zk.set_async(&path, b"v2", None);
    let second = zk.get_watch_async(&path);
    proxy.resume();
    set.wait_timeout(WAIT).expect("the set");
    let (data, _, watch) = second.wait_timeout(WAIT).expect("the second read");
    assert_eq!(data, b"v2");
    // The second read has seen v2: the change to v2 is not its event.
    assert_eq!(watch.try_get(), Ok(None), "the stale reply armed the new watch");

    connect().set(&path, b"v3", None).unwrap();
    let event = watch.wait_timeout(WAIT).expect("the second watch fires");
    assert_eq!(event.event_type, EventType::NodeDataChanged);
    // Every registration (the stale read's too) is released once its event came.
    drop(watch);
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}

#[test]
fn a_stale_exists_reply_does_not_arm_the_watch_that_reused_its_slot() {
    let (proxy, zk) = proxied();
    let path = unique("reuse-exists");
    proxy.stall();
    // exists registers on NoNode too: the create below fires that registration.
    drop(zk.exists_watch_async(&path));
    let created = zk.create_async(&path, b"", CreateMode::Persistent);
    let second = zk.exists_watch_async(&path);
    proxy.resume();
    assert_eq!(created.wait_timeout(WAIT), Ok(path.clone()));
    let (stat, watch) = second.wait_timeout(WAIT).expect("the second exists");
    assert!(stat.is_some());
    assert_eq!(watch.try_get(), Ok(None), "the stale reply armed the new watch");

    connect().delete(&path, None).unwrap();
    let event = watch.wait_timeout(WAIT).expect("the second watch fires");
    assert_eq!(event.event_type, EventType::NodeDeleted);
    // Every registration (the stale read's too) is released once its event came.
    drop(watch);
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}
