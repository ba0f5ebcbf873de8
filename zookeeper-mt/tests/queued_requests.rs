//! Requests made while the handle has `MAX_IN_FLIGHT` requests in flight are queued, not
//! waited for: no submit blocks its thread (an unmarked one), every request completes,
//! and they are sent in the order they were made (sequential creates on one parent get
//! increasing suffixes in submission order). A close fails the queued ones. The server
//! is stalled behind a fault proxy while submitting, so the handle is surely full.

mod common;

use common::{hosts, unique, WAIT};
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Error, ZooKeeper, MAX_IN_FLIGHT};

const REQUESTS: usize = MAX_IN_FLIGHT + 5_000;
/// Generous (a loaded 2-core machine; memcheck runs it some 50 times slower), yet far
/// below what waiting for room would take (the link is stalled: forever).
fn submit_bound() -> Duration {
    if zk_harness::testing::under_valgrind() {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(500)
    }
}

fn proxied() -> (zk_harness::FaultProxy, ZooKeeper) {
    let proxy =
        zk_harness::FaultProxy::start_on("127.0.0.1".parse().unwrap(), hosts()).expect("a proxy");
    let zk = ZooKeeper::connect(&proxy.connect_string(), Duration::from_secs(30)).unwrap();
    (proxy, zk)
}

#[test]
fn requests_beyond_the_bound_are_queued_in_order_without_blocking() {
    let (proxy, zk) = proxied();
    let parent = unique("queued");
    zk.create(&parent, b"", CreateMode::Persistent).unwrap();
    let prefix = format!("{parent}/n-");
    proxy.stall();
    let mut longest_submit = Duration::ZERO;
    let mut futures = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let started = Instant::now();
        futures.push(zk.create_async(&prefix, b"", CreateMode::PersistentSequential));
        longest_submit = longest_submit.max(started.elapsed());
    }
    let (in_flight, queued) = (zk.requests_in_flight(), zk.requests_queued());
    println!(
        "{REQUESTS} creates submitted: longest submit {longest_submit:?}; \
         {in_flight} in flight, {queued} queued"
    );
    assert_eq!(in_flight, MAX_IN_FLIGHT);
    assert_eq!(queued, REQUESTS - MAX_IN_FLIGHT);
    assert!(longest_submit < submit_bound(), "{longest_submit:?}");
    // A blocking call made now waits behind the queue, and keeps its place in the order.
    let sync_call = {
        let zk = zk.clone();
        let prefix = prefix.clone();
        std::thread::spawn(move || zk.create(&prefix, b"", CreateMode::PersistentSequential))
    };
    common::poll_until("the blocking call queued", WAIT, || {
        zk.requests_queued() == REQUESTS - MAX_IN_FLIGHT + 1
    });
    proxy.resume();
    let started = Instant::now();
    let mut suffixes = Vec::with_capacity(REQUESTS);
    for future in futures {
        let path = future.wait_timeout(WAIT).expect("every create completes");
        let suffix: i64 = path[prefix.len()..].parse().unwrap();
        suffixes.push(suffix);
    }
    let last: i64 = sync_call.join().unwrap().unwrap()[prefix.len()..]
        .parse()
        .unwrap();
    println!("all completed in {:?}", started.elapsed());
    let out_of_order = suffixes.windows(2).position(|w| w[0] >= w[1]);
    assert_eq!(
        out_of_order, None,
        "suffixes not increasing in submission order"
    );
    assert!(
        last > *suffixes.last().unwrap(),
        "the blocking call overtook the queue"
    );
    assert_eq!(zk.requests_in_flight(), 0);
    assert_eq!(zk.requests_queued(), 0);
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}

#[test]
fn a_close_fails_the_queued_requests() {
    let (proxy, zk) = proxied();
    proxy.stall();
    let futures: Vec<_> = (0..REQUESTS).map(|_| zk.exists_async("/")).collect();
    assert_eq!(zk.requests_queued(), REQUESTS - MAX_IN_FLIGHT);
    // Handed to the closer thread (a blocking close would wait for the stalled server).
    let closing = zk.close_async();
    let mut failures = 0;
    for future in futures {
        match future.wait_timeout(WAIT) {
            Err(Error::Closed) => failures += 1,
            Err(Error::Timeout) => panic!("a queued request never completed"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(failures, REQUESTS);
    assert_eq!(closing.wait_timeout(WAIT), Ok(()));
    assert_eq!(zk.requests_in_flight(), 0);
    assert_eq!(zk.requests_queued(), 0);
    assert_eq!(zk.live_contexts(), 0);
    proxy.resume();
}
