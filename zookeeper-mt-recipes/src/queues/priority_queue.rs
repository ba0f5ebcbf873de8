//! A distributed priority queue: items are taken in priority order (smaller number
//! first), FIFO within a priority. The counterpart of Curator's
//! `DistributedPriorityQueue` and of kazoo's `Queue`/`LockingQueue` `priority` argument
//! (both: a smaller number is taken first).
//!
//! # Layout
//! ```text
//! <path>/item-<guid>-p<priority, 10 digits>-<seq>   one persistent sequential node per item
//! <path>/receipts/<guid>                             ephemeral put receipts
//! ```
//! The priority is in the item's *name*, so a consumer orders a whole listing without
//! reading any item; the sequence suffix orders items of equal priority.
//!
//! # How it works
//! The [queue](crate::queues::queue)'s protocol, unchanged except for the order: the same put
//! (item and receipt in one `multi`, exactly once on `Ok` across connection loss), the
//! same claim (`get`, then `delete` at the read version; a lost delete resolved after a
//! `sync`), the same blocking take (a child watch registered before the listing it acts
//! on, one per value, shared by its threads), the same handling of the sequence
//! counter's end (items numbered at or past
//! [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) never take part; the put restarts an
//! empty directory or fails with `SequenceExhausted`). Where the FIFO queue claims from a
//! cached listing across takes, every take here lists the directory again, so an item
//! put with a higher priority since the last take is not passed over.
//!
//! # Guarantees
//! - A take returns an item of the smallest priority number among the items its listing
//!   saw (the listing is made during that take), and among those the one put first (by
//!   the server's sequence number). A take that loses its first choice to another
//!   consumer takes the next in that order.
//! - Everything the [queue](crate::queues::queue) guarantees about puts and claims: exactly-once
//!   put on `Ok`, at most one consumer per item except a delete lost with the
//!   connection (then at-least-once), no item lost at a take's deadline.
//!
//! # Non-guarantees
//! - No strict global priority order among competing consumers: an item put after a
//!   consumer listed is seen by its next take, not by the one in progress.
//! - Each take lists the whole directory (about 60 bytes per item): a backlog of N items
//!   costs O(N) per take, where the FIFO queue costs O(1) per take.
//! - Starvation: a steady stream of high-priority items starves lower ones (as in
//!   Curator and kazoo).
//! - Items written by a plain [`Queue`] on the same path have no priority tag and count
//!   as priority 0. Use one kind of queue per path.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::queues::PriorityQueue;
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let jobs = PriorityQueue::new(&zk, "/jobs")?;
//! jobs.put(b"batch report", 100)?;
//! jobs.put(b"page the on-call", 0)?;
//! assert_eq!(jobs.take(Timeout::Never)?, b"page the on-call");
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::lifecycle::Client;
use crate::queues::queue::{Order, Queue};
use crate::{NodeOptions, Result, RetryPolicy};
use std::time::Duration;
use zookeeper_mt::Timeout;

/// A distributed priority queue (see the [module docs](self)). `Send + Sync` and
/// cheap to clone: clones are one queue value (one listing cache and child watch).
#[derive(Debug, Clone)]
pub struct PriorityQueue {
    queue: Queue,
}

impl PriorityQueue {
    /// The priority queue at `path` (its nodes are created when first needed).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<PriorityQueue> {
        Ok(PriorityQueue {
            queue: Queue::new(client, path)?.with_order(Order::Priority),
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> PriorityQueue {
        PriorityQueue {
            queue: self.queue.with_reconnect_timeout(timeout),
        }
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(self, policy: RetryPolicy) -> PriorityQueue {
        PriorityQueue {
            queue: self.queue.with_retry_policy(policy),
        }
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.queue.retry_policy()
    }

    /// ACL and directory kind of the nodes it creates (see [`NodeOptions`]).
    pub fn with_node_options(self, nodes: NodeOptions) -> PriorityQueue {
        PriorityQueue {
            queue: self.queue.with_node_options(nodes),
        }
    }

    /// The queue node's path.
    pub fn path(&self) -> &str {
        self.queue.path()
    }

    /// Enqueues `data` with `priority` (smaller is taken first), exactly once on `Ok`,
    /// also across connection loss (see [`Queue::put`]).
    pub fn put(&self, data: &[u8], priority: u32) -> Result<()> {
        crate::runtime::block_on(self.put_async(data, priority))
    }

    /// [`put`](Self::put), async (see [`Queue::put_async`]).
    pub async fn put_async(&self, data: &[u8], priority: u32) -> Result<()> {
        let tag = format!("p{priority:010}");
        let store = self.queue.store();
        store
            .put_with_async(
                &self.queue.session().zk,
                data,
                &tag,
                &[],
                self.queue.patience(),
            )
            .await
            .map(drop)
    }

    /// Enqueues `items`, all with `priority`, as one batch in one round trip: exactly
    /// once, all or nothing, and in the order given among themselves (see
    /// [`Queue::put_all`]). Items of equal priority are taken in put order, so the batch
    /// stays contiguous within its priority.
    pub fn put_all<I>(&self, items: I, priority: u32) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let tag = format!("p{priority:010}");
        let queue = &self.queue;
        queue
            .store()
            .put_all(&queue.session().zk, items, &tag, queue.patience())
    }

    /// [`put_all`](Self::put_all), async (see [`Queue::put_all_async`]).
    pub async fn put_all_async<I>(&self, items: I, priority: u32) -> Result<()>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let tag = format!("p{priority:010}");
        let owned: Vec<I::Item> = items.into_iter().collect();
        let items: Vec<&[u8]> = owned.iter().map(AsRef::as_ref).collect();
        let queue = &self.queue;
        queue
            .store()
            .put_all_async(&queue.session().zk, &items, &tag, queue.patience())
            .await
    }

    /// Takes the item first in priority order without waiting: `None` if there is none now.
    pub fn try_take(&self) -> Result<Option<Vec<u8>>> {
        self.queue.try_take()
    }

    /// Takes the item first in priority order, waiting at most `timeout` ([`Timeout::Never`]: as long as it
    /// takes): `Err(Timeout)` if none came (see [`Queue::take`]).
    pub fn take(&self, timeout: impl Into<Timeout>) -> Result<Vec<u8>> {
        self.queue.take(timeout)
    }

    /// [`try_take`](Self::try_take), async: the queue's own future (see
    /// [`Queue::try_take_async`]); a take dropped with its claim in flight puts the item
    /// back.
    pub async fn try_take_async(&self) -> Result<Option<Vec<u8>>> {
        self.queue.try_take_async().await
    }

    /// [`take`](Self::take), async (see [`Queue::take_async`]): dropped while waiting it
    /// leaves nothing behind; dropped with its claim in flight it puts the item back.
    pub async fn take_async(&self, timeout: impl Into<Timeout>) -> Result<Vec<u8>> {
        self.queue.take_async(timeout).await
    }

    /// The number of items in the queue now.
    pub fn len(&self) -> Result<usize> {
        self.queue.len()
    }

    /// [`len`](Self::len), async.
    pub async fn len_async(&self) -> Result<usize> {
        self.queue.len_async().await
    }

    /// Threads blocked in `take` on this value right now (for monitoring
    /// and tests).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// Whether the queue is empty now.
    pub fn is_empty(&self) -> Result<bool> {
        self.queue.is_empty()
    }

    /// [`is_empty`](Self::is_empty), async.
    pub async fn is_empty_async(&self) -> Result<bool> {
        self.queue.is_empty_async().await
    }
}
