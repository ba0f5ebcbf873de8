//! A `select!`-style loop over a stream's `next()` (poll once with a fresh waker, drop,
//! repeat) leaves no waker behind: 10,000 rounds over every stream of this crate
//! (connection states of a plain handle and of a managed client, session events, a
//! watch) keep at most one waker, and the next item still wakes the live reader.

mod common;

use common::{connect, create, unique, WAIT};
use futures_core::Stream;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Instant;
use zookeeper_mt::{connection_states, ConnectionStates, ManagedZooKeeper};

const ROUNDS: usize = 10_000;

/// A waker that counts itself while alive and records its wake-up.
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

/// Runs `ROUNDS` rounds of `poll_once` (each with a fresh waker, dropped after) and
/// returns how many of those wakers are still alive (held by the stream).
fn churn(what: &str, mut poll_once: impl FnMut(&mut Context<'_>) -> bool) -> usize {
    let live = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut pending = 0;
    for _ in 0..ROUNDS {
        let waker = Waker::from(Tracked::new(&live));
        if poll_once(&mut Context::from_waker(&waker)) {
            pending += 1;
        }
    }
    let held = live.load(Ordering::SeqCst);
    println!(
        "{what}: {held} of {ROUNDS} wakers held after {ROUNDS} dropped polls \
         ({pending} pending) in {:?}",
        started.elapsed()
    );
    assert_eq!(pending, ROUNDS, "{what}: the stream was not idle");
    held
}

/// Polls `future` once with a tracked waker, runs `trigger`, and waits until the waker
/// was woken and the future is ready.
fn live_reader_is_woken<F: Future>(what: &str, future: F, trigger: impl FnOnce()) {
    let live = Arc::new(AtomicUsize::new(0));
    let tracked = Tracked::new(&live);
    let waker = Waker::from(Arc::clone(&tracked));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    assert!(future.as_mut().poll(&mut cx).is_pending(), "{what}: idle");
    trigger();
    let (woken, _) = tracked
        .wake
        .wait_timeout_while(tracked.woken.lock().unwrap(), WAIT, |woken| !*woken)
        .unwrap();
    assert!(*woken, "{what}: the live reader was not woken");
    drop(woken);
    assert!(
        future.as_mut().poll(&mut cx).is_ready(),
        "{what}: woken but not ready"
    );
}

/// `next()` futures and polls of the stream value itself, alternating: at most the
/// stream value's one waker stays.
fn churn_states(what: &str, states: &ConnectionStates) {
    while states.try_recv().is_ok() {}
    let mut round = 0;
    let held = churn(what, |cx| {
        round += 1;
        if round % 2 == 0 {
            // Through the `Stream` impl: the value keeps the last waker given.
            Pin::new(&mut &*states).poll_next(cx).is_pending()
        } else {
            pin!(states.next()).poll(cx).is_pending()
        }
    });
    assert!(held <= 1, "{what}: {held} wakers held");
    assert!(states.wakers() <= 1, "{what}: {} wakers", states.wakers());
}

#[test]
fn connection_states_keep_no_waker_of_a_dropped_next() {
    let zk = connect();
    let states = connection_states(&zk);
    assert!(states.recv_timeout(WAIT).is_ok(), "Connected");
    churn_states("plain connection states", &states);
    let clone = states.clone();
    live_reader_is_woken("plain connection states", clone.next(), || {
        zk.close().unwrap()
    });

    let managed = ManagedZooKeeper::new(connect());
    let states = managed.states();
    assert!(states.recv_timeout(WAIT).is_ok(), "Connected");
    churn_states("managed connection states", &states);
    live_reader_is_woken("managed connection states", states.next(), || {
        managed.close()
    });
}

#[test]
fn session_events_and_watches_keep_no_waker_of_a_dropped_poll() {
    let zk = connect();
    let mut events = zk.session_events();
    while events.try_recv().is_ok() {}
    let mut round = 0;
    let held = churn("session events", |cx| {
        round += 1;
        if round % 2 == 0 {
            Pin::new(&mut events).poll_next(cx).is_pending()
        } else {
            pin!(events.next_event()).poll(cx).is_pending()
        }
    });
    assert!(held <= 1, "session events: {held} wakers held");

    let path = unique("stream-wakers");
    let (_, mut watch) = zk.exists_watch(&path).unwrap();
    let held = churn("a watch", |cx| Pin::new(&mut watch).poll(cx).is_pending());
    assert!(held <= 1, "a watch: {held} wakers held");
    live_reader_is_woken("a watch", &mut watch, || {
        create(&zk, &path, b"");
    });

    live_reader_is_woken("session events", events.next_event(), || {
        zk.close().unwrap()
    });
}
