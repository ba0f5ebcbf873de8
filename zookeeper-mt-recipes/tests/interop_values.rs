//! Shared values against real Curator 5.4 and kazoo 2.8 processes on the same nodes:
//! every increment counted when all sides increment concurrently, and each side reads
//! the others' writes.

mod common;

use common::{connect, unique_path};
use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;
use zk_harness::peers::{Participant, Peer};
use zookeeper_mt_recipes::shared::{AtomicLong, KazooCounter, SharedCount};
use zookeeper_mt_recipes::RecipeError;

const T: Duration = Duration::from_secs(120);
/// Increments per participant (peer process or our thread).
const EACH: u32 = 40;

fn start(participant: Participant, path: &str) -> Peer {
    let connect = zk_harness::shared_test_connect_string();
    Peer::builder(participant, &connect, path)
        .spawn()
        .unwrap_or_else(|e| panic!("{participant:?}: {e}"))
}

fn ready(peers: &mut [Peer]) {
    for peer in peers {
        peer.wait_ready(T)
            .unwrap_or_else(|e| panic!("{} not ready: {e}", peer.label()));
    }
}

/// Runs `EACH` increments on every peer and on `threads` threads of ours (each with its
/// own session) at the same time, and checks that every increment was applied once on
/// top of the previous one: the `pre` values of all sides together are exactly
/// `start..start + total`.
fn increment_together(
    peers: &mut [Peer],
    threads: usize,
    start_value: i64,
    ours: impl Fn(&zookeeper_mt::ZooKeeper) -> Box<dyn FnMut() -> (i64, i64)> + Sync,
) -> i64 {
    for peer in peers.iter_mut() {
        peer.send_add(1, EACH).unwrap();
    }
    let mut changes: Vec<(String, i64, i64)> = Vec::new();
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let ours = &ours;
                scope.spawn(move || {
                    let zk = connect();
                    let mut add = ours(&zk);
                    (0..EACH)
                        .map(|_| {
                            let (pre, post) = add();
                            (format!("rust#{i}"), pre, post)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for peer in peers.iter_mut() {
            let label = peer.label().to_string();
            let added = peer
                .finish_add(T)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(added.len(), EACH as usize, "{label}");
            changes.extend(
                added
                    .into_iter()
                    .map(|(pre, post)| (label.clone(), pre, post)),
            );
        }
        for handle in handles {
            changes.extend(handle.join().unwrap());
        }
    });
    let total = (peers.len() + threads) as i64 * i64::from(EACH);
    let mut pres = BTreeSet::new();
    for (who, pre, post) in &changes {
        assert_eq!(*post, pre + 1, "{who}: {pre} -> {post}");
        assert!(
            pres.insert(*pre),
            "two increments from {pre} (one by {who}): an increment was lost"
        );
    }
    assert_eq!(
        pres,
        (start_value..start_value + total).collect::<BTreeSet<_>>(),
        "the increments do not form one chain"
    );
    // How interleaved the chain is: consecutive increments by different sides.
    changes.sort_by_key(|(_, pre, _)| *pre);
    let switches = changes.windows(2).filter(|w| w[0].0 != w[1].0).count();
    eprintln!(
        "{} increments from {} peers and {threads} threads, each counted once; \
         {switches} hand-overs between sides",
        changes.len(),
        peers.len()
    );
    start_value + total
}

/// Curator `SharedCount`, kazoo `Counter(support_curator=True)` and our `SharedCount`
/// increment one node together.
#[test]
fn shared_count_with_curator_and_kazoo() {
    let path = unique_path("shared-count");
    let zk = connect();
    let count = SharedCount::new(&zk, &path, 0).unwrap();
    let mut peers = vec![
        start(Participant::CuratorSharedCount { seed: 0 }, &path),
        start(Participant::KazooCuratorCounter, &path),
    ];
    ready(&mut peers);
    let end = increment_together(&mut peers, 2, 0, |zk| {
        let count = SharedCount::new(zk, &path, 0).unwrap();
        Box::new(move || {
            let change = count.add(1).unwrap();
            assert!(change.succeeded);
            (i64::from(change.pre), i64::from(change.post))
        })
    });
    assert_eq!(i64::from(count.count().unwrap()), end);
    for peer in &mut peers {
        eventually_reads(peer, end);
    }
}

/// Waits until `peer` reads `value`. Curator's `SharedCount` answers `getCount` from a
/// cache its own watch updates, so it may lag a moment behind the last writes; nothing
/// in the protocol signals that catch-up, hence the polling.
fn eventually_reads(peer: &mut Peer, value: i64) {
    let deadline = std::time::Instant::now() + T;
    loop {
        let read = peer.get(T).unwrap();
        if read == value {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} still reads {read}, not {value}",
            peer.label()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Each side reads the others' writes, including through Curator's listener and our
/// watch.
#[test]
fn shared_count_sides_read_each_other() {
    let path = unique_path("shared-read");
    let zk = connect();
    let mut curator = start(Participant::CuratorSharedCount { seed: 5 }, &path);
    let mut kazoo = start(Participant::KazooCuratorCounter, &path);
    curator.wait_ready(T).unwrap();
    kazoo.wait_ready(T).unwrap();
    // Curator created the node with its seed: we read Curator's layout.
    let count = SharedCount::new(&zk, &path, 99).unwrap();
    assert_eq!(count.count().unwrap(), 5);
    let mut watch = count.watch().unwrap();
    assert_eq!(watch.next(T).unwrap().value, 5);
    curator.watch(T).unwrap();

    // Ours -> Curator (listener and read) and kazoo.
    let seen = count.get().unwrap();
    assert!(count.try_set(-70_000, seen.version).unwrap());
    curator.wait_for_value(-70_000, T).unwrap();
    assert_eq!(curator.get(T).unwrap(), -70_000);
    assert_eq!(kazoo.get(T).unwrap(), -70_000);

    // Curator -> ours (watch and read).
    curator.set(123_456, T).unwrap();
    let mut latest = watch.next(T).unwrap();
    while latest.value != 123_456 {
        latest = watch.next(T).expect("Curator's write reaches our watch");
    }
    assert_eq!(count.count().unwrap(), 123_456);

    // kazoo -> ours and Curator; our stale versioned set then fails.
    assert_eq!(kazoo.add(-456, 1, T).unwrap(), vec![(123_456, 123_000)]);
    assert!(!count.try_set(0, latest.version).unwrap());
    assert_eq!(count.count().unwrap(), 123_000);
    curator.wait_for_value(123_000, T).unwrap();
}

/// Curator `DistributedAtomicLong` and our `AtomicLong` increment one node together.
#[test]
fn atomic_long_with_curator() {
    let path = unique_path("atomic-long");
    let zk = connect();
    let value = AtomicLong::new(&zk, &path).unwrap();
    value.force_set(1 << 33).unwrap();
    let mut peers = vec![
        start(Participant::CuratorAtomicLong, &path),
        start(Participant::CuratorAtomicLong, &path),
    ];
    ready(&mut peers);
    assert_eq!(peers[0].get(T).unwrap(), 1 << 33, "Curator reads our long");
    let end = increment_together(&mut peers, 2, 1 << 33, |zk| {
        let value = AtomicLong::new(zk, &path).unwrap();
        Box::new(move || {
            let change = value.increment().unwrap();
            assert!(change.succeeded);
            (change.pre, change.post)
        })
    });
    assert_eq!(value.get().unwrap(), end);

    // Curator's forceSet, then our compare-and-set against it.
    peers[0].set(-1, T).unwrap();
    let miss = value.compare_and_set(end, 0).unwrap();
    assert_eq!((miss.succeeded, miss.pre), (false, -1));
    assert!(value.compare_and_set(-1, 7).unwrap().succeeded);
    assert_eq!(peers[1].get(T).unwrap(), 7);
}

/// kazoo `Counter` (decimal text) processes and our `KazooCounter` increment one node
/// together; a kazoo float counter's text is reported as corrupt, not misread.
#[test]
fn kazoo_counter_with_kazoo() {
    let path = unique_path("kazoo-counter");
    let zk = connect();
    let mut peers = vec![
        start(Participant::KazooCounter, &path),
        start(Participant::KazooCounter, &path),
    ];
    ready(&mut peers);
    peers[0].set(-10, T).unwrap();
    let counter = KazooCounter::new(&zk, &path).unwrap();
    assert_eq!(counter.value().unwrap(), -10, "we read kazoo's text");
    let end = increment_together(&mut peers, 2, -10, |zk| {
        let counter = KazooCounter::new(zk, &path).unwrap();
        Box::new(move || {
            let change = counter.add(1).unwrap();
            (change.pre, change.post)
        })
    });
    assert_eq!(counter.value().unwrap(), end);
    assert_eq!(zk.get(&path).unwrap().0, end.to_string().into_bytes());
    counter.subtract(end + 3).unwrap();
    assert_eq!(peers[1].get(T).unwrap(), -3, "kazoo reads our text");

    zk.set(&path, b"2.5", None).unwrap();
    assert!(matches!(counter.value(), Err(RecipeError::Corrupt(_))));
}
