//! Id generator against real servers: uniqueness across threads, processes and a server
//! restart (connection loss during CAS), batch vs naive CAS counts; the async forms
//! (pending calls cost no thread, a dropped call's range is skipped, never reused).

mod common;

use common::{child_test, connect, connect_to, unique_path};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::shared::{IdGenerator, IdStats};
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

/// Child mode of this test binary: `path,count,batch` in this variable.
const CHILD_ENV: &str = "RECIPES_ID_GENERATOR_CHILD";

/// A fresh counter at `unique_path(name)`, created once (generators never create it).
fn counter(zk: &ZooKeeper, name: &str) -> String {
    let path = unique_path(name);
    IdGenerator::create_counter(zk, &path, &NodeOptions::default()).unwrap();
    path
}

fn assert_unique(ids: &[u64]) {
    let mut seen = HashSet::with_capacity(ids.len());
    for id in ids {
        assert!(seen.insert(*id), "id {id} handed out twice");
    }
}

fn sum(stats: &[IdStats]) -> IdStats {
    stats.iter().fold(IdStats::default(), |a, s| IdStats {
        ids: a.ids + s.ids,
        reservations: a.reservations + s.reservations,
        cas_attempts: a.cas_attempts + s.cas_attempts,
        conflicts: a.conflicts + s.conflicts,
        connection_losses: a.connection_losses + s.connection_losses,
        recovered: a.recovered + s.recovered,
        discarded_ranges: a.discarded_ranges + s.discarded_ranges,
        discarded_ids: a.discarded_ids + s.discarded_ids,
        reads: a.reads + s.reads,
    })
}

#[test]
fn ids_start_at_one_and_increase() {
    let zk = connect();
    let path = counter(&zk, "simple");
    let ids = IdGenerator::new(&zk, &path).unwrap();
    assert_eq!(ids.next_id().unwrap(), 1);
    assert_eq!(ids.next_id().unwrap(), 2);
    assert_eq!(ids.current().unwrap(), 2);
    let stats = ids.stats();
    assert_eq!((stats.ids, stats.reservations, stats.conflicts), (2, 2, 0));

    // A second generator on the same counter continues above it.
    let batched = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(10))
        .unwrap();
    assert_eq!(batched.next_id().unwrap(), 3);
    assert_eq!(batched.remaining_in_batch(), 9);
    assert_eq!(ids.next_id().unwrap(), 13);
    assert_eq!(batched.next_id().unwrap(), 4);
    assert_eq!(ids.reserve(5, Duration::from_secs(5)).unwrap(), 14..19);
}

#[test]
fn seeded_and_corrupt_counters() {
    let zk = connect();
    let path = counter(&zk, "seeded");
    let ids = IdGenerator::new(&zk, &path).unwrap();
    zk.set(&path, b"1000", None).unwrap();
    assert_eq!(ids.next_id().unwrap(), 1001);

    zk.set(&path, b"not a number", None).unwrap();
    assert!(matches!(ids.next_id(), Err(RecipeError::Corrupt(_))));

    assert!(matches!(
        IdGenerator::new(&zk, &path).and_then(|ids| ids.with_batch(0)),
        Err(RecipeError::InvalidArgument(_))
    ));

    zk.delete(&path, None).unwrap();
    assert!(matches!(ids.next_id(), Err(RecipeError::Lost(_))));
}

