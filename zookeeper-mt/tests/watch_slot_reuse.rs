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
    assert_eq!(
        watch.try_get(),
        Ok(None),
        "the stale reply ended the new watch"
    );

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
    assert_eq!(
        watch.try_get(),
        Ok(None),
        "the stale reply armed the new watch"
    );

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
    assert_eq!(
        watch.try_get(),
        Ok(None),
        "the stale reply armed the new watch"
    );

    connect().delete(&path, None).unwrap();
    let event = watch.wait_timeout(WAIT).expect("the second watch fires");
    assert_eq!(event.event_type, EventType::NodeDeleted);
    // Every registration (the stale read's too) is released once its event came.
    drop(watch);
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}

#[test]
fn stale_and_newer_replies_leave_no_registration_behind() {
    // Both reads' futures are dropped before their replies; the first reply registers
    // in C (the node exists), the second too: the registration is released once both
    // are answered, whatever C held.
    let (proxy, zk) = proxied();
    let path = unique("reuse-released");
    create(&zk, &path, b"v1");
    proxy.stall();
    drop(zk.get_watch_async(&path));
    let newer = zk.get_watch_async(&path);
    drop(newer);
    let after = zk.exists_async("/");
    proxy.resume();
    after
        .wait_timeout(WAIT)
        .expect("a request sent after both reads");
    assert_eq!(zk.live_contexts(), 0);

    // A stale registering reply, then a newer read that fails (the node is deleted in
    // between): the newer read reports NoNode, the delete's event finds no watch armed,
    // nothing stays registered.
    proxy.stall();
    drop(zk.get_watch_async(&path));
    let deleted = zk.delete_async(&path, None);
    let newer = zk.get_watch_async(&path);
    proxy.resume();
    deleted.wait_timeout(WAIT).expect("the delete");
    assert_eq!(
        newer.wait_timeout(WAIT).map(|(data, _, _)| data),
        Err(zookeeper_mt::Error::NoNode)
    );
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}
