//! Claiming an item: the shared listing, the claim multi and its lost-reply resolution
//! (settled in the background when the take is dropped meanwhile), dead letters.

use super::*;

impl OnSession<'_> {
    /// The item names of a listing in order, after removing orphans past the counter's
    /// end.
    pub(super) async fn sorted(&self, children: Vec<String>) -> VecDeque<String> {
        let (items, past_end) = split_items(children);
        self.store.remove_orphans_async(&self.zk, &past_end).await;
        items.into()
    }

    /// The fast path: claim from the cached listing; list again (once per call) when it
    /// is used up. `listed`: the cache was just filled from a listing made after the
    /// caller's watches were armed, so no second listing is needed.
    ///
    /// Each item name comes from one listing and is tried at most once per listing, so
    /// draining N items costs O(N) names listed, not O(N²).
    pub(super) async fn claim_any(
        &self,
        deadline: Deadline,
        mut listed: bool,
    ) -> Result<Option<WorkItem>> {
        loop {
            if let Some(item) = self.claim_cached(deadline).await? {
                return Ok(Some(item));
            }
            if listed {
                return Ok(None);
            }
            let patience = self.patience.before(deadline);
            let children = children_or_none_async(&self.zk, &self.store.items, patience).await?;
            let sorted = self.sorted(children).await;
            *self.cache.lock() = sorted;
            listed = true;
        }
    }

    /// Tries cached names until one is claimed or the cache is empty. A claim starts at a
    /// random one of the first `spread + 1` names: 0 while claims do not collide (FIFO),
    /// wider while they do, so competing consumers spread over the head of the queue
    /// instead of all racing for its first item.
    pub(super) async fn claim_cached(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        loop {
            let name = {
                let mut cache = self.cache.lock();
                if cache.is_empty() {
                    return Ok(None);
                }
                let spread = self.spread.load(Ordering::Relaxed);
                let at = random_below(cache.len().min(spread + 1));
                cache.remove(at).unwrap_or_default()
            };
            // A take dropped meanwhile leaves the name for the next take of this value.
            let mut trying = Trying {
                queue: self,
                name: Some(name),
            };
            let claimed = self.claim(trying.name(), deadline).await;
            trying.name = None;
            match claimed? {
                Claim::Taken(item) => {
                    let _ = self
                        .spread
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(s / 2));
                    return Ok(Some(*item));
                }
                Claim::Missed => {
                    bump(&self.counters.races_lost);
                    let _ = self
                        .spread
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                            Some((s * 2 + 1).min(MAX_SPREAD))
                        });
                }
                Claim::Locked | Claim::Buried => {}
            }
        }
    }

    pub(super) async fn claim(&self, name: &str, deadline: Deadline) -> Result<Claim> {
        let item_path = format!("{}/{name}", self.store.items);
        let lock_path = format!("{}/{name}", self.locks);
        let patience = self.patience.before(deadline);
        // One round trip: the item (data and version) and whether it is locked.
        let (item, locked) = retry_async(&self.zk, patience, || {
            let item = self.zk.get_async(&item_path);
            let lock = self.zk.exists_async(&lock_path);
            async move {
                let (item, lock) = (item.await, lock.await);
                let locked = match lock {
                    Ok(stat) => stat.is_some(),
                    Err(Error::NoNode) => false,
                    Err(error) => return Err(error),
                };
                match item {
                    Ok(found) => Ok((Some(found), locked)),
                    Err(Error::NoNode) => Ok((None, locked)),
                    Err(error) => Err(error),
                }
            }
        })
        .await?;
        let Some((data, stat)) = item else {
            return Ok(Claim::Missed);
        };
        if locked {
            return Ok(Claim::Locked);
        }
        if let Some(dead) = &self.dead_letter {
            // The item's version counts its claims (each rewrites it once; nothing else
            // writes it).
            if stat.version >= dead.max_attempts {
                return self.bury(dead, name, &data, stat.version, patience).await;
            }
        }
        let claim_id = guid();
        let token = stat.version.wrapping_add(1);
        let ops = [
            Op::create(
                &lock_path,
                claim_id.as_bytes(),
                zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral)
                    .with_acl(self.store.nodes.acl_list()),
            ),
            Op::set_data(&item_path, &data, stat.version),
        ];
        // From here the claim may apply: a take dropped before it is settled hands it to
        // the background.
        let mut pending = PendingClaim {
            zk: &self.zk,
            name,
            item_path: &item_path,
            lock_path: &lock_path,
            claim_id: &claim_id,
            token,
            stage: None,
        };
        let taken = loop {
            match pending.send(&ops).await {
                Ok(_) => break true,
                Err(Error::MultiFailed { index, error }) => match (index, *error) {
                    (0, Error::NodeExists) | (1, Error::NoNode) | (1, Error::BadVersion) => {
                        break false
                    }
                    // The lock directory is missing (not created yet, or an empty
                    // container the server removed).
                    (0, Error::NoNode) => {
                        ensure_dir_async(&self.zk, &self.locks, &self.store.nodes, patience).await?
                    }
                    (_, error) => return Err(error.into()),
                },
                Err(error) if error.is_connection_loss() => {
                    // Applied or not? Our lock node carries this claim's id. (No deadline
                    // here: an applied claim must be found, not left locked.) `sync` first:
                    // the server we reconnected to may not have applied it yet.
                    pending.stage = Some(ClaimStage::ReplyLost);
                    let looked = self.look_at_lock(&lock_path).await;
                    pending.stage = None;
                    break match looked {
                        Ok((owner, _)) => owner == claim_id.as_bytes(),
                        // Not applied (e.g. the lock directory was missing): send it
                        // again; it is still conditional on the item's version, so a
                        // claim made by someone else meanwhile makes it fail. (Taking
                        // this as a lost race left a free item behind a `try_take`.)
                        Err(RecipeError::ZooKeeper(Error::NoNode)) => continue,
                        Err(e) => {
                            // The claim may have applied: its lock must not stay behind
                            // while the session lives.
                            drop_lock_later(&self.zk, &lock_path, &claim_id);
                            return Err(e);
                        }
                    };
                }
                Err(error) => return Err(error.into()),
            }
        };
        drop(pending);
        if !taken {
            return Ok(Claim::Missed);
        }
        bump(&self.counters.claims);
        Ok(Claim::Taken(Box::new(WorkItem {
            zk: self.zk.clone(),
            name: name.to_string(),
            item_path,
            lock_path,
            data,
            token,
            claim_id,
            patience: self.patience,
            finished: false,
        })))
    }

    /// The lock node after a lost reply: reconnected, then read after a `sync`.
    async fn look_at_lock(&self, lock_path: &str) -> Result<(Vec<u8>, zookeeper_mt::Stat)> {
        reconnected(&self.zk, self.patience, 1).await?;
        retry_async(&self.zk, self.patience, || self.zk.sync_async(lock_path)).await?;
        retry_async(&self.zk, self.patience, || self.zk.get_async(lock_path)).await
    }

    /// Moves the item `name` (unlocked, at `version`, holding `data`) to the dead-letter
    /// directory in one `multi`: create its lock (so it fails if a consumer holds the
    /// item), delete the item at `version` (so it fails if it was claimed or completed
    /// meanwhile), delete the lock again, create the dead letter. All or nothing: never
    /// both a dead letter and the item, never neither. A lost reply needs no recovery
    /// read: applied, the item is gone; not applied, it is still in the queue and the
    /// next consumer to find it moves it (a second application is refused by the
    /// version). Nothing to settle when the take is dropped meanwhile, for the same
    /// reason.
    pub(super) async fn bury(
        &self,
        dead: &DeadLetter,
        name: &str,
        data: &[u8],
        version: i32,
        patience: Patience,
    ) -> Result<Claim> {
        let item_path = format!("{}/{name}", self.store.items);
        let lock_path = format!("{}/{name}", self.locks);
        let acl = self.store.nodes.acl_list();
        let ops = [
            Op::create(
                &lock_path,
                b"dead-letter",
                zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(acl),
            ),
            Op::delete(&item_path, version),
            Op::delete(&lock_path, -1),
            Op::create(
                &format!("{}/{name}-", dead.dir),
                data,
                zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential).with_acl(acl),
            ),
        ];
        loop {
            match self.zk.multi_async(&ops).await {
                Ok(_) => {
                    log::debug!("work queue: {name} moved to {}", dead.dir);
                    bump(&self.counters.dead_lettered);
                    return Ok(Claim::Buried);
                }
                Err(Error::MultiFailed { index, error }) => match (index, *error) {
                    (0, Error::NodeExists) => return Ok(Claim::Locked),
                    (1, Error::NoNode) | (1, Error::BadVersion) => return Ok(Claim::Missed),
                    (0, Error::NoNode) => {
                        ensure_dir_async(&self.zk, &self.locks, &self.store.nodes, patience).await?
                    }
                    (3, Error::NoNode) => {
                        ensure_dir_async(&self.zk, &dead.dir, &self.store.nodes, patience).await?
                    }
                    (_, error) => return Err(error.into()),
                },
                Err(error) if error.is_connection_loss() => return Ok(Claim::Buried),
                Err(error) => return Err(error.into()),
            }
        }
    }
}

