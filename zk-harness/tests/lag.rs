//! Follower lag is real: a write whose reply was lost on member A, the client moved to a
//! stalled member B: a plain read on B does not see the write; `sync` waits for the
//! resume and a read after it does.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use zk_harness::fault_proxy::FaultKind;
use zk_harness::testing::unique_path;
use zk_harness::{LaggingEnsemble, ServerOptions};
use zookeeper_mt::{CreateMode, Error, ZooKeeper};

/// Upper bound of every wait; reached only when something is broken.
const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_lost_write_is_invisible_on_a_lagging_member_until_sync() {
    let t = Instant::now();
    let ens = LaggingEnsemble::start(&ServerOptions::for_tests()).expect("ensemble starts");
    eprintln!(
        "lagging ensemble serving after {:?}; lag window {:?}",
        t.elapsed(),
        ens.lag_window()
    );
    let leader = ens.leader().expect("a leader");
    let followers = ens.followers();
    assert_eq!(followers.len(), 2, "{:?}", ens.ensemble().modes());
    // Both followers: A forwards the write to the leader, B lags.
    let (a, b) = (followers[0], followers[1]);
    assert!(ens.stall_member(leader).is_err(), "a leader cannot lag");

    let proxy = ens.proxy(a);
    let zk = ZooKeeper::connect(&ens.connect_string(a), Duration::from_secs(10)).unwrap();
    let session = zk.client_id().unwrap().session_id;
    let parent = unique_path("lag");
    zk.create(&parent, b"", CreateMode::Persistent).unwrap();
    let child = format!("{parent}/written");

    ens.stall_member(b).unwrap();
    assert!(ens.is_stalled(b));
    // The next request (the create) is applied, its reply lost; the client comes back
    // through the same proxy, now pointing at B.
    proxy.cut_after(1);
    proxy.redirect(ens.member(b).connect_string()).unwrap();
    let lost = zk.create(&child, b"x", CreateMode::Persistent);
    assert_eq!(lost, Err(Error::ConnectionLoss));
    let fired = proxy.wait_for_fired(1, WAIT).unwrap();
    assert_eq!(fired[0].kind, FaultKind::CutAfterRequest);
    let reply = fired[0]
        .reply
        .expect("the create's reply reached the proxy");
    assert_eq!(reply.err, 0, "the create was applied");

    // Same session, now on B (revalidated by the leader through the held link). B refuses
    // a client that has seen a newer zxid than its own; then the lag is not observable
    // from this client, and only the outcome after the resume is checked. Waits less
    // than the session timeout, so a refused session is still alive after the resume.
    if zk.wait_connected(Duration::from_secs(6)).is_err() {
        let refusals = std::fs::read_to_string(ens.member(b).log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Refusing session"))
            .count();
        eprintln!(
            "the lagging member did not take the client back (zxid of B {:?}, of the write {:#x}, \
             {refusals} refusals in its log): scenario not established, outcome checked",
            ens.zxid(b),
            reply.zxid
        );
        ens.resume_member(b);
        zk.wait_connected(WAIT).unwrap();
        assert_eq!(zk.client_id().unwrap().session_id, session);
        zk.sync(&parent).unwrap();
        assert!(
            zk.exists(&child).unwrap().is_some(),
            "sync + read sees the write"
        );
        return;
    }
    assert_eq!(zk.client_id().unwrap().session_id, session);
    assert_eq!(proxy.connections_accepted(), 2);
    let on_a =
        ZooKeeper::connect(&ens.member(a).connect_string(), Duration::from_secs(10)).unwrap();
    assert!(on_a.exists(&child).unwrap().is_some(), "A has the write");
    assert!(
        ens.zxid(b).unwrap() < reply.zxid,
        "B has not applied the write"
    );
    assert_eq!(
        zk.exists(&child).unwrap(),
        None,
        "a plain read on the lagging member misses the write"
    );
    assert_eq!(zk.get_children(&parent).unwrap(), Vec::<String>::new());

    // sync needs the leader's answer, which is held with the proposals.
    let (tx, synced) = mpsc::channel();
    let syncer = {
        let zk = zk.clone();
        let parent = parent.clone();
        thread::spawn(move || tx.send(zk.sync(&parent)).unwrap())
    };
    assert!(
        synced.recv_timeout(Duration::from_millis(500)).is_err(),
        "sync completed on a stalled member"
    );
    ens.resume_member(b);
    assert!(!ens.is_stalled(b));
    synced
        .recv_timeout(WAIT)
        .unwrap()
        .expect("sync after resume");
    syncer.join().unwrap();
    assert!(
        zk.exists(&child).unwrap().is_some(),
        "sync + read sees the write"
    );
    ens.wait_caught_up(b, WAIT).unwrap();
    assert!(ens.zxid(b).unwrap() >= reply.zxid);
    assert_eq!(
        ens.ensemble().leader(),
        Some(leader),
        "no election happened"
    );
}