/// 8 worker threads: 4 with their own session and generator (naive and batched), 4
/// sharing one batched generator.
#[test]
fn unique_across_eight_threads() {
    let hosts = zk_harness::shared_test_connect_string();
    let shared_zk = connect_to(&hosts);
    let path = counter(&shared_zk, "threads");
    let shared = Arc::new(
        IdGenerator::new(&shared_zk, &path)
            .and_then(|ids| ids.with_batch(7))
            .unwrap(),
    );
    let per_thread = 150;
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let (hosts, path, shared) = (hosts.clone(), path.clone(), Arc::clone(&shared));
            thread::spawn(move || {
                let own_zk;
                let own;
                let ids: &IdGenerator = if worker < 4 {
                    own_zk = connect_to(&hosts);
                    let batch = if worker % 2 == 0 { 1 } else { 5 };
                    own = IdGenerator::new(&own_zk, &path)
                        .and_then(|ids| ids.with_batch(batch))
                        .unwrap();
                    &own
                } else {
                    &shared
                };
                let drawn: Vec<u64> = (0..per_thread).map(|_| ids.next_id().unwrap()).collect();
                // Each worker's own sequence increases.
                assert!(drawn.windows(2).all(|w| w[0] < w[1]), "worker {worker}");
                (drawn, (worker < 4).then(|| ids.stats()))
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut stats = vec![shared.stats()];
    for worker in workers {
        let (drawn, own_stats) = worker.join().unwrap();
        all.extend(drawn);
        stats.extend(own_stats);
    }
    stats[0] = shared.stats();
    assert_eq!(all.len(), 8 * per_thread);
    assert_unique(&all);
    let total = sum(&stats);
    println!("8 threads: {total}");
    assert_eq!(total.ids, 8 * per_thread as u64);
    assert_eq!(total.cas_attempts, total.reservations + total.conflicts);
}

/// Entry point of the child processes of `unique_across_processes` (does nothing in a
/// normal test run): draws ids and prints them one per line.
#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split(',');
    let path = parts.next().unwrap().to_string();
    let count: usize = parts.next().unwrap().parse().unwrap();
    let batch: u64 = parts.next().unwrap().parse().unwrap();
    let zk = connect();
    let ids = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(batch))
        .unwrap();
    // Two threads per process, sharing the generator.
    let drawn: Vec<u64> = thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    (0..count / 2)
                        .map(|_| ids.next_id().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Start on a fresh line: libtest has printed "test child_process_entry ... ".
    let mut out = String::from("\n");
    for id in drawn {
        out.push_str(&format!("ID {id}\n"));
    }
    out.push_str(&format!("STATS {}\n", ids.stats()));
    print!("{out}");
}

#[test]
fn unique_across_processes() {
    let hosts = zk_harness::shared_test_connect_string();
    let path = counter(&connect_to(&hosts), "processes");
    let children: Vec<_> = [(200, 1), (200, 3), (200, 10), (200, 1)]
        .iter()
        .map(|(count, batch)| {
            child_test("child_process_entry")
                .env(CHILD_ENV, format!("{path},{count},{batch}"))
                .env(zk_harness::TEST_HOSTS_ENV, &hosts)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    // The parent draws too, concurrently with the children.
    let zk = connect_to(&hosts);
    let ids = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(2))
        .unwrap();
    let mut all: Vec<u64> = (0..100).map(|_| ids.next_id().unwrap()).collect();
    for (index, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "child {index} failed");
        let text = String::from_utf8(output.stdout).unwrap();
        let drawn: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("ID "))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(drawn.len(), 200, "child {index} output:\n{text}");
        if let Some(stats) = text.lines().find(|l| l.starts_with("STATS ")) {
            println!("child {index}: {stats}");
        }
        all.extend(drawn);
    }
    assert_eq!(all.len(), 900);
    assert_unique(&all);
}

