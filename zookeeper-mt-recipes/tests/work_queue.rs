//! Locking work queue against real servers: FIFO take/complete, release and RAII
//! give-back, ownership-checked completion, exclusive concurrent consumers, the herd
//! count, and a consumer killed (SIGKILL, another process) giving its item back.

mod common;

use common::{
    assert_no_leftover_contexts, child_session, connect, connect_to, opcode, opcodes_on,
    report_and_hang, unique_path, wait_until, Child, FaultProxy,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::Timeout;
use zookeeper_mt::{CreateMode, ZooKeeper};
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

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
    send_sync::<zookeeper_mt_recipes::queues::WorkItem>();
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
    let first = WorkQueue::new(connect(), &path).unwrap();
    let second = WorkQueue::new(connect(), &path).unwrap();
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
    let second = WorkQueue::new(connect(), &path).unwrap();
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
    let producer = WorkQueue::new(connect(), &path).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let processed = Arc::new(Mutex::new(Vec::new()));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let queue = WorkQueue::new(connect(), &path).unwrap();
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
    let producer = WorkQueue::new(connect(), &path).unwrap();
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
    let queue = WorkQueue::new(connect(), &path).unwrap();
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
    let id = zookeeper_mt_recipes::nodes::guid();
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
    let producer = WorkQueue::new(connect(), &path).unwrap();
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
    let other = WorkQueue::new(connect(), &path).unwrap();
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

// ---------------------------------------------------------------------------------------
// Async forms: dropped at any await point, nothing is left behind, no item lost or
// handed out twice.
// ---------------------------------------------------------------------------------------

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Records that it was woken, for [`step`].
struct Woken {
    woken: AtomicBool,
    thread: thread::Thread,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Polls `future` up to `polls` times, each poll (after the first) once the last one
/// woke it, so each poll takes it past one await point; stops early once `waiting()`
/// says it waits for a change nobody makes. Its output if it completed.
fn step<T>(
    future: &mut Boxed<'_, T>,
    polls: usize,
    mut waiting: impl FnMut() -> bool,
) -> Option<T> {
    let woken = Arc::new(Woken {
        woken: AtomicBool::new(false),
        thread: thread::current(),
    });
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    for poll in 0..polls {
        if poll > 0 {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !woken.woken.swap(false, Ordering::Acquire) {
                if waiting() {
                    return None;
                }
                assert!(Instant::now() < deadline, "not woken after poll {poll}");
                thread::park_timeout(Duration::from_millis(20));
            }
        }
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
    }
    None
}

#[test]
fn async_work_queue_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let queue = WorkQueue::new(connect(), &unique_path("async-send")).unwrap();
    send(&queue.take_async(Timeout::Never));
    send(&queue.try_take_async());
    send(&queue.put_async(b"x"));
    send(&queue.put_all_async([b"x".to_vec()]));
    send(&queue.len_async());
    send(&queue.is_empty_async());
    send(&queue.in_progress_async());
    send(&queue.waiters_in_line_async());
    send(&queue.dead_letters_async());
    queue.put(b"x").unwrap();
    let item = queue.try_take().unwrap().unwrap();
    send(&item.is_held_async());
    let completing = item.complete_async();
    send(&completing);
    zk_harness::executor::block_on(completing).unwrap();
    let item = {
        queue.put(b"y").unwrap();
        queue.try_take().unwrap().unwrap()
    };
    let releasing = item.release_async();
    send(&releasing);
    zk_harness::executor::block_on(releasing).unwrap();
}

/// A take dropped after any number of steps, with items in the queue: each item ends in
/// the caller's hands (completed here) or available again (a claim the dropped take had
/// sent is released in the background); none stays locked, none is handed out twice.
#[test]
fn an_async_take_dropped_at_any_step_leaves_each_item_once() {
    let zk = connect();
    let path = unique_path("async-steps");
    let producer = WorkQueue::new(connect(), &path).unwrap();
    let mut put = 0;
    for _ in 0..3 {
        producer.put(format!("{put:03}").as_bytes()).unwrap();
        put += 1;
    }
    let mut delivered = Vec::new();
    let mut completed_at = None;
    for polls in 0..30 {
        // A fresh value each time: the take lists the queue first.
        let consumer = WorkQueue::new(&zk, &path).unwrap();
        let mut take: Boxed<'_, _> = Box::pin(consumer.take_async(Duration::from_secs(30)));
        let outcome = step(&mut take, polls, || false);
        drop(take);
        if let Some(item) = outcome {
            let item = item.unwrap();
            delivered.push(String::from_utf8(item.data().to_vec()).unwrap());
            zk_harness::executor::block_on(item.complete_async()).unwrap();
            producer.put(format!("{put:03}").as_bytes()).unwrap();
            put += 1;
            completed_at.get_or_insert(polls);
        }
        wait_until("no lock left by the dropped take", || {
            producer.in_progress().unwrap() == 0
        });
        assert_eq!(producer.waiters_in_line().unwrap(), 0);
        assert_eq!(producer.len().unwrap(), 3, "an item lost or doubled");
        if completed_at.is_some_and(|at| polls > at + 1) {
            break;
        }
    }
    let completed_at = completed_at.expect("no take completed");
    println!("a take with items completes after {completed_at} polls");
    let fresh = WorkQueue::new(connect(), &path).unwrap();
    while let Some(item) = fresh.try_take().unwrap() {
        delivered.push(String::from_utf8(item.data().to_vec()).unwrap());
        item.complete().unwrap();
    }
    delivered.sort();
    let expected: Vec<String> = (0..put).map(|i| format!("{i:03}")).collect();
    assert_eq!(delivered, expected, "each item exactly once");
    wait_until("no request or watch left", || zk.live_contexts() == 0);
}

/// A take dropped at any step of waiting on an empty queue (as the head of the line, or
/// behind another consumer) leaves no waiter node and no watch.
#[test]
fn an_async_take_dropped_while_waiting_leaves_no_node_or_watch() {
    let zk = connect();
    let path = unique_path("async-wait-steps");
    let admin = connect();
    let producer = WorkQueue::new(&admin, &path).unwrap();
    producer.put(b"warm-up").unwrap();
    producer.try_take().unwrap().unwrap().complete().unwrap();
    let ahead = WorkQueue::new(&admin, &path).unwrap();
    for behind_another in [false, true] {
        let mut first: Option<Boxed<'_, _>> = None;
        if behind_another {
            let mut take: Boxed<'_, _> = Box::pin(ahead.take_async(Timeout::Never));
            assert!(step(&mut take, 100, || ahead.waiting() == 1).is_none());
            assert_eq!(ahead.waiting(), 1, "the consumer ahead is not waiting");
            first = Some(take);
        }
        let in_line = usize::from(behind_another);
        let mut reached_the_wait = None;
        for polls in 0..30 {
            let consumer = WorkQueue::new(&zk, &path).unwrap();
            let mut take: Boxed<'_, _> = Box::pin(consumer.take_async(Timeout::Never));
            assert!(step(&mut take, polls, || consumer.waiting() == 1).is_none());
            if consumer.waiting() == 1 {
                reached_the_wait.get_or_insert(polls);
            }
            drop(take);
            assert_eq!(consumer.waiting(), 0);
            wait_until("the dropped take's place in line withdrawn", || {
                producer.waiters_in_line().unwrap() == in_line
            });
            wait_until("the dropped take's watches withdrawn", || {
                zk.live_contexts() == 0
            });
            if reached_the_wait.is_some_and(|at| polls > at + 1) {
                break;
            }
        }
        let reached = reached_the_wait.expect("the take never waited");
        println!("behind another: {behind_another}; waiting after {reached} polls");
        if let Some(mut take) = first {
            // The consumer ahead still gets what comes.
            producer.put(b"for the one ahead").unwrap();
            let item = zk_harness::executor::block_on(take.as_mut()).unwrap();
            assert_eq!(item.data(), b"for the one ahead");
            item.complete().unwrap();
        }
    }
    assert_eq!(producer.in_progress().unwrap(), 0);
    assert!(producer.is_empty().unwrap());
}

/// A completion dropped at any step: the item ends completed once or back in the queue
/// (released in the background), never locked.
#[test]
fn a_dropped_async_completion_completes_once_or_gives_the_item_back() {
    let zk = connect();
    let path = unique_path("async-complete-steps");
    let queue = WorkQueue::new(&zk, &path).unwrap();
    queue.put(b"job").unwrap();
    for polls in 0..10 {
        let item = queue.take(Duration::from_secs(30)).unwrap();
        assert_eq!(item.attempt() as usize, polls + 1, "claimed once per round");
        let mut completing: Boxed<'_, _> = Box::pin(item.complete_async());
        let done = step(&mut completing, polls, || false);
        drop(completing);
        wait_until("no lock left", || queue.in_progress().unwrap() == 0);
        if queue.len().unwrap() == 0 {
            if let Some(done) = done {
                done.unwrap();
            }
            println!("completed when dropped after {polls} polls");
            return;
        }
        assert!(done.is_none(), "completed, yet the item is still there");
    }
    panic!("never completed");
}

/// A take dropped with its claim in flight (the server applied it, the reply is cut
/// off): the claim is settled in the background and the item released, so it neither
/// stays locked for the session's life nor leaves the queue.
#[test]
fn a_take_dropped_with_its_claim_in_flight_releases_the_item() {
    take_dropped_mid_claim(false);
}

/// As above, dropped while finding out whether its claim applied (the connection is
/// down and stays down until the take is gone).
#[test]
fn a_take_dropped_while_finding_out_its_claim_releases_the_item() {
    take_dropped_mid_claim(true);
}

fn take_dropped_mid_claim(after_the_client_noticed: bool) {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let path = unique_path("async-claim-cut");
    let producer = WorkQueue::new(connect(), &path).unwrap();
    // The lock directory exists: the claim is the first multi.
    producer.put(b"warm-up").unwrap();
    producer.try_take().unwrap().unwrap().complete().unwrap();
    producer.put(b"precious").unwrap();
    let consumer = WorkQueue::new(&zk, &path).unwrap();

    proxy.cut_after(opcode::MULTI);
    {
        let mut take: Boxed<'_, _> = Box::pin(consumer.take_async(Timeout::Never));
        let reached = zk_harness::executor::block_on_timeout(
            std::future::poll_fn(|cx| {
                if proxy.has_cut() {
                    if !after_the_client_noticed {
                        return Poll::Ready(true);
                    }
                    proxy.cut(); // no reconnection until the take is gone
                    if !zk.state().is_connected() {
                        return Poll::Ready(true);
                    }
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
            "the take settled before it was dropped"
        );
        if after_the_client_noticed {
            // Take in the lost reply: it now waits to reconnect.
            assert!(zk_harness::executor::poll_once(&mut take).is_pending());
        }
    } // dropped here
    proxy.restore();
    wait_until("the dropped claim released", || {
        producer.in_progress().unwrap() == 0
    });
    let item = producer.try_take().unwrap().expect("the item is back");
    assert_eq!(item.data(), b"precious");
    assert_eq!(item.attempt(), 2, "the dropped take's claim had applied");
    item.complete().unwrap();
    assert!(producer.is_empty().unwrap());
}
