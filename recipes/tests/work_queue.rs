//! Locking work queue against real servers: FIFO take/complete, release and RAII
//! give-back, ownership-checked completion, exclusive concurrent consumers, the herd
//! count, and a consumer killed (SIGKILL, another process) giving its item back.

mod common;

use common::{
    assert_no_leftover_contexts, child_session, connect, connect_to, opcode, opcodes_on,
    report_and_hang, unique_path, wait_until, Child, FaultProxy,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper::Timeout;
use zookeeper::{CreateMode, ZooKeeper};
use zookeeper_recipes::work_queue::WorkQueue;
use zookeeper_recipes::OptionalExtension;
use zookeeper_recipes::RecipeError;

/// Set in a child process started by `consumer_killed_mid_item_gives_it_back`.
const CHILD_ENV: &str = "RECIPES_WORK_QUEUE_TEST_CHILD";
/// Session timeout of the child consumer.
const CHILD_SESSION: Duration = Duration::from_secs(4);

/// Waits until `n` threads are blocked in `take` across `queues`.
fn wait_until_blocked(queues: &[Arc<WorkQueue>], n: usize) {
    wait_until("consumers blocked", || {
        queues.iter().map(|q| q.waiting()).sum::<usize>() >= n
    });
}

#[test]
fn work_queue_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<WorkQueue>();
    send_sync::<zookeeper_recipes::work_queue::WorkItem>();
}

#[test]
fn take_and_complete_in_fifo_order() {
    let zk = connect();
    let queue = WorkQueue::new(&zk, &unique_path("fifo")).unwrap();
    assert!(queue.try_take().unwrap().is_none());
    for i in 0..5 {
        queue.put(format!("link {i}").as_bytes()).unwrap();
    }
    assert_eq!(queue.len().unwrap(), 5);
    for i in 0..5 {
        let item = queue.take(Timeout::Never).unwrap();
        assert_eq!(item.data(), format!("link {i}").as_bytes());
        assert_eq!(queue.in_progress().unwrap(), 1);
        assert!(item.is_held().unwrap());
        item.complete().unwrap();
        assert_eq!(queue.in_progress().unwrap(), 0);
    }
    assert!(queue.is_empty().unwrap());

    let started = Instant::now();
    assert!(queue
        .take(Duration::from_millis(300))
        .optional()
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(queue.waiters_in_line().unwrap(), 0, "left the line");
}

#[test]
fn release_and_drop_give_items_back() {
    let path = unique_path("release");
    let first = WorkQueue::new(&connect(), &path).unwrap();
    let second = WorkQueue::new(&connect(), &path).unwrap();
    first.put(b"only item").unwrap();

    let item = first.try_take().unwrap().expect("an item");
    assert!(second.try_take().unwrap().is_none(), "it is locked");
    item.release().unwrap();

    let item = second.try_take().unwrap().expect("released");
    assert_eq!(item.data(), b"only item");
    drop(item); // an unfinished item is given back
    let item = first
        .take(Duration::from_secs(5))
        .optional()
        .unwrap()
        .expect("dropped item came back");
    item.complete().unwrap();
    assert!(first.is_empty().unwrap());
    assert_eq!(first.in_progress().unwrap(), 0);
}

#[test]
fn complete_is_refused_once_the_claim_is_lost() {
    let zk = connect();
    let path = unique_path("lost");
    let first = WorkQueue::new(&zk, &path).unwrap();
    let second = WorkQueue::new(&connect(), &path).unwrap();
    first.put(b"contested").unwrap();
    let stale = first.try_take().unwrap().unwrap();

    // The lock disappears behind the holder's back and someone else claims the item.
    let locks = zk.get_children(&format!("{path}/locks")).unwrap();
    zk.delete(&format!("{path}/locks/{}", locks[0]), None)
        .unwrap();
    assert!(!stale.is_held().unwrap());
    let fresh = second.try_take().unwrap().expect("free again");
    assert!(matches!(stale.complete(), Err(RecipeError::Lost(_))));
    assert_eq!(
        first.len().unwrap(),
        1,
        "the refused completion removed nothing"
    );
    assert!(fresh.is_held().unwrap());
    fresh.complete().unwrap();
    assert!(first.is_empty().unwrap());
}

#[test]
fn concurrent_consumers_process_each_item_once() {
    const ITEMS: usize = 120;
    const CONSUMERS: usize = 5;
    let path = unique_path("concurrent");
    let producer = WorkQueue::new(&connect(), &path).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let processed = Arc::new(Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let queue = WorkQueue::new(&connect(), &path).unwrap();
            let done = Arc::clone(&done);
            let processed = Arc::clone(&processed);
            thread::spawn(move || {
                while done.load(Ordering::SeqCst) < ITEMS {
                    let Some(item) = queue.take(Duration::from_millis(300)).optional().unwrap()
                    else {
                        continue;
                    };
                    let data = String::from_utf8(item.data().to_vec()).unwrap();
                    item.complete().unwrap();
                    processed.lock().unwrap().push(data);
                    done.fetch_add(1, Ordering::SeqCst);
                }
                queue.stats()
            })
        })
        .collect();
    for i in 0..ITEMS {
        producer.put(format!("{i:04}").as_bytes()).unwrap();
    }
    let stats: Vec<_> = consumers.into_iter().map(|c| c.join().unwrap()).collect();
    let processed = processed.lock().unwrap();
    assert_eq!(processed.len(), ITEMS, "an item was processed twice");
    let distinct: BTreeSet<_> = processed.iter().cloned().collect();
    let expected: BTreeSet<_> = (0..ITEMS).map(|i| format!("{i:04}")).collect();
    assert_eq!(distinct, expected);
    assert_eq!(stats.iter().map(|s| s.claims).sum::<u64>(), ITEMS as u64);
    assert!(producer.is_empty().unwrap());
    assert_eq!(producer.in_progress().unwrap(), 0);
}

