//! The queue's async take: pending takes cost no thread; a take dropped before it claimed
//! an item leaves the queue untouched; a take dropped while its claim is in flight (its
//! reply cut off) has the claim settled in the background, and the item it took is put
//! back, never lost.

mod common;

use common::{connect, unique_path};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use zk_harness::fault_proxy::OpCode;
use zk_harness::testing::process_threads as threads;
use zk_harness::testing::under_valgrind;
use zk_harness::FaultProxy;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::Result;

type Take = Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send>>;

fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    zk_harness::testing::wait_until(what, Duration::from_secs(60), condition);
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Polls every take once (each registers what it waits for, then stays pending).
fn poll_all(takes: &mut [Take]) -> usize {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut ready = 0;
    for take in takes.iter_mut() {
        if take.as_mut().poll(&mut cx).is_ready() {
            ready += 1;
        }
    }
    ready
}

#[test]
fn pending_takes_cost_no_thread_and_dropped_ones_move_no_item() {
    let takers: usize = if under_valgrind() { 100 } else { 1000 };
    let zk = connect();
    let admin = connect();
    let path = unique_path("async-queue-many");
    let queue = Queue::new(&zk, &path).unwrap();
    let producer = Queue::new(&admin, &path).unwrap();
    producer.put(b"warm-up").unwrap();
    assert_eq!(producer.take(Timeout::Never).unwrap(), b"warm-up");

    let before = threads();
    let mut takes: Vec<Take> = (0..takers)
        .map(|_| -> Take {
            let queue = queue.clone();
            Box::pin(async move { queue.take_async(Timeout::Never).await })
        })
        .collect();
    // Poll until every take waits on the shared child watch (the first poll of each
    // lists the empty queue).
    wait_until("every take waiting", || {
        assert_eq!(
            poll_all(&mut takes),
            0,
            "a take completed on an empty queue"
        );
        queue.waiting() == takers
    });
    let added = threads().saturating_sub(before);
    println!("{takers} pending async takes added {added} threads");
    assert!(added <= 4, "{takers} pending takes added {added} threads");

    // Abandon them all, then put items: nobody takes them any more.
    drop(takes);
    assert_eq!(queue.waiting(), 0);
    for i in 0..10 {
        producer.put(format!("item {i}").as_bytes()).unwrap();
    }
    let names = |zk: &ZooKeeper| -> Vec<String> {
        let mut names: Vec<String> = zk
            .get_children(&path)
            .unwrap()
            .into_iter()
            .filter(|n| n.starts_with("item"))
            .collect();
        names.sort();
        names
    };
    let first = names(&admin);
    assert_eq!(first.len(), 10);
    // The same ten nodes, in order, as a fresh consumer takes them.
    assert_eq!(names(&admin), first, "an abandoned take moved an item");
    for i in 0..10 {
        assert_eq!(
            producer.take(Duration::from_secs(20)).unwrap(),
            format!("item {i}").as_bytes()
        );
    }
    wait_until("threads back", || threads() <= before + 2);
}

#[test]
fn a_take_dropped_with_its_claim_in_flight_puts_the_item_back() {
    // Dropped right when the claim was sent and its connection cut.
    take_dropped_mid_claim(false);
}

#[test]
fn a_take_dropped_while_finding_out_its_claim_puts_the_item_back() {
    // Dropped while finding out whether its claim applied: the client noticed the cut
    // (the claim failed with a connection loss) and waits to reconnect, which the proxy
    // refuses until the take is gone.
    take_dropped_mid_claim(true);
}

