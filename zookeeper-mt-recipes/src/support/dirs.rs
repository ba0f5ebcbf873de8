//! Recipe directories and fixed nodes: base paths, creating directories and parents.

use super::*;

// ---------------------------------------------------------------------------------------
// Nodes.
// ---------------------------------------------------------------------------------------

/// Validates a recipe's base path: a valid node path other than `/`.
pub(crate) fn check_base_path(path: &str) -> Result<()> {
    zookeeper_mt::validate_path(path, false)?;
    if path == "/" {
        return Err(RecipeError::InvalidArgument(
            "the recipe path must not be /",
        ));
    }
    Ok(())
}

/// Creates the recipe directory `path` (with `nodes`' ACL, as a container if asked) and
/// any missing parents (persistent, same ACL); an existing node is fine (the body of
/// [`crate::nodes::ensure_path`]).
pub(crate) async fn create_dir_async(
    zk: &ZooKeeper,
    path: &str,
    nodes: &NodeOptions,
) -> zookeeper_mt::Result<()> {
    // `exists` first: creating a node that exists under a parent we may not create in
    // would fail with NoAuth rather than NodeExists.
    if path == "/" || zk.exists_async(path).await?.is_some() {
        return Ok(());
    }
    make_dir_async(zk, path, b"", nodes.dir_mode(), nodes).await
}

/// Creates `path` holding `data` with `mode`; on NoNode its parents first (persistent,
/// empty). One request when the parent exists.
pub(super) async fn make_dir_async(
    zk: &ZooKeeper,
    path: &str,
    data: &[u8],
    mode: CreateMode,
    nodes: &NodeOptions,
) -> zookeeper_mt::Result<()> {
    // The nodes still to create, deepest last: the path, then each missing parent.
    let mut missing: Vec<(&str, &[u8], CreateMode)> = vec![(path, data, mode)];
    while let Some(&(path, data, mode)) = missing.last() {
        let options = zookeeper_mt::CreateOptions::new(mode).with_acl(nodes.acl_list());
        match zk.create_async(path, data, options).await {
            Ok(_) | Err(Error::NodeExists) => {
                missing.pop();
            }
            Err(Error::NoNode) => match path.rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => {
                    missing.push((parent, b"", CreateMode::Persistent))
                }
                _ => return Err(Error::NoNode),
            },
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// [`create_dir`] within `patience`.
pub(crate) async fn ensure_dir_async(
    zk: &ZooKeeper,
    dir: &str,
    nodes: &NodeOptions,
    patience: Patience,
) -> Result<()> {
    retry_async(zk, patience, || create_dir_async(zk, dir, nodes)).await
}

/// Creates the persistent node `path` holding `data` unless it exists (then it is left as
/// it is), and any missing parents (empty), within `patience`.
pub(crate) fn create_if_absent(
    zk: &ZooKeeper,
    path: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: impl Into<Patience>,
) -> Result<()> {
    block_on(create_if_absent_async(
        zk,
        path,
        data,
        nodes,
        patience.into(),
    ))
}

/// [`create_if_absent`], async. Dropped, a create already sent may still apply (the
/// node is then there, as after a call that timed out).
pub(crate) async fn create_if_absent_async(
    zk: &ZooKeeper,
    path: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: Patience,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        let options =
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(nodes.acl_list());
        match zk.create_async(path, data, options).await {
            Ok(_) | Err(Error::NodeExists) => return Ok(()),
            Err(Error::NoNode) => match path.rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => {
                    ensure_dir_async(zk, parent, nodes, patience).await?
                }
                _ => return Err(Error::NoNode.into()),
            },
            Err(error) if error.is_retryable() => {
                attempt += 1;
                reconnected(zk, patience, attempt).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}
