//! Curator and kazoo peer processes: each participant starts against a real server,
//! answers its commands and reports what its library saw.

use std::time::Duration;

use zk_harness::peers::{max_overlap, monotonic_ns, Participant, Peer, PeerError};
use zk_harness::{process_alive, shared_test_connect_string};

const T: Duration = Duration::from_secs(60);

fn unique(name: &str) -> String {
    format!(
        "/zk-harness-peers/{name}-{}-{}",
        std::process::id(),
        monotonic_ns()
    )
}

/// Spawns every participant first so their start-ups overlap, then waits for all.
fn start_all(list: &[(Participant, &str)]) -> Vec<Peer> {
    let connect = shared_test_connect_string();
    let mut peers: Vec<Peer> = list
        .iter()
        .map(|(p, path)| Peer::builder(*p, &connect, path).spawn().expect("spawn"))
        .collect();
    for peer in &mut peers {
        peer.wait_ready(T)
            .unwrap_or_else(|e| panic!("{} not ready: {e}", peer.label()));
    }
    peers
}

/// A lock-like participant: sections in order with stamps from CLOCK_MONOTONIC, and a
/// second participant of the same kind blocked while the first holds.
fn check_lock_like(kind: Participant, exclusive: bool) {
    let path = unique(&format!("{kind:?}"));
    let mut peers = start_all(&[(kind, &path), (kind, &path)]);
    let [a, b] = peers.as_mut_slice() else {
        unreachable!()
    };

    let before = monotonic_ns();
    let sections = a.run(3, Duration::from_millis(2), T).expect("run");
    let after = monotonic_ns();
    assert_eq!(sections.len(), 3, "{}", a.label());
    for s in &sections {
        assert!(
            before <= s.enter_ns,
            "{s:?} before {before}: not CLOCK_MONOTONIC?"
        );
        assert!(s.enter_ns + 1_000_000 <= s.exit_ns, "held 2 ms: {s:?}");
        assert!(s.exit_ns <= after, "{s:?} after {after}");
    }
    assert_eq!(max_overlap(&sections).0, 1);

    let entered = a.acquire(T).expect("acquire");
    b.send_acquire().unwrap();
    if exclusive {
        assert!(
            !b.answered_within(Duration::from_millis(500)).unwrap(),
            "{} acquired while {} holds",
            b.label(),
            a.label()
        );
    }
    let left = a.release(T).expect("release");
    assert!(entered <= left);
    let b_entered = b.finish_acquire(T).expect("second acquire");
    if exclusive {
        assert!(
            left <= b_entered,
            "{} entered before the release",
            b.label()
        );
    }
    b.release(T).unwrap();

    // A command the library refuses is a typed error, and the peer goes on.
    match b.release(T) {
        Err(PeerError::Command { message, .. }) => assert!(!message.is_empty()),
        other => panic!("release without holding: {other:?}"),
    }
    b.acquire(T).expect("acquire after an error");
    b.release(T).unwrap();
    for peer in peers {
        peer.quit(T).expect("quit");
    }
}

#[test]
fn curator_mutex() {
    check_lock_like(Participant::CuratorMutex, true);
}

#[test]
fn curator_read_write_lock() {
    check_lock_like(Participant::CuratorWriteLock, true);
    // Readers share.
    check_lock_like(Participant::CuratorReadLock, false);
}

#[test]
fn curator_leader_latch() {
    check_lock_like(Participant::CuratorLeaderLatch, true);
}

#[test]
fn curator_semaphore() {
    check_lock_like(Participant::CuratorSemaphore { permits: 1 }, true);
}

#[test]
fn kazoo_locks_and_election() {
    check_lock_like(Participant::KazooLock, true);
    check_lock_like(Participant::KazooWriteLock, true);
    check_lock_like(Participant::KazooReadLock, false);
    check_lock_like(Participant::KazooElection, true);
}

#[test]
fn semaphores_allow_their_permits() {
    for kind in [
        Participant::CuratorSemaphore { permits: 2 },
        Participant::KazooSemaphore { permits: 2 },
    ] {
        let path = unique("semaphore");
        let mut peers = start_all(&[(kind, &path), (kind, &path), (kind, &path)]);
        for peer in &mut peers {
            peer.send_run(4, Duration::from_millis(20)).unwrap();
        }
        let mut all = Vec::new();
        for peer in &mut peers {
            all.extend(peer.finish_run(T).expect("run"));
        }
        assert_eq!(all.len(), 12);
        let (most, _) = max_overlap(&all);
        assert!(most <= 2, "{kind:?}: {most} holders of 2 permits");
    }
}

