//! FIFO queue against real servers: ordering, blocking with timeout, concurrent consumers,
//! and puts surviving a server kill + restart without duplicates or losses.

mod common;

use common::{
    assert_no_leftover_contexts, connect, connect_to, opcode, opcodes_on, unique_path, wait_until,
    FaultProxy,
};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::CreateMode;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::OptionalExtension;

/// Waits until `n` threads are blocked in `take` on `queue`.
fn wait_until_blocked(queue: &Queue, n: usize) {
    wait_until("consumers blocked", || queue.waiting() >= n);
}

#[test]
fn queue_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Queue>();
}

#[test]
fn items_come_out_in_put_order() {
    let zk = connect();
    let queue = Queue::new(&zk, &unique_path("order")).unwrap();
    assert!(queue.is_empty().unwrap());
    for i in 0..12 {
        queue.put(format!("queue item {i}").as_bytes()).unwrap();
    }
    assert_eq!(queue.len().unwrap(), 12);
    // Alternate the non-blocking and blocking forms: both follow the sequence order.
    for i in 0..12 {
        let expected = format!("queue item {i}").into_bytes();
        let got = if i % 2 == 0 {
            queue.try_take().unwrap().unwrap()
        } else {
            queue.take(Timeout::Never).unwrap()
        };
        assert_eq!(got, expected);
    }
    assert_eq!(queue.try_take().unwrap(), None);
    assert!(queue.is_empty().unwrap());
    // Binary and empty items round-trip.
    queue.put(&[0, 255, 10, 0]).unwrap();
    queue.put(b"").unwrap();
    assert_eq!(queue.try_take().unwrap().unwrap(), vec![0, 255, 10, 0]);
    assert_eq!(queue.try_take().unwrap().unwrap(), Vec::<u8>::new());
}

#[test]
fn take_times_out_then_wakes_on_put() {
    let zk = connect();
    let path = unique_path("blocking");
    let queue = Arc::new(Queue::new(&zk, &path).unwrap());

    let started = Instant::now();
    assert_eq!(
        queue.take(Duration::from_millis(300)).optional().unwrap(),
        None
    );
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");

    // A consumer blocks (on another session), then a put wakes it.
    let consumer_zk = connect();
    let consumer_queue = Arc::new(Queue::new(&consumer_zk, &path).unwrap());
    let (done, result) = mpsc::channel();
    let consumer = {
        let consumer_queue = Arc::clone(&consumer_queue);
        thread::spawn(move || {
            let got = consumer_queue
                .take(Duration::from_secs(20))
                .optional()
                .unwrap();
            done.send(()).unwrap();
            (got, consumer_queue.wakeups())
        })
    };
    wait_until_blocked(&consumer_queue, 1);
    assert!(
        result.try_recv().is_err(),
        "take returned before anything was put"
    );
    let put_at = Instant::now();
    queue.put(b"wake up").unwrap();
    result.recv_timeout(Duration::from_secs(10)).unwrap();
    let (got, wakeups) = consumer.join().unwrap();
    assert_eq!(got.as_deref(), Some(&b"wake up"[..]));
    assert!(wakeups >= 1, "the consumer was not woken by its watch");
    assert!(put_at.elapsed() < Duration::from_secs(5));

    // Several threads blocked on one shared Queue value share its one watch.
    let (sent, received) = mpsc::channel();
    let takers: Vec<_> = (0..3)
        .map(|_| {
            let queue = Arc::clone(&queue);
            let sent = sent.clone();
            thread::spawn(move || {
                let item = queue.take(Duration::from_secs(20)).optional().unwrap();
                sent.send(item).unwrap();
            })
        })
        .collect();
    wait_until_blocked(&queue, 3);
    let other = Queue::new(&consumer_zk, &path).unwrap();
    for i in 0..3 {
        other.put(format!("shared {i}").as_bytes()).unwrap();
    }
    let mut got: Vec<Vec<u8>> = (0..3)
        .map(|_| {
            received
                .recv_timeout(Duration::from_secs(10))
                .unwrap()
                .unwrap()
        })
        .collect();
    got.sort();
    assert_eq!(got, [b"shared 0", b"shared 1", b"shared 2"]);
    for taker in takers {
        taker.join().unwrap();
    }
    // A timed-out take leaves its armed watch to the value, which removes it on drop.
    assert_eq!(
        other.take(Duration::from_millis(50)).optional().unwrap(),
        None
    );
    drop((queue, consumer_queue, other));
    assert_no_leftover_contexts(&zk);
    assert_no_leftover_contexts(&consumer_zk);
}

