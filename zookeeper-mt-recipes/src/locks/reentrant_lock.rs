//! A reentrant distributed mutex: the thread that holds it may acquire it again
//! (Curator's `InterProcessMutex` semantics).
//!
//! The owner is the **thread** that acquired the lock through one [`ReentrantLock`]
//! value: a second `acquire` from that thread on that value returns at once and counts
//! one more hold; the lock node is deleted when the last guard is dropped. Other threads
//! (sharing the value or not) and other processes exclude each other through ZooKeeper
//! as with [`Lock`]. Guards are not `Send`: a hold belongs to its thread.
//!
//! # Guarantees
//! Those of [`Lock`] (mutual exclusion across processes while the session lives,
//! fairness, a growing fencing token, loss reporting, no watch left after a timed-out
//! wait, safe ordering at the sequence counter's end), with one node per owner however
//! often it re-acquires. A re-acquisition sends no request.
//!
//! # Non-guarantees
//! - Reentrancy is per value and thread: two `ReentrantLock` values on the same path, or
//!   two threads, do not share holds.
//! - A re-acquisition does not check that the lock is still held: ask the guard
//!   ([`ReentrantGuard::is_lost`]) or write with
//!   [`fenced_multi`](ReentrantGuard::fenced_multi).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::ReentrantLock;
//! use zookeeper_mt::{Timeout, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = ReentrantLock::new(&zk, "/locks/account-7")?;
//! let outer = lock.acquire(Timeout::Never)?;
//! let inner = lock.acquire(Timeout::Never)?; // same thread: no wait, no request
//! assert_eq!(inner.hold_count(), 2);
//! drop(inner);
//! drop(outer); // the last hold deletes the node
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::locks::lock::{Lock, LockGuard, LockLayout, LockLost};
use crate::{NodeOptions, Result};
use parking_lot::Mutex;
use std::fmt;
use std::marker::PhantomData;
use std::thread::{self, ThreadId};
use std::time::Duration;
use zookeeper_mt::{Op, OpResult, Timeout};

/// A reentrant distributed mutex (see the [module docs](self)). `Send + Sync`.
///
/// Not `Clone`, and with no async form: its owner is the calling thread, which an async
/// task is not tied to (share it by reference or in an `Arc` between threads).
pub struct ReentrantLock {
    lock: Lock,
    /// One record per owning thread. Normally at most one: ZooKeeper admits one holder.
    /// But when an owner's node is deleted behind its back (its guard then reports the
    /// loss), another thread of this value can be admitted while the first still has
    /// guards: each keeps its own record, and only its own guards touch it.
    held: Mutex<Vec<Held>>,
}

/// One owner's holds.
struct Held {
    owner: ThreadId,
    count: usize,
    guard: LockGuard,
}

impl fmt::Debug for ReentrantLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantLock")
            .field("path", &self.lock.path())
            .field("owners", &self.held.lock().len())
            .finish()
    }
}

impl ReentrantLock {
    /// A reentrant lock on `path` (lock nodes are its children). No request is sent here.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<ReentrantLock> {
        Ok(ReentrantLock {
            lock: Lock::new(client, path)?,
            held: Mutex::new(Vec::new()),
        })
    }

    /// The node layout ([`LockLayout`]); `Curator` interoperates with Curator's
    /// (equally reentrant) `InterProcessMutex`.
    pub fn with_layout(mut self, layout: LockLayout) -> ReentrantLock {
        self.lock = self.lock.with_layout(layout);
        self
    }

    /// Node ACL, directory kind and sequence limit (see [`Lock::with_node_options`]).
    pub fn with_node_options(mut self, nodes: NodeOptions) -> ReentrantLock {
        self.lock = self.lock.with_node_options(nodes);
        self
    }

    /// Disconnect grace of the guards (see [`Lock::with_disconnect_grace`]).
    pub fn with_disconnect_grace(mut self, grace: Duration) -> ReentrantLock {
        self.lock = self.lock.with_disconnect_grace(grace);
        self
    }

    /// The lock's path.
    pub fn path(&self) -> &str {
        self.lock.path()
    }

    /// Waits at most `timeout` until this thread holds the lock (at once if it already
    /// does; [`Timeout::Never`]: as long as it takes); `Err(Timeout)` if not acquired in
    /// time (nothing is left behind: see [`Lock::acquire`]).
    pub fn acquire(&self, timeout: impl Into<Timeout>) -> Result<ReentrantGuard<'_>> {
        if let Some(guard) = self.reenter() {
            return Ok(guard);
        }
        let guard = self.lock.acquire(timeout)?;
        Ok(self.enter(guard))
    }

    /// Takes the lock if this thread holds it or it is free now.
    pub fn try_acquire(&self) -> Result<Option<ReentrantGuard<'_>>> {
        if let Some(guard) = self.reenter() {
            return Ok(Some(guard));
        }
        Ok(self.lock.try_acquire()?.map(|guard| self.enter(guard)))
    }

    /// How many holds the calling thread has (0 if it does not hold the lock).
    pub fn hold_count(&self) -> usize {
        self.holds_of(thread::current().id())
    }

    fn holds_of(&self, owner: ThreadId) -> usize {
        self.held
            .lock()
            .iter()
            .find(|held| held.owner == owner)
            .map_or(0, |held| held.count)
    }

    /// One more hold if this thread holds the lock already.
    fn reenter(&self) -> Option<ReentrantGuard<'_>> {
        let owner = thread::current().id();
        let mut held = self.held.lock();
        let held = held.iter_mut().find(|held| held.owner == owner)?;
        held.count += 1;
        Some(ReentrantGuard {
            lock: self,
            owner,
            not_send: PhantomData,
        })
    }

    /// The first hold of this thread, with the guard just acquired.
    fn enter(&self, guard: LockGuard) -> ReentrantGuard<'_> {
        let owner = thread::current().id();
        self.held.lock().push(Held {
            owner,
            count: 1,
            guard,
        });
        ReentrantGuard {
            lock: self,
            owner,
            not_send: PhantomData,
        }
    }

    /// Runs `f` on the lock guard of `owner`'s hold.
    fn with_guard<T>(&self, owner: ThreadId, f: impl FnOnce(&LockGuard) -> T) -> T {
        let held = self.held.lock();
        let held = held
            .iter()
            .find(|held| held.owner == owner)
            .expect("a live ReentrantGuard has its owner's hold");
        f(&held.guard)
    }
}

