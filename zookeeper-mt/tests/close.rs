//! Closing: with thousands of requests in flight, from a thread handling watch events,
//! from a waker running on the C completion thread, twice, and by dropping the last clone.

mod common;

use common::{block_on, connect, create, create_mode, unique, wait_for_stream_end, WAIT};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Instant;
use zookeeper_mt::{Acl, CreateMode, Error, EventType, Op, SessionState, ZooKeeper};

/// Counts outcomes; anything but Ok or Err(Closed) is a failure.
fn tally(outcomes: &mut HashMap<&'static str, usize>, result: Result<(), Error>) {
    match result {
        Ok(()) => *outcomes.entry("ok").or_default() += 1,
        Err(Error::Closed) => *outcomes.entry("closed").or_default() += 1,
        Err(other) => panic!("a request in flight at close ended with {other:?}"),
    }
}

#[test]
fn close_with_ten_thousand_requests_in_flight() {
    let zk = connect();
    let base = unique("close-10k");
    create(&zk, &base, b"data");
    let acl = Acl::OPEN_UNSAFE;

    let mut creates = Vec::new();
    let mut reads = Vec::new();
    let mut sets = Vec::new();
    let mut watches = Vec::new();
    let mut multis = Vec::new();
    for i in 0..10_000 {
        match i % 5 {
            0 => creates.push(zk.create_async(
                &format!("{base}/e{i}"),
                b"",
                zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(acl),
            )),
            1 => reads.push(zk.get_async(&base)),
            2 => sets.push(zk.set_async(&base, b"x", None)),
            3 => watches.push(zk.exists_watch_async(&format!("{base}/w{i}"))),
            _ => multis.push(zk.multi_async(&[Op::check(&base, -1)])),
        }
    }
    assert!(zk.live_contexts() > 0);
    let started = Instant::now();
    zk.close().unwrap();
    let close_took = started.elapsed();
    assert_eq!(zk.live_contexts(), 0, "every context freed at close");

    let mut outcomes = HashMap::new();
    // Half through block_on (the waker path), half through wait().
    for (i, f) in creates.into_iter().enumerate() {
        let result = if i % 2 == 0 { block_on(f) } else { f.wait() };
        tally(&mut outcomes, result.map(drop));
    }
    for f in reads {
        tally(&mut outcomes, block_on(f).map(drop));
    }
    for f in sets {
        tally(&mut outcomes, f.wait().map(drop));
    }
    for f in multis {
        tally(&mut outcomes, block_on(f).map(drop));
    }
    for f in watches {
        let result = f.wait().map(|(_, watch)| {
            // An armed watch ends with the handle.
            assert_eq!(watch.wait(), Err(Error::Closed));
        });
        tally(&mut outcomes, result);
    }
    let total: usize = outcomes.values().sum();
    assert_eq!(total, 10_000);
    assert!(
        close_took < WAIT,
        "close took {close_took:?}; outcomes {outcomes:?}"
    );
    assert_eq!(ZooKeeper::state(&zk), SessionState::Closed);
}

#[test]
fn close_is_idempotent_across_clones() {
    let zk = connect();
    let clone = zk.clone();
    let events = zk.session_events();
    zk.close().unwrap();
    zk.close().unwrap();
    clone.close().unwrap();
    assert_eq!(clone.state(), SessionState::Closed);
    assert_eq!(clone.exists("/").unwrap_err(), Error::Closed);
    // The session stream ends with the handle (no event is sent at close; the initial
    // Connected event may still have been on its way when we subscribed).
    let seen = wait_for_stream_end(&events, WAIT);
    assert!(
        seen.iter().all(|e| e.state == SessionState::Connected),
        "{seen:?}"
    );
    // A receiver subscribed after close sees the end at once.
    assert!(wait_for_stream_end(&clone.session_events(), WAIT).is_empty());
    drop(zk);
    drop(clone);
}

