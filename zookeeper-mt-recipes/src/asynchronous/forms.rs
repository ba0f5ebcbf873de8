//! The async form of each blocking recipe call (see the [module docs](super)).

use std::ops::Range;
use std::time::SystemTime;

use zookeeper_mt::{Stat, Timeout};

use super::{Async, RecipeFuture};
use crate::barriers::{Barrier, DoubleBarrier};
use crate::leadership::election::LeaderElection;
use crate::leadership::leader_latch::{LeaderLatch, LeadershipGuard, Participant};
use crate::lifecycle::Client;
use crate::locks::lease_semaphore::{self, LeaseSemaphore};
use crate::locks::lock::{Lock, LockGuard};
use crate::locks::multi_lock::{MultiGuard, MultiLock};
use crate::locks::read_write_lock::{ReadGuard, ReadWriteLock, WriteGuard};
use crate::locks::semaphore::{self, Semaphore};
use crate::nodes::{Group, GroupMember, PersistentNode};
use crate::queues::bounded_queue::{BoundedQueue, Offer};
use crate::queues::delayed_queue::DelayedQueue;
use crate::queues::priority_queue::PriorityQueue;
use crate::queues::queue::Queue;
use crate::queues::work_queue::{WorkItem, WorkQueue};
use crate::shared::id_generator::IdGenerator;
use crate::shared::{AtomicLong, AtomicValue, KazooCounter, SharedCount, ValueWatch, Versioned};
use crate::{RecipeError, Result};

/// `Async<$recipe>` methods returning the recipe's own `*_async` future on the shared
/// value (no thread waits for it; dropping it withdraws what it started).
macro_rules! native_forms {
    ($recipe:ident { $( fn $name:ident => $native:ident($($arg:ident: $ty:ty),*) -> $ret:ty; )* }) => {
        impl Async<$recipe> {
            $(
                #[doc = concat!("Async form of [`", stringify!($recipe), "::", stringify!($name), "`]: [`", stringify!($recipe), "::", stringify!($native), "`] on the shared value.")]
                pub fn $name(&self, $($arg: $ty),*) -> RecipeFuture<$ret> {
                    let recipe = self.shared();
                    Box::pin(async move { recipe.$native($($arg),*).await })
                }
            )*
        }
    };
}

native_forms!(Lock {
    fn acquire => acquire_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<LockGuard>;
    fn try_acquire => try_acquire_async() -> Result<Option<LockGuard>>;
    fn holder => holder_async() -> Result<Option<String>>;
});

native_forms!(MultiLock {
    fn acquire => acquire_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<MultiGuard>;
    fn try_acquire => try_acquire_async() -> Result<Option<MultiGuard>>;
});

native_forms!(ReadWriteLock {
    fn read => read_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<ReadGuard>;
    fn write => write_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<WriteGuard>;
    fn try_read => try_read_async() -> Result<Option<ReadGuard>>;
    fn try_write => try_write_async() -> Result<Option<WriteGuard>>;
});

native_forms!(Semaphore {
    fn acquire => acquire_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<semaphore::PermitGuard>;
    fn try_acquire => try_acquire_async() -> Result<Option<semaphore::PermitGuard>>;
});

native_forms!(Semaphore {
    fn requests => requests_async() -> Result<usize>;
});

native_forms!(LeaseSemaphore {
    fn acquire => acquire_async(n: u32, timeout: impl Into<Timeout> + Send + 'static) -> Result<Vec<lease_semaphore::LeaseGuard>>;
    fn held => held_async() -> Result<usize>;
});

native_forms!(WorkQueue {
    fn take => take_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<WorkItem>;
    fn try_take => try_take_async() -> Result<Option<WorkItem>>;
    fn len => len_async() -> Result<usize>;
    fn is_empty => is_empty_async() -> Result<bool>;
    fn in_progress => in_progress_async() -> Result<usize>;
    fn waiters_in_line => waiters_in_line_async() -> Result<usize>;
    fn dead_letters => dead_letters_async() -> Result<Vec<String>>;
});

/// A batch's items, owned, for the worker that puts them.
fn owned<I>(items: I) -> Vec<Vec<u8>>
where
    I: IntoIterator,
    I::Item: Into<Vec<u8>>,
{
    items.into_iter().map(Into::into).collect()
}

impl Async<WorkQueue> {
    /// Async form of [`WorkQueue::put`]: [`WorkQueue::put_async`] on the shared value.
    pub fn put(&self, data: impl Into<Vec<u8>>) -> RecipeFuture<Result<()>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_async(&data).await })
    }

    /// Async form of [`WorkQueue::put_all`]: [`WorkQueue::put_all_async`] on the shared
    /// value.
    pub fn put_all<I>(&self, items: I) -> RecipeFuture<Result<()>>
    where
        I: IntoIterator,
        I::Item: Into<Vec<u8>>,
    {
        let (queue, items) = (self.shared(), owned(items));
        Box::pin(async move { queue.put_all_async(items).await })
    }
}

