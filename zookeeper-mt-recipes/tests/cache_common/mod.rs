//! Shared by the cache tests: a reader-side model that checks every event against what
//! the reader already knows, reading until a condition holds, the server's own view of
//! a subtree, and forcing a session's expiry.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Error, ZooKeeper};
use zookeeper_mt_recipes::caches::{CacheEvent, NodeData};
use zookeeper_mt_recipes::events::EventStream;

/// How long a test waits for something that should happen.
pub const WAIT: Duration = Duration::from_secs(30);

/// What a reader knows from the events it received, checked as it goes: a path's
/// events must follow its history (`Added`, `Updated` with growing `mzxid`, `Removed`;
/// a re-created node has a larger `czxid`), and `Updated`/`Removed` must name the state
/// the reader knew.
#[derive(Debug, Default)]
pub struct Model {
    pub nodes: BTreeMap<String, Arc<NodeData>>,
    /// Every non-change event, in order.
    pub signals: Vec<CacheEvent>,
    /// Change events received.
    pub changes: usize,
    /// Largest czxid seen per path (a re-creation must exceed it).
    czxids: BTreeMap<String, i64>,
}

impl Model {
    pub fn apply(&mut self, event: CacheEvent) {
        match &event {
            CacheEvent::Added(node) => {
                assert!(
                    !self.nodes.contains_key(&node.path),
                    "Added for {} which the reader already has",
                    node.path
                );
                if let Some(&czxid) = self.czxids.get(&node.path) {
                    assert!(
                        node.stat.czxid > czxid,
                        "{} re-added with an older czxid",
                        node.path
                    );
                }
                self.czxids.insert(node.path.clone(), node.stat.czxid);
                self.nodes.insert(node.path.clone(), Arc::clone(node));
                self.changes += 1;
            }
            CacheEvent::Updated { old, new } => {
                let known = self
                    .nodes
                    .get(&new.path)
                    .unwrap_or_else(|| panic!("Updated for unknown {}", new.path));
                assert_eq!(
                    **known, **old,
                    "Updated's old state is not what the reader knew"
                );
                assert_eq!(
                    new.stat.czxid, old.stat.czxid,
                    "Updated across a re-creation"
                );
                assert!(new.stat.mzxid > old.stat.mzxid, "Updated to an older state");
                self.nodes.insert(new.path.clone(), Arc::clone(new));
                self.changes += 1;
            }
            CacheEvent::Removed(node) => {
                let known = self
                    .nodes
                    .remove(&node.path)
                    .unwrap_or_else(|| panic!("Removed for unknown {}", node.path));
                assert_eq!(
                    *known, **node,
                    "Removed's state is not what the reader knew"
                );
                self.changes += 1;
            }
            _ => self.signals.push(event),
        }
    }

    /// Paths and data.
    pub fn data(&self) -> BTreeMap<String, Vec<u8>> {
        self.nodes
            .iter()
            .map(|(path, node)| (path.clone(), node.data.clone()))
            .collect()
    }

    /// Reads events (checking each) until `done` holds; fails after [`WAIT`] or if the
    /// stream ends first.
    pub fn read_until(
        &mut self,
        events: &EventStream<CacheEvent>,
        what: &str,
        done: impl Fn(&Model) -> bool,
    ) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(event) => self.apply(event),
                Err(error) => panic!(
                    "never happened: {what} ({error}); the reader has {:?}, signals {:?}",
                    self.data().keys().collect::<Vec<_>>(),
                    self.signals
                ),
            }
        }
    }

    /// Reads until the signal `signal` arrives.
    pub fn read_until_signal(&mut self, events: &EventStream<CacheEvent>, signal: CacheEvent) {
        let seen = self.signals.iter().filter(|s| **s == signal).count();
        self.read_until(events, &format!("{signal:?}"), |m| {
            m.signals.iter().filter(|s| **s == signal).count() > seen
        });
    }
}

/// The subtree at `root` down to `max_depth` as the server has it (paths and data).
pub fn server_tree(zk: &ZooKeeper, root: &str, max_depth: usize) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_string(), 0)];
    while let Some((path, depth)) = stack.pop() {
        let Ok((data, _)) = zk.get(&path) else {
            continue;
        };
        out.insert(path.clone(), data);
        if depth < max_depth {
            for name in zk.get_children(&path).unwrap_or_default() {
                stack.push((format!("{path}/{name}"), depth + 1));
            }
        }
    }
    out
}

/// Creates a persistent node, and its missing parents (empty).
pub fn create(zk: &ZooKeeper, path: &str, data: &[u8]) {
    let mut result = zk.create(path, data, CreateMode::Persistent);
    if result == Err(Error::NoNode) {
        let (parent, _) = path.rsplit_once('/').unwrap();
        zookeeper_mt_recipes::nodes::ensure_path(zk, parent).unwrap();
        result = zk.create(path, data, CreateMode::Persistent);
    }
    result.unwrap_or_else(|e| panic!("create {path}: {e}"));
}

/// Deletes `path` and everything below it.
pub fn delete_tree(zk: &ZooKeeper, path: &str) {
    if let Ok(children) = zk.get_children(path) {
        for name in children {
            delete_tree(zk, &format!("{path}/{name}"));
        }
    }
    match zk.delete(path, None) {
        Ok(()) | Err(Error::NoNode) => {}
        Err(error) => panic!("delete {path}: {error}"),
    }
}

/// Ends the session of `zk` on the server: another handle takes it over with its id and
/// password and closes it (the way ZooKeeper's own tests expire a session). `zk` must be
/// cut off from the server meanwhile (else it would take its session back).
pub fn expire(zk: &ZooKeeper, hosts: &str) {
    let id = zk.client_id().unwrap();
    let thief = ZooKeeper::builder(hosts).session(id).connect().unwrap();
    assert_eq!(thief.client_id().unwrap().session_id, id.session_id);
    thief.close().unwrap();
}

/// Waits until the cache holds `expected` armed watches and `zk` has exactly that many
/// contexts above `baseline` (a watch that just fired is re-armed a moment later, so a
/// count read right after an event may be one short); fails after 10 s.
pub fn settled_watches(
    armed: impl Fn() -> usize,
    zk: &ZooKeeper,
    baseline: usize,
    expected: usize,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (now, contexts) = (armed(), zk.live_contexts().saturating_sub(baseline));
        if now == expected && contexts == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {expected} armed watches, the cache has {now} and the handle {contexts}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
