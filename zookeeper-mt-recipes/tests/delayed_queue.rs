//! Delayed queue against a real server: nothing delivered before its due time,
//! earliest due first, a blocked take sleeps until the due time without polling the
//! server, and a put due now wakes a take waiting for a later item.

mod common;

use common::{connect, connect_to, opcode, unique_path, wait_until, FaultProxy};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};
use zookeeper_mt_recipes::queues::DelayedQueue;
use zookeeper_mt_recipes::OptionalExtension;

#[test]
fn nothing_is_delivered_before_its_due_time() {
    let zk = connect();
    let queue = DelayedQueue::new(&zk, &unique_path("due")).unwrap();
    let later = queue
        .put_after(b"later", Duration::from_millis(1500))
        .unwrap();
    queue.put_after(b"now", Duration::ZERO).unwrap();
    assert_eq!(queue.try_take().unwrap().unwrap(), b"now");
    if SystemTime::now() < later {
        assert_eq!(
            queue.try_take().unwrap(),
            None,
            "delivered before its due time"
        );
    }
    let item = queue
        .take(Duration::from_secs(30))
        .optional()
        .unwrap()
        .expect("delivered once due");
    assert!(SystemTime::now() >= later, "delivered before its due time");
    assert_eq!(item, b"later");
    assert!(queue.is_empty().unwrap());
}

#[test]
fn earliest_due_first_then_put_order() {
    let zk = connect();
    let queue = DelayedQueue::new(&zk, &unique_path("order")).unwrap();
    let now = SystemTime::now();
    let ago = |secs| now - Duration::from_secs(secs);
    queue.put_at(b"a", ago(1)).unwrap();
    queue.put_at(b"b", ago(3)).unwrap();
    queue.put_at(b"c", ago(3)).unwrap();
    queue.put_at(b"d", ago(2)).unwrap();
    queue.put_at(b"epoch", SystemTime::UNIX_EPOCH).unwrap();
    let mut order = Vec::new();
    while let Some(item) = queue.try_take().unwrap() {
        order.push(String::from_utf8(item).unwrap());
    }
    assert_eq!(order, ["epoch", "b", "c", "d", "a"]);
}

/// A take blocked on an item due in two seconds sends no request until then (it sleeps
/// on its child watch with a timer at the due time), then lists once and claims.
#[test]
fn a_blocked_take_waits_for_the_due_time_without_polling() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let path = unique_path("no-polling");
    let queue = DelayedQueue::new(&zk, &path).unwrap();
    let due = queue.put_after(b"due", Duration::from_secs(2)).unwrap();
    let before = proxy.requests().len();
    let item = queue.take(Duration::from_secs(30)).optional().unwrap();
    assert_eq!(item.as_deref(), Some(&b"due"[..]));
    assert!(SystemTime::now() >= due);
    let sent: Vec<i32> = proxy.requests()[before..]
        .iter()
        .map(|r| r.opcode)
        .filter(|op| *op != opcode::PING)
        .collect();
    let listings = sent
        .iter()
        .filter(|op| [opcode::GET_CHILDREN, opcode::GET_CHILDREN2].contains(op))
        .count();
    eprintln!("requests during a take waiting 2 s for its item (opcodes, no pings): {sent:?}");
    // One listing with the watch before sleeping, one at the due time (a third only if
    // the loaded machine woke the timer early by the clock's rounding).
    assert!(listings <= 3, "polled: {sent:?}");
    assert!(sent.len() <= 8, "polled: {sent:?}");
}

/// A take waiting for an item due in a minute is woken by a put due now (the child
/// watch), and takes it.
#[test]
fn a_put_due_now_wakes_a_take_waiting_for_a_later_item() {
    let path = unique_path("wake");
    let consumer = Arc::new(DelayedQueue::new(connect(), &path).unwrap());
    consumer
        .put_after(b"in a minute", Duration::from_secs(60))
        .unwrap();
    let taker = {
        let consumer = Arc::clone(&consumer);
        thread::spawn(move || consumer.take(Duration::from_secs(30)).optional())
    };
    wait_until("the consumer is blocked", || consumer.waiting() == 1);
    let producer = DelayedQueue::new(connect(), &path).unwrap();
    producer.put_after(b"now", Duration::ZERO).unwrap();
    assert_eq!(taker.join().unwrap().unwrap().as_deref(), Some(&b"now"[..]));
    assert_eq!(consumer.len().unwrap(), 1, "the later item stays");
    assert_eq!(consumer.try_take().unwrap(), None);
}

/// A put whose reply is lost enqueues exactly once.
#[test]
fn a_put_whose_reply_is_lost_enqueues_once() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let queue = DelayedQueue::new(&zk, &unique_path("lost")).unwrap();
    proxy.cut_after(opcode::MULTI);
    queue.put_after(b"once", Duration::ZERO).unwrap();
    assert!(proxy.has_cut());
    assert_eq!(queue.len().unwrap(), 1);
    assert_eq!(queue.try_take().unwrap().unwrap(), b"once");
}
