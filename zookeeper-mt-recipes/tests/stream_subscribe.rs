//! `EventStream::subscribe` against a real server: a subscriber of a cache's stream sees
//! every item of a burst of 200 changes, as the stream does; clones split the items
//! (disjoint, together complete); subscribers dropped mid-burst leave the producer's
//! list at its baseline; `recv_timeout` takes a `Timeout` (`Never`: no deadline).

mod cache_common;
mod common;

use cache_common::create;
use common::{connect, unique_path};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::caches::{CacheEvent, ChildrenCache};
use zookeeper_mt_recipes::events::{EventStream, RecvTimeoutError};

const WAIT: Duration = Duration::from_secs(20);
const BURST: usize = 200;

/// A parent node and a cache of its children (initialized: its `Initialized` is queued
/// for the stream's readers).
fn cache_of_new_parent(zk: &zookeeper_mt::ZooKeeper, name: &str) -> (String, ChildrenCache) {
    let parent = unique_path(name);
    zookeeper_mt_recipes::nodes::ensure_path(zk, &parent).unwrap();
    let cache = ChildrenCache::new(zk, &parent).unwrap();
    (parent, cache)
}

fn burst(zk: &zookeeper_mt::ZooKeeper, parent: &str) -> Vec<String> {
    (0..BURST)
        .map(|i| {
            let path = format!("{parent}/c{i:03}");
            create(zk, &path, b"");
            path
        })
        .collect()
}

/// The paths of the next `count` `Added` items of `events` (other items are skipped);
/// panics after `WAIT`.
fn added(events: &EventStream<CacheEvent>, count: usize) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut paths = Vec::new();
    while paths.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(CacheEvent::Added(node)) => paths.push(node.path.clone()),
            Ok(_) => {}
            Err(error) => panic!("{error} after {} of {count} additions", paths.len()),
        }
    }
    paths
}

#[test]
fn a_subscriber_sees_every_item_the_stream_sees() {
    let zk = connect();
    let (parent, cache) = cache_of_new_parent(&zk, "subscribe-all");
    let origin = cache.events();
    let baseline = origin.subscribers();
    let subscriber = origin.subscribe();
    assert_eq!(origin.subscribers(), baseline + 1);
    let created = burst(&zk, &parent);

    let from_origin = added(origin, BURST);
    let from_subscriber = added(&subscriber, BURST);
    assert_eq!(from_subscriber, from_origin, "both in the same order");
    let expected: BTreeSet<_> = created.into_iter().collect();
    assert_eq!(
        from_origin.iter().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    // Each reader took its own items: nothing is left for either.
    assert_eq!(
        subscriber.recv_timeout(Duration::from_millis(50)),
        Err(RecvTimeoutError::Timeout)
    );
    drop(subscriber);
    assert_eq!(origin.subscribers(), baseline);
    cache.close();
}

#[test]
fn clones_split_the_items() {
    let zk = connect();
    let (parent, cache) = cache_of_new_parent(&zk, "subscribe-clones");
    let (first, second) = (cache.events().clone(), cache.events().clone());
    let seen = AtomicUsize::new(0);
    let read = |events: &EventStream<CacheEvent>| {
        let deadline = Instant::now() + WAIT;
        let mut paths = Vec::new();
        while seen.load(Ordering::SeqCst) < BURST {
            assert!(Instant::now() < deadline, "only {seen:?} additions seen");
            if let Ok(CacheEvent::Added(node)) = events.recv_timeout(Duration::from_millis(20)) {
                paths.push(node.path.clone());
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }
        paths
    };
    let read = &read;
    let created: BTreeSet<_> = thread::scope(|scope| {
        let a = scope.spawn(|| read(&first));
        let b = scope.spawn(|| read(&second));
        let created = burst(&zk, &parent).into_iter().collect();
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        let (a_set, b_set): (BTreeSet<_>, BTreeSet<_>) =
            (a.iter().cloned().collect(), b.iter().cloned().collect());
        assert!(a_set.is_disjoint(&b_set), "an item reached both clones");
        assert_eq!(a.len() + b.len(), BURST);
        assert_eq!(
            a_set.union(&b_set).cloned().collect::<BTreeSet<_>>(),
            created
        );
        created
    });
    assert_eq!(created.len(), BURST);
    assert_eq!(cache.events().subscribers(), 0, "a clone is no subscriber");
    cache.close();
}

#[test]
fn subscribers_dropped_mid_burst_leave_no_trace() {
    let zk = connect();
    let (parent, cache) = cache_of_new_parent(&zk, "subscribe-drop");
    let origin = cache.events();
    let baseline = origin.subscribers();
    let done = AtomicBool::new(false);
    let churned = thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let created = burst(&zk, &parent);
            done.store(true, Ordering::SeqCst);
            created
        });
        // Subscribers made, read from and dropped while the burst goes on.
        let mut churned = 0;
        while !done.load(Ordering::SeqCst) || churned < 1_000 {
            let subscriber = origin.subscribe();
            let clone = subscriber.clone();
            let _ = clone.recv_timeout(Duration::from_millis(1));
            drop(subscriber);
            drop(clone);
            churned += 1;
        }
        assert_eq!(writer.join().unwrap().len(), BURST);
        churned
    });
    assert!(churned >= 1_000);
    assert_eq!(
        origin.subscribers(),
        baseline,
        "after {churned} subscribers"
    );
    // The stream itself lost nothing.
    assert_eq!(added(origin, BURST).len(), BURST);
    cache.close();
}

#[test]
fn recv_timeout_takes_a_timeout() {
    let zk = connect();
    let (parent, cache) = cache_of_new_parent(&zk, "subscribe-timeout");
    let subscriber = cache.events().subscribe();
    // Up to date: the cache's first items (its `Initialized`) are taken.
    while !matches!(
        subscriber.recv_timeout(Timeout::from(WAIT)),
        Ok(CacheEvent::Initialized)
    ) {}
    let started = Instant::now();
    assert_eq!(
        subscriber.recv_timeout(Timeout::from(Duration::from_millis(100))),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(
        subscriber.recv_timeout(Timeout::NOW),
        Err(RecvTimeoutError::Timeout)
    );

    // `Never` waits as long as it takes: for an item, then for the end.
    let waiting = subscriber.clone();
    let next = thread::spawn(move || waiting.recv_timeout(Timeout::Never));
    create(&zk, &format!("{parent}/late"), b"");
    let event =
        zk_harness::testing::within("the wait", WAIT, move || next.join().unwrap()).unwrap();
    assert!(matches!(event, CacheEvent::Added(node) if node.path.ends_with("/late")));

    cache.close();
    let subscriber = zk_harness::testing::within("the wait", WAIT, move || {
        // What is queued, then the end.
        while subscriber.recv_timeout(Timeout::Never).is_ok() {}
        subscriber
    });
    assert!(subscriber.is_ended());
    assert_eq!(
        subscriber.recv_timeout(Timeout::Never),
        Err(RecvTimeoutError::Disconnected)
    );
    // A subscriber made after the end gets the end too.
    assert_eq!(
        subscriber.subscribe().recv_timeout(Timeout::Never),
        Err(RecvTimeoutError::Disconnected)
    );
}
