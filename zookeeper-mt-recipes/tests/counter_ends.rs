//! Every recipe run across the real ends of ZooKeeper's 32-bit counters, on servers
//! started from crafted data directories (`zk_harness::Crafted`):
//!
//! - sequential nodes: a recipe directory whose stored child counter starts a few
//!   numbers below [`SEQUENCE_LIMIT`] (the recipes' own end) and a few below
//!   2147483647 (the server's end, where 3.8.0 repeats 2147483647 and hands concurrent
//!   creates negative numbers). Several sessions run the recipe concurrently across
//!   that point; the recipe's documented guarantee is checked with the
//!   `zk_harness::history` checkers, and the documented behaviour at the end (the
//!   directory restarts once drained, `SequenceExhausted` meanwhile) is seen to happen;
//! - data versions: a counter node whose data version starts just below -1 (a CAS
//!   against -1 is no CAS, ZOOKEEPER-4743) and just below `i32::MAX` (the version wraps
//!   to `i32::MIN`): every id unique, every increment counted.
//!
//! Each test starts one crafted server holding all of its directories.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt_recipes::OptionalExtension;

use zk_harness::history::{
    check_fifo, check_lock, check_queue, check_semaphore, check_unique_ids, check_work_queue,
    monotonic_nanos, Completion, CriticalSection, IssuedId, Put, Take,
};
use zk_harness::{Crafted, Server};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::barriers::DoubleBarrier;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::semaphore::Semaphore;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::nodes::{sequence_in_range, sequence_of, SEQUENCE_LIMIT};
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::shared::IdGenerator;
use zookeeper_mt_recipes::shared::{AtomicLong, KazooCounter, SharedCount};
use zookeeper_mt_recipes::RecipeError;

/// Upper bound of any single wait (only reached when something is broken).
const WAIT: Duration = Duration::from_secs(60);
/// Where the counters start: a few creates below the recipes' limit, and two below the
/// server's end, so the first concurrent creates already get 2147483647 repeated or
/// negative numbers.
const STARTS: [(&str, i32); 2] = [("limit", SEQUENCE_LIMIT - 6), ("max", i32::MAX - 2)];
/// A sequence number below this was handed out by a restarted directory.
const RESTARTED_BELOW: i32 = 1_000;

fn start(crafted: &Crafted) -> Server {
    let t = Instant::now();
    let server = Server::start_crafted(crafted).expect("crafted server starts");
    eprintln!("crafted server serving after {:?}", t.elapsed());
    server
}

fn connect(server: &Server) -> ZooKeeper {
    let zk =
        ZooKeeper::connect(&server.connect_string(), Duration::from_secs(10)).expect("connects");
    zk.wait_connected(WAIT).expect("connected");
    zk
}

/// Runs `f(i)` on `n` threads, each with its own session; returns their results in
/// thread order (a panicking thread fails the test).
fn on_threads<T: Send + 'static>(
    server: &Server,
    n: usize,
    f: impl Fn(usize, ZooKeeper) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let zk = connect(server);
            let f = Arc::clone(&f);
            thread::spawn(move || f(i, zk))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("worker thread"))
        .collect()
}

/// Retries `op` while it fails with `SequenceExhausted` (the directory is busy at the
/// counter's end: documented to succeed again once it drains); counts those failures.
fn until_not_exhausted<T>(
    exhausted: &AtomicUsize,
    mut op: impl FnMut() -> zookeeper_mt_recipes::Result<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match op() {
            Ok(value) => return value,
            Err(RecipeError::SequenceExhausted { .. }) if Instant::now() < deadline => {
                exhausted.fetch_add(1, Ordering::Relaxed);
                // Others are draining the directory; give them the turn.
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("recipe call failed: {e}"),
        }
    }
}

fn assert_restarted(what: &str, seqs: &[i32]) {
    assert!(
        seqs.iter().all(|&s| sequence_in_range(s)),
        "{what}: a node numbered past the end took part: {seqs:?}"
    );
    assert!(
        seqs.iter().any(|&s| s < RESTARTED_BELOW),
        "{what}: the directory never restarted its counter: {seqs:?}"
    );
}

