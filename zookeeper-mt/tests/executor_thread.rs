//! A thread that refuses waits (`refuse_waits_on_this_thread`, what the recipes' driver
//! does): the client never waits on it. A blocking wait whose result is not there fails at once, one whose result is
//! there returns it, and closing a handle there is handed to the closer thread.

mod common;

use common::{connect_to, hosts, poll_until, Proxy, WAIT};
use std::time::{Duration, Instant};
use zookeeper_mt::Error;

#[test]
fn an_executor_thread_never_waits_for_the_client() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_to(&proxy.connect_string());
    let outcome = std::thread::spawn(move || {
        zookeeper_mt::refuse_waits_on_this_thread();
        // A reply that is there: returned as on any thread.
        let answered = zk.exists_async("/");
        poll_until("the reply", WAIT, || zk.requests_in_flight() == 0);
        let there = answered.wait();
        // A reply that cannot come (the proxy holds the connection): an error at once.
        proxy.block();
        let started = Instant::now();
        let stalled = zk.exists_async("/").wait_timeout(Duration::from_secs(30));
        let waited = started.elapsed();
        let connected = zk.wait_connected(Duration::from_secs(30));
        // The last clone closed here: handed off, not waited for.
        let events = zk.session_events();
        drop(zk);
        (there, stalled, waited, connected, events, proxy)
    })
    .join()
    .unwrap();
    let (there, stalled, waited, connected, events, proxy) = outcome;
    assert!(there.is_ok(), "{there:?}");
    assert!(
        matches!(stalled, Err(Error::InvalidArgument(_))),
        "{stalled:?}"
    );
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    assert!(
        matches!(connected, Ok(()) | Err(Error::InvalidArgument(_))),
        "{connected:?}"
    );
    // The handle closes on the closer thread: its session events end (not time out).
    proxy.unblock();
    let end = loop {
        match events.recv_timeout(WAIT) {
            Ok(_) => {}
            Err(error) => break error,
        }
    };
    assert_eq!(end, Error::Closed, "the session events did not end");
}

/// `mark_executor_thread` is a deprecated no-op: after it, a blocking wait still waits
/// for its reply (held back by a stalled link, then let through) instead of failing.
#[test]
#[allow(deprecated)]
fn the_deprecated_mark_changes_nothing() {
    let proxy = zk_harness::FaultProxy::start(hosts()).unwrap();
    let zk = connect_to(&proxy.connect_string());
    let (started, waiting) = std::sync::mpsc::channel();
    proxy.stall();
    let waiter = std::thread::spawn(move || {
        zookeeper_mt::mark_executor_thread();
        let reply = zk.exists_async("/");
        started.send(()).unwrap();
        reply.wait_timeout(Duration::from_secs(60))
    });
    waiting.recv_timeout(WAIT).unwrap();
    // The wait is under way (not failed at once) while the link is stalled.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "the wait was refused");
    proxy.resume();
    let answered = waiter.join().unwrap();
    assert!(answered.is_ok(), "{answered:?}");
}
