//! [`ChildrenCache`]: the children of one node, with their data.

use super::engine::Config;
use super::{cache_methods, Client, Core, NodeData};
use crate::Result;
use crate::RetryPolicy;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The children of one node with their data and `Stat`s, kept up to date (Curator's
/// `PathChildrenCache`). Events are about the children (full paths); the parent itself
/// is not reported. The parent need not exist: the cache is then empty and fills up
/// when it is created.
///
/// Watches: one child watch on the parent (an `exists` watch while it is absent) and
/// one data watch per child. See the [module docs](super) for what is guaranteed.
///
/// ```no_run
/// use zookeeper_mt_recipes::caches::{CacheEvent, ChildrenCache};
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let workers = ChildrenCache::new(&zk, "/workers")?;
/// workers.wait_initialized(Duration::from_secs(10))?;
/// println!("{} workers: {:?}", workers.len(), workers.children().keys());
/// while let Ok(event) = workers.events().recv() {
///     match event {
///         CacheEvent::Added(worker) => println!("joined: {}", worker.name()),
///         CacheEvent::Removed(worker) => println!("left: {}", worker.name()),
///         _ => {}
///     }
/// }
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
///
/// Cheap to clone: clones are one cache (one view, one task, one event stream).
#[derive(Debug, Clone)]
pub struct ChildrenCache {
    core: Core,
}

impl ChildrenCache {
    /// Starts following the children of `path` with a plain handle or a managed client.
    /// Returns at once; see [`wait_initialized`](Self::wait_initialized). Fails on an
    /// invalid path.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<ChildrenCache> {
        let config = Config {
            root: path.to_string(),
            max_depth: 1,
            root_data: false,
            retry: RetryPolicy::for_followers(),
        };
        Ok(ChildrenCache {
            core: Core::start(client.into(), config)?,
        })
    }

    /// The children by name.
    pub fn children(&self) -> BTreeMap<String, Arc<NodeData>> {
        self.core
            .shared
            .view
            .read()
            .values()
            .map(|node| (node.name().to_string(), Arc::clone(node)))
            .collect()
    }

    /// One child by name.
    pub fn get(&self, name: &str) -> Option<Arc<NodeData>> {
        let path = super::engine::child_path(&self.core.root, name);
        self.core.shared.view.read().get(&path).cloned()
    }

    /// How many children are cached.
    pub fn len(&self) -> usize {
        self.core.shared.view.read().len()
    }

    /// Whether no child is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    cache_methods!();
}
