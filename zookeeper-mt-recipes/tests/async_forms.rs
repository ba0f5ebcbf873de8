//! The async forms of the recipes against a real server, driven by a minimal executor
//! (no runtime), each pending call on a clone its `'static` future owns: waiting calls
//! occupy no executor thread, a dropped take puts its item back, a dropped acquire
//! withdraws its request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;
use zk_harness::executor::block_on;
use zk_harness::testing::{unique_path, wait_until};
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::queues::PriorityQueue;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::RecipeError;

const T: Duration = Duration::from_secs(30);

fn connect() -> ZooKeeper {
    let servers = zk_harness::shared_test_connect_string();
    ZooKeeper::connect(&servers, Duration::from_secs(10)).expect("connect")
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(std::sync::atomic::AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `$call` on a clone of `$recipe` that the returned `Send + 'static` future owns (the
/// way a spawned task uses a recipe).
macro_rules! owned {
    ($recipe:expr, |$r:ident| $call:expr) => {{
        let $r = $recipe.clone();
        boxed(async move { $call.await })
    }};
}

fn boxed<F: Future + Send + 'static>(future: F) -> Pin<Box<dyn Future<Output = F::Output> + Send>> {
    Box::pin(future)
}

/// Polls `future` once: whether it was ready (its output dropped).
fn poll_once<F: Future + Unpin>(future: &mut F) -> bool {
    zk_harness::executor::poll_once(future).is_ready()
}

#[test]
fn a_waiting_acquire_completes_on_release_on_one_executor_thread() {
    let zk = connect();
    let path = unique_path("async-lock");
    let lock = Lock::new(&zk, &path).unwrap();
    block_on(async {
        let first = lock.acquire_async(T).await.unwrap();
        // The second acquire waits on a worker: polling it does not block this thread.
        let mut second = owned!(lock, |l| l.acquire_async(T));
        assert!(!poll_once(&mut second), "the lock is held");
        assert!(lock.try_acquire_async().await.unwrap().is_none());
        first.release_async().await.unwrap();
        let second = second.await.unwrap();
        assert!(
            lock.holder_async().await.unwrap().is_some(),
            "held by the second"
        );
        second.release_async().await.unwrap();
    });
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn a_timed_out_wait_is_a_timeout_error() {
    let zk = connect();
    let path = unique_path("async-timeout");
    let lock = Lock::new(&zk, &path).unwrap();
    let holder = Lock::new(&zk, &path).unwrap().acquire(T).unwrap();
    let waited = block_on(owned!(lock, |l| l.acquire_async(Duration::from_millis(200))));
    assert!(matches!(waited, Err(RecipeError::Timeout)), "{waited:?}");
    let queue = Queue::new(&zk, &unique_path("async-empty")).unwrap();
    let taken = block_on(owned!(queue, |q| q.take_async(Duration::from_millis(200))));
    assert!(matches!(taken, Err(RecipeError::Timeout)), "{taken:?}");
    holder.release().unwrap();
}

#[test]
fn a_dropped_acquire_releases_the_lock_it_got() {
    let zk = connect();
    let path = unique_path("async-dropped-acquire");
    let lock = Lock::new(&zk, &path).unwrap();
    let holder = Lock::new(&zk, &path).unwrap().acquire(T).unwrap();
    let mut waiting = owned!(lock, |l| l.acquire_async(T));
    assert!(!poll_once(&mut waiting));
    drop(waiting);
    // The acquire goes on without its future, gets the lock once it is released, and
    // releases it again: a rival can then take it.
    holder.release().unwrap();
    let rival = Lock::new(connect(), &path).unwrap();
    let got = rival.acquire(T).unwrap();
    got.release().unwrap();
    wait_until("no lock node left", T, || {
        zk.get_children(&path).unwrap().is_empty()
    });
}

#[test]
fn an_item_taken_for_a_dropped_take_is_put_back() {
    let zk = connect();
    let path = unique_path("async-dropped-take");
    let queue = Queue::new(&zk, &path).unwrap();
    let mut waiting = owned!(queue, |q| q.take_async(T));
    assert!(!poll_once(&mut waiting), "the queue is empty");
    drop(waiting);
    // The abandoned take gets this item and must put it back, not lose it.
    let producer = Queue::new(connect(), &path).unwrap();
    producer.put(b"precious").unwrap();
    let consumer = Queue::new(connect(), &path).unwrap();
    assert_eq!(consumer.take(T).unwrap(), b"precious");
    assert!(consumer.try_take().unwrap().is_none(), "delivered once");
}

#[test]
fn a_completed_take_never_received_is_put_back_with_its_priority() {
    let zk = connect();
    let path = unique_path("async-unreceived-take");
    let queue = PriorityQueue::new(&zk, &path).unwrap();
    queue.put(b"urgent", 1).unwrap();
    let mut taking = owned!(queue, |q| q.take_async(T));
    // Let the take complete (its waker fires), then drop its future without receiving
    // the item.
    let woken = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&woken));
    let polled = std::pin::Pin::new(&mut taking).poll(&mut Context::from_waker(&waker));
    assert!(polled.is_pending());
    wait_until("the take completed", T, || {
        woken.0.load(std::sync::atomic::Ordering::SeqCst)
    });
    drop(taking);
    queue.put(b"later", 5).unwrap();
    let consumer = PriorityQueue::new(connect(), &path).unwrap();
    let first = consumer.take(T).unwrap();
    assert_eq!(
        first, b"urgent",
        "put back with its priority, ahead of a later item"
    );
    assert_eq!(consumer.take(T).unwrap(), b"later");
    assert!(consumer.try_take().unwrap().is_none());
}

#[test]
fn work_items_complete_asynchronously() {
    let zk = connect();
    let path = unique_path("async-work");
    let work = WorkQueue::new(&zk, &path).unwrap();
    block_on(async {
        work.put_async(b"job").await.unwrap();
        let item = work.take_async(T).await.unwrap();
        assert_eq!(item.data(), b"job");
        assert_eq!(work.in_progress_async().await.unwrap(), 1);
        item.complete_async().await.unwrap();
        assert!(work.is_empty_async().await.unwrap());
        assert_eq!(work.in_progress_async().await.unwrap(), 0);
    });
}

#[test]
fn a_batch_is_put_asynchronously_in_order() {
    let zk = connect();
    let queue = Queue::new(&zk, &unique_path("async-batch")).unwrap();
    let work = WorkQueue::new(&zk, &unique_path("async-batch-work")).unwrap();
    let urgent = PriorityQueue::new(&zk, &unique_path("async-batch-prio")).unwrap();
    block_on(async {
        urgent.put_all_async(["later"], 9).await.unwrap();
        urgent.put_all_async(["now", "next"], 0).await.unwrap();
        for expected in ["now", "next", "later"] {
            assert_eq!(urgent.take_async(T).await.unwrap(), expected.as_bytes());
        }
        queue.put_all_async(["a", "b", "c"]).await.unwrap();
        work.put_all_async([b"x", b"y"]).await.unwrap();
        for expected in ["a", "b", "c"] {
            assert_eq!(queue.take_async(T).await.unwrap(), expected.as_bytes());
        }
        for expected in ["x", "y"] {
            let item = work.take_async(T).await.unwrap();
            assert_eq!(item.data(), expected.as_bytes());
            item.complete_async().await.unwrap();
        }
        assert!(queue.is_empty_async().await.unwrap());
        assert!(work.is_empty_async().await.unwrap());
    });
}

#[test]
fn many_waits_share_one_executor_thread() {
    let zk = connect();
    let path = unique_path("async-many");
    let queue = Queue::new(&zk, &path).unwrap();
    const N: usize = 8;
    let takes: Vec<_> = (0..N).map(|_| owned!(queue, |q| q.take_async(T))).collect();
    let producer = Queue::new(connect(), &path).unwrap();
    for i in 0..N {
        producer.put(format!("item {i}").as_bytes()).unwrap();
    }
    let mut got: Vec<String> = block_on(async {
        let mut got = Vec::new();
        for take in takes {
            got.push(String::from_utf8(take.await.unwrap()).unwrap());
        }
        got
    });
    got.sort();
    let mut want: Vec<String> = (0..N).map(|i| format!("item {i}")).collect();
    want.sort();
    assert_eq!(got, want, "each item delivered to exactly one take");
}

#[test]
fn an_election_can_be_joined_and_resigned_asynchronously() {
    let zk = connect();
    let path = unique_path("async-election");
    block_on(async {
        let election = LeaderElection::new_async(&zk, &path, b"me").await.unwrap();
        election.wait_until_leader_async(T).await.unwrap();
        assert_eq!(
            election.leader_data_async().await.unwrap().as_deref(),
            Some(&b"me"[..])
        );
        // A clone is the same candidate: resigning on it resigns for both, and the
        // original's resign then finds nothing left to do.
        let other = election.clone();
        owned!(other, |o| o.resign_async()).await.unwrap();
        election.resign_async().await.unwrap();
    });
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn async_timeouts_accept_timeout_never() {
    let zk = connect();
    let queue = Queue::new(&zk, &unique_path("async-never")).unwrap();
    queue.put(b"x").unwrap();
    assert_eq!(
        block_on(owned!(queue, |q| q.take_async(Timeout::Never))).unwrap(),
        b"x"
    );
}