#[test]
fn dropping_the_last_clone_closes_the_session() {
    let owner = connect();
    let observer = connect();
    let path = unique("close-drop");
    create_mode(&owner, &path, b"", CreateMode::Ephemeral);
    let (stat, watch) = observer.exists_watch(&path).unwrap();
    assert!(stat.is_some());

    // A clone (on another thread) keeps the session alive.
    let clone = owner.clone();
    drop(owner);
    let clone = thread::spawn(move || {
        clone.exists("/").unwrap();
        clone
    })
    .join()
    .unwrap();
    observer.sync(&path).unwrap();
    assert!(observer.exists(&path).unwrap().is_some());
    assert_eq!(watch.try_get(), Ok(None));

    // Dropping the last one closes it: the ephemeral goes at once (well inside the
    // 10 s session timeout, which is what a leaked session would take).
    let started = Instant::now();
    drop(clone);
    let event = watch.wait_timeout(WAIT).expect("ephemeral deleted");
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn close_from_a_thread_handling_watch_events() {
    let zk = connect();
    let other = connect();
    let path = unique("close-watcher");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    let quiet = unique("close-watcher-quiet");
    create(&zk, &quiet, b"");
    let (_, second) = zk.get_children_watch(&quiet).unwrap();
    let events = zk.session_events();

    let handler = {
        let zk = zk.clone();
        thread::spawn(move || {
            let event = watch.wait().unwrap();
            assert_eq!(event.event_type, EventType::NodeCreated);
            // React to the event by closing the handle.
            zk.close().unwrap();
            zk.get(&event.path).unwrap_err()
        })
    };
    create(&other, &path, b"");
    assert_eq!(handler.join().unwrap(), Error::Closed);
    assert_eq!(zk.state(), SessionState::Closed);
    assert_eq!(second.wait_timeout(WAIT), Err(Error::Closed));
    wait_for_stream_end(&events, WAIT);
    assert_eq!(zk.live_contexts(), 0);
}

/// A waker that closes (or drops) a handle when woken. Wakers of our futures run on the
/// C completion thread, where closing must be handed off to another thread.
struct ClosingWaker {
    zk: Mutex<Option<ZooKeeper>>,
    close_explicitly: bool,
    woken: AtomicBool,
}

impl Wake for ClosingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let zk = self.zk.lock().unwrap().take();
        if let Some(zk) = zk {
            if self.close_explicitly {
                let _ = zk.close();
            }
            // Otherwise dropped here: possibly the last clone.
        }
    }
}

fn close_from_waker(close_explicitly: bool) {
    let observer = connect();
    let path = unique("close-waker");
    let zk = connect();
    create_mode(&zk, &path, b"", CreateMode::Ephemeral);
    let (_, deleted) = observer.exists_watch(&path).unwrap();
    let events = zk.session_events();

    // Find a request whose first poll is pending, so the waker is called from C.
    let mut waker_state = None;
    for _ in 0..100 {
        let state = Arc::new(ClosingWaker {
            zk: Mutex::new(Some(zk.clone())),
            close_explicitly,
            woken: AtomicBool::new(false),
        });
        let waker = Waker::from(Arc::clone(&state));
        let mut future = zk.sync_async("/");
        let pending = std::pin::Pin::new(&mut future)
            .poll(&mut Context::from_waker(&waker))
            .is_pending();
        if pending {
            waker_state = Some((state, future));
            break;
        }
    }
    let (state, future) = waker_state.expect("a pending first poll");
    drop(zk); // the waker now holds the last clone

    // The close happens on a thread the binding spawns; the stream ends when it is done.
    wait_for_stream_end(&events, WAIT);
    assert!(state.woken.load(Ordering::SeqCst));
    assert_eq!(block_on(future).unwrap(), "/");
    // The session really closed: the ephemeral went away.
    let event = deleted.wait_timeout(WAIT).expect("ephemeral deleted");
    assert_eq!(event.event_type, EventType::NodeDeleted);
}

#[test]
fn close_from_a_waker_on_the_completion_thread() {
    close_from_waker(true);
}

#[test]
fn last_clone_dropped_by_a_waker_on_the_completion_thread() {
    close_from_waker(false);
}

