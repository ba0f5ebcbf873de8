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
//!   releases it in the background (a task on the recipes' driver), so a drop never
//!   waits for the server.
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
//! Nodes numbered at or past [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or
//! negative) never take part. An item put past the end is removed again and the `items`
//! directory restarted if it is empty; otherwise the put fails with
//! [`SequenceExhausted`](crate::RecipeError::SequenceExhausted), adding nothing (as for
//! the [queue](crate::queues::queue), which describes the receipts and orphans). A waiter node
//! past the end is removed at once and the `waiters` directory restarted if it is
//! empty; otherwise that consumer waits without a place in line, as an extra head:
//! more wake-ups, the same exclusivity (the line only spares wake-ups; claims are what
//! make an item one consumer's).
//!
//! # Async
//! [`WorkQueue::take_async`], [`try_take_async`](WorkQueue::try_take_async),
//! [`put_async`](WorkQueue::put_async), [`WorkItem::complete_async`] and the other
//! `*_async` methods are the protocol itself, as async code over the client's futures and
//! watches; the blocking calls drive the same futures on the caller's thread. A pending
//! async take costs no thread. Dropping its future at any point withdraws what it
//! started: its place in line (its waiter node, deleted in the background if need be),
//! its watches (a head's kept watches too). A claim already sent when the take is
//! dropped is settled in the background: if it applied, the item is released again (the
//! lock deleted with the ownership check), so it is neither lost nor held for the life
//! of the session. An item claimed for a future dropped before it returned is a dropped
//! [`WorkItem`]: released in the background. A dropped
//! [`complete_async`](WorkItem::complete_async) or
//! [`release_async`](WorkItem::release_async) releases the item unless the completion
//! applied: it ends completed once or back in the queue. A dropped `put_async` may or
//! may not have added its item (never twice); its receipt is removed in the background.
//!
//! # Guarantees
//! - An item is held by at most one consumer at a time (while sessions live); it is
//!   removed only by a `complete` of its current holder; a holder whose session ends
//!   (crash, kill, expiry) gives the item back after the session timeout.
//! - A single consumer claims items in FIFO order of their puts, skipping items in
//!   progress. Competing consumers claim from the head of the queue, FIFO only roughly
//!   (see above); a released item is offered again from each consumer's next listing.
//! - `put` is exactly-once on `Ok`, also across connection loss (see
//!   [`queue`](crate::queues::queue)).
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
//! use zookeeper_mt_recipes::{queues::WorkQueue, OptionalExtension};
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let links = WorkQueue::new(&zk, "/crawler")?;
//! links.put(b"https://example.com/")?;
//! if let Some(item) = links.take(Duration::from_secs(1)).optional()? {
//!     println!("crawling {}", String::from_utf8_lossy(item.data()));
//!     item.complete()?; // or item.release()? to give it back
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

mod claim;
mod item;
mod line;

pub use item::*;

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::nodes::guid;
use crate::queues::queue::{split_items, ItemStore, RECEIPTS};
use crate::recovery::{
    children_or_none_async, name_in_range, random_below, restart_dir_async, Restart,
};
use crate::runtime::Wakers;
use crate::runtime::{block_on, spawn_detached, until};
use crate::support::{
    check_base_path, check_event, create_sequential_async, delete_eventually_async,
    ensure_dir_async, finish_later, members, reconnected, retry_async, wait_for_change_async,
    withdraw_watch, Counted, Deadline, DeleteOnDrop, NodeWait, Patience, ANY_NAME,
};
use crate::NodeOptions;
use crate::{RecipeError, Result, RetryPolicy};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use zookeeper_mt::{CreateMode, Error, Op, OpResult, Timeout, Watch, WatchedEvent, ZooKeeper};

/// Largest item [`WorkQueue::put`] accepts: the client's data limit less room for the
/// lock node a claim creates in the same multi.
pub const MAX_ITEM_LEN: usize = zookeeper_mt::MAX_DATA_LEN - 256;

/// Widest spread of claim starting points (see the module docs): a claim starts at one of
/// the first `MAX_SPREAD + 1` free items a consumer knows of.
const MAX_SPREAD: usize = 31;

/// Counters of one [`WorkQueue`] value (one consumer when each worker has its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkQueueStats {
    /// Times a take waiting in `take` was woken by a watch (as head of the line by the
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

/// The head's part of a value: its kept watches, and whether one of its takes is in its
/// head turn (one at a time; the others wait for the role, no lock held meanwhile).
#[derive(Default)]
struct Head {
    busy: bool,
    watches: HeadWatches,
}

