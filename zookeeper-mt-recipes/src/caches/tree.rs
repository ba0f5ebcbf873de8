//! [`TreeCache`]: a whole subtree, optionally down to a maximum depth.

use super::engine::Config;
use super::{cache_methods, Client, Core, NodeData};
use crate::Result;
use crate::RetryPolicy;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A node and its descendants with their data and `Stat`s, kept up to date (Curator's
/// `CuratorCache`, or its older `TreeCache` with `maxDepth`). The root is reported and
/// cached too. The root need not exist: the cache is then empty and fills up when it is
/// created.
///
/// Watches: per node, one data watch and (above the maximum depth) one child watch; an
/// `exists` watch on an absent root. See the [module docs](super) for what is
/// guaranteed.
///
/// ```no_run
/// use zookeeper_mt_recipes::caches::TreeCache;
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let tree = TreeCache::builder("/config").build(&zk)?;
/// tree.wait_initialized(Duration::from_secs(10))?;
/// for (path, node) in tree.snapshot() {
///     println!("{path}: {} bytes", node.data.len());
/// }
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
///
/// Cheap to clone: clones are one cache (one view, one task, one event stream).
#[derive(Debug, Clone)]
pub struct TreeCache {
    core: Core,
}

/// Options of a [`TreeCache`].
#[derive(Debug, Clone)]
pub struct TreeCacheBuilder {
    root: String,
    max_depth: usize,
    retry: RetryPolicy,
}

impl TreeCacheBuilder {
    /// Follow nodes down to `depth` levels below the root (0: the root only; 1: the root
    /// and its children; ...). Default: no limit.
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }

    /// How the background task rides out failed requests: the pauses between tries
    /// (see [`RetryPolicy`]; its reconnect timeout is not used: a follower waits for the
    /// connection as long as it takes). Default: [`RetryPolicy::for_followers`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Starts the cache with a plain handle or a managed client. Returns at once; see
    /// [`TreeCache::wait_initialized`]. Fails on an invalid path.
    pub fn build(self, client: impl Into<Client>) -> Result<TreeCache> {
        let config = Config {
            root: self.root,
            max_depth: self.max_depth,
            root_data: true,
            retry: self.retry,
        };
        Ok(TreeCache {
            core: Core::start(client.into(), config)?,
        })
    }
}

impl TreeCache {
    /// Options for a cache of the subtree at `path`.
    pub fn builder(path: &str) -> TreeCacheBuilder {
        TreeCacheBuilder {
            root: path.to_string(),
            max_depth: usize::MAX,
            retry: RetryPolicy::for_followers(),
        }
    }

    /// Starts a cache of the whole subtree at `path` (no depth limit).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<TreeCache> {
        TreeCache::builder(path).build(client)
    }

    /// Every cached node by full path.
    pub fn snapshot(&self) -> BTreeMap<String, Arc<NodeData>> {
        self.core.shared.view.read().clone()
    }

    /// One node by full path.
    pub fn get(&self, path: &str) -> Option<Arc<NodeData>> {
        self.core.shared.view.read().get(path).cloned()
    }

    /// The cached children of `path`, by name.
    pub fn children_of(&self, path: &str) -> BTreeMap<String, Arc<NodeData>> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        self.core
            .shared
            .view
            .read()
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| !p[prefix.len()..].contains('/') && p.len() > prefix.len())
            .map(|(_, node)| (node.name().to_string(), Arc::clone(node)))
            .collect()
    }

    /// How many nodes are cached.
    pub fn len(&self) -> usize {
        self.core.shared.view.read().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    cache_methods!();
}
