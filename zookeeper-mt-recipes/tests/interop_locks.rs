//! Locks against real Curator 5.4 and kazoo 2.8 processes on the same paths: mutual
//! exclusion with the matching [`LockLayout`], exclusive writers for read-write locks,
//! and the overlap the native layout has with kazoo's default lock.

mod common;

use common::{connect, unique_path};
use std::thread;
use std::time::Duration;
use zk_harness::peers::{max_overlap, monotonic_ns, sections_at, Participant, Peer, Section};
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::locks::lease_semaphore::{LeaseSemaphore, SemaphoreLayout};
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::locks::ReentrantLock;
use zookeeper_mt_recipes::locks::{Lock, LockLayout};
use zookeeper_mt_recipes::OptionalExtension;

const T: Duration = Duration::from_secs(180);
/// Critical sections per participant.
const ROUNDS: u32 = 25;
/// How long each section is held.
const HOLD: Duration = Duration::from_millis(2);

/// One participant of ours: runs its sections in a thread of its own.
type OurRun = Box<dyn FnOnce() -> Vec<Section> + Send>;

fn start(participant: Participant, path: &str) -> Peer {
    let connect = zk_harness::shared_test_connect_string();
    let mut peer = Peer::builder(participant, &connect, path)
        .spawn()
        .unwrap_or_else(|e| panic!("{participant:?}: {e}"));
    peer.wait_ready(T)
        .unwrap_or_else(|e| panic!("{participant:?} not ready: {e}"));
    peer
}

/// `ROUNDS` sections of ours, each taken by `enter` (which returns the guard to drop).
fn our_sections<G>(who: &str, mut enter: impl FnMut() -> G) -> Vec<Section> {
    (0..ROUNDS)
        .map(|_| {
            let guard = enter();
            let enter_ns = monotonic_ns();
            thread::sleep(HOLD);
            let exit_ns = monotonic_ns();
            drop(guard);
            Section {
                holder: who.to_string(),
                enter_ns,
                exit_ns,
            }
        })
        .collect()
}

/// Runs `ROUNDS` sections on every peer and on each of `ours` (a thread each, with
/// its own session) at once; returns all sections.
fn run_together(peers: &mut [Peer], ours: Vec<(String, OurRun)>) -> Vec<Section> {
    for peer in peers.iter_mut() {
        peer.send_run(ROUNDS, HOLD).unwrap();
    }
    let handles: Vec<_> = ours.into_iter().map(|(_, f)| thread::spawn(f)).collect();
    let mut sections = Vec::new();
    for peer in peers.iter_mut() {
        let label = peer.label().to_string();
        let run = peer
            .finish_run(T)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(run.len(), ROUNDS as usize, "{label}");
        sections.extend(run);
    }
    for handle in handles {
        sections.extend(handle.join().unwrap());
    }
    sections
}

fn assert_exclusive(what: &str, sections: &[Section]) {
    let (overlap, at) = max_overlap(sections);
    eprintln!(
        "{what}: {} sections, at most {overlap} at once",
        sections.len()
    );
    assert_eq!(
        overlap,
        1,
        "{what}: overlapping sections {:?}",
        at.map(|t| sections_at(sections, t))
    );
}

/// Mutex runs of `participant` and two threads of ours with `layout` on one path.
fn mutex_interop(participant: Participant, layout: LockLayout) {
    let path = unique_path("mutex");
    let mut peers = vec![start(participant, &path)];
    let ours: Vec<(String, OurRun)> = (0..2)
        .map(|i| {
            let path = path.clone();
            let name = format!("rust#{i}");
            let who = name.clone();
            let run: OurRun = Box::new(move || {
                let zk = connect();
                let lock = Lock::new(&zk, &path).unwrap().with_layout(layout);
                our_sections(&who, || lock.acquire(Timeout::Never).unwrap())
            });
            (name, run)
        })
        .collect();
    let sections = run_together(&mut peers, ours);
    assert_exclusive(&format!("{participant:?} and ours ({layout:?})"), &sections);
}

#[test]
fn curator_mutex_and_curator_layout_exclude_each_other() {
    mutex_interop(Participant::CuratorMutex, LockLayout::Curator);
}

#[test]
fn kazoo_lock_and_kazoo_layout_exclude_each_other() {
    mutex_interop(Participant::KazooLock, LockLayout::Kazoo);
}

/// The native layout's nodes are invisible to kazoo's `Lock` (it counts only
/// `__lock__` nodes): kazoo takes the lock while ours is held. The kazoo layout's are
/// not: kazoo waits until ours is released.
#[test]
fn kazoo_sees_only_the_kazoo_layout() {
    let path = unique_path("kazoo-visibility");
    let zk = connect();
    let mut kazoo = start(Participant::KazooLock, &path);

    let native = Lock::new(&zk, &path).unwrap();
    let held = native.acquire(Timeout::Never).unwrap();
    kazoo.send_acquire().unwrap();
    kazoo.finish_acquire(T).unwrap();
    eprintln!("native layout: kazoo acquired while our guard was held (overlap)");
    assert!(!held.is_lost());
    // And ours, asked now, waits for kazoo's node (we count every sequential child).
    assert!(native.try_acquire().unwrap().is_none());
    kazoo.release(T).unwrap();
    held.release().unwrap();

    let kazoo_layout = Lock::new(&zk, &path)
        .unwrap()
        .with_layout(LockLayout::Kazoo);
    let held = kazoo_layout.acquire(Timeout::Never).unwrap();
    kazoo.send_acquire().unwrap();
    assert!(
        !kazoo.answered_within(Duration::from_millis(1500)).unwrap(),
        "kazoo acquired while our kazoo-layout guard was held"
    );
    held.release().unwrap();
    kazoo.finish_acquire(T).unwrap();
    assert!(kazoo_layout.try_acquire().unwrap().is_none());
    kazoo.release(T).unwrap();
}

