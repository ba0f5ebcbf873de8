//! Takes on one `Queue` value share its child watch, and no take depends on another
//! take's future being polled: a take that registered the watch (or waits on it) and is
//! then left alive but unpolled (its task busy elsewhere) holds up no other take; and a
//! take dropped while waiting leaves no waker behind.

mod common;

use common::{connect, unique_path};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::Result;

const WAIT: Duration = Duration::from_secs(20);
/// The deadline of the take that must not be starved.
const DEADLINE: Duration = Duration::from_secs(4);

type Take<'a> = Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send + 'a>>;

/// A waker that counts itself while alive and records its wake-ups.
struct Tracked {
    live: Arc<AtomicUsize>,
    woken: Mutex<bool>,
    wake: Condvar,
}

impl Tracked {
    fn new(live: &Arc<AtomicUsize>) -> Arc<Tracked> {
        live.fetch_add(1, Ordering::SeqCst);
        Arc::new(Tracked {
            live: Arc::clone(live),
            woken: Mutex::new(false),
            wake: Condvar::new(),
        })
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Wake for Tracked {
    fn wake(self: Arc<Self>) {
        *self.woken.lock().unwrap() = true;
        self.wake.notify_all();
    }
}

/// Polls `take` (woken by `tracked`) until `reached()`; it must stay pending.
fn drive_until(take: &mut Take<'_>, tracked: &Arc<Tracked>, mut reached: impl FnMut() -> bool) {
    let waker = Waker::from(Arc::clone(tracked));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + WAIT;
    loop {
        *tracked.woken.lock().unwrap() = false;
        assert!(matches!(take.as_mut().poll(&mut cx), Poll::Pending));
        if reached() {
            return;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (woken, _) = tracked
            .wake
            .wait_timeout_while(tracked.woken.lock().unwrap(), left, |woken| !*woken)
            .unwrap();
        assert!(*woken, "the take made no progress");
    }
}

/// A queue at a fresh path (its directory created) and a producer on another session.
fn queue(name: &str) -> (Queue, Queue) {
    let path = unique_path(name);
    let producer = Queue::new(connect(), &path).unwrap();
    producer.put(b"warm-up").unwrap();
    assert_eq!(producer.take(Timeout::Never).unwrap(), b"warm-up");
    (Queue::new(connect(), &path).unwrap(), producer)
}

/// The take on `queue` returns the item promptly, well within its deadline.
fn prompt_take(what: &str, take: impl FnOnce() -> Result<Vec<u8>>, expected: &[u8]) {
    let started = Instant::now();
    let got = take();
    let latency = started.elapsed();
    println!("{what}: the other take returned {got:?} after {latency:?}");
    assert_eq!(got.unwrap(), expected, "{what}");
    assert!(latency < DEADLINE / 2, "{what}: {latency:?}");
}

#[test]
fn a_take_that_registered_the_watch_and_stalls_starves_no_other_take() {
    let (queue, producer) = queue("stalled-arming");
    let mut stalled: Take<'_> = Box::pin(queue.take_async(Duration::from_secs(60)));
    // Its first poll finds no watch armed and sends the registering listing.
    let live = Arc::new(AtomicUsize::new(0));
    let tracked = Tracked::new(&live);
    drive_until(&mut stalled, &tracked, || true);
    producer.put(b"item").unwrap();
    prompt_take(
        "arming owner stalled",
        || queue.take(DEADLINE),
        b"item" as &[u8],
    );
    drop(stalled);
    assert_eq!(queue.waiting(), 0);
}

#[test]
fn a_take_waiting_on_the_watch_that_stalls_starves_no_other_take() {
    let (queue, producer) = queue("stalled-waiter");
    let live = Arc::new(AtomicUsize::new(0));
    let tracked = Tracked::new(&live);
    let mut stalled: Take<'_> = Box::pin(queue.take_async(Duration::from_secs(60)));
    drive_until(&mut stalled, &tracked, || queue.waiting() == 1);
    // Left unpolled from here on, waiting on the shared watch.
    thread::scope(|s| {
        let other = s.spawn(|| {
            let started = Instant::now();
            (queue.take(DEADLINE), started)
        });
        common::wait_until("the other take waiting", || queue.waiting() == 2);
        let put_at = Instant::now();
        producer.put(b"item").unwrap();
        let (got, started) = other.join().unwrap();
        let latency = put_at.elapsed();
        println!(
            "watch waiter stalled: the other take returned {got:?} {latency:?} after the put \
             ({:?} after it started)",
            started.elapsed()
        );
        assert_eq!(got.unwrap(), b"item");
        assert!(latency < DEADLINE / 2, "{latency:?}");
    });
    drop(stalled);
    assert_eq!(queue.waiting(), 0);
    assert!(
        queue.wakeups() <= 2,
        "one shared watch: {} notifications",
        queue.wakeups()
    );
}

#[test]
fn takes_dropped_while_waiting_leave_no_waker() {
    const ROUNDS: usize = 10_000;
    let (queue, producer) = queue("dropped-waiters");
    let live = Arc::new(AtomicUsize::new(0));
    // One take waits on the watch throughout; each round another one joins it, then is
    // dropped (a `select!` loop around `take`).
    let first = Tracked::new(&live);
    let mut waiting: Take<'_> = Box::pin(queue.take_async(Duration::from_secs(120)));
    drive_until(&mut waiting, &first, || queue.waiting() == 1);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let tracked = Tracked::new(&live);
        let mut take: Take<'_> = Box::pin(queue.take_async(Duration::from_secs(60)));
        drive_until(&mut take, &tracked, || queue.waiting() == 2);
        drop(take);
        assert_eq!(queue.waiting(), 1);
    }
    // `first` and each round's waker: only those still held by the queue stay alive.
    let held = live.load(Ordering::SeqCst) - 1;
    println!(
        "{held} of {ROUNDS} dropped takes' wakers held ({:?})",
        started.elapsed()
    );
    assert!(held <= 1, "{held} wakers of dropped takes held");
    producer.put(b"item").unwrap();
    let waker = Waker::from(Arc::clone(&first));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + WAIT;
    let got = loop {
        *first.woken.lock().unwrap() = false;
        if let Poll::Ready(got) = waiting.as_mut().poll(&mut cx) {
            break got;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (woken, _) = first
            .wake
            .wait_timeout_while(first.woken.lock().unwrap(), left, |woken| !*woken)
            .unwrap();
        assert!(*woken, "the waiting take was not woken by the put");
    };
    assert_eq!(got.unwrap(), b"item");
}
