//! Shared values: counters kept in one znode and changed by versioned compare-and-set,
//! in the layouts Apache Curator and kazoo use, so a Rust service can read and change
//! the same counter as Java and Python services.
//!
//! Beside them, [`IdGenerator`] ([`id_generator`]): unique ids from a counter node.
//!
//! | type | layout of the node's data | same node as |
//! |---|---|---|
//! | [`SharedCount`] | a 4-byte big-endian `i32` | Curator `SharedCount`; kazoo `Counter(support_curator=True)` |
//! | [`AtomicLong`] | an 8-byte big-endian `i64` | Curator `DistributedAtomicLong` (its optimistic mode) |
//! | [`KazooCounter`] | the value as decimal ASCII text (`repr(int)`) | kazoo `Counter` |
//!
//! Empty data reads as 0 in every layout (as Curator's `DistributedAtomicLong` and
//! kazoo's `Counter` read it; a node made by `ensure_path` is empty). Any other data that
//! is not the layout (3 bytes for a `SharedCount`, `"12.5"` for a `KazooCounter`) is
//! [`RecipeError::Corrupt`], never a panic. A missing node is created (with its parents,
//! using the [`NodeOptions`]) holding the initial value: the seed for a `SharedCount`
//! (as Curator's `SharedCount.start`), 0 for an `AtomicLong`, empty data for a
//! `KazooCounter` (as kazoo's `ensure_path`); also when it is deleted later.
//!
//! Each type works on a plain handle or a
//! [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper): there, each call runs on
//! the session of the moment it starts (a call under way when its session expires fails
//! with `SessionExpired`, its outcome unknown), and a [`ValueWatch`] carries on in each
//! new session.
//!
//! Every call that waits for the server has an async form of the same name with
//! `_async` (`add_async`, `get_async`, `watch_async`, [`ValueWatch::next_async`], ...),
//! for any executor: no thread waits for it. The blocking call drives that same future
//! on the caller's thread. Dropping a future before it completes is like a timeout: a
//! change already sent may have been applied once, or not at all.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::shared::{AtomicLong, SharedCount};
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let count = SharedCount::new(&zk, "/app/workers", 0)?;
//! let seen = count.get()?;
//! if count.try_set(seen.value + 1, seen.version)? {
//!     println!("moved {} -> {}", seen.value, seen.value + 1);
//! }
//! let mut changes = count.watch()?;
//! let latest = changes.next(Duration::from_secs(1))?; // the current value, at once
//! println!("now {} (version {})", latest.value, latest.version);
//!
//! let hits = AtomicLong::new(&zk, "/app/hits")?;
//! let change = hits.increment()?;
//! assert!(change.succeeded && change.post == change.pre + 1);
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - Every change is a conditional write at the version it was computed from, so with
//!   any number of writers using versioned writes (this module, Curator's `SharedCount`
//!   and `DistributedAtomicLong`, kazoo's `Counter`) no change is lost: an `add` that
//!   returns `Ok` was applied exactly once, on top of every change before it.
//! - A lost reply is resolved, not guessed: after reconnecting, the recipe `sync`s and
//!   re-reads. Still at the version it wrote against: the write did not apply, and the
//!   identical conditional write is sent again (at most one of the two can apply). One
//!   version further with other data: another writer won, the change is computed again.
//!   Anything else (one version further with the very data we wrote, which another
//!   writer may have written too, or later versions): the outcome cannot be known and
//!   the call fails with `ZooKeeper(ConnectionLoss)`, never counting a change twice or
//!   claiming one that did not happen.
//! - Never a conditional write with expected version -1 (ZOOKEEPER-4743: `setData` with
//!   version -1 means "any version"; a node's data version is a signed 32-bit counter
//!   that reaches -1 after 2^32 - 1 writes, wrapping through negative values). At that
//!   version the recipe writes `setData(any version)` and `check(version 0)` in one
//!   `multi`: the check sees the version the set produced, which is 0 only if the node
//!   was still at -1, so the pair applies exactly when a conditional write at -1 would.
//! - Arithmetic is checked: a change that would overflow the layout's integer fails with
//!   `InvalidArgument` and writes nothing (Curator and kazoo wrap or grow silently).
//! - [`ValueWatch`] always ends on the latest value: a slow reader gets the newest value
//!   at each call (older ones it missed are skipped), and once writes stop the last value
//!   it receives is the node's final value.
//!
//! # Non-guarantees
//! - Writers that do not use versioned writes (Curator's `setCount` / `forceSet`, a plain
//!   `set`, including [`SharedCount::set`]) can overwrite changes made concurrently.
//! - Fairness: under contention a change retries until its deadline; a busy writer may
//!   win many times in a row.
//! - A timeout or `ConnectionLoss` from a change leaves its outcome unknown: it may have
//!   been applied once, or not at all.
//! - A version-only check cannot tell a deleted and re-created node from the original
//!   if the new node reaches the same version (as with any ZooKeeper CAS).
//! - [`ValueWatch`] does not deliver every intermediate value, and does not report a
//!   deletion (the node's re-creation, with its initial value, is reported).

