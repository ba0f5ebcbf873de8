//! The item protocol, shared with the work queue: item names, the exactly-once put
//! (item + ephemeral receipt in one `multi`), orphans past the counter's end.

use super::*;
use crate::recovery::restart_dir_async;
use crate::support::{delete_node_async, ensure_dir_async};

// ---------------------------------------------------------------------------------------
// The item protocol, shared with the work queue.
// ---------------------------------------------------------------------------------------

/// The item names among `children` (`item…` with a sequence suffix): those whose number
/// may be ordered by, in sequence order, and the others (created past the directory
/// counter's end: they take no part; see [`ItemStore::remove_orphans_async`]).
pub(crate) fn split_items(children: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (in_range, past_end): (Vec<_>, Vec<_>) = members(children, &[ITEM_PREFIX])
        .into_iter()
        .partition(|item| item.in_range());
    (
        in_range.into_iter().map(|item| item.name).collect(),
        past_end.into_iter().map(|item| item.name).collect(),
    )
}

/// The put guid in an item's name (`item-<32 hex digits>-<seq>`), if it has one.
pub(super) fn guid_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(ITEM_PREFIX)?.strip_prefix('-')?;
    let id = rest.get(..32)?;
    (id.bytes().all(|b| b.is_ascii_hexdigit()) && rest[32..].starts_with('-')).then_some(id)
}

/// The ordering tag in an item's name (`item-<guid>-<tag>-<seq>`), if it has one.
pub(crate) fn tag_of(name: &str) -> Option<&str> {
    let id = guid_of(name)?;
    let rest = &name[ITEM_PREFIX.len() + 1 + id.len() + 1..];
    let (tag, seq) = rest.split_once('-')?;
    (!tag.is_empty() && !seq.is_empty()).then_some(tag)
}

/// One put attempt's outcome.
pub(super) enum Attempt {
    /// Applied: the item's name (`None`: consumed before the put could look).
    Created(Option<String>),
    /// A guard operation failed: nothing applied.
    Refused,
}

/// Where a queue keeps its items and put receipts, and how it makes its nodes.
#[derive(Debug, Clone)]
pub(crate) struct ItemStore {
    /// The directory of the item nodes.
    pub(crate) items: String,
    /// The directory of the put receipts.
    pub(crate) receipts: String,
    /// Whether `receipts` is a child of `items` (the queue) rather than a sibling (the
    /// work queue): restarting the item counter then removes it too.
    pub(crate) receipts_inside: bool,
    /// ACL and directory kind.
    pub(crate) nodes: NodeOptions,
}

impl ItemStore {
    pub(super) fn receipt(&self, id: &str) -> String {
        format!("{}/{id}", self.receipts)
    }

    /// Creates the directories if missing (also after a restart or the removal of an
    /// empty container directory).
    pub(crate) async fn ensure_async(&self, zk: &ZooKeeper, patience: Patience) -> Result<()> {
        ensure_dir_async(zk, &self.items, &self.nodes, patience).await?;
        ensure_dir_async(zk, &self.receipts, &self.nodes, patience).await
    }

    /// Enqueues `data` as `<items>/item-<guid>-<seq>`, exactly once on `Ok`.
    ///
    /// Lost-create protection: the item and an ephemeral receipt `<receipts>/<guid>` are
    /// created by one multi; after a connection loss the receipt says whether it was
    /// applied (it cannot have been consumed: only this session deletes it).
    ///
    /// The counter's end: an item whose number is out of range is removed again (before
    /// its receipt, so an out-of-range item without a receipt is known to be an orphan of
    /// a dead session), and the directory is restarted if it is empty; if it is not, the
    /// put fails with `SequenceExhausted` instead of waiting for consumers that may never
    /// come. Nothing is left behind then, and no acknowledged item is ever reordered.
    ///
    /// Dropped once its multi may have been sent, the put may
    /// or may not have been applied (never twice); its receipt is removed in the
    /// background (see [`PendingPut`]).
    pub(crate) async fn put_async(
        &self,
        zk: &ZooKeeper,
        data: &[u8],
        patience: Patience,
    ) -> Result<()> {
        self.put_with_async(zk, data, "", &[], patience)
            .await
            .map(drop)
    }

