//! The leader latch against a real server: one leader at a time (history checker with
//! fencing tokens), predecessor-only wake-ups, the event stream, losses (deletion,
//! disconnection, expiry on plain and managed clients), lost-create recovery, nothing
//! left registered, the counter's end, and a seeded fault run.

#[path = "../common/mod.rs"]
mod common;
mod faults;

use common::{assert_no_leftover_contexts, connect, connect_to, unique_path, Proxy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::executor::block_on;
use zk_harness::history::{check_lock, monotonic_nanos, CriticalSection};
use zk_harness::testing::wait_until;
use zk_harness::testing::Seed;
use zk_harness::{Crafted, FaultProxy, LaggingEnsemble, OpCode, Server, ServerOptions};
use zookeeper_mt::{Acl, Perms, ZooKeeper};
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::leadership::{
    LatchLayout, LatchStatus, LeaderLatch, LeadershipEvent, LeadershipGuard, LeadershipLost,
    TermEnd,
};
use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

/// Generous: the machine is shared and loaded.
const T: Duration = Duration::from_secs(60);

fn latch(zk: &ZooKeeper, path: &str, id: &str) -> LeaderLatch {
    LeaderLatch::builder(path).id(id).build(zk).unwrap()
}

fn latch_on(zk: &ZooKeeper, path: &str, id: &str) -> LeaderLatch {
    let latch = latch(zk, path, id);
    wait_until("the latch is in line", T, || {
        matches!(latch.status(), LatchStatus::Waiting | LatchStatus::Leading)
    });
    latch
}

/// Ends the session of `zk` on the server: another handle takes it over with its id and
/// password and closes it. `zk` must be cut off from the server meanwhile.
fn expire(zk: &ZooKeeper) {
    let id = zk.client_id().unwrap();
    let taken = ZooKeeper::builder(&zk_harness::shared_test_connect_string())
        .session(id)
        .connect();
    match taken {
        Ok(thief) => thief.close().unwrap(),
        // Cut off for longer than its timeout (a loaded machine), the session has
        // expired already: what this was to bring about.
        Err(zookeeper_mt::Error::SessionExpired) => {}
        Err(error) => panic!("taking the session over: {error}"),
    }
}

fn next_event(latch: &LeaderLatch) -> LeadershipEvent {
    latch
        .events()
        .recv_timeout(T)
        .expect("no leadership event in time")
}

/// Holds leadership for up to `hold` (less if it is lost) and returns the section. It
/// ends when the latch ended the term if that was earlier (this thread may wake late).
fn hold(owner: &str, guard: &LeadershipGuard, hold: Duration) -> CriticalSection {
    let start = monotonic_nanos();
    let _ = guard.lost().wait(hold);
    let now = monotonic_nanos();
    let end = match guard.ended_at() {
        // Instant is CLOCK_MONOTONIC on Linux, as the stamps are.
        Some(at) => now.saturating_sub(at.elapsed().as_nanos() as u64),
        None => now,
    };
    CriticalSection {
        owner: owner.to_string(),
        token: guard.token(),
        start,
        end,
    }
}

#[test]
fn one_leader_at_a_time_and_leadership_passes() {
    let path = unique_path("one-leader");
    let sections = Arc::new(Mutex::new(Vec::new()));
    thread::scope(|scope| {
        for i in 0..4 {
            let (path, sections) = (&path, Arc::clone(&sections));
            scope.spawn(move || {
                let zk = connect();
                let owner = format!("latch-{i}");
                let latch = latch(&zk, path, &owner);
                for _ in 0..5 {
                    let section = latch
                        .run_while_leader(T, |guard| hold(&owner, guard, Duration::from_millis(3)))
                        .unwrap();
                    sections.lock().unwrap().push(section);
                }
                latch.close();
                assert_no_leftover_contexts(&zk);
            });
        }
    });
    let sections = sections.lock().unwrap().clone();
    assert_eq!(sections.len(), 20);
    check_lock(&sections).unwrap_or_else(|v| panic!("{v}"));
    // How long leadership took to pass (one term's end to the next one's start).
    let mut sorted = sections.clone();
    sorted.sort_by_key(|s| s.start);
    let mut gaps: Vec<u64> = sorted.windows(2).map(|w| w[1].start - w[0].end).collect();
    gaps.sort_unstable();
    eprintln!(
        "hand-over between 4 latches: median {} µs, max {} µs",
        gaps[gaps.len() / 2] / 1000,
        gaps[gaps.len() - 1] / 1000
    );
    let admin = connect();
    assert!(admin.get_children(&path).unwrap().is_empty());
}

#[test]
fn each_departure_wakes_only_the_next_in_line() {
    let path = unique_path("wakeups");
    let sessions: Vec<ZooKeeper> = (0..5).map(|_| connect()).collect();
    let mut latches = Vec::new();
    for (i, zk) in sessions.iter().enumerate() {
        let latch = latch(zk, &path, &format!("p{i}"));
        // Join in a known order: each waits until its node is in line.
        wait_until("the latch is in line", T, || {
            matches!(latch.status(), LatchStatus::Waiting | LatchStatus::Leading)
        });
        latches.push(latch);
    }
    latches[0].await_leadership(T).unwrap();
    let ids: Vec<String> = latches[0]
        .participants()
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["p0", "p1", "p2", "p3", "p4"]);
    for (i, latch) in latches.iter().enumerate() {
        assert_eq!(latch.has_leadership(), i == 0, "latch {i}");
        assert_eq!(latch.armed_watches(), 1, "latch {i}: one watch each");
    }
    let mut remaining = latches;
    let mut woken_before = 0;
    for handed in 1..5usize {
        let leader = remaining.remove(0);
        woken_before += leader.wakeups();
        leader.close();
        let guard = remaining[0].await_leadership(T).unwrap();
        assert!(guard.is_leader());
        let woken: u64 = woken_before + remaining.iter().map(LeaderLatch::wakeups).sum::<u64>();
        assert_eq!(woken, handed as u64, "one wake-up per hand-over, no herd");
        for other in &remaining[1..] {
            assert!(!other.has_leadership());
        }
    }
    drop(remaining);
    for zk in &sessions {
        assert_no_leftover_contexts(zk);
    }
}