fn take_dropped_mid_claim(after_the_client_noticed: bool) {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).unwrap();
    let zk = ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(6))
        .connect()
        .unwrap();
    let admin = connect();
    let path = unique_path("async-queue-claim");
    let producer = Queue::new(&admin, &path).unwrap();
    producer.put(b"precious").unwrap();
    let consumer = Queue::new(&zk, &path).unwrap();

    // The claim (a multi) reaches the server, which applies it; the connection is cut
    // before its reply, and reconnecting is refused until the take is dropped (else it
    // could find out and complete before the test sees the client disconnected).
    proxy.cut_after_matching(1, |request| request.op == OpCode::MULTI);
    proxy.block();
    {
        let mut take = std::pin::pin!(consumer.take_async(Timeout::Never));
        let reached = zk_harness::executor::block_on_timeout(
            std::future::poll_fn(|cx| {
                let cut = !proxy.fired().is_empty();
                if cut && (!after_the_client_noticed || !zk.state().is_connected()) {
                    return Poll::Ready(true);
                }
                if take.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            }),
            Duration::from_secs(60),
        );
        assert_eq!(
            reached,
            Some(true),
            "the take was still unsettled when dropped"
        );
    } // dropped here
    proxy.unblock();

    // Settled in the background: if the claim applied (the item left the queue), the
    // item is put back.
    wait_until("the item back in the queue", || {
        producer.len().unwrap_or(0) == 1
    });
    assert_eq!(producer.take(Duration::from_secs(20)).unwrap(), b"precious");
    assert_eq!(producer.len().unwrap(), 0, "put back once, not twice");
}

#[test]
fn a_dropped_take_whose_session_expires_still_puts_the_item_back() {
    // The claim applies, its reply is lost, the take is dropped, and the client stays
    // cut off until the server has expired its session: the item, gone from the queue,
    // is held only by the settling of the dropped take, which puts it back on a new
    // session made like the old one.
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = FaultProxy::start(&hosts).unwrap();
    let zk = ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .unwrap();
    let admin = connect();
    let path = unique_path("async-queue-expiry");
    let producer = Queue::new(&admin, &path).unwrap();
    producer.put(b"precious").unwrap();
    let consumer = Queue::new(&zk, &path).unwrap();

    proxy.cut_after_matching(1, |request| request.op == OpCode::MULTI);
    {
        let mut take = std::pin::pin!(consumer.take_async(Timeout::Never));
        let cut = zk_harness::executor::block_on_timeout(
            std::future::poll_fn(|cx| {
                if !proxy.fired().is_empty() {
                    return Poll::Ready(true);
                }
                if take.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            }),
            Duration::from_secs(60),
        );
        assert_eq!(cut, Some(true), "the take was still unsettled when dropped");
        proxy.block();
    } // dropped here, its claim applied and unanswered

    // The item left the queue with the claim; the session's take marker goes when the
    // server expires the session.
    assert_eq!(producer.len().unwrap(), 0);
    let receipts = format!("{path}/receipts");
    wait_until("the consumer's session expired on the server", || {
        admin
            .get_children(&receipts)
            .map(|names| !names.iter().any(|n| n.starts_with("took-")))
            .unwrap_or(false)
    });
    proxy.unblock();

    wait_until("the item back in the queue", || {
        producer.len().unwrap_or(0) == 1
    });
    assert_eq!(producer.take(Duration::from_secs(20)).unwrap(), b"precious");
    assert_eq!(producer.len().unwrap(), 0, "put back once, not twice");
}

#[test]
fn a_dropped_put_leaves_no_receipt_and_never_two_items() {
    let zk = connect();
    let path = unique_path("async-queue-put-drop");
    let queue = Queue::new(&zk, &path).unwrap();
    queue.put(b"first").unwrap(); // the directories exist
    for polls in 0..4 {
        let mut put = Box::pin(queue.put_async(b"dropped"));
        for _ in 0..polls {
            if zk_harness::executor::poll_once(&mut put).is_ready() {
                break;
            }
        }
        drop(put);
    }
    let receipts = format!("{path}/receipts");
    wait_until("no receipt left by a dropped put", || {
        zk.get_children(&receipts)
            .map(|names| names.is_empty())
            .unwrap_or(false)
    });
    // Each dropped put enqueued its item once or not at all.
    let mut taken = Vec::new();
    while let Some(item) = queue.try_take().unwrap() {
        taken.push(item);
    }
    assert_eq!(taken[0], b"first");
    assert!(
        taken.len() <= 5,
        "{} items from 4 dropped puts",
        taken.len() - 1
    );
}