#[test]
fn close_while_sync_calls_are_blocked() {
    let zk = connect();
    let base = unique("close-blocked");
    create(&zk, &base, b"");
    // Threads issuing blocking calls in a loop until the handle is closed under them.
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let zk = zk.clone();
            let base = base.clone();
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let mut done = 0usize;
                loop {
                    let result = match done % 3 {
                        0 => zk.get(&base).map(drop),
                        1 => zk.set(&base, format!("{t}").as_bytes(), None).map(drop),
                        _ => zk.get_children(&base).map(drop),
                    };
                    match result {
                        Ok(()) => done += 1,
                        Err(Error::Closed) => return done,
                        Err(other) => panic!("blocking call during close: {other:?}"),
                    }
                    assert!(!stop.load(Ordering::SeqCst), "never saw Closed");
                }
            })
        })
        .collect();
    // Let them run a little (each waits for a reply, so this is real traffic).
    common::poll_until("some traffic", WAIT, || {
        zk.get(&base).unwrap().1.version >= 20
    });
    zk.close().unwrap();
    for thread in threads {
        assert!(thread.join().unwrap() > 0);
    }
    stop.store(true, Ordering::SeqCst);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn closing_leaves_no_pending_future_forever() {
    // Futures polled on executor threads while the handle closes all wake up.
    let zk = connect();
    let path = unique("close-futures");
    create(&zk, &path, b"");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let futures: Vec<_> = (0..200).map(|_| zk.get_async(&path)).collect();
            thread::spawn(move || {
                futures
                    .into_iter()
                    .map(|f| match block_on(f) {
                        Ok(_) => Poll::Ready(()),
                        Err(Error::Closed) => Poll::Pending,
                        Err(other) => panic!("{other:?}"),
                    })
                    .filter(Poll::is_ready)
                    .count()
            })
        })
        .collect();
    zk.close().unwrap();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(ok <= 1600);
    assert_eq!(zk.live_contexts(), 0);
}

/// While `close` runs, and that can take seconds (it sends CloseSession and waits for
/// the answer; here the server is paused and never answers), calls from other threads
/// fail with `Closed` at once instead of waiting for the close to finish.
#[test]
fn calls_during_a_slow_close_fail_closed_at_once() {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;
    let server = zk_harness::Server::start().unwrap();
    let zk = ZooKeeper::connect(&server.connect_string(), Duration::from_secs(10)).unwrap();
    zk.exists("/").unwrap();
    server.pause().unwrap();

    let closed_after = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let closer = {
        let zk = zk.clone();
        let closed_after = Arc::clone(&closed_after);
        thread::spawn(move || {
            zk.close().unwrap();
            closed_after.store(started.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
        })
    };
    // Once the close has started, calls answer Closed; each must come back while the
    // close is still running.
    let mut answered_closed = 0;
    loop {
        let before = Instant::now();
        let result = zk.client_id();
        let took = before.elapsed();
        match result {
            Err(Error::Closed) => {
                let close_done = closed_after.load(Ordering::SeqCst);
                assert_eq!(
                    close_done, 0,
                    "Closed came only after the close had finished ({close_done} ms); the \
                     call waited {took:?}"
                );
                answered_closed += 1;
                // Other kinds of call too, blocking and async.
                assert_eq!(zk.get("/").unwrap_err(), Error::Closed);
                assert_eq!(block_on(zk.exists_async("/")).unwrap_err(), Error::Closed);
                assert!(zk.is_unrecoverable());
                if answered_closed == 3 {
                    break;
                }
            }
            Ok(_) => assert_eq!(closed_after.load(Ordering::SeqCst), 0),
            Err(other) => panic!("{other:?}"),
        }
        assert!(started.elapsed() < WAIT, "close never started");
    }
    closer.join().unwrap();
    let close_took = closed_after.load(Ordering::SeqCst);
    println!("close took {close_took} ms with the server paused");
    assert_eq!(zk.state(), SessionState::Closed);
    assert_eq!(zk.live_contexts(), 0);
}
