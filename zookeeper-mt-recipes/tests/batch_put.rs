//! Batched puts (`Queue::put_all`, `WorkQueue::put_all`) against a real server: a batch
//! is enqueued exactly once, in order and contiguous, all or nothing, also when its reply
//! is lost. (The counter's end: `counter_ends.rs` and the queue's unit tests.)

mod common;

use common::{connect, connect_to, opcode, unique_path, FaultProxy};
use std::collections::BTreeSet;
use std::thread;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::RecipeError;

fn batch(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

fn drain(queue: &Queue) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(item) = queue.try_take().unwrap() {
        out.push(String::from_utf8(item).unwrap());
    }
    out
}

/// No put receipt may be left once the puts returned. Their deletes are pipelined, not
/// awaited, but a later request of the putting session is answered after them.
fn assert_no_receipts_left(zk: &zookeeper_mt::ZooKeeper, path: &str) {
    let left = zk.get_children(&format!("{path}/receipts")).unwrap();
    assert!(left.is_empty(), "receipts left: {left:?}");
}

fn assert_too_large(error: &RecipeError) {
    assert!(
        matches!(
            error,
            RecipeError::ZooKeeper(zookeeper_mt::Error::DataTooLarge { .. })
        ),
        "{error:?}"
    );
}

#[test]
fn a_batch_comes_out_in_order_and_contiguous_among_concurrent_puts() {
    let zk = connect();
    let path = unique_path("batch-order");
    let queue = Queue::new(&zk, &path).unwrap();
    let batches: Vec<Vec<String>> = (0..4).map(|b| batch(&format!("b{b}"), 50)).collect();
    thread::scope(|s| {
        // A second session puts single items all the while.
        s.spawn(|| {
            let single = Queue::new(connect(), &path).unwrap();
            for i in 0..40 {
                single.put(format!("single-{i:04}").as_bytes()).unwrap();
            }
        });
        for items in &batches {
            queue.put_all(items).unwrap();
        }
    });
    let taken = drain(&queue);
    assert_eq!(taken.len(), 4 * 50 + 40, "{taken:?}");
    let distinct: BTreeSet<&String> = taken.iter().collect();
    assert_eq!(distinct.len(), taken.len(), "an item came out twice");
    for items in &batches {
        let start = taken
            .iter()
            .position(|t| t == &items[0])
            .expect("the batch's first item");
        assert_eq!(
            &taken[start..start + items.len()],
            &items[..],
            "a batch came out out of order or interleaved"
        );
    }
    let singles: Vec<&String> = taken.iter().filter(|t| t.starts_with("single")).collect();
    let mut sorted = singles.clone();
    sorted.sort();
    assert_eq!(singles, sorted, "single puts out of order");
    assert_no_receipts_left(&zk, &path);
}

#[test]
fn empty_and_refused_batches_enqueue_nothing() {
    let zk = connect();
    let path = unique_path("batch-refused");
    let queue = Queue::new(&zk, &path).unwrap();
    queue.put_all(Vec::<Vec<u8>>::new()).unwrap();
    // Every item fits, the batch does not: refused before it is sent, typed.
    let big = vec![7u8; 300 * 1024];
    let error = queue.put_all([&big, &big, &big, &big]).unwrap_err();
    assert_too_large(&error);
    // One item above the node data limit: the whole batch refused.
    let huge = vec![1u8; zookeeper_mt::MAX_DATA_LEN + 1];
    let error = queue.put_all([&b"small"[..], &huge[..]]).unwrap_err();
    assert_too_large(&error);
    assert_eq!(queue.len().unwrap(), 0);
    // Then a batch that fits goes through whole.
    queue.put_all([&big, &big]).unwrap();
    assert_eq!(queue.len().unwrap(), 2);
    assert_no_receipts_left(&zk, &path);
}

/// The connection drops right after the batch's multi was forwarded (its reply lost):
/// the receipts tell the put it applied; every item is there once, in order.
#[test]
fn a_batch_whose_reply_is_lost_is_enqueued_once() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let path = unique_path("batch-lost");
    let queue = Queue::new(&zk, &path).unwrap();
    queue.put(b"before").unwrap();
    let items = batch("lost", 20);
    proxy.cut_after(opcode::MULTI);
    queue.put_all(&items).unwrap();
    assert!(proxy.has_cut(), "the reply was not cut");
    let mut expected = vec!["before".to_string()];
    expected.extend(items);
    assert_eq!(drain(&queue), expected);
    assert_no_receipts_left(&zk, &path);
}

/// A consumer blocked in `take` gets the batch's first item; the rest follow in order.
#[test]
fn a_blocked_consumer_wakes_for_a_batch() {
    let path = unique_path("batch-wake");
    let consumer = Queue::new(connect(), &path).unwrap();
    let items = batch("wake", 10);
    thread::scope(|s| {
        let taker = s.spawn(|| consumer.take(Timeout::Never).unwrap());
        common::wait_until("the consumer is blocked", || consumer.waiting() == 1);
        Queue::new(connect(), &path)
            .unwrap()
            .put_all(&items)
            .unwrap();
        assert_eq!(taker.join().unwrap(), items[0].as_bytes());
    });
    assert_eq!(drain(&consumer), items[1..]);
}

#[test]
fn a_work_queue_batch_is_claimed_in_order() {
    let zk = connect();
    let path = unique_path("batch-work");
    let queue = WorkQueue::new(&zk, &path).unwrap();
    let items = batch("work", 12);
    queue.put_all(&items).unwrap();
    for expected in &items {
        let item = queue.try_take().unwrap().expect("an item");
        assert_eq!(item.data(), expected.as_bytes());
        item.complete().unwrap();
    }
    assert!(queue.try_take().unwrap().is_none());
    // Items above the work queue's own limit: the batch is refused whole.
    let too_big = vec![0u8; zookeeper_mt_recipes::queues::work_queue::MAX_ITEM_LEN + 1];
    let error = queue.put_all([&b"ok"[..], &too_big[..]]).unwrap_err();
    assert!(
        matches!(error, RecipeError::InvalidArgument(_)),
        "{error:?}"
    );
    assert!(queue.try_take().unwrap().is_none());
}

/// A batch near the request limit (about 3,400 small items: each item and its receipt
/// take about 300 bytes of the 1 MiB request) goes through in one multi; one far above it
/// is refused before it is sent.
#[test]
fn a_large_batch_goes_through_and_an_oversized_one_is_refused() {
    let zk = connect();
    let path = unique_path("batch-large");
    let queue = Queue::new(&zk, &path).unwrap();
    let items = batch("large", 2_500);
    queue.put_all(&items).unwrap();
    assert_eq!(queue.len().unwrap(), items.len());
    let error = queue.put_all(batch("over", 5_000)).unwrap_err();
    assert_too_large(&error);
    assert_eq!(queue.len().unwrap(), items.len());
    assert_eq!(queue.try_take().unwrap().unwrap(), items[0].as_bytes());
    assert_no_receipts_left(&zk, &path);
}
