//! Shared values: counters kept in one znode and changed by versioned compare-and-set,
//! in the layouts Apache Curator and kazoo use, so a Rust service can read and change
//! the same counter as Java and Python services.
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
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::shared_value::{AtomicLong, SharedCount};
//! use zookeeper::ZooKeeper;
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
//! # Ok::<(), zookeeper_recipes::RecipeError>(())
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

use crate::error::LossReason;
use crate::support::{
    await_reconnect, check_base_path, check_event, create_if_absent, retry, session_error,
    Deadline, DeadlineExt,
};
use crate::{NodeOptions, RecipeError, Result};
use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use zookeeper::{Error, Op, OpResult, Stat, Timeout, Watch, ZooKeeper};

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

// ---------------------------------------------------------------------------------------
// Layouts.
// ---------------------------------------------------------------------------------------

/// How a value is stored in a node's data.
pub(crate) trait Layout: Send + Sync + 'static {
    type Value: Copy + Eq + fmt::Debug + fmt::Display + Send + Sync + 'static;
    /// Names the layout in `Corrupt` errors.
    const NAME: &'static str;
    fn encode(value: Self::Value) -> Vec<u8>;
    /// `None`: the data is not this layout.
    fn decode(data: &[u8]) -> Option<Self::Value>;
    fn checked_add(value: Self::Value, delta: Self::Value) -> Option<Self::Value>;
}

/// Curator `SharedCount`: `ByteBuffer.putInt`, 4 bytes big-endian.
pub(crate) struct Int32Be;

impl Layout for Int32Be {
    type Value = i32;
    const NAME: &'static str = "a 4-byte big-endian int (Curator SharedCount)";
    fn encode(value: i32) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }
    fn decode(data: &[u8]) -> Option<i32> {
        match data.len() {
            0 => Some(0),
            _ => data.try_into().ok().map(i32::from_be_bytes),
        }
    }
    fn checked_add(value: i32, delta: i32) -> Option<i32> {
        value.checked_add(delta)
    }
}

/// Curator `DistributedAtomicLong`: `ByteBuffer.putLong`, 8 bytes big-endian.
pub(crate) struct Int64Be;

impl Layout for Int64Be {
    type Value = i64;
    const NAME: &'static str = "an 8-byte big-endian long (Curator DistributedAtomicLong)";
    fn encode(value: i64) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }
    fn decode(data: &[u8]) -> Option<i64> {
        match data.len() {
            0 => Some(0),
            _ => data.try_into().ok().map(i64::from_be_bytes),
        }
    }
    fn checked_add(value: i64, delta: i64) -> Option<i64> {
        value.checked_add(delta)
    }
}

/// kazoo `Counter`: `repr(value).encode('ascii')`, read back with `int(data)`.
pub(crate) struct DecimalText;

impl Layout for DecimalText {
    type Value = i64;
    const NAME: &'static str = "an integer as decimal text (kazoo Counter)";
    fn encode(value: i64) -> Vec<u8> {
        value.to_string().into_bytes()
    }
    fn decode(data: &[u8]) -> Option<i64> {
        // What Python's int() accepts of what a writer may have put there: surrounding
        // whitespace and a sign. (int() also takes `_` separators; kazoo never writes
        // them, and a float's text is another layout.)
        let text = std::str::from_utf8(data)
            .ok()?
            .trim_matches(|c: char| c.is_ascii_whitespace());
        if text.is_empty() {
            return if data.is_empty() { Some(0) } else { None };
        }
        let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }
    fn checked_add(value: i64, delta: i64) -> Option<i64> {
        value.checked_add(delta)
    }
}

// ---------------------------------------------------------------------------------------
// The conditional write (ZOOKEEPER-4743).
// ---------------------------------------------------------------------------------------

/// How to write "only if the node is still at the version read".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CasRequest {
    /// `setData` at this version.
    Set {
        /// The expected version (never -1).
        version: i32,
    },
    /// The version read is -1, where `setData(-1)` would be unconditional: one `multi`
    /// of `setData(any version)` and `check(version_after)`, which holds only if the set
    /// moved the node from -1 to `version_after` (0).
    SetThenCheck {
        /// The version the node has after a set from -1.
        version_after: i32,
    },
}

/// The write that is conditional on `read_version` (see [`CasRequest`]).
pub(crate) fn cas_request(read_version: i32) -> CasRequest {
    if read_version == -1 {
        CasRequest::SetThenCheck {
            version_after: read_version.wrapping_add(1),
        }
    } else {
        CasRequest::Set {
            version: read_version,
        }
    }
}

