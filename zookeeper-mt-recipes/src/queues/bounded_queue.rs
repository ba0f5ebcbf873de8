//! A bounded distributed FIFO queue: at most `max` items at any time, exactly, whatever
//! the number of concurrent producers. A put into a full queue waits for room
//! ([`put`](BoundedQueue::put), up to its timeout) or reports [`Offer::Full`] at once
//! ([`try_put`](BoundedQueue::try_put)). Curator's counterpart is
//! `QueueBuilder.maxItems`, whose count is not checked atomically with the create (so
//! concurrent producers can pass it together); kazoo has none.
//!
//! # Layout
//! ```text
//! <path>                              the gate: its data version counts puts
//! <path>/items/item-<guid>-<seq>      the items (the queue recipe's layout)
//! <path>/items/receipts/<guid>        ephemeral put receipts
//! ```
//!
//! # How the bound is kept exact
//! ZooKeeper's `multi` can check a node's *data* version but not its child version
//! (`cversion`), so the gate node's data version serialises the puts: a put
//! 1. reads the gate (its version *v*), then lists the items (same session, so the
//!    listing reflects at least every put that bumped the gate up to *v*);
//! 2. if the listing holds `max` items or more, the queue is full: wait for a change of
//!    the items directory (the queue's shared child watch, registered before a second
//!    listing that decides) or give up;
//! 3. otherwise runs one `multi`: create the item and its receipt (the queue's
//!    exactly-once put) **and** `setData(gate, v)`. Any other put applied since step 1
//!    bumped the gate, so this one fails as a whole and starts again at 1.
//!
//! So every applied put was decided on a count that no other put changed; takes only
//! lower the count, so they need not touch the gate. Items created past the sequence
//! counter's end (in transit, removed again by their put) count as items too: the bound
//! is never exceeded, at the price of a put refused for a moment.
//!
//! The gate's version is a signed 32-bit number that wraps; a read version of -1 would
//! make `setData` unconditional (ZOOKEEPER-4743), so a put that reads -1 first bumps
//! the gate once more and reads again. The gate is always a persistent node (never a
//! container, whatever the [`NodeOptions`]): a gate removed and recreated would restart
//! its version and could let a stale count pass.
//!
//! # Guarantees
//! - The items directory never holds more than `max` items (counting items a put has
//!   created and not yet confirmed).
//! - Everything the [queue](crate::queues::queue) guarantees: FIFO by sequence number, put
//!   exactly once on `Ok` (also across connection loss: the receipt, and a lost reply of
//!   a put refused by the gate is simply sent again), no lost wake-up, items past the
//!   counter's end never delivered, no item lost at a take's deadline.
//! - A put blocked on a full queue wakes on every change of the items directory after
//!   it looked (a take in any process).
//!
//! # Non-guarantees
//! - The gate's data is not kept: every put sets it to empty. Do not store anything at
//!   `<path>`.
//! - No fairness among blocked producers: whichever put reaches the gate first wins.
//! - Puts are serialised on the gate: concurrent producers retry (each retry costs two
//!   reads and one multi), so put throughput does not grow with producers.
//! - Items being processed after a take do not count (they left the queue).
//! - Every blocked producer and consumer value holds a child watch on the items
//!   directory, so each change wakes all of them (one per value), as in the queue.
//! - Writers that do not use the gate (a plain [`Queue`] on
//!   `<path>/items`) are not bounded.
//! - An item taken for an async take whose future was dropped is put back without the
//!   gate, at once: it was in the queue, and must not wait outside it for room while
//!   producers fill the slot it freed. The queue may then hold up to `max` plus the
//!   number of such takes for a moment.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::queues::{BoundedQueue, Offer};
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let uploads = BoundedQueue::new(&zk, "/uploads", 2)?;
//! uploads.put(b"a", Timeout::Never)?;
//! uploads.put(b"b", Timeout::Never)?;
//! assert_eq!(uploads.try_put(b"c")?, Offer::Full);
//! assert_eq!(uploads.take(Timeout::Never)?, b"a");
//! assert_eq!(uploads.try_put(b"c")?, Offer::Enqueued);
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::lifecycle::Client;
use crate::queues::queue::{split_items, Queue};
use crate::recovery::children_or_none_async;
use crate::runtime::block_on;
use crate::support::{check_base_path, ensure_dir_async, retry_async, Deadline};
use crate::{NodeOptions, RecipeError, Result, RetryPolicy};
use std::time::Duration;
use zookeeper_mt::{Error, Op, Timeout};

