//! Crate-internal steps the queue, work queue, barrier and id generator share for the
//! ends of ZooKeeper's counters, for directories that come and go (restarted counters,
//! container directories the server removed), and for waits that must leave nothing
//! registered when they give up.

use crate::nodes::{sequence_in_range, sequence_of};
use crate::support::{await_watch_async, ensure_dir_async, retry_async, Deadline, Patience};
use crate::{NodeOptions, RecipeError, Result};
use std::sync::atomic::AtomicU64;
use zookeeper_mt::{Error, Op, Watch, WatchedEvent, ZooKeeper};

/// Whether a sequential node's name carries a number recipes may order by (see
/// [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT)).
pub(crate) fn name_in_range(name: &str) -> bool {
    sequence_of(name).is_some_and(sequence_in_range)
}

/// How an attempt to restart a directory's sequence counter ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// The directory was deleted (by us or by a peer) and exists again, empty, with a
    /// fresh counter.
    Restarted,
    /// Peers hold nodes in it: it was left as it is.
    NotEmpty,
}

/// Tries to restart the sequence counter of `dir` by deleting it (with `inner`, the
/// recipe's own directories nested in it, first) in one multi, then recreates them.
///
/// The server deletes a node only when it has no children, and the multi applies all or
/// nothing, so this is safe against concurrent users: a peer holding a node keeps the
/// directory (and its counter) alive; a peer about to create gets `NoNode` and recreates
/// the directory. Nothing is read first, so a stale view cannot mislead it.
///
/// Dropped, a delete already sent may still apply; the next user of the directory then
/// recreates it (as after a peer's restart).
pub(crate) async fn restart_dir_async(
    zk: &ZooKeeper,
    dir: &str,
    inner: &[&str],
    nodes: &NodeOptions,
    patience: Patience,
) -> Result<Restart> {
    let mut doomed: Vec<&str> = inner.to_vec();
    doomed.push(dir);
    let deleted = loop {
        let ops: Vec<Op> = doomed.iter().map(|path| Op::delete(path, -1)).collect();
        match retry_async(zk, patience, || zk.multi_async(&ops)).await {
            Ok(_) => break true,
            Err(RecipeError::ZooKeeper(Error::MultiFailed { index, error })) => {
                match *error {
                    // Gone already: a peer restarted it (or the server removed an empty
                    // container), possibly by our own earlier attempt whose reply was lost.
                    Error::NoNode if index + 1 == doomed.len() => break true,
                    // An inner directory is missing (e.g. a removed container): the rest
                    // can still go.
                    Error::NoNode => {
                        doomed.remove(index);
                    }
                    Error::NotEmpty => break false,
                    other => return Err(other.into()),
                }
            }
            Err(error) => return Err(error),
        }
    };
    if !deleted {
        return Ok(Restart::NotEmpty);
    }
    ensure_dir_async(zk, dir, nodes, patience).await?;
    for path in inner {
        ensure_dir_async(zk, path, nodes, patience).await?;
    }
    Ok(Restart::Restarted)
}

/// The children of `dir`; a missing directory (restarted, or an empty container the
/// server removed) has none.
pub(crate) async fn children_or_none_async(
    zk: &ZooKeeper,
    dir: &str,
    patience: Patience,
) -> Result<Vec<String>> {
    match crate::support::retry_async(zk, patience, || zk.get_children_async(dir)).await {
        Err(RecipeError::ZooKeeper(Error::NoNode)) => Ok(Vec::new()),
        other => other,
    }
}

/// Waits for `watch` until `deadline`. If the deadline comes first the watch is taken
/// off (locally: it then holds nothing in the client) and `Ok(None)` is returned, so a
/// wait that gives up leaves nothing registered; a dropped future takes the watch off
/// too ([`await_watch_async`]).
pub(crate) async fn wait_or_unwatch_async(
    zk: &ZooKeeper,
    watch: &mut Watch,
    deadline: Deadline,
) -> Result<Option<WatchedEvent>> {
    let uncounted = AtomicU64::new(0);
    await_watch_async(zk, watch, deadline, &uncounted).await
}

