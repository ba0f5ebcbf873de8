//! Whole paths: creating a path with its parents ([`ensure_path`]) and deleting a node
//! with everything below it ([`delete_recursive`]), on any client handle, blocking or
//! async.

use crate::lifecycle::Client;
use crate::runtime::block_on;
use crate::support::{create_dir_async, retry_async, Patience};
use crate::{NodeOptions, RecipeError, Result, RetryPolicy};
use zookeeper_mt::{Deadline, Error, Timeout, ZkFuture, ZooKeeper};

/// Creates `path` and any missing parents as empty persistent nodes with an open ACL; a
/// node that already exists is fine. Takes any client handle (a `ZooKeeper` or a
/// `ManagedZooKeeper`, by reference or by value); rides out a lost connection for the
/// default reconnect timeout. A create whose reply is lost is simply made again
/// (`NodeExists` counts as done).
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
/// use zookeeper_mt_recipes::nodes::ensure_path;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// ensure_path(&zk, "/services/web/instances")?;
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
pub fn ensure_path(client: impl Into<Client>, path: &str) -> Result<()> {
    block_on(ensure_path_async(client, path))
}

/// [`ensure_path`], async: no thread waits for it. Dropped, a create already sent may
/// still apply (leaving parents made so far, which `ensure_path` would make anyway).
pub async fn ensure_path_async(client: impl Into<Client>, path: &str) -> Result<()> {
    zookeeper_mt::validate_path(path, false)?;
    let client = client.into();
    let session = client.session();
    let zk = &session.zk;
    let nodes = NodeOptions::default();
    retry_async(zk, patience(zk, Timeout::Never), || {
        create_dir_async(zk, path, &nodes)
    })
    .await
}

/// Deletes `path` and every node below it (children first, each level's deletes
/// pipelined); an absent `path` is fine. Nodes created below it meanwhile are deleted
/// too: the walk starts again until the delete of `path` itself applies. Rides out a
/// lost connection for the default reconnect timeout, and fails with
/// [`RecipeError::Timeout`] once `timeout` has passed (having deleted part of the tree,
/// deepest nodes first). Deleting `/` is refused (`InvalidArgument`).
///
/// The deletes are at any version: this is "remove this subtree", not a conditional
/// change. Ephemeral nodes of other sessions are deleted like the rest.
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
/// use zookeeper_mt_recipes::nodes::delete_recursive;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// delete_recursive(&zk, "/services/web", Duration::from_secs(30))?;
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
pub fn delete_recursive(
    client: impl Into<Client>,
    path: &str,
    timeout: impl Into<Timeout>,
) -> Result<()> {
    block_on(delete_recursive_async(client, path, timeout))
}

/// [`delete_recursive`], async: no thread waits for it. Dropped, the deletes already
/// sent may still apply (a part of the subtree, deepest nodes first).
pub async fn delete_recursive_async(
    client: impl Into<Client>,
    path: &str,
    timeout: impl Into<Timeout>,
) -> Result<()> {
    zookeeper_mt::validate_path(path, false)?;
    if path == "/" {
        return Err(RecipeError::InvalidArgument(
            "cannot delete the root node /",
        ));
    }
    let timeout = timeout.into();
    let client = client.into();
    let session = client.session();
    let zk = &session.zk;
    let patience = patience(zk, timeout);
    loop {
        let levels = subtree(zk, patience, path).await?;
        // Deepest level first; the last level is `path` itself.
        for level in levels.iter().rev() {
            let deletes: Vec<(&str, ZkFuture<()>)> = level
                .iter()
                .map(|node| (node.as_str(), zk.delete_async(node, None)))
                .collect();
            for (node, delete) in deletes {
                match delete.await {
                    Ok(()) | Err(Error::NoNode) => {}
                    // A child created meanwhile: the next walk finds it.
                    Err(Error::NotEmpty) => {}
                    Err(error) if error.is_retryable() => {
                        retry_async(zk, patience, || delete_absent_ok(zk, node)).await?;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        }
        if retry_async(zk, patience, || zk.exists_async(path))
            .await?
            .is_none()
        {
            return Ok(());
        }
        if Deadline::from(timeout).expired() {
            return Err(RecipeError::Timeout);
        }
    }
}

/// Deletes `node` at any version; an absent node is fine, a non-empty one is left for
/// the next walk.
async fn delete_absent_ok(zk: &ZooKeeper, node: &str) -> zookeeper_mt::Result<()> {
    match zk.delete_async(node, None).await {
        Ok(()) | Err(Error::NoNode) | Err(Error::NotEmpty) => Ok(()),
        Err(error) => Err(error),
    }
}

/// The nodes of the subtree at `root`, by depth: `[[root], [its children], ...]`
/// (empty if `root` is absent). Each level's listings are pipelined.
async fn subtree(zk: &ZooKeeper, patience: Patience, root: &str) -> Result<Vec<Vec<String>>> {
    let mut levels: Vec<Vec<String>> = Vec::new();
    let mut level = vec![root.to_string()];
    while !level.is_empty() {
        let listings: Vec<ZkFuture<Vec<String>>> = level
            .iter()
            .map(|node| zk.get_children_async(node))
            .collect();
        let mut next = Vec::new();
        for (node, listing) in level.iter().zip(listings) {
            let children = match listing.await {
                Ok(children) => children,
                Err(Error::NoNode) => continue,
                Err(error) if error.is_retryable() => {
                    match retry_async(zk, patience, || zk.get_children_async(node)).await {
                        Ok(children) => children,
                        Err(RecipeError::ZooKeeper(Error::NoNode)) => continue,
                        Err(error) => return Err(error),
                    }
                }
                Err(error) => return Err(error.into()),
            };
            let parent = if node == "/" { "" } else { node.as_str() };
            next.extend(children.iter().map(|child| format!("{parent}/{child}")));
        }
        levels.push(level);
        level = next;
    }
    if levels.len() == 1
        && retry_async(zk, patience, || zk.exists_async(root))
            .await?
            .is_none()
    {
        return Ok(Vec::new());
    }
    Ok(levels)
}

/// The default retry policy on `zk`, within `timeout`.
fn patience(zk: &ZooKeeper, timeout: Timeout) -> Patience {
    Patience::of(zk, RetryPolicy::default()).before(Deadline::from(timeout))
}
