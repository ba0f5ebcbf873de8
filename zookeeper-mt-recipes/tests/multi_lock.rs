//! Multi-lock against a real server: all or nothing, released on timeout, and no
//! deadlock between multi-locks naming the same paths in opposite orders.

mod common;

use common::{connect, unique_path};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::locks::MultiLock;
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

#[test]
fn all_or_nothing() {
    let zk = connect();
    let other = connect();
    let base = unique_path("all");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let blocker = Lock::new(&other, &b)
        .unwrap()
        .acquire(Timeout::Never)
        .unwrap();
    let multi = MultiLock::new(&zk, &[&b, &a, &b]).unwrap();
    assert_eq!(multi.paths(), vec![a.as_str(), b.as_str()]);
    assert!(multi
        .acquire(Duration::from_millis(300))
        .optional()
        .unwrap()
        .is_none());
    assert!(multi.try_acquire().unwrap().is_none());
    // `a` was taken on the way and given back: free for anyone.
    assert!(zk.get_children(&a).unwrap().is_empty());
    let theirs = Lock::new(&other, &a).unwrap().try_acquire().unwrap();
    assert!(theirs.is_some(), "a is free again");
    drop((theirs, blocker));
    let both = multi.try_acquire().unwrap().expect("both free");
    assert_eq!(both.guards().len(), 2);
    assert!(!both.is_lost());
    assert!(Lock::new(&other, &a)
        .unwrap()
        .try_acquire()
        .unwrap()
        .is_none());
    assert!(Lock::new(&other, &b)
        .unwrap()
        .try_acquire()
        .unwrap()
        .is_none());
    both.release().unwrap();
    assert!(zk.get_children(&a).unwrap().is_empty() && zk.get_children(&b).unwrap().is_empty());
    assert!(matches!(
        MultiLock::new(&zk, &[]),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// Two threads lock {a, b} and {b, a} over and over: with the global order neither
/// waits for the other in a cycle, and their sections never overlap.
#[test]
fn opposite_orders_do_not_deadlock() {
    let base = unique_path("order");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let inside = AtomicUsize::new(0);
    let overlaps = AtomicUsize::new(0);
    thread::scope(|scope| {
        for paths in [[a.as_str(), b.as_str()], [b.as_str(), a.as_str()]] {
            let (inside, overlaps) = (&inside, &overlaps);
            scope.spawn(move || {
                let zk = connect();
                let multi = MultiLock::new(&zk, &paths).unwrap();
                for _ in 0..20 {
                    let guard = multi
                        .acquire(Duration::from_secs(120))
                        .optional()
                        .unwrap()
                        .expect("no deadlock");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().unwrap();
                }
            });
        }
    });
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}