#[test]
fn events_report_terms_blocking_and_async() {
    let path = unique_path("events");
    let zk = connect();
    let latch = latch(&zk, &path, "solo");
    let LeadershipEvent::BecameLeader {
        term,
        token,
        generation,
    } = next_event(&latch)
    else {
        panic!("expected BecameLeader");
    };
    assert_eq!((term, generation), (1, 1));
    let guard = latch.leadership().unwrap();
    assert_eq!(guard.token(), token);
    let stat = zk.exists(guard.node()).unwrap().unwrap();
    assert_eq!(stat.czxid, token, "the token is the node's czxid");

    // Relinquish: the term ends without a loss, and the latch (alone) leads again with
    // a new node.
    assert!(latch.relinquish().unwrap());
    assert!(!guard.is_leader() && !guard.is_lost());
    assert_eq!(guard.end(), Some(TermEnd::Relinquished));
    assert!(
        guard.lost().wait(zookeeper_mt::Timeout::Never) == Ok(None),
        "no loss: the signal resolves to None"
    );
    assert!(
        zk.exists(guard.node()).unwrap().is_none(),
        "the old node is gone"
    );
    assert_eq!(
        block_on(latch.events().next()),
        Some(LeadershipEvent::LostLeadership {
            term: 1,
            end: TermEnd::Relinquished
        })
    );
    match block_on(latch.events().next()) {
        Some(LeadershipEvent::BecameLeader {
            term: 2,
            token: next,
            ..
        }) => {
            assert!(next > token, "tokens grow")
        }
        other => panic!("expected term 2, got {other:?}"),
    }
    // The stream outlives the latch through a clone: it reports the close, then ends.
    let events = latch.events().clone();
    latch.close();
    assert_eq!(
        events.recv_timeout(T),
        Ok(LeadershipEvent::LostLeadership {
            term: 2,
            end: TermEnd::LatchClosed
        })
    );
    assert_eq!(
        events.recv_timeout(T),
        Err(zookeeper_mt_recipes::events::RecvTimeoutError::Disconnected)
    );
    assert_no_leftover_contexts(&zk);
}