/// A locking work queue (see the [module docs](self)).
///
/// `Send + Sync` and cheap to clone: clones are one value (one cached listing, one set of
/// [`stats`](Self::stats)), as threads sharing a `&WorkQueue` are. Give each worker its
/// own value ([`new`](Self::new)) to get per-worker stats; threads or tasks sharing a
/// value are separate consumers in the waiting line all the same.
#[derive(Clone)]
pub struct WorkQueue {
    client: Client,
    path: String,
    /// Items, receipts and the node options.
    store: ItemStore,
    locks: String,
    waiters: String,
    patience: Patience,
    head: Arc<SharedHead>,
    /// Takes waiting for the head role (one entry per waiting future).
    head_waiters: Arc<Wakers>,
    /// Item names from the last listing not yet tried, in sequence order.
    cache: Arc<Mutex<VecDeque<String>>>,
    /// How far past the first known item a claim may start: grows when claims collide
    /// with other consumers', shrinks when they succeed.
    spread: Arc<AtomicUsize>,
    counters: Arc<Counters>,
    waiting: Arc<AtomicU64>,
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
    /// Boxed: a work item (with its patience) is much larger than the other variants.
    Taken(Box<WorkItem>),
    /// In progress (locked) when looked at.
    Locked,
    /// Completed, or claimed by someone else meanwhile.
    Missed,
    /// Out of attempts: moved to the dead-letter directory (or being moved).
    Buried,
}

/// The head part of a value and its clones: the last one's drop takes its kept watches
/// off.
struct SharedHead {
    head: Mutex<Head>,
    client: Client,
}

impl std::ops::Deref for SharedHead {
    type Target = Mutex<Head>;

    fn deref(&self) -> &Mutex<Head> {
        &self.head
    }
}

impl Drop for SharedHead {
    fn drop(&mut self) {
        // Take the kept head watches off locally, so they do not stay registered until
        // the queue next changes.
        let head = &mut self.head.get_mut().watches;
        for watch in [head.items.take(), head.locks.take()].into_iter().flatten() {
            withdraw_watch(&self.client.session().zk, &watch);
        }
    }
}

/// One call's view of the queue: the session it runs on, pinned for the whole call (on
/// a managed client a later session never takes over a call half-way).
struct OnSession<'a> {
    queue: &'a WorkQueue,
    zk: ZooKeeper,
}

impl std::ops::Deref for OnSession<'_> {
    type Target = WorkQueue;

    fn deref(&self) -> &WorkQueue {
        self.queue
    }
}

