//! A locking work queue (seed 002's crawler queue): consumers take an item under an
//! ephemeral per-item lock, then [`complete`](WorkItem::complete) it (item and lock
//! removed atomically) or [`release`](WorkItem::release) it; a crashed consumer's items
//! come back when its session ends. Idle consumers wait without a herd effect.
//!
//! # Layout
//! ```text
//! <path>/items/item-<guid>-<seq>   persistent sequential: the work, in FIFO order
//! <path>/locks/<item name>         ephemeral: "this item is being worked on"
//! <path>/waiters/<guid>-w-<seq>    ephemeral sequential: idle consumers, in line
//! <path>/receipts/<guid>           ephemeral put receipts (see the queue recipe)
//! ```
//!
//! # Taking an item
//! - **Claim**: read the item (`data`, `version v`), then one `multi`: create the lock
//!   node *and* rewrite the item's data unchanged at version `v`. The multi fails as a
//!   whole if the item is locked, completed or claimed meanwhile, so no orphan lock is
//!   ever left behind; and the item's new version `v+1` is this claim's *ownership
//!   token*: any later claim of the same item bumps it again.
//! - **Fast path**: list items and locks (one pipelined round trip) and claim the first
//!   unlocked item in sequence order. Under a backlog consumers never wait or watch.
//! - **Waiting without a herd**: a consumer that finds nothing joins a line of waiters
//!   (an ephemeral sequential node, like a lock). Only the *head* of the line watches the
//!   queue (a child watch on `items`, for puts, and one on `locks`, for releases and
//!   crashed consumers); every other waiter watches only its predecessor in the line.
//!   When the head claims an item it leaves the line, which wakes exactly one consumer,
//!   the next head. So a put wakes the head and one successor, and a completion wakes
//!   only the head, whatever the number of idle consumers, where seed 002 and kazoo's
//!   `LockingQueue` wake every consumer on every change. The head keeps its watches
//!   armed between turns instead of registering new ones, so no watch accumulates (kazoo
//!   leaks a watch callback per `get`).
//!
//! # Finishing an item
//! - [`WorkItem::complete`]: `multi(delete item at version token, delete lock)`. It
//!   succeeds only while this claim still owns the item: if the lock vanished (session
//!   expired) or someone else re-claimed it, it fails with [`RecipeError::Lost`] and
//!   changes nothing.
//! - [`WorkItem::release`] (also on drop): `multi(check item at version token, delete
//!   lock)`: the item becomes available again, to the head of the line.
//!
//! # Guarantees
//! - An item is held by at most one consumer at a time (while sessions live); it is
//!   removed only by a `complete` of its current holder; a holder whose session ends
//!   (crash, kill, expiry) gives the item back after the session timeout.
//! - Items are claimed in FIFO order of their puts, skipping items in progress.
//! - `put` is exactly-once on `Ok`, also across connection loss (see
//!   [`queue`](crate::queue)).
//! - Per put, at most a small constant number of consumers is woken (the head, its
//!   successor, and the head again on completion), independent of the number of idle
//!   consumers. [`WorkQueue::stats`] counts them.
//!
//! # Non-guarantees
//! - Processing is at-least-once: a consumer that crashes after doing the work but before
//!   `complete` leaves the item to be done again.
//! - A holder paused longer than its session timeout may still be working when the item
//!   is handed to someone else; only its `complete` is refused.
//! - Claiming rewrites the item's data once (that is what bumps the version), so large
//!   items cost their size again per claim.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::work_queue::WorkQueue;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let links = WorkQueue::new(&zk, "/crawler")?;
//! links.put(b"https://example.com/")?;
//! if let Some(item) = links.take_timeout(Duration::from_secs(1))? {
//!     println!("crawling {}", String::from_utf8_lossy(item.data()));
//!     item.complete()?; // or item.release()? to give it back
//! }
//! # Ok::<(), recipes::RecipeError>(())
//! ```

use crate::queue::{put_item, sorted_items, RECEIPTS};
use crate::support::{
    await_reconnect, check_base_path, check_event, counted_wait, create_sequential,
    default_reconnect_timeout, delete_eventually, finish_in_background, members, retry,
    wait_for_change, Deadline, NodeWait, Patience, ANY_NAME,
};
use crate::util::{ensure_path, guid};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use crossbeam_channel::Select;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use zookeeper::{CreateMode, Error, Op, Watch, WatchedEvent, ZooKeeper};

/// Largest item [`WorkQueue::put`] accepts: the client's data limit less room for the
/// lock node a claim creates in the same multi.
pub const MAX_ITEM_LEN: usize = zookeeper::MAX_DATA_LEN - 256;

