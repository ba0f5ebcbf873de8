//! The batched put: many items in one `multi`, each with its own ephemeral receipt, so a
//! batch is enqueued exactly once, atomically, in order and contiguously, for one round
//! trip (plus one `exists` that checks the counter has room for the whole batch).

use super::*;
use crate::support::delete_node_async;
use std::collections::HashMap;

/// Room a batch leaves below the counter's limit for creates of other producers that may
/// land between its look at the counter and its multi (the server applies far fewer in
/// one round trip).
const BATCH_HEADROOM: i64 = 1 << 16;

impl ItemStore {
    /// Enqueues `items` in one multi: item `i` as `<items>/item-<guid i>-<seq>` (with an
    /// ordering tag: `item-<guid i>-<tag>-<seq>`) with its receipt `<receipts>/<guid i>`.
    /// See [`Queue::put_all`] for the guarantees.
    ///
    /// The counter's end: before the multi, the directory's child counter (`cversion`, the
    /// next sequence number) is read; a batch that would reach the limit is not sent:
    /// the directory is restarted if empty, else the put fails with `SequenceExhausted`,
    /// enqueuing nothing. Only if other producers advanced the counter by more than
    /// [`BATCH_HEADROOM`] in between can a batch still cross the limit; see
    /// [`settle_batch`](Self::settle_batch) for that case.
    pub(crate) fn put_all<I>(
        &self,
        zk: &ZooKeeper,
        items: I,
        tag: &str,
        patience: Patience,
    ) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let owned: Vec<I::Item> = items.into_iter().collect();
        let items: Vec<&[u8]> = owned.iter().map(AsRef::as_ref).collect();
        block_on(self.put_all_async(zk, &items, tag, patience))
    }

    /// [`put_all`](Self::put_all), async. Dropped once its multi may have been sent, the
    /// batch may or may not have been applied (all or none, never twice); its receipts
    /// are removed in the background (see [`PendingPut`]).
    pub(crate) async fn put_all_async(
        &self,
        zk: &ZooKeeper,
        items: &[&[u8]],
        tag: &str,
        patience: Patience,
    ) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut restarts = 0;
        while !self.has_room_for(zk, items.len(), patience).await? {
            restarts += 1;
            if self.restart_async(zk, patience).await? == Restart::NotEmpty
                || restarts == PUT_RESTARTS
            {
                return Err(RecipeError::SequenceExhausted {
                    dir: self.items.clone(),
                });
            }
        }
        let ids: Vec<String> = items.iter().map(|_| guid()).collect();
        let mut pending = PendingPut::armed(zk, ids.iter().map(|id| self.receipt(id)).collect());
        let result = match self.put_batch_once(zk, &ids, items, tag, patience).await {
            Ok(names) => {
                self.settle_batch(zk, &ids, &names, items, tag, patience)
                    .await
            }
            Err(error) => Err(error),
        };
        pending.disarm();
        result
    }

    /// Whether the items directory's counter has room for `count` more items below the
    /// limit (with [`BATCH_HEADROOM`] to spare). A missing directory is created first.
    async fn has_room_for(&self, zk: &ZooKeeper, count: usize, patience: Patience) -> Result<bool> {
        loop {
            match retry_async(zk, patience, || zk.exists_async(&self.items)).await? {
                Some(stat) => {
                    let next = i64::from(stat.cversion);
                    let count = i64::try_from(count).unwrap_or(i64::MAX);
                    let end = next.saturating_add(count).saturating_add(BATCH_HEADROOM);
                    return Ok(next >= 0 && end <= i64::from(crate::nodes::SEQUENCE_LIMIT));
                }
                None => self.ensure_async(zk, patience).await?,
            }
        }
    }

    /// One batch multi, sent again after connection loss until its outcome is known: the
    /// created item names in batch order (`None`: applied, then consumed before this put
    /// could look after a lost reply).
    async fn put_batch_once(
        &self,
        zk: &ZooKeeper,
        ids: &[String],
        items: &[&[u8]],
        tag: &str,
        patience: Patience,
    ) -> Result<Vec<Option<String>>> {
        let item_options = zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential)
            .with_acl(self.nodes.acl_list());
        let receipt_options =
            zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(self.nodes.acl_list());
        let mut ops: Vec<Op> = ids
            .iter()
            .zip(items)
            .map(|(id, data)| {
                let path = if tag.is_empty() {
                    format!("{}/{ITEM_PREFIX}-{id}-", self.items)
                } else {
                    format!("{}/{ITEM_PREFIX}-{id}-{tag}-", self.items)
                };
                Op::create(&path, data, item_options)
            })
            .collect();
        ops.extend(
            ids.iter()
                .map(|id| Op::create(&self.receipt(id), b"", receipt_options)),
        );
        let mut attempt = 0;
        loop {
            match zk.multi_async(&ops).await {
                Ok(results) => {
                    return Ok(results
                        .iter()
                        .take(ids.len())
                        .map(|result| match result {
                            OpResult::Created(path) => path.rsplit('/').next().map(str::to_string),
                            _ => None,
                        })
                        .collect())
                }
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    reconnected(zk, patience, attempt).await?;
                    // Let this server catch up with everything the old connection sent.
                    retry_async(zk, patience, || zk.sync_async(&self.items)).await?;
                    // The receipts were created with the items, all or none: one tells.
                    let first = self.receipt(&ids[0]);
                    match retry_async(zk, patience, || zk.exists_async(&first)).await {
                        Ok(Some(_)) => return self.find_batch(zk, ids, patience).await,
                        Ok(None) | Err(RecipeError::ZooKeeper(Error::NoNode)) => {}
                        Err(error) => return Err(error),
                    }
                    // Not applied: send it again (same guids, still recognisable).
                }
                Err(Error::MultiFailed { index, error })
                    if index >= ids.len() && *error == Error::NodeExists =>
                {
                    // A receipt of ours exists: an earlier attempt of this very batch was
                    // applied after all (the check raced it).
                    return self.find_batch(zk, ids, patience).await;
                }
                Err(Error::MultiFailed { error, .. }) if *error == Error::NoNode => {
                    // A directory is missing: restarted by a peer, or an empty container
                    // the server removed. Recreated, it has a fresh counter.
                    self.ensure_async(zk, patience).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// The items of the applied batch `ids`, found by their guids, in batch order (`None`:
    /// consumed already).
    async fn find_batch(
        &self,
        zk: &ZooKeeper,
        ids: &[String],
        patience: Patience,
    ) -> Result<Vec<Option<String>>> {
        let mut by_guid: HashMap<String, String> =
            children_or_none_async(zk, &self.items, patience)
                .await?
                .into_iter()
                .filter_map(|name| Some((guid_of(&name)?.to_string(), name)))
                .collect();
        Ok(ids.iter().map(|id| by_guid.remove(id)).collect())
    }

    /// After the batch `ids` was applied as `names`: items numbered in range are done
    /// (their receipts go, in one pipelined multi). Sequence numbers follow batch order,
    /// so items past the counter's end (only possible in the race described at
    /// [`put_all`](Self::put_all)) are a suffix of the batch: each is removed before its
    /// receipt, as a single put does, and put again on its own, in order (restarting the
    /// directory if it is empty). If one of those puts fails, the batch is only partly
    /// enqueued: [`RecipeError::PartlyEnqueued`] says how far.
    pub(super) async fn settle_batch(
        &self,
        zk: &ZooKeeper,
        ids: &[String],
        names: &[Option<String>],
        items: &[&[u8]],
        tag: &str,
        patience: Patience,
    ) -> Result<()> {
        // An item not found after a lost reply was consumed, so it was in range.
        let past_end = names
            .iter()
            .position(|name| name.as_deref().is_some_and(|name| !name_in_range(name)))
            .unwrap_or(names.len());
        let done: Vec<Op> = ids[..past_end]
            .iter()
            .map(|id| Op::delete(&self.receipt(id), Version::Any))
            .collect();
        if !done.is_empty() {
            // Not awaited: if the reply is lost, the receipts stay until the session ends.
            drop(zk.multi_async(&done));
        }
        let partly = |enqueued: usize, error: RecipeError| RecipeError::PartlyEnqueued {
            enqueued,
            error: Box::new(error),
        };
        for (index, id) in ids.iter().enumerate().skip(past_end) {
            if let Some(name) = &names[index] {
                log::debug!(
                    "queue: batch item {name} in {} is past the counter's end",
                    self.items
                );
                let item = format!("{}/{name}", self.items);
                delete_node_async(zk, &item, patience)
                    .await
                    .map_err(|error| partly(past_end, error))?;
            }
            delete_node_async(zk, &self.receipt(id), patience)
                .await
                .map_err(|error| partly(past_end, error))?;
        }
        for (index, data) in items.iter().enumerate().skip(past_end) {
            self.put_with_async(zk, data, tag, &[], patience)
                .await
                .map_err(|error| partly(index, error))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::SEQUENCE_LIMIT;
    use zk_harness::{Crafted, Server};

    const DIRS: [&str; 4] = ["/partly", "/drained", "/empty", "/busy"];

    fn store(path: &str) -> ItemStore {
        ItemStore {
            items: path.to_string(),
            receipts: format!("{path}/{RECEIPTS}"),
            receipts_inside: true,
            nodes: NodeOptions::default(),
        }
    }

    fn drain(queue: &Queue) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| queue.try_take().unwrap()).collect()
    }

    /// The receipts' deletes are pipelined, not awaited; a later request of the same
    /// session is answered after them, so one look suffices.
    fn receipts_gone(zk: &ZooKeeper, path: &str) {
        let left = zk.get_children(&format!("{path}/{RECEIPTS}")).unwrap();
        assert!(left.is_empty(), "receipts left: {left:?}");
    }

    fn seqs(zk: &ZooKeeper, path: &str) -> Vec<i32> {
        let (items, past_end) = split_items(zk.get_children(path).unwrap());
        assert!(past_end.is_empty(), "left past the end: {past_end:?}");
        items
            .iter()
            .filter_map(|n| crate::nodes::sequence_of(n))
            .collect()
    }

    /// Batches at the real end of a directory's counter (a server started from crafted
    /// data, counters 3 below the limit): a batch that crossed it (sent without the
    /// check, as in the race with other producers) keeps its in-range prefix and puts
    /// the rest again one by one, or reports how far it got; a checked batch restarts an
    /// empty queue or enqueues nothing.
    #[test]
    fn batches_at_the_counters_end_are_whole_or_say_how_far_they_got() {
        let crafted = DIRS
            .iter()
            .fold(Crafted::new(), |c, dir| c.dir(dir, SEQUENCE_LIMIT - 3));
        let server = Server::start_crafted(&crafted).expect("crafted server");
        let zk = ZooKeeper::connect(&server.connect_string(), Duration::from_secs(10)).unwrap();
        let patience = Patience::reconnect(Duration::from_secs(10));
        let data: Vec<Vec<u8>> = (0..5).map(|i| format!("b{i}").into_bytes()).collect();
        let items: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let ids: Vec<String> = items.iter().map(|_| guid()).collect();

        // Crossed, the queue still holds the in-range prefix: the first re-put finds the
        // queue not empty and fails; the prefix stays, nothing else is left.
        let partly = store("/partly");
        let queue = Queue::new(&zk, "/partly").unwrap();
        let names = block_on(partly.put_batch_once(&zk, &ids, &items, "", patience)).unwrap();
        // (Creating the receipts node took one number.)
        let k = names.iter().flatten().filter(|n| name_in_range(n)).count();
        assert_eq!(k, 2, "{names:?}");
        let error =
            block_on(partly.settle_batch(&zk, &ids, &names, &items, "", patience)).unwrap_err();
        assert!(
            matches!(&error, RecipeError::PartlyEnqueued { enqueued: 2, error }
                if matches!(**error, RecipeError::SequenceExhausted { .. })),
            "{error:?}"
        );
        assert_eq!(seqs(&zk, "/partly").len(), 2);
        receipts_gone(&zk, "/partly");
        assert_eq!(drain(&queue), data[..2]);

        // Crossed, and the prefix was consumed before the put settled: the rest is put
        // again after a restart, in order.
        let drained = store("/drained");
        let queue = Queue::new(&zk, "/drained").unwrap();
        let names = block_on(drained.put_batch_once(&zk, &ids, &items, "", patience)).unwrap();
        assert_eq!(drain(&queue), data[..2]);
        block_on(drained.settle_batch(&zk, &ids, &names, &items, "", patience)).unwrap();
        assert!(seqs(&zk, "/drained").iter().all(|&s| s < 10), "restarted");
        receipts_gone(&zk, "/drained");
        assert_eq!(drain(&queue), data[2..]);

        // Checked first: an empty queue restarts and takes the whole batch.
        let queue = Queue::new(&zk, "/empty").unwrap();
        queue.put_all(&items).unwrap();
        assert!(seqs(&zk, "/empty").iter().all(|&s| s < 10), "restarted");
        receipts_gone(&zk, "/empty");
        assert_eq!(drain(&queue), data);

        // Checked first: a queue holding an item refuses the batch whole.
        let queue = Queue::new(&zk, "/busy").unwrap();
        queue.put(b"waiting").unwrap();
        let error = queue.put_all(&items).unwrap_err();
        assert!(
            matches!(error, RecipeError::SequenceExhausted { .. }),
            "{error:?}"
        );
        receipts_gone(&zk, "/busy");
        assert_eq!(drain(&queue), [b"waiting".to_vec()]);
    }
}
