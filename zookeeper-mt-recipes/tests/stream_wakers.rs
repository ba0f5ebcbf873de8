//! A `select!`-style loop over a recipe stream's `next()` (poll once with a fresh waker,
//! drop the future, repeat) leaves no waker behind: 10,000 rounds over every recipe
//! stream (cache events of the three caches, a latch's, a group's, a config receiver, a
//! value stream) keep at most one waker, and the next item still wakes the live reader.

mod common;

use common::{connect, unique_path};
use futures_core::Stream;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};
use zookeeper_mt::CreateMode;
use zookeeper_mt_recipes::caches::{ChildrenCache, ConfigWatch, NodeCache, TreeCache};
use zookeeper_mt_recipes::events::EventStream;
use zookeeper_mt_recipes::leadership::leader_latch::LeaderLatch;
use zookeeper_mt_recipes::nodes::{ensure_path, Group, GroupLayout, GroupMember};
use zookeeper_mt_recipes::shared::SharedCount;

const ROUNDS: usize = 10_000;
const WAIT: Duration = Duration::from_secs(20);

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

/// Drains `stream`, then runs `ROUNDS` rounds alternating a dropped `next()` future and
/// a poll of the stream value itself, each with a fresh waker; asserts that at most one
/// of those wakers is still held; then has a live reader woken by `trigger`'s item.
fn check<T>(what: &str, stream: &EventStream<T>, trigger: impl FnOnce()) {
    while stream.try_recv().is_ok() {}
    let live = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut pending = 0;
    for round in 0..ROUNDS {
        let waker = Waker::from(Tracked::new(&live));
        let mut cx = Context::from_waker(&waker);
        let polled = if round % 2 == 0 {
            pin!(stream.next()).poll(&mut cx).is_pending()
        } else {
            // Through the `Stream` impl: the value keeps the last waker given.
            Pin::new(&mut &*stream).poll_next(&mut cx).is_pending()
        };
        pending += usize::from(polled);
    }
    let held = live.load(Ordering::SeqCst);
    println!(
        "{what}: {held} of {ROUNDS} wakers held after {ROUNDS} dropped polls \
         ({pending} pending) in {:?}; the queue keeps {}",
        started.elapsed(),
        stream.wakers()
    );
    assert!(pending >= ROUNDS - 10, "{what}: the stream was not idle");
    assert!(held <= 1, "{what}: {held} wakers held");
    assert!(stream.wakers() <= 1, "{what}: {} wakers", stream.wakers());

    let tracked = Tracked::new(&live);
    let waker = Waker::from(Arc::clone(&tracked));
    let mut cx = Context::from_waker(&waker);
    let mut next = pin!(stream.next());
    assert!(next.as_mut().poll(&mut cx).is_pending(), "{what}: idle");
    trigger();
    let (woken, _) = tracked
        .wake
        .wait_timeout_while(tracked.woken.lock().unwrap(), WAIT, |woken| !*woken)
        .unwrap();
    assert!(*woken, "{what}: the live reader was not woken");
    drop(woken);
    assert!(
        next.as_mut().poll(&mut cx).is_ready(),
        "{what}: woken but no item"
    );
}

#[test]
fn dropped_next_futures_leave_no_waker_on_any_recipe_stream() {
    let zk = connect();
    let base = unique_path("stream-wakers");
    ensure_path(&zk, &base).unwrap();
    let node = format!("{base}/node");
    zk.create(&node, b"0", CreateMode::Persistent).unwrap();

    let cache = NodeCache::new(&zk, &node).unwrap();
    cache.wait_initialized(WAIT).unwrap();
    check("node cache", cache.events(), || {
        zk.set(&node, b"1", None).unwrap();
    });

    let children = ChildrenCache::new(&zk, &node).unwrap();
    children.wait_initialized(WAIT).unwrap();
    check("children cache", children.events(), || {
        zk.create(&format!("{node}/c1"), b"", CreateMode::Persistent)
            .unwrap();
    });

    let tree = TreeCache::new(&zk, &node).unwrap();
    tree.wait_initialized(WAIT).unwrap();
    check("tree cache", tree.events(), || {
        zk.create(&format!("{node}/c2"), b"", CreateMode::Persistent)
            .unwrap();
    });

    let config = ConfigWatch::new(&zk, &node).unwrap();
    let receiver = config.receiver();
    assert!(receiver.recv_timeout(WAIT).is_ok(), "the current state");
    check("config receiver", &receiver, || {
        zk.set(&node, b"2", None).unwrap();
    });

    let group_path = format!("{base}/group");
    let group = Group::watch(&zk, &group_path, GroupLayout::default()).unwrap();
    group.wait_initialized(WAIT).unwrap();
    let mut member = None;
    check("group", group.events(), || {
        member = Some(GroupMember::new(&zk, &group_path, "m1", b"").unwrap());
    });

    let latch = LeaderLatch::new(&zk, &format!("{base}/latch")).unwrap();
    drop(latch.await_leadership(WAIT).unwrap());
    check("leader latch", latch.events(), || {
        assert!(latch.relinquish().unwrap());
    });

    let count = SharedCount::new(&zk, &format!("{base}/count"), 0).unwrap();
    let values = count.watch().unwrap().into_stream();
    assert!(values.recv_timeout(WAIT).is_ok(), "the current value");
    check("value stream", &values, || {
        count.set(5).unwrap();
    });
    drop(member);
}
