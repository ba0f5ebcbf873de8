//! Waiting for an item: the line of idle consumers, and the head's turn (its kept
//! watches on the queue). Every step withdraws what it started when its take is dropped.

use super::*;

impl OnSession<'_> {
    pub(super) async fn take_until(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        if let Some(item) = self.claim_any(deadline, false).await? {
            return Ok(Some(item));
        }
        if deadline.expired() {
            return Ok(None);
        }
        let Some(waiter) = self.join_line().await? else {
            // No place in line (its counter is at its end and peers keep it busy): wait as
            // an extra head instead. More wake-ups, same exclusivity.
            return self.head_turn(deadline).await;
        };
        let path = format!("{}/{waiter}", self.waiters);
        // A take dropped while in line leaves it in the background.
        let mut in_line = DeleteOnDrop::armed(&self.zk, &path);
        let result = self.wait_in_line(&waiter, deadline).await;
        in_line.disarm();
        // Leaving the line wakes our successor (only it). (Dropped meanwhile, the delete
        // goes on in the background, and an item claimed is released.)
        if let Err(error) = delete_eventually_async(&self.zk, &path, self.patience).await {
            log::debug!("work queue: leaving the line ({path}): {error}");
        }
        result
    }

    /// Joins the line of idle consumers (found again by its guid if the reply is lost).
    /// `None` if the line's counter is at its end and the line could not be restarted
    /// (peers are in it): a waiter node past the end is removed at once, it takes no part.
    /// Dropped with its create sent, the node is withdrawn in the background.
    pub(super) async fn join_line(&self) -> Result<Option<String>> {
        for _ in 0..2 {
            let tag = format!("{}-w-", guid());
            let waiter = create_sequential_async(
                &self.zk,
                &self.waiters,
                &tag,
                b"",
                &self.store.nodes,
                self.patience,
            )
            .await?;
            if name_in_range(&waiter) {
                return Ok(Some(waiter));
            }
            let path = format!("{}/{waiter}", self.waiters);
            delete_eventually_async(&self.zk, &path, self.patience).await?;
            let restart = restart_dir_async(
                &self.zk,
                &self.waiters,
                &[],
                &self.store.nodes,
                self.patience,
            )
            .await?;
            if restart == Restart::NotEmpty {
                break;
            }
        }
        Ok(None)
    }

    /// Waits in line until this waiter is the head, then watches the queue as the head
    /// until it claims an item or the deadline passes. Waiters past the line counter's
    /// end take no part (their owners remove them). A dropped wait takes its watch off.
    pub(super) async fn wait_in_line(
        &self,
        waiter: &str,
        deadline: Deadline,
    ) -> Result<Option<WorkItem>> {
        let patience = self.patience.before(deadline);
        loop {
            let children = retry_async(&self.zk, patience, || {
                self.zk.get_children_async(&self.waiters)
            })
            .await?;
            let mut line = members(children, ANY_NAME);
            line.retain(|w| w.in_range());
            let Some(position) = line.iter().position(|w| w.name == waiter) else {
                return Err(RecipeError::Lost(LossReason::NodeGone));
            };
            if position == 0 {
                return self.head_turn(deadline).await;
            }
            let predecessor = format!("{}/{}", self.waiters, line[position - 1].name);
            match wait_for_change_async(&self.zk, &predecessor, patience, &self.waiting).await? {
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
    pub(super) async fn arm(
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
                match listing.await {
                    Ok((names, watch)) => {
                        head.items = Some(watch);
                        fresh = Some(names);
                    }
                    Err(error) => failure = Some(error),
                }
            }
            if let Some(listing) = locks {
                match listing.await {
                    Ok((_, watch)) => head.locks = Some(watch),
                    Err(error) => failure = failure.or(Some(error)),
                }
            }
            match failure {
                None => return Ok(fresh),
                Some(Error::NoNode) => {
                    // A directory is missing: a child watch needs the node.
                    let nodes = &self.store.nodes;
                    ensure_dir_async(&self.zk, &self.store.items, nodes, patience).await?;
                    ensure_dir_async(&self.zk, &self.locks, nodes, patience).await?;
                }
                Some(error) if error.is_retryable() => {
                    attempt += 1;
                    reconnected(&self.zk, patience, attempt).await?;
                }
                Some(error) => return Err(error.into()),
            }
        }
    }

    /// The head's turn: watch items and locks (armed before looking), claim what is
    /// free, sleep until either changes. The watches stay armed for the next turn; a
    /// dropped turn takes them off.
    pub(super) async fn head_turn(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        // Another take of this value may be head already (a consumer without a place in
        // line waits as one too): wait for it no longer than our own deadline.
        let Some(mut role) = self.head_role(deadline).await else {
            return Ok(None);
        };
        let turn = self.head_turn_with(&mut role.watches, deadline).await;
        role.keep = true;
        turn
    }

    async fn head_turn_with(
        &self,
        head: &mut HeadWatches,
        deadline: Deadline,
    ) -> Result<Option<WorkItem>> {
        loop {
            self.drain(&mut head.items)?;
            self.drain(&mut head.locks)?;
            let listed = match self.arm(head, deadline).await? {
                Some(children) => {
                    let sorted = self.sorted(children).await;
                    *self.cache.lock() = sorted;
                    true
                }
                None => false,
            };
            if let Some(item) = self.claim_any(deadline, listed).await? {
                return Ok(Some(item));
            }
            if deadline.expired() {
                return Ok(None);
            }
            let counted = Counted::new(&self.waiting);
            let fired = until(deadline, next_event(head)).await;
            drop(counted);
            let Some(event) = fired else {
                return Ok(None);
            };
            bump(&self.counters.wakeups);
            bump(&self.counters.notifications);
            check_event(event?)?;
        }
    }

    /// The head role of this value, once no other take of it holds it (`None` if the
    /// deadline comes first). No lock is held while waiting for it.
    async fn head_role(&self, deadline: Deadline) -> Option<HeadRole<'_>> {
        let role = self.queue.head_waiters.until(|| {
            let mut head = self.queue.head.lock();
            if head.busy {
                return None;
            }
            head.busy = true;
            let watches = std::mem::take(&mut head.watches);
            Some(HeadRole {
                queue: self.queue,
                zk: &self.zk,
                watches,
                keep: false,
            })
        });
        until(deadline, role).await
    }
}

