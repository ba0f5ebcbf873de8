//! Persistent nodes cost no thread each: many nodes on one session run as tasks on the
//! recipes' driver, and dropping them deletes their nodes and ends their tasks. One test
//! in its own binary, so the thread and task counts are this test's alone.

mod common;

use common::{assert_no_leftover_contexts_soon, connect, unique_path, wait_until};
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::live_background_tasks;
use zookeeper_mt_recipes::nodes::PersistentNode;

const NODES: usize = 200;
const T: Duration = Duration::from_secs(60);

/// A node's handle can go to other threads (it says `Send + Sync`).
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PersistentNode>();
};

fn data_of(zk: &ZooKeeper, path: &str) -> Option<Vec<u8>> {
    zk.get(path).ok().map(|(data, _)| data)
}

#[test]
fn many_nodes_on_one_session_add_no_thread_each_and_leave_nothing() {
    let base = unique_path("scale");
    let zk = connect();
    let admin = connect();
    zk.exists("/").unwrap();
    let threads_before = threads();
    let tasks_before = live_background_tasks();

    let paths: Vec<String> = (0..NODES).map(|i| format!("{base}/n{i:03}")).collect();
    let nodes: Vec<PersistentNode> = paths
        .iter()
        .map(|path| PersistentNode::new(&zk, path, b"v1").unwrap())
        .collect();
    for (node, path) in nodes.iter().zip(&paths) {
        assert_eq!(&node.wait_created(T).unwrap(), path);
    }
    let during = threads();
    assert!(
        during <= threads_before + 4,
        "{NODES} nodes took {during} threads, {threads_before} before"
    );
    assert_eq!(live_background_tasks(), tasks_before + NODES);
    assert_eq!(admin.get_children(&base).unwrap().len(), NODES);
    wait_until("every node is watched", || {
        nodes.iter().all(|node| node.armed_watches() == 1)
    });

    // New data reaches every node through its task's nudge.
    for node in &nodes {
        node.set_data(b"v2").unwrap();
    }
    wait_until("every node holds the new data", || {
        paths
            .iter()
            .all(|path| data_of(&admin, path).as_deref() == Some(&b"v2"[..]))
    });
    assert!(threads() <= threads_before + 4);

    drop(nodes);
    // Dropping returns at once; each node's task deletes its node on the driver.
    wait_until("every node is deleted", || {
        admin.get_children(&base).unwrap().is_empty()
    });
    assert_no_leftover_contexts_soon(&zk);
    // The driver counts a task out just after its end is reported, and its thread (and
    // the timer thread) linger a moment once idle.
    wait_until("the tasks are gone", || {
        live_background_tasks() == tasks_before
    });
    wait_until("the threads are gone", || threads() <= threads_before);
}