fn no_overlap(a: &CriticalSection, b: &CriticalSection) -> bool {
    a.end <= b.start || b.end <= a.start
}

// ================================================================ lock, election

#[test]
fn lock_and_election_have_one_holder_across_the_sequence_end() {
    let mut crafted = Crafted::new();
    for (name, start) in STARTS {
        crafted = crafted
            .dir(&format!("/ends/lock-{name}"), start)
            .dir(&format!("/ends/election-{name}"), start);
    }
    let server = start(&crafted);

    for (name, _) in STARTS {
        // Lock: 4 sessions x 6 acquisitions, the counter crosses the end after 6 creates.
        let dir = format!("/ends/lock-{name}");
        let results = on_threads(&server, 4, move |i, zk| {
            let lock = Lock::new(&zk, &dir).expect("lock");
            let mut out = Vec::new();
            for _ in 0..6 {
                let guard = lock
                    .acquire(WAIT)
                    .optional()
                    .expect("acquire")
                    .expect("acquired within the deadline");
                let start = monotonic_nanos();
                // A round trip inside the section, so sections last while others try.
                zk.exists(lock.path()).expect("exists");
                let end = monotonic_nanos();
                out.push((
                    CriticalSection {
                        owner: format!("t{i}"),
                        token: guard.fencing_token(),
                        start,
                        end,
                    },
                    guard.sequence(),
                ));
                guard.release().expect("release");
            }
            out
        });
        let (sections, seqs): (Vec<_>, Vec<_>) = results.into_iter().flatten().unzip();
        println!(
            "lock {name}: {} sections, sequences {seqs:?}",
            sections.len()
        );
        assert_eq!(sections.len(), 24);
        if let Err(v) = check_lock(&sections) {
            panic!("lock {name}: {v}");
        }
        assert_restarted(&format!("lock {name}"), &seqs);

        // Election: 3 candidates x 4 terms each.
        let dir = format!("/ends/election-{name}");
        let exhausted = Arc::new(AtomicUsize::new(0));
        let ex = Arc::clone(&exhausted);
        let results = on_threads(&server, 3, move |i, zk| {
            let mut out = Vec::new();
            for _ in 0..4 {
                let candidate = until_not_exhausted(&ex, || LeaderElection::new(&zk, &dir, b"c"));
                candidate.wait_until_leader(WAIT).expect("leads");
                let start = monotonic_nanos();
                assert!(candidate.is_leader().expect("is_leader"));
                let end = monotonic_nanos();
                out.push((
                    CriticalSection {
                        owner: format!("c{i}"),
                        token: candidate.fencing_token(),
                        start,
                        end,
                    },
                    candidate.sequence(),
                ));
                candidate.resign().expect("resign");
            }
            out
        });
        let (terms, seqs): (Vec<_>, Vec<_>) = results.into_iter().flatten().unzip();
        println!(
            "election {name}: {} terms, {} joins at the end refused, sequences {seqs:?}",
            terms.len(),
            exhausted.load(Ordering::Relaxed)
        );
        assert_eq!(terms.len(), 12);
        if let Err(v) = check_lock(&terms) {
            panic!("election {name}: {v}");
        }
        assert_restarted(&format!("election {name}"), &seqs);
    }
}

// ================================================================ semaphore, rwlock