impl WorkQueue {
    /// The view for a call starting now (see [`OnSession`]).
    fn on_session(&self) -> OnSession<'_> {
        OnSession {
            queue: self,
            zk: self.client.session().zk,
        }
    }

    /// The work queue at `path`. Its nodes are created when first needed, with the
    /// [`NodeOptions`] given to [`with_node_options`](Self::with_node_options).
    ///
    /// `client`: a plain handle or a managed client. On a managed client each call runs
    /// on the session current when it starts, and an item it claims belongs to that
    /// session (its claim ends with it; the item is then free for others).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<WorkQueue> {
        check_base_path(path)?;
        let client = client.into();
        let zk = client.session().zk;
        Ok(WorkQueue {
            client: client.clone(),
            path: path.to_string(),
            store: ItemStore {
                items: format!("{path}/items"),
                receipts: format!("{path}/{RECEIPTS}"),
                receipts_inside: false,
                nodes: NodeOptions::default(),
            },
            locks: format!("{path}/locks"),
            waiters: format!("{path}/waiters"),
            patience: Patience::of(&zk, RetryPolicy::new()),
            head: Arc::new(SharedHead {
                head: Mutex::new(Head::default()),
                client,
            }),
            head_waiters: Arc::default(),
            cache: Arc::default(),
            spread: Arc::default(),
            counters: Arc::default(),
            waiting: Arc::default(),
            dead_letter: None,
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> WorkQueue {
        let policy = self.retry_policy().with_reconnect_timeout(timeout);
        self.with_retry_policy(policy)
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> WorkQueue {
        self.patience = Patience::of(&self.client.session().zk, policy);
        self
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.patience.policy()
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
    /// [`with_dead_letter_path`](Self::with_dead_letter_path) and the module docs.
    pub fn with_dead_letter(self, max_attempts: u32) -> WorkQueue {
        let dir = format!("{}/dead", self.path);
        self.with_dead_letter_path(max_attempts, &dir)
    }

    /// [`with_dead_letter`](Self::with_dead_letter) with the dead-letter directory at
    /// `path` (any path; created when first needed, with the [`NodeOptions`]). Every
    /// consumer of the queue must use the same settings.
    pub fn with_dead_letter_path(mut self, max_attempts: u32, path: &str) -> WorkQueue {
        let max_attempts = i32::try_from(max_attempts.max(1)).unwrap_or(i32::MAX);
        self.dead_letter = Some(DeadLetter {
            max_attempts,
            dir: path.to_string(),
        });
        self
    }

    /// The dead-letter directory, if dead-lettering is on.
    pub fn dead_letter_path(&self) -> Option<&str> {
        self.dead_letter.as_ref().map(|d| d.dir.as_str())
    }

    /// The names of the dead letters now (`<item name>-<seq>`, each holding the item's
    /// data), in the order they were moved; empty if dead-lettering is off.
    pub fn dead_letters(&self) -> Result<Vec<String>> {
        block_on(self.dead_letters_async())
    }

    /// [`dead_letters`](Self::dead_letters), async.
    pub async fn dead_letters_async(&self) -> Result<Vec<String>> {
        let Some(dead) = &self.dead_letter else {
            return Ok(Vec::new());
        };
        let children =
            children_or_none_async(&self.client.session().zk, &dead.dir, self.patience).await?;
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
        block_on(self.put_async(data))
    }

    /// [`put`](Self::put), async. Dropped before it returns, the item may or may not have
    /// been added (never twice); its put receipt is removed in the background.
    pub async fn put_async(&self, data: &[u8]) -> Result<()> {
        if data.len() > MAX_ITEM_LEN {
            return Err(RecipeError::InvalidArgument(
                "work item larger than MAX_ITEM_LEN",
            ));
        }
        self.store
            .put_async(&self.client.session().zk, data, self.patience)
            .await
    }

    /// Adds `items` as one batch, in one round trip: all of them exactly once, in order
    /// and contiguous, or none (with the same guarantees, counter's end included, as
    /// [`Queue::put_all`](crate::queues::queue::Queue::put_all)). Each item is at most
    /// [`MAX_ITEM_LEN`] bytes; an empty batch does nothing.
    pub fn put_all<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        block_on(self.put_all_async(items))
    }

    /// [`put_all`](Self::put_all), async. Dropped before it returns, the batch may or may
    /// not have been added (all or none, never twice); its receipts are removed in the
    /// background.
    pub async fn put_all_async<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let items: Vec<I::Item> = items.into_iter().collect();
        if items.iter().any(|data| data.as_ref().len() > MAX_ITEM_LEN) {
            return Err(RecipeError::InvalidArgument(
                "work item larger than MAX_ITEM_LEN",
            ));
        }
        let items: Vec<&[u8]> = items.iter().map(AsRef::as_ref).collect();
        self.store
            .put_all_async(&self.client.session().zk, &items, "", self.patience)
            .await
    }

    /// Claims the first available item without waiting.
    pub fn try_take(&self) -> Result<Option<WorkItem>> {
        block_on(self.try_take_async())
    }

    /// [`try_take`](Self::try_take), async (see [`take_async`](Self::take_async) on
    /// dropping it).
    pub async fn try_take_async(&self) -> Result<Option<WorkItem>> {
        self.on_session().claim_any(Deadline::never(), false).await
    }

    /// Claims an item, waiting at most `timeout` ([`Timeout::Never`]: as long as it
    /// takes): `Err(Timeout)` if none became available.
    pub fn take(&self, timeout: impl Into<Timeout>) -> Result<WorkItem> {
        block_on(self.take_async(timeout))
    }

    /// [`take`](Self::take), async (the timeout counts from this call); no thread waits
    /// for it. Dropping the future at any point withdraws the take: its place in line
    /// and the watches of a wait in progress; a claim in flight is settled in the
    /// background, an item it took released again (see the [module docs](self#async)).
    /// As after a timed-out take, the head's watches of a wait that has ended stay with
    /// this value for its next take (at most two; they go when the value is dropped).
    pub fn take_async(
        &self,
        timeout: impl Into<Timeout>,
    ) -> impl Future<Output = Result<WorkItem>> + Send + '_ {
        let deadline = timeout.into().deadline();
        async move {
            let on = self.on_session();
            loop {
                if let Some(item) = on.take_until(deadline).await? {
                    return Ok(item);
                }
                if deadline.expired() {
                    return Err(RecipeError::Timeout);
                }
            }
        }
    }

    /// Items in the queue now, in progress or not.
    pub fn len(&self) -> Result<usize> {
        block_on(self.len_async())
    }

    /// [`len`](Self::len), async.
    pub async fn len_async(&self) -> Result<usize> {
        let children =
            children_or_none_async(&self.client.session().zk, &self.store.items, self.patience)
                .await?;
        Ok(split_items(children).0.len())
    }

    /// Whether the queue holds no items now.
    pub fn is_empty(&self) -> Result<bool> {
        block_on(self.is_empty_async())
    }

    /// [`is_empty`](Self::is_empty), async.
    pub async fn is_empty_async(&self) -> Result<bool> {
        self.len_async().await.map(|n| n == 0)
    }

    /// Items being worked on now (locked).
    pub fn in_progress(&self) -> Result<usize> {
        block_on(self.in_progress_async())
    }

    /// [`in_progress`](Self::in_progress), async.
    pub async fn in_progress_async(&self) -> Result<usize> {
        let locks =
            children_or_none_async(&self.client.session().zk, &self.locks, self.patience).await?;
        Ok(locks.len())
    }

    /// Consumers waiting in line now (all values, all processes), from the server.
    pub fn waiters_in_line(&self) -> Result<usize> {
        block_on(self.waiters_in_line_async())
    }

    /// [`waiters_in_line`](Self::waiters_in_line), async.
    pub async fn waiters_in_line_async(&self) -> Result<usize> {
        let waiters =
            children_or_none_async(&self.client.session().zk, &self.waiters, self.patience).await?;
        Ok(waiters.len())
    }

    /// Takes of this value waiting right now on a watch (as head of the line or behind
    /// another waiter; for monitoring and tests).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
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
}
