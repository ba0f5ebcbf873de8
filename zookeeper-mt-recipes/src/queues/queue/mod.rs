//! A distributed FIFO queue (the classic ZooKeeper queue recipe), with a
//! blocking take that cannot miss a wake-up and an enqueue that survives connection loss
//! without duplicating items.
//!
//! # Layout
//! ```text
//! <path>/item-<guid>-<seq>   one persistent sequential node per item, data = the item
//! <path>/receipts/<guid>     ephemeral put receipt, only while a put is being confirmed
//! <path>/receipts/took-<claim>-<item>
//!                            ephemeral take marker, only while a take is being confirmed
//!                            (`<claim>`: a fresh guid per claim attempt)
//! ```
//!
//! # How it works
//! - [`put`](Queue::put) runs one `multi`: create the item (persistent sequential, named
//!   with a fresh guid) **and** an ephemeral receipt named by the same guid. If the reply
//!   is lost (`CONNECTIONLOSS`), the receipt answers "was it applied?" after reconnecting
//!   (and a `sync`), even if a consumer already took the item (the weakness of the plain
//!   "look for my guid among the children" check the classic recipe uses). The receipt is
//!   deleted right after (pipelined, so a put costs one round trip).
//! - [`put_all`](Queue::put_all) puts a batch the same way in one `multi`: every item with
//!   its own receipt, so the batch is applied all or nothing, its items numbered
//!   consecutively (contiguous, in the order given), for one round trip after an `exists`
//!   that checks the counter has room for the whole batch.
//! - Consumers list the children, order them by sequence suffix, and claim the first by
//!   `get`, then one `multi` deleting the item and creating an ephemeral take marker
//!   named by a fresh guid of that one claim and the item (never by the consumer: two
//!   takes of one `Queue` value may claim the same item at once, and the marker must tell
//!   them apart); a `NoNode` means another consumer won that item,
//!   so they move on to the next cached name, and list again only when the cached list
//!   is used up. The marker answers "was my take applied?" after a lost reply; it is
//!   deleted right after (without waiting for the answer).
//! - [`take`](Queue::take) registers a child watch *before* the listing it decides on, and
//!   sleeps on a condition variable until that watch fires: a Condition-variable pattern,
//!   without its lost wake-up. One child watch at a time per `Queue` value serves every
//!   thread blocked in it (no watch per call, so nothing leaks when takes time out); no
//!   lock is held while that watch is registered, so a thread riding out a lost
//!   connection there holds up no other thread past its own deadline.
//! - Nodes are created when first needed, with the ACL and directory kind of
//!   [`with_node_options`](Queue::with_node_options); a missing queue or receipts node
//!   (an empty container the server removed, or a restarted counter) is recreated.
//!
//! # Async
//! [`Queue::take_async`] and [`Queue::try_take_async`] are the take protocol itself, as
//! async code; [`take`](Queue::take) drives the same future on the caller's thread, and
//! every caller waiting on one `Queue` value shares its one child watch. A pending async
//! take costs no thread. Dropping it before it claimed an item leaves nothing behind (the
//! shared watch goes to the next waiter). Dropped while its claim (the `multi`) is in
//! flight, the claim is settled in the background: if it took the item, the item is put
//! back at the tail (with its ordering tag), on a new session made like the taking one
//! if that session ended or its handle was closed meanwhile, so it is never lost. A
//! claim that ends with an error not telling whether it applied (`Closed`: the handle
//! was closed with it in flight) is settled the same way, for a take not dropped too
//! (which returns the error): put back if it is gone from the queue.
//!
//! # The end of the sequence counter
//! Sequence numbers are the queue node's signed 32-bit child counter; near its end the
//! 3.8 server repeats 2147483647 and wraps to negative numbers, where order by number
//! breaks. Items numbered at or past [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or
//! negative) never take part: consumers neither deliver nor count them. The `put` that
//! created one removes it (before its receipt) and restarts the counter by deleting the
//! queue and receipts nodes in one multi, which the server applies only if both are
//! empty, then puts again. If the queue is not empty the put fails with
//! [`SequenceExhausted`](crate::RecipeError::SequenceExhausted), enqueuing nothing; it
//! does not wait, since consumers may never come. Restarting is safe because no item
//! can be in the queue at that moment: nothing acknowledged is reordered or lost. An
//! item past the end whose receipt is gone belongs to a put whose session ended before
//! it could remove it (that put never returned `Ok`); consumers remove such orphans.
//! A queue node that is a container restarts by itself once it empties.
//!
//! # Guarantees
//! - FIFO by server sequence number: items are handed out in enqueue order (the order
//!   the server applied the puts). With several consumers, *delivery* follows that order,
//!   processing of course may not.
//! - An item is delivered to at most one consumer. A consumer whose connection drops
//!   during its take reconnects, `sync`s and looks: the item still there means its take
//!   did not apply; its own take marker (that claim's) there means it did; neither means another
//!   consumer took the item, which is then not returned here. The one exception: if the
//!   outcome cannot be learnt (the reconnect timeout of the queue's
//!   [`RetryPolicy`] passed, or the session ended and its
//!   marker with it), the item is returned (at least once rather than lost). Use
//!   [`WorkQueue`](crate::queues::work_queue::WorkQueue) when items must be acknowledged after
//!   processing.
//! - An item whose take this consumer sent is never lost: after a lost reply the
//!   consumer reconnects (within the reconnect timeout, even past a `take`
//!   deadline) and looks as above; the item is either still in the queue (then the take
//!   goes on, or leaves it there at its deadline) or returned.
//! - `put` returning `Ok` means the item is in the queue exactly once, also when the
//!   connection dropped mid-put (the receipt check). A `put` that fails with
//!   `SessionExpired` or a connection loss that outlasts the reconnect timeout may or may
//!   not have enqueued the item (never twice).
//! - A blocked `take` wakes for every change after it last listed the queue.
//! - With [`NodeOptions`] carrying an ACL, clients without the credentials can neither
//!   read, add nor remove items.
//!
//! # Non-guarantees
//! - No priorities, no peeking without taking, no bound on the queue length (see the
//!   variants [`priority_queue`](crate::queues::priority_queue),
//!   [`bounded_queue`](crate::queues::bounded_queue) and [`delayed_queue`](crate::queues::delayed_queue),
//!   which share this protocol).
//! - A consumer that takes an item and crashes loses it (it was deleted); see
//!   [`WorkQueue`](crate::queues::work_queue::WorkQueue).
//! - Every blocked consumer holds a child watch on the queue node, so each put wakes all
//!   blocked consumers (one per `Queue` value); the work queue avoids that herd.
//! - At the counter's end, puts fail with `SequenceExhausted` until the queue has been
//!   empty once (see above).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::{queues::Queue, OptionalExtension};
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let queue = Queue::new(&zk, "/myfirstqueue")?;
//! queue.put(b"queue item 1")?;
//! queue.put(b"queue item 2")?;
//! assert_eq!(queue.try_take()?.as_deref(), Some(&b"queue item 1"[..]));
//! assert_eq!(queue.take(Timeout::Never)?, b"queue item 2");
//! assert_eq!(queue.take(Duration::from_millis(100)).optional()?, None);
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