/// One hold of a [`ReentrantLock`]; dropping the last hold releases the lock. Not
/// `Send`: holds belong to the thread that took them.
pub struct ReentrantGuard<'a> {
    lock: &'a ReentrantLock,
    /// The thread whose hold this is (guards are not `Send`, so it is also the thread
    /// that drops it).
    owner: ThreadId,
    not_send: PhantomData<*const ()>,
}

impl fmt::Debug for ReentrantGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantGuard")
            .field("path", &self.lock.path())
            .field("holds", &self.hold_count())
            .finish()
    }
}

impl ReentrantGuard<'_> {
    /// How many holds the owner has (this one included).
    pub fn hold_count(&self) -> usize {
        self.lock.holds_of(self.owner)
    }

    /// The lock node's path.
    pub fn node(&self) -> String {
        self.lock.with_guard(self.owner, |g| g.node().to_string())
    }

    /// The fencing token (see [`LockGuard::fencing_token`]); the same for every hold.
    pub fn fencing_token(&self) -> i64 {
        self.lock.with_guard(self.owner, LockGuard::fencing_token)
    }

    /// Whether the lock is known to be lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lock was lost, if known (see [`LockGuard::lost_reason`]).
    pub fn lost_reason(&self) -> Option<LockLost> {
        self.lock.with_guard(self.owner, LockGuard::lost_reason)
    }

    /// Writes applied only while the lock is held (see [`LockGuard::fenced_multi`]).
    pub fn fenced_multi(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        // The multi waits for the server: do it outside the hold's mutex.
        let (zk, node, lost) = self.lock.with_guard(self.owner, |g| {
            (g.client().clone(), g.node().to_string(), g.lost_reason())
        });
        if let Some(reason) = lost {
            return Err(crate::RecipeError::Lost(LossReason::Lock(reason)));
        }
        crate::locks::fenced::fenced_multi(&zk, &[&node], ops)
    }
}

impl ReentrantGuard<'_> {
    /// Gives up this hold. The last hold releases the lock and waits for the delete, as
    /// [`LockGuard::release`] does (a drop sends the delete without waiting for it);
    /// an earlier hold only counts down and returns `Ok(())`.
    pub fn release(mut self) -> Result<()> {
        let last = self.take_hold();
        std::mem::forget(self);
        match last {
            Some(held) => held.guard.release(),
            None => Ok(()),
        }
    }

    /// Counts this hold down; the owner's entry once this was its last hold.
    fn take_hold(&mut self) -> Option<Held> {
        let mut held = self.lock.held.lock();
        let index = held.iter().position(|held| held.owner == self.owner);
        match index {
            Some(index) if held[index].count > 1 => {
                held[index].count -= 1;
                None
            }
            Some(index) => Some(held.swap_remove(index)),
            None => None,
        }
    }
}

impl Drop for ReentrantGuard<'_> {
    fn drop(&mut self) {
        // Outside the mutex: the release sends the delete.
        drop(self.take_hold());
    }
}