#[test]
fn a_deleted_node_is_a_loss_and_the_latch_joins_again() {
    let path = unique_path("deleted");
    let zk = connect();
    let admin = connect();
    let latch = latch(&zk, &path, "a");
    let guard = latch.await_leadership(T).unwrap();
    let lost = guard.lost();
    admin.delete(guard.node(), None).unwrap();
    assert_eq!(lost.wait(T), Ok(Some(LeadershipLost::NodeDeleted)));
    assert_eq!(guard.lost_reason(), Some(LeadershipLost::NodeDeleted));
    assert!(guard.check().is_err());
    assert_eq!(
        next_event(&latch),
        LeadershipEvent::BecameLeader {
            term: 1,
            token: guard.token(),
            generation: 1
        }
    );
    assert_eq!(
        next_event(&latch),
        LeadershipEvent::LostLeadership {
            term: 1,
            end: TermEnd::Lost(LeadershipLost::NodeDeleted)
        }
    );
    // Alone, it leads again: a new term on a new node, never the old guard.
    let again = latch.await_leadership(T).unwrap();
    assert_eq!(again.term(), 2);
    assert!(again.token() > guard.token());
    assert!(!guard.is_leader());
    latch.close();
    assert_no_leftover_contexts(&zk);
}

#[test]
fn zero_grace_disconnection_is_a_loss_then_a_new_node() {
    let path = unique_path("disconnect");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let admin = connect();
    let latch = latch(&zk, &path, "a");
    let guard = latch.await_leadership(T).unwrap();
    let old_node = guard.node().to_string();
    let lost = guard.lost();
    proxy.cut();
    assert_eq!(lost.wait(T), Ok(Some(LeadershipLost::Disconnected)));
    // The node outlives the disconnection (the session lives) until the latch is back.
    assert!(admin.exists(&old_node).unwrap().is_some());
    proxy.restore();
    let again = latch.await_leadership(T).unwrap();
    assert!(again.token() > guard.token(), "a new node, a larger token");
    assert!(
        admin.exists(&old_node).unwrap().is_none(),
        "the old node was deleted"
    );
    assert_eq!(admin.get_children(&path).unwrap().len(), 1);
    latch.close();
    assert_no_leftover_contexts(&zk);
}

#[test]
fn a_disconnection_within_the_grace_keeps_the_term() {
    let path = unique_path("grace");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let zk = ZooKeeper::connect(&proxy.addr, Duration::from_secs(20)).unwrap();
    // A grace far longer than the outage (longer than safe, to keep the test free of
    // timing assumptions): the term survives.
    let latch = LeaderLatch::builder(&path)
        .disconnect_grace(Duration::from_secs(120))
        .build(&zk)
        .unwrap();
    let guard = latch.await_leadership(T).unwrap();
    let states = zookeeper_mt_recipes::lifecycle::connection_states(&zk);
    proxy.cut();
    proxy.restore();
    // Wait for the reconnection, then for the latch to have looked again.
    loop {
        let event = states.recv_timeout(T).expect("no reconnection");
        if event.state == zookeeper_mt_recipes::lifecycle::ConnectionState::Reconnected {
            break;
        }
    }
    // The latch task handles connection states before commands: a relinquish that
    // ends the term proves the term survived the reconnection.
    assert!(
        guard.relinquish().unwrap(),
        "the term ended: {:?}",
        guard.end()
    );
    assert_eq!(guard.end(), Some(TermEnd::Relinquished));
    latch.close();
}

#[test]
fn expiry_ends_a_latch_on_a_plain_handle() {
    let path = unique_path("expiry-plain");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let latch = LeaderLatch::builder(&path)
        .disconnect_grace(Duration::from_secs(600))
        .build(&zk)
        .unwrap();
    let guard = latch.await_leadership(T).unwrap();
    let events = latch.events().clone();
    proxy.cut();
    expire(&zk);
    proxy.restore();
    assert_eq!(
        guard.lost().wait(T),
        Ok(Some(LeadershipLost::SessionExpired))
    );
    match latch.await_leadership(T) {
        Err(RecipeError::ZooKeeper(zookeeper_mt::Error::SessionExpired)) => {}
        other => panic!("expected the session's end, got {other:?}"),
    }
    assert_eq!(latch.status(), LatchStatus::Ended);
    let rest: Vec<_> = events.iter().collect();
    assert_eq!(
        rest.last(),
        Some(&LeadershipEvent::LostLeadership {
            term: 1,
            end: TermEnd::Lost(LeadershipLost::SessionExpired)
        })
    );
}

