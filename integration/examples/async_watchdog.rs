//! A watchdog over the async face: on a tokio current-thread runtime, no thread marked,
//! it times every poll of every future and every drop of the steps below, and prints the
//! longest of each per step. One thread runs every task, so a poll or a drop that
//! blocked would stall them all: the figure to watch is the longest, against a bound of
//! 10 ms.
//!
//! 1. `MAX_IN_FLIGHT` + 5,000 requests made at once (the extra ones are queued, not
//!    waited for);
//! 2. caches, a latch and a persistent node dropped while their link is stalled and a
//!    change they must read is pending;
//! 3. a lock guard and a semaphore permit dropped while their client is cut off (their
//!    deletes are sent when the link is back: checked from another session);
//! 4. `close_async` with 2,000 requests in flight.
//!
//! ```text
//! cargo run --example async_watchdog             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example async_watchdog
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Timeout, ZooKeeper, MAX_IN_FLIGHT};
use zookeeper_mt_recipes::caches::{ChildrenCache, NodeCache, TreeCache};
use zookeeper_mt_recipes::locks::{Lock, Semaphore};
use zookeeper_mt_recipes::{LeaderLatch, PersistentNode};
use zookeeper_testing::FaultProxy;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const WAIT: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_millis(10);

/// The longest poll and drop seen in one step, in nanoseconds.
#[derive(Default)]
struct Watchdog {
    polls: AtomicU64,
    longest_poll: AtomicU64,
    drops: AtomicU64,
    longest_drop: AtomicU64,
}

impl Watchdog {
    fn watch<F: Future>(self: &Arc<Self>, future: F) -> Watched<F> {
        Watched {
            future: Box::pin(future),
            dog: Arc::clone(self),
        }
    }

    fn dropping<T>(&self, value: T) {
        let started = Instant::now();
        drop(value);
        self.drops.fetch_add(1, Ordering::Relaxed);
        self.longest_drop
            .fetch_max(nanos(started.elapsed()), Ordering::Relaxed);
    }

    fn report(&self, step: &str, operations: usize) -> Duration {
        let poll = Duration::from_nanos(self.longest_poll.load(Ordering::Relaxed));
        let drop = Duration::from_nanos(self.longest_drop.load(Ordering::Relaxed));
        println!(
            "{step:<44} {operations:>6} {:>7} {:>10.3} {:>6} {:>10.3}",
            self.polls.load(Ordering::Relaxed),
            poll.as_secs_f64() * 1e3,
            self.drops.load(Ordering::Relaxed),
            drop.as_secs_f64() * 1e3,
        );
        poll.max(drop)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A future whose every poll is timed; its own drop too.
struct Watched<F: Future> {
    future: Pin<Box<F>>,
    dog: Arc<Watchdog>,
}

impl<F: Future> Future for Watched<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = Instant::now();
        let polled = self.future.as_mut().poll(cx);
        self.dog.polls.fetch_add(1, Ordering::Relaxed);
        self.dog
            .longest_poll
            .fetch_max(nanos(started.elapsed()), Ordering::Relaxed);
        polled
    }
}