/// Takes `watch` off locally (it may have fired meanwhile: then there is nothing to take
/// off).
pub(crate) fn unwatch(zk: &ZooKeeper, watch: &Watch) {
    match zk.remove_watch(watch) {
        Ok(()) | Err(Error::NoWatcher) => {}
        Err(error) => log::debug!("recipes: removing a watch on {}: {error}", watch.path()),
    }
}

/// A number in `0..n` (0 when `n` is 0 or 1), from the standard library's randomly
/// seeded hasher: enough to spread consumers over a queue's head, no dependency.
pub(crate) fn random_below(n: usize) -> usize {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    if n <= 1 {
        return 0;
    }
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_range() {
        assert!(name_in_range("item-abc-0000000007"));
        assert!(!name_in_range("item-abc-2147483647"));
        assert!(!name_in_range("item-abc--2147483648"));
        assert!(!name_in_range("item-abc--000000005"));
        assert!(!name_in_range("ready"));
    }

    #[test]
    fn random_below_stays_below() {
        assert_eq!(random_below(0), 0);
        assert_eq!(random_below(1), 0);
        assert!((0..200).all(|_| random_below(7) < 7));
    }

    /// On a real server: a directory with a node in it is left alone; an empty one (with
    /// its inner directory) is deleted and recreated with a fresh counter; a missing one
    /// counts as restarted.
    #[test]
    fn restart_only_an_empty_directory() {
        use crate::nodes::guid;
        use zookeeper_mt::{Acl, CreateMode};
        let zk = ZooKeeper::connect(
            &zk_harness::shared_test_connect_string(),
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        let dir = format!("/recipes-unit/restart-{}", guid());
        let inner = format!("{dir}/inner");
        let nodes = NodeOptions::default();
        let patience = Patience::reconnect(std::time::Duration::from_secs(10));
        crate::nodes::ensure_path(&zk, &inner).unwrap();
        let open = Acl::OPEN_UNSAFE;
        let seq = |zk: &ZooKeeper| {
            let made = zk
                .create(
                    &format!("{dir}/n-"),
                    b"",
                    zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential)
                        .with_acl(open),
                )
                .unwrap();
            (made.clone(), sequence_of(&made).unwrap())
        };
        let (first, _) = seq(&zk);
        let (second, before) = seq(&zk);
        assert_eq!(
            crate::runtime::block_on(restart_dir_async(&zk, &dir, &[&inner], &nodes, patience))
                .unwrap(),
            Restart::NotEmpty
        );
        assert!(zk.exists(&first).unwrap().is_some());
        zk.delete(&first, None).unwrap();
        zk.delete(&second, None).unwrap();
        assert_eq!(
            crate::runtime::block_on(restart_dir_async(&zk, &dir, &[&inner], &nodes, patience))
                .unwrap(),
            Restart::Restarted
        );
        assert!(zk.exists(&inner).unwrap().is_some(), "inner recreated");
        let (_, after) = seq(&zk);
        assert!(after < before, "counter not restarted: {after} >= {before}");
        // A missing inner directory does not stop the restart of an empty one.
        zk.delete(&inner, None).unwrap();
        zk.delete(&format!("{dir}/n-{after:010}"), None).unwrap();
        assert_eq!(
            crate::runtime::block_on(restart_dir_async(&zk, &dir, &[&inner], &nodes, patience))
                .unwrap(),
            Restart::Restarted
        );
        zk.delete(&inner, None).unwrap();
        zk.delete(&dir, None).unwrap();
        assert_eq!(
            crate::runtime::block_on(restart_dir_async(&zk, &dir, &[], &nodes, patience)).unwrap(),
            Restart::Restarted,
            "a missing directory counts as restarted"
        );
        assert!(zk.exists(&dir).unwrap().is_some());
        zk.close().unwrap();
    }
}