#[test]
fn a_managed_latch_joins_the_new_session_but_the_old_guard_stays_lost() {
    let path = unique_path("expiry-managed");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let client = ManagedZooKeeper::connect(&proxy.addr, common::SESSION_TIMEOUT).unwrap();
    let admin = connect();
    let latch = LeaderLatch::builder(&path)
        .id("managed")
        .disconnect_grace(Duration::from_secs(600))
        .build(&client)
        .unwrap();
    let old = latch.await_leadership(T).unwrap();
    assert_eq!(old.generation(), 1);
    // Someone else joins meanwhile: it must not lead while the old session lives.
    let other_zk = connect();
    let other = latch_on(&other_zk, &path, "other");
    proxy.cut();
    let old_session = client.current();
    expire(&old_session);
    // Expired on the server: the other participant leads now.
    let other_guard = other.await_leadership(T).unwrap();
    assert!(other_guard.token() > old.token());
    proxy.restore();
    assert_eq!(old.lost().wait(T), Ok(Some(LeadershipLost::SessionExpired)));
    // The latch joined again in the new session, behind the other participant.
    wait_until("the latch is in line again", T, || {
        latch.status() == LatchStatus::Waiting
    });
    assert!(!old.is_leader());
    other.close();
    let new = latch.await_leadership(T).unwrap();
    assert_eq!(new.generation(), 2);
    assert_eq!(new.term(), 2);
    assert!(new.token() > other_guard.token());
    assert!(old.is_lost(), "the old guard never comes back");
    assert_eq!(admin.get_children(&path).unwrap().len(), 1);
    latch.close();
    assert!(admin.get_children(&path).unwrap().is_empty());
}

#[test]
fn a_timed_out_wait_leaves_nothing_registered() {
    let path = unique_path("timeout");
    let leader_zk = connect();
    let leader = latch_on(&leader_zk, &path, "leader");
    let zk = connect();
    zk.exists("/").unwrap();
    let baseline = zk.live_contexts();
    let waiting = latch_on(&zk, &path, "waiting");
    wait_until("one watch on the predecessor", T, || {
        waiting.armed_watches() == 1
    });
    assert_eq!(
        waiting
            .await_leadership(Duration::from_millis(200))
            .unwrap_err(),
        RecipeError::Timeout
    );
    zk.exists("/").unwrap();
    assert_eq!(
        zk.live_contexts(),
        baseline + 1,
        "only the latch's own watch"
    );
    waiting.close();
    assert_no_leftover_contexts(&zk);
    // The one-shot form leaves nothing behind either, on a timeout...
    let result = LeaderLatch::builder(&path).run_once(&zk, Duration::from_millis(200), |_| ());
    assert_eq!(result.unwrap_err(), RecipeError::Timeout);
    assert_no_leftover_contexts(&zk);
    assert_eq!(leader_zk.get_children(&path).unwrap().len(), 1);
    // ... and after leading.
    leader.close();
    let token = LeaderLatch::builder(&path)
        .run_once(&zk, T, |guard| guard.token())
        .unwrap();
    assert!(token > 0);
    assert_no_leftover_contexts(&zk);
    assert!(leader_zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn native_latches_and_elections_exclude_each_other() {
    let path = unique_path("with-election");
    let zk = connect();
    let election = LeaderElection::new(&zk, &path, b"election").unwrap();
    assert!(election.is_leader().unwrap());
    let latch_zk = connect();
    let latch = latch_on(&latch_zk, &path, "latch");
    assert_eq!(latch.status(), LatchStatus::Waiting);
    election.resign().unwrap();
    latch.await_leadership(T).unwrap();
    let late = LeaderElection::new(&zk, &path, b"late").unwrap();
    assert!(!late.is_leader().unwrap());
    latch.close();
    late.wait_until_leader(T).unwrap();
}

#[test]
fn nodes_get_the_acl_asked_for() {
    let path = unique_path("acl");
    let zk = connect();
    zk.add_auth("digest", b"latch:secret").unwrap();
    let only_us = NodeOptions::default().acl(vec![Acl::new(Perms::ALL, "auth", "")]);
    let latch = LeaderLatch::builder(&path)
        .node_options(only_us)
        .build(&zk)
        .unwrap();
    let guard = latch.await_leadership(T).unwrap();
    let (acl, _) = zk.get_acl(guard.node()).unwrap();
    assert_eq!((&*acl[0].scheme, acl[0].perms), ("digest", Perms::ALL));
    let stranger = connect();
    assert_eq!(
        stranger.delete(guard.node(), None),
        Err(zookeeper_mt::Error::NoAuth),
        "an unauthenticated client cannot delete the leader's node"
    );
    // The latch itself still hands over (deleting its own node) and leads again.
    assert!(guard.relinquish().unwrap());
    assert_eq!(latch.await_leadership(T).unwrap().term(), 2);
    latch.close();
    assert!(zk.get_children(&path).unwrap().is_empty());
}