mod batch;
mod child_watcher;
mod claim;
mod items;
mod settle;

use child_watcher::*;
use claim::Claimed;
pub(crate) use items::*;

use crate::lifecycle::{Client, ManagedSession};
use crate::nodes::guid;
use crate::recovery::{children_or_none_async, name_in_range, Restart};
use crate::runtime::block_on;
use crate::support::{
    check_base_path, check_event, ensure_dir_async, members, reconnected, retry_async, Deadline,
    Patience,
};
use crate::{NodeOptions, RecipeError, Result, RetryPolicy};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{
    CreateMode, Error, Op, OpResult, Timeout, Version, Watch, WatchedEvent, ZooKeeper,
};

/// Name prefix of item nodes (followed by a guid, a dash and the sequence suffix).
pub(crate) const ITEM_PREFIX: &str = "item";
/// Child holding the put receipts.
pub(crate) const RECEIPTS: &str = "receipts";
/// How many times one put may find its item past the counter's end and restart the
/// directory before it gives up with `SequenceExhausted` (a restarted directory hands out
/// small numbers again, so a second rejection means peers keep it busy).
const PUT_RESTARTS: usize = 3;

// ---------------------------------------------------------------------------------------
// The queue.
// ---------------------------------------------------------------------------------------

/// A distributed FIFO queue on ZooKeeper (see the [module docs](self) for the protocol,
/// guarantees and non-guarantees).
///
/// `Queue` is `Send + Sync` and cheap to clone: clones are one queue value (they share
/// its cached listing and its one child watch, as threads sharing a `&Queue` do), so a
/// task can own a clone and call the `*_async` forms on it.
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt_recipes::queues::Queue;
/// use zookeeper_mt::{Timeout, ZooKeeper};
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let jobs = Queue::new(&zk, "/jobs")?;
/// std::thread::scope(|s| {
///     s.spawn(|| jobs.take(Timeout::Never)); // blocks until the put below
///     jobs.put(b"job 1").unwrap();
/// });
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
#[derive(Clone)]
pub struct Queue {
    client: Client,
    path: String,
    store: ItemStore,
    patience: Patience,
    /// Which items a take hands out first (the variants reorder the same items).
    order: Order,
    /// Item names from the last listing not yet tried, in sequence order.
    cache: Arc<Mutex<VecDeque<String>>>,
    watcher: Arc<SharedWatcher>,
}

