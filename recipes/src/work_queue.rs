//! A locking work queue (a crawler's queue of links): consumers take an item under an
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
//! - **Claim**: read the item (`data`, `version v`) and whether it is locked (one
//!   pipelined round trip), then one `multi`: create the lock node *and* rewrite the
//!   item's data unchanged at version `v`. The multi fails as a whole if the item is
//!   locked, completed or claimed meanwhile, so no orphan lock is ever left behind; and
//!   the item's new version `v+1` is this claim's *ownership token*: any later claim of
//!   the same item bumps it again. If the multi's reply is lost, the consumer
//!   reconnects, `sync`s and reads its lock node (which carries the claim's id).
//! - **Fast path, cost independent of the backlog**: a `WorkQueue` value keeps the names
//!   of its last listing of `items` and claims from them; it lists again only when they
//!   are used up. Each name is tried at most once per listing, so draining N items costs
//!   O(N) names listed (one listing), not O(N²) (a listing of every item and lock per
//!   take): a take costs the same few hundred bytes and four requests (claim check,
//!   claim, completion) at 10 or 100,000 items; only a consumer's first take lists the
//!   whole backlog. Under a backlog consumers never wait or watch.
//! - **No race for the head**: a claim starts at the first known item while claims
//!   succeed (FIFO); after a claim lost to another consumer it starts at a random one of
//!   the first few (the window doubles per lost race, up to 32, and halves per success),
//!   so competing consumers spread over the head of the queue instead of all trying its
//!   first item.
//! - **Waiting without a herd**: a consumer that finds nothing joins a line of waiters
//!   (an ephemeral sequential node, like a lock). Only the *head* of the line watches the
//!   queue (a child watch on `items`, for puts, and one on `locks`, for releases and
//!   crashed consumers); every other waiter watches only its predecessor in the line.
//!   When the head claims an item it leaves the line, which wakes exactly one consumer,
//!   the next head. So a put wakes the head and one successor, and a completion wakes
//!   only the head, whatever the number of idle consumers, where a watch on the directory per consumer and kazoo's
//!   `LockingQueue` wake every consumer on every change. The head keeps its watches
//!   armed between turns instead of registering new ones, so no watch accumulates (kazoo
//!   leaks a watch callback per `get`).
//!
//! # Finishing an item
//! - [`WorkItem::complete`]: `multi(delete item at version token, delete lock)`. It
//!   succeeds only while this claim still owns the item: if the lock vanished (session
//!   expired) or someone else re-claimed it, it fails with [`RecipeError::Lost`] and
//!   changes nothing.
//! - [`WorkItem::release`]: `multi(check item at version token, delete lock)`: the item
//!   becomes available again, to the head of the line. Dropping an unfinished item
//!   releases it on a cleanup thread, so a drop never waits for the server.
//! - A lost reply is resolved by reading the lock (and item) again after a `sync`, so a
//!   member that has not applied the multi yet cannot make an applied completion look
//!   lost, or leave the lock behind.
//!
//! # Attempts and dead letters
//! A claim rewrites the item once (its ownership token), and nothing else writes an
//! item, so the item's data version *is* the number of claims it has had:
//! [`WorkItem::attempt`] reports it, with no extra node or write. With
//! [`with_dead_letter`](WorkQueue::with_dead_letter)`(n)`, a consumer that finds an
//! unlocked item already claimed `n` times (each claim released, dropped, or abandoned
//! by a consumer whose session ended: a crashed consumer's claim counts) moves it
//! instead of claiming it, in one `multi`: create the item's lock (fails if it is held),
//! delete the item at the version read (fails if it was claimed or completed
//! meanwhile), delete the lock, create `<dead dir>/<item name>-<seq>` with the item's
//! data. So an item is either in the queue or a dead letter, never both and never
//! neither, and it is moved once. Layout addition:
//! ```text
//! <path>/dead/item-<guid>-<seq>-<seq>   persistent sequential: dead letters, data = the item
//! ```
//! Non-guarantees: the move happens when a consumer next looks at the item, not when its
//! last attempt ends (until then it counts in [`len`](WorkQueue::len)); dead letters
//! are not delivered again (read or remove them with plain reads and deletes); a
//! version that wrapped past 2^31 claims would reset the count (impossible with any
//! `n` below that).
//!
//! # The end of the sequence counters
//! Items and waiters are numbered by their directories' signed 32-bit child counters;
//! near their end the 3.8 server repeats 2147483647 and wraps to negative numbers.
//! Nodes numbered at or past [`SEQUENCE_LIMIT`](crate::util::SEQUENCE_LIMIT) (or
//! negative) never take part. An item put past the end is removed again and the `items`
//! directory restarted if it is empty; otherwise the put fails with
//! [`SequenceExhausted`](crate::RecipeError::SequenceExhausted), adding nothing (as for
//! the [queue](crate::queue), which describes the receipts and orphans). A waiter node
//! past the end is removed at once and the `waiters` directory restarted if it is
//! empty; otherwise that consumer waits without a place in line, as an extra head:
//! more wake-ups, the same exclusivity (the line only spares wake-ups; claims are what
//! make an item one consumer's).
//!
//! # Guarantees
//! - An item is held by at most one consumer at a time (while sessions live); it is
//!   removed only by a `complete` of its current holder; a holder whose session ends
//!   (crash, kill, expiry) gives the item back after the session timeout.
//! - A single consumer claims items in FIFO order of their puts, skipping items in
//!   progress. Competing consumers claim from the head of the queue, FIFO only roughly
//!   (see above); a released item is offered again from each consumer's next listing.
//! - `put` is exactly-once on `Ok`, also across connection loss (see
//!   [`queue`](crate::queue)).
//! - Per put, at most a small constant number of consumers is woken (the head, its
//!   successor, and the head again on completion), independent of the number of idle
//!   consumers. [`WorkQueue::stats`] counts them.
//! - With [`NodeOptions`] carrying an ACL, clients without the credentials can neither
//!   read nor change items, locks or waiters.
//!
//! # Non-guarantees
//! - Processing is at-least-once: a consumer that crashes after doing the work but before
//!   `complete` leaves the item to be done again.
//! - A holder paused longer than its session timeout may still be working when the item
//!   is handed to someone else; only its `complete` is refused.
//! - Claiming rewrites the item's data once (that is what bumps the version), so large
//!   items cost their size again per claim.
//! - A consumer's first take, and each listing after its cached names are used up, costs
//!   the size of the backlog (about 50 bytes per item).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::{work_queue::WorkQueue, OptionalExtension};
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let links = WorkQueue::new(&zk, "/crawler")?;
//! links.put(b"https://example.com/")?;
//! if let Some(item) = links.take(Duration::from_secs(1)).optional()? {
//!     println!("crawling {}", String::from_utf8_lossy(item.data()));
//!     item.complete()?; // or item.release()? to give it back
//! }
//! # Ok::<(), zookeeper_recipes::RecipeError>(())
//! ```