#[test]
fn concurrent_consumers_never_get_the_same_item() {
    const ITEMS: usize = 200;
    let path = unique_path("concurrent");
    let producer_zk = connect();
    let producer = Queue::new(&producer_zk, &path).unwrap();
    let taken = Arc::new(AtomicUsize::new(0));

    // Four consumers on their own sessions, plus two threads sharing one Queue value.
    let shared_zk = connect();
    let shared_queue = Arc::new(Queue::new(&shared_zk, &path).unwrap());
    let mut consumers = Vec::new();
    for c in 0..6 {
        let taken = Arc::clone(&taken);
        let (queue, own) = if c < 4 {
            (Arc::new(Queue::new(connect(), &path).unwrap()), true)
        } else {
            (Arc::clone(&shared_queue), false)
        };
        consumers.push(thread::spawn(move || {
            let mut got = Vec::new();
            while taken.load(Ordering::SeqCst) < ITEMS {
                if let Some(item) = queue.take(Duration::from_millis(200)).optional().unwrap() {
                    taken.fetch_add(1, Ordering::SeqCst);
                    got.push(String::from_utf8(item).unwrap());
                }
            }
            (own, got)
        }));
    }
    for i in 0..ITEMS {
        producer.put(format!("{i:05}").as_bytes()).unwrap();
    }
    let mut all = Vec::new();
    for consumer in consumers {
        let (own, got) = consumer.join().unwrap();
        if own {
            // A consumer with its own Queue value sees items in put order.
            let mut sorted = got.clone();
            sorted.sort();
            assert_eq!(got, sorted, "one consumer's items out of order");
        }
        all.extend(got);
    }
    assert_eq!(all.len(), ITEMS, "an item was delivered twice or lost");
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    let expected: BTreeSet<_> = (0..ITEMS).map(|i| format!("{i:05}")).collect();
    assert_eq!(distinct, expected);
    assert_eq!(producer.try_take().unwrap(), None);
}

#[test]
fn puts_survive_a_server_kill_without_duplicates_or_losses() {
    let hosts = zk_harness::test_hosts().unwrap();
    let Some(server) = hosts.server() else {
        eprintln!("external ZK_TEST_HOSTS: cannot kill the server, skipping");
        return;
    };
    const PRODUCERS: usize = 3;
    const PUTS: usize = 60;
    let connect_string = hosts.connect_string();
    let path = "/recipes-tests/queue/connection-loss";
    Queue::new(connect_to(&connect_string), path).unwrap();

    let (acked_tx, acked_rx) = mpsc::channel::<()>();
    let outcomes = Arc::new(Mutex::new(HashMap::new()));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let zk = connect_to(&connect_string);
            let outcomes = Arc::clone(&outcomes);
            let acked_tx = acked_tx.clone();
            thread::spawn(move || {
                let queue = Queue::new(&zk, path)
                    .unwrap()
                    .with_reconnect_timeout(Duration::from_secs(40));
                let mut longest = Duration::ZERO;
                for i in 0..PUTS {
                    let item = format!("p{p}-{i:03}");
                    let started = Instant::now();
                    let result = queue.put(item.as_bytes());
                    longest = longest.max(started.elapsed());
                    let ok = result.is_ok();
                    if let Err(e) = &result {
                        eprintln!("put {item} failed: {e}");
                    }
                    outcomes.lock().unwrap().insert(item, ok);
                    let _ = acked_tx.send(());
                }
                longest
            })
        })
        .collect();
    drop(acked_tx);

    // Kill the server while puts are in flight, once some have been acknowledged.
    for _ in 0..20 {
        acked_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    server.kill();
    // Stay down long enough that the puts in flight must wait the outage out (a restart
    // alone can take less than the 500 ms checked below).
    thread::sleep(Duration::from_secs(1));
    server.restart().unwrap();

    let longest = producers
        .into_iter()
        .map(|p| p.join().unwrap())
        .max()
        .unwrap();
    assert!(
        longest > Duration::from_millis(500),
        "no put spanned the outage ({longest:?})"
    );

    let consumer = Queue::new(connect_to(&connect_string), path).unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    while let Some(item) = consumer.try_take().unwrap() {
        *seen.entry(String::from_utf8(item).unwrap()).or_default() += 1;
    }
    let outcomes = outcomes.lock().unwrap();
    assert_eq!(outcomes.len(), PRODUCERS * PUTS);
    for (item, count) in &seen {
        assert_eq!(*count, 1, "{item} was enqueued {count} times");
        assert!(outcomes.contains_key(item), "unknown item {item}");
    }
    for (item, acked) in outcomes.iter() {
        if *acked {
            assert!(seen.contains_key(item), "acknowledged put {item} was lost");
        }
    }
    let acked = outcomes.values().filter(|ok| **ok).count();
    eprintln!(
        "{acked} of {} puts acknowledged, {} items found, longest put {longest:?}",
        outcomes.len(),
        seen.len()
    );
}