fn run_workers(hosts: &str, path: &str, workers: usize, per_worker: usize, batch: u64) -> IdStats {
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (hosts, path) = (hosts.to_string(), path.to_string());
            thread::spawn(move || {
                let zk = connect_to(&hosts);
                let ids = IdGenerator::new(&zk, &path)
                    .and_then(|ids| ids.with_batch(batch))
                    .unwrap();
                let drawn: Vec<u64> = (0..per_worker).map(|_| ids.next_id().unwrap()).collect();
                (drawn, ids.stats())
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut stats = Vec::new();
    for handle in handles {
        let (drawn, s) = handle.join().unwrap();
        all.extend(drawn);
        stats.push(s);
    }
    assert_unique(&all);
    sum(&stats)
}

#[test]
fn batches_cut_cas_round_trips() {
    let hosts = zk_harness::shared_test_connect_string();
    let (workers, per_worker) = (4, 100);
    let zk = connect_to(&hosts);
    let naive = run_workers(&hosts, &counter(&zk, "naive"), workers, per_worker, 1);
    let batched = run_workers(&hosts, &counter(&zk, "batched"), workers, per_worker, 50);
    println!("naive   (batch 1):  {naive}");
    println!("batched (batch 50): {batched}");
    let total = (workers * per_worker) as u64;
    assert_eq!(naive.reservations, total);
    assert_eq!(batched.reservations, total / 50);
    assert!(naive.cas_attempts >= total);
    assert!(batched.cas_attempts * 10 < naive.cas_attempts);
}

/// Connection loss in the middle of CAS traffic: the server is killed and restarted
/// (sessions survive a standalone restart) while 4 workers draw ids.
#[test]
fn unique_across_server_restart() {
    let hosts = zk_harness::test_hosts().expect("test server");
    let Some(server) = hosts.server() else {
        eprintln!("skipped: needs an embedded server (ZK_TEST_HOSTS is set)");
        return;
    };
    let connect_string = hosts.connect_string();
    let path = counter(&connect_to(&connect_string), "restart");
    let stop = Arc::new(AtomicBool::new(false));
    let (sender, received) = crossbeam_channel::unbounded();
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let (hosts, path, stop, sender) = (
                connect_string.clone(),
                path.clone(),
                Arc::clone(&stop),
                sender.clone(),
            );
            thread::spawn(move || {
                let zk = connect_to(&hosts);
                let batch = [1, 3, 1, 4][worker];
                let ids = IdGenerator::new(&zk, &path)
                    .and_then(|ids| ids.with_batch(batch))
                    .unwrap();
                let mut drawn = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let id = ids.next_id().unwrap();
                    drawn.push(id);
                    let _ = sender.send(id);
                }
                (drawn, ids.stats())
            })
        })
        .collect();
    drop(sender);
    let take = |n: usize| {
        for _ in 0..n {
            received
                .recv_timeout(Duration::from_secs(30))
                .expect("ids keep coming");
        }
    };
    take(200);
    server.kill();
    let started = Instant::now();
    server.restart().expect("restart");
    println!("server down for {:?}", started.elapsed());
    take(200);
    stop.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    let mut stats = Vec::new();
    for worker in workers {
        let (drawn, s) = worker.join().unwrap();
        all.extend(drawn);
        stats.push(s);
    }
    let total = sum(&stats);
    println!("across a restart: {total}");
    assert_unique(&all);
}

/// A counter that existed and vanished is an error for every generator, including a new
/// one: it used to be re-created at 0, handing out every id again. Nothing is created.
#[test]
fn a_deleted_counter_is_an_error_not_a_restart() {
    let zk = connect();
    let never = unique_path("never-created");
    assert!(matches!(
        IdGenerator::new(&zk, &never),
        Err(RecipeError::Lost(_))
    ));
    assert!(zk.exists(&never).unwrap().is_none());

    let path = counter(&zk, "deleted");
    let ids = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(3))
        .unwrap();
    let drawn: Vec<u64> = (0..6).map(|_| ids.next_id().unwrap()).collect();
    assert_eq!(drawn, [1, 2, 3, 4, 5, 6]);
    assert_eq!(ids.remaining_in_batch(), 0);
    zk.delete(&path, None).unwrap();
    assert!(matches!(ids.next_id(), Err(RecipeError::Lost(_))));
    // A generator opened afterwards (another process, a restart) must not start over.
    assert!(matches!(
        IdGenerator::new(&zk, &path).and_then(|ids| ids.with_batch(3)),
        Err(RecipeError::Lost(_))
    ));
    assert!(
        zk.exists(&path).unwrap().is_none(),
        "the counter was re-created"
    );
    // Creating it again is an explicit act.
    IdGenerator::create_counter(&zk, &path, &NodeOptions::default()).unwrap();
    zk.set(&path, b"6", None).unwrap();
    assert_eq!(IdGenerator::new(&zk, &path).unwrap().next_id().unwrap(), 7);
    assert!(matches!(
        IdGenerator::create_counter(&zk, "no-slash", &NodeOptions::default()),
        Err(RecipeError::ZooKeeper(_))
    ));
}

