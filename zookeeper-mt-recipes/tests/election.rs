//! Leader election against a real server: one leader at a time, handoff on resign and
//! when the leader's session closes.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path, wait_until};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

const WAIT: Duration = Duration::from_secs(10);

fn leaders(candidates: &[&LeaderElection]) -> Vec<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.is_leader().unwrap())
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn first_candidate_leads_and_resign_hands_over() {
    let dir = unique_path("resign");
    let (zk_a, zk_b, zk_c) = (connect(), connect(), connect());
    let a = LeaderElection::new(&zk_a, &dir, b"a").unwrap();
    let b = LeaderElection::new(&zk_b, &dir, b"b").unwrap();
    let c = LeaderElection::new(&zk_c, &dir, b"c").unwrap();
    assert!(a.sequence() < b.sequence() && b.sequence() < c.sequence());
    a.wait_until_leader(WAIT).unwrap();
    assert_eq!(leaders(&[&a, &b, &c]), vec![0]);
    assert_eq!(b.leader_data().unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(
        c.wait_until_leader(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    );

    // b resigns while waiting in line: c now waits on a directly.
    b.resign().unwrap();
    let c_waits = thread::spawn(move || {
        c.wait_until_leader(WAIT).unwrap();
        c
    });
    a.resign().unwrap();
    let c = c_waits.join().unwrap();
    assert!(c.is_leader().unwrap());
    assert_eq!(c.leader_data().unwrap().as_deref(), Some(&b"c"[..]));
}

#[test]
fn handoff_when_the_leaders_session_closes() {
    let dir = unique_path("close");
    let leader_zk = connect();
    let leader = LeaderElection::new(&leader_zk, &dir, b"old").unwrap();
    leader.wait_until_leader(WAIT).unwrap();

    let follower_zk = connect();
    let follower = LeaderElection::new(&follower_zk, &dir, b"new").unwrap();
    assert!(!follower.is_leader().unwrap());
    let (elected, elected_rx) = crossbeam_channel::bounded(1);
    let waiting = thread::spawn(move || {
        follower.wait_until_leader(WAIT).unwrap();
        elected.send(()).unwrap();
        follower
    });
    assert!(elected_rx.recv_timeout(Duration::from_millis(300)).is_err());
    leader_zk.close().unwrap(); // the leader "dies": its ephemeral node goes
    elected_rx.recv_timeout(WAIT).expect("handoff");
    let follower = waiting.join().unwrap();
    assert!(follower.is_leader().unwrap());
    assert_eq!(
        follower.leader_data().unwrap().as_deref(),
        Some(&b"new"[..])
    );
    // The old candidate knows its session is gone.
    assert!(leader.is_leader().is_err());
}

/// Several candidates in separate sessions take turns: each becomes leader, checks it
/// is alone, then its session closes. Never two leaders at once.
#[test]
fn one_leader_at_a_time() {
    let dir = unique_path("turns");
    let n = 6;
    let active = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (dir, active, turns) = (dir.clone(), Arc::clone(&active), Arc::clone(&turns));
            thread::spawn(move || {
                let zk = connect();
                let me = LeaderElection::new(&zk, &dir, format!("{i}").as_bytes()).unwrap();
                me.wait_until_leader(Duration::from_secs(30)).unwrap();
                assert_eq!(active.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                assert!(me.is_leader().unwrap());
                assert_eq!(me.leader_data().unwrap(), Some(format!("{i}").into_bytes()));
                turns.fetch_add(1, Ordering::SeqCst);
                active.fetch_sub(1, Ordering::SeqCst);
                // Odd ones resign, even ones just close their session.
                if i % 2 == 1 {
                    me.resign().unwrap();
                } else {
                    zk.close().unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(turns.load(Ordering::SeqCst), n);
    assert!(connect().get_children(&dir).unwrap().is_empty());
}

/// A candidate waiting in line whose wait times out leaves no watch registered: 50
/// timed-out waits, and the handle's live contexts are back at their baseline.
#[test]
fn timed_out_waits_leave_nothing_registered() {
    let dir = unique_path("leak");
    let leader_zk = connect();
    let _leader = LeaderElection::new(&leader_zk, &dir, b"leader").unwrap();
    let zk = connect();
    let candidate = LeaderElection::new(&zk, &dir, b"waiting").unwrap();
    assert_no_leftover_contexts(&zk);
    for _ in 0..50 {
        assert_eq!(
            candidate.wait_until_leader(Duration::from_millis(10)),
            Err(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);
}

/// At the end of the counter (limit 2) a join waits for the directory to empty within
/// its request timeout, then fails with `SequenceExhausted` leaving nothing behind; once
/// the candidates have left, a join restarts the directory. Leadership stays single and
/// the fencing token grows although the sequence starts again.
#[test]
fn counter_end_fails_the_join_until_the_candidates_leave() {
    let dir = unique_path("counter-end");
    let options = NodeOptions::default().sequence_limit(2);
    let (zk_a, zk_b) = (connect(), connect());
    let a = LeaderElection::with_options(&zk_a, &dir, b"a", options.clone()).unwrap();
    let b = LeaderElection::with_options(&zk_b, &dir, b"b", options.clone()).unwrap();
    assert_eq!((a.sequence(), b.sequence()), (0, 1));
    // A short session: the join waits up to its 2 s request timeout.
    let hosts = zk_harness::shared_test_connect_string();
    let zk_c = zookeeper_mt::ZooKeeper::connect(&hosts, Duration::from_secs(2)).unwrap();
    assert_eq!(
        LeaderElection::with_options(&zk_c, &dir, b"c", options.clone()).err(),
        Some(RecipeError::SequenceExhausted { dir: dir.clone() })
    );
    assert_eq!(
        connect().get_children(&dir).unwrap().len(),
        2,
        "nothing left"
    );
    assert_no_leftover_contexts(&zk_c);
    assert_eq!(leaders(&[&a, &b]), vec![0]);
    let token = b.fencing_token();
    a.resign().unwrap();
    b.wait_until_leader(WAIT).unwrap();
    // The join waits for the last candidate to leave, then restarts the directory.
    let c = thread::spawn(move || {
        let c = LeaderElection::with_options(&zk_c, &dir, b"c", options).unwrap();
        c.wait_until_leader(WAIT).unwrap();
        c
    });
    b.resign().unwrap();
    let c = c.join().unwrap();
    assert_eq!(c.sequence(), 0);
    assert!(c.fencing_token() > token);
    assert!(c.is_leader().unwrap());
}

/// The leader's fencing token grows from leader to leader.
#[test]
fn fencing_token_grows_with_each_leader() {
    let dir = unique_path("fencing");
    let mut last = 0;
    for _ in 0..4 {
        let zk = connect();
        let me = LeaderElection::new(&zk, &dir, b"x").unwrap();
        me.wait_until_leader(WAIT).unwrap();
        assert!(me.fencing_token() > last);
        last = me.fencing_token();
        me.resign().unwrap();
    }
}

/// With an ACL for authenticated users only, another session cannot delete a candidate
/// nor join.
#[test]
fn node_options_acl_protects_the_candidates() {
    let dir = unique_path("acl");
    let zk = connect();
    zk.add_auth("digest", b"elector:secret").unwrap();
    let owner_only = NodeOptions::default().acl(vec![zookeeper_mt::Acl::new(
        zookeeper_mt::Perms::ALL,
        "auth",
        "",
    )]);
    let me = LeaderElection::with_options(&zk, &dir, b"me", owner_only).unwrap();
    let stranger = connect();
    let node = format!("{dir}/{}", me.node());
    assert_eq!(
        stranger.delete(&node, None),
        Err(zookeeper_mt::Error::NoAuth)
    );
    assert_eq!(
        LeaderElection::new(&stranger, &dir, b"rogue").err(),
        Some(RecipeError::ZooKeeper(zookeeper_mt::Error::NoAuth))
    );
    assert!(me.is_leader().unwrap());
}

#[test]
fn pending_async_waits_cost_no_thread_and_dropped_ones_leave_no_watch() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    const CANDIDATES: usize = 200;
    let zk = connect();
    let dir = unique_path("async-waits");
    let leader = LeaderElection::new(&zk, &dir, b"leader").unwrap();
    let candidates: Vec<LeaderElection> = (0..CANDIDATES)
        .map(|_| LeaderElection::new(&zk, &dir, b"c").unwrap())
        .collect();
    let contexts = zk.live_contexts();
    let before = threads();
    let mut waits: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = candidates
        .iter()
        .map(|c| Box::pin(c.wait_until_leader_async(Timeout::Never)) as Pin<Box<_>>)
        .collect();
    // Poll them all until each watches its predecessor (one watch each).
    let all_waiting = zk_harness::executor::block_on_timeout(
        std::future::poll_fn(|cx| {
            for wait in waits.iter_mut() {
                assert!(wait.as_mut().poll(cx).is_pending(), "none may lead yet");
            }
            if zk.live_contexts() >= contexts + CANDIDATES {
                return Poll::Ready(());
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }),
        WAIT,
    );
    assert!(
        all_waiting.is_some(),
        "the waits did not all set their watch"
    );
    let added = threads().saturating_sub(before);
    println!("{CANDIDATES} pending async waits added {added} threads");
    assert!(
        added <= 2,
        "{CANDIDATES} pending waits added {added} threads"
    );
    drop(waits);
    // Taken off the client at once; the client frees each on its completion thread.
    wait_until("the dropped waits' watches released", || {
        zk.live_contexts() == contexts
    });
    // The candidates stay in the election: the next one leads after the leader resigns.
    leader.resign().unwrap();
    candidates[0].wait_until_leader(WAIT).unwrap();
    drop(candidates);
    assert_no_leftover_contexts(&zk);
}

#[test]
fn a_dropped_async_join_leaves_no_candidate() {
    let zk = connect();
    let dir = unique_path("async-join");
    let _first = LeaderElection::new(&zk, &dir, b"first").unwrap();
    for polls in 0..4 {
        let mut join = Box::pin(LeaderElection::new_async(&zk, &dir, b"dropped"));
        for _ in 0..polls {
            if zk_harness::executor::poll_once(&mut join).is_ready() {
                break;
            }
        }
        drop(join);
        wait_until("only the first candidate left", || {
            zk.get_children(&dir).map(|c| c.len()).unwrap_or(0) == 1
        });
    }
}