/// The child watch of a queue value and its clones: the last one's drop disarms it.
struct SharedWatcher {
    watcher: ChildWatcher,
    client: Client,
}

impl std::ops::Deref for SharedWatcher {
    type Target = ChildWatcher;

    fn deref(&self) -> &ChildWatcher {
        &self.watcher
    }
}

impl Drop for SharedWatcher {
    fn drop(&mut self) {
        self.watcher.disarm(&self.client.session().zk);
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("path", &self.path).finish()
    }
}

/// How a queue orders its items. The variants keep the queue's item protocol and only
/// put an ordering tag into the item names (see [`tag_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// By sequence number.
    Fifo,
    /// By the tag `p<priority>` (smaller first), then by sequence number.
    Priority,
    /// Only items whose tag `d<due, ms since the Unix epoch>` has passed on this
    /// consumer's clock, earliest due first, then by sequence number.
    Delayed,
}

/// The ordering key of an item name for `order` (items without a tag: 0, first).
pub(crate) fn order_key(order: Order, name: &str) -> u64 {
    let tagged = |prefix: char| {
        tag_of(name)
            .and_then(|tag| tag.strip_prefix(prefix))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    match order {
        Order::Fifo => 0,
        Order::Priority => tagged('p'),
        Order::Delayed => tagged('d'),
    }
}

/// Milliseconds since the Unix epoch on this machine's wall clock.
pub(crate) fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The earlier of `deadline` and `after` from now.
fn earlier(deadline: Deadline, after: Duration) -> Deadline {
    match deadline.remaining() {
        Some(left) if left <= after => deadline,
        _ => Deadline::after(after),
    }
}

impl Queue {
    /// The queue at `path`. Its nodes are created when first needed, with the
    /// [`NodeOptions`] given to [`with_node_options`](Self::with_node_options).
    ///
    /// `client`: a plain handle or a managed client. On a managed client each call runs
    /// on the session current when it starts (a call caught by the session's expiry
    /// fails with `SessionExpired`; the next call uses the new session).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<Queue> {
        check_base_path(path)?;
        let client = client.into();
        let zk = client.session().zk;
        Ok(Queue {
            client: client.clone(),
            path: path.to_string(),
            store: ItemStore {
                items: path.to_string(),
                receipts: format!("{path}/{RECEIPTS}"),
                receipts_inside: true,
                nodes: NodeOptions::default(),
            },
            patience: Patience::of(&zk, RetryPolicy::new()),
            order: Order::Fifo,
            cache: Arc::default(),
            watcher: Arc::new(SharedWatcher {
                watcher: ChildWatcher::new(path),
                client,
            }),
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> Queue {
        let policy = self.retry_policy().with_reconnect_timeout(timeout);
        self.with_retry_policy(policy)
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Queue {
        self.patience = Patience::of(&self.client.session().zk, policy);
        self
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.patience.policy()
    }

    /// The ACL of every node the queue creates (queue node, receipts node, items,
    /// receipts) and whether the queue and receipts nodes are containers (removed by the
    /// server once empty, recreated on the next put). Default: open ACL, persistent.
    ///
    /// Called on a value that has clones, it makes a value of its own (its own listing
    /// and child watch); the clones keep theirs.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> Queue {
        if let Some(shared) = Arc::get_mut(&mut self.watcher) {
            shared.watcher.nodes = nodes.clone();
        } else {
            let mut watcher = ChildWatcher::new(&self.path);
            watcher.nodes = nodes.clone();
            self.watcher = Arc::new(SharedWatcher {
                watcher,
                client: self.client.clone(),
            });
            self.cache = Arc::default();
        }
        self.store.nodes = nodes;
        self
    }

    /// The queue node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Enqueues `data` (at most [`zookeeper_mt::MAX_DATA_LEN`] bytes). Survives connection
    /// loss without duplicating the item (see the module docs). At the end of the queue
    /// node's sequence counter it restarts the counter if the queue is empty, and fails
    /// with [`RecipeError::SequenceExhausted`] (enqueuing nothing) if it is not.
    pub fn put(&self, data: &[u8]) -> Result<()> {
        block_on(self.put_async(data))
    }

    /// [`put`](Self::put), async. Dropped before it returns, the item may or may not
    /// have been enqueued (as after a reply lost for good), never twice.
    pub async fn put_async(&self, data: &[u8]) -> Result<()> {
        let zk = self.client.session().zk;
        self.store.put_async(&zk, data, self.patience).await
    }

    /// Enqueues `items` as one batch: one `multi` creating every item with its own
    /// receipt, so the batch costs one round trip (plus one `exists` that checks the
    /// sequence counter has room for all of it) instead of one per item.
    ///
    /// On `Ok`, every item is in the queue exactly once (also when the connection
    /// dropped mid-put: the receipts tell), in the order given and contiguous: no other
    /// producer's item lies between them, and consumers take them in that order. The
    /// batch is applied all or nothing: an error before it was applied (an item above
    /// [`zookeeper_mt::MAX_DATA_LEN`], a batch above the server's request limit, which
    /// fails with `DataTooLarge`, no permission) enqueues none of it. A `SessionExpired`,
    /// or a connection loss outlasting the reconnect timeout, may have enqueued all of it
    /// or none (never part, never twice). An empty batch does nothing.
    ///
    /// At the counter's end, a batch that would reach the limit is not sent: the counter
    /// is restarted if the queue is empty; if not, the put fails with
    /// [`RecipeError::SequenceExhausted`], enqueuing nothing. Only when other producers
    /// advance the counter by more than 65,536 between that check and the multi can a
    /// batch cross the limit: its items past the end are then put again one by one
    /// (after a restart if the queue has emptied), and if that fails the error is
    /// [`RecipeError::PartlyEnqueued`], saying how many items from the start are in the
    /// queue.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use zookeeper_mt_recipes::queues::Queue;
    /// use zookeeper_mt::ZooKeeper;
    ///
    /// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
    /// let queue = Queue::new(&zk, "/jobs")?;
    /// queue.put_all([&b"job 1"[..], b"job 2", b"job 3"])?;
    /// assert_eq!(queue.len()?, 3);
    /// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
    /// ```
    pub fn put_all<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.store
            .put_all(&self.client.session().zk, items, "", self.patience)
    }

    /// [`put_all`](Self::put_all), async. Dropped before it returns, the batch may or may
    /// not have been enqueued (all or none, never twice); no receipt is left behind.
    pub async fn put_all_async<I>(&self, items: I) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let owned: Vec<I::Item> = items.into_iter().collect();
        let items: Vec<&[u8]> = owned.iter().map(AsRef::as_ref).collect();
        let zk = self.client.session().zk;
        self.store
            .put_all_async(&zk, &items, "", self.patience)
            .await
    }

    /// A queue handing out items in `order` (for the variants).
    pub(crate) fn with_order(mut self, order: Order) -> Queue {
        self.order = order;
        self
    }

    /// The item protocol of this queue (for the variants).
    pub(crate) fn store(&self) -> &ItemStore {
        &self.store
    }

    /// The current session, for a call to run on (for the variants).
    pub(crate) fn session(&self) -> ManagedSession {
        self.client.session()
    }

    /// The reconnect patience (for the variants).
    pub(crate) fn patience(&self) -> Patience {
        self.patience
    }

    /// Lists the items directory with this value's shared child watch armed no later
    /// than the listing; pass the epoch to [`wait_change`](Self::wait_change).
    pub(crate) async fn watched_listing(
        &self,
        session: &ManagedSession,
        deadline: Deadline,
    ) -> Result<(Vec<String>, u64)> {
        let patience = self.patience.before(deadline);
        self.watcher.list_async(session, patience, deadline).await
    }

    /// Waits until the directory changed after the listing of `epoch` (`Ok(true)`) or
    /// `deadline` passes (`Ok(false)`).
    pub(crate) async fn wait_change(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        self.watcher.wait_change_async(epoch, deadline).await
    }

    /// Forgets the cached listing unless the order is plain FIFO: a priority or delayed
    /// take decides on a listing of its own, so an item put since (a higher priority, an
    /// earlier due time) is not passed over.
    fn fresh_listing_for_order(&self) {
        if self.order != Order::Fifo {
            self.cache.lock().clear();
        }
    }

    /// Takes the head item without waiting: `None` if the queue is empty.
    pub fn try_take(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.try_take_named()?.map(|(_, data)| data))
    }

    /// Async [`try_take`](Self::try_take) (see [`take_async`](Self::take_async) on
    /// dropping it).
    pub async fn try_take_async(&self) -> Result<Option<Vec<u8>>> {
        Ok(self.try_take_named_async().await?.map(|(_, data)| data))
    }

    /// [`try_take`](Self::try_take), with the item's name.
    pub(crate) fn try_take_named(&self) -> Result<Option<(String, Vec<u8>)>> {
        block_on(self.try_take_named_async())
    }

    /// [`try_take_named`](Self::try_take_named), async.
    pub(crate) async fn try_take_named_async(&self) -> Result<Option<(String, Vec<u8>)>> {
        self.fresh_listing_for_order();
        let session = self.client.session();
        let zk = &session.zk;
        loop {
            if let Some(item) = self.claim_cached(zk, Deadline::never()).await? {
                return Ok(Some(item));
            }
            let children = children_or_none_async(zk, &self.path, self.patience).await?;
            let (items, _) = self.ready(zk, children).await;
            if items.is_empty() {
                return Ok(None);
            }
            *self.cache.lock() = items.into();
        }
    }

    /// Takes the head item, waiting at most `timeout` ([`Timeout::Never`]: as long as it
    /// takes): `Err(Timeout)` if none came. An item whose delete was sent before the
    /// deadline is returned even if confirming it takes longer (see the module docs).
    pub fn take(&self, timeout: impl Into<Timeout>) -> Result<Vec<u8>> {
        self.take_named(timeout.into()).map(|(_, data)| data)
    }

    /// Async [`take`](Self::take): no thread waits for it. Dropping the future before it
    /// claimed an item leaves nothing behind (the shared child watch goes to the next
    /// waiter). Dropped while its claim is in flight, the claim is settled in the
    /// background: an item it took is put back at the tail (with its ordering tag), so
    /// it is not lost while the session lives.
    pub async fn take_async(&self, timeout: impl Into<Timeout>) -> Result<Vec<u8>> {
        let taken = self.take_named_async(timeout.into()).await?;
        Ok(taken.1)
    }

    /// [`take`](Self::take), with the item's name.
    pub(crate) fn take_named(&self, timeout: Timeout) -> Result<(String, Vec<u8>)> {
        block_on(self.take_named_async(timeout))
    }

    /// [`take_named`](Self::take_named), async.
    pub(crate) async fn take_named_async(&self, timeout: Timeout) -> Result<(String, Vec<u8>)> {
        let deadline = timeout.deadline();
        let session = self.client.session();
        loop {
            if let Some(item) = self.take_until(&session, deadline).await? {
                return Ok(item);
            }
            if deadline.expired() {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// The number of items in the queue now.
    pub fn len(&self) -> Result<usize> {
        block_on(self.len_async())
    }

    /// [`len`](Self::len), async.
    pub async fn len_async(&self) -> Result<usize> {
        let zk = self.client.session().zk;
        let children = children_or_none_async(&zk, &self.path, self.patience).await?;
        Ok(split_items(children).0.len())
    }

    /// Whether the queue is empty now.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// [`is_empty`](Self::is_empty), async.
    pub async fn is_empty_async(&self) -> Result<bool> {
        self.len_async().await.map(|n| n == 0)
    }

    /// Child-watch notifications this value has received (each wakes the threads blocked
    /// in `take` on this value).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakeups(&self) -> u64 {
        self.watcher.events()
    }

    /// Threads blocked in `take` on this value right now, waiting for the
    /// queue to change (for monitoring and tests).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn waiting(&self) -> usize {
        self.watcher.waiting() as usize
    }

    /// The items of a listing that may be taken now, in order, after removing orphans
    /// past the counter's end; and for a delayed queue the earliest due time (ms since
    /// the Unix epoch) of the items not due yet.
    async fn ready(&self, zk: &ZooKeeper, children: Vec<String>) -> (Vec<String>, Option<u64>) {
        let (mut items, past_end) = split_items(children);
        self.store.remove_orphans_async(zk, &past_end).await;
        let mut next_due = None;
        if self.order != Order::Fifo {
            // Stable: FIFO (sequence order) among equal keys.
            items.sort_by_key(|name| order_key(self.order, name));
        }
        if self.order == Order::Delayed {
            let now = now_millis();
            if let Some(first_later) = items
                .iter()
                .position(|name| order_key(Order::Delayed, name) > now)
            {
                next_due = Some(order_key(Order::Delayed, &items[first_later]));
                items.truncate(first_later);
            }
        }
        (items, next_due)
    }

    async fn take_until(
        &self,
        session: &ManagedSession,
        deadline: Deadline,
    ) -> Result<Option<(String, Vec<u8>)>> {
        match self.take_inner(session, deadline).await {
            Err(RecipeError::Timeout) if deadline.expired() => Ok(None),
            other => other,
        }
    }

    async fn take_inner(
        &self,
        session: &ManagedSession,
        deadline: Deadline,
    ) -> Result<Option<(String, Vec<u8>)>> {
        let zk = &session.zk;
        self.fresh_listing_for_order();
        loop {
            if let Some(item) = self.claim_cached(zk, deadline).await? {
                return Ok(Some(item));
            }
            // The cached list is used up: list again, with a watch registered first.
            let patience = self.patience.before(deadline);
            let (children, epoch) = self.watcher.list_async(session, patience, deadline).await?;
            let (items, next_due) = self.ready(zk, children).await;
            *self.cache.lock() = items.into();
            if let Some(item) = self.claim_cached(zk, deadline).await? {
                return Ok(Some(item));
            }
            if deadline.expired() {
                return Ok(None);
            }
            // Sleep until the directory changes, or (delayed queue) the earliest item
            // falls due, or the deadline: no polling.
            let wake = match next_due {
                Some(due) => earlier(deadline, Duration::from_millis(due - now_millis().min(due))),
                None => deadline,
            };
            if !self.watcher.wait_change_async(epoch, wake).await? && deadline.expired() {
                return Ok(None);
            }
        }
    }

    /// Tries the cached names in order until one is claimed or the cache is empty.
    async fn claim_cached(
        &self,
        zk: &ZooKeeper,
        deadline: Deadline,
    ) -> Result<Option<(String, Vec<u8>)>> {
        loop {
            let Some(name) = self.cache.lock().pop_front() else {
                return Ok(None);
            };
            loop {
                match self.claim(zk, &name, deadline).await? {
                    Claimed::Taken(data) => return Ok(Some((name, data))),
                    Claimed::Missed => break,
                    Claimed::Again if deadline.expired() => {
                        // Provably still in the queue: leave it for the next take.
                        self.cache.lock().push_front(name);
                        return Ok(None);
                    }
                    Claimed::Again => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