#[test]
fn idle_consumers_are_not_herded() {
    const CONSUMERS: usize = 8;
    const PUTS: usize = 24;
    let path = unique_path("herd");
    let producer = WorkQueue::new(&connect(), &path).unwrap();
    let sessions: Vec<ZooKeeper> = (0..CONSUMERS).map(|_| connect()).collect();
    let queues: Vec<Arc<WorkQueue>> = sessions
        .iter()
        .map(|zk| Arc::new(WorkQueue::new(zk, &path).unwrap()))
        .collect();
    let (done_tx, done_rx) = mpsc::channel();
    let consumers: Vec<_> = queues
        .iter()
        .map(|queue| {
            let queue = Arc::clone(queue);
            let done_tx = done_tx.clone();
            thread::spawn(move || loop {
                let item = queue
                    .take(Duration::from_secs(60))
                    .optional()
                    .unwrap()
                    .expect("an item within 60 s");
                let stop = item.data() == b"stop";
                item.complete().unwrap();
                if stop {
                    return;
                }
                done_tx.send(()).unwrap();
            })
        })
        .collect();

    // Each put finds all consumers idle: blocked in take, one at the head of the line.
    wait_until_blocked(&queues, CONSUMERS);
    for i in 0..PUTS {
        producer.put(format!("link {i}").as_bytes()).unwrap();
        done_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_until_blocked(&queues, CONSUMERS);
    }
    let stats: Vec<_> = queues.iter().map(|q| q.stats()).collect();

    for _ in 0..CONSUMERS {
        producer.put(b"stop").unwrap();
    }
    for consumer in consumers {
        consumer.join().unwrap();
    }
    // No watch accumulates: once the values are gone, nothing is left registered.
    drop(queues);
    for zk in &sessions {
        assert_no_leftover_contexts(zk);
    }

    let wakeups: u64 = stats.iter().map(|s| s.wakeups).sum();
    let notifications: u64 = stats.iter().map(|s| s.notifications).sum();
    let claims: u64 = stats.iter().map(|s| s.claims).sum();
    let herd = (PUTS * CONSUMERS) as u64;
    eprintln!(
        "{PUTS} puts, {CONSUMERS} idle consumers: {wakeups} wake-ups, {notifications} \
         notifications (a herd: >= {herd}); per consumer: {:?}",
        stats
            .iter()
            .map(|s| (s.wakeups, s.claims))
            .collect::<Vec<_>>()
    );
    assert_eq!(claims, PUTS as u64);
    // Per put: the head wakes, its successor wakes, the head wakes on completion.
    assert!(
        wakeups <= 4 * PUTS as u64,
        "{wakeups} wake-ups for {PUTS} puts"
    );
    assert!(
        wakeups * 2 < herd,
        "{wakeups} wake-ups is herd-like ({herd})"
    );
    assert!(notifications * 2 < herd);
}

#[test]
fn consumer_killed_mid_item_gives_it_back() {
    let path = unique_path("killed");
    let queue = WorkQueue::new(&connect(), &path).unwrap();
    queue.put(b"http://example.com/slow-page").unwrap();

    let mut child = Child::start("child_consumer", CHILD_ENV, &path);
    let taken = child.wait_for_marker("TOOK ");
    assert_eq!(taken, "http://example.com/slow-page");
    assert!(queue.try_take().unwrap().is_none(), "the child holds it");
    assert_eq!(queue.in_progress().unwrap(), 1);

    let killed_at = Instant::now();
    child.kill(); // SIGKILL mid-item
    let item = queue
        .take(Duration::from_secs(30))
        .optional()
        .unwrap()
        .expect("the item came back");
    let waited = killed_at.elapsed();
    eprintln!("item back {waited:?} after SIGKILL (child session timeout {CHILD_SESSION:?})");
    assert_eq!(item.data(), b"http://example.com/slow-page");
    assert!(
        waited < CHILD_SESSION + Duration::from_secs(4),
        "took {waited:?}"
    );
    item.complete().unwrap();
    assert!(queue.is_empty().unwrap());
}

