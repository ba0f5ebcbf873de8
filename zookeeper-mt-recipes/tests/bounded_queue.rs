//! Bounded queue against a real server: the bound is exact under concurrent producers
//! (each on its own session), a full queue refuses, times out or blocks until a take,
//! and a put whose reply is lost is applied once and counted once.

mod common;

use common::{connect, connect_to, opcode, unique_path, wait_until, FaultProxy};
use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::queues::{BoundedQueue, Offer};
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

#[test]
fn a_full_queue_refuses_until_a_take() {
    let zk = connect();
    let path = unique_path("full");
    assert!(matches!(
        BoundedQueue::new(&zk, &path, 0),
        Err(RecipeError::InvalidArgument(_))
    ));
    let queue = BoundedQueue::new(&zk, &path, 2).unwrap();
    assert_eq!(queue.try_put(b"a").unwrap(), Offer::Enqueued);
    assert_eq!(queue.try_put(b"b").unwrap(), Offer::Enqueued);
    assert_eq!(queue.try_put(b"c").unwrap(), Offer::Full);
    assert!(matches!(
        queue.put(b"c", Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    ));
    assert_eq!(queue.len().unwrap(), 2, "a refused put left nothing behind");
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(queue.try_put(b"c").unwrap(), Offer::Enqueued);
    assert_eq!(queue.take(Timeout::Never).unwrap(), b"b");
    assert_eq!(queue.take(Timeout::Never).unwrap(), b"c");
    assert!(queue.is_empty().unwrap());
}

/// Eight producers, each on its own session, race for five places: exactly five win.
/// Then producers blocked on a full queue each get every item in as a consumer drains
/// it, and no listing ever shows more than the bound.
#[test]
fn concurrent_producers_never_exceed_the_bound() {
    const MAX: usize = 5;
    let path = unique_path("exact");
    let start = Arc::new(Barrier::new(8));
    let producers: Vec<_> = (0..8)
        .map(|p| {
            let (path, start) = (path.clone(), Arc::clone(&start));
            thread::spawn(move || {
                let zk = connect();
                let queue = BoundedQueue::new(&zk, &path, MAX).unwrap();
                start.wait();
                let mut won = 0;
                for i in 0..3 {
                    if queue.try_put(format!("{p}-{i}").as_bytes()).unwrap() == Offer::Enqueued {
                        won += 1;
                    }
                }
                won
            })
        })
        .collect();
    let won: usize = producers.into_iter().map(|t| t.join().unwrap()).sum();
    let observer = BoundedQueue::new(connect(), &path, MAX).unwrap();
    assert_eq!(won, MAX, "puts accepted for {MAX} places");
    assert_eq!(observer.len().unwrap(), MAX);

    // Blocking producers against one consumer.
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let path = path.clone();
            thread::spawn(move || {
                let zk = connect();
                let queue = BoundedQueue::new(&zk, &path, MAX).unwrap();
                for i in 0..5 {
                    queue
                        .put(format!("blocked {p}-{i}").as_bytes(), Timeout::Never)
                        .unwrap();
                }
            })
        })
        .collect();
    let mut seen = BTreeSet::new();
    for _ in 0..MAX + 20 {
        let len = observer.len().unwrap();
        assert!(len <= MAX, "{len} items in a queue bounded at {MAX}");
        let item = observer
            .take(Duration::from_secs(30))
            .optional()
            .unwrap()
            .expect("an item");
        assert!(seen.insert(item), "an item delivered twice");
    }
    for producer in producers {
        producer.join().unwrap();
    }
    assert_eq!(seen.len(), MAX + 20);
    assert!(observer.is_empty().unwrap());
}

