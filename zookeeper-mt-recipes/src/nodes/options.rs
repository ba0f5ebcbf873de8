//! How the nodes a recipe creates are made: their ACL, and whether the recipe's
//! directories are container nodes.

use crate::nodes::SEQUENCE_LIMIT;
use zookeeper_mt::{Acl, CreateMode};

/// The ACL and directory kind of the nodes a recipe creates. The default is what a
/// recipe did before it took options: an open ACL (`world:anyone` may do anything) and
/// persistent directories.
///
/// With digest or SASL authentication in use, give recipe nodes an ACL of their own, or
/// any client can delete a lock node or a queue item:
///
/// ```
/// use zookeeper_mt_recipes::NodeOptions;
/// use zookeeper_mt::Acl;
///
/// let only_us = NodeOptions::default()
///     .acl(Acl::CREATOR_ALL)
///     .container_dirs(true);
/// assert!(only_us.uses_container_dirs());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOptions {
    acl: Vec<Acl>,
    container_dirs: bool,
    sequence_limit: i32,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            acl: Acl::OPEN_UNSAFE.into(),
            container_dirs: false,
            sequence_limit: SEQUENCE_LIMIT,
        }
    }
}

impl NodeOptions {
    /// The ACL every node the recipe creates gets (directories, items, lock nodes, ...).
    /// Parents above the recipe's directory that are missing are created with it too.
    pub fn acl(mut self, acl: impl Into<Vec<Acl>>) -> Self {
        self.acl = acl.into();
        self
    }

    /// Create the recipe's directories as container nodes (`CreateMode::Container`), so
    /// the server removes them once they are empty (ZooKeeper 3.5.3+). Recipes recreate a
    /// directory that went away. An emptied container directory also starts its sequence
    /// counter afresh, so a directory whose counter reached its end recovers by itself
    /// once idle.
    pub fn container_dirs(mut self, container: bool) -> Self {
        self.container_dirs = container;
        self
    }

    /// The sequence number at which the ordered recipes (lock, election, read-write
    /// lock, semaphore) restart their directory's counter: a node numbered at or past it
    /// is removed again and the directory is restarted once empty (see each recipe's
    /// docs on the counter's end). Default and upper bound:
    /// [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT), just below where a ZooKeeper 3.8
    /// server's counter ends; values are clamped to `1..=SEQUENCE_LIMIT`.
    ///
    /// A lower limit restarts counters sooner, which lets a test (or a drill) cross the
    /// restart against a real server in a few hundred operations instead of 2^31. Every
    /// user of a directory must use the same limit: a node another user numbers at or
    /// past our limit takes no part for us, so our waiters could wait for it forever.
    pub fn sequence_limit(mut self, limit: i32) -> Self {
        self.sequence_limit = limit.clamp(1, SEQUENCE_LIMIT);
        self
    }

    /// The sequence limit ([`sequence_limit`](Self::sequence_limit)).
    pub fn limit(&self) -> i32 {
        self.sequence_limit
    }

    /// The ACL nodes are created with.
    pub fn acl_list(&self) -> &[Acl] {
        &self.acl
    }

    /// Whether directories are container nodes.
    pub fn uses_container_dirs(&self) -> bool {
        self.container_dirs
    }

    /// The mode a recipe directory is created with.
    pub(crate) fn dir_mode(&self) -> CreateMode {
        if self.container_dirs {
            CreateMode::Container
        } else {
            CreateMode::Persistent
        }
    }
}
