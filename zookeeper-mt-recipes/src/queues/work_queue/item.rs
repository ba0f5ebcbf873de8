//! A claimed item: complete, release, and their lost-reply resolution.

use super::*;

/// An item claimed from a [`WorkQueue`]: finish it with [`complete`](Self::complete) or
/// give it back with [`release`](Self::release). Dropping it releases it in the
/// background (the drop itself never waits for the server).
///
/// The async forms [`complete_async`](Self::complete_async) and
/// [`release_async`](Self::release_async) are the same protocol; dropped before they
/// return, the item is released in the background unless the completion applied, so it
/// ends completed once or back in the queue, never locked for the life of the session.
pub struct WorkItem {
    pub(super) zk: ZooKeeper,
    pub(super) name: String,
    pub(super) item_path: String,
    pub(super) lock_path: String,
    pub(super) data: Vec<u8>,
    pub(super) token: i32,
    pub(super) claim_id: String,
    pub(super) patience: Patience,
    pub(super) finished: bool,
}

impl fmt::Debug for WorkItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkItem")
            .field("name", &self.name)
            .field("len", &self.data.len())
            .finish()
    }
}

impl WorkItem {
    /// The item's data.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The item node's name (`item-<guid>-<seq>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which claim of this item this is: 1 for the first, 2 after one release or
    /// abandonment, ... (the item's data version after the claim; see
    /// [`WorkQueue::with_dead_letter`]).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.token).unwrap_or(0)
    }

    /// Whether this claim still owns the item (its lock exists and is ours, and nobody
    /// re-claimed the item). A point-in-time answer.
    pub fn is_held(&self) -> Result<bool> {
        block_on(self.is_held_async())
    }

    /// [`is_held`](Self::is_held), async.
    pub async fn is_held_async(&self) -> Result<bool> {
        let lock = retry_async(&self.zk, self.patience, || {
            self.zk.get_async(&self.lock_path)
        })
        .await;
        let item = retry_async(&self.zk, self.patience, || {
            self.zk.exists_async(&self.item_path)
        })
        .await?;
        Ok(match (lock, item) {
            (Ok((owner, _)), Some(stat)) => {
                owner == self.claim_id.as_bytes() && stat.version == self.token
            }
            (Ok(_), None) | (Err(RecipeError::ZooKeeper(Error::NoNode)), _) => false,
            (Err(e), _) => return Err(e),
        })
    }

    /// Removes the item and its lock atomically, if this claim still owns the item;
    /// otherwise fails with [`RecipeError::Lost`] and changes nothing.
    ///
    /// If the connection stays down longer than the reconnect timeout the error is the
    /// connection loss, and the item is released in the background (so it is done
    /// again: at-least-once) unless the completion turns out to have been applied.
    pub fn complete(self) -> Result<()> {
        block_on(self.complete_async())
    }

    /// [`complete`](Self::complete), async. Dropped before it returns, the item is
    /// released in the background (refused, harmlessly, if the completion applied).
    pub async fn complete_async(mut self) -> Result<()> {
        let ops = [
            Op::delete(&self.item_path, self.token),
            Op::delete(&self.lock_path, -1),
        ];
        let result = self.finish(&ops, true).await;
        self.finished = true;
        self.release_later_if_unreachable(&result);
        result
    }

    /// Gives the item back (deletes the lock), if this claim still owns it.
    pub fn release(self) -> Result<()> {
        block_on(self.release_async())
    }

    /// [`release`](Self::release), async. Dropped before it returns, the release goes
    /// on in the background.
    pub async fn release_async(mut self) -> Result<()> {
        let result = self.finish(&self.release_ops(), false).await;
        self.finished = true;
        self.release_later_if_unreachable(&result);
        result
    }

    /// Release = delete our lock, but only while the item still carries our token.
    pub(super) fn release_ops(&self) -> Vec<Op> {
        vec![
            Op::check(&self.item_path, self.token),
            Op::delete(&self.lock_path, -1),
        ]
    }

    /// Releases in the background (see [`release_later`]).
    pub(super) fn release_in_background(&self) {
        release_later(
            &self.zk,
            &self.name,
            &self.item_path,
            &self.lock_path,
            self.token,
        );
    }

    /// The server could not be reached: make sure our lock goes eventually (it is
    /// ephemeral, but the session may well survive), with the ownership check.
    pub(super) fn release_later_if_unreachable(&self, result: &Result<()>) {
        if let Err(RecipeError::ZooKeeper(error)) = result {
            if error.is_connection_loss() {
                self.release_in_background();
            }
        }
    }

    /// Runs a completing or releasing multi, resolving a lost reply by looking (after a
    /// `sync`, so the server we reconnected to has applied what the old connection sent).
    pub(super) async fn finish(&self, ops: &[Op], completing: bool) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.zk.multi_async(ops).await {
                Ok(_) => return Ok(()),
                Err(Error::MultiFailed { .. }) => {
                    return Err(RecipeError::Lost(LossReason::NotHeld))
                }
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    reconnected(&self.zk, self.patience, attempt).await?;
                    retry_async(&self.zk, self.patience, || {
                        self.zk.sync_async(&self.lock_path)
                    })
                    .await?;
                    let lock = retry_async(&self.zk, self.patience, || {
                        self.zk.get_async(&self.lock_path)
                    })
                    .await;
                    let ours = match lock {
                        Ok((owner, _)) => owner == self.claim_id.as_bytes(),
                        Err(RecipeError::ZooKeeper(Error::NoNode)) => false,
                        Err(e) => return Err(e),
                    };
                    if ours {
                        continue; // not applied (our lock is still there): again
                    }
                    // Our lock is gone while our session lives: only our multi removes it
                    // (applied), unless it was deleted behind our back.
                    let item = retry_async(&self.zk, self.patience, || {
                        self.zk.exists_async(&self.item_path)
                    })
                    .await?;
                    let applied = if completing {
                        item.is_none()
                    } else {
                        item.is_some_and(|stat| stat.version == self.token)
                    };
                    return if applied {
                        Ok(())
                    } else {
                        Err(RecipeError::Lost(LossReason::NotHeld))
                    };
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

/// Releases the claim `token` of item `name` (at `item`, locked by `lock`) in the
/// background: `multi(check item at token, delete lock)` until applied, refused (the
/// claim is no longer ours, or the item was completed) or the session ends. A release
/// sent again after a lost reply is harmless: if the first applied, the second is
/// refused.
pub(super) fn release_later(zk: &ZooKeeper, name: &str, item: &str, lock: &str, token: i32) {
    let ops = vec![Op::check(item, token), Op::delete(lock, -1)];
    let what = format!("releasing {name}");
    finish_later(zk, what, move |zk| {
        let ops = ops.clone();
        Box::pin(async move {
            match zk.multi_async(&ops).await {
                Ok(_) | Err(Error::MultiFailed { .. }) => Ok(()),
                Err(error) => Err(error),
            }
        })
    });
}

impl Drop for WorkItem {
    /// Gives an unfinished item back without waiting: the release runs in the
    /// background, so dropping never blocks (it used to wait out a lost connection).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.release_in_background();
    }
}