/// What a re-read after a lost reply says about the conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    /// Still at the version written against: not applied (yet). Send it again.
    NotYet,
    /// Another write took the version: ours can never apply. Compute again.
    Superseded,
    /// Ours may or may not have applied.
    Unknown,
}

/// `created`: the `czxid` of the node the write was computed from, if known.
fn resolve(
    expected_version: i32,
    ours: &[u8],
    now: Option<(&[u8], &Stat)>,
    created: Option<i64>,
) -> Resolution {
    let Some((data, stat)) = now else {
        // Deleted: whether ours applied before the delete cannot be told.
        return Resolution::Unknown;
    };
    if created.is_some_and(|czxid| czxid != stat.czxid) {
        // Re-created: our write was against the old node (applied or not).
        return Resolution::Unknown;
    }
    if stat.version == expected_version {
        Resolution::NotYet
    } else if stat.version == expected_version.wrapping_add(1) && data != ours {
        Resolution::Superseded
    } else {
        Resolution::Unknown
    }
}

// ---------------------------------------------------------------------------------------
// The node.
// ---------------------------------------------------------------------------------------

/// `data` as a value of layout `L`, or `Corrupt`.
fn decode<L: Layout>(path: &str, data: &[u8]) -> Result<L::Value> {
    L::decode(data).ok_or_else(|| {
        RecipeError::Corrupt(format!(
            "{path} holds {:?} ({} bytes), not {}",
            String::from_utf8_lossy(data),
            data.len(),
            L::NAME
        ))
    })
}

/// One value node in layout `L` (the body of every type here).
struct Cell<L: Layout> {
    zk: ZooKeeper,
    path: String,
    nodes: NodeOptions,
    /// What a missing node is created with.
    initial: Vec<u8>,
    timeout: Duration,
    layout: PhantomData<L>,
}

impl<L: Layout> fmt::Debug for Cell<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cell")
            .field("path", &self.path)
            .field("layout", &L::NAME)
            .finish()
    }
}

