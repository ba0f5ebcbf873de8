//! `NodeCache` against a real server: one node followed through absence, creation,
//! updates, deletion and re-creation with exactly one watch armed; the end of a plain
//! handle's session stops it; closing removes its watch.

mod cache_common;
mod common;

use cache_common::{create, expire, settled_watches, Model, WAIT};
use common::{unique_path, Proxy};
use std::time::Duration;
use zookeeper_mt::{Error, ZooKeeper};
use zookeeper_mt_recipes::caches::{CacheEvent, NodeCache};
use zookeeper_mt_recipes::RecipeError;

#[test]
fn follows_one_node_through_its_life() {
    let writer = common::connect();
    let zk = common::connect();
    let base = unique_path("node");
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &base).unwrap();
    let path = format!("{base}/config");
    let baseline = zk.live_contexts();

    let cache = NodeCache::new(&zk, &path).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert_eq!(model.changes, 0, "an absent node is reported as nothing");
    assert_eq!(cache.current(), None);
    // An exists watch while absent.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1);

    create(&writer, &path, b"v1");
    model.read_until(cache.events(), "created", |m| m.nodes.contains_key(&path));
    assert_eq!(cache.current().unwrap().data, b"v1");
    for value in [&b"v2"[..], b"v3"] {
        writer.set(&path, value, None).unwrap();
        model.read_until(cache.events(), "updated", |m| {
            m.nodes.get(&path).is_some_and(|n| n.data == value)
        });
        settled_watches(|| cache.armed_watches(), &zk, baseline, 1);
    }
    writer.delete(&path, None).unwrap();
    model.read_until(cache.events(), "deleted", |m| m.nodes.is_empty());
    assert_eq!(cache.current(), None);
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1);
    create(&writer, &path, b"again");
    model.read_until(cache.events(), "re-created", |m| {
        m.nodes.get(&path).is_some_and(|n| n.data == b"again")
    });
    assert_eq!(cache.current().unwrap().stat.version, 0);
    // One watch of this cache on the handle, and nothing else.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1);

    cache.close();
    common::assert_no_leftover_contexts(&zk);
    writer.delete(&path, None).unwrap();
    writer.delete(&base, None).unwrap();
}

#[test]
fn the_end_of_a_plain_session_stops_the_cache() {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = Proxy::start(&hosts);
    let zk = ZooKeeper::connect(&proxy.addr, Duration::from_secs(6)).unwrap();
    let writer = common::connect();
    let path = unique_path("expiring");
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &path).unwrap();
    let cache = NodeCache::new(&zk, &path).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert!(model.nodes.contains_key(&path));

    proxy.cut();
    model.read_until_signal(cache.events(), CacheEvent::Suspended);
    expire(&zk, &hosts);
    writer.set(&path, b"meanwhile", None).unwrap();
    proxy.restore();
    model.read_until_signal(cache.events(), CacheEvent::Lost);
    // The stream ends; the cache stopped and says why; it holds its last state.
    assert!(cache.events().recv_timeout(WAIT).is_err());
    assert!(!cache.is_running());
    assert_eq!(
        cache.end_reason(),
        Some(RecipeError::ZooKeeper(Error::SessionExpired))
    );
    assert_eq!(cache.current().unwrap().data, b"");
    assert_eq!(cache.armed_watches(), 0);
    assert_eq!(zk.live_contexts(), 0);
    drop(cache);
    writer.delete(&path, None).unwrap();
}

#[test]
fn closing_the_handle_stops_the_cache() {
    let zk = common::connect();
    let path = unique_path("closed");
    let cache = NodeCache::new(&zk, &path).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    zk.close().unwrap();
    let events: Vec<_> = cache.events().iter().collect();
    assert_eq!(events, vec![CacheEvent::Initialized, CacheEvent::Lost]);
    assert_eq!(
        cache.end_reason(),
        Some(RecipeError::ZooKeeper(Error::Closed))
    );
    assert!(matches!(
        cache.wait_initialized(Duration::ZERO),
        Ok(()) // initialized before it stopped
    ));
}

#[test]
fn a_bad_path_is_a_typed_error() {
    let zk = common::connect();
    for bad in ["", "relative", "/trailing/", "/a//b"] {
        assert!(
            matches!(
                NodeCache::new(&zk, bad),
                Err(RecipeError::ZooKeeper(Error::InvalidPath { .. }))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn closing_a_managed_client_stops_its_caches() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed =
        zookeeper_mt_recipes::lifecycle::ManagedZooKeeper::connect(&hosts, Duration::from_secs(10))
            .unwrap();
    let path = unique_path("managed-close");
    let cache = NodeCache::new(&managed, &path).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    let zk = managed.current();
    managed.close();
    let events: Vec<_> = cache.events().iter().collect();
    assert_eq!(events, vec![CacheEvent::Initialized, CacheEvent::Lost]);
    assert_eq!(
        cache.end_reason(),
        Some(RecipeError::ZooKeeper(Error::Closed))
    );
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn caches_and_streams_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<NodeCache>();
    check::<zookeeper_mt_recipes::caches::ChildrenCache>();
    check::<zookeeper_mt_recipes::caches::TreeCache>();
    check::<zookeeper_mt_recipes::events::EventStream<CacheEvent>>();
    check::<zookeeper_mt_recipes::lifecycle::ConnectionStates>();
    check::<zookeeper_mt_recipes::lifecycle::ManagedZooKeeper>();
    check::<zookeeper_mt_recipes::events::Next<'static, CacheEvent>>();
}
