//! Priority queue against a real server: priority order with FIFO inside a priority, a
//! later higher-priority put is not passed over, blocking takes, exactly-once puts
//! across a lost reply, items past the counter's end never delivered.

mod common;

use common::{connect, connect_to, opcode, unique_path, wait_until, FaultProxy};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::{Acl, CreateMode};
use zookeeper_mt_recipes::queues::PriorityQueue;
use zookeeper_mt_recipes::OptionalExtension;

#[test]
fn items_come_out_by_priority_then_in_put_order() {
    let zk = connect();
    let queue = PriorityQueue::new(&zk, &unique_path("order")).unwrap();
    for (data, priority) in [("c", 5), ("a", 1), ("b", 1), ("d", 0), ("e", 5), ("f", 1)] {
        queue.put(data.as_bytes(), priority).unwrap();
    }
    assert_eq!(queue.len().unwrap(), 6);
    let mut order = String::new();
    while let Some(item) = queue.try_take().unwrap() {
        order.push_str(std::str::from_utf8(&item).unwrap());
    }
    assert_eq!(order, "dabfce");
    // The extremes of the range.
    queue.put(b"last", u32::MAX).unwrap();
    queue.put(b"first", 0).unwrap();
    assert_eq!(queue.take(Timeout::Never).unwrap(), b"first");
    assert_eq!(queue.take(Timeout::Never).unwrap(), b"last");
}

/// A batch takes its place by priority, in its own order, contiguous within its priority.
#[test]
fn a_batch_is_taken_by_priority_and_in_its_own_order() {
    let zk = connect();
    let queue = PriorityQueue::new(&zk, &unique_path("batch")).unwrap();
    queue.put(b"a", 1).unwrap();
    queue.put_all(["x1", "x2", "x3"], 1).unwrap();
    queue.put(b"b", 1).unwrap();
    queue.put_all(["u1", "u2"], 0).unwrap();
    queue.put_all(Vec::<&str>::new(), 0).unwrap();
    let mut order = Vec::new();
    while let Some(item) = queue.try_take().unwrap() {
        order.push(String::from_utf8(item).unwrap());
    }
    assert_eq!(order, ["u1", "u2", "a", "x1", "x2", "x3", "b"]);
}

/// A take decides on a listing of its own: an urgent item put after the previous take
/// comes next, ahead of older items of lower priority.
#[test]
fn a_later_urgent_item_is_not_passed_over() {
    let zk = connect();
    let path = unique_path("urgent");
    let queue = PriorityQueue::new(&zk, &path).unwrap();
    for i in 0..4 {
        queue.put(format!("routine {i}").as_bytes(), 10).unwrap();
    }
    assert_eq!(queue.try_take().unwrap().unwrap(), b"routine 0");
    let other = PriorityQueue::new(connect(), &path).unwrap();
    other.put(b"urgent", 1).unwrap();
    assert_eq!(queue.try_take().unwrap().unwrap(), b"urgent");
    assert_eq!(queue.take(Timeout::Never).unwrap(), b"routine 1");
}

#[test]
fn a_blocked_take_wakes_on_a_put() {
    let path = unique_path("blocked");
    let consumer = Arc::new(PriorityQueue::new(connect(), &path).unwrap());
    assert_eq!(
        consumer
            .take(Duration::from_millis(100))
            .optional()
            .unwrap(),
        None
    );
    let taker = {
        let consumer = Arc::clone(&consumer);
        thread::spawn(move || consumer.take(Duration::from_secs(60)).optional())
    };
    wait_until("the consumer is blocked", || consumer.waiting() == 1);
    let producer_zk = connect();
    PriorityQueue::new(&producer_zk, &path)
        .unwrap()
        .put(b"wake up", 3)
        .unwrap();
    assert_eq!(
        taker.join().unwrap().unwrap().as_deref(),
        Some(&b"wake up"[..])
    );
}

#[test]
fn a_put_whose_reply_is_lost_enqueues_once() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let queue = PriorityQueue::new(&zk, &unique_path("lost")).unwrap();
    queue.put(b"low", 9).unwrap();
    proxy.cut_after(opcode::MULTI);
    queue.put(b"high", 2).unwrap();
    assert!(proxy.has_cut());
    assert_eq!(queue.len().unwrap(), 2);
    assert_eq!(queue.try_take().unwrap().unwrap(), b"high");
    assert_eq!(queue.try_take().unwrap().unwrap(), b"low");
    assert_eq!(queue.try_take().unwrap(), None);
}

/// An item numbered past the counter's end, even at the highest priority, is never
/// delivered while its put is in progress (receipt present) and is removed once that
/// put's session is gone.
#[test]
fn items_past_the_counters_end_take_no_part() {
    let zk = connect();
    let path = unique_path("end");
    let queue = PriorityQueue::new(&zk, &path).unwrap();
    queue.put(b"in range", 7).unwrap();
    let peer = connect();
    let id = zookeeper_mt_recipes::nodes::guid();
    let crafted = format!("{path}/item-{id}-p0000000000--2147483648");
    let open = Acl::OPEN_UNSAFE;
    peer.create(
        &crafted,
        b"wrapped",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open),
    )
    .unwrap();
    peer.create(
        &format!("{path}/receipts/{id}"),
        b"",
        zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(open),
    )
    .unwrap();
    assert_eq!(queue.try_take().unwrap().unwrap(), b"in range");
    assert_eq!(
        queue.try_take().unwrap(),
        None,
        "a wrapped item was delivered"
    );
    peer.close().unwrap();
    assert_eq!(queue.try_take().unwrap(), None);
    assert!(zk.exists(&crafted).unwrap().is_none(), "orphan left behind");
}
