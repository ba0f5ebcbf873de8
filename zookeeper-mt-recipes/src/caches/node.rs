//! [`NodeCache`]: one node's data and `Stat`, or its absence.

use super::engine::Config;
use super::{cache_methods, Client, Core, NodeData};
use crate::Result;
use crate::RetryPolicy;
use std::sync::Arc;

/// The data and `Stat` of one node, kept up to date (Curator's `NodeCache`; a
/// generalisation of [`ConfigWatch`](crate::caches::config_watch::ConfigWatch) with a snapshot,
/// coalesced events and recovery across sessions). The node need not exist: the cache
/// then holds nothing and reports `Added` when it is created.
///
/// One watch at a time: a data watch (`get_watch`) while the node exists, an `exists`
/// watch while it does not. See the [module docs](super) for what is guaranteed.
///
/// ```no_run
/// use zookeeper_mt_recipes::caches::{CacheEvent, NodeCache};
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let config = NodeCache::new(&zk, "/app/config")?;
/// config.wait_initialized(Duration::from_secs(10))?;
/// if let Some(node) = config.current() {
///     println!("config v{}: {:?}", node.stat.version, node.data);
/// }
/// while let Ok(event) = config.events().recv() {
///     if let CacheEvent::Updated { new, .. } | CacheEvent::Added(new) = event {
///         println!("reload with {:?}", new.data);
///     }
/// }
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
///
/// Cheap to clone: clones are one cache (one view, one task, one event stream).
#[derive(Debug, Clone)]
pub struct NodeCache {
    core: Core,
}

impl NodeCache {
    /// Starts following `path` with a plain handle or a managed client (`&zk`,
    /// `&managed`). Returns at once; the first read happens in the cache's task
    /// (see [`wait_initialized`](Self::wait_initialized)). Fails on an invalid path.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<NodeCache> {
        let config = Config {
            root: path.to_string(),
            max_depth: 0,
            root_data: true,
            retry: RetryPolicy::for_followers(),
        };
        Ok(NodeCache {
            core: Core::start(client.into(), config)?,
        })
    }

    /// The node as last read, or `None` if it does not exist (or is not loaded yet).
    pub fn current(&self) -> Option<Arc<NodeData>> {
        self.core.shared.view.read().get(&self.core.root).cloned()
    }

    cache_methods!();
}