native_forms!(IdGenerator {
    fn next_id => next_id_async() -> Result<u64>;
    fn reserve => reserve_async(n: u64, timeout: impl Into<Timeout> + Send + 'static) -> Result<Range<u64>>;
    fn current => current_async() -> Result<u64>;
});

native_forms!(Barrier {
    fn set => set_async() -> Result<()>;
    fn remove => remove_async() -> Result<()>;
    fn is_set => is_set_async() -> Result<bool>;
    fn wait => wait_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<()>;
});

native_forms!(DoubleBarrier {
    fn enter => enter_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<()>;
    fn leave => leave_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<()>;
});

native_forms!(LeaderElection {
    fn is_leader => is_leader_async() -> Result<bool>;
    fn wait_until_leader => wait_until_leader_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<()>;
    fn leader_data => leader_data_async() -> Result<Option<Vec<u8>>>;
});

impl Async<LeaderElection> {
    /// Async form of [`LeaderElection::new`]: [`LeaderElection::new_async`].
    pub fn new_async(
        client: impl Into<Client>,
        path: &str,
        data: impl Into<Vec<u8>>,
    ) -> RecipeFuture<Result<Self>> {
        let (client, path, data) = (client.into(), path.to_string(), data.into());
        Box::pin(async move {
            LeaderElection::new_async(client, &path, &data)
                .await
                .map(Async::new)
        })
    }

    /// Async form of [`LeaderElection::resign`]: [`LeaderElection::resign_async`]. Needs
    /// the only handle to the election (`InvalidArgument` otherwise, with nothing
    /// resigned).
    pub fn resign(self) -> RecipeFuture<Result<()>> {
        let only = self.into_inner();
        Box::pin(async move {
            match only {
                Some(election) => election.resign_async().await,
                None => Err(RecipeError::InvalidArgument(
                    "resign needs the only handle to the election",
                )),
            }
        })
    }
}

native_forms!(LeaderLatch {
    fn await_leadership => await_leadership_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<LeadershipGuard>;
    fn relinquish => relinquish_async() -> Result<bool>;
    fn participants => participants_async() -> Result<Vec<Participant>>;
});

native_forms!(SharedCount {
    fn get => get_async() -> Result<Versioned<i32>>;
    fn count => count_async() -> Result<i32>;
    fn try_set => try_set_async(new: i32, expected_version: i32) -> Result<bool>;
    fn set => set_async(new: i32) -> Result<Stat>;
    fn add => add_async(delta: i32) -> Result<AtomicValue<i32>>;
    fn watch => watch_async() -> Result<ValueWatch<i32>>;
});

native_forms!(AtomicLong {
    fn get => get_async() -> Result<i64>;
    fn get_versioned => get_versioned_async() -> Result<Versioned<i64>>;
    fn increment => increment_async() -> Result<AtomicValue<i64>>;
    fn decrement => decrement_async() -> Result<AtomicValue<i64>>;
    fn add => add_async(delta: i64) -> Result<AtomicValue<i64>>;
    fn subtract => subtract_async(delta: i64) -> Result<AtomicValue<i64>>;
    fn compare_and_set => compare_and_set_async(expected: i64, new: i64) -> Result<AtomicValue<i64>>;
    fn try_set => try_set_async(new: i64) -> Result<AtomicValue<i64>>;
    fn force_set => force_set_async(new: i64) -> Result<Stat>;
    fn watch => watch_async() -> Result<ValueWatch<i64>>;
});

native_forms!(KazooCounter {
    fn value => value_async() -> Result<i64>;
    fn add => add_async(delta: i64) -> Result<AtomicValue<i64>>;
    fn subtract => subtract_async(delta: i64) -> Result<AtomicValue<i64>>;
    fn watch => watch_async() -> Result<ValueWatch<i64>>;
});

native_forms!(PersistentNode {
    fn wait_created => wait_created_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<String>;
});

impl Async<PersistentNode> {
    /// Async form of [`PersistentNode::set_data`], which waits for nothing (the node's
    /// task writes the data): a ready future.
    pub fn set_data(&self, data: impl Into<Vec<u8>>) -> RecipeFuture<Result<()>> {
        Box::pin(std::future::ready(self.get_ref().set_data(&data.into())))
    }
}

impl Async<GroupMember> {
    /// Async form of [`GroupMember::set_data`], which waits for nothing: a ready future.
    pub fn set_data(&self, payload: impl Into<Vec<u8>>) -> RecipeFuture<Result<()>> {
        Box::pin(std::future::ready(self.get_ref().set_data(&payload.into())))
    }
}

native_forms!(Group {
    fn wait_initialized => wait_initialized_async(timeout: impl Into<Timeout> + Send + 'static) -> Result<()>;
});

// Queues: a taken item whose future was dropped is put back, never lost.

/// The queue itself (for `native_take_forms!`).
fn itself(queue: &Queue) -> &Queue {
    queue
}

/// The async take forms of a queue type whose takes are the inner [`Queue`]'s own
/// futures (`$queue` gives it): no thread waits for them, and a dropped take leaves
/// nothing behind (see [`Queue::take_async`]).
macro_rules! native_take_forms {
    ($recipe:ident, $queue:path) => {
        impl Async<$recipe> {
            #[doc = concat!("Async form of [`", stringify!($recipe), "::take`]: the queue's own future (see [`Queue::take_async`]).")]
            pub fn take(&self, timeout: impl Into<Timeout>) -> RecipeFuture<Result<Vec<u8>>> {
                let (recipe, timeout) = (self.shared(), timeout.into());
                Box::pin(async move {
                    let (_, data) = $queue(&recipe).take_named_async(timeout).await?;
                    Ok(data)
                })
            }

            #[doc = concat!("Async form of [`", stringify!($recipe), "::try_take`] (see [`Queue::take_async`]).")]
            pub fn try_take(&self) -> RecipeFuture<Result<Option<Vec<u8>>>> {
                let recipe = self.shared();
                Box::pin(async move {
                    let taken = $queue(&recipe).try_take_named_async().await?;
                    Ok(taken.map(|(_, data)| data))
                })
            }
        }
        native_forms!($recipe {
            fn len => len_async() -> Result<usize>;
            fn is_empty => is_empty_async() -> Result<bool>;
        });
    };
}

native_take_forms!(Queue, itself);
native_take_forms!(PriorityQueue, PriorityQueue::queue);
native_take_forms!(DelayedQueue, DelayedQueue::queue);
native_take_forms!(BoundedQueue, BoundedQueue::queue);

impl Async<Queue> {
    /// Async form of [`Queue::put`]: [`Queue::put_async`] on the shared value.
    pub fn put(&self, data: impl Into<Vec<u8>>) -> RecipeFuture<Result<()>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_async(&data).await })
    }

    /// Async form of [`Queue::put_all`]: [`Queue::put_all_async`].
    pub fn put_all<I>(&self, items: I) -> RecipeFuture<Result<()>>
    where
        I: IntoIterator,
        I::Item: Into<Vec<u8>>,
    {
        let (queue, items) = (self.shared(), owned(items));
        Box::pin(async move { queue.put_all_async(&items).await })
    }
}

