//! A seeded fault history per queue kind (queue, priority, bounded, delayed queue): worker
//! threads share one value, driving its async takes with random deadlines (a take whose
//! deadline passes is dropped, wherever it is: listing, claiming, finding out a lost
//! claim), while the proxy in front of their session cuts connections after claims and
//! swallows claim replies. Then the queue is drained and, from the server's state: every
//! acknowledged put was taken exactly once or is still queued, nothing was taken twice.
//!
//! `QUEUE_FAULT_SEED=<seed>` replays a run's fault plan and choices (the seed is printed).

mod common;
mod queue_support;

use common::{connect, unique_path};
use queue_support::{server_state, wait_settled, AnyQueue, Kind, KINDS};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::executor::block_on_timeout;
use zk_harness::testing::{under_valgrind, Seed};
use zk_harness::{FaultProxy, OpCode};
use zookeeper_mt::{Timeout, ZooKeeper};

/// Threads sharing the one value.
const WORKERS: usize = 4;
/// Items put before the workers start, and while they run.
const ITEMS_BEFORE: usize = 40;
const ITEMS_DURING: usize = 60;
/// How long faults and takes run per kind (under valgrind, where everything is some
/// twenty times slower, less).
fn run_time() -> Duration {
    if under_valgrind() {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(5)
    }
}
/// Bound of anything waited for.
const BOUND: Duration = Duration::from_secs(60);

#[test]
fn takes_sharing_a_value_under_lost_claims_and_drops_take_each_item_once() {
    let seed = Seed::from_env_or_random("QUEUE_FAULT_SEED").unwrap();
    println!(
        "seed={} (replay: QUEUE_FAULT_SEED={})",
        seed.value(),
        seed.value()
    );
    let started = Instant::now();
    for (index, kind) in KINDS.into_iter().enumerate() {
        history(kind, seed, index as u64);
    }
    println!("all kinds in {:?}", started.elapsed());
}

/// What one kind's run saw.
#[derive(Default)]
struct Tally {
    delivered: Mutex<Vec<Vec<u8>>>,
    dropped: AtomicUsize,
    failed: AtomicUsize,
}

fn history(kind: Kind, seed: Seed, stream: u64) {
    let proxy = Arc::new(FaultProxy::start(zk_harness::shared_test_connect_string()).unwrap());
    let zk = ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .unwrap();
    let admin = connect();
    let baseline = zookeeper_mt_recipes::live_background_tasks();
    let path = unique_path(&format!("fault-history-{kind:?}"));
    let producer = AnyQueue::new(kind, &admin, &path);
    let mut acknowledged = Vec::new();
    for i in 0..ITEMS_BEFORE {
        let item = format!("{kind:?} {i}").into_bytes();
        producer.put(&item).unwrap();
        acknowledged.push(item);
    }
    let consumer = Arc::new(AnyQueue::new(kind, &zk, &path));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let run_started = Instant::now();

    let workers: Vec<_> = (0..WORKERS as u64)
        .map(|w| {
            let (consumer, tally, stop) = (consumer.clone(), tally.clone(), stop.clone());
            let mut rng = seed.rng_for(stream * 64 + w);
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let patience =
                        rng.duration_between(Duration::from_millis(2), Duration::from_millis(300));
                    let outcome = if rng.chance(0.5) {
                        block_on_timeout(consumer.try_take_async(), patience)
                    } else {
                        let timeout = rng.duration_between(
                            Duration::from_millis(10),
                            Duration::from_millis(400),
                        );
                        block_on_timeout(consumer.take(Timeout::from(timeout)), patience).map(
                            |taken| match taken {
                                Ok(data) => Ok(Some(data)),
                                Err(zookeeper_mt_recipes::RecipeError::Timeout) => Ok(None),
                                Err(e) => Err(e),
                            },
                        )
                    };
                    match outcome {
                        // Dropped at its deadline, wherever it was.
                        None => drop(tally.dropped.fetch_add(1, Ordering::Relaxed)),
                        Some(Ok(Some(data))) => tally.delivered.lock().unwrap().push(data),
                        Some(Ok(None)) => {}
                        Some(Err(e)) => {
                            eprintln!("{kind:?}: a take failed: {e}");
                            tally.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();

    // Faults on the consumers' session: a connection cut after the k-th claim (applied,
    // unanswered), or a claim's reply swallowed (the client notices at the next reply),
    // at seeded moments; puts meanwhile on the admin session.
    let mut rng = seed.rng_for(stream * 64 + 63);
    let mut faults = 0;
    let mut put_during = 0;
    while run_started.elapsed() < run_time() {
        let k = rng.range(1..4);
        if rng.chance(0.6) {
            proxy.cut_after_matching(k, |request| request.op == OpCode::MULTI);
        } else {
            proxy.drop_reply_matching(k, |request| request.op == OpCode::MULTI);
        }
        let fired = proxy.fired().len();
        let pause = rng.duration_between(Duration::from_millis(20), Duration::from_millis(250));
        let until = Instant::now() + pause;
        while Instant::now() < until {
            if put_during < ITEMS_DURING && rng.chance(0.5) {
                let item = format!("{kind:?} {}", ITEMS_BEFORE + put_during).into_bytes();
                producer.put(&item).unwrap();
                acknowledged.push(item);
                put_during += 1;
            }
            if proxy.fired().len() > fired {
                break;
            }
            // The fault schedule's own pace (nothing to wait on: the workers run).
            thread::sleep(Duration::from_millis(10));
        }
        faults += proxy.fired().len() - fired;
        proxy.disarm();
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().expect("a worker panicked");
    }
    proxy.disarm();
    // A swallowed reply is noticed only when a later one arrives: make one arrive, so
    // the claim waiting for it settles.
    let _ = zk.exists("/");
    drop(consumer);
    wait_settled(baseline, BOUND);

    // Drain on the admin session, then compare with what was acknowledged.
    let mut drained = Vec::new();
    while let Some(data) = producer.try_take().unwrap() {
        drained.push(data);
    }
    // Take markers whose fire-and-forget delete a fault cut off stay until the session
    // ends (they are ephemeral): counted, not checked.
    let markers = server_state(&admin, kind, &path).1.len();
    let delivered = std::mem::take(&mut *tally.delivered.lock().unwrap());
    let mut seen: BTreeMap<Vec<u8>, (usize, usize)> = BTreeMap::new();
    for data in &delivered {
        seen.entry(data.clone()).or_default().0 += 1;
    }
    for data in &drained {
        seen.entry(data.clone()).or_default().1 += 1;
    }
    let text = |data: &[u8]| String::from_utf8_lossy(data).into_owned();
    let mut wrong = Vec::new();
    for item in &acknowledged {
        match seen.remove(item) {
            Some((1, 0)) | Some((0, 1)) => {}
            Some((taken, queued)) => wrong.push(format!(
                "{}: taken {taken}, left queued {queued}",
                text(item)
            )),
            None => wrong.push(format!("{}: lost", text(item))),
        }
    }
    for (item, counts) in seen {
        wrong.push(format!("{}: never put, seen {counts:?}", text(&item)));
    }
    println!(
        "{kind:?}: {} puts, {} taken, {} drained, {faults} faults fired, {} takes dropped, \
         {} failed, {markers} markers left, {} wrong, {:?}",
        acknowledged.len(),
        delivered.len(),
        drained.len(),
        tally.dropped.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        wrong.len(),
        run_started.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "{kind:?} (seed {}): {} items not taken exactly once: {wrong:#?}",
        seed.value(),
        wrong.len()
    );
}