/// Waits for `condition` without blocking the runtime thread.
async fn until(what: &str, mut condition: impl FnMut() -> bool) -> Result<(), BoxError> {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let connect_string = hosts.connect_string();
    let base = format!("/async-watchdog-{}", std::process::id());
    let admin = ZooKeeper::connect_async(&connect_string, Duration::from_secs(10)).await?;
    admin
        .create_async(&base, b"", CreateMode::Persistent)
        .await?;
    println!(
        "{:<44} {:>6} {:>7} {:>10} {:>6} {:>10}",
        "step", "ops", "polls", "poll max ms", "drops", "drop max ms"
    );
    let mut longest = Duration::ZERO;

    // 1. More requests than the handle takes at once.
    let dog = Arc::new(Watchdog::default());
    let requests = MAX_IN_FLIGHT + 5_000;
    let tasks: Vec<_> = (0..requests)
        .map(|_| {
            let zk = admin.clone();
            tokio::spawn(dog.watch(async move { zk.exists_async("/").await }))
        })
        .collect();
    let mut answered = 0;
    for task in tasks {
        if task.await?.is_ok() {
            answered += 1;
        }
    }
    longest = longest.max(dog.report("requests over MAX_IN_FLIGHT", requests));
    println!("every request answered: {}", answered == requests);

    // 2. Followers dropped with their link stalled and a change pending.
    let dog = Arc::new(Watchdog::default());
    let proxy = FaultProxy::start(&connect_string)?;
    let zk = ZooKeeper::connect_async(&proxy.connect_string(), Duration::from_secs(10)).await?;
    let watched = format!("{base}/watched");
    admin
        .create_async(&watched, b"0", CreateMode::Persistent)
        .await?;
    let tree = TreeCache::new(&zk, &base)?;
    let node = NodeCache::new(&zk, &watched)?;
    let children = ChildrenCache::new(&zk, &base)?;
    for ready in [
        dog.watch(tree.wait_initialized_async(WAIT)).await,
        dog.watch(node.wait_initialized_async(WAIT)).await,
        dog.watch(children.wait_initialized_async(WAIT)).await,
    ] {
        ready?;
    }
    let latch = LeaderLatch::new(&zk, &format!("{base}/latch"))?;
    dog.watch(latch.await_leadership_async(WAIT)).await?;
    let persistent = PersistentNode::new(&zk, &format!("{base}/persistent"), b"p")?;
    dog.watch(persistent.wait_created_async(WAIT)).await?;
    proxy.stall();
    // A change every follower has to read, whose reads now hang on the stalled link.
    admin.set_async(&watched, b"1", None).await?;
    admin
        .create_async(&format!("{base}/new"), b"", CreateMode::Persistent)
        .await?;
    until("the caches' watches to fire", || {
        proxy.is_stalled() && zk.requests_in_flight() > 0
    })
    .await
    .ok();
    dog.dropping(tree);
    dog.dropping(node);
    dog.dropping(children);
    dog.dropping(latch);
    dog.dropping(persistent);
    longest = longest.max(dog.report("caches, latch, node dropped, link stalled", 5));
    proxy.resume();

    // 3. Guards dropped while their client is cut off.
    let dog = Arc::new(Watchdog::default());
    let lock = Lock::new(&zk, &format!("{base}/lock"))?;
    let semaphore = Semaphore::new(&zk, &format!("{base}/semaphore"), 2)?;
    let guard = dog.watch(lock.acquire_async(WAIT)).await?;
    let permit = dog.watch(semaphore.acquire_async(WAIT)).await?;
    proxy.isolate();
    until("the client to notice", || !zk.state().is_connected()).await?;
    dog.dropping(guard);
    dog.dropping(permit);
    longest = longest.max(dog.report("guards dropped while disconnected", 2));
    proxy.unblock();
    // Another session gets the lock and both permits once the deletes have applied.
    let theirs = Lock::new(&admin, &format!("{base}/lock"))?;
    let their_permits = Semaphore::new(&admin, &format!("{base}/semaphore"), 2)?;
    let released = async {
        let lock = theirs.acquire_async(WAIT).await?;
        let first = their_permits.acquire_async(WAIT).await?;
        let second = their_permits.acquire_async(WAIT).await?;
        lock.release_async().await?;
        first.release_async().await?;
        second.release_async().await?;
        Ok::<_, zookeeper_mt_recipes::RecipeError>(())
    }
    .await
    .is_ok();
    println!("released once the link was back: {released}");

    // 4. close_async with requests in flight.
    let dog = Arc::new(Watchdog::default());
    let closing = ZooKeeper::connect_async(&connect_string, Duration::from_secs(10)).await?;
    let in_flight = 2_000;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let zk = closing.clone();
            tokio::spawn(dog.watch(async move { zk.get_async("/").await }))
        })
        .collect();
    dog.watch(closing.close_async()).await?;
    let mut settled = 0;
    for task in tasks {
        // Answered before the close, or failed with `Closed`: either way it completes.
        let _ = tokio::time::timeout(WAIT, task).await?;
        settled += 1;
    }
    longest = longest.max(dog.report("close_async under load", in_flight));
    println!(
        "every request settled after close_async: {}",
        settled == in_flight
    );

    drop(zk);
    zookeeper_mt_recipes::nodes::delete_recursive_async(&admin, &base, Timeout::from(WAIT)).await?;
    println!(
        "longest poll or drop: {:.3} ms (bound {} ms): {}",
        longest.as_secs_f64() * 1e3,
        BOUND.as_millis(),
        if longest <= BOUND { "within" } else { "OVER" }
    );
    Ok(())
}