#[test]
fn semaphore_and_rwlock_keep_their_limits_across_the_sequence_end() {
    let mut crafted = Crafted::new();
    for (name, start) in STARTS {
        crafted = crafted
            .dir(&format!("/ends/semaphore-{name}"), start)
            .dir(&format!("/ends/rwlock-{name}"), start);
    }
    let server = start(&crafted);
    const PERMITS: u32 = 2;

    for (name, _) in STARTS {
        let dir = format!("/ends/semaphore-{name}");
        let results = on_threads(&server, 4, move |i, zk| {
            let semaphore = Semaphore::new(&zk, &dir, PERMITS).expect("semaphore");
            let mut out = Vec::new();
            for round in 0..5 {
                let lease = semaphore
                    .acquire(WAIT)
                    .expect("a permit within the deadline");
                let start = monotonic_nanos();
                zk.exists(&dir).expect("exists");
                let end = monotonic_nanos();
                out.push((
                    CriticalSection {
                        owner: format!("t{i}"),
                        token: (i * 100 + round) as i64,
                        start,
                        end,
                    },
                    sequence_of(lease.node()).expect("a numbered lease"),
                ));
                lease.release().expect("release");
            }
            out
        });
        let (sections, seqs): (Vec<_>, Vec<_>) = results.into_iter().flatten().unzip();
        println!(
            "semaphore {name}: {} leases, sequences {seqs:?}",
            sections.len()
        );
        assert_eq!(sections.len(), 20);
        if let Err(v) = check_semaphore(&sections, PERMITS as usize) {
            panic!("semaphore {name}: {v}");
        }
        assert_restarted(&format!("semaphore {name}"), &seqs);

        // Read-write lock: 3 sessions alternating reads and writes.
        let dir = format!("/ends/rwlock-{name}");
        let results = on_threads(&server, 3, move |i, zk| {
            let rw = ReadWriteLock::new(&zk, &dir).expect("rwlock");
            let mut writes = Vec::new();
            let mut reads = Vec::new();
            for round in 0..6 {
                if (round + i) % 2 == 0 {
                    let guard = rw.write(WAIT).expect("write lock");
                    let start = monotonic_nanos();
                    zk.exists(&dir).expect("exists");
                    let end = monotonic_nanos();
                    writes.push(CriticalSection {
                        owner: format!("w{i}"),
                        token: guard.fencing_token(),
                        start,
                        end,
                    });
                    drop(guard);
                } else {
                    let guard = rw.read(WAIT).expect("read lock");
                    let start = monotonic_nanos();
                    zk.exists(&dir).expect("exists");
                    let end = monotonic_nanos();
                    reads.push(CriticalSection {
                        owner: format!("r{i}"),
                        token: guard.fencing_token(),
                        start,
                        end,
                    });
                    drop(guard);
                }
            }
            (writes, reads)
        });
        let (writes, reads): (Vec<_>, Vec<_>) = results.into_iter().unzip();
        let writes: Vec<CriticalSection> = writes.into_iter().flatten().collect();
        let reads: Vec<CriticalSection> = reads.into_iter().flatten().collect();
        println!(
            "rwlock {name}: {} writes, {} reads",
            writes.len(),
            reads.len()
        );
        assert_eq!(writes.len() + reads.len(), 18);
        if let Err(v) = check_lock(&writes) {
            panic!("rwlock {name} writers: {v}");
        }
        for w in &writes {
            for r in &reads {
                assert!(
                    no_overlap(w, r),
                    "rwlock {name}: write {w} overlaps read {r}"
                );
            }
        }
    }
}

// ================================================================ queue, work queue

#[test]
fn queues_lose_nothing_across_the_sequence_end() {
    let mut crafted = Crafted::new();
    for (name, start) in STARTS {
        crafted = crafted
            .dir(&format!("/ends/fifo-{name}"), start)
            .dir(&format!("/ends/queue-{name}"), start)
            .dir(&format!("/ends/work-{name}/items"), start)
            .dir(&format!("/ends/work-{name}/waiters"), start);
    }
    let server = start(&crafted);

    for (name, _) in STARTS {
        // One producer, one consumer: FIFO, nothing lost or duplicated.
        let path = format!("/ends/fifo-{name}");
        let (puts, takes, exhausted) = queue_run(&server, &path, 1, 12, 1);
        println!(
            "queue fifo {name}: {} puts, {} takes, {exhausted} puts refused at the end",
            puts.len(),
            takes.len()
        );
        if let Err(v) = check_queue(&puts, &takes) {
            panic!("queue fifo {name}: {v}");
        }
        if let Err(v) = check_fifo(&puts, &takes) {
            panic!("queue fifo {name}: {v}");
        }

        // Three producers putting at once (concurrent creates at the end), two consumers.
        let path = format!("/ends/queue-{name}");
        let (puts, takes, exhausted) = queue_run(&server, &path, 3, 6, 2);
        println!(
            "queue concurrent {name}: {} puts, {} takes, {exhausted} puts refused at the end",
            puts.len(),
            takes.len()
        );
        if let Err(v) = check_queue(&puts, &takes) {
            panic!("queue concurrent {name}: {v}");
        }

        // Work queue: items and waiters both cross the end; idle consumers wait in line.
        let path = format!("/ends/work-{name}");
        let (submitted, completed, exhausted) = work_queue_run(&server, &path, 2, 8, 3);
        println!(
            "work queue {name}: {} submitted, {} completed, {exhausted} puts refused at the end",
            submitted.len(),
            completed.len()
        );
        if let Err(v) = check_work_queue(&submitted, &completed) {
            panic!("work queue {name}: {v}");
        }
        assert_eq!(completed.len(), submitted.len(), "{completed:?}");
    }
}

