//! Claiming an item: the shared listing, the head's watches, the claim multi and its
//! lost-reply resolution, dead letters.

use super::*;

// ---------------------------------------------------------------------------------------
// Claiming.
// ---------------------------------------------------------------------------------------

impl WorkQueue {
    pub(super) fn take_until(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        if let Some(item) = self.claim_any(deadline, false)? {
            return Ok(Some(item));
        }
        if deadline.expired() {
            return Ok(None);
        }
        let Some(waiter) = self.join_line()? else {
            // No place in line (its counter is at its end and peers keep it busy): wait as
            // an extra head instead. More wake-ups, same exclusivity.
            return self.head_turn(deadline);
        };
        let result = self.wait_in_line(&waiter, deadline);
        // Leaving the line wakes our successor (only it).
        let path = format!("{}/{waiter}", self.waiters);
        if let Err(error) = delete_eventually(&self.zk, &path, self.patience) {
            log::debug!("work queue: leaving the line ({path}): {error}");
        }
        result
    }

    /// Joins the line of idle consumers (found again by its guid if the reply is lost).
    /// `None` if the line's counter is at its end and the line could not be restarted
    /// (peers are in it): a waiter node past the end is removed at once, it takes no part.
    pub(super) fn join_line(&self) -> Result<Option<String>> {
        for _ in 0..2 {
            let tag = format!("{}-w-", guid());
            let waiter = create_sequential(
                &self.zk,
                &self.waiters,
                &tag,
                b"",
                &self.store.nodes,
                self.patience,
            )?;
            if name_in_range(&waiter) {
                return Ok(Some(waiter));
            }
            let path = format!("{}/{waiter}", self.waiters);
            delete_node(&self.zk, &path, self.patience)?;
            let restart = restart_dir(
                &self.zk,
                &self.waiters,
                &[],
                &self.store.nodes,
                self.patience,
            )?;
            if restart == Restart::NotEmpty {
                break;
            }
        }
        Ok(None)
    }

    /// The item names of a listing in order, after removing orphans past the counter's
    /// end.
    pub(super) fn sorted(&self, children: Vec<String>) -> VecDeque<String> {
        let (items, past_end) = split_items(children);
        self.store.remove_orphans(&self.zk, &past_end);
        items.into()
    }

    /// The fast path: claim from the cached listing; list again (once per call) when it
    /// is used up. `listed`: the cache was just filled from a listing made after the
    /// caller's watches were armed, so no second listing is needed.
    ///
    /// Each item name comes from one listing and is tried at most once per listing, so
    /// draining N items costs O(N) names listed, not O(N²).
    pub(super) fn claim_any(
        &self,
        deadline: Deadline,
        mut listed: bool,
    ) -> Result<Option<WorkItem>> {
        loop {
            if let Some(item) = self.claim_cached(deadline)? {
                return Ok(Some(item));
            }
            if listed {
                return Ok(None);
            }
            let patience = self.patience.before(deadline);
            let children = children_or_none(&self.zk, &self.store.items, patience)?;
            *self.cache.lock() = self.sorted(children);
            listed = true;
        }
    }