mod cas;
mod cell;
mod counters;
pub mod id_generator;
mod layout;
mod watching;

use cas::*;
use cell::*;
pub use counters::*;
pub use id_generator::{IdGenerator, IdStats};
use layout::*;
pub use watching::*;

use crate::caches::config_watch::{first_read, follow, NodeReader, ReadFuture};
use crate::error::LossReason;
use crate::lifecycle::following::Following;
use crate::lifecycle::Client;
use crate::runtime::{block_on, sleep_for, spawn, until, Task};
use crate::support::{
    check_base_path, reconnected, retry_async, Deadline, DeadlineExt, Patience, SeqDir,
};
use crate::{NodeOptions, RecipeError, Result, RetryPolicy};
use parking_lot::Mutex;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{CreateMode, Error, Op, OpResult, Stat, Timeout, Watch, ZooKeeper};

/// Default time one call may take, retries on conflicts and connection loss included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A value with the `Stat` of the node it was read from (or written to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value.
    pub value: T,
    /// The node's data version: pass it to a `try_set` to change exactly this value.
    pub version: i32,
    /// The node's full `Stat` (`mzxid` orders values; `czxid` tells a re-created node).
    pub stat: Stat,
}

/// What a change did: whether it applied, and the values before and after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicValue<T> {
    /// Whether the change was written. `false` when its condition did not hold (another
    /// version, another value); then `pre` is the value found and `post == pre`.
    pub succeeded: bool,
    /// The value the change was computed from.
    pub pre: T,
    /// The value written (or `pre` if nothing was).
    pub post: T,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_send_and_sync() {
        fn both<T: Send + Sync>() {}
        both::<SharedCount>();
        both::<AtomicLong>();
        both::<KazooCounter>();
        both::<ValueWatch<i64>>();
    }

    /// The async forms can be spawned on any executor (never called: only the types
    /// are checked).
    #[allow(dead_code)]
    fn async_forms_are_send(
        count: &SharedCount,
        long: &AtomicLong,
        kazoo: &KazooCounter,
        watch: &mut ValueWatch<i64>,
    ) {
        fn send<T: Send>(_: T) {}
        send(count.get_async());
        send(count.count_async());
        send(count.try_set_async(1, 0));
        send(count.set_async(1));
        send(count.add_async(1));
        send(count.watch_async());
        send(long.get_async());
        send(long.get_versioned_async());
        send(long.increment_async());
        send(long.decrement_async());
        send(long.add_async(1));
        send(long.subtract_async(1));
        send(long.compare_and_set_async(0, 1));
        send(long.try_set_async(1));
        send(long.force_set_async(1));
        send(long.watch_async());
        send(kazoo.value_async());
        send(kazoo.add_async(1));
        send(kazoo.subtract_async(1));
        send(kazoo.watch_async());
        send(watch.next_async(Duration::from_secs(1)));
    }

    #[test]
    fn never_a_conditional_write_at_version_minus_one() {
        // ZOOKEEPER-4743: setData(version -1) is unconditional.
        assert_eq!(
            cas_request(-1),
            CasRequest::SetThenCheck { version_after: 0 }
        );
        for version in [0, 1, 41, i32::MAX, i32::MIN, -2] {
            assert_eq!(cas_request(version), CasRequest::Set { version });
        }
        // Every request it makes carries a real condition.
        for version in [-1, 0, i32::MAX, i32::MIN, -2] {
            match cas_request(version) {
                CasRequest::Set { version } => assert_ne!(version, -1),
                CasRequest::SetThenCheck { version_after } => assert_ne!(version_after, -1),
            }
        }
    }

    #[test]
    fn lost_replies_are_resolved_or_reported_unknown() {
        const OURS: &[u8] = &[0, 0, 0, 5];
        const OTHER: &[u8] = &[0, 0, 0, 6];
        // resolve() for a write of OURS against `expected` of node 7, finding `data` at
        // `version` of node `czxid`.
        let after = |expected: i32, data: &[u8], version: i32, czxid: i64| {
            let stat = Stat {
                version,
                czxid,
                ..Stat::default()
            };
            resolve(expected, OURS, Some((data, &stat)), Some(7))
        };
        assert_eq!(after(3, OTHER, 3, 7), Resolution::NotYet);
        assert_eq!(after(3, OTHER, 4, 7), Resolution::Superseded);
        // One further with our very data: ours, or an identical write by another.
        assert_eq!(after(3, OURS, 4, 7), Resolution::Unknown);
        assert_eq!(after(3, OTHER, 5, 7), Resolution::Unknown);
        assert_eq!(resolve(3, OURS, None, Some(7)), Resolution::Unknown);
        // Without a known creation, a matching version is taken as the same node.
        let stat = Stat {
            version: 3,
            czxid: 9,
            ..Stat::default()
        };
        assert_eq!(
            resolve(3, OURS, Some((OTHER, &stat)), None),
            Resolution::NotYet
        );
        // Re-created node.
        assert_eq!(after(3, OTHER, 3, 9), Resolution::Unknown);
        // Across the wrap: -1 is followed by 0, i32::MAX by i32::MIN.
        assert_eq!(after(-1, OTHER, 0, 7), Resolution::Superseded);
        assert_eq!(after(i32::MAX, OTHER, i32::MIN, 7), Resolution::Superseded);
    }

    #[test]
    fn layouts_round_trip_and_reject_other_data() {
        for v in [0, 1, -1, i32::MAX, i32::MIN, 123_456] {
            assert_eq!(Int32Be::decode(&Int32Be::encode(v)), Some(v));
        }
        assert_eq!(Int32Be::encode(10), vec![0, 0, 0, 10]);
        assert_eq!(Int32Be::encode(-2), vec![0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(Int32Be::decode(b""), Some(0));
        assert_eq!(Int32Be::decode(&[0, 0, 1]), None);
        assert_eq!(Int32Be::decode(&[0; 8]), None);

        for v in [0, 1, -1, i64::MAX, i64::MIN] {
            assert_eq!(Int64Be::decode(&Int64Be::encode(v)), Some(v));
        }
        assert_eq!(Int64Be::encode(9), vec![0, 0, 0, 0, 0, 0, 0, 9]);
        assert_eq!(Int64Be::decode(b""), Some(0));
        assert_eq!(Int64Be::decode(&[0; 4]), None);
        assert_eq!(Int64Be::decode(&[0; 9]), None);

        for v in [0, 7, -7, i64::MAX, i64::MIN] {
            assert_eq!(DecimalText::decode(&DecimalText::encode(v)), Some(v));
        }
        assert_eq!(DecimalText::encode(-12), b"-12".to_vec());
        assert_eq!(DecimalText::decode(b""), Some(0));
        assert_eq!(DecimalText::decode(b" +5\n"), Some(5));
        for bad in [
            &b"12.5"[..],
            b"0x10",
            b"1 2",
            b"-",
            b"+",
            b" ",
            b"\xff",
            b"99999999999999999999",
        ] {
            assert_eq!(DecimalText::decode(bad), None, "{bad:?}");
        }
        assert_eq!(Int32Be::checked_add(i32::MAX, 1), None);
        assert_eq!(DecimalText::checked_add(i64::MIN, -1), None);
    }
}