    /// [`put_async`](Self::put_async) of an item named `item-<guid>-<tag>-<seq>` (a
    /// variant's ordering key; no `-` in it) whose multi also carries the `guard` operations (a bounded
    /// queue's versioned gate): `Ok(false)` if a guard operation refused it (nothing was
    /// enqueued; the caller reads again and decides), `Ok(true)` once enqueued exactly
    /// once. Dropped, as [`put_async`](Self::put_async).
    pub(crate) async fn put_with_async(
        &self,
        zk: &ZooKeeper,
        data: &[u8],
        tag: &str,
        guard: &[Op],
        patience: Patience,
    ) -> Result<bool> {
        self.put_with_id_async(zk, &guid(), data, tag, guard, patience)
            .await
    }

    /// [`put_with_async`](Self::put_with_async) whose first attempt carries the guid
    /// `first_id` (a restart past the counter's end takes a fresh one): a caller that
    /// retries the same put on another session can find out with
    /// [`find_async`](Self::find_async) whether an earlier attempt applied.
    pub(crate) async fn put_with_id_async(
        &self,
        zk: &ZooKeeper,
        first_id: &str,
        data: &[u8],
        tag: &str,
        guard: &[Op],
        patience: Patience,
    ) -> Result<bool> {
        let mut not_empty = 0;
        for restart in 0..PUT_RESTARTS {
            let id = if restart == 0 {
                first_id.to_string()
            } else {
                guid()
            };
            let mut pending = PendingPut::armed(zk, vec![self.receipt(&id)]);
            let created = self
                .put_once_async(zk, &id, data, tag, guard, patience)
                .await;
            let name = match created {
                Err(error) => {
                    pending.disarm();
                    return Err(error);
                }
                Ok(Attempt::Refused) => {
                    pending.disarm();
                    return Ok(false);
                }
                // Applied and already consumed: it was in range.
                Ok(Attempt::Created(None)) => {
                    pending.disarm();
                    return Ok(true);
                }
                Ok(Attempt::Created(Some(name))) => name,
            };
            let settled = self.settle_async(zk, &id, &name, patience).await;
            pending.disarm();
            match settled? {
                None => return Ok(true),
                Some(Restart::Restarted) => {}
                Some(Restart::NotEmpty) => {
                    // A peer may have restarted it a moment ago and put a fresh item: try
                    // once more; a second refusal is final.
                    not_empty += 1;
                    if not_empty == 2 {
                        break;
                    }
                }
            }
        }
        Err(RecipeError::SequenceExhausted {
            dir: self.items.clone(),
        })
    }

    /// After put `id` created item `name`: `None` if its number is in range (the put is
    /// done; its receipt goes). Otherwise the item must not take part: it is removed
    /// before its receipt (see [`put_async`](Self::put_async)), a restart of the counter is tried,
    /// and its outcome returned.
    pub(super) async fn settle_async(
        &self,
        zk: &ZooKeeper,
        id: &str,
        name: &str,
        patience: Patience,
    ) -> Result<Option<Restart>> {
        let receipt = self.receipt(id);
        if name_in_range(name) {
            // Pipelined: the reply is not awaited (dropping the future does not cancel
            // the request). If it is lost, the receipt stays until the session ends.
            drop(zk.delete_async(&receipt, None));
            return Ok(None);
        }
        log::debug!("queue: {name} in {} is past the counter's end", self.items);
        delete_node_async(zk, &format!("{}/{name}", self.items), patience).await?;
        delete_node_async(zk, &receipt, patience).await?;
        self.restart_async(zk, patience).await.map(Some)
    }

    /// Tries to restart the items directory's counter (with the receipts directory, if
    /// it lives inside): only an empty directory is restarted.
    pub(super) async fn restart_async(
        &self,
        zk: &ZooKeeper,
        patience: Patience,
    ) -> Result<Restart> {
        let inner: &[&str] = if self.receipts_inside {
            &[&self.receipts]
        } else {
            &[]
        };
        restart_dir_async(zk, &self.items, inner, &self.nodes, patience).await
    }