/// A cached name being tried: back at the front of the cache if the take is dropped
/// meanwhile (an item a dropped claim took is released again, so it may be free by the
/// next try; if not, that try skips it).
struct Trying<'a> {
    queue: &'a WorkQueue,
    /// Taken out once the try has ended.
    name: Option<String>,
}

impl Trying<'_> {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }
}

impl Drop for Trying<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.queue.cache.lock().push_front(name);
        }
    }
}

/// How far an unsettled claim got.
enum ClaimStage {
    /// Sent, not answered yet.
    Sent(zookeeper_mt::ZkFuture<Vec<OpResult>>),
    /// Its reply was lost: whether it applied is being found out.
    ReplyLost,
}

/// A claim (lock create + item rewrite) whose outcome the take has not settled yet. If
/// the take's future is dropped meanwhile, the claim is settled in the background: an
/// applied claim is released again (as a dropped [`WorkItem`] is), one whose reply was
/// lost has its lock removed with the ownership check ([`drop_lock_later`]). So a
/// dropped take never keeps an item locked for the life of its session, and never takes
/// one from the queue.
struct PendingClaim<'a> {
    zk: &'a ZooKeeper,
    name: &'a str,
    item_path: &'a str,
    lock_path: &'a str,
    claim_id: &'a str,
    /// The item's version once the claim applied.
    token: i32,
    stage: Option<ClaimStage>,
}

