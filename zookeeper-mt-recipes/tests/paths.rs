//! `nodes::ensure_path` and `nodes::delete_recursive`, blocking and async, on plain and
//! managed handles: parents made, whole subtrees removed (also while another session
//! keeps adding to them), bad input refused.

mod common;

use common::{connect, connect_to, opcode, unique_path, FaultProxy};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zk_harness::executor::block_on_timeout;
use zookeeper_mt::{CreateMode, ManagedZooKeeper, Timeout};
use zookeeper_mt_recipes::nodes::{
    delete_recursive, delete_recursive_async, ensure_path, ensure_path_async,
};
use zookeeper_mt_recipes::RecipeError;

const BOUND: Duration = Duration::from_secs(60);

#[test]
fn ensure_path_makes_parents_on_plain_and_managed_handles() {
    let zk = connect();
    let base = unique_path("ensure");
    ensure_path(&zk, &format!("{base}/a/b/c")).unwrap();
    assert!(zk.exists(&format!("{base}/a/b/c")).unwrap().is_some());
    // Again: fine.
    ensure_path(&zk, &format!("{base}/a/b/c")).unwrap();

    let managed = ManagedZooKeeper::connect(
        &zk_harness::shared_test_connect_string(),
        common::SESSION_TIMEOUT,
    )
    .unwrap();
    let deeper = format!("{base}/m/n");
    block_on_timeout(ensure_path_async(&managed, &deeper), BOUND)
        .expect("ensure_path_async within the bound")
        .unwrap();
    assert!(zk.exists(&deeper).unwrap().is_some());
    assert!(matches!(
        ensure_path(&zk, "no-slash"),
        Err(RecipeError::ZooKeeper(
            zookeeper_mt::Error::InvalidPath { .. }
        ))
    ));
    delete_recursive(&zk, &base, Timeout::Never).unwrap();
    managed.close();
}

#[test]
fn delete_recursive_removes_a_whole_subtree() {
    let zk = connect();
    let base = unique_path("tree");
    // 1 + 4 + 16 + 64 nodes, ephemerals among the leaves.
    let mut made = 0;
    for a in 0..4 {
        for b in 0..4 {
            let dir = format!("{base}/a{a}/b{b}");
            ensure_path(&zk, &dir).unwrap();
            for c in 0..4 {
                let mode = if c % 2 == 0 {
                    CreateMode::Persistent
                } else {
                    CreateMode::Ephemeral
                };
                zk.create(&format!("{dir}/c{c}"), b"x", mode).unwrap();
                made += 1;
            }
        }
    }
    assert_eq!(made, 64);
    delete_recursive(&zk, &base, Duration::from_secs(30)).unwrap();
    assert!(zk.exists(&base).unwrap().is_none());
    // Absent: fine, blocking and async.
    delete_recursive(&zk, &base, Duration::from_secs(5)).unwrap();
    block_on_timeout(delete_recursive_async(&zk, &base, Timeout::Never), BOUND)
        .expect("within the bound")
        .unwrap();
    // The root is refused, and so is a bad path.
    assert!(matches!(
        delete_recursive(&zk, "/", Timeout::Never),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(delete_recursive(&zk, "bad//path", Timeout::Never).is_err());
}

#[test]
fn delete_recursive_wins_against_a_session_adding_children() {
    let zk = connect();
    let base = unique_path("busy");
    ensure_path(&zk, &format!("{base}/busy")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let added = Arc::new(AtomicUsize::new(0));
    let adder = {
        let (stop, added) = (Arc::clone(&stop), Arc::clone(&added));
        let other = connect();
        let dir = format!("{base}/busy");
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Fails once the directory is gone: that is the point.
                if other
                    .create(&format!("{dir}/n{i}"), b"", CreateMode::Persistent)
                    .is_ok()
                {
                    added.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        })
    };
    common::wait_until("the other session adding children", || {
        added.load(Ordering::Relaxed) >= 20
    });
    let result = delete_recursive(&zk, &base, Duration::from_secs(30));
    stop.store(true, Ordering::Relaxed);
    adder.join().unwrap();
    result.unwrap();
    println!(
        "deleted {base} while another session added {} children",
        added.load(Ordering::Relaxed)
    );
    assert!(zk.exists(&base).unwrap().is_none());
}

#[test]
fn delete_recursive_keeps_its_deadline_against_adders() {
    // Two sessions adding children as fast as they can: the delete may win or not, but
    // it returns by its deadline (plus the round under way), and a `Timeout` leaves the
    // subtree to delete later.
    let zk = connect();
    let base = unique_path("contended");
    let dir = format!("{base}/busy");
    ensure_path(&zk, &dir).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let added = Arc::new(AtomicUsize::new(0));
    let adders: Vec<_> = (0..2)
        .map(|a| {
            let (stop, added, dir) = (Arc::clone(&stop), Arc::clone(&added), dir.clone());
            let other = connect();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let child = format!("{dir}/a{a}-{i}");
                    if other.create(&child, b"", CreateMode::Persistent).is_ok() {
                        added.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    common::wait_until("the adders adding children", || {
        added.load(Ordering::Relaxed) >= 20
    });
    let timeout = Duration::from_millis(20);
    let started = std::time::Instant::now();
    let result = delete_recursive(&zk, &base, timeout);
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for adder in adders {
        adder.join().unwrap();
    }
    println!("delete_recursive under two adders: {result:?} after {took:?}");
    // A round is a few round trips; 10 s is far beyond one even under memcheck, and far
    // below what a deadline that is never checked costs (the walk goes on until the
    // adders happen to lose the race).
    assert!(took < Duration::from_secs(10), "returned after {took:?}");
    match result {
        Ok(()) => assert!(zk.exists(&base).unwrap().is_none()),
        Err(RecipeError::Timeout) => {
            delete_recursive(&zk, &base, Duration::from_secs(30)).unwrap();
            assert!(zk.exists(&base).unwrap().is_none());
        }
        Err(other) => panic!("unexpected {other:?}"),
    }
}

#[test]
fn delete_recursive_rides_out_a_cut_after_a_delete_or_a_listing() {
    // The connection dropped right after a request was forwarded (its reply lost, the
    // requests behind it lost too): the call settles what it sent and goes on.
    for (what, op) in [
        ("delete", opcode::DELETE),
        ("listing", opcode::GET_CHILDREN2),
    ] {
        let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
        let zk = connect_to(&proxy.addr);
        let base = unique_path("cut");
        for a in 0..3 {
            for b in 0..5 {
                ensure_path(&zk, &format!("{base}/a{a}/b{b}")).unwrap();
            }
        }
        proxy.cut_after(op);
        delete_recursive(&zk, &base, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("cut after a {what}: {e}"));
        assert!(proxy.has_cut(), "no {what} was cut");
        assert!(zk.exists(&base).unwrap().is_none(), "cut after a {what}");
    }
}