/// What a bounded put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Offer {
    /// The item is in the queue (exactly once).
    Enqueued,
    /// The queue held `max` items until the deadline; nothing was enqueued.
    Full,
}

/// A bounded distributed FIFO queue (see the [module docs](self)). `Send + Sync` and
/// cheap to clone: clones are one queue value (one listing cache and child watch).
#[derive(Debug, Clone)]
pub struct BoundedQueue {
    queue: Queue,
    gate: String,
    max: usize,
    nodes: NodeOptions,
}

impl BoundedQueue {
    /// The bounded queue at `path` holding at most `max` items (every user of the path
    /// must give the same `max`). `max` must be at least 1.
    pub fn new(client: impl Into<Client>, path: &str, max: usize) -> Result<BoundedQueue> {
        check_base_path(path)?;
        if max == 0 {
            return Err(RecipeError::InvalidArgument(
                "a bounded queue holds at least one item",
            ));
        }
        Ok(BoundedQueue {
            queue: Queue::new(client, &format!("{path}/items"))?,
            gate: path.to_string(),
            max,
            nodes: NodeOptions::default(),
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout). Shorthand for
    /// [`with_retry_policy`](Self::with_retry_policy) with the current policy's
    /// [`with_reconnect_timeout`](RetryPolicy::with_reconnect_timeout).
    pub fn with_reconnect_timeout(self, timeout: Duration) -> BoundedQueue {
        BoundedQueue {
            queue: self.queue.with_reconnect_timeout(timeout),
            ..self
        }
    }

    /// How operations ride out a lost connection: the reconnect timeout and the pauses
    /// between tries of a failed request (see [`RetryPolicy`]; default:
    /// [`RetryPolicy::default()`]).
    pub fn with_retry_policy(self, policy: RetryPolicy) -> BoundedQueue {
        BoundedQueue {
            queue: self.queue.with_retry_policy(policy),
            ..self
        }
    }

    /// The policy set with [`with_retry_policy`](Self::with_retry_policy) (or
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout)), else the default.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.queue.retry_policy()
    }

    /// ACL of every node it creates and whether the items directories are containers
    /// (the gate `<path>` is always persistent, see the module docs).
    pub fn with_node_options(self, nodes: NodeOptions) -> BoundedQueue {
        BoundedQueue {
            queue: self.queue.with_node_options(nodes.clone()),
            nodes,
            ..self
        }
    }

    /// The queue's base path (the gate).
    pub fn path(&self) -> &str {
        &self.gate
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Enqueues `data`, waiting at most `timeout` for room ([`Timeout::Never`]: as long
    /// as the queue stays full): `Err(Timeout)`, with nothing enqueued, if it stayed full.
    pub fn put(&self, data: &[u8], timeout: impl Into<Timeout>) -> Result<()> {
        block_on(self.put_async(data, timeout))
    }

    /// [`put`](Self::put), async. Dropped before it returns, the item may or may not have
    /// been enqueued (never twice); no receipt is left behind.
    pub async fn put_async(&self, data: &[u8], timeout: impl Into<Timeout>) -> Result<()> {
        let deadline = timeout.into().deadline();
        loop {
            match self.put_until(data, deadline).await? {
                Offer::Enqueued => return Ok(()),
                Offer::Full if deadline.expired() => return Err(RecipeError::Timeout),
                Offer::Full => {}
            }
        }
    }

    /// Enqueues `data` if there is room now, else [`Offer::Full`] at once.
    pub fn try_put(&self, data: &[u8]) -> Result<Offer> {
        block_on(self.try_put_async(data))
    }

    /// [`try_put`](Self::try_put), async.
    pub async fn try_put_async(&self, data: &[u8]) -> Result<Offer> {
        self.put_until(data, Deadline::after(Duration::ZERO)).await
    }

    async fn put_until(&self, data: &[u8], deadline: Deadline) -> Result<Offer> {
        let session = self.queue.session();
        let zk = &session.zk;
        // The deadline bounds the wait for room, not the riding out of a connection
        // loss (as a take's deadline does not bound confirming a claimed item).
        let patience = self.queue.patience();
        let store = self.queue.store();
        loop {
            let version = match retry_async(zk, patience, || zk.exists_async(&self.gate)).await? {
                None => {
                    let gate_nodes = self.nodes.clone().container_dirs(false);
                    ensure_dir_async(zk, &self.gate, &gate_nodes, patience).await?;
                    continue;
                }
                Some(stat) if stat.version == -1 => {
                    // -1 would be "any version": bump past it and read again.
                    let bumped =
                        retry_async(zk, patience, || zk.set_async(&self.gate, b"", None)).await;
                    match bumped {
                        Ok(_) | Err(RecipeError::ZooKeeper(Error::BadVersion)) => continue,
                        Err(error) => return Err(error),
                    }
                }
                Some(stat) => stat.version,
            };
            // Listed after the gate was read: every put up to `version` is in it.
            let children = children_or_none_async(zk, &store.items, patience).await?;
            if self.count(children) >= self.max {
                if deadline.expired() {
                    return Ok(Offer::Full);
                }
                // Full: watch (registered before the listing that decides) and wait.
                let (children, epoch) = match self.queue.watched_listing(&session, deadline).await {
                    Err(RecipeError::Timeout) if deadline.expired() => return Ok(Offer::Full),
                    other => other?,
                };
                if self.count(children) >= self.max
                    && !self.queue.wait_change(epoch, deadline).await?
                    && deadline.expired()
                {
                    return Ok(Offer::Full);
                }
                continue;
            }
            let guard = [Op::set_data(&self.gate, b"", version)];
            if store.put_with_async(zk, data, "", &guard, patience).await? {
                return Ok(Offer::Enqueued);
            }
            // Another put passed the gate first: count again.
        }
    }

    /// Items counted against the bound: every item node, including those numbered past
    /// the counter's end (a put in progress removes them; until then they count).
    fn count(&self, children: Vec<String>) -> usize {
        let (in_range, past_end) = split_items(children);
        in_range.len() + past_end.len()
    }

    /// Takes the head item without waiting: `None` if there is none now.
    pub fn try_take(&self) -> Result<Option<Vec<u8>>> {
        self.queue.try_take()
    }

    /// Takes the head item, waiting at most `timeout` ([`Timeout::Never`]: as long as it
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
        block_on(self.len_async())
    }

    /// [`len`](Self::len), async.
    pub async fn len_async(&self) -> Result<usize> {
        let (session, queue) = (self.queue.session(), &self.queue);
        let children =
            children_or_none_async(&session.zk, &queue.store().items, queue.patience()).await?;
        Ok(self.count(children))
    }

    /// Threads of this value blocked right now waiting for the items directory to change
    /// (producers on a full queue, consumers on an empty one; for monitoring and tests).
    // For tests and benchmarks: hidden from the docs, not covered by semver.
    #[doc(hidden)]
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }

    /// Whether the queue is empty now.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// [`is_empty`](Self::is_empty), async.
    pub async fn is_empty_async(&self) -> Result<bool> {
        self.len_async().await.map(|n| n == 0)
    }
}