use crate::error::LossReason;
use crate::queue::{split_items, ItemStore, RECEIPTS};
use crate::recovery::{children_or_none, name_in_range, random_below, restart_dir, Restart};
use crate::support::{
    await_reconnect, check_base_path, check_event, counted_wait, create_sequential,
    default_reconnect_timeout, delete_eventually, delete_node, ensure_dir, finish_in_background,
    members, retry, wait_for_change, Deadline, NodeWait, Patience, ANY_NAME,
};
use crate::util::guid;
use crate::NodeOptions;
use crate::{RecipeError, Result};
use crossbeam_channel::Select;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use zookeeper::{CreateMode, Error, Op, Timeout, Watch, WatchedEvent, ZooKeeper};

/// Largest item [`WorkQueue::put`] accepts: the client's data limit less room for the
/// lock node a claim creates in the same multi.
pub const MAX_ITEM_LEN: usize = zookeeper::MAX_DATA_LEN - 256;

/// Widest spread of claim starting points (see the module docs): a claim starts at one of
/// the first `MAX_SPREAD + 1` free items a consumer knows of.
const MAX_SPREAD: usize = 31;

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
    /// Items this value moved to the dead-letter directory.
    pub dead_lettered: u64,
}

#[derive(Default)]
struct Counters {
    wakeups: AtomicU64,
    notifications: AtomicU64,
    claims: AtomicU64,
    races_lost: AtomicU64,
    dead_lettered: AtomicU64,
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
/// threads sharing a value are separate consumers in the waiting line all the same (and
/// share one cached listing).
pub struct WorkQueue {
    zk: ZooKeeper,
    path: String,
    /// Items, receipts and the node options.
    store: ItemStore,
    locks: String,
    waiters: String,
    patience: Patience,
    head: Mutex<HeadWatches>,
    /// Item names from the last listing not yet tried, in sequence order.
    cache: Mutex<VecDeque<String>>,
    /// How far past the first known item a claim may start: grows when claims collide
    /// with other consumers', shrinks when they succeed.
    spread: AtomicUsize,
    counters: Counters,
    waiting: AtomicU64,
    /// Where items go after too many attempts, if anywhere.
    dead_letter: Option<DeadLetter>,
}

/// The dead-letter set-up: claims an item may have before it is moved, and where to.
#[derive(Debug, Clone)]
struct DeadLetter {
    max_attempts: i32,
    dir: String,
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
    /// In progress (locked) when looked at.
    Locked,
    /// Completed, or claimed by someone else meanwhile.
    Missed,
    /// Out of attempts: moved to the dead-letter directory (or being moved).
    Buried,
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        // Take the kept head watches off locally, so they do not stay registered until
        // the queue next changes.
        let mut head = self.head.lock();
        for watch in [head.items.take(), head.locks.take()].into_iter().flatten() {
            let _ = self.zk.remove_watch(&watch);
        }
    }
}

