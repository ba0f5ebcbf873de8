//! A connect future dropped before the session is made: the drop returns at once (the
//! half-made handle is closed on the client's closer thread) and leaves no thread,
//! handle or context behind. One test in this binary, so the process's thread count is
//! this test's alone.

mod common;
#[path = "common/drive.rs"]
mod drive;

use common::{hosts, poll_until, WAIT};
use drive::{counting_waker, poll_once, refused_hosts, thread_count};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;

#[test]
fn a_dropped_connect_leaves_nothing_behind() {
    // The client's own threads (closer, timer) start with the first handle: start them.
    ZooKeeper::connect(&hosts(), Duration::from_secs(10))
        .unwrap()
        .close()
        .unwrap();
    let baseline = thread_count();
    let contexts = ZooKeeper::live_contexts_in_process();
    let mut longest_drop = Duration::ZERO;
    for round in 0..5 {
        // Never connects (refused port); a long timeout, so only the drop ends it.
        let mut connecting = ZooKeeper::builder(&refused_hosts())
            .connect_timeout(Duration::from_secs(600))
            .connect_async();
        assert!(poll_once(&mut connecting).is_pending(), "round {round}");
        // The C client's IO and completion threads are running now.
        assert!(thread_count() >= baseline + 2, "round {round}");
        let started = Instant::now();
        drop(connecting);
        longest_drop = longest_drop.max(started.elapsed());
        poll_until("the C threads to end", WAIT, || thread_count() == baseline);
    }
    // Also a connect that would succeed, dropped before its session event came (or
    // just after: either way the handle is closed).
    for _ in 0..5 {
        let mut connecting = ZooKeeper::connect_async(&hosts(), Duration::from_secs(10));
        let first = poll_once(&mut connecting);
        let started = Instant::now();
        drop(first);
        drop(connecting);
        longest_drop = longest_drop.max(started.elapsed());
        poll_until("the C threads to end", WAIT, || thread_count() == baseline);
    }
    // Connected but never polled again, with the server out of reach (a stalled
    // proxy): a close on the dropping thread would wait for CloseSession's answer
    // (`zookeeper_close` waits up to 1.5 s); handed off, the drop returns at once.
    let proxy =
        zk_harness::FaultProxy::start_on("127.0.0.1".parse().unwrap(), hosts()).expect("a proxy");
    let baseline = thread_count();
    let mut connecting = ZooKeeper::connect_async(&proxy.connect_string(), Duration::from_secs(10));
    let (waker, wakes) = counting_waker();
    let first = Pin::new(&mut connecting).poll(&mut Context::from_waker(&waker));
    assert!(first.is_pending());
    poll_until("the connected event's wake", WAIT, || {
        wakes.load(Ordering::SeqCst) > 0
    });
    proxy.stall();
    let started = Instant::now();
    drop(connecting);
    let stalled_drop = started.elapsed();
    println!("drop of a connected, unpolled connect future (server stalled): {stalled_drop:?}");
    longest_drop = longest_drop.max(stalled_drop);
    poll_until("the C threads to end", WAIT, || thread_count() == baseline);
    proxy.resume();
    println!("longest drop of a connect future: {longest_drop:?}");
    // Generous (memcheck runs it some 50 times slower): the drop hands the close over.
    let bound = if zk_harness::testing::under_valgrind() {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(500)
    };
    assert!(longest_drop < bound, "{longest_drop:?}");
    poll_until("contexts freed", WAIT, || {
        ZooKeeper::live_contexts_in_process() == contexts
    });
    assert_eq!(thread_count(), baseline);
}
