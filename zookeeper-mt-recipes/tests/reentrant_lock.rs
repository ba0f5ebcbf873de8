//! Reentrant lock against a real server: the owning thread re-acquires without a new
//! node, the last hold releases, other threads and sessions are excluded meanwhile.

mod common;

use common::{connect, unique_path};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::locks::ReentrantLock;
use zookeeper_mt_recipes::locks::{Lock, LockLayout};
use zookeeper_mt_recipes::OptionalExtension;

#[test]
fn owner_reenters_and_last_hold_releases() {
    let zk = connect();
    let other = connect();
    let path = unique_path("reenter");
    let lock = ReentrantLock::new(&zk, &path).unwrap();
    let plain = Lock::new(&other, &path).unwrap();
    let outer = lock.acquire(Timeout::Never).unwrap();
    let inner = lock.try_acquire().unwrap().expect("the owner re-enters");
    let third = lock
        .acquire(Duration::ZERO)
        .optional()
        .unwrap()
        .expect("the owner re-enters");
    assert_eq!(outer.hold_count(), 3);
    assert_eq!(lock.hold_count(), 3);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    // One node however often it is held.
    assert_eq!(zk.get_children(&path).unwrap().len(), 1);
    third.release().unwrap();
    drop(inner);
    assert_eq!(lock.hold_count(), 1);
    assert!(plain.try_acquire().unwrap().is_none(), "still held");
    // `release` waits for the delete (a drop only sends it), so the other session
    // finds the lock free at once.
    outer.release().unwrap();
    assert_eq!(lock.hold_count(), 0);
    let theirs = plain
        .try_acquire()
        .unwrap()
        .expect("released by the last hold");
    assert!(lock.try_acquire().unwrap().is_none());
    theirs.release().unwrap();
    assert!(zk.get_children(&path).unwrap().is_empty());
}

#[test]
fn other_threads_of_the_same_value_are_excluded() {
    let zk = connect();
    let path = unique_path("threads");
    let lock = Arc::new(
        ReentrantLock::new(&zk, &path)
            .unwrap()
            .with_layout(LockLayout::Curator),
    );
    let held = lock.acquire(Timeout::Never).unwrap();
    let (to_main, from_thread) = std::sync::mpsc::channel();
    let (to_thread, from_main) = std::sync::mpsc::channel::<()>();
    let worker = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            assert_eq!(lock.hold_count(), 0, "holds belong to their thread");
            let refused = lock.try_acquire().unwrap().is_none();
            to_main.send(refused).unwrap();
            from_main.recv().unwrap();
            let guard = lock.acquire(Timeout::Never).unwrap();
            let count = guard.hold_count();
            drop(guard);
            count
        })
    };
    assert!(
        from_thread.recv().unwrap(),
        "another thread got a held lock"
    );
    drop(held);
    to_thread.send(()).unwrap();
    assert_eq!(worker.join().unwrap(), 1);
}

#[test]
fn a_thread_admitted_after_anothers_node_vanished_keeps_its_own_hold() {
    // A holds; A's node is deleted behind its back; B, sharing the value, is admitted.
    // A's later release must not touch B's hold: B's node stays and another session is
    // still excluded.
    let zk = connect();
    let admin = connect();
    let path = unique_path("reenter-two-owners");
    let lock = ReentrantLock::new(&zk, &path).unwrap();
    let outsider = Lock::new(&admin, &path).unwrap();
    let (a_holds, a_held) = std::sync::mpsc::channel();
    let (a_release, a_released) = std::sync::mpsc::channel::<()>();
    let (a_done, a_finished) = std::sync::mpsc::channel::<()>();
    let (b_holds, b_held) = std::sync::mpsc::channel();
    let (b_release, b_released) = std::sync::mpsc::channel::<()>();
    thread::scope(|scope| {
        // Owned here: if this body panics, dropping them ends the threads' waits.
        let (a_release, b_release) = (a_release, b_release);
        let lock = &lock;
        scope.spawn(move || {
            let guard = lock.acquire(Timeout::Never).unwrap();
            a_holds.send(guard.node()).unwrap();
            a_released.recv().unwrap();
            drop(guard);
            a_done.send(()).unwrap();
        });
        let a_node = a_held.recv().unwrap();
        scope.spawn(move || {
            let guard = lock.acquire(Timeout::Never).unwrap();
            assert_eq!(guard.hold_count(), 1);
            b_holds.send(guard.node()).unwrap();
            b_released.recv().unwrap();
            assert_eq!(guard.hold_count(), 1, "B's hold was touched by A's release");
            drop(guard);
        });
        common::wait_until("B waiting behind A", || {
            admin.get_children(&path).unwrap().len() == 2
        });
        admin.delete(&a_node, None).unwrap();
        let b_node = b_held
            .recv_timeout(Duration::from_secs(20))
            .expect("B admitted once A's node is gone");
        a_release.send(()).unwrap();
        a_finished.recv().unwrap();
        assert!(
            admin.exists(&b_node).unwrap().is_some(),
            "B's node was deleted"
        );
        assert!(outsider.try_acquire().unwrap().is_none(), "B is inside");
        b_release.send(()).unwrap();
    });
    assert!(
        outsider.try_acquire().unwrap().is_some(),
        "released at the end"
    );
}
