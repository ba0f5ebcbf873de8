//! The end of a session seen by watches: a watch reporting expiry finds `state()`
//! already `Expired`, and `close` never waits behind a watch removal (racing expiry, or
//! waiting for a frozen server).

mod common;

use common::{create, hosts, unique, wait_for_state, Proxy, WAIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::{
    Error, EventType, SessionState, Watch, WatchRemoval, WatcherType, ZkFuture, ZooKeeper,
};

/// Waits for every future, in order.
fn all<T>(futures: Vec<ZkFuture<T>>) -> Vec<T> {
    futures
        .into_iter()
        .map(|f| f.wait_timeout(WAIT).unwrap())
        .collect()
}

fn connect_via(proxy: &Proxy, timeout: Duration) -> ZooKeeper {
    ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(timeout)
        .connect()
        .unwrap()
}

/// Expires `zk`'s session (reached through `proxy`): cut it off, let another handle take
/// the session over and close it, let it back.
fn expire(zk: &ZooKeeper, proxy: &Proxy) {
    let events = zk.session_events();
    let id = zk.client_id().unwrap();
    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);
    let thief = ZooKeeper::builder(&hosts()).session(id).connect().unwrap();
    thief.close().unwrap();
    proxy.unblock();
}

/// C calls path watchers before the global watcher: a `Watch` reporting expiry must
/// find `state()` already `Expired`.
#[test]
fn a_watch_reporting_expiry_sees_the_expired_state() {
    let proxy = Proxy::start(&hosts());
    let zk = connect_via(&proxy, Duration::from_secs(6));
    let base = unique("ws-expiry");
    let futures: Vec<_> = (0..5_000)
        .map(|i| zk.exists_watch_async(&format!("{base}/{i}")))
        .collect();
    let watches: Vec<Watch> = all(futures).into_iter().map(|(_, w)| w).collect();
    assert_eq!(zk.live_contexts(), 5_000);

    // Observers blocked on watches spread over the set, reading state() on each event.
    let watches = Arc::new(watches);
    let observers: Vec<_> = (0..8)
        .map(|k| {
            let zk = zk.clone();
            let watches = Arc::clone(&watches);
            thread::spawn(move || {
                let mut seen = Vec::new();
                let deadline = Instant::now() + WAIT * 3;
                for i in (k..watches.len()).step_by(8) {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let event = watches[i].wait_timeout(left);
                    seen.push((i, event, zk.state()));
                }
                seen
            })
        })
        .collect();
    expire(&zk, &proxy);
    let mut wrong = Vec::new();
    for observer in observers {
        for (i, event, state) in observer.join().unwrap() {
            let event = event.unwrap_or_else(|e| panic!("watch {i}: no event: {e}"));
            assert_eq!(
                (event.event_type, event.state),
                (EventType::Session, SessionState::Expired),
                "watch {i}"
            );
            if state != SessionState::Expired {
                wrong.push((i, state));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 5000 watches reported expiry while state() said otherwise, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
}

/// Runs `close` on another thread; panics with `what` if it does not return in time.
fn close_within(zk: &ZooKeeper, limit: Duration, what: &str) {
    let (sender, receiver) = mpsc::channel();
    let closer = {
        let zk = zk.clone();
        thread::spawn(move || {
            let _ = sender.send(zk.close());
        })
    };
    match receiver.recv_timeout(limit) {
        Ok(result) => result.unwrap(),
        // The closer is left behind: the process cannot recover a thread stuck in C.
        Err(_) => panic!("close() did not return within {limit:?}: {what}"),
    }
    closer.join().unwrap();
}

/// `remove_watches(local = false)` racing the session's expiry (the C client's sync form
/// can then wait forever, ZOOKEEPER-2802) must not hold up `close`. That C window is
/// narrow (callers mostly wait on queued requests while the IO thread ends the session),
/// so this guards the whole sequence; the frozen-server test below shows `close`
/// waiting behind a removal deterministically.
#[test]
fn close_racing_remove_watches_at_expiry_never_hangs() {
    for round in 0..3 {
        let proxy = Proxy::start(&hosts());
        let zk = connect_via(&proxy, Duration::from_secs(6));
        let path = unique("ws-expiry-remove");
        create(&zk, &path, b"");
        let stop = Arc::new(AtomicBool::new(false));
        let removers: Vec<_> = (0..6)
            .map(|_| {
                let zk = zk.clone();
                let path = path.clone();
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let mut keep = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        match zk.exists_watch(&path) {
                            Ok((_, watch)) => keep.push(watch),
                            Err(Error::ConnectionLoss) => {}
                            Err(_) => break,
                        }
                        match zk.remove_watches(&path, WatcherType::Any, WatchRemoval::Server) {
                            Ok(()) | Err(Error::NoWatcher) | Err(Error::ConnectionLoss) => {}
                            Err(_) => break,
                        }
                    }
                })
            })
            .collect();
        let events = zk.session_events();
        expire(&zk, &proxy);
        wait_for_state(&events, SessionState::Expired, WAIT);
        close_within(
            &zk,
            Duration::from_secs(30),
            &format!("round {round}: behind a watch removal racing expiry"),
        );
        stop.store(true, Ordering::Relaxed);
        for remover in removers {
            remover.join().unwrap();
        }
        assert_eq!(zk.live_contexts(), 0);
    }
}

/// A `remove_watches(local = false)` waiting for a frozen server's answer must not hold
/// up `close` (before, close waited until the C client gave up on the server).
#[test]
fn close_does_not_wait_for_a_watch_removal_on_a_frozen_server() {
    let server =
        Server::start_with(&ServerOptions::for_tests().max_session_timeout_ms(Some(60_000)))
            .unwrap();
    let zk = ZooKeeper::builder(&server.connect_string())
        .session_timeout(Duration::from_secs(60))
        .connect()
        .unwrap();
    let path = unique("ws-frozen");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    server.pause().unwrap();
    let (sender, removed) = mpsc::channel();
    let remover = {
        let zk = zk.clone();
        let path = path.clone();
        thread::spawn(move || {
            let _ = sender.send(zk.remove_watches(&path, WatcherType::Any, WatchRemoval::Server));
        })
    };
    // No event says the request has reached C; give it a moment (if it has not, the
    // test passes without exercising the race).
    thread::sleep(Duration::from_millis(500));
    close_within(
        &zk,
        Duration::from_secs(20),
        "behind a watch removal waiting for a frozen server",
    );
    let result = removed.recv_timeout(WAIT).expect("the removal returned");
    assert!(
        matches!(result, Err(Error::Closed) | Err(Error::ConnectionLoss)),
        "{result:?}"
    );
    remover.join().unwrap();
    assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
    server.resume().unwrap();
}
