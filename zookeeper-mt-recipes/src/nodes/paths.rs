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
    retry_async(zk, patience(zk, Deadline::from(Timeout::Never)), || {
        create_dir_async(zk, path, &nodes)
    })
    .await
}

/// Deletes `path` and every node below it (children first: each node's children's
/// deletes and its own are sent together as soon as its listing arrives); an absent
/// `path` is fine. Nodes created below it meanwhile are deleted too: a node whose delete
/// finds new children is listed and deleted again, until the delete of `path` itself
/// applies. Rides out a
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
    // One deadline for the whole call: every round and every retry spends from it.
    let deadline = Deadline::from(timeout.into());
    let client = client.into();
    let session = client.session();
    let zk = &session.zk;
    let patience = patience(zk, deadline);
    // A stack of levels still to delete; the top is worked on, and a level is retried
    // once the deeper level pushed above it is gone.
    let mut stack = vec![vec![path.to_string()]];
    while let Some(level) = stack.pop() {
        let round = delete_level(zk, patience, &level).await?;
        if round.left.is_empty() {
            continue;
        }
        if deadline.expired() {
            return Err(RecipeError::Timeout);
        }
        stack.push(round.left);
        if !round.deeper.is_empty() {
            stack.push(round.deeper);
        }
    }
    Ok(())
}

/// What one round over a level left.
struct Round {
    /// Nodes of the level still there (a child of theirs was not empty, or another
    /// session created one meanwhile).
    left: Vec<String>,
    /// Children of the level that have children of their own.
    deeper: Vec<String>,
}

/// One round over `level`: every node is listed (pipelined), and as each listing
/// arrives its children's deletes and then its own are sent at once, before any reply
/// is awaited. The server applies one session's requests in order, so a node whose
/// children were all leaves is gone within one round trip of its listing, and that one
/// round trip is the whole window in which another session's create can make it
/// non-empty again. A child that is not a leaf refuses its delete (`NotEmpty`) and is
/// returned in `deeper`.
async fn delete_level(zk: &ZooKeeper, patience: Patience, level: &[String]) -> Result<Round> {
    let listings: Vec<ZkFuture<Vec<String>>> = level
        .iter()
        .map(|node| zk.get_children_async(node))
        .collect();
    // Per node of the level: its children's deletes, then its own.
    let mut sent = Vec::with_capacity(level.len());
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
        let prefix = if node == "/" { "" } else { node.as_str() };
        let children: Vec<(String, ZkFuture<()>)> = children
            .iter()
            .map(|child| {
                let child = format!("{prefix}/{child}");
                let delete = zk.delete_async(&child, None);
                (child, delete)
            })
            .collect();
        let own = zk.delete_async(node, None);
        sent.push((node, children, own));
    }
    let mut round = Round {
        left: Vec::new(),
        deeper: Vec::new(),
    };
    for (node, children, own) in sent {
        for (child, delete) in children {
            if !deleted(zk, patience, &child, delete).await? {
                round.deeper.push(child);
            }
        }
        if !deleted(zk, patience, node, own).await? {
            round.left.push(node.clone());
        }
    }
    Ok(round)
}

/// Whether the delete of `node` (at any version) left it gone: `true` if it applied or
/// the node was already absent, `false` if the node has children. A lost reply is
/// settled by deleting again within `patience`.
async fn deleted(
    zk: &ZooKeeper,
    patience: Patience,
    node: &str,
    delete: ZkFuture<()>,
) -> Result<bool> {
    match delete.await {
        Ok(()) | Err(Error::NoNode) => Ok(true),
        Err(Error::NotEmpty) => Ok(false),
        Err(error) if error.is_retryable() => {
            retry_async(zk, patience, || delete_absent_ok(zk, node)).await
        }
        Err(error) => Err(error.into()),
    }
}

/// Deletes `node` at any version: `true` once it is gone (also if it was absent),
/// `false` if it has children.
async fn delete_absent_ok(zk: &ZooKeeper, node: &str) -> zookeeper_mt::Result<bool> {
    match zk.delete_async(node, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(true),
        Err(Error::NotEmpty) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The default retry policy on `zk`, within `deadline`.
fn patience(zk: &ZooKeeper, deadline: Deadline) -> Patience {
    Patience::of(zk, RetryPolicy::default()).before(deadline)
}
