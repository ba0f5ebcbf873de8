//! A distributed FIFO queue (seed 000: the Python post's `ZooKeeperQueue`), with a
//! blocking take that cannot miss a wake-up and an enqueue that survives connection loss
//! without duplicating items.
//!
//! # Layout
//! ```text
//! <path>/item-<guid>-<seq>   one persistent sequential node per item, data = the item
//! <path>/receipts/<guid>     ephemeral put receipt, only while a put is being confirmed
//! ```
//!
//! # How it works
//! - [`put`](Queue::put) runs one `multi`: create the item (persistent sequential, named
//!   with a fresh guid) **and** an ephemeral receipt named by the same guid. If the reply
//!   is lost (`CONNECTIONLOSS`), the receipt answers "was it applied?" after reconnecting,
//!   even if a consumer already took the item (the weakness of the plain
//!   "look for my guid among the children" check the post describes). The receipt is
//!   deleted right after (pipelined, so a put costs one round trip).
//! - Consumers list the children, order them by sequence suffix, and claim the first by
//!   `get` then `delete`; a `NoNode` means another consumer won that item, so they move on
//!   to the next cached name, and list again only when the cached list is used up.
//! - [`take`](Queue::take) registers a child watch *before* the listing it decides on, and
//!   sleeps on a condition variable until that watch fires: the post's Condition pattern,
//!   without its lost wake-up. One child watch at a time per `Queue` value serves every
//!   thread blocked in it (no watch per call, so nothing leaks when takes time out).
//!
//! # Guarantees
//! - FIFO by server sequence number: items are handed out in enqueue order (the order
//!   the server applied the puts). With several consumers, *delivery* follows that order,
//!   processing of course may not.
//! - An item is delivered to at most one consumer, except in one case: a consumer whose
//!   connection drops during its `delete` and finds the item gone after reconnecting
//!   cannot tell whether its delete or another consumer's won; it returns the item
//!   (at-least-once). Use [`WorkQueue`](crate::work_queue::WorkQueue) when items must be
//!   acknowledged after processing.
//! - `put` returning `Ok` means the item is in the queue exactly once, also when the
//!   connection dropped mid-put (the receipt check). A `put` that fails with
//!   `SessionExpired` or a connection loss that outlasts the reconnect timeout may or may
//!   not have enqueued the item (never twice).
//! - A blocked `take` wakes for every change after it last listed the queue.
//!
//! # Non-guarantees
//! - No priorities, no peeking without taking, no bound on the queue length.
//! - A consumer that takes an item and crashes loses it (it was deleted); see
//!   [`WorkQueue`](crate::work_queue::WorkQueue).
//! - Every blocked consumer holds a child watch on the queue node, so each put wakes all
//!   blocked consumers (one per `Queue` value); the work queue avoids that herd.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::queue::Queue;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let queue = Queue::new(&zk, "/myfirstqueue")?;
//! queue.put(b"queue item 1")?;
//! queue.put(b"queue item 2")?;
//! assert_eq!(queue.get()?.as_deref(), Some(&b"queue item 1"[..]));
//! assert_eq!(queue.take()?, b"queue item 2");
//! assert_eq!(queue.take_timeout(Duration::from_millis(100))?, None);
//! # Ok::<(), recipes::RecipeError>(())
//! ```

use crate::support::{
    await_reconnect, check_base_path, check_event, counted_wait, default_reconnect_timeout,
    members, retry, wait_until, Deadline, Patience,
};
use crate::util::{ensure_path, guid};
use crate::{RecipeError, Result};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use zookeeper::{CreateMode, Error, Op, OpResult, Watch, WatchedEvent, ZooKeeper};

/// Name prefix of item nodes (followed by a guid, a dash and the sequence suffix).
pub(crate) const ITEM_PREFIX: &str = "item";
/// Child holding the put receipts.
pub(crate) const RECEIPTS: &str = "receipts";

// ---------------------------------------------------------------------------------------
// The item protocol, shared with the work queue.
// ---------------------------------------------------------------------------------------

/// The item names among `children` (`item…` with a sequence suffix), ordered by sequence
/// number.
pub(crate) fn sorted_items(children: Vec<String>) -> Vec<String> {
    let items = members(children, &[ITEM_PREFIX]);
    items.into_iter().map(|item| item.name).collect()
}