impl Async<PriorityQueue> {
    /// Async form of [`PriorityQueue::put`]: [`PriorityQueue::put_async`].
    pub fn put(&self, data: impl Into<Vec<u8>>, priority: u32) -> RecipeFuture<Result<()>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_async(&data, priority).await })
    }

    /// Async form of [`PriorityQueue::put_all`]: [`PriorityQueue::put_all_async`].
    pub fn put_all<I>(&self, items: I, priority: u32) -> RecipeFuture<Result<()>>
    where
        I: IntoIterator,
        I::Item: Into<Vec<u8>>,
    {
        let (queue, items) = (self.shared(), owned(items));
        Box::pin(async move { queue.put_all_async(&items, priority).await })
    }
}

impl Async<DelayedQueue> {
    /// Async form of [`DelayedQueue::put_at`]: [`DelayedQueue::put_at_async`].
    pub fn put_at(
        &self,
        data: impl Into<Vec<u8>>,
        due: SystemTime,
    ) -> RecipeFuture<Result<SystemTime>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_at_async(&data, due).await })
    }

    /// Async form of [`DelayedQueue::put_after`].
    pub fn put_after(
        &self,
        data: impl Into<Vec<u8>>,
        delay: std::time::Duration,
    ) -> RecipeFuture<Result<SystemTime>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_after_async(&data, delay).await })
    }
}

impl Async<BoundedQueue> {
    /// Async form of [`BoundedQueue::put`].
    pub fn put(
        &self,
        data: impl Into<Vec<u8>>,
        timeout: impl Into<Timeout> + Send + 'static,
    ) -> RecipeFuture<Result<()>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.put_async(&data, timeout).await })
    }

    /// Async form of [`BoundedQueue::try_put`].
    pub fn try_put(&self, data: impl Into<Vec<u8>>) -> RecipeFuture<Result<Offer>> {
        let (queue, data) = (self.shared(), data.into());
        Box::pin(async move { queue.try_put_async(&data).await })
    }
}

// Guards.