/// Counters of one [`WorkQueue`] value (one consumer when each worker has its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkQueueStats {
    /// Times a thread blocked in `take` was woken by a watch (as head of the line by the
    /// queue's watches, or as a waiter by its predecessor leaving).
    pub wakeups: u64,
    /// Watch notifications received in all (wake-ups, plus events of watches kept armed
    /// between turns that fired while nobody waited).
    pub notifications: u64,
    /// Items claimed.
    pub claims: u64,
    /// Claim attempts lost to another consumer.
    pub races_lost: u64,
}

#[derive(Default)]
struct Counters {
    wakeups: AtomicU64,
    notifications: AtomicU64,
    claims: AtomicU64,
    races_lost: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The queue watches the head of the line keeps armed between its turns.
#[derive(Default)]
struct HeadWatches {
    items: Option<Watch>,
    locks: Option<Watch>,
}

/// A locking work queue (see the [module docs](self)).
///
/// `Send + Sync`. Give each worker its own value to get per-worker [`stats`](Self::stats);
/// threads sharing a value are separate consumers in the waiting line all the same.
pub struct WorkQueue {
    zk: ZooKeeper,
    path: String,
    items: String,
    locks: String,
    waiters: String,
    receipts: String,
    patience: Patience,
    head: Mutex<HeadWatches>,
    counters: Counters,
    waiting: AtomicU64,
}

impl fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("path", &self.path)
            .finish()
    }
}

/// What a claim attempt found.
enum Claim {
    Taken(WorkItem),
    /// Locked, completed or re-claimed by someone else meanwhile.
    Missed,
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        // Take the kept head watches off locally, so they do not stay registered until
        // the queue next changes.
        let mut head = self.head.lock();
        for watch in [head.items.take(), head.locks.take()].into_iter().flatten() {
            let _ = self.zk.remove_watch(&watch, true);
        }
    }
}

impl WorkQueue {
    /// Opens the work queue at `path`, creating its nodes if missing.
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<WorkQueue> {
        check_base_path(path)?;
        let queue = WorkQueue {
            zk: zk.clone(),
            path: path.to_string(),
            items: format!("{path}/items"),
            locks: format!("{path}/locks"),
            waiters: format!("{path}/waiters"),
            receipts: format!("{path}/{RECEIPTS}"),
            patience: Patience::reconnect(default_reconnect_timeout(zk)),
            head: Mutex::new(HeadWatches::default()),
            counters: Counters::default(),
            waiting: AtomicU64::new(0),
        };
        for dir in [&queue.items, &queue.locks, &queue.waiters, &queue.receipts] {
            ensure_path(zk, dir)?;
        }
        Ok(queue)
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout).
    pub fn with_reconnect_timeout(mut self, timeout: Duration) -> WorkQueue {
        self.patience = Patience::reconnect(timeout);
        self
    }

    /// The work queue's base path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Adds an item (exactly once on `Ok`, also across connection loss). At most
    /// [`MAX_ITEM_LEN`] bytes: a claim sends the data again along with its lock.
    pub fn put(&self, data: &[u8]) -> Result<()> {
        if data.len() > MAX_ITEM_LEN {
            return Err(RecipeError::InvalidArgument(
                "work item larger than MAX_ITEM_LEN",
            ));
        }
        put_item(&self.zk, &self.items, &self.receipts, data, self.patience).map(drop)
    }

    /// Claims the first available item without waiting.
    pub fn try_take(&self) -> Result<Option<WorkItem>> {
        self.claim_any(Deadline::never())
    }

    /// Claims an item, waiting as long as it takes.
    pub fn take(&self) -> Result<WorkItem> {
        loop {
            if let Some(item) = self.take_until(Deadline::never())? {
                return Ok(item);
            }
        }
    }

    /// Claims an item, waiting at most `timeout`: `None` if none became available.
    pub fn take_timeout(&self, timeout: Duration) -> Result<Option<WorkItem>> {
        self.take_until(Deadline::after(timeout))
    }

    /// Items in the queue now, in progress or not.
    pub fn len(&self) -> Result<usize> {
        let children = retry(&self.zk, self.patience, || {
            self.zk.get_children(&self.items)
        })?;
        Ok(sorted_items(children).len())
    }

    /// Whether the queue holds no items now.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// Items being worked on now (locked).
    pub fn in_progress(&self) -> Result<usize> {
        retry(&self.zk, self.patience, || {
            self.zk.get_children(&self.locks)
        })
        .map(|locks| locks.len())
    }

    /// Consumers waiting in line now (all values, all processes), from the server.
    pub fn waiters_in_line(&self) -> Result<usize> {
        retry(&self.zk, self.patience, || {
            self.zk.get_children(&self.waiters)
        })
        .map(|waiters| waiters.len())
    }

