//! A distributed delayed queue: an item is not delivered before its due time; items are
//! taken earliest due first (FIFO among equal due times). The counterpart of Curator's
//! `DistributedDelayQueue`.
//!
//! # Layout
//! ```text
//! <path>/item-<guid>-d<due, ms since the Unix epoch, 20 digits>-<seq>
//! <path>/receipts/<guid>                  ephemeral put receipts
//! ```
//!
//! # How it works
//! The [queue](crate::queues::queue)'s protocol (exactly-once put through receipts, claim by
//! `get` and versioned `delete`, `sync` before every recovery read, items past the
//! sequence counter's end never delivered), with the due time in each item's name. A
//! take lists the directory (with the queue's shared child watch registered first),
//! claims the earliest item that is due, and if none is due sleeps until the directory
//! changes **or** the earliest item falls due, whichever comes first, then looks again:
//! one listing per change or due time, never a polling loop. A timed-out take leaves no
//! watch behind beyond the one child watch the value keeps armed until it is dropped (as
//! the queue does).
//!
//! # Whose clock
//! Wall clocks, not the server's: the producer computes the due time from its own clock
//! ([`put_after`](DelayedQueue::put_after)) or is given one
//! ([`put_at`](DelayedQueue::put_at)); a consumer compares it with its own clock. With
//! clocks skewed by *s*, an item is delivered up to *s* early or late; keep hosts in
//! NTP sync (ZooKeeper servers' clocks play no part: a node's `ctime` is the leader's
//! clock, which a client cannot read directly). A consumer's clock jumping back delays
//! delivery by the jump; jumping forward delivers early. Due times are in milliseconds.
//!
//! # Guarantees
//! - No item is delivered before its due time by the consumer's clock.
//! - Among due items a take returns the earliest due (then the first put), as far as its
//!   own listing showed.
//! - The queue's put and claim guarantees (exactly-once put on `Ok`, at most one
//!   consumer per item except a delete lost with the connection).
//! - A blocked take wakes no later than (about) the earliest due time it saw, and on
//!   every change of the directory; it sends no request in between.
//!
//! # Non-guarantees
//! - Not delivered *at* the due time: only not before it. Delivery waits for a consumer,
//!   and a take woken at the due time still needs a listing and a claim.
//! - Each take lists the whole directory: O(N) per take for a backlog of N items.
//! - A `len` counts items due or not.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::queues::DelayedQueue;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let retries = DelayedQueue::new(&zk, "/retries")?;
//! retries.put_after(b"retry job 7", Duration::from_secs(30))?;
//! assert_eq!(retries.try_take()?, None); // not due yet
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::lifecycle::Client;
use crate::queues::queue::{now_millis, Order, Queue};
use crate::{NodeOptions, RecipeError, Result, RetryPolicy};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zookeeper_mt::Timeout;

/// A distributed delayed queue (see the [module docs](self)). `Send + Sync` and
/// cheap to clone: clones are one queue value (one listing cache and child watch).
#[derive(Debug, Clone)]
pub struct DelayedQueue {
    queue: Queue,
}

impl DelayedQueue {
    /// The delayed queue at `path` (its nodes are created when first needed).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<DelayedQueue> {
        Ok(DelayedQueue {
            queue: Queue::new(client, path)?.with_order(Order::Delayed),
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> DelayedQueue {
        DelayedQueue {
            queue: self.queue.with_reconnect_timeout(timeout),
        }
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(self, policy: RetryPolicy) -> DelayedQueue {
        DelayedQueue {
            queue: self.queue.with_retry_policy(policy),
        }
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.queue.retry_policy()
    }

    /// ACL and directory kind of the nodes it creates (see [`NodeOptions`]).
    pub fn with_node_options(self, nodes: NodeOptions) -> DelayedQueue {
        DelayedQueue {
            queue: self.queue.with_node_options(nodes),
        }
    }

    /// The queue node's path.
    pub fn path(&self) -> &str {
        self.queue.path()
    }

    /// Enqueues `data`, due `delay` from now by this machine's clock (exactly once on
    /// `Ok`, see [`Queue::put`]). Returns the due time.
    pub fn put_after(&self, data: &[u8], delay: Duration) -> Result<SystemTime> {
        crate::runtime::block_on(self.put_after_async(data, delay))
    }

    /// [`put_after`](Self::put_after), async (see [`Queue::put_async`]).
    pub async fn put_after_async(&self, data: &[u8], delay: Duration) -> Result<SystemTime> {
        let delay = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.put_millis(data, now_millis().saturating_add(delay))
            .await
    }

    /// Enqueues `data`, due at `due` (a time before the Unix epoch is due at once).
    /// Returns the due time, rounded up to the millisecond.
    pub fn put_at(&self, data: &[u8], due: SystemTime) -> Result<SystemTime> {
        crate::runtime::block_on(self.put_at_async(data, due))
    }

    /// [`put_at`](Self::put_at), async (see [`Queue::put_async`]).
    pub async fn put_at_async(&self, data: &[u8], due: SystemTime) -> Result<SystemTime> {
        let since = due.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        // Round up, so the item is never due before `due`.
        let millis = since.as_nanos().div_ceil(1_000_000);
        let millis = u64::try_from(millis)
            .map_err(|_| RecipeError::InvalidArgument("due time too far in the future"))?;
        self.put_millis(data, millis).await
    }

    async fn put_millis(&self, data: &[u8], due: u64) -> Result<SystemTime> {
        let tag = format!("d{due:020}");
        self.queue
            .store()
            .put_with_async(
                &self.queue.session().zk,
                data,
                &tag,
                &[],
                self.queue.patience(),
            )
            .await?;
        Ok(UNIX_EPOCH + Duration::from_millis(due))
    }

    /// Takes the earliest due item without waiting: `None` if there is none now.
    pub fn try_take(&self) -> Result<Option<Vec<u8>>> {
        self.queue.try_take()
    }

    /// Takes the earliest due item, waiting at most `timeout` ([`Timeout::Never`]: as long as it
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

    /// The number of items in the queue now, due or not.
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

    /// Child-watch notifications this value has received (each a wake-up of its
    /// blocked takes; waking at a due time is not counted).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn wakeups(&self) -> u64 {
        self.queue.wakeups()
    }
}