impl PendingClaim<'_> {
    /// Sends the claim and waits for its reply (settled in the background if dropped
    /// meanwhile).
    async fn send(&mut self, ops: &[Op]) -> zookeeper_mt::Result<Vec<OpResult>> {
        self.stage = Some(ClaimStage::Sent(self.zk.multi_async(ops)));
        let reply = match self.stage.as_mut() {
            Some(ClaimStage::Sent(claim)) => claim.await,
            _ => unreachable!("just sent"),
        };
        self.stage = None;
        reply
    }
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        let Some(stage) = self.stage.take() else {
            return;
        };
        let (lock, claim_id) = (self.lock_path.to_string(), self.claim_id.to_string());
        let claim = match stage {
            ClaimStage::ReplyLost => return drop_lock_later(self.zk, &lock, &claim_id),
            ClaimStage::Sent(claim) => claim,
        };
        // Weak: the settling never keeps a session open its user has let go of (its lock
        // goes with it then).
        let zk = self.zk.downgrade();
        let (name, item, token) = (
            self.name.to_string(),
            self.item_path.to_string(),
            self.token,
        );
        spawn_detached("settling the claim of a dropped take", async move {
            let reply = claim.await;
            let Some(zk) = zk.upgrade() else {
                return;
            };
            match reply {
                // Ours: give it back.
                Ok(_) => release_later(&zk, &name, &item, &lock, token),
                // Not applied.
                Err(Error::MultiFailed { .. }) => {}
                // The session is over: the lock went with it.
                Err(error) if error.is_session_terminal() => {}
                Err(_) => drop_lock_later(&zk, &lock, &claim_id),
            }
        });
    }
}

/// Deletes the lock `lock` in the background if it is the one claim `claim_id` created
/// (after a `sync`), once the server is reachable; for a claim whose outcome could not be
/// learnt.
pub(super) fn drop_lock_later(zk: &ZooKeeper, lock: &str, claim_id: &str) {
    let (lock, claim_id) = (lock.to_string(), claim_id.to_string());
    let what = format!("removing the lock {lock} of an unresolved claim");
    finish_later(zk, what, move |zk| {
        let (lock, claim_id) = (lock.clone(), claim_id.clone());
        Box::pin(async move {
            zk.sync_async(&lock).await?;
            match zk.get_async(&lock).await {
                Ok((owner, stat)) if owner == claim_id.as_bytes() => {
                    match zk.delete_async(&lock, Some(stat.version)).await {
                        Ok(()) | Err(Error::NoNode) => Ok(()),
                        Err(error) => Err(error),
                    }
                }
                Ok(_) | Err(Error::NoNode) => Ok(()),
                Err(error) => Err(error),
            }
        })
    });
}
