//! Leadership and membership against real Curator 5.4 and kazoo 2.8 processes on the
//! same paths: our latch in Curator's `LeaderLatch` layout with Curator latches, in
//! kazoo's `Election` layout with kazoo elections (at most one leader at any instant,
//! by `CLOCK_MONOTONIC` sections of every participant; leadership passes both ways), and
//! our group member in kazoo's `Party` layout with kazoo parties and in Curator's
//! `GroupMember` layout with Curator group members (each side sees the other's members
//! join and leave).

mod common;

use common::{connect, unique_path};
use zk_harness::testing::wait_until;

use std::thread;
use std::time::Duration;
use zk_harness::peers::{max_overlap, monotonic_ns, sections_at, Participant, Peer, Section};
use zookeeper_mt_recipes::leadership::{LatchLayout, LeaderLatch};
use zookeeper_mt_recipes::nodes::{Group, GroupEvent, GroupLayout, GroupMember};
use zookeeper_mt_recipes::RecipeError;

const T: Duration = Duration::from_secs(120);

/// Terms per participant.
const ROUNDS: u32 = 10;
const HOLD: Duration = Duration::from_millis(2);

fn spawn(participant: Participant, path: &str, id: &str) -> Peer {
    Peer::builder(participant, &zk_harness::shared_test_connect_string(), path)
        .id(id)
        .spawn()
        .unwrap_or_else(|e| panic!("{participant:?}: {e}"))
}

fn ready(peers: &mut [Peer]) {
    for peer in peers {
        peer.wait_ready(T)
            .unwrap_or_else(|e| panic!("{} not ready: {e}", peer.label()));
    }
}

/// Our latch leads while the peer's acquire waits; once ours relinquishes, the peer
/// leads while ours waits; once the peer releases, ours leads again.
fn leadership_passes_both_ways(peer: &mut Peer, latch: &LeaderLatch) {
    let ours = latch.await_leadership(T).unwrap();
    peer.send_acquire().unwrap();
    // The peer's node is in line behind ours before ours hands over (a JVM may take a
    // while to create it).
    wait_until("the peer's node is in line", T, || {
        latch.participants().unwrap().iter().any(|p| p.id == "peer")
    });
    assert!(
        !peer.answered_within(Duration::from_millis(200)).unwrap(),
        "{} became leader while ours leads",
        peer.label()
    );
    assert!(ours.relinquish().unwrap());
    peer.finish_acquire(T)
        .unwrap_or_else(|e| panic!("{} never led: {e}", peer.label()));
    // Ours joined again behind the peer: it waits.
    assert_eq!(
        latch
            .await_leadership(Duration::from_millis(500))
            .unwrap_err(),
        RecipeError::Timeout
    );
    let leader_id = latch.participants().unwrap().first().map(|p| p.id.clone());
    assert_eq!(
        leader_id.as_deref(),
        Some("peer"),
        "the peer's node is first"
    );
    peer.release(T).unwrap();
    let again = latch.await_leadership(T).unwrap();
    assert!(again.token() > ours.token());
    assert!(again.relinquish().unwrap());
}

/// `ROUNDS` terms on each peer and on each of `threads` latches of ours (own sessions)
/// at once; returns every section.
fn terms_together(
    peers: &mut [Peer],
    threads: usize,
    path: &str,
    layout: LatchLayout,
) -> Vec<Section> {
    for peer in peers.iter_mut() {
        peer.send_run(ROUNDS, HOLD).unwrap();
    }
    let mut sections = Vec::new();
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                scope.spawn(move || {
                    let zk = connect();
                    let holder = format!("rust-{i}");
                    let latch = LeaderLatch::builder(path)
                        .id(&holder)
                        .layout(layout)
                        .build(&zk)
                        .unwrap();
                    let mut mine = Vec::new();
                    for _ in 0..ROUNDS {
                        let section = latch
                            .run_while_leader(T, |guard| {
                                let enter_ns = monotonic_ns();
                                let _ = guard.lost().wait(HOLD);
                                assert!(!guard.is_lost(), "{holder}: {:?}", guard.end());
                                Section {
                                    holder: holder.clone(),
                                    enter_ns,
                                    exit_ns: monotonic_ns(),
                                }
                            })
                            .unwrap();
                        mine.push(section);
                    }
                    latch.close();
                    mine
                })
            })
            .collect();
        for peer in peers.iter_mut() {
            let label = peer.label().to_string();
            let theirs = peer
                .finish_run(T)
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(theirs.len(), ROUNDS as usize, "{label}");
            sections.extend(theirs);
        }
        for handle in handles {
            sections.extend(handle.join().unwrap());
        }
    });
    sections
}

/// No two sections overlap, and leadership moved between the sides.
fn check_one_leader(sections: &mut [Section], what: &str) {
    let (most, at) = max_overlap(sections);
    if most > 1 {
        let at = at.unwrap();
        panic!(
            "{what}: {most} leaders at once at {at}: {:?}",
            sections_at(sections, at)
        );
    }
    sections.sort_by_key(|s| s.enter_ns);
    let side = |s: &Section| s.holder.starts_with("rust-");
    let to_ours = sections
        .windows(2)
        .filter(|w| !side(&w[0]) && side(&w[1]))
        .count();
    let to_theirs = sections
        .windows(2)
        .filter(|w| side(&w[0]) && !side(&w[1]))
        .count();
    eprintln!(
        "{what}: {} terms, never two leaders; {to_ours} hand-overs to ours, {to_theirs} to theirs",
        sections.len()
    );
}

