//! A node whose delete could not reach the ensemble is deleted once it is back, however
//! long the outage, while its session lives on.
//!
//! An ensemble without a quorum expires no session: the leader elected afterwards gives
//! every session a fresh timeout. So a client cut off for longer than its session timeout
//! can come back with the same session and its ephemeral nodes. A background delete that
//! gave up meanwhile would leave a lock node nobody removes: every later acquirer,
//! the owner's own process included, would wait behind it until that session ended.

use std::thread;
use std::time::{Duration, Instant};
use zk_harness::testing::{unique_path, wait_until};
use zk_harness::{Ensemble, ServerOptions};
use zookeeper_mt::{Error, EventType, ZooKeeper};
use zookeeper_mt_recipes::locks::Lock;

const SESSION: Duration = Duration::from_secs(4);
/// Upper bound of every wait; reached only when something is broken.
const WAIT: Duration = Duration::from_secs(60);

fn connect(hosts: &str) -> ZooKeeper {
    ZooKeeper::builder(hosts)
        .session_timeout(SESSION)
        .connect_timeout(WAIT)
        .connect()
        .unwrap()
}

#[test]
fn a_lock_released_during_a_quorum_loss_is_freed_when_the_session_comes_back() {
    let ens = Ensemble::start(3, &ServerOptions::for_tests()).expect("ensemble starts");
    let hosts = ens.connect_string();
    let holder = connect(&hosts);
    let session = holder.client_id().unwrap().session_id;
    let path = unique_path("outage");
    // A short reconnect timeout: the release hands the delete to the background at once.
    let lock = Lock::new(&holder, &path)
        .unwrap()
        .with_reconnect_timeout(Duration::from_millis(500));
    let guard = lock.acquire(WAIT).unwrap();
    let node = guard.node().to_string();

    // Two of three members down: no quorum, the third serves nobody.
    let leader = ens.wait_for_leader(WAIT).unwrap();
    let down = [leader, (leader + 1) % 3];
    for &i in &down {
        ens.kill(i);
    }
    wait_until("the holder is cut off", WAIT, || {
        !holder.state().is_connected()
    });
    let released_at = Instant::now();
    assert!(
        guard.release().is_err(),
        "the delete cannot have been applied without a quorum"
    );
    // The outage outlasts twice the session timeout after the hand-off (the time a
    // cleanup used to be kept for).
    thread::sleep((2 * SESSION + Duration::from_secs(2)).saturating_sub(released_at.elapsed()));
    for &i in &down {
        ens.restart(i).unwrap();
    }
    holder.wait_connected(WAIT).unwrap();
    assert_eq!(
        holder.client_id().unwrap().session_id,
        session,
        "the session outlived the outage"
    );

    let observer = connect(&hosts);
    observer.sync(&path).unwrap();
    match observer.get_watch(&node) {
        Ok((_, _, deleted)) => {
            let event = deleted
                .wait_timeout(WAIT)
                .unwrap_or_else(|e| panic!("{node} of the live session {session:#x} stays: {e}"));
            assert_eq!(event.event_type, EventType::NodeDeleted);
        }
        Err(Error::NoNode) => {} // deleted already
        Err(e) => panic!("reading {node}: {e}"),
    }
    // The lock is free for the next holder, and for the old holder's process too.
    let other = Lock::new(&observer, &path).unwrap();
    drop(other.acquire(WAIT).expect("the lock is free again"));
    drop(
        lock.acquire(WAIT)
            .expect("the holder's process takes it again"),
    );
    assert!(holder.state().is_connected());
}