#[test]
fn a_blocked_put_wakes_on_a_take_elsewhere() {
    let path = unique_path("wake");
    let consumer = BoundedQueue::new(connect(), &path, 1).unwrap();
    consumer.put(b"first", Timeout::Never).unwrap();
    let producer = Arc::new(BoundedQueue::new(connect(), &path, 1).unwrap());
    let blocked = {
        let producer = Arc::clone(&producer);
        thread::spawn(move || producer.put(b"second", Duration::from_secs(60)))
    };
    wait_until("the producer is blocked", || producer.waiting() == 1);
    assert_eq!(consumer.take(Timeout::Never).unwrap(), b"first");
    blocked.join().unwrap().unwrap();
    assert_eq!(consumer.take(Timeout::Never).unwrap(), b"second");
}

/// The put's multi (item, receipt, gate) is applied but its reply lost: the put
/// returns `Ok` having enqueued exactly one item, and the gate counted it once.
#[test]
fn a_put_whose_reply_is_lost_is_applied_once() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let path = unique_path("lost");
    let queue = BoundedQueue::new(&zk, &path, 2).unwrap();
    proxy.cut_after(opcode::MULTI);
    assert_eq!(queue.try_put(b"once").unwrap(), Offer::Enqueued);
    assert!(proxy.has_cut(), "the multi's reply was not cut");
    let observer = connect();
    assert_eq!(
        observer
            .get_children(&format!("{path}/items"))
            .unwrap()
            .len(),
        2
    ); // item + receipts
    assert_eq!(observer.exists(&path).unwrap().unwrap().version, 1);
    assert_eq!(queue.try_put(b"twice").unwrap(), Offer::Enqueued);
    assert_eq!(queue.try_put(b"thrice").unwrap(), Offer::Full);
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"once"[..]));
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"twice"[..]));
    assert_eq!(queue.try_take().unwrap(), None);
}

/// At the ends of the server's counters, on a server started from a crafted data
/// directory: a gate at data version -1 ("any version" to `setData`, ZOOKEEPER-4743) is
/// never used as a CAS, so six producers racing for one place still get exactly one;
/// and a put whose item is numbered past the items counter's end restarts the empty
/// directory and is counted once.
#[test]
fn the_bound_holds_at_the_counters_ends() {
    let server = zk_harness::Server::start_crafted(
        &zk_harness::Crafted::new()
            .node("/gate", b"", -1)
            .node("/end", b"", 0)
            .dir("/end/items", i32::MAX - 1),
    )
    .expect("crafted server");
    let hosts = server.connect_string();
    let start = Arc::new(Barrier::new(6));
    let racers: Vec<_> = (0..6)
        .map(|i| {
            let (hosts, start) = (hosts.clone(), Arc::clone(&start));
            thread::spawn(move || {
                let zk = connect_to(&hosts);
                let queue = BoundedQueue::new(&zk, "/gate", 1).unwrap();
                start.wait();
                queue.try_put(format!("racer {i}").as_bytes()).unwrap()
            })
        })
        .collect();
    let won = racers
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|offer| *offer == Offer::Enqueued)
        .count();
    let zk = connect_to(&hosts);
    let gate = BoundedQueue::new(&zk, "/gate", 1).unwrap();
    assert_eq!(won, 1, "places taken at gate version -1");
    assert_eq!(gate.len().unwrap(), 1);
    assert!(
        zk.exists("/gate").unwrap().unwrap().version >= 1,
        "-1 was bumped past"
    );

    let end = BoundedQueue::new(&zk, "/end", 2).unwrap();
    assert_eq!(end.try_put(b"past the end").unwrap(), Offer::Enqueued);
    assert_eq!(end.len().unwrap(), 1, "the out-of-range item was removed");
    assert_eq!(end.try_put(b"second").unwrap(), Offer::Enqueued);
    assert_eq!(end.try_put(b"third").unwrap(), Offer::Full);
    assert_eq!(
        end.try_take().unwrap().as_deref(),
        Some(&b"past the end"[..])
    );
    assert_eq!(end.try_take().unwrap().as_deref(), Some(&b"second"[..]));
    drop((gate, end));
    zk.close().unwrap();
}
