//! The four queue kinds sharing the queue's claim protocol, behind one face, for the
//! claim tests (`queue_claims`, `queue_fault_history`): an async take (the recipe's own
//! future, on a clone of the one value every take shares), a blocking put, and where
//! the server keeps the items.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::{BoundedQueue, DelayedQueue, PriorityQueue, Queue, Result};

/// A queue kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fifo,
    Priority,
    Bounded,
    Delayed,
}

/// Every kind.
pub const KINDS: [Kind; 4] = [Kind::Fifo, Kind::Priority, Kind::Bounded, Kind::Delayed];

/// A bound no test reaches.
const BOUND: usize = 100_000;

/// A future owning what it uses (a clone of the queue), as a spawned task's would.
pub type Owned<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One value of some kind (clones are that one value).
#[derive(Clone)]
pub enum AnyQueue {
    Fifo(Queue),
    Priority(PriorityQueue),
    Bounded(BoundedQueue),
    Delayed(DelayedQueue),
}

impl AnyQueue {
    /// The `kind` queue at `path` on `zk`.
    pub fn new(kind: Kind, zk: &ZooKeeper, path: &str) -> AnyQueue {
        match kind {
            Kind::Fifo => AnyQueue::Fifo(Queue::new(zk, path).unwrap()),
            Kind::Priority => AnyQueue::Priority(PriorityQueue::new(zk, path).unwrap()),
            Kind::Bounded => AnyQueue::Bounded(BoundedQueue::new(zk, path, BOUND).unwrap()),
            Kind::Delayed => AnyQueue::Delayed(DelayedQueue::new(zk, path).unwrap()),
        }
    }

    /// An async take (the recipe's own future: no thread waits for it).
    pub fn take(&self, timeout: Timeout) -> Owned<Result<Vec<u8>>> {
        match self.clone() {
            AnyQueue::Fifo(q) => Box::pin(async move { q.take_async(timeout).await }),
            AnyQueue::Priority(q) => Box::pin(async move { q.take_async(timeout).await }),
            AnyQueue::Bounded(q) => Box::pin(async move { q.take_async(timeout).await }),
            AnyQueue::Delayed(q) => Box::pin(async move { q.take_async(timeout).await }),
        }
    }

    /// An async try-take (the recipe's own future: no thread waits for it).
    pub fn try_take_async(&self) -> Owned<Result<Option<Vec<u8>>>> {
        match self.clone() {
            AnyQueue::Fifo(q) => Box::pin(async move { q.try_take_async().await }),
            AnyQueue::Priority(q) => Box::pin(async move { q.try_take_async().await }),
            AnyQueue::Bounded(q) => Box::pin(async move { q.try_take_async().await }),
            AnyQueue::Delayed(q) => Box::pin(async move { q.try_take_async().await }),
        }
    }

    /// A blocking put (due at once for the delayed queue, priority 0).
    pub fn put(&self, data: &[u8]) -> Result<()> {
        match self {
            AnyQueue::Fifo(q) => q.put(data),
            AnyQueue::Priority(q) => q.put(data, 0),
            AnyQueue::Bounded(q) => q.put(data, Timeout::Never),
            AnyQueue::Delayed(q) => q.put_after(data, Duration::ZERO).map(drop),
        }
    }

    /// Takes waiting on this value's child watch now.
    pub fn waiting(&self) -> usize {
        match self {
            AnyQueue::Fifo(q) => q.waiting(),
            AnyQueue::Priority(q) => q.waiting(),
            AnyQueue::Bounded(q) => q.waiting(),
            AnyQueue::Delayed(q) => q.waiting(),
        }
    }

    /// A blocking take without waiting.
    pub fn try_take(&self) -> Result<Option<Vec<u8>>> {
        match self {
            AnyQueue::Fifo(q) => q.try_take(),
            AnyQueue::Priority(q) => q.try_take(),
            AnyQueue::Bounded(q) => q.try_take(),
            AnyQueue::Delayed(q) => q.try_take(),
        }
    }
}

/// The directory of the items of the `kind` queue at `path`.
pub fn items_dir(kind: Kind, path: &str) -> String {
    match kind {
        Kind::Bounded => format!("{path}/items"),
        _ => path.to_string(),
    }
}

/// The item nodes' data and the take markers left, as the server has them (read on
/// `admin`, after a `sync`).
pub fn server_state(admin: &ZooKeeper, kind: Kind, path: &str) -> (Vec<Vec<u8>>, Vec<String>) {
    let dir = items_dir(kind, path);
    admin.sync(&dir).unwrap();
    let mut items = Vec::new();
    for name in admin.get_children(&dir).unwrap_or_default() {
        if !name.starts_with("item") {
            continue;
        }
        match admin.get(&format!("{dir}/{name}")) {
            Ok((data, _)) => items.push(data),
            Err(zookeeper_mt::Error::NoNode) => {}
            Err(e) => panic!("reading {dir}/{name}: {e}"),
        }
    }
    let markers = admin
        .get_children(&format!("{dir}/receipts"))
        .unwrap_or_default()
        .into_iter()
        .filter(|name| name.starts_with("took-"))
        .collect();
    (items, markers)
}

/// Waits (at most `limit`) until the recipes' background tasks are back to `baseline`:
/// every dropped take's claim settled.
pub fn wait_settled(baseline: usize, limit: Duration) {
    zk_harness::testing::wait_until("every dropped claim settled", limit, || {
        zookeeper_mt_recipes::live_background_tasks() <= baseline
    });
}