    /// Tries cached names until one is claimed or the cache is empty. A claim starts at a
    /// random one of the first `spread + 1` names: 0 while claims do not collide (FIFO),
    /// wider while they do, so competing consumers spread over the head of the queue
    /// instead of all racing for its first item.
    pub(super) fn claim_cached(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
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
            match self.claim(&name, deadline)? {
                Claim::Taken(item) => {
                    let _ = self
                        .spread
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| Some(s / 2));
                    return Ok(Some(item));
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

    pub(super) fn claim(&self, name: &str, deadline: Deadline) -> Result<Claim> {
        let item_path = format!("{}/{name}", self.store.items);
        let lock_path = format!("{}/{name}", self.locks);
        let patience = self.patience.before(deadline);
        // One round trip: the item (data and version) and whether it is locked.
        let (item, locked) = retry(&self.zk, patience, || {
            let item = self.zk.get_async(&item_path);
            let lock = self.zk.exists_async(&lock_path);
            let (item, lock) = (item.wait(), lock.wait());
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
        })?;
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
                return self.bury(dead, name, &data, stat.version, patience);
            }
        }
        let claim_id = guid();
        let ops = [
            Op::create(
                &lock_path,
                claim_id.as_bytes(),
                zookeeper::CreateOptions::new(CreateMode::Ephemeral)
                    .with_acl(self.store.nodes.acl_list()),
            ),
            Op::set_data(&item_path, &data, stat.version),
        ];
        let taken = loop {
            match self.zk.multi(&ops) {
                Ok(_) => break true,
                Err(Error::MultiFailed { index, error }) => match (index, *error) {
                    (0, Error::NodeExists) | (1, Error::NoNode) | (1, Error::BadVersion) => {
                        break false
                    }
                    // The lock directory is missing (not created yet, or an empty
                    // container the server removed).
                    (0, Error::NoNode) => {
                        ensure_dir(&self.zk, &self.locks, &self.store.nodes, patience)?
                    }
                    (_, error) => return Err(error.into()),
                },
                Err(error) if error.is_connection_loss() => {
                    // Applied or not? Our lock node carries this claim's id. (No deadline
                    // here: an applied claim must be found, not left locked.) `sync` first:
                    // the server we reconnected to may not have applied it yet.
                    let looked = await_reconnect(&self.zk, self.patience, 1)
                        .and_then(|()| retry(&self.zk, self.patience, || self.zk.sync(&lock_path)))
                        .and_then(|_| retry(&self.zk, self.patience, || self.zk.get(&lock_path)));
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
        if !taken {
            return Ok(Claim::Missed);
        }
        bump(&self.counters.claims);
        Ok(Claim::Taken(WorkItem {
            zk: self.zk.clone(),
            name: name.to_string(),
            item_path,
            lock_path,
            data,
            token: stat.version.wrapping_add(1),
            claim_id,
            patience: self.patience,
            finished: false,
        }))
    }

    /// Moves the item `name` (unlocked, at `version`, holding `data`) to the dead-letter
    /// directory in one `multi`: create its lock (so it fails if a consumer holds the
    /// item), delete the item at `version` (so it fails if it was claimed or completed
    /// meanwhile), delete the lock again, create the dead letter. All or nothing: never
    /// both a dead letter and the item, never neither. A lost reply needs no recovery
    /// read: applied, the item is gone; not applied, it is still in the queue and the
    /// next consumer to find it moves it (a second application is refused by the
    /// version).
    pub(super) fn bury(
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
                zookeeper::CreateOptions::new(CreateMode::Ephemeral).with_acl(acl),
            ),
            Op::delete(&item_path, version),
            Op::delete(&lock_path, -1),
            Op::create(
                &format!("{}/{name}-", dead.dir),
                data,
                zookeeper::CreateOptions::new(CreateMode::PersistentSequential).with_acl(acl),
            ),
        ];
        loop {
            match self.zk.multi(&ops) {
                Ok(_) => {
                    log::debug!("work queue: {name} moved to {}", dead.dir);
                    bump(&self.counters.dead_lettered);
                    return Ok(Claim::Buried);
                }
                Err(Error::MultiFailed { index, error }) => match (index, *error) {
                    (0, Error::NodeExists) => return Ok(Claim::Locked),
                    (1, Error::NoNode) | (1, Error::BadVersion) => return Ok(Claim::Missed),
                    (0, Error::NoNode) => {
                        ensure_dir(&self.zk, &self.locks, &self.store.nodes, patience)?
                    }
                    (3, Error::NoNode) => {
                        ensure_dir(&self.zk, &dead.dir, &self.store.nodes, patience)?
                    }
                    (_, error) => return Err(error.into()),
                },
                Err(error) if error.is_connection_loss() => return Ok(Claim::Buried),
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Waits in line until this waiter is the head, then watches the queue as the head
    /// until it claims an item or the deadline passes. Waiters past the line counter's
    /// end take no part (their owners remove them).
    pub(super) fn wait_in_line(
        &self,
        waiter: &str,
        deadline: Deadline,
    ) -> Result<Option<WorkItem>> {
        let patience = self.patience.before(deadline);
        loop {
            let children = retry(&self.zk, patience, || self.zk.get_children(&self.waiters))?;
            let mut line = members(children, ANY_NAME);
            line.retain(|w| w.in_range());
            let Some(position) = line.iter().position(|w| w.name == waiter) else {
                return Err(RecipeError::Lost(LossReason::NodeGone));
            };
            if position == 0 {
                return self.head_turn(deadline);
            }
            let predecessor = format!("{}/{}", self.waiters, line[position - 1].name);
            match wait_for_change(&self.zk, &predecessor, patience, &self.waiting)? {
                NodeWait::Fired => {
                    bump(&self.counters.wakeups);
                    bump(&self.counters.notifications);
                }
                NodeWait::LookAgain => {}
                NodeWait::TimedOut => return Ok(None),
            }
        }
    }

    /// Takes a fired event out of a kept watch; `Err` for a session-ending event.
    pub(super) fn drain(&self, slot: &mut Option<Watch>) -> Result<()> {
        if let Some(watch) = slot {
            match watch.try_get() {
                Ok(None) => {}
                Ok(Some(event)) => {
                    *slot = None;
                    bump(&self.counters.notifications);
                    check_event(event)?;
                }
                Err(error) => {
                    *slot = None;
                    return Err(error.into());
                }
            }
        }
        Ok(())
    }

    /// Arms the head's missing watches: a child watch on the items (puts) and one on the
    /// locks (releases, completions, crashed holders), both requests pipelined. Returns
    /// the items listing if the items watch was armed now (a fresh listing made after
    /// both watches were registered).
    pub(super) fn arm(
        &self,
        head: &mut HeadWatches,
        deadline: Deadline,
    ) -> Result<Option<Vec<String>>> {
        let patience = self.patience.before(deadline);
        let mut fresh = None;
        let mut attempt = 0;
        loop {
            let items = head
                .items
                .is_none()
                .then(|| self.zk.get_children_watch_async(&self.store.items));
            let locks = head
                .locks
                .is_none()
                .then(|| self.zk.get_children_watch_async(&self.locks));
            let mut failure = None;
            if let Some(listing) = items {
                match listing.wait() {
                    Ok((names, watch)) => {
                        head.items = Some(watch);
                        fresh = Some(names);
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if let Some(listing) = locks {
                match listing.wait() {
                    Ok((_, watch)) => head.locks = Some(watch),
                    Err(error) => failure = failure.or(Some(error)),
                }
            }
            match failure {
                None => return Ok(fresh),
                Some(Error::NoNode) => {
                    // A directory is missing: a child watch needs the node.
                    ensure_dir(&self.zk, &self.store.items, &self.store.nodes, patience)?;
                    ensure_dir(&self.zk, &self.locks, &self.store.nodes, patience)?;
                }
                Some(error) if error.is_retryable() => {
                    attempt += 1;
                    await_reconnect(&self.zk, patience, attempt)?;
                }
                Some(error) => return Err(error.into()),
            }
        }
    }

    /// The head's turn: watch items and locks (armed before looking), claim what is
    /// free, sleep until either changes.
    pub(super) fn head_turn(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        // Another thread of this value may be head already (a consumer without a place
        // in line waits as one too): wait for it no longer than our own deadline.
        let mut head = match deadline.instant() {
            None => self.head.lock(),
            Some(at) => match self.head.try_lock_until(at) {
                Some(head) => head,
                None => return Ok(None),
            },
        };
        loop {
            let HeadWatches { items, locks } = &mut *head;
            self.drain(items)?;
            self.drain(locks)?;
            let listed = match self.arm(&mut head, deadline)? {
                Some(children) => {
                    *self.cache.lock() = self.sorted(children);
                    true
                }
                None => false,
            };
            if let Some(item) = self.claim_any(deadline, listed)? {
                return Ok(Some(item));
            }
            if deadline.expired() {
                return Ok(None);
            }
            let HeadWatches { items, locks } = &mut *head;
            match counted_wait(&self.waiting, || wait_any(items, locks, deadline)) {
                None => return Ok(None),
                Some((fired, event)) => {
                    bump(&self.counters.wakeups);
                    bump(&self.counters.notifications);
                    *fired = None;
                    check_event(event?)?;
                }
            }
        }
    }
}

/// Deletes the lock `lock` on a cleanup thread if it is the one claim `claim_id` created
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

/// Waits for the first of the two watches to fire; returns its slot and event, or `None`
/// at the deadline.
pub(super) fn wait_any<'a>(
    items: &'a mut Option<Watch>,
    locks: &'a mut Option<Watch>,
    deadline: Deadline,
) -> Option<(&'a mut Option<Watch>, zookeeper::Result<WatchedEvent>)> {
    let (items_index, locks_index, selected) = {
        let mut select = Select::new();
        let items_index = items.as_ref().map(|w| select.recv(w.receiver()));
        let locks_index = locks.as_ref().map(|w| select.recv(w.receiver()));
        let op = match deadline.instant() {
            None => select.select(),
            Some(deadline) => select.select_deadline(deadline).ok()?,
        };
        let index = op.index();
        let event = if Some(index) == items_index {
            op.recv(items.as_ref()?.receiver())
        } else {
            op.recv(locks.as_ref()?.receiver())
        };
        (items_index, locks_index, (index, event))
    };
    let (index, event) = selected;
    let event = event.map_err(|_| Error::Closed);
    if Some(index) == items_index {
        Some((items, event))
    } else {
        debug_assert_eq!(Some(index), locks_index);
        Some((locks, event))
    }
}
