//! Async connect and close: the futures complete, are woken (not polled in a loop), and
//! no poll blocks its thread; the connect timeout and a session that cannot be made fail
//! with the errors of the blocking `connect`; after `close_async` every call fails with
//! `Closed` at once. Each future is driven by a single-threaded hand-rolled executor
//! (`common::drive`), under a bound.

mod common;
#[path = "common/drive.rs"]
mod drive;

use common::{hosts, WAIT};
use drive::drive;
use std::time::{Duration, Instant};
use zookeeper_mt::{Error, ManagedZooKeeper, Timeout, ZooKeeper};

/// Generous: a poll only reads a state and registers a waker (memcheck runs it some 50
/// times slower).
fn poll_bound() -> Duration {
    if zk_harness::testing::under_valgrind() {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(500)
    }
}

#[test]
fn connect_async_completes_and_no_poll_blocks() {
    let driven = drive(
        ZooKeeper::connect_async(&hosts(), Duration::from_secs(10)),
        WAIT,
    );
    println!(
        "connect_async: {} polls, {} wakes, longest poll {:?}, took {:?}",
        driven.polls, driven.wakes, driven.longest_poll, driven.elapsed
    );
    let zk = driven.output.expect("connected");
    assert!(zk.state().is_connected());
    assert!(
        driven.longest_poll < poll_bound(),
        "{:?}",
        driven.longest_poll
    );
    zk.exists("/").expect("a call on the connected handle");
    zk.close().unwrap();
}

#[test]
fn connect_async_times_out_as_connect_does() {
    // A refused port: C keeps retrying, the session is never made.
    let refused = drive::refused_hosts();
    let started = Instant::now();
    let driven = drive(
        ZooKeeper::builder(&refused)
            .connect_timeout(Timeout::After(Duration::from_millis(400)))
            .connect_async(),
        WAIT,
    );
    println!(
        "timed-out connect_async: {} polls, longest poll {:?}, took {:?}",
        driven.polls, driven.longest_poll, driven.elapsed
    );
    assert!(
        matches!(driven.output, Err(Error::Timeout)),
        "{:?}",
        driven.output
    );
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(
        driven.longest_poll < poll_bound(),
        "{:?}",
        driven.longest_poll
    );
    // Woken by the timer, not polled in a loop.
    assert!(driven.polls <= 3, "{} polls", driven.polls);
}

#[test]
fn connect_async_fails_at_once_on_bad_input() {
    let driven = drive(
        ZooKeeper::connect_async("  ", Duration::from_secs(10)),
        WAIT,
    );
    assert!(
        matches!(driven.output, Err(Error::InvalidArgument(_))),
        "{:?}",
        driven.output
    );
    let driven = drive(
        ZooKeeper::connect_async("no-such-host.invalid:2181", Duration::from_secs(10)),
        WAIT,
    );
    assert!(
        matches!(driven.output, Err(Error::Unresolvable { .. })),
        "{:?}",
        driven.output
    );
}

#[test]
fn close_async_completes_and_later_calls_fail_with_closed() {
    let zk = ZooKeeper::connect(&hosts(), Duration::from_secs(10)).unwrap();
    let clone = zk.clone();
    let events = zk.session_events();
    let started = Instant::now();
    let closing = zk.close_async();
    let returned = started.elapsed();
    // Decided when it returned: every clone fails at once, before the C close is done.
    let call_started = Instant::now();
    assert_eq!(clone.exists("/").map(|_| ()), Err(Error::Closed));
    assert_eq!(
        clone.exists_async("/").wait().map(|_| ()),
        Err(Error::Closed)
    );
    assert!(
        call_started.elapsed() < poll_bound(),
        "{:?}",
        call_started.elapsed()
    );
    let driven = drive(closing, WAIT);
    println!(
        "close_async: returned in {returned:?}, {} polls, longest poll {:?}, took {:?}",
        driven.polls, driven.longest_poll, driven.elapsed
    );
    assert_eq!(driven.output, Ok(()));
    assert!(returned < poll_bound(), "{returned:?}");
    assert!(
        driven.longest_poll < poll_bound(),
        "{:?}",
        driven.longest_poll
    );
    // The C close has finished: the session stream has ended, contexts are freed.
    let deadline = Instant::now() + WAIT;
    loop {
        match events.try_recv() {
            Ok(_) => continue,
            Err(zookeeper_mt::stream::TryRecvError::Disconnected) => break,
            Err(_) => assert!(Instant::now() < deadline, "stream never ended"),
        }
        std::thread::yield_now();
    }
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(zk.state(), zookeeper_mt::SessionState::Closed);
    // Again, async or blocking: done at once.
    assert_eq!(drive(clone.close_async(), WAIT).output, Ok(()));
    assert_eq!(clone.close(), Ok(()));
    assert_eq!(zk.close_async().wait_timeout(Timeout::After(WAIT)), Ok(()));
}

#[test]
fn close_async_on_a_marked_thread_does_not_wait() {
    let zk = ZooKeeper::connect(&hosts(), Duration::from_secs(10)).unwrap();
    let closing = std::thread::spawn(move || {
        zookeeper_mt::refuse_waits_on_this_thread();
        let started = Instant::now();
        let closing = zk.close_async();
        let driven = drive(closing, WAIT);
        (started.elapsed(), driven.longest_poll, driven.output)
    })
    .join()
    .unwrap();
    assert_eq!(closing.2, Ok(()));
    assert!(closing.1 < poll_bound(), "{:?}", closing.1);
    println!("close_async on a marked thread: {:?}", closing.0);
}

#[test]
fn managed_connect_async_and_close_async() {
    let driven = drive(
        ManagedZooKeeper::connect_async(&hosts(), Duration::from_secs(10)),
        WAIT,
    );
    println!(
        "managed connect_async: {} polls, longest poll {:?}",
        driven.polls, driven.longest_poll
    );
    assert!(
        driven.longest_poll < poll_bound(),
        "{:?}",
        driven.longest_poll
    );
    let client = driven.output.expect("connected");
    let zk = client.current();
    zk.exists("/").unwrap();
    let closing = client.close_async();
    assert!(client.is_closed());
    assert_eq!(zk.exists("/").map(|_| ()), Err(Error::Closed));
    let driven = drive(closing, WAIT);
    assert_eq!(driven.output, Ok(()));
    assert!(
        driven.longest_poll < poll_bound(),
        "{:?}",
        driven.longest_poll
    );
    assert_eq!(zk.state(), zookeeper_mt::SessionState::Closed);
}