/// Items numbered past the queue node's counter end take no part: a peer's put in
/// progress (its receipt exists) is skipped, never delivered (it would break FIFO: the
/// server repeats 2147483647 and wraps to -2147483648 there); once that peer's session
/// is gone (receipts with it) a consumer removes the orphans.
#[test]
fn items_past_the_counters_end_are_never_delivered() {
    let zk = connect();
    let path = unique_path("counter-end");
    let queue = Queue::new(&zk, &path).unwrap();
    queue.put(b"first").unwrap();
    // A peer whose puts got numbers past the end (names are just strings: crafted).
    let peer = connect();
    let ids = [
        zookeeper_mt_recipes::nodes::guid(),
        zookeeper_mt_recipes::nodes::guid(),
    ];
    let crafted = [
        format!("{path}/item-{}-2147483647", ids[0]),
        format!("{path}/item-{}--2147483648", ids[1]),
    ];
    for (id, item) in ids.iter().zip(&crafted) {
        peer.create(item, b"wrapped", CreateMode::Persistent)
            .unwrap();
        let receipt = format!("{path}/receipts/{id}");
        peer.create(&receipt, b"", CreateMode::Ephemeral).unwrap();
    }
    queue.put(b"second").unwrap();
    assert_eq!(queue.len().unwrap(), 2, "only in-range items count");
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"first"[..]));
    assert_eq!(
        queue
            .take(Duration::from_secs(5))
            .optional()
            .unwrap()
            .as_deref(),
        Some(&b"second"[..])
    );
    assert_eq!(
        queue.try_take().unwrap(),
        None,
        "a wrapped item was delivered"
    );
    for item in &crafted {
        assert!(
            zk.exists(item).unwrap().is_some(),
            "a put in progress keeps it"
        );
    }
    // The peer dies: its receipts go, the next listing removes the orphans.
    peer.close().unwrap();
    assert_eq!(queue.try_take().unwrap(), None);
    for item in &crafted {
        assert!(zk.exists(item).unwrap().is_none(), "orphan {item} left");
    }
    drop(queue);
    assert_no_leftover_contexts(&zk);
}

/// The reply to a take's delete is lost and the connection stays down past the take's
/// deadline: the item is returned all the same once the outcome is known (it used to be
/// dropped with `Err`, gone from the queue: lost).
#[test]
fn an_item_whose_delete_was_sent_is_never_lost() {
    let proxy = zk_harness::FaultProxy::start(zk_harness::shared_test_connect_string()).unwrap();
    let consumer_zk = connect_to(&proxy.connect_string());
    let path = unique_path("lost-delete");
    let consumer = Queue::new(&consumer_zk, &path).unwrap();
    let producer = Queue::new(connect(), &path).unwrap();
    producer.put(b"precious").unwrap();

    // Refuse reconnection before the cut fires, so the consumer cannot learn the
    // delete's outcome until `unblock` (the open connection keeps working until then).
    proxy.block();
    proxy.cut_after_matching(1, |r| r.op == zk_harness::OpCode::MULTI);
    let (done_tx, done) = mpsc::channel();
    let taker = thread::spawn(move || {
        let got = consumer.take(Duration::from_millis(300)).optional();
        done_tx.send(()).unwrap();
        got
    });
    proxy.wait_for_fired(1, Duration::from_secs(30)).unwrap();
    // Keep it down well past the take's deadline.
    assert!(
        done.recv_timeout(Duration::from_secs(2)).is_err(),
        "the take gave up while the outcome of its delete was unknown"
    );
    proxy.unblock();
    let got = taker.join().unwrap().unwrap();
    assert_eq!(got.as_deref(), Some(&b"precious"[..]), "the item was lost");
    assert!(producer.is_empty().unwrap());
}