impl<L: Layout> Cell<L> {
    fn new(zk: &ZooKeeper, path: &str, initial: Vec<u8>, nodes: NodeOptions) -> Result<Self> {
        check_base_path(path)?;
        let cell = Cell {
            zk: zk.clone(),
            path: path.to_string(),
            nodes,
            initial,
            timeout: DEFAULT_TIMEOUT,
            layout: PhantomData,
        };
        cell.create(Deadline::after(cell.timeout))?;
        Ok(cell)
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout)
    }

    fn create(&self, deadline: Deadline) -> Result<()> {
        create_if_absent(&self.zk, &self.path, &self.initial, &self.nodes, deadline)
    }

    /// Reads the node (creating it if missing), riding out connection loss.
    fn read_raw(&self, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        loop {
            deadline.check()?;
            match retry(&self.zk, deadline, || self.zk.get(&self.path)) {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(deadline)?,
                other => return other,
            }
        }
    }

    fn read(&self, deadline: Deadline) -> Result<Versioned<L::Value>> {
        let (data, stat) = self.read_raw(deadline)?;
        Ok(Versioned {
            value: decode::<L>(&self.path, &data)?,
            version: stat.version,
            stat,
        })
    }

    /// One conditional write of `data` at `expected_version` (of the node created at
    /// zxid `created`, if known), its lost replies resolved. `Ok(None)`: the condition did
    /// not hold (another write came first, or the node is gone).
    fn cas(
        &self,
        expected_version: i32,
        created: Option<i64>,
        data: &[u8],
        deadline: Deadline,
    ) -> Result<Option<Stat>> {
        // An earlier send of this write lost its reply: a later BadVersion may be our own.
        let mut uncertain = false;
        let mut losses = 0;
        loop {
            deadline.check()?;
            let sent = match cas_request(expected_version) {
                CasRequest::Set { version } => self.zk.set(&self.path, data, Some(version)),
                CasRequest::SetThenCheck { version_after } => self
                    .zk
                    .multi(&[
                        Op::set_data(&self.path, data, -1),
                        Op::check(&self.path, version_after),
                    ])
                    .map_err(|error| match error {
                        Error::MultiFailed { error, .. } => *error,
                        other => other,
                    })
                    .and_then(|results| match results.first() {
                        Some(OpResult::DataSet(stat)) => Ok(*stat),
                        _ => Err(Error::MarshallingError),
                    }),
            };
            match sent {
                Ok(stat) => return Ok(Some(stat)),
                Err(Error::BadVersion | Error::NoNode) if !uncertain => return Ok(None),
                Err(error)
                    if error.is_retryable()
                        || matches!(error, Error::BadVersion | Error::NoNode) =>
                {
                    if error.is_retryable() {
                        uncertain = true;
                        losses += 1;
                        await_reconnect(&self.zk, deadline, losses)?;
                    }
                    // A recovery read: first make the server catch up with the leader,
                    // so a write of ours that did apply is seen.
                    retry(&self.zk, deadline, || self.zk.sync(&self.path))?;
                    let now = match retry(&self.zk, deadline, || self.zk.get(&self.path)) {
                        Ok(read) => Some(read),
                        Err(RecipeError::ZooKeeper(Error::NoNode)) => None,
                        Err(error) => return Err(error),
                    };
                    let now_ref = now.as_ref().map(|(d, s)| (d.as_slice(), s));
                    match resolve(expected_version, data, now_ref, created) {
                        Resolution::NotYet => continue,
                        Resolution::Superseded => return Ok(None),
                        Resolution::Unknown => {
                            log::debug!(
                                "recipes: {}: outcome of a conditional write unknown after a lost reply",
                                self.path
                            );
                            return Err(RecipeError::ZooKeeper(Error::ConnectionLoss));
                        }
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Reads, computes the new value with `change` (`None`: do not write), writes it
    /// conditionally; again on conflict, until the deadline.
    fn update(
        &self,
        mut change: impl FnMut(L::Value) -> Result<Option<L::Value>>,
    ) -> Result<AtomicValue<L::Value>> {
        let deadline = self.deadline();
        let mut conflicts = 0u32;
        loop {
            let seen = self.read(deadline)?;
            let Some(new) = change(seen.value)? else {
                return Ok(AtomicValue {
                    succeeded: false,
                    pre: seen.value,
                    post: seen.value,
                });
            };
            let written = self.cas(
                seen.version,
                Some(seen.stat.czxid),
                &L::encode(new),
                deadline,
            )?;
            if written.is_some() {
                return Ok(AtomicValue {
                    succeeded: true,
                    pre: seen.value,
                    post: new,
                });
            }
            conflicts += 1;
            if conflicts % 8 == 0 {
                // Long losing streak: step back a little so the winners drain.
                std::thread::sleep(Duration::from_micros(200 * u64::from(conflicts.min(64))));
            }
        }
    }

    fn add(&self, delta: L::Value) -> Result<AtomicValue<L::Value>> {
        self.update(|value| {
            L::checked_add(value, delta)
                .map(Some)
                .ok_or(RecipeError::InvalidArgument(
                    "the change overflows the value",
                ))
        })
    }

    /// One conditional write of `new` at `expected_version`, without reading first.
    fn try_set_at(&self, new: L::Value, expected_version: i32) -> Result<bool> {
        let written = self.cas(expected_version, None, &L::encode(new), self.deadline())?;
        Ok(written.is_some())
    }

    fn set(&self, new: L::Value) -> Result<Stat> {
        let deadline = self.deadline();
        let data = L::encode(new);
        loop {
            match retry(&self.zk, deadline, || self.zk.set(&self.path, &data, None)) {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(deadline)?,
                other => return other,
            }
        }
    }

    fn watch(&self) -> Result<ValueWatch<L::Value>> {
        ValueWatch::start::<L>(self)
    }
}

// ---------------------------------------------------------------------------------------
// The public types.
// ---------------------------------------------------------------------------------------

/// A shared `i32` in Curator `SharedCount`'s layout (see the [module docs](self)).
#[derive(Debug)]
pub struct SharedCount(Cell<Int32Be>);

impl SharedCount {
    /// A shared count at `path`, created holding `seed` if missing (as Curator's
    /// `SharedCount.start`).
    pub fn new(zk: &ZooKeeper, path: &str, seed: i32) -> Result<SharedCount> {
        SharedCount::with_options(zk, path, seed, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(
        zk: &ZooKeeper,
        path: &str,
        seed: i32,
        nodes: NodeOptions,
    ) -> Result<SharedCount> {
        Cell::new(zk, path, Int32Be::encode(seed), nodes).map(SharedCount)
    }

    /// Sets how long one call may take (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> SharedCount {
        self.0.timeout = timeout;
        self
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// The current value and its version.
    pub fn get(&self) -> Result<Versioned<i32>> {
        self.0.read(self.0.deadline())
    }

    /// The current value.
    pub fn count(&self) -> Result<i32> {
        Ok(self.get()?.value)
    }

    /// Sets the value to `new` if the node is still at `expected_version` (from
    /// [`get`](Self::get)); `Ok(false)` if it has moved on (Curator's `trySetCount`).
    pub fn try_set(&self, new: i32, expected_version: i32) -> Result<bool> {
        self.0.try_set_at(new, expected_version)
    }

    /// Sets the value whatever it is (Curator's `setCount`): overwrites concurrent
    /// changes.
    pub fn set(&self, new: i32) -> Result<Stat> {
        self.0.set(new)
    }

    /// Adds `delta` (negative to subtract) with a compare-and-set loop.
    pub fn add(&self, delta: i32) -> Result<AtomicValue<i32>> {
        self.0.add(delta)
    }

    /// Follows the value (see [`ValueWatch`]); the first value is the current one.
    pub fn watch(&self) -> Result<ValueWatch<i32>> {
        self.0.watch()
    }
}

/// A shared `i64` in Curator `DistributedAtomicLong`'s layout (see the
/// [module docs](self)); its changes are Curator's optimistic mode (versioned sets),
/// with lost replies resolved.
#[derive(Debug)]
pub struct AtomicLong(Cell<Int64Be>);

impl AtomicLong {
    /// An atomic long at `path`, created holding 0 if missing.
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<AtomicLong> {
        AtomicLong::with_options(zk, path, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(zk: &ZooKeeper, path: &str, nodes: NodeOptions) -> Result<AtomicLong> {
        Cell::new(zk, path, Int64Be::encode(0), nodes).map(AtomicLong)
    }

    /// Sets how long one call may take (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> AtomicLong {
        self.0.timeout = timeout;
        self
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// The current value.
    pub fn get(&self) -> Result<i64> {
        Ok(self.get_versioned()?.value)
    }

    /// The current value and its version.
    pub fn get_versioned(&self) -> Result<Versioned<i64>> {
        self.0.read(self.0.deadline())
    }

    /// Adds 1.
    pub fn increment(&self) -> Result<AtomicValue<i64>> {
        self.0.add(1)
    }

    /// Subtracts 1.
    pub fn decrement(&self) -> Result<AtomicValue<i64>> {
        self.0.add(-1)
    }

    /// Adds `delta` (retrying conflicts until the timeout); `succeeded` is true on `Ok`.
    pub fn add(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(delta)
    }

    /// Subtracts `delta`.
    pub fn subtract(&self, delta: i64) -> Result<AtomicValue<i64>> {
        let negated = delta.checked_neg().ok_or(RecipeError::InvalidArgument(
            "the change overflows the value",
        ))?;
        self.0.add(negated)
    }

    /// Sets `new` if the value is `expected`: `succeeded` false (with `pre` the value
    /// found) if it is not. Version conflicts that leave the value at `expected` are
    /// retried.
    pub fn compare_and_set(&self, expected: i64, new: i64) -> Result<AtomicValue<i64>> {
        self.0
            .update(|value| Ok((value == expected).then_some(new)))
    }

    /// One attempt to set `new` over the value just read: `succeeded` false if another
    /// write came in between (Curator's `trySet`).
    pub fn try_set(&self, new: i64) -> Result<AtomicValue<i64>> {
        let deadline = self.0.deadline();
        let seen = self.0.read(deadline)?;
        let written = self
            .0
            .cas(
                seen.version,
                Some(seen.stat.czxid),
                &Int64Be::encode(new),
                deadline,
            )?
            .is_some();
        Ok(AtomicValue {
            succeeded: written,
            pre: seen.value,
            post: if written { new } else { seen.value },
        })
    }

    /// Sets `new` whatever the value is (Curator's `forceSet`): overwrites concurrent
    /// changes.
    pub fn force_set(&self, new: i64) -> Result<Stat> {
        self.0.set(new)
    }

    /// Follows the value (see [`ValueWatch`]).
    pub fn watch(&self) -> Result<ValueWatch<i64>> {
        self.0.watch()
    }
}

/// A shared `i64` in kazoo `Counter`'s default layout: decimal text (see the
/// [module docs](self)). For kazoo's `support_curator=True` layout use [`SharedCount`].
#[derive(Debug)]
pub struct KazooCounter(Cell<DecimalText>);

impl KazooCounter {
    /// A counter at `path`, created empty (reads as 0) if missing, as kazoo does.
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<KazooCounter> {
        KazooCounter::with_options(zk, path, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(zk: &ZooKeeper, path: &str, nodes: NodeOptions) -> Result<KazooCounter> {
        Cell::new(zk, path, Vec::new(), nodes).map(KazooCounter)
    }

    /// Sets how long one call may take (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> KazooCounter {
        self.0.timeout = timeout;
        self
    }

    /// The node's path.
    pub fn path(&self) -> &str {
        &self.0.path
    }

    /// The current value (kazoo's `counter.value`).
    pub fn value(&self) -> Result<i64> {
        Ok(self.0.read(self.0.deadline())?.value)
    }

    /// Adds `delta` (kazoo's `counter += delta`); `pre` and `post` are kazoo's
    /// `pre_value` and `post_value`.
    pub fn add(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(delta)
    }

    /// Subtracts `delta` (kazoo's `counter -= delta`).
    pub fn subtract(&self, delta: i64) -> Result<AtomicValue<i64>> {
        let negated = delta.checked_neg().ok_or(RecipeError::InvalidArgument(
            "the change overflows the value",
        ))?;
        self.0.add(negated)
    }

    /// Follows the value (see [`ValueWatch`]).
    pub fn watch(&self) -> Result<ValueWatch<i64>> {
        self.0.watch()
    }
}

// ---------------------------------------------------------------------------------------
// Watching.
// ---------------------------------------------------------------------------------------

/// The latest value seen, shared between the follower thread and the reader.
struct Latest<T> {
    state: Mutex<LatestState<T>>,
    changed: Condvar,
}

struct LatestState<T> {
    /// The newest value (or why the newest data could not be read as one).
    value: Option<std::result::Result<Versioned<T>, RecipeError>>,
    /// Bumped on every new value.
    serial: u64,
    /// Why the follower stopped by itself.
    ended: Option<RecipeError>,
}

/// Follows one value node: each call to [`next`](Self::next) returns the newest value
/// not returned yet. A reader that falls behind skips the values it missed but always
/// gets the newest, so once writes stop the last value it receives is the node's final
/// value. Values come in increasing `mzxid` order, never twice.
///
/// A background thread keeps one data watch on the node, re-armed by the read that
/// fetches each new value (no change after a read goes unnoticed). It survives
/// connection loss; it stops when the session ends ([`next`](Self::next) then reports
/// why, after the last value) or when the `ValueWatch` is dropped.
pub struct ValueWatch<T> {
    latest: Arc<Latest<T>>,
    seen: u64,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl<T> fmt::Debug for ValueWatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueWatch")
            .field("seen", &self.seen)
            .finish()
    }
}

impl<T: Clone + Send + 'static> ValueWatch<T> {
    fn start<L: Layout<Value = T>>(cell: &Cell<L>) -> Result<ValueWatch<T>> {
        let latest = Arc::new(Latest {
            state: Mutex::new(LatestState {
                value: None,
                serial: 0,
                ended: None,
            }),
            changed: Condvar::new(),
        });
        let (stop, stop_rx) = crossbeam_channel::bounded(0);
        let mut follower = Follower::<L> {
            zk: cell.zk.clone(),
            path: cell.path.clone(),
            latest: Arc::clone(&latest),
            stop: stop_rx,
            last_mzxid: i64::MIN,
            layout: PhantomData,
        };
        // The first read happens here, so errors (a closed session) are reported now and
        // the current value is there at once.
        let deadline = Deadline::after(cell.timeout);
        let mut attempt = 0;
        let watch = loop {
            match follower.read() {
                Ok(watch) => break watch,
                Err(error) if error.is_retryable() => {
                    attempt += 1;
                    await_reconnect(&cell.zk, deadline, attempt)?;
                }
                Err(error) => return Err(error.into()),
            }
        };
        let thread = std::thread::Builder::new()
            .name(format!("value-watch {}", cell.path))
            .spawn(move || {
                let reason = follower.run(watch);
                let mut state = follower.latest.state.lock();
                state.ended = reason;
                drop(state);
                follower.latest.changed.notify_all();
            })
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ValueWatch {
            latest,
            seen: 0,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Waits at most `timeout` ([`Timeout::Never`]: as long as it takes) for a value
    /// newer than the last one returned (the first call returns the current one at
    /// once). `Err(Timeout)`: nothing new in time. `Err(Corrupt)`: the newest data is not a value of this layout. Once
    /// the watch has stopped by itself and its last value was returned, the reason it
    /// stopped.
    pub fn next(&mut self, timeout: impl Into<Timeout>) -> Result<Versioned<T>> {
        let deadline = timeout.into().deadline();
        let mut state = self.latest.state.lock();
        loop {
            if state.serial > self.seen {
                self.seen = state.serial;
                if let Some(value) = &state.value {
                    return value.clone();
                }
            }
            if let Some(reason) = &state.ended {
                return Err(reason.clone());
            }
            let Some(at) = deadline.instant() else {
                self.latest.changed.wait(&mut state);
                continue;
            };
            if self.latest.changed.wait_until(&mut state, at).timed_out()
                && state.serial == self.seen
                && state.ended.is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// The newest value seen so far, without waiting (and without marking it returned).
    pub fn latest(&self) -> Option<Versioned<T>> {
        match &self.latest.state.lock().value {
            Some(Ok(value)) => Some(value.clone()),
            _ => None,
        }
    }

    /// Whether the background thread still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl<T> Drop for ValueWatch<T> {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread's select.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watch's background side.
struct Follower<L: Layout> {
    zk: ZooKeeper,
    path: String,
    latest: Arc<Latest<L::Value>>,
    stop: Receiver<()>,
    /// `mzxid` of the last value published: only newer ones are.
    last_mzxid: i64,
    layout: PhantomData<L>,
}

impl<L: Layout> Follower<L> {
    /// Reads the node with a new watch and publishes its value if it is new.
    fn read(&mut self) -> zookeeper::Result<Watch> {
        match self.zk.get_watch(&self.path) {
            Ok((data, stat, watch)) => {
                self.publish(&data, stat);
                Ok(watch)
            }
            // Deleted: wait for the re-creation (not reported as a value).
            Err(Error::NoNode) => match self.zk.exists_watch(&self.path)? {
                (None, watch) => Ok(watch),
                // Created in between. An exists watch on a node fires on its next change
                // or deletion, like a data watch: keep it (a dropped one would stay
                // registered until that change) and read the value it guards.
                (Some(_), watch) => match self.zk.get(&self.path) {
                    Ok((data, stat)) => {
                        self.publish(&data, stat);
                        Ok(watch)
                    }
                    // Deleted again: the watch has fired or will; the next read sees it.
                    Err(Error::NoNode) => Ok(watch),
                    Err(error) => {
                        // The value it guards is unknown: take it off and read afresh.
                        if self.zk.remove_watch(&watch).is_err() {
                            let _ = self.zk.remove_watch(&watch);
                        }
                        Err(error)
                    }
                },
            },
            Err(error) => Err(error),
        }
    }

    /// Makes `data` the latest value if it is newer than the last one.
    fn publish(&mut self, data: &[u8], stat: Stat) {
        if stat.mzxid <= self.last_mzxid {
            return;
        }
        self.last_mzxid = stat.mzxid;
        let value = decode::<L>(&self.path, data).map(|value| Versioned {
            value,
            version: stat.version,
            stat,
        });
        let mut state = self.latest.state.lock();
        state.value = Some(value);
        state.serial += 1;
        drop(state);
        self.latest.changed.notify_all();
    }

    /// Waits for changes until stopped (`None`) or the session ends (its error).
    fn run(&mut self, mut watch: Watch) -> Option<RecipeError> {
        loop {
            select! {
                recv(watch.receiver()) -> event => match event.map(check_event) {
                    Ok(Ok(_)) => {}
                    Ok(Err(ended)) => return Some(ended),
                    Err(_) => return Some(RecipeError::ZooKeeper(Error::Closed)),
                },
                recv(self.stop) -> _ => {
                    // Take the watch off, server side too (locally while disconnected),
                    // rather than leave it registered until the node changes.
                    if self.zk.remove_watch(&watch).is_err() {
                        let _ = self.zk.remove_watch(&watch);
                    }
                    return None;
                }
            }
            watch = loop {
                match self.read() {
                    Ok(watch) => break watch,
                    Err(error) if error.is_retryable() => {
                        // Wait for the connection, still obeying a stop request.
                        loop {
                            let state = self.zk.state();
                            if state.is_terminal() {
                                return Some(session_error(state));
                            }
                            if state.is_connected() {
                                break;
                            }
                            select! {
                                recv(self.stop) -> _ => return None,
                                default(Duration::from_millis(50)) => {}
                            }
                        }
                    }
                    Err(error) => return Some(error.into()),
                }
            };
        }
    }
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
