//! `run_while_leader_async` / `run_once_async` against a real server: one job runs at a
//! time among contenders, a job is dropped when its term is lost (session expired), and
//! dropping the run relinquishes the term and (for `run_once_async`) withdraws the node.

mod common;

use common::{connect, unique_path, wait_until};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zk_harness::executor::{block_on_timeout, poll_once};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::leadership::{LatchStatus, LeaderLatch, LeadershipGuard};
use zookeeper_mt_recipes::{LossReason, RecipeError};

/// Generous: the machine is shared and loaded.
const T: Duration = Duration::from_secs(60);

type Run<T> = Pin<Box<dyn Future<Output = zookeeper_mt_recipes::Result<T>> + Send>>;

/// Ends `zk`'s session: another handle takes it over and closes it.
fn expire(zk: &ZooKeeper) {
    let id = zk.client_id().unwrap();
    let taken = ZooKeeper::builder(&zk_harness::shared_test_connect_string())
        .session(id)
        .connect();
    match taken {
        Ok(thief) => thief.close().unwrap(),
        // Expired already (a loaded machine): what this was to bring about.
        Err(zookeeper_mt::Error::SessionExpired) => {}
        Err(error) => panic!("taking the session over: {error}"),
    }
}

/// Sets its flag when dropped: tells that a job's future was dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn two_contenders_run_one_job_at_a_time() {
    const ROUNDS: usize = 4;
    let path = unique_path("run-async-two");
    let running = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let contender = |id: &str| -> (LeaderLatch, Run<Vec<i64>>) {
        let zk = connect();
        let latch = LeaderLatch::builder(&path).id(id).build(&zk).unwrap();
        let (running, overlaps, runs) = (running.clone(), overlaps.clone(), runs.clone());
        let owned = latch.clone();
        let run: Run<Vec<i64>> = Box::pin(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let job = |guard: LeadershipGuard| {
                    let (running, overlaps, runs, zk) =
                        (running.clone(), overlaps.clone(), runs.clone(), zk.clone());
                    async move {
                        if running.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        // A few round trips as leader, each a point where the other
                        // contender's task runs.
                        for _ in 0..3 {
                            zk.exists_async("/").await.unwrap();
                            assert!(guard.is_leader(), "the job outlived its term");
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                        runs.fetch_add(1, Ordering::SeqCst);
                        guard.token()
                    }
                };
                tokens.push(owned.run_while_leader_async(T, job).await?);
            }
            Ok(tokens)
        });
        (latch, run)
    };
    let (_a, run_a) = contender("a");
    let (_b, run_b) = contender("b");
    // Both on one thread (their jobs interleave at every await), each bounded.
    let results = block_on_timeout(
        async {
            let (mut a, mut b) = (Some(run_a), Some(run_b));
            let (mut out_a, mut out_b) = (None, None);
            std::future::poll_fn(|cx| {
                for (run, out) in [(&mut a, &mut out_a), (&mut b, &mut out_b)] {
                    if let Some(future) = run {
                        if let std::task::Poll::Ready(value) = future.as_mut().poll(cx) {
                            *out = Some(value);
                            *run = None;
                        }
                    }
                }
                if out_a.is_some() && out_b.is_some() {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            })
            .await;
            (out_a.unwrap(), out_b.unwrap())
        },
        T,
    )
    .expect("the contenders did not finish in time");
    let (tokens_a, tokens_b) = (results.0.unwrap(), results.1.unwrap());
    println!("tokens a {tokens_a:?}, b {tokens_b:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2 * ROUNDS);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two jobs ran at once");
    // Every term is a new term: tokens never repeat.
    let mut all: Vec<i64> = tokens_a.iter().chain(&tokens_b).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2 * ROUNDS, "a term ran two jobs");
}