/// Not a test of its own: the child process of `consumer_killed_mid_item_gives_it_back`
/// (does nothing unless the environment variable is set). It takes an item, reports it
/// and hangs mid-item.
#[test]
fn child_consumer() {
    let Some((zk, path)) = child_session(CHILD_ENV, CHILD_SESSION) else {
        return;
    };
    let queue = WorkQueue::new(&zk, &path).unwrap();
    let item = queue.take(Timeout::Never).unwrap();
    report_and_hang(&format!("TOOK {}", String::from_utf8_lossy(item.data())));
}

/// Items numbered past the item directory's counter end take no part: never claimed
/// while their put is in progress (receipt present), removed once it is an orphan.
#[test]
fn items_past_the_counters_end_take_no_part() {
    let zk = connect();
    let path = unique_path("counter-end");
    let queue = WorkQueue::new(&zk, &path).unwrap();
    queue.put(b"in range").unwrap();
    let peer = connect();
    let id = zookeeper_recipes::util::guid();
    let crafted = format!("{path}/items/item-{id}--2147483648");
    peer.create(&crafted, b"wrapped", CreateMode::Persistent)
        .unwrap();
    let receipt = format!("{path}/receipts/{id}");
    peer.create(&receipt, b"", CreateMode::Ephemeral).unwrap();
    assert_eq!(queue.len().unwrap(), 1);
    let item = queue.try_take().unwrap().expect("the in-range item");
    assert_eq!(item.data(), b"in range");
    item.complete().unwrap();
    assert!(
        queue.try_take().unwrap().is_none(),
        "a wrapped item was claimed"
    );
    assert!(zk.exists(&crafted).unwrap().is_some());
    peer.close().unwrap();
    assert!(queue.try_take().unwrap().is_none());
    assert!(zk.exists(&crafted).unwrap().is_none(), "orphan left behind");
}

/// Lost replies of a claim, a completion and a release are resolved by reading again
/// only after a `sync`, so a member that has not applied the write yet cannot mislead
/// the consumer (an orphan lock, or a completion reported lost).
#[test]
fn lost_replies_are_resolved_after_a_sync() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer_zk = connect_to(&proxy.addr);
    let path = unique_path("synced");
    let consumer = WorkQueue::new(&consumer_zk, &path).unwrap();
    let producer = WorkQueue::new(&connect(), &path).unwrap();
    producer.put(b"one").unwrap();
    producer.put(b"two").unwrap();
    // Sync before the read that decides, on the connection after each cut.
    let check = |what: &str| {
        assert!(proxy.has_cut(), "{what}: no cut");
        let requests = proxy.requests();
        let last = requests.iter().map(|r| r.connection).max().unwrap();
        let after = opcodes_on(&requests, last);
        let sync = after.iter().position(|op| *op == opcode::SYNC);
        let read = after.iter().position(|op| *op == opcode::GET_DATA);
        assert!(
            sync.is_some() && sync < read,
            "{what}: no sync before the recovery read: {after:?}"
        );
    };

    proxy.cut_after(opcode::MULTI);
    let first = consumer.try_take().unwrap().expect("claimed");
    check("claim");
    assert!(first.is_held().unwrap());
    proxy.cut_after(opcode::MULTI);
    first
        .complete()
        .expect("the applied completion is recognised");
    check("complete");

    let second = consumer.try_take().unwrap().expect("claimed");
    proxy.cut_after(opcode::MULTI);
    second.release().expect("the applied release is recognised");
    check("release");
    assert_eq!(producer.len().unwrap(), 1);
    assert_eq!(producer.in_progress().unwrap(), 0, "no orphan lock");
}

/// Dropping an unfinished item while the server is unreachable returns at once (it
/// used to wait out the reconnect timeout, twice the session timeout); the item is
/// released once the connection is back.
#[test]
fn dropping_an_item_does_not_wait_for_the_server() {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer_zk = connect_to(&proxy.addr);
    let path = unique_path("cheap-drop");
    let consumer = WorkQueue::new(&consumer_zk, &path).unwrap();
    let other = WorkQueue::new(&connect(), &path).unwrap();
    other.put(b"half done").unwrap();
    let item = consumer.try_take().unwrap().expect("claimed");
    proxy.cut();
    let (dropped_tx, dropped) = mpsc::channel();
    thread::spawn(move || {
        drop(item);
        dropped_tx.send(()).unwrap();
    });
    dropped
        .recv_timeout(Duration::from_secs(5))
        .expect("dropping the item blocked on the server");
    assert!(
        other.try_take().unwrap().is_none(),
        "still locked meanwhile"
    );
    proxy.restore();
    let item = other
        .take(Duration::from_secs(30))
        .optional()
        .unwrap()
        .expect("released after the reconnection");
    assert_eq!(item.data(), b"half done");
    item.complete().unwrap();
}
