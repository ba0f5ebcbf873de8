//! Caches are tasks on the recipes' driver, not threads: 400 caches on one session add
//! at most a few threads (the driver, the timer), all load and report `Initialized`,
//! and dropping them leaves no task, watch or thread behind. One test in this binary,
//! so nothing else moves the thread count.

mod cache_common;
mod common;

use cache_common::{create, delete_tree, WAIT};
use common::unique_path;
use std::time::{Duration, Instant};
use zk_harness::testing::process_threads as threads;
use zookeeper_mt_recipes::caches::{CacheEvent, ChildrenCache, NodeCache};
use zookeeper_mt_recipes::events::EventStream;

const CACHES: usize = 200;

/// Polls `condition` until it holds or 10 s pass; whether it held. For states nothing
/// signals (the driver's count of live tasks, a thread ending, a watch being set).
fn eventually(condition: impl FnMut() -> bool) -> bool {
    zk_harness::testing::poll_until(Duration::from_secs(10), condition)
}

/// Reads `events` until `Initialized`; fails the test after `WAIT`.
fn read_until_initialized(events: &EventStream<CacheEvent>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(CacheEvent::Initialized) => return,
            Ok(_) => {}
            Err(error) => panic!("no Initialized event: {error:?}"),
        }
    }
}

#[test]
fn hundreds_of_caches_share_the_driver() {
    let writer = common::connect();
    let zk = common::connect();
    let base = unique_path("many");
    for i in 0..CACHES {
        create(&writer, &format!("{base}/n{i}/c"), b"child");
    }
    let contexts = zk.live_contexts();
    let tasks = zookeeper_mt_recipes::live_background_tasks();
    let before = threads();

    let nodes: Vec<NodeCache> = (0..CACHES)
        .map(|i| NodeCache::new(&zk, &format!("{base}/n{i}")).unwrap())
        .collect();
    let children: Vec<ChildrenCache> = (0..CACHES)
        .map(|i| ChildrenCache::new(&zk, &format!("{base}/n{i}")).unwrap())
        .collect();
    for cache in &nodes {
        read_until_initialized(cache.events());
        assert!(cache.current().is_some());
    }
    for cache in &children {
        read_until_initialized(cache.events());
        assert_eq!(cache.len(), 1);
    }
    let grown = threads().saturating_sub(before);
    assert!(grown <= 4, "400 caches added {grown} threads");
    assert!(zookeeper_mt_recipes::live_background_tasks() >= tasks + 2 * CACHES);
    // A data watch per node cache; a child watch and the child's data watch per
    // children cache, each a context of the handle.
    let armed: usize = nodes.iter().map(NodeCache::armed_watches).sum::<usize>()
        + children
            .iter()
            .map(ChildrenCache::armed_watches)
            .sum::<usize>();
    assert_eq!(armed, 3 * CACHES);
    assert_eq!(zk.live_contexts(), contexts + armed);

    // Dropping a cache asks its task to stop without waiting; the task removes its
    // watches on the driver.
    drop(nodes);
    drop(children);
    assert!(
        eventually(|| zk.live_contexts() == contexts),
        "{} contexts left, {contexts} before",
        zk.live_contexts()
    );
    // The driver counts a task out just after its end is reported.
    assert!(
        eventually(|| zookeeper_mt_recipes::live_background_tasks() == tasks),
        "{} tasks left, {tasks} before",
        zookeeper_mt_recipes::live_background_tasks()
    );
    // The driver thread ends a moment after its last task.
    assert!(
        eventually(|| threads() <= before),
        "threads: {} after, {before} before",
        threads()
    );
    delete_tree(&writer, &base);
}