#[test]
fn the_job_is_dropped_when_leadership_is_lost() {
    let path = unique_path("run-async-lost");
    let zk = connect();
    let latch = LeaderLatch::builder(&path).id("leader").build(&zk).unwrap();
    let other_zk = connect();
    let other = LeaderLatch::builder(&path)
        .id("next")
        .build(&other_zk)
        .unwrap();
    let (started, dropped) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let running = {
        let (latch, started, dropped) = (latch.clone(), started.clone(), dropped.clone());
        thread::spawn(move || {
            block_on_timeout(
                latch.run_while_leader_async(T, move |_guard| async move {
                    let _flag = DropFlag(dropped);
                    started.store(true, Ordering::SeqCst);
                    // A job that never ends by itself.
                    std::future::pending::<()>().await
                }),
                T,
            )
        })
    };
    // Whichever latch joined first leads; make it this one's turn if needed.
    wait_until("a leader", || {
        latch.status() == LatchStatus::Leading || other.status() == LatchStatus::Leading
    });
    if other.status() == LatchStatus::Leading {
        other.relinquish().unwrap();
    }
    wait_until("the job running", || started.load(Ordering::SeqCst));
    assert!(!dropped.load(Ordering::SeqCst));
    expire(&zk);
    let outcome = running
        .join()
        .unwrap()
        .expect("the run did not end after the loss");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the job's future was not dropped"
    );
    assert!(
        matches!(
            outcome,
            Err(RecipeError::Lost(
                LossReason::Leadership(_) | LossReason::Closed
            ))
        ),
        "{outcome:?}"
    );
    // The other contender leads next.
    let guard = other.await_leadership(T).unwrap();
    assert!(guard.is_leader());
}

#[test]
fn dropping_run_once_async_withdraws_the_candidate() {
    let path = unique_path("run-async-drop-once");
    let zk = connect();
    let observer = connect();
    let started = Arc::new(AtomicBool::new(false));
    let job_dropped = Arc::new(AtomicBool::new(false));
    let mut run: Run<()> = {
        let (started, job_dropped) = (started.clone(), job_dropped.clone());
        Box::pin(LeaderLatch::builder(&path).id("once").run_once_async(
            zk.clone(),
            T,
            move |_guard| async move {
                let _flag = DropFlag(job_dropped);
                started.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await
            },
        ))
    };
    wait_until("the job running as leader", || {
        assert!(poll_once(&mut run).is_pending());
        started.load(Ordering::SeqCst)
    });
    assert_eq!(observer.get_children(&path).unwrap().len(), 1);
    drop(run);
    assert!(job_dropped.load(Ordering::SeqCst));
    wait_until("the candidate's node withdrawn", || {
        observer.get_children(&path).unwrap().is_empty()
    });
    // Someone else leads at once.
    let next = LeaderLatch::builder(&path)
        .id("next")
        .build(&observer)
        .unwrap();
    next.await_leadership(T).unwrap();
    next.close();
}

#[test]
fn dropping_run_while_leader_async_relinquishes_the_term() {
    let path = unique_path("run-async-drop-while");
    let (zk, other_zk) = (connect(), connect());
    let latch = LeaderLatch::builder(&path).id("first").build(&zk).unwrap();
    // `latch` leads before the other joins: its run gets this term at once.
    latch.await_leadership(T).unwrap();
    let other = LeaderLatch::builder(&path)
        .id("second")
        .build(&other_zk)
        .unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let mut run: Run<()> = {
        let (latch, started) = (latch.clone(), started.clone());
        Box::pin(async move {
            latch
                .run_while_leader_async(T, move |_guard| async move {
                    started.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await
                })
                .await
        })
    };
    wait_until("the job running as leader", || {
        assert!(poll_once(&mut run).is_pending());
        started.load(Ordering::SeqCst)
    });
    let term = latch.leadership().expect("leading");
    drop(run);
    // The term ends without anyone waiting for it; the other contender leads.
    let next = other.await_leadership(T).unwrap();
    assert!(!term.is_leader(), "the dropped run's term still lasts");
    assert!(next.is_leader());
    // The latch itself stays in the election (behind the new leader).
    wait_until("the latch back in line", || {
        latch.status() == LatchStatus::Waiting
    });
}

#[test]
fn run_once_async_returns_the_jobs_output_and_leaves() {
    let path = unique_path("run-async-once");
    let (zk, observer) = (connect(), connect());
    let run = LeaderLatch::builder(&path)
        .id("once")
        .run_once_async(zk, T, |guard| async move {
            assert!(guard.is_leader());
            guard.token()
        });
    let token = block_on_timeout(run, T)
        .expect("the run did not end")
        .unwrap();
    assert!(token > 0);
    wait_until("the candidate's node withdrawn", || {
        observer.get_children(&path).unwrap().is_empty()
    });
}