impl WorkQueue {
    /// The work queue at `path`. Its nodes are created when first needed, with the
    /// [`NodeOptions`] given to [`with_node_options`](Self::with_node_options).
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<WorkQueue> {
        check_base_path(path)?;
        Ok(WorkQueue {
            zk: zk.clone(),
            path: path.to_string(),
            store: ItemStore {
                items: format!("{path}/items"),
                receipts: format!("{path}/{RECEIPTS}"),
                receipts_inside: false,
                nodes: NodeOptions::default(),
            },
            locks: format!("{path}/locks"),
            waiters: format!("{path}/waiters"),
            patience: Patience::reconnect(default_reconnect_timeout(zk)),
            head: Mutex::new(HeadWatches::default()),
            cache: Mutex::new(VecDeque::new()),
            spread: AtomicUsize::new(0),
            counters: Counters::default(),
            waiting: AtomicU64::new(0),
            dead_letter: None,
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout).
    pub fn with_reconnect_timeout(mut self, timeout: Duration) -> WorkQueue {
        self.patience = Patience::reconnect(timeout);
        self
    }

    /// The ACL of every node the work queue creates (its directories, items, receipts,
    /// locks, waiters) and whether its four directories are containers (removed by the
    /// server once empty, recreated when next needed). Default: open ACL, persistent.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> WorkQueue {
        self.store.nodes = nodes;
        self
    }

    /// Gives every item at most `max_attempts` claims (at least 1): an item claimed that
    /// often and never completed (released, dropped, or abandoned by a consumer whose
    /// session ended) is moved to the dead-letter directory `<path>/dead` by the next
    /// consumer that finds it, instead of being handed out again. See
    /// [`with_dead_letter_dir`](Self::with_dead_letter_dir) and the module docs.
    pub fn with_dead_letter(self, max_attempts: u32) -> WorkQueue {
        let dir = format!("{}/dead", self.path);
        self.with_dead_letter_dir(max_attempts, &dir)
    }

    /// [`with_dead_letter`](Self::with_dead_letter) with the dead-letter directory at
    /// `dir` (any path; created when first needed, with the [`NodeOptions`]). Every
    /// consumer of the queue must use the same settings.
    pub fn with_dead_letter_dir(mut self, max_attempts: u32, dir: &str) -> WorkQueue {
        let max_attempts = i32::try_from(max_attempts.max(1)).unwrap_or(i32::MAX);
        self.dead_letter = Some(DeadLetter {
            max_attempts,
            dir: dir.to_string(),
        });
        self
    }

    /// The dead-letter directory, if dead-lettering is on.
    pub fn dead_letter_dir(&self) -> Option<&str> {
        self.dead_letter.as_ref().map(|d| d.dir.as_str())
    }

    /// The names of the dead letters now (`<item name>-<seq>`, each holding the item's
    /// data), in the order they were moved; empty if dead-lettering is off.
    pub fn dead_letters(&self) -> Result<Vec<String>> {
        let Some(dead) = &self.dead_letter else {
            return Ok(Vec::new());
        };
        let children = children_or_none(&self.zk, &dead.dir, self.patience)?;
        Ok(members(children, ANY_NAME)
            .into_iter()
            .map(|m| m.name)
            .collect())
    }

    /// The work queue's base path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Adds an item (exactly once on `Ok`, also across connection loss). At most
    /// [`MAX_ITEM_LEN`] bytes: a claim sends the data again along with its lock. At the
    /// end of the item directory's sequence counter it restarts the counter if the queue
    /// is empty, and fails with [`RecipeError::SequenceExhausted`] (adding nothing) if
    /// it is not.
    pub fn put(&self, data: &[u8]) -> Result<()> {
        if data.len() > MAX_ITEM_LEN {
            return Err(RecipeError::InvalidArgument(
                "work item larger than MAX_ITEM_LEN",
            ));
        }
        self.store.put(&self.zk, data, self.patience)
    }

    /// Claims the first available item without waiting.
    pub fn try_take(&self) -> Result<Option<WorkItem>> {
        self.claim_any(Deadline::never(), false)
    }

    /// Claims an item, waiting at most `timeout` ([`Timeout::Never`]: as long as it
    /// takes): `Err(Timeout)` if none became available.
    pub fn take(&self, timeout: impl Into<Timeout>) -> Result<WorkItem> {
        let deadline = timeout.into().deadline();
        loop {
            if let Some(item) = self.take_until(deadline)? {
                return Ok(item);
            }
            if deadline.expired() {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// Items in the queue now, in progress or not.
    pub fn len(&self) -> Result<usize> {
        let children = children_or_none(&self.zk, &self.store.items, self.patience)?;
        Ok(split_items(children).0.len())
    }

    /// Whether the queue holds no items now.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// Items being worked on now (locked).
    pub fn in_progress(&self) -> Result<usize> {
        children_or_none(&self.zk, &self.locks, self.patience).map(|locks| locks.len())
    }

    /// Consumers waiting in line now (all values, all processes), from the server.
    pub fn waiters_in_line(&self) -> Result<usize> {
        children_or_none(&self.zk, &self.waiters, self.patience).map(|waiters| waiters.len())
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
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
        }
    }

    fn take_until(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
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
    fn join_line(&self) -> Result<Option<String>> {
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
    fn sorted(&self, children: Vec<String>) -> VecDeque<String> {
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
    fn claim_any(&self, deadline: Deadline, mut listed: bool) -> Result<Option<WorkItem>> {
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
    fn claim_cached(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
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

    fn claim(&self, name: &str, deadline: Deadline) -> Result<Claim> {
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
    fn bury(
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
    fn wait_in_line(&self, waiter: &str, deadline: Deadline) -> Result<Option<WorkItem>> {
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

    /// Arms the head's missing watches: a child watch on the items (puts) and one on the
    /// locks (releases, completions, crashed holders), both requests pipelined. Returns
    /// the items listing if the items watch was armed now (a fresh listing made after
    /// both watches were registered).
    fn arm(&self, head: &mut HeadWatches, deadline: Deadline) -> Result<Option<Vec<String>>> {
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
    fn head_turn(&self, deadline: Deadline) -> Result<Option<WorkItem>> {
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
fn drop_lock_later(zk: &ZooKeeper, lock: &str, claim_id: &str) {
    let (lock, claim_id) = (lock.to_string(), claim_id.to_string());
    let what = format!("removing the lock {lock} of an unresolved claim");
    finish_in_background(zk.clone(), what, move |zk| {
        zk.sync(&lock)?;
        match zk.get(&lock) {
            Ok((owner, stat)) if owner == claim_id.as_bytes() => {
                match zk.delete(&lock, Some(stat.version)) {
                    Ok(()) | Err(Error::NoNode) => Ok(()),
                    Err(error) => Err(error),
                }
            }
            Ok(_) | Err(Error::NoNode) => Ok(()),
            Err(error) => Err(error),
        }
    });
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
/// give it back with [`release`](Self::release). Dropping it releases it in the
/// background (the drop itself never waits for the server).
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

    /// Which claim of this item this is: 1 for the first, 2 after one release or
    /// abandonment, ... (the item's data version after the claim; see
    /// [`WorkQueue::with_dead_letter`]).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.token).unwrap_or(0)
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

    /// Releases on a cleanup thread until applied, refused (the claim is no longer ours)
    /// or the session ends. A release sent again after a lost reply is harmless: if the
    /// first applied, the second is refused.
    fn release_in_background(&self) {
        let ops = self.release_ops();
        let what = format!("releasing {}", self.name);
        finish_in_background(self.zk.clone(), what, move |zk| match zk.multi(&ops) {
            Ok(_) | Err(Error::MultiFailed { .. }) => Ok(()),
            Err(error) => Err(error),
        });
    }

    /// The server could not be reached: make sure our lock goes eventually (it is
    /// ephemeral, but the session may well survive), with the ownership check.
    fn release_later_if_unreachable(&self, result: &Result<()>) {
        if let Err(RecipeError::ZooKeeper(error)) = result {
            if error.is_connection_loss() {
                self.release_in_background();
            }
        }
    }

    /// Runs a completing or releasing multi, resolving a lost reply by looking (after a
    /// `sync`, so the server we reconnected to has applied what the old connection sent).
    fn finish(&self, ops: &[Op], completing: bool) -> Result<()> {
        let mut attempt = 0;
        loop {
            match self.zk.multi(ops) {
                Ok(_) => return Ok(()),
                Err(Error::MultiFailed { .. }) => {
                    return Err(RecipeError::Lost(LossReason::NotHeld))
                }
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    await_reconnect(&self.zk, self.patience, attempt)?;
                    retry(&self.zk, self.patience, || self.zk.sync(&self.lock_path))?;
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
                        Err(RecipeError::Lost(LossReason::NotHeld))
                    };
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

impl Drop for WorkItem {
    /// Gives an unfinished item back without waiting: the release runs on a cleanup
    /// thread, so dropping never blocks (it used to wait out a lost connection).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.release_in_background();
    }
}