/// Read-write runs: a foreign writer (and reader, if given) and a reader and writer of
/// ours on one path. Writers' sections overlap no other section; readers may share.
fn rwlock_interop(read: Option<Participant>, write: Participant, layout: LockLayout) {
    let path = unique_path("rwlock");
    let mut peers: Vec<Peer> = read.iter().map(|r| start(*r, &path)).collect();
    peers.push(start(write, &path));
    let mut ours: Vec<(String, OurRun)> = Vec::new();
    for writer in [false, true] {
        let path = path.clone();
        let name = if writer { "rust-writer" } else { "rust-reader" }.to_string();
        let who = name.clone();
        ours.push((
            name,
            Box::new(move || {
                let zk = connect();
                let lock = ReadWriteLock::new(&zk, &path).unwrap().with_layout(layout);
                if writer {
                    our_sections(&who, || lock.write(T).unwrap())
                } else {
                    our_sections(&who, || lock.read(T).unwrap())
                }
            }),
        ));
    }
    let writer_label = peers.last().unwrap().label().to_string();
    let sections = run_together(&mut peers, ours);
    let writers: Vec<&Section> = sections
        .iter()
        .filter(|s| s.holder == "rust-writer" || s.holder == writer_label)
        .collect();
    assert_eq!(writers.len(), 2 * ROUNDS as usize);
    let mut conflicts = 0;
    for w in &writers {
        conflicts += sections
            .iter()
            .filter(|s| !std::ptr::eq(*s, *w))
            .filter(|s| s.enter_ns < w.exit_ns && w.enter_ns < s.exit_ns)
            .count();
    }
    let (readers_at_once, _) = max_overlap(&sections);
    eprintln!(
        "{read:?}/{write:?} and ours ({layout:?}): {} sections, {conflicts} overlapping a \
         writer, at most {readers_at_once} at once",
        sections.len()
    );
    assert_eq!(
        conflicts, 0,
        "a writer's section overlapped another section"
    );
}

#[test]
fn curator_read_write_lock_and_curator_layout() {
    rwlock_interop(
        Some(Participant::CuratorReadLock),
        Participant::CuratorWriteLock,
        LockLayout::Curator,
    );
}

/// kazoo's `WriteLock` with our reader and writer. kazoo's own `ReadLock` is left out:
/// in kazoo 2.8 a `ReadLock` waits for the last `__lock__` node of the whole directory,
/// also one queued after it, while that writer waits for the reader, so a kazoo reader
/// with any writer queued behind it (kazoo's or ours) waits forever.
#[test]
fn kazoo_write_lock_and_kazoo_layout() {
    rwlock_interop(None, Participant::KazooWriteLock, LockLayout::Kazoo);
}

/// Semaphore runs: a foreign semaphore with `PERMITS` leases and two threads of ours
/// (the matching layout), one lease per section: at most `PERMITS` at once.
fn semaphore_interop(participant: Participant, layout: SemaphoreLayout) {
    const PERMITS: u32 = 2;
    let path = unique_path("semaphore");
    let mut peers = vec![start(participant, &path)];
    let ours: Vec<(String, OurRun)> = (0..2)
        .map(|i| {
            let path = path.clone();
            let name = format!("rust#{i}");
            let who = name.clone();
            let run: OurRun = Box::new(move || {
                let zk = connect();
                let pool = LeaseSemaphore::new(&zk, &path, PERMITS, layout).unwrap();
                our_sections(&who, || {
                    pool.acquire(1, T).optional().unwrap().expect("a lease")
                })
            });
            (name, run)
        })
        .collect();
    let sections = run_together(&mut peers, ours);
    let (overlap, at) = max_overlap(&sections);
    eprintln!(
        "{participant:?} and ours ({layout:?}): {} sections, at most {overlap} at once \
         (max {PERMITS})",
        sections.len()
    );
    assert!(
        overlap <= PERMITS as usize,
        "more than {PERMITS} leases at once: {:?}",
        at.map(|t| sections_at(&sections, t))
    );
}

#[test]
fn curator_semaphore_v2_and_curator_layout() {
    semaphore_interop(
        Participant::CuratorSemaphore { permits: 2 },
        SemaphoreLayout::Curator,
    );
}

#[test]
fn kazoo_semaphore_and_kazoo_layout() {
    semaphore_interop(
        Participant::KazooSemaphore { permits: 2 },
        SemaphoreLayout::Kazoo,
    );
}

/// Curator's `InterProcessMutex` is reentrant too; ours in the Curator layout, entered
/// twice per section, excludes it.
#[test]
fn curator_mutex_and_reentrant_lock() {
    let path = unique_path("reentrant");
    let mut peers = vec![start(Participant::CuratorMutex, &path)];
    let run_path = path.clone();
    let run: OurRun = Box::new(move || {
        let zk = connect();
        let lock = ReentrantLock::new(&zk, &run_path)
            .unwrap()
            .with_layout(LockLayout::Curator);
        our_sections("rust-reentrant", || {
            let outer = lock.acquire(Timeout::Never).unwrap();
            let inner = lock.acquire(Timeout::Never).unwrap();
            assert_eq!(inner.hold_count(), 2);
            (inner, outer)
        })
    });
    let sections = run_together(&mut peers, vec![("rust-reentrant".to_string(), run)]);
    assert_exclusive("CuratorMutex and our reentrant lock (Curator)", &sections);
}