/// The first event of the head's two watches (its slot emptied: a fired watch is spent).
fn next_event(
    head: &mut HeadWatches,
) -> impl Future<Output = zookeeper_mt::Result<WatchedEvent>> + Send + '_ {
    std::future::poll_fn(move |cx| {
        for slot in [&mut head.items, &mut head.locks] {
            if let Some(watch) = slot.as_mut() {
                if let Poll::Ready(event) = Pin::new(watch).poll(cx) {
                    *slot = None;
                    return Poll::Ready(event);
                }
            }
        }
        Poll::Pending
    })
}

/// A take's head turn on its value, holding the value's kept watches. Given up, it puts
/// them back for the next turn (`keep`), or, for a dropped take, takes them off the
/// client; then the next take waiting for the role is woken.
struct HeadRole<'a> {
    queue: &'a WorkQueue,
    /// The session of the take (its watches are that session's).
    zk: &'a ZooKeeper,
    watches: HeadWatches,
    keep: bool,
}

impl Drop for HeadRole<'_> {
    fn drop(&mut self) {
        let watches = std::mem::take(&mut self.watches);
        let withdrawn = {
            let mut head = self.queue.head.lock();
            head.busy = false;
            if self.keep {
                head.watches = watches;
                HeadWatches::default()
            } else {
                watches
            }
        };
        for watch in [withdrawn.items, withdrawn.locks].into_iter().flatten() {
            withdraw_watch(self.zk, &watch);
        }
        self.queue.head_waiters.wake_all();
    }
}
