//! What one work-queue take costs at 10 and at 100,000 items: bytes the server sends and
//! requests the consumer makes per take, measured on the wire by a proxy. A take that
//! listed every item (and every lock) cost O(N) bytes, so draining N items cost O(N²).

mod common;

use common::{connect, connect_to, unique_path, FaultProxy};
use std::time::Instant;
use zookeeper_mt::{CreateMode, Op, ZooKeeper};
use zookeeper_mt_recipes::queues::WorkQueue;

/// Takes measured per backlog (after one warm-up take).
const TAKES: usize = 40;

/// Fills `<path>/items` with `n` items named as `put` names them, 1,000 per multi, one
/// multi at a time (many large ones in flight delay the session's pings past its
/// timeout on a loaded machine).
fn fill(zk: &ZooKeeper, path: &str, n: usize) {
    zookeeper_mt_recipes::nodes::ensure_path(zk, &format!("{path}/items")).unwrap();
    for batch in 0..n.div_ceil(1000) {
        let ops: Vec<Op> = (batch * 1000..n.min((batch + 1) * 1000))
            .map(|_| {
                let name = format!("{path}/items/item-{}-", zookeeper_mt_recipes::nodes::guid());
                Op::create(&name, b"x", CreateMode::PersistentSequential)
            })
            .collect();
        zk.multi(&ops).unwrap();
    }
}

/// Per take (take + complete, the backlog topped up by another session): bytes to the
/// consumer and requests from it; and the first take's bytes (its first listing).
struct Cost {
    bytes_per_take: f64,
    requests_per_take: f64,
    first_take_bytes: u64,
}

fn measure(backlog: usize) -> Cost {
    let producer_zk = connect();
    let path = unique_path(&format!("backlog-{backlog}"));
    let started = Instant::now();
    fill(&producer_zk, &path, backlog);
    eprintln!("{backlog} items put in {:?}", started.elapsed());
    let producer = WorkQueue::new(&producer_zk, &path).unwrap();
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer_zk = connect_to(&proxy.addr);
    let consumer = WorkQueue::new(&consumer_zk, &path).unwrap();

    let before = proxy.bytes_to_client();
    consumer
        .try_take()
        .unwrap()
        .expect("an item")
        .complete()
        .unwrap();
    producer.put(b"x").unwrap();
    let first_take_bytes = proxy.bytes_to_client() - before;

    let (bytes, requests) = (proxy.bytes_to_client(), proxy.request_count());
    for _ in 0..TAKES {
        let item = consumer.try_take().unwrap().expect("an item");
        item.complete().unwrap();
        producer.put(b"x").unwrap();
    }
    let takes = TAKES as f64;
    Cost {
        bytes_per_take: (proxy.bytes_to_client() - bytes) as f64 / takes,
        requests_per_take: (proxy.request_count() - requests) as f64 / takes,
        first_take_bytes,
    }
}

use zk_harness::testing::under_valgrind;

#[test]
fn a_take_costs_the_same_at_ten_or_a_hundred_thousand_items() {
    if under_valgrind() {
        // 100,000 nodes cost minutes under memcheck; the same code runs in work_queue.rs.
        eprintln!("skipped under valgrind");
        return;
    }
    let small = measure(10);
    let large = measure(100_000);
    for (n, cost) in [(10, &small), (100_000, &large)] {
        println!(
            "backlog {n:>6}: {:>7.1} bytes and {:.2} requests per take; first take {} bytes",
            cost.bytes_per_take, cost.requests_per_take, cost.first_take_bytes
        );
    }
    assert!(
        large.bytes_per_take <= 2.0 * small.bytes_per_take + 200.0,
        "a take costs {} bytes at 100,000 items, {} at 10",
        large.bytes_per_take,
        small.bytes_per_take
    );
    assert!(large.requests_per_take <= small.requests_per_take + 0.5);
}

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Many async takes waiting on an empty queue (one value, one session) add no thread;
/// dropped, they leave no waiter node, no lock and no watch behind, and none of them
/// takes an item put afterwards.
#[test]
fn pending_async_takes_cost_no_thread_and_dropped_ones_leave_nothing() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    use std::time::Duration;
    use zookeeper_mt::Timeout;
    use zookeeper_mt_recipes::queues::WorkItem;
    use zookeeper_mt_recipes::Result;
    const LONG: Duration = Duration::from_secs(120);

    let takers: usize = if under_valgrind() { 200 } else { 1000 };
    let (zk, admin) = (connect(), connect());
    let path = unique_path("async-takes");
    let queue = WorkQueue::new(&zk, &path).unwrap();
    // Warm-up: the item and lock directories exist.
    queue.put(b"warm-up").unwrap();
    queue.try_take().unwrap().unwrap().complete().unwrap();
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    let before = threads();

    type Take<'a> = Pin<Box<dyn Future<Output = Result<WorkItem>> + Send + 'a>>;
    let mut takes: Vec<Take> = (0..takers)
        .map(|_| Box::pin(queue.take_async(Timeout::Never)) as Take)
        .collect();
    // Driven on this thread until each waits on its watch: the head on the queue's,
    // every other take on its predecessor's in the line.
    let all_waiting = zk_harness::executor::block_on_timeout(
        std::future::poll_fn(|cx| {
            for take in takes.iter_mut() {
                assert!(
                    take.as_mut().poll(cx).is_pending(),
                    "took from an empty queue"
                );
            }
            if queue.waiting() == takers {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }),
        LONG,
    );
    assert!(all_waiting.is_some(), "the takes did not all wait");
    assert_eq!(queue.waiters_in_line().unwrap(), takers);
    let added = threads().saturating_sub(before);
    println!("{takers} pending async takes added {added} threads");
    assert!(added <= 2, "{takers} pending takes added {added} threads");

    drop(takes);
    assert_eq!(queue.waiting(), 0);
    let children = |dir: &str| admin.get_children(&format!("{path}/{dir}")).unwrap().len();
    zk_harness::testing::wait_until("the dropped takes gone from the line", LONG, || {
        children("waiters") == 0
    });
    assert_eq!(children("locks"), 0, "a lock left behind");
    zk_harness::testing::wait_until("the dropped takes' watches released", LONG, || {
        zk.live_contexts() == contexts
    });

    // None of them takes what comes now: a fresh consumer gets all of it, in order.
    let producer = WorkQueue::new(&admin, &path).unwrap();
    producer
        .put_all((0..10).map(|i| format!("item {i}")))
        .unwrap();
    let fresh = WorkQueue::new(connect(), &path).unwrap();
    for i in 0..10 {
        let item = fresh.take(Duration::from_secs(20)).unwrap();
        assert_eq!(item.data(), format!("item {i}").as_bytes());
        assert_eq!(item.attempt(), 1, "claimed before by a dropped take");
        item.complete().unwrap();
    }
    assert!(fresh.try_take().unwrap().is_none());
    assert_eq!(producer.in_progress().unwrap(), 0);
    // The value whose takes were dropped works on.
    producer.put(b"after").unwrap();
    let item = queue.take(Duration::from_secs(20)).unwrap();
    assert_eq!(item.data(), b"after");
    item.complete().unwrap();
}
