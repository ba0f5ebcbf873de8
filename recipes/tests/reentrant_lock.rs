//! Reentrant lock against a real server: the owning thread re-acquires without a new
//! node, the last hold releases, other threads and sessions are excluded meanwhile.

mod common;

use common::{connect, unique_path};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper::Timeout;
use zookeeper_recipes::lock::{Lock, LockLayout};
use zookeeper_recipes::reentrant_lock::ReentrantLock;
use zookeeper_recipes::OptionalExtension;

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
    drop(third);
    drop(inner);
    assert_eq!(lock.hold_count(), 1);
    assert!(plain.try_acquire().unwrap().is_none(), "still held");
    drop(outer);
    assert_eq!(lock.hold_count(), 0);
    let theirs = plain
        .try_acquire()
        .unwrap()
        .expect("released by the last hold");
    assert!(lock.try_acquire().unwrap().is_none());
    drop(theirs);
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