/// Enqueues `data` as `<items_dir>/item-<guid>-<seq>` with lost-create protection:
/// the item and an ephemeral receipt `<receipts_dir>/<guid>` are created by one multi;
/// after a connection loss the receipt says whether it was applied (it cannot have been
/// consumed: only this session deletes it). Returns the item's path, or an empty string
/// if it was applied but already consumed by the time this put could look.
pub(crate) fn put_item(
    zk: &ZooKeeper,
    items_dir: &str,
    receipts_dir: &str,
    data: &[u8],
    patience: Patience,
) -> Result<String> {
    let id = guid();
    let item_prefix = format!("{items_dir}/{ITEM_PREFIX}-{id}-");
    let receipt = format!("{receipts_dir}/{id}");
    let ops = [
        Op::create(&item_prefix, data, CreateMode::PersistentSequential),
        Op::create(&receipt, b"", CreateMode::Ephemeral),
    ];
    let mut attempt = 0;
    loop {
        match zk.multi(&ops) {
            Ok(results) => {
                // Pipelined: the reply is not awaited (dropping the future does not cancel
                // the request). If it is lost, the receipt stays until the session ends.
                drop(zk.delete_async(&receipt, None));
                return Ok(match results.first() {
                    Some(OpResult::Created(path)) => path.clone(),
                    _ => String::new(),
                });
            }
            Err(error) if error.is_connection_loss() => {
                attempt += 1;
                await_reconnect(zk, patience, attempt)?;
                // Let this server catch up with everything the old connection sent.
                retry(zk, patience, || zk.sync(receipts_dir))?;
                if retry(zk, patience, || zk.exists(&receipt))?.is_some() {
                    let children = retry(zk, patience, || zk.get_children(items_dir))?;
                    let path = children
                        .into_iter()
                        .find(|name| name.contains(&id))
                        .map(|name| format!("{items_dir}/{name}"))
                        .unwrap_or_default();
                    match retry(zk, patience, || zk.delete(&receipt, None)) {
                        Ok(()) | Err(RecipeError::ZooKeeper(Error::NoNode)) => {}
                        Err(e) => return Err(e),
                    }
                    return Ok(path);
                }
                // Not applied: send it again (same guid, so a retry is still recognisable).
            }
            Err(Error::MultiFailed { index: 1, error }) if *error == Error::NodeExists => {
                // Our receipt already exists: an earlier attempt of this very put was
                // applied after all (the check raced it). Nothing to add.
                drop(zk.delete_async(&receipt, None));
                return Ok(String::new());
            }
            Err(error) => return Err(error.into()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// One child watch shared by every thread blocked on the same recipe value.
// ---------------------------------------------------------------------------------------

struct WatchState {
    /// A child watch is registered (possibly being waited on by a thread: `slot` empty).
    armed: bool,
    /// The armed watch, when no thread is waiting on it.
    slot: Option<Watch>,
    /// Bumped each time the armed watch fires.
    epoch: u64,
}

/// One child watch on `path` at a time, shared by every thread of this process waiting
/// on it: a thread lists with [`list`](Self::list), which guarantees a watch registered no
/// later than the listing, and then waits with [`wait_change`](Self::wait_change) for any
/// change after it. One waiting thread receives from the watch; the others sleep on a
/// condition variable; whoever leaves hands the watch to the next. No wake-up can be lost
/// and no watch is registered twice.
struct ChildWatcher {
    path: String,
    state: Mutex<WatchState>,
    changed: Condvar,
    events: AtomicU64,
    waiting: AtomicU64,
}

impl ChildWatcher {
    fn new(path: &str) -> ChildWatcher {
        ChildWatcher {
            path: path.to_string(),
            state: Mutex::new(WatchState {
                armed: false,
                slot: None,
                epoch: 0,
            }),
            changed: Condvar::new(),
            events: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    /// Threads in `wait_change` now.
    fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Removes the armed watch locally (on drop of its owner), so it does not stay
    /// registered until the next change.
    fn disarm(&self, zk: &ZooKeeper) {
        if let Some(watch) = self.state.lock().slot.take() {
            let _ = zk.remove_watch(&watch, true);
        }
    }

    /// Watch events received so far.
    fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    fn fired(&self, state: &mut WatchState, event: zookeeper::Result<WatchedEvent>) -> Result<()> {
        state.armed = false;
        state.slot = None;
        state.epoch += 1;
        self.changed.notify_all();
        let event = event?;
        self.events.fetch_add(1, Ordering::Relaxed);
        check_event(event).map(drop)
    }

    /// Lists the children; a child watch registered no later than this listing is armed
    /// when it returns. Returns the children and the epoch to pass to `wait_change`.
    fn list(&self, zk: &ZooKeeper, patience: Patience) -> Result<(Vec<String>, u64)> {
        let mut state = self.state.lock();
        if let Some(watch) = &state.slot {
            match watch.try_get() {
                Ok(Some(event)) => self.fired(&mut state, Ok(event))?,
                Ok(None) => {}
                Err(error) => self.fired(&mut state, Err(error))?,
            }
        }
        if state.armed {
            // Still armed and not fired as far as anyone has seen, or being received by a
            // waiting thread, which bumps the epoch when it fires: either way a change
            // after this listing is noticed.
            let epoch = state.epoch;
            drop(state);
            let children = retry(zk, patience, || zk.get_children(&self.path))?;
            return Ok((children, epoch));
        }
        // Arm while holding the lock, so no two threads register a watch at once.
        let (children, watch) = retry(zk, patience, || zk.get_children_watch(&self.path))?;
        state.slot = Some(watch);
        state.armed = true;
        Ok((children, state.epoch))
    }

    /// Waits until the watch armed at `epoch` fires (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`).
    fn wait_change(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        counted_wait(&self.waiting, || self.wait_change_inner(epoch, deadline))
    }

    fn wait_change_inner(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        let mut state = self.state.lock();
        loop {
            if state.epoch != epoch || !state.armed {
                return Ok(true);
            }
            if let Some(watch) = state.slot.take() {
                let result = MutexGuard::unlocked(&mut state, || wait_until(&watch, deadline));
                return match result {
                    Ok(Some(event)) => self.fired(&mut state, Ok(event)).map(|()| true),
                    Ok(None) => {
                        // Timed out: hand the still-armed watch to the next waiter.
                        state.slot = Some(watch);
                        self.changed.notify_all();
                        Ok(false)
                    }
                    Err(error) => self.fired(&mut state, Err(error)).map(|()| true),
                };
            }
            match deadline.instant() {
                None => self.changed.wait(&mut state),
                Some(deadline) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        return Ok(state.epoch != epoch);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The queue.
// ---------------------------------------------------------------------------------------

/// A distributed FIFO queue on ZooKeeper (see the [module docs](self) for the protocol,
/// guarantees and non-guarantees).
///
/// `Queue` is `Send + Sync`: share one value between threads (they share its cached
/// listing and its one child watch) or make one per thread; both are safe.
///
/// ```no_run
/// use std::time::Duration;
/// use recipes::queue::Queue;
/// use zookeeper::ZooKeeper;
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// let jobs = Queue::new(&zk, "/jobs")?;
/// std::thread::scope(|s| {
///     s.spawn(|| jobs.take()); // blocks until the put below
///     jobs.put(b"job 1").unwrap();
/// });
/// # Ok::<(), recipes::RecipeError>(())
/// ```
pub struct Queue {
    zk: ZooKeeper,
    path: String,
    receipts: String,
    patience: Patience,
    /// Item names from the last listing not yet tried, in sequence order.
    cache: Mutex<VecDeque<String>>,
    watcher: ChildWatcher,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("path", &self.path).finish()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.watcher.disarm(&self.zk);
    }
}

impl Queue {
    /// Opens the queue at `path`, creating the node (and its parents) if missing.
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<Queue> {
        check_base_path(path)?;
        let receipts = format!("{path}/{RECEIPTS}");
        ensure_path(zk, &receipts)?;
        Ok(Queue {
            zk: zk.clone(),
            path: path.to_string(),
            receipts,
            patience: Patience::reconnect(default_reconnect_timeout(zk)),
            cache: Mutex::new(VecDeque::new()),
            watcher: ChildWatcher::new(path),
        })
    }

    /// How long an operation waits for a dropped connection to come back before it
    /// fails with `ConnectionLoss` (default: twice the session timeout).
    pub fn with_reconnect_timeout(mut self, timeout: Duration) -> Queue {
        self.patience = Patience::reconnect(timeout);
        self
    }

    /// The queue node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Enqueues `data` (at most [`zookeeper::MAX_DATA_LEN`] bytes). Survives connection
    /// loss without duplicating the item (see the module docs).
    pub fn put(&self, data: &[u8]) -> Result<()> {
        put_item(&self.zk, &self.path, &self.receipts, data, self.patience).map(drop)
    }

    /// Takes the head item without blocking: `None` if the queue is empty.
    pub fn get(&self) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some(data) = self.claim_cached(Deadline::never())? {
                return Ok(Some(data));
            }
            let children = retry(&self.zk, self.patience, || self.zk.get_children(&self.path))?;
            let items = sorted_items(children);
            if items.is_empty() {
                return Ok(None);
            }
            *self.cache.lock() = items.into();
        }
    }

    /// Takes the head item, blocking until there is one.
    pub fn take(&self) -> Result<Vec<u8>> {
        loop {
            if let Some(data) = self.take_until(Deadline::never())? {
                return Ok(data);
            }
        }
    }

    /// Takes the head item, blocking at most `timeout`: `None` if none came.
    pub fn take_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        self.take_until(Deadline::after(timeout))
    }

    /// The number of items in the queue now.
    pub fn len(&self) -> Result<usize> {
        let children = retry(&self.zk, self.patience, || self.zk.get_children(&self.path))?;
        Ok(sorted_items(children).len())
    }

    /// Whether the queue is empty now.
    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// Child-watch notifications this value has received (each wakes the threads blocked
    /// in `take` on this value).
    pub fn wakeups(&self) -> u64 {
        self.watcher.events()
    }

    /// Threads blocked in `take`/`take_timeout` on this value right now, waiting for the
    /// queue to change (for monitoring and tests).
    pub fn waiting(&self) -> usize {
        self.watcher.waiting() as usize
    }

    fn take_until(&self, deadline: Deadline) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some(data) = self.claim_cached(deadline)? {
                return Ok(Some(data));
            }
            // The cached list is used up: list again, with a watch registered first.
            let patience = self.patience.before(deadline);
            let (children, epoch) = self.watcher.list(&self.zk, patience)?;
            *self.cache.lock() = sorted_items(children).into();
            if let Some(data) = self.claim_cached(deadline)? {
                return Ok(Some(data));
            }
            if deadline.expired() {
                return Ok(None);
            }
            if !self.watcher.wait_change(epoch, deadline)? && deadline.expired() {
                return Ok(None);
            }
        }
    }

    /// Tries the cached names in order until one is claimed or the cache is empty.
    fn claim_cached(&self, deadline: Deadline) -> Result<Option<Vec<u8>>> {
        loop {
            let Some(name) = self.cache.lock().pop_front() else {
                return Ok(None);
            };
            if let Some(data) = self.claim(&name, deadline)? {
                return Ok(Some(data));
            }
        }
    }

    /// `get` then `delete` one item; `None` if another consumer took it first.
    fn claim(&self, name: &str, deadline: Deadline) -> Result<Option<Vec<u8>>> {
        let path = format!("{}/{name}", self.path);
        let patience = self.patience.before(deadline);
        let mut attempt = 0;
        loop {
            let (data, stat) = match retry(&self.zk, patience, || self.zk.get(&path)) {
                Ok(found) => found,
                Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(None),
                Err(e) => return Err(e),
            };
            match self.zk.delete(&path, Some(stat.version)) {
                Ok(()) => return Ok(Some(data)),
                Err(Error::NoNode) => return Ok(None),
                Err(Error::BadVersion) => continue, // rewritten meanwhile: read it again
                Err(error) if error.is_connection_loss() => {
                    attempt += 1;
                    await_reconnect(&self.zk, patience, attempt)?;
                    let exists = retry(&self.zk, patience, || self.zk.exists(&path))?;
                    if exists.is_none() {
                        // Our delete or another consumer's: cannot tell; deliver it
                        // (at-least-once, see the module docs).
                        log::debug!("queue: delete of {path} lost with the connection");
                        return Ok(Some(data));
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_sort_by_sequence_not_name() {
        let children = vec![
            "item-ffff-0000000003".to_string(),
            "receipts".to_string(),
            "item-0000-0000000010".to_string(),
            "item-aaaa-0000000001".to_string(),
            "item0000000002".to_string(),
            "other-0000000000".to_string(),
        ];
        assert_eq!(
            sorted_items(children),
            [
                "item-aaaa-0000000001",
                "item0000000002",
                "item-ffff-0000000003",
                "item-0000-0000000010"
            ]
        );
    }
}