#[test]
fn curator_leader_latch_and_ours_have_one_leader_at_a_time() {
    let path = unique_path("curator-latch");
    let mut peers = vec![
        spawn(Participant::CuratorLeaderLatch, &path, "peer"),
        spawn(Participant::CuratorLeaderLatch, &path, "peer-2"),
    ];
    ready(&mut peers);
    let zk = connect();
    let latch = LeaderLatch::builder(&path)
        .id("ours")
        .layout(LatchLayout::CuratorLeaderLatch)
        .build(&zk)
        .unwrap();
    leadership_passes_both_ways(&mut peers[0], &latch);
    latch.close();
    let mut sections = terms_together(&mut peers, 2, &path, LatchLayout::CuratorLeaderLatch);
    assert_eq!(sections.len(), 4 * ROUNDS as usize);
    check_one_leader(&mut sections, "Curator LeaderLatch");
    for peer in peers {
        peer.quit(T).unwrap();
    }
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn kazoo_election_and_ours_have_one_leader_at_a_time() {
    let path = unique_path("kazoo-election");
    let mut peers = vec![
        spawn(Participant::KazooElection, &path, "peer"),
        spawn(Participant::KazooElection, &path, "peer-2"),
    ];
    ready(&mut peers);
    let zk = connect();
    let latch = LeaderLatch::builder(&path)
        .id("ours")
        .layout(LatchLayout::KazooElection)
        .build(&zk)
        .unwrap();
    leadership_passes_both_ways(&mut peers[0], &latch);
    latch.close();
    let mut sections = terms_together(&mut peers, 2, &path, LatchLayout::KazooElection);
    assert_eq!(sections.len(), 4 * ROUNDS as usize);
    check_one_leader(&mut sections, "kazoo Election");
    for peer in peers {
        peer.quit(T).unwrap();
    }
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn kazoo_party_and_ours_see_each_others_members() {
    let path = unique_path("kazoo-party");
    let mut party = spawn(Participant::KazooParty, &path, "py-1");
    ready(std::slice::from_mut(&mut party));
    let zk = connect();
    let member = GroupMember::builder(&path, "rust-1")
        .layout(GroupLayout::KazooParty)
        .build(&zk)
        .unwrap();
    member.node().wait_created(T).unwrap();
    let group = member.group();
    group.wait_initialized(T).unwrap();
    // kazoo sees ours.
    assert_eq!(party.members(T).unwrap(), ["rust-1"]);
    // Ours sees kazoo's join...
    party.join(T).unwrap();
    wait_for_event(
        group,
        |e| matches!(e, GroupEvent::Joined(m) if m.id == "py-1"),
    );
    assert_eq!(group.ids(), ["py-1", "rust-1"]);
    assert_eq!(party.members(T).unwrap(), ["py-1", "rust-1"]);
    // ... and its departure.
    party.leave(T).unwrap();
    wait_for_event(
        group,
        |e| matches!(e, GroupEvent::Left(m) if m.id == "py-1"),
    );
    assert_eq!(group.ids(), ["rust-1"]);
    // kazoo sees ours leave.
    party.join(T).unwrap();
    member.leave();
    let view = Group::watch(&zk, &path, GroupLayout::KazooParty).unwrap();
    view.wait_initialized(T).unwrap();
    wait_until("our view shows only kazoo's member", T, || {
        view.ids() == ["py-1"]
    });
    assert_eq!(party.members(T).unwrap(), ["py-1"]);
    view.close();
    party.quit(T).unwrap();
}

/// Reads the group's events until one matches (earlier ones are skipped).
fn wait_for_event(group: &Group, wanted: impl Fn(&GroupEvent) -> bool) {
    loop {
        let event = group
            .events()
            .recv_timeout(T)
            .expect("no group event in time");
        if wanted(&event) {
            return;
        }
    }
}

/// Polls `peer`'s `MEMBERS` until it answers `want` (Curator's GroupMember reads from a
/// cache that follows the group a moment behind).
fn wait_for_peer_members(peer: &mut Peer, want: &[&str]) {
    let deadline = std::time::Instant::now() + T;
    loop {
        let members = peer.members(T).unwrap();
        if members == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} sees {members:?}, not {want:?}",
            peer.label()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn curator_group_member_and_ours_see_each_others_members() {
    let path = unique_path("curator-group");
    let mut curator = spawn(Participant::CuratorGroupMember, &path, "java-1");
    ready(std::slice::from_mut(&mut curator));
    let zk = connect();
    let member = GroupMember::new(&zk, &path, "rust-1", b"rust payload").unwrap();
    member.node().wait_created(T).unwrap();
    let group = member.group();
    group.wait_initialized(T).unwrap();
    // Ours sees Curator's join, with Curator's payload...
    curator.join(T).unwrap();
    wait_for_event(
        group,
        |e| matches!(e, GroupEvent::Joined(m) if m.id == "java-1"),
    );
    let java = group
        .members()
        .into_iter()
        .find(|m| m.id == "java-1")
        .unwrap();
    assert_eq!(java.data, b"java-1");
    // ... and Curator sees ours.
    wait_for_peer_members(&mut curator, &["java-1", "rust-1"]);
    // Departures, both ways.
    curator.leave(T).unwrap();
    wait_for_event(
        group,
        |e| matches!(e, GroupEvent::Left(m) if m.id == "java-1"),
    );
    assert_eq!(group.ids(), ["rust-1"]);
    curator.join(T).unwrap();
    wait_for_peer_members(&mut curator, &["java-1", "rust-1"]);
    member.leave();
    wait_for_peer_members(&mut curator, &["java-1"]);
    curator.quit(T).unwrap();
}