    /// Threads of this value blocked right now on a watch in `take` (as head of the line
    /// or behind another waiter; for monitoring and tests).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed) as usize
    }

    /// This value's counters.
    pub fn stats(&self) -> WorkQueueStats {
        let c = &self.counters;
        WorkQueueStats {
            wakeups: c.wakeups.load(Ordering::Relaxed),
            notifications: c.notifications.load(Ordering::Relaxed),
            claims: c.claims.load(Ordering::Relaxed),
            races_lost: c.races_lost.load(Ordering::Relaxed),
        }
    }

    fn take_until(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        if let Some(item) = self.claim_any(deadline)? {
            return Ok(Some(item));
        }
        if deadline.expired() {
            return Ok(None);
        }
        // Join the line of idle consumers (found again by its guid if the reply is lost).
        let tag = format!("{}-w-", guid());
        let waiter = create_sequential(
            &self.zk,
            &self.waiters,
            &tag,
            b"",
            &NodeOptions::default(),
            self.patience,
        )?;
        let result = self.wait_in_line(&waiter, deadline);
        // Leaving the line wakes our successor (only it).
        let path = format!("{}/{waiter}", self.waiters);
        if let Err(error) = delete_eventually(&self.zk, &path, self.patience) {
            log::debug!("work queue: leaving the line ({path}): {error}");
        }
        result
    }

    /// The fast path: list items and locks, claim the first unlocked item.
    fn claim_any(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        let (items, locks) = retry(&self.zk, self.patience.before(deadline), || {
            let items = self.zk.get_children_async(&self.items);
            let locks = self.zk.get_children_async(&self.locks);
            Ok((items.wait()?, locks.wait()?))
        })?;
        self.claim_first(items, locks, deadline)
    }

    fn claim_first(
        &self,
        items: Vec<String>,
        locks: Vec<String>,
        deadline: Deadline,
    ) -> Result<Option<WorkItem>> {
        let locked: HashSet<String> = locks.into_iter().collect();
        for name in sorted_items(items) {
            if locked.contains(&name) {
                continue;
            }
            match self.claim(&name, deadline)? {
                Claim::Taken(item) => return Ok(Some(item)),
                Claim::Missed => bump(&self.counters.races_lost),
            }
        }
        Ok(None)
    }

    fn claim(&self, name: &str, deadline: Deadline) -> Result<Claim> {
        let item_path = format!("{}/{name}", self.items);
        let lock_path = format!("{}/{name}", self.locks);
        let patience = self.patience.before(deadline);
        let (data, stat) = match retry(&self.zk, patience, || self.zk.get(&item_path)) {
            Ok(found) => found,
            Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(Claim::Missed),
            Err(e) => return Err(e),
        };
        let claim_id = guid();
        let ops = [
            Op::create(&lock_path, claim_id.as_bytes(), CreateMode::Ephemeral),
            Op::set_data(&item_path, &data, stat.version),
        ];
        let taken = match self.zk.multi(&ops) {
            Ok(_) => true,
            Err(Error::MultiFailed { index, error }) => match (index, *error) {
                (0, Error::NodeExists) | (1, Error::NoNode) | (1, Error::BadVersion) => false,
                (_, error) => return Err(error.into()),
            },
            Err(error) if error.is_connection_loss() => {
                // Applied or not? Our lock node carries this claim's id. (No deadline
                // here: an applied claim must be found, not left locked.)
                await_reconnect(&self.zk, self.patience, 1)?;
                match retry(&self.zk, self.patience, || self.zk.get(&lock_path)) {
                    Ok((owner, _)) => owner == claim_id.as_bytes(),
                    Err(RecipeError::ZooKeeper(Error::NoNode)) => false,
                    Err(e) => return Err(e),
                }
            }
            Err(error) => return Err(error.into()),
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

    /// Waits in line until this waiter is the head, then watches the queue as the head
    /// until it claims an item or the deadline passes.
    fn wait_in_line(&self, waiter: &str, deadline: Deadline) -> Result<Option<WorkItem>> {
        let patience = self.patience.before(deadline);
        loop {
            let children = retry(&self.zk, patience, || self.zk.get_children(&self.waiters))?;
            let line = members(children, ANY_NAME);
            let Some(position) = line.iter().position(|w| w.name == waiter) else {
                return Err(RecipeError::Lost(
                    "the waiter node vanished (session expired or node deleted)",
                ));
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
    fn drain(&self, slot: &mut Option<Watch>) -> Result<()> {
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

    /// The head's turn: watch items and locks (armed before listing), claim what is
    /// free, sleep until either changes.
    fn head_turn(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
        let mut head = self.head.lock();
        loop {
            let HeadWatches { items, locks } = &mut *head;
            self.drain(items)?;
            self.drain(locks)?;
            let (item_names, lock_names) = retry(&self.zk, self.patience.before(deadline), || {
                // Both requests are pipelined; a kept (unfired) watch needs no new one.
                let item_list = if items.is_none() {
                    Listing::Watched(self.zk.get_children_watch_async(&self.items))
                } else {
                    Listing::Plain(self.zk.get_children_async(&self.items))
                };
                let lock_list = if locks.is_none() {
                    Listing::Watched(self.zk.get_children_watch_async(&self.locks))
                } else {
                    Listing::Plain(self.zk.get_children_async(&self.locks))
                };
                let item_names = item_list.wait(items);
                let lock_names = lock_list.wait(locks);
                Ok((item_names?, lock_names?))
            })?;
            if let Some(item) = self.claim_first(item_names, lock_names, deadline)? {
                return Ok(Some(item));
            }
            if deadline.expired() {
                return Ok(None);
            }
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

/// A pending child listing, with or without a new watch.
enum Listing {
    Watched(zookeeper::ZkFuture<(Vec<String>, Watch)>),
    Plain(zookeeper::ZkFuture<Vec<String>>),
}

impl Listing {
    /// Waits for the listing; a new watch goes into `slot`.
    fn wait(self, slot: &mut Option<Watch>) -> zookeeper::Result<Vec<String>> {
        match self {
            Listing::Plain(future) => future.wait(),
            Listing::Watched(future) => {
                let (children, watch) = future.wait()?;
                *slot = Some(watch);
                Ok(children)
            }
        }
    }
}

/// Waits for the first of the two watches to fire; returns its slot and event, or `None`
/// at the deadline.
fn wait_any<'a>(
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

/// An item claimed from a [`WorkQueue`]: finish it with [`complete`](Self::complete) or
/// give it back with [`release`](Self::release). Dropping it releases it.
pub struct WorkItem {
    zk: ZooKeeper,
    name: String,
    item_path: String,
    lock_path: String,
    data: Vec<u8>,
    token: i32,
    claim_id: String,
    patience: Patience,
    finished: bool,
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

    /// Whether this claim still owns the item (its lock exists and is ours, and nobody
    /// re-claimed the item). A point-in-time answer.
    pub fn is_held(&self) -> Result<bool> {
        let lock = retry(&self.zk, self.patience, || self.zk.get(&self.lock_path));
        let item = retry(&self.zk, self.patience, || self.zk.exists(&self.item_path))?;
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
    pub fn complete(mut self) -> Result<()> {
        self.finished = true;
        let ops = [
            Op::delete(&self.item_path, self.token),
            Op::delete(&self.lock_path, -1),
        ];
        let result = self.finish(&ops, true);
        self.release_later_if_unreachable(&result);
        result
    }

    /// Gives the item back (deletes the lock), if this claim still owns it.
    pub fn release(mut self) -> Result<()> {
        self.finished = true;
        let result = self.finish(&self.release_ops(), false);
        self.release_later_if_unreachable(&result);
        result
    }

    /// Release = delete our lock, but only while the item still carries our token.
    fn release_ops(&self) -> Vec<Op> {
        vec![
            Op::check(&self.item_path, self.token),
            Op::delete(&self.lock_path, -1),
        ]
    }

    /// The server could not be reached: make sure our lock goes eventually (it is
    /// ephemeral, but the session may well survive), with the ownership check.
    fn release_later_if_unreachable(&self, result: &Result<()>) {
        if let Err(RecipeError::ZooKeeper(error)) = result {
            if error.is_connection_loss() {
                // Applied, or refused (the claim is no longer ours): nothing left to do.
                let ops = self.release_ops();
                let what = format!("releasing {}", self.name);
                finish_in_background(self.zk.clone(), what, move |zk| match zk.multi(&ops) {
                    Ok(_) | Err(Error::MultiFailed { .. }) => Ok(()),
                    Err(error) => Err(error),
                });
            }
        }
    }

    /// Runs a completing or releasing multi, resolving a lost reply by looking.
    fn finish(&self, ops: &[Op], completing: bool) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.zk.multi(ops) {
                Ok(_) => return Ok(()),
                Err(Error::MultiFailed { .. }) => {
                    return Err(RecipeError::Lost(
                        "the work item is no longer held by this claim",
                    ))
                }
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    await_reconnect(&self.zk, self.patience, attempt)?;
                    let lock = retry(&self.zk, self.patience, || self.zk.get(&self.lock_path));
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
                    let item = retry(&self.zk, self.patience, || self.zk.exists(&self.item_path))?;
                    let applied = if completing {
                        item.is_none()
                    } else {
                        item.is_some_and(|stat| stat.version == self.token)
                    };
                    return if applied {
                        Ok(())
                    } else {
                        Err(RecipeError::Lost(
                            "the work item is no longer held by this claim",
                        ))
                    };
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

impl Drop for WorkItem {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let result = self.finish(&self.release_ops(), false);
        self.release_later_if_unreachable(&result);
        if let Err(error) = result {
            log::debug!("work queue: release of {} on drop: {error}", self.name);
        }
    }
}