    /// One put attempt (sent again after connection loss until its outcome is known):
    /// the created item's name, or `None` if it was applied but consumed before this put
    /// could look.
    pub(super) async fn put_once_async(
        &self,
        zk: &ZooKeeper,
        id: &str,
        data: &[u8],
        tag: &str,
        guard: &[Op],
        patience: Patience,
    ) -> Result<Attempt> {
        let receipt = self.receipt(id);
        let name = if tag.is_empty() {
            format!("{ITEM_PREFIX}-{id}-")
        } else {
            format!("{ITEM_PREFIX}-{id}-{tag}-")
        };
        let mut ops = vec![
            Op::create(
                &format!("{}/{name}", self.items),
                data,
                zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential)
                    .with_acl(self.nodes.acl_list()),
            ),
            Op::create(
                &receipt,
                b"",
                zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral)
                    .with_acl(self.nodes.acl_list()),
            ),
        ];
        ops.extend_from_slice(guard);
        let mut attempt = 0;
        loop {
            match zk.multi_async(&ops).await {
                Ok(results) => {
                    return Ok(Attempt::Created(match results.first() {
                        Some(OpResult::Created(path)) => {
                            path.rsplit('/').next().map(str::to_string)
                        }
                        _ => None,
                    }))
                }
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    reconnected(zk, patience, attempt).await?;
                    // Let this server catch up with everything the old connection sent.
                    retry_async(zk, patience, || zk.sync_async(&self.items)).await?;
                    match retry_async(zk, patience, || zk.exists_async(&receipt)).await {
                        Ok(Some(_)) => {
                            return self
                                .find_async(zk, id, patience)
                                .await
                                .map(Attempt::Created)
                        }
                        Ok(None) | Err(RecipeError::ZooKeeper(Error::NoNode)) => {}
                        Err(error) => return Err(error),
                    }
                    // Not applied: send it again (same guid, so a retry is still
                    // recognisable).
                }
                Err(Error::MultiFailed { index: 1, error }) if *error == Error::NodeExists => {
                    // Our receipt already exists: an earlier attempt of this very put was
                    // applied after all (the check raced it).
                    return self
                        .find_async(zk, id, patience)
                        .await
                        .map(Attempt::Created);
                }
                Err(Error::MultiFailed { index, .. }) if index >= 2 => {
                    // A guard operation refused it: nothing was applied.
                    return Ok(Attempt::Refused);
                }
                Err(Error::MultiFailed { error, .. }) if *error == Error::NoNode => {
                    // A directory is missing: not created yet, restarted by a peer, or an
                    // empty container the server removed.
                    self.ensure_async(zk, patience).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// The item of the applied put `id`, found by its guid (`None`: consumed already).
    pub(crate) async fn find_async(
        &self,
        zk: &ZooKeeper,
        id: &str,
        patience: Patience,
    ) -> Result<Option<String>> {
        let children = children_or_none_async(zk, &self.items, patience).await?;
        Ok(children.into_iter().find(|name| guid_of(name) == Some(id)))
    }

    /// Removes items past the counter's end whose put receipt is gone: their put's
    /// session ended before it could remove them (the put never returned `Ok`), so
    /// nobody else will. Best effort; an item whose receipt exists belongs to a put in
    /// progress, which removes it itself. (The item and receipt are created atomically
    /// and reads on one server move forward, so a receipt missing after the listing that
    /// showed the item is gone for good.)
    pub(crate) async fn remove_orphans_async(&self, zk: &ZooKeeper, past_end: &[String]) {
        for name in past_end {
            let Some(id) = guid_of(name) else { continue };
            if let Ok(None) = zk.exists_async(&self.receipt(id)).await {
                let item = format!("{}/{name}", self.items);
                match zk.delete_async(&item, None).await {
                    Ok(()) | Err(Error::NoNode) => log::debug!("queue: removed orphan {item}"),
                    Err(error) => log::debug!("queue: removing orphan {item}: {error}"),
                }
            }
        }
    }
}

/// A put whose multi may have been sent. Dropped armed (the put's future was dropped),
/// it removes the put's receipts in the background, after a `sync` (so the server has
/// applied the multi, if it got it): whether the put applied stays unknown (never
/// twice), but no receipt stays until the session ends, and an item of it past the
/// counter's end becomes an orphan consumers remove.
pub(super) struct PendingPut<'a> {
    zk: &'a ZooKeeper,
    receipts: Vec<String>,
}

impl<'a> PendingPut<'a> {
    pub(super) fn armed(zk: &'a ZooKeeper, receipts: Vec<String>) -> Self {
        PendingPut { zk, receipts }
    }

    pub(super) fn disarm(&mut self) {
        self.receipts.clear();
    }
}

impl Drop for PendingPut<'_> {
    fn drop(&mut self) {
        let receipts = std::mem::take(&mut self.receipts);
        let Some(first) = receipts.first().cloned() else {
            return;
        };
        let what = format!("removing the receipts of a dropped put ({first})");
        crate::support::finish_later(self.zk, what, move |zk| {
            let (first, receipts) = (first.clone(), receipts.clone());
            Box::pin(async move {
                zk.sync_async(&first).await?;
                let deletes: Vec<_> = receipts
                    .iter()
                    .map(|receipt| zk.delete_async(receipt, None))
                    .collect();
                for delete in deletes {
                    match delete.await {
                        Ok(()) | Err(Error::NoNode) => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            })
        });
    }
}
