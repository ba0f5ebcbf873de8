//! Paths of every length reach C intact: short ones are made NUL-terminated on the
//! stack for their call, those past 255 bytes on the heap; both when the request is
//! sent at once and when it is queued behind `MAX_IN_FLIGHT` others (the queued job
//! owns a copy). Each node is read back by another session under its full name.

mod common;

use common::{connect, hosts, unique, WAIT};
use std::time::Duration;
use zookeeper_mt::{CreateMode, ZooKeeper, MAX_IN_FLIGHT};

/// Lengths around the stack buffer's end (255 bytes) and well past it.
const NAME_LENGTHS: [usize; 6] = [1, 200, 254, 255, 256, 1_000];

fn path_of_length(parent: &str, total: usize) -> String {
    let name_len = total.saturating_sub(parent.len() + 1).max(1);
    format!("{parent}/{}", "n".repeat(name_len))
}

#[test]
fn every_length_round_trips_sent_at_once() {
    let zk = connect();
    let reader = connect();
    let parent = unique("lengths");
    zk.create(&parent, b"", CreateMode::Persistent).unwrap();
    for total in NAME_LENGTHS {
        let path = path_of_length(&parent, total.max(parent.len() + 2));
        let created = zk
            .create(&path, path.as_bytes(), CreateMode::Persistent)
            .unwrap();
        assert_eq!(created, path);
        let stat = zk.set(&path, path.as_bytes(), None).unwrap();
        assert_eq!(stat.version, 1);
        let (data, _) = reader.get(&path).unwrap();
        assert_eq!(data, path.as_bytes(), "length {}", path.len());
        assert!(reader.exists(&path).unwrap().is_some());
        zk.delete(&path, None).unwrap();
        assert!(reader.exists(&path).unwrap().is_none());
    }
    let children = reader.get_children(&parent).unwrap();
    assert!(children.is_empty(), "{children:?}");
}

#[test]
fn every_length_round_trips_when_queued() {
    let proxy =
        zk_harness::FaultProxy::start_on("127.0.0.1".parse().unwrap(), hosts()).expect("a proxy");
    let zk = ZooKeeper::connect(&proxy.connect_string(), Duration::from_secs(30)).unwrap();
    let reader = connect();
    let parent = unique("queued-lengths");
    zk.create(&parent, b"", CreateMode::Persistent).unwrap();
    proxy.stall();
    // Fill the handle, so the creates below are queued (each owning its path).
    let fillers: Vec<_> = (0..MAX_IN_FLIGHT).map(|_| zk.exists_async("/")).collect();
    let paths: Vec<String> = NAME_LENGTHS
        .iter()
        .map(|&total| path_of_length(&parent, total.max(parent.len() + 2)))
        .collect();
    let creates: Vec<_> = paths
        .iter()
        .map(|path| zk.create_async(path, path.as_bytes(), CreateMode::Persistent))
        .collect();
    assert!(zk.requests_queued() >= paths.len(), "not queued");
    proxy.resume();
    for filler in fillers {
        filler.wait_timeout(WAIT).unwrap();
    }
    for (path, create) in paths.iter().zip(creates) {
        assert_eq!(&create.wait_timeout(WAIT).unwrap(), path);
        let (data, _) = reader.get(path).unwrap();
        assert_eq!(data, path.as_bytes(), "length {}", path.len());
    }
}