#[test]
fn counters_count_and_see_each_other() {
    let path = unique("count");
    let mut peers = start_all(&[
        (Participant::CuratorSharedCount { seed: 7 }, &path),
        (Participant::KazooCuratorCounter, &path),
    ]);
    let [curator, kazoo] = peers.as_mut_slice() else {
        unreachable!()
    };
    assert_eq!(curator.get(T).unwrap(), 7, "created with the seed");
    assert_eq!(kazoo.get(T).unwrap(), 7, "kazoo reads SharedCount's layout");
    curator.watch(T).unwrap();

    let changes = kazoo.add(5, 3, T).unwrap();
    assert_eq!(changes, vec![(7, 12), (12, 17), (17, 22)]);
    curator
        .wait_for_value(22, T)
        .expect("Curator's listener sees kazoo's writes");
    assert_eq!(curator.add(-2, 1, T).unwrap(), vec![(22, 20)]);
    assert_eq!(kazoo.get(T).unwrap(), 20);
    kazoo.set(-3, T).unwrap();
    curator.wait_for_value(-3, T).unwrap();
    curator.set(100, T).unwrap();
    assert_eq!(kazoo.get(T).unwrap(), 100);

    let long = unique("long");
    let text = unique("text");
    let mut more = start_all(&[
        (Participant::CuratorAtomicLong, &long),
        (Participant::KazooCounter, &text),
    ]);
    let [atomic, counter] = more.as_mut_slice() else {
        unreachable!()
    };
    assert_eq!(atomic.get(T).unwrap(), 0, "absent counts as 0");
    assert_eq!(
        atomic.add(1 << 40, 2, T).unwrap().last(),
        Some(&(1 << 40, 1 << 41))
    );
    atomic.set(-1, T).unwrap();
    assert_eq!(atomic.get(T).unwrap(), -1);
    assert_eq!(counter.add(2, 2, T).unwrap(), vec![(0, 2), (2, 4)]);
    counter.set(40, T).unwrap();
    assert_eq!(counter.add(-1, 1, T).unwrap(), vec![(40, 39)]);
}

#[test]
fn party_members_see_each_other() {
    let path = unique("party");
    let connect = shared_test_connect_string();
    let mut a = Peer::builder(Participant::KazooParty, &connect, &path)
        .id("alpha")
        .start()
        .unwrap();
    let mut b = Peer::builder(Participant::KazooParty, &connect, &path)
        .id("beta")
        .start()
        .unwrap();
    a.join(T).unwrap();
    b.join(T).unwrap();
    assert_eq!(a.members(T).unwrap(), ["alpha", "beta"]);
    b.leave(T).unwrap();
    assert_eq!(a.members(T).unwrap(), ["alpha"]);
    // A killed member's node goes with its session, once that expires.
    a.kill();
}

#[test]
fn a_dropped_peer_is_gone() {
    let path = unique("drop");
    let peer = Peer::start(
        Participant::CuratorMutex,
        &shared_test_connect_string(),
        &path,
    )
    .unwrap();
    let pid = peer.pid();
    assert!(process_alive(pid));
    drop(peer);
    assert!(!process_alive(pid), "pid {pid} outlived its Peer");

    let mut peer =
        Peer::start(Participant::KazooLock, &shared_test_connect_string(), &path).unwrap();
    let pid = peer.pid();
    peer.kill();
    assert!(!process_alive(pid));
    match peer.acquire(T) {
        Err(PeerError::Exited { .. }) => {}
        other => panic!("a killed peer answered: {other:?}"),
    }
}

#[test]
fn crafted_state_is_served() {
    let crafted = zk_harness::Crafted::new()
        .node("/crafted/count", &42i32.to_be_bytes(), -1)
        .dir("/crafted/dir", 1000);
    let server =
        zk_harness::Server::start_crafted_with(&crafted, &zk_harness::ServerOptions::for_tests())
            .expect("crafted snapshot");
    let mut kazoo = Peer::start(
        Participant::KazooCuratorCounter,
        &server.connect_string(),
        "/crafted/count",
    )
    .unwrap();
    assert_eq!(
        kazoo.get(T).unwrap(),
        42,
        "the crafted node's data is served"
    );
    // kazoo writes at the version it read: -1, i.e. unconditionally (ZOOKEEPER-4743).
    assert_eq!(kazoo.add(1, 1, T).unwrap(), vec![(42, 43)]);
}