/// A consumer's take is held until another consumer has taken the same item, then its
/// connection is cut: the item is gone when it looks again, and not by its own take. It
/// must not return the item too (it used to: a plain delete could not tell whose delete
/// won, so both consumers got it).
#[test]
fn an_item_another_consumer_took_is_not_delivered_twice() {
    let proxy = zk_harness::FaultProxy::start(zk_harness::shared_test_connect_string()).unwrap();
    let slow_zk = connect_to(&proxy.connect_string());
    let path = unique_path("whose-take");
    let slow = Queue::new(&slow_zk, &path).unwrap();
    let fast = Queue::new(connect(), &path).unwrap();
    fast.put(b"only").unwrap();

    let (seen_tx, seen) = mpsc::channel();
    let (open_tx, open) = mpsc::channel::<()>();
    let (seen_tx, open) = (Mutex::new(seen_tx), Mutex::new(open));
    // Hold the slow consumer's take (a multi) until the fast one has the item; then
    // forward it (it fails: the item is gone) and cut before its reply.
    proxy.cut_after_matching(1, move |r| {
        if r.op != zk_harness::OpCode::MULTI {
            return false;
        }
        seen_tx.lock().unwrap().send(()).unwrap();
        let _ = open.lock().unwrap().recv();
        true
    });
    let taker = thread::spawn(move || slow.take(Duration::from_secs(3)).optional());
    seen.recv_timeout(Duration::from_secs(30))
        .expect("the slow take was sent");
    assert_eq!(fast.try_take().unwrap().as_deref(), Some(&b"only"[..]));
    open_tx.send(()).unwrap();
    proxy.wait_for_fired(1, Duration::from_secs(30)).unwrap();
    let slow_got = taker.join().unwrap().unwrap();
    assert_eq!(slow_got, None, "the item was delivered to both consumers");
}

/// After a lost take reply the consumer reads again only after a `sync`, so a member
/// that has not applied the delete yet cannot make it conclude wrongly.
#[test]
fn the_recovery_read_after_a_lost_take_is_synced() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer_zk = connect_to(&proxy.addr);
    let path = unique_path("synced");
    let consumer = Queue::new(&consumer_zk, &path).unwrap();
    // Put on another session: this one's pipelined receipt delete must not take the cut.
    Queue::new(connect(), &path).unwrap().put(b"item").unwrap();
    proxy.cut_after(opcode::MULTI); // the take: delete + take marker
    assert_eq!(consumer.try_take().unwrap().as_deref(), Some(&b"item"[..]));
    assert!(proxy.has_cut());
    let requests = proxy.requests();
    let last = requests.iter().map(|r| r.connection).max().unwrap();
    let after = opcodes_on(&requests, last);
    let sync = after.iter().position(|op| *op == opcode::SYNC);
    let read = after
        .iter()
        .position(|op| [opcode::EXISTS, opcode::GET_DATA].contains(op));
    assert!(
        sync.is_some() && sync < read,
        "no sync before the recovery read: {after:?} (all: {requests:?})"
    );
    assert_eq!(consumer.try_take().unwrap(), None, "delivered once");
}

/// A thread riding out a lost connection while registering the queue's watch must not
/// hold the watch's lock: another thread's `take_timeout` returns at its own deadline
/// (it used to wait for the first thread's reconnect timeout).
#[test]
fn a_take_riding_out_a_reconnect_blocks_no_other_take() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer_zk = connect_to(&proxy.addr);
    let path = unique_path("no-lock-across-reconnect");
    let queue = Arc::new(
        Queue::new(&consumer_zk, &path)
            .unwrap()
            .with_reconnect_timeout(Duration::from_secs(60)),
    );
    queue.try_take().unwrap(); // creates nothing, but proves the session works
    proxy.cut();
    let patient = {
        let queue = Arc::clone(&queue);
        thread::spawn(move || queue.take(Timeout::Never))
    };
    // Let the patient take reach its watch registration (nothing signals it; if it has
    // not, the other take registers instead and the test proves less, never fails).
    thread::sleep(Duration::from_millis(200));
    let (done_tx, done) = mpsc::channel();
    let impatient = {
        let queue = Arc::clone(&queue);
        thread::spawn(move || {
            let got = queue.take(Duration::from_millis(300)).optional();
            done_tx.send(()).unwrap();
            got
        })
    };
    done.recv_timeout(Duration::from_secs(15))
        .expect("take_timeout blocked behind another thread's reconnect");
    assert!(matches!(impatient.join().unwrap(), Ok(None)));
    proxy.restore();
    Queue::new(connect(), &path).unwrap().put(b"late").unwrap();
    assert_eq!(patient.join().unwrap().unwrap(), b"late");
}
