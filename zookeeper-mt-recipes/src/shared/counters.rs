//! The public types: one value node each, in its layout. Every call is written once, as
//! the `*_async` form; the blocking call drives that future on the caller's thread.

use super::*;

// ---------------------------------------------------------------------------------------
// The public types.
// ---------------------------------------------------------------------------------------

/// A shared `i32` in Curator `SharedCount`'s layout (see the [module docs](super)).
#[derive(Debug, Clone)]
pub struct SharedCount(Cell<Int32Be>);

impl SharedCount {
    /// A shared count at `path` on a plain handle or a managed client (`&zk`,
    /// `&managed`), created holding `seed` if missing (as Curator's `SharedCount.start`).
    pub fn new(client: impl Into<Client>, path: &str, seed: i32) -> Result<SharedCount> {
        SharedCount::with_options(client, path, seed, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(
        client: impl Into<Client>,
        path: &str,
        seed: i32,
        nodes: NodeOptions,
    ) -> Result<SharedCount> {
        Cell::new(client.into(), path, Int32Be::encode(seed), nodes).map(SharedCount)
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
        block_on(self.get_async())
    }

    /// Async [`get`](Self::get).
    pub async fn get_async(&self) -> Result<Versioned<i32>> {
        self.0.read(self.0.deadline()).await
    }

    /// The current value.
    pub fn count(&self) -> Result<i32> {
        block_on(self.count_async())
    }

    /// Async [`count`](Self::count).
    pub async fn count_async(&self) -> Result<i32> {
        Ok(self.get_async().await?.value)
    }

    /// Sets the value to `new` if the node is still at `expected_version` (from
    /// [`get`](Self::get)); `Ok(false)` if it has moved on (Curator's `trySetCount`).
    pub fn try_set(&self, new: i32, expected_version: i32) -> Result<bool> {
        block_on(self.try_set_async(new, expected_version))
    }

    /// Async [`try_set`](Self::try_set).
    pub async fn try_set_async(&self, new: i32, expected_version: i32) -> Result<bool> {
        self.0.try_set_at(new, expected_version).await
    }

    /// Sets the value whatever it is (Curator's `setCount`): overwrites concurrent
    /// changes.
    pub fn set(&self, new: i32) -> Result<Stat> {
        block_on(self.set_async(new))
    }

    /// Async [`set`](Self::set).
    pub async fn set_async(&self, new: i32) -> Result<Stat> {
        self.0.set(new).await
    }

    /// Adds `delta` (negative to subtract) with a compare-and-set loop.
    pub fn add(&self, delta: i32) -> Result<AtomicValue<i32>> {
        block_on(self.add_async(delta))
    }

    /// Async [`add`](Self::add).
    pub async fn add_async(&self, delta: i32) -> Result<AtomicValue<i32>> {
        self.0.add(delta).await
    }

    /// Follows the value (see [`ValueWatch`]); the first value is the current one.
    pub fn watch(&self) -> Result<ValueWatch<i32>> {
        block_on(self.watch_async())
    }

    /// Async [`watch`](Self::watch).
    pub async fn watch_async(&self) -> Result<ValueWatch<i32>> {
        self.0.watch().await
    }
}

/// A shared `i64` in Curator `DistributedAtomicLong`'s layout (see the
/// [module docs](super)); its changes are Curator's optimistic mode (versioned sets),
/// with lost replies resolved.
#[derive(Debug, Clone)]
pub struct AtomicLong(Cell<Int64Be>);

impl AtomicLong {
    /// An atomic long at `path` on a plain handle or a managed client (`&zk`,
    /// `&managed`), created holding 0 if missing.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<AtomicLong> {
        AtomicLong::with_options(client, path, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(
        client: impl Into<Client>,
        path: &str,
        nodes: NodeOptions,
    ) -> Result<AtomicLong> {
        Cell::new(client.into(), path, Int64Be::encode(0), nodes).map(AtomicLong)
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
        block_on(self.get_async())
    }

    /// Async [`get`](Self::get).
    pub async fn get_async(&self) -> Result<i64> {
        Ok(self.get_versioned_async().await?.value)
    }

    /// The current value and its version.
    pub fn get_versioned(&self) -> Result<Versioned<i64>> {
        block_on(self.get_versioned_async())
    }

    /// Async [`get_versioned`](Self::get_versioned).
    pub async fn get_versioned_async(&self) -> Result<Versioned<i64>> {
        self.0.read(self.0.deadline()).await
    }

    /// Adds 1.
    pub fn increment(&self) -> Result<AtomicValue<i64>> {
        block_on(self.increment_async())
    }

    /// Async [`increment`](Self::increment).
    pub async fn increment_async(&self) -> Result<AtomicValue<i64>> {
        self.0.add(1).await
    }

    /// Subtracts 1.
    pub fn decrement(&self) -> Result<AtomicValue<i64>> {
        block_on(self.decrement_async())
    }

    /// Async [`decrement`](Self::decrement).
    pub async fn decrement_async(&self) -> Result<AtomicValue<i64>> {
        self.0.add(-1).await
    }

    /// Adds `delta` (retrying conflicts until the timeout); `succeeded` is true on `Ok`.
    pub fn add(&self, delta: i64) -> Result<AtomicValue<i64>> {
        block_on(self.add_async(delta))
    }

    /// Async [`add`](Self::add).
    pub async fn add_async(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(delta).await
    }

    /// Subtracts `delta`.
    pub fn subtract(&self, delta: i64) -> Result<AtomicValue<i64>> {
        block_on(self.subtract_async(delta))
    }

    /// Async [`subtract`](Self::subtract).
    pub async fn subtract_async(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(negated(delta)?).await
    }

    /// Sets `new` if the value is `expected`: `succeeded` false (with `pre` the value
    /// found) if it is not. Version conflicts that leave the value at `expected` are
    /// retried.
    pub fn compare_and_set(&self, expected: i64, new: i64) -> Result<AtomicValue<i64>> {
        block_on(self.compare_and_set_async(expected, new))
    }

    /// Async [`compare_and_set`](Self::compare_and_set).
    pub async fn compare_and_set_async(&self, expected: i64, new: i64) -> Result<AtomicValue<i64>> {
        self.0
            .update(|value| Ok((value == expected).then_some(new)))
            .await
    }

    /// One attempt to set `new` over the value just read: `succeeded` false if another
    /// write came in between (Curator's `trySet`).
    pub fn try_set(&self, new: i64) -> Result<AtomicValue<i64>> {
        block_on(self.try_set_async(new))
    }

    /// Async [`try_set`](Self::try_set).
    pub async fn try_set_async(&self, new: i64) -> Result<AtomicValue<i64>> {
        self.0.try_set(new).await
    }

    /// Sets `new` whatever the value is (Curator's `forceSet`): overwrites concurrent
    /// changes.
    pub fn force_set(&self, new: i64) -> Result<Stat> {
        block_on(self.force_set_async(new))
    }

    /// Async [`force_set`](Self::force_set).
    pub async fn force_set_async(&self, new: i64) -> Result<Stat> {
        self.0.set(new).await
    }

    /// Follows the value (see [`ValueWatch`]).
    pub fn watch(&self) -> Result<ValueWatch<i64>> {
        block_on(self.watch_async())
    }

    /// Async [`watch`](Self::watch).
    pub async fn watch_async(&self) -> Result<ValueWatch<i64>> {
        self.0.watch().await
    }
}

/// A shared `i64` in kazoo `Counter`'s default layout: decimal text (see the
/// [module docs](super)). For kazoo's `support_curator=True` layout use [`SharedCount`].
#[derive(Debug, Clone)]
pub struct KazooCounter(Cell<DecimalText>);

impl KazooCounter {
    /// A counter at `path` on a plain handle or a managed client (`&zk`, `&managed`),
    /// created empty (reads as 0) if missing, as kazoo does.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<KazooCounter> {
        KazooCounter::with_options(client, path, NodeOptions::default())
    }

    /// [`new`](Self::new), creating nodes with `nodes`' ACL.
    pub fn with_options(
        client: impl Into<Client>,
        path: &str,
        nodes: NodeOptions,
    ) -> Result<KazooCounter> {
        Cell::new(client.into(), path, Vec::new(), nodes).map(KazooCounter)
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
        block_on(self.value_async())
    }

    /// Async [`value`](Self::value).
    pub async fn value_async(&self) -> Result<i64> {
        Ok(self.0.read(self.0.deadline()).await?.value)
    }

    /// Adds `delta` (kazoo's `counter += delta`); `pre` and `post` are kazoo's
    /// `pre_value` and `post_value`.
    pub fn add(&self, delta: i64) -> Result<AtomicValue<i64>> {
        block_on(self.add_async(delta))
    }

    /// Async [`add`](Self::add).
    pub async fn add_async(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(delta).await
    }

    /// Subtracts `delta` (kazoo's `counter -= delta`).
    pub fn subtract(&self, delta: i64) -> Result<AtomicValue<i64>> {
        block_on(self.subtract_async(delta))
    }

    /// Async [`subtract`](Self::subtract).
    pub async fn subtract_async(&self, delta: i64) -> Result<AtomicValue<i64>> {
        self.0.add(negated(delta)?).await
    }

    /// Follows the value (see [`ValueWatch`]).
    pub fn watch(&self) -> Result<ValueWatch<i64>> {
        block_on(self.watch_async())
    }

    /// Async [`watch`](Self::watch).
    pub async fn watch_async(&self) -> Result<ValueWatch<i64>> {
        self.0.watch().await
    }
}

/// `-delta`, or `InvalidArgument` if it overflows.
fn negated(delta: i64) -> Result<i64> {
    delta.checked_neg().ok_or(RecipeError::InvalidArgument(
        "the change overflows the value",
    ))
}