/// `producers` sessions put `per_producer` items each (retrying a put refused with
/// `SequenceExhausted`: it enqueued nothing), `consumers` sessions take until all are
/// taken. Returns the puts, the takes and how many puts were refused.
fn queue_run(
    server: &Server,
    path: &str,
    producers: usize,
    per_producer: usize,
    consumers: usize,
) -> (Vec<Put>, Vec<Take>, usize) {
    let total = producers * per_producer;
    let taken = Arc::new(AtomicUsize::new(0));
    let exhausted = Arc::new(AtomicUsize::new(0));
    let takes = {
        let (path, taken) = (path.to_string(), Arc::clone(&taken));
        let zks: Vec<ZooKeeper> = (0..consumers).map(|_| connect(server)).collect();
        let handles: Vec<_> = zks
            .into_iter()
            .enumerate()
            .map(|(i, zk)| {
                let (path, taken) = (path.clone(), Arc::clone(&taken));
                thread::spawn(move || {
                    let queue = Queue::new(&zk, &path).expect("queue");
                    let mut out = Vec::new();
                    let deadline = Instant::now() + WAIT;
                    while taken.load(Ordering::SeqCst) < total {
                        assert!(Instant::now() < deadline, "items missing after {WAIT:?}");
                        if let Some(data) = queue
                            .take(Duration::from_millis(200))
                            .optional()
                            .expect("take")
                        {
                            out.push(Take {
                                item: String::from_utf8(data).expect("utf-8 item"),
                                consumer: format!("c{i}"),
                                at: monotonic_nanos(),
                            });
                            taken.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    out
                })
            })
            .collect();
        handles
    };
    let (path2, ex) = (path.to_string(), Arc::clone(&exhausted));
    let puts: Vec<Put> = on_threads(server, producers, move |p, zk| {
        let queue = Queue::new(&zk, &path2).expect("queue");
        let mut out = Vec::new();
        for n in 0..per_producer {
            let item = format!("p{p}-{n}");
            let start = monotonic_nanos();
            until_not_exhausted(&ex, || queue.put(item.as_bytes()));
            out.push(Put {
                item,
                producer: format!("p{p}"),
                start,
                end: Some(monotonic_nanos()),
            });
        }
        out
    })
    .into_iter()
    .flatten()
    .collect();
    let takes: Vec<Take> = takes
        .into_iter()
        .flat_map(|h| h.join().expect("consumer"))
        .collect();
    (puts, takes, exhausted.load(Ordering::Relaxed))
}

/// Like [`queue_run`] for a work queue: consumers take with short timeouts (so idle
/// ones keep creating waiter nodes) and complete each item.
fn work_queue_run(
    server: &Server,
    path: &str,
    producers: usize,
    per_producer: usize,
    consumers: usize,
) -> (Vec<Put>, Vec<Completion>, usize) {
    let total = producers * per_producer;
    let done = Arc::new(AtomicUsize::new(0));
    let exhausted = Arc::new(AtomicUsize::new(0));
    let zks: Vec<ZooKeeper> = (0..consumers).map(|_| connect(server)).collect();
    let workers: Vec<_> = zks
        .into_iter()
        .enumerate()
        .map(|(i, zk)| {
            let (path, done) = (path.to_string(), Arc::clone(&done));
            thread::spawn(move || {
                let queue = WorkQueue::new(&zk, &path).expect("work queue");
                let mut out = Vec::new();
                let deadline = Instant::now() + WAIT;
                while done.load(Ordering::SeqCst) < total {
                    assert!(Instant::now() < deadline, "items missing after {WAIT:?}");
                    if let Some(item) = queue
                        .take(Duration::from_millis(100))
                        .optional()
                        .expect("take")
                    {
                        let name = String::from_utf8(item.data().to_vec()).expect("utf-8");
                        item.complete().expect("complete");
                        out.push(Completion {
                            item: name,
                            worker: format!("w{i}"),
                            at: monotonic_nanos(),
                        });
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
                out
            })
        })
        .collect();
    let (path2, ex) = (path.to_string(), Arc::clone(&exhausted));
    let puts: Vec<Put> = on_threads(server, producers, move |p, zk| {
        let queue = WorkQueue::new(&zk, &path2).expect("work queue");
        let mut out = Vec::new();
        for n in 0..per_producer {
            let item = format!("p{p}-{n}");
            let start = monotonic_nanos();
            until_not_exhausted(&ex, || queue.put(item.as_bytes()));
            out.push(Put {
                item,
                producer: format!("p{p}"),
                start,
                end: Some(monotonic_nanos()),
            });
        }
        out
    })
    .into_iter()
    .flatten()
    .collect();
    let completed = workers
        .into_iter()
        .flat_map(|h| h.join().expect("worker"))
        .collect();
    (puts, completed, exhausted.load(Ordering::Relaxed))
}

// ================================================================ double barrier

#[test]
fn double_barrier_rounds_are_whole_across_the_sequence_end() {
    let mut crafted = Crafted::new();
    for (name, start) in STARTS {
        crafted = crafted.dir(&format!("/ends/barrier-{name}"), start);
    }
    let server = start(&crafted);
    const COUNT: usize = 3;
    const ROUNDS: usize = 4;

    for (name, _) in STARTS {
        let dir = format!("/ends/barrier-{name}");
        // (call, return) of every successful enter, and each participant's sequence.
        let entered: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        let calls: Arc<Mutex<Vec<u64>>> = Arc::default();
        let failed = Arc::new(AtomicUsize::new(0));
        let (e, c, f) = (
            Arc::clone(&entered),
            Arc::clone(&calls),
            Arc::clone(&failed),
        );
        let seqs = on_threads(&server, COUNT, move |_, zk| {
            let mut seqs = Vec::new();
            let mut rounds = 0;
            let deadline = Instant::now() + 3 * WAIT;
            while rounds < ROUNDS {
                assert!(Instant::now() < deadline, "rounds did not complete");
                let barrier = DoubleBarrier::new(&zk, &dir, COUNT).expect("barrier");
                let call = monotonic_nanos();
                c.lock().unwrap().push(call);
                match barrier.enter(Duration::from_secs(15)) {
                    Ok(()) => {
                        let returned = monotonic_nanos();
                        e.lock().unwrap().push((call, returned));
                        let node = barrier.node().expect("a participant node");
                        seqs.push(sequence_of(&node).expect("numbered"));
                        barrier.leave(WAIT).expect("leave");
                        rounds += 1;
                    }
                    // Documented at the end: the directory did not drain in time (others
                    // wait in a round this participant could not join); nothing is left
                    // behind, so entering again is fine.
                    Err(RecipeError::SequenceExhausted { .. } | RecipeError::Timeout) => {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("enter: {e}"),
                }
            }
            seqs
        });
        let seqs: Vec<i32> = seqs.into_iter().flatten().collect();
        let entered = entered.lock().unwrap().clone();
        let calls = calls.lock().unwrap().clone();
        println!(
            "double barrier {name}: {} enters, {} refused or timed out, sequences {seqs:?}",
            entered.len(),
            failed.load(Ordering::Relaxed)
        );
        assert_eq!(entered.len(), COUNT * ROUNDS);
        // `enter` returns only once COUNT participants have entered: at each return, at
        // least COUNT enter calls (this one included) had been made.
        for (call, returned) in &entered {
            let before = calls.iter().filter(|&&c| c <= *returned).count();
            assert!(
                before >= COUNT,
                "an enter called at {call} returned at {returned} with {before} participants"
            );
        }
        assert_restarted(&format!("double barrier {name}"), &seqs);
    }
}

// ================================================================ data versions

#[test]
fn ids_and_shared_values_are_exact_across_the_version_ends() {
    const VERSIONS: [(&str, i32); 2] = [("minus", -3), ("max", i32::MAX - 3)];
    let mut crafted = Crafted::new();
    for (name, version) in VERSIONS {
        crafted = crafted
            .node(&format!("/ends/ids-{name}"), b"100", version)
            .node(&format!("/ends/batch-ids-{name}"), b"100", version)
            .node(
                &format!("/ends/count-{name}"),
                &1000i32.to_be_bytes(),
                version,
            )
            .node(
                &format!("/ends/long-{name}"),
                &1000i64.to_be_bytes(),
                version,
            )
            .node(&format!("/ends/kazoo-{name}"), b"1000", version);
    }
    let server = start(&crafted);
    let zk = connect(&server);

    for (name, version) in VERSIONS {
        for (counter, batch) in [
            (format!("/ends/ids-{name}"), 1),
            (format!("/ends/batch-ids-{name}"), 3),
        ] {
            let path = counter.clone();
            let ids: Vec<IssuedId> = on_threads(&server, 4, move |i, zk| {
                let ids = IdGenerator::new(&zk, &path)
                    .and_then(|ids| ids.with_batch(batch))
                    .expect("generator");
                (0..8)
                    .map(|_| IssuedId {
                        id: ids.next_id().expect("next id").to_string(),
                        owner: format!("t{i}"),
                    })
                    .collect::<Vec<_>>()
            })
            .into_iter()
            .flatten()
            .collect();
            assert_eq!(ids.len(), 32);
            if let Err(v) = check_unique_ids(&ids) {
                panic!("{counter} from version {version}: {v}");
            }
            assert!(
                ids.iter().all(|i| i.id.parse::<u64>().unwrap() > 100),
                "an id at or below the seeded 100 was handed out again: {ids:?}"
            );
            let stat = zk.exists(&counter).unwrap().expect("counter");
            println!(
                "{counter}: 32 unique ids (batch {batch}), data version {version} -> {}",
                stat.version
            );
            assert_crossed(&counter, version, stat.version);
        }

        // Shared values: 4 sessions x 5 increments each; every one counted.
        let path = format!("/ends/count-{name}");
        let p = path.clone();
        on_threads(&server, 4, move |_, zk| {
            let count = SharedCount::new(&zk, &p, 0).expect("shared count");
            for _ in 0..5 {
                assert!(count.add(1).expect("add").succeeded);
            }
        });
        let count = SharedCount::new(&zk, &path, 0).unwrap().get().unwrap();
        assert_eq!(count.value, 1020, "{path}: increments lost");
        assert_crossed(&path, version, count.version);

        let path = format!("/ends/long-{name}");
        let p = path.clone();
        on_threads(&server, 4, move |_, zk| {
            let long = AtomicLong::new(&zk, &p).expect("atomic long");
            for _ in 0..5 {
                assert!(long.increment().expect("increment").succeeded);
            }
        });
        let long = AtomicLong::new(&zk, &path)
            .unwrap()
            .get_versioned()
            .unwrap();
        assert_eq!(long.value, 1020, "{path}: increments lost");
        assert_crossed(&path, version, long.version);

        let path = format!("/ends/kazoo-{name}");
        let p = path.clone();
        on_threads(&server, 4, move |_, zk| {
            let counter = KazooCounter::new(&zk, &p).expect("kazoo counter");
            for _ in 0..5 {
                assert!(counter.add(1).expect("add").succeeded);
            }
        });
        let value = KazooCounter::new(&zk, &path).unwrap().value().unwrap();
        assert_eq!(value, 1020, "{path}: increments lost");
        let stat = zk.exists(&path).unwrap().expect("counter");
        assert_crossed(&path, version, stat.version);
        println!("shared values from version {version}: 3 x 20 increments counted");
    }
}

/// The node's data version went past -1 (from just below it) or wrapped (from just
/// below `i32::MAX`): the run really crossed the end.
fn assert_crossed(path: &str, from: i32, now: i32) {
    if from < 0 {
        assert!(now >= 0, "{path}: version {from} -> {now} did not cross -1");
    } else {
        assert!(now < 0, "{path}: version {from} -> {now} did not wrap");
    }
}