// ---------------------------------------------------------------- async forms

use common::{alone, join_all, Boxed};

/// Compile-time check: every async call's future is `Send` (usable on any executor).
#[allow(dead_code)]
fn async_futures_are_send(ids: &IdGenerator) {
    fn send<T: Send>(_: T) {}
    send(ids.next_id_async());
    send(ids.reserve_async(3, Duration::from_secs(1)));
    send(ids.current_async());
}

/// Polls `future` `polls` times, each (after the first) once the previous poll's waker
/// fired: it moves on by one await point (a reply) per poll. Its output if it completed.
fn advance<F: Future + Unpin>(future: &mut F, polls: usize) -> Option<F::Output> {
    let mut left = polls;
    let mut done = None;
    if polls > 0 {
        zk_harness::executor::block_on(std::future::poll_fn(|cx| {
            match Pin::new(&mut *future).poll(cx) {
                Poll::Ready(output) => {
                    done = Some(output);
                    Poll::Ready(())
                }
                Poll::Pending => {
                    left -= 1;
                    if left == 0 {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                }
            }
        }));
    }
    done
}

/// Waits until every reply to `zk` sent so far has come back (a dropped call's request
/// included) and no request context beyond `baseline` is left.
fn settle(zk: &ZooKeeper, baseline: usize) {
    zk.exists("/").unwrap();
    common::wait_until("the dropped calls' contexts released", || {
        zk.live_contexts() == baseline
    });
}

/// 200 pending async `next_id` calls on one generator add no thread, and its refills
/// never race each other: every id from 1 to 200, one CAS each, no conflict.
#[test]
fn pending_async_next_ids_add_no_thread_and_never_race() {
    alone(
        "pending_async_next_ids_add_no_thread_and_never_race",
        || {
            const CALLS: u64 = 200;
            let zk = connect();
            let path = counter(&zk, "async-many");
            let ids = IdGenerator::new(&zk, &path).unwrap();
            let before = threads();
            let mut calls: Vec<Boxed<'_, zookeeper_mt_recipes::Result<u64>>> = (0..CALLS)
                .map(|_| Box::pin(ids.next_id_async()) as Boxed<'_, _>)
                .collect();
            // One refills, the others wait for their turn.
            for call in &mut calls {
                assert!(zk_harness::executor::poll_once(call).is_pending());
            }
            let added = threads().saturating_sub(before);
            println!("{CALLS} pending async next_id calls added {added} threads");
            assert!(added <= 2, "pending next_id calls added {added} threads");
            let mut drawn: Vec<u64> = join_all(calls).into_iter().map(|id| id.unwrap()).collect();
            drawn.sort_unstable();
            assert_eq!(drawn, (1..=CALLS).collect::<Vec<_>>());
            let stats = ids.stats();
            assert_eq!(
                (stats.reservations, stats.conflicts, stats.cas_attempts),
                (CALLS, 0, CALLS),
                "{stats}"
            );
            let added = threads().saturating_sub(before);
            assert!(added <= 2, "the next_id calls left {added} threads");
        },
    );
}

/// A reserve dropped after each of its await points (its CAS unanswered included): the
/// range it may have reserved is skipped, never handed out, and counted as discarded;
/// nothing stays registered.
#[test]
fn a_dropped_reserve_skips_its_range() {
    let zk = connect();
    let path = counter(&zk, "async-reserve");
    let ids = IdGenerator::new(&zk, &path).unwrap();
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    let mut skipped = 0;
    for polls in 0.. {
        let before = ids.current().unwrap();
        let mut reserve = Box::pin(ids.reserve_async(10, Duration::from_secs(10)));
        let done = advance(&mut reserve, polls).map(Result::unwrap);
        let completed = done.is_some();
        drop(reserve);
        settle(&zk, contexts);
        let after = ids.current().unwrap();
        match done {
            Some(range) => assert_eq!(range, before + 1..before + 11),
            None if after == before + 10 => skipped += 1,
            None => assert_eq!(after, before, "a dropped reserve moved the counter oddly"),
        }
        // The next id comes above whatever the dropped reserve may have taken.
        assert_eq!(ids.next_id().unwrap(), after + 1);
        if completed {
            break;
        }
    }
    assert!(skipped > 0, "no reserve was dropped with its CAS applied");
    let stats = ids.stats();
    println!("dropped reserves: {stats}");
    assert_eq!(stats.discarded_ranges, skipped, "{stats}");
    assert_eq!(
        stats.cas_attempts,
        stats.reservations + stats.conflicts + stats.discarded_ranges,
        "{stats}"
    );
    assert_eq!(zk.live_contexts(), contexts);
}

/// A `next_id` dropped after each await point of its refill, while another caller of the
/// same generator waits for that refill: the other takes the turn and refills above
/// anything the dropped one may have reserved; the batch stays whole.
#[test]
fn a_dropped_refill_hands_the_turn_on() {
    let zk = connect();
    let path = counter(&zk, "async-refill");
    let ids = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(5))
        .unwrap();
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    let mut handed = Vec::new();
    for polls in 0.. {
        let mut dropped = Box::pin(ids.next_id_async());
        let done = advance(&mut dropped, polls).map(Result::unwrap);
        let mut waiting = Box::pin(ids.next_id_async());
        assert!(
            done.is_some() || zk_harness::executor::poll_once(&mut waiting).is_pending(),
            "served from an empty batch"
        );
        drop(dropped);
        settle(&zk, contexts);
        let high = ids.current().unwrap();
        let id = zk_harness::executor::block_on(waiting).unwrap();
        match &done {
            Some(first) => assert_eq!(id, first + 1, "from the batch"),
            None => assert_eq!(id, high + 1, "refilled from the counter"),
        }
        handed.extend(done);
        handed.push(id);
        // Empty the batch for the next round.
        while ids.remaining_in_batch() > 0 {
            handed.push(ids.next_id().unwrap());
        }
        if done.is_some() {
            break;
        }
    }
    assert_unique(&handed);
    assert!(handed.windows(2).all(|w| w[0] < w[1]), "{handed:?}");
    settle(&zk, contexts);
}

/// A clone owned by a `'static` future is the same generator: its `*_async` calls
/// serve the batch the original reserved, and the original sees what the clone took.
#[test]
fn clone_owned_by_a_task() {
    let zk = connect();
    let path = counter(&zk, "async-clone");
    let ids = IdGenerator::new(&zk, &path)
        .and_then(|ids| ids.with_batch(2))
        .unwrap();
    assert_eq!(ids.next_id().unwrap(), 1);
    let task = {
        let ids = ids.clone();
        async move {
            // Id 2 is from the batch the original reserved.
            assert_eq!(ids.next_id_async().await.unwrap(), 2);
            assert_eq!(
                ids.reserve_async(3, Duration::from_secs(5)).await.unwrap(),
                3..6
            );
            ids.current_async().await.unwrap()
        }
    };
    assert_eq!(zk_harness::executor::block_on(Box::pin(task)), 5);
    // The same local batch: one refill (of 2) and one reserve (of 3) between them.
    assert_eq!(ids.next_id().unwrap(), 6);
}
