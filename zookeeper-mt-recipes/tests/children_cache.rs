//! `ChildrenCache` against a real server: children added, updated and removed, the
//! parent deleted and re-created, one watch per node; a burst of 1,000 changes while the
//! reader does not read ends with the final state and a queue bounded by the number of
//! children; closing removes every watch.

mod cache_common;
mod common;

use cache_common::{create, delete_tree, server_tree, settled_watches, Model};
use common::unique_path;
use std::collections::BTreeMap;
use zookeeper_mt_recipes::caches::{CacheEvent, ChildrenCache};

/// The children of `parent` as the server has them, by full path.
fn server_children(zk: &zookeeper_mt::ZooKeeper, parent: &str) -> BTreeMap<String, Vec<u8>> {
    let mut tree = server_tree(zk, parent, 1);
    tree.remove(parent);
    tree
}

#[test]
fn follows_the_children_of_a_node() {
    let writer = common::connect();
    let zk = common::connect();
    let parent = unique_path("parent");
    let baseline = zk.live_contexts();

    // The parent does not exist yet: an exists watch and nothing else.
    let cache = ChildrenCache::new(&zk, &parent).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert!(cache.is_empty());
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1);

    zookeeper_mt_recipes::nodes::ensure_path(&writer, &parent).unwrap();
    for name in ["a", "b", "c"] {
        create(&writer, &format!("{parent}/{name}"), name.as_bytes());
        // A grandchild is below the cache's depth: neither reported nor watched.
        create(&writer, &format!("{parent}/{name}/deeper"), b"");
    }
    model.read_until(cache.events(), "three children", |m| m.nodes.len() == 3);
    assert_eq!(model.data(), server_children(&writer, &parent));
    // The parent's child watch and one data watch per child.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1 + 3);
    assert_eq!(cache.get("b").unwrap().data, b"b");
    assert_eq!(
        cache.children().keys().cloned().collect::<Vec<_>>(),
        vec!["a", "b", "c"]
    );

    writer.set(&format!("{parent}/b"), b"b2", None).unwrap();
    delete_tree(&writer, &format!("{parent}/a"));
    model.read_until(cache.events(), "b updated, a removed", |m| {
        m.nodes.len() == 2 && m.nodes[&format!("{parent}/b")].data == b"b2"
    });
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1 + 2);

    // The parent goes: every child is removed, an exists watch waits for it.
    delete_tree(&writer, &parent);
    model.read_until(cache.events(), "all removed", |m| m.nodes.is_empty());
    // The children may be reported gone (an empty listing) before the parent's deletion
    // is seen; then the child watch gives way to an exists watch.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1);
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &parent).unwrap();
    create(&writer, &format!("{parent}/d"), b"d");
    model.read_until(cache.events(), "d added", |m| m.nodes.len() == 1);
    assert_eq!(model.data(), server_children(&writer, &parent));
    settled_watches(|| cache.armed_watches(), &zk, baseline, 1 + 1);
    // The parent itself is never reported.
    assert!(model.nodes.keys().all(|path| path != &parent));

    cache.close();
    common::assert_no_leftover_contexts(&zk);
    delete_tree(&writer, &parent);
}

/// The parent deleted and at once re-created, many times: the cache may look for the
/// parent (an `exists` watch) after it is back, and that watch, a data watch on a present
/// node, must not stay beside the listing's child watch.
#[test]
fn a_parent_recreated_at_once_keeps_one_watch_per_node() {
    const ROUNDS: usize = 30;
    let writer = common::connect();
    let zk = common::connect();
    let parent = unique_path("recreated");
    let baseline = zk.live_contexts();
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &parent).unwrap();
    let cache = ChildrenCache::new(&zk, &parent).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    for round in 0..ROUNDS {
        let child = format!("{parent}/r{round}");
        create(&writer, &child, b"x");
        model.read_until(cache.events(), "the round's child", |m| {
            m.nodes.len() == 1 && m.nodes.contains_key(&child)
        });
        settled_watches(|| cache.armed_watches(), &zk, baseline, 1 + 1);
        // Deleted and back before the cache can have re-read anything.
        delete_tree(&writer, &parent);
        zookeeper_mt_recipes::nodes::ensure_path(&writer, &parent).unwrap();
        model.read_until(cache.events(), "the child removed", |m| m.nodes.is_empty());
        settled_watches(|| cache.armed_watches(), &zk, baseline, 1);
    }
    cache.close();
    common::assert_no_leftover_contexts(&zk);
    delete_tree(&writer, &parent);
}

#[test]
fn a_burst_for_a_slow_reader_ends_with_the_final_state_in_bounded_memory() {
    const CHILDREN: usize = 10;
    const SETS_PER_CHILD: usize = 90; // 900 updates
    const TRANSIENTS: usize = 50; // 50 creates + 50 deletes
    let writer = common::connect();
    let zk = common::connect();
    let parent = unique_path("burst");
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &parent).unwrap();
    for i in 0..CHILDREN {
        create(&writer, &format!("{parent}/c{i}"), b"start");
    }
    let cache = ChildrenCache::new(&zk, &parent).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert_eq!(model.nodes.len(), CHILDREN);

    // 1,000 changes; nobody reads meanwhile. The queue never holds more than one entry
    // per child (plus the one transient node that may exist at a time).
    let mut most_queued = 0;
    let mut changes = 0;
    for round in 0..SETS_PER_CHILD {
        for i in 0..CHILDREN {
            let value = format!("c{i} round {round}");
            writer
                .set(&format!("{parent}/c{i}"), value.as_bytes(), None)
                .unwrap();
            changes += 1;
            most_queued = most_queued.max(cache.events().len());
        }
        if round < TRANSIENTS {
            let transient = format!("{parent}/t{round}");
            create(&writer, &transient, b"brief");
            most_queued = most_queued.max(cache.events().len());
            writer.delete(&transient, None).unwrap();
            changes += 2;
            most_queued = most_queued.max(cache.events().len());
        }
    }
    assert_eq!(changes, 1_000);
    let expected = server_children(&writer, &parent);
    assert_eq!(expected.len(), CHILDREN);

    // The reader catches up: it ends with the final state, from few events.
    model.read_until(cache.events(), "the final state", |m| m.data() == expected);
    let received = model.changes - CHILDREN;
    println!("burst: {changes} changes, at most {most_queued} events queued, {received} received");
    assert!(
        most_queued <= CHILDREN + 1,
        "{most_queued} events queued for {CHILDREN} children"
    );
    assert!(received <= changes);
    // Nothing more is owed: the queue is empty once the final state is read.
    assert!(cache.events().try_recv().is_err());
    assert_eq!(
        cache
            .children()
            .into_iter()
            .map(|(name, node)| (format!("{parent}/{name}"), node.data.clone()))
            .collect::<BTreeMap<_, _>>(),
        expected
    );
    settled_watches(|| cache.armed_watches(), &zk, 0, 1 + CHILDREN);

    drop(cache);
    common::assert_no_leftover_contexts_soon(&zk);
    delete_tree(&writer, &parent);
}
