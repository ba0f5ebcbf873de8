//! Three-member ensembles: election, failover, rejoin, pause/resume, cleanup.

use std::time::{Duration, Instant};

use zk_harness::{four_letter, process_alive, Ensemble, Mode, ServerOptions};

const WAIT: Duration = Duration::from_secs(60);

fn start3() -> Ensemble {
    let t = Instant::now();
    let ensemble = Ensemble::start(3, &ServerOptions::for_tests()).expect("ensemble starts");
    eprintln!("3-member ensemble serving after {:?}", t.elapsed());
    ensemble
}

#[test]
fn leader_failover_and_rejoin() {
    let ens = start3();
    assert_eq!(ens.len(), 3);
    assert_eq!(ens.connect_string().split(',').count(), 3);
    let leader = ens.leader().expect("a leader after start");
    let modes = ens.modes();
    assert_eq!(
        modes.iter().filter(|m| **m == Some(Mode::Follower)).count(),
        2,
        "{modes:?}"
    );

    let t = Instant::now();
    ens.kill(leader);
    assert!(!ens.member(leader).is_running());
    let new_leader = ens.wait_for_leader(WAIT).expect("new leader");
    eprintln!("new leader after {:?}", t.elapsed());
    assert_ne!(new_leader, leader);
    assert_eq!(ens.wait_for_quorum(WAIT).unwrap(), new_leader);

    let t = Instant::now();
    assert_eq!(ens.restart(leader).expect("rejoin"), Mode::Follower);
    eprintln!("old leader rejoined after {:?}", t.elapsed());
    assert_eq!(ens.wait_for_all_serving(WAIT).unwrap(), new_leader);
}

#[test]
fn pause_resume_members_and_drop_cleanup() {
    let ens = start3();
    let leader = ens.leader().unwrap();
    let follower = (leader + 1) % 3;

    // A paused follower: the quorum stays up.
    ens.pause(follower).unwrap();
    assert!(ens.member(follower).is_paused());
    assert_eq!(ens.member(follower).mode(), None);
    assert!(four_letter(
        &ens.member(follower).connect_string(),
        "ruok",
        Duration::from_millis(300)
    )
    .is_err());
    assert_eq!(ens.wait_for_quorum(WAIT).unwrap(), leader);
    ens.resume(follower).unwrap();
    assert_eq!(
        ens.member(follower).wait_until_serving(WAIT).unwrap(),
        Mode::Follower
    );

    // A paused leader: the others elect a new one; resumed, the old one follows.
    let t = Instant::now();
    ens.pause(leader).unwrap();
    let new_leader = ens
        .wait_for_leader(WAIT)
        .expect("leader while the old one is paused");
    eprintln!("new leader {:?} after pausing the leader", t.elapsed());
    assert_ne!(new_leader, leader);
    ens.resume(leader).unwrap();
    let t = Instant::now();
    assert_eq!(ens.wait_for_all_serving(WAIT).unwrap(), new_leader);
    eprintln!("resumed old leader follows after {:?}", t.elapsed());
    assert_eq!(ens.member(leader).mode(), Some(Mode::Follower));

    // Drop kills every member, paused or not, and removes every dir.
    let pids: Vec<u32> = ens.members().iter().map(|m| m.pid().unwrap()).collect();
    let dirs: Vec<_> = ens
        .members()
        .iter()
        .map(|m| m.dir().to_path_buf())
        .collect();
    ens.pause(new_leader).unwrap();
    drop(ens);
    for pid in pids {
        assert!(!process_alive(pid), "pid {pid} survived drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} survived drop", dir.display());
    }
}
