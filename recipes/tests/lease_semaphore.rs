//! Lease semaphore against a real server: `acquire(n)` all or nothing, at most `max`
//! leases, and a timed-out wait leaving nothing behind, in both layouts.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path};
use recipes::lease_semaphore::{LeaseSemaphore, SemaphoreLayout};
use recipes::RecipeError;
use std::time::Duration;

#[test]
fn acquire_n_is_all_or_nothing() {
    for layout in [SemaphoreLayout::Curator, SemaphoreLayout::Kazoo] {
        let zk = connect();
        let other = connect();
        let path = unique_path("leases");
        let pool = LeaseSemaphore::new(&zk, &path, 3, layout).unwrap();
        let theirs = LeaseSemaphore::new(&other, &path, 3, layout).unwrap();
        let two = pool
            .acquire(2, Duration::from_secs(30))
            .unwrap()
            .expect("two free");
        assert_eq!(two.len(), 2);
        assert_eq!(pool.held().unwrap(), 2);
        // Two more do not fit: none is kept.
        assert!(theirs
            .acquire(2, Duration::from_millis(300))
            .unwrap()
            .is_none());
        assert_eq!(
            pool.held().unwrap(),
            2,
            "{layout:?}: a partial acquire kept a lease"
        );
        let one = theirs
            .acquire(1, Duration::from_secs(30))
            .unwrap()
            .expect("the third");
        assert!(theirs.acquire(1, Duration::ZERO).unwrap().is_none());
        let mut two = two;
        two.pop().unwrap().release().unwrap();
        let again = theirs
            .acquire(1, Duration::from_secs(30))
            .unwrap()
            .expect("a released lease is free again");
        assert!(again[0].is_held().unwrap());
        drop((two, one, again));
        assert_eq!(pool.held().unwrap(), 0);
        assert!(matches!(
            pool.acquire(4, Duration::ZERO),
            Err(RecipeError::InvalidArgument(_))
        ));
        drop((pool, theirs));
        assert_no_leftover_contexts(&other);
    }
}

#[test]
fn kazoo_layout_checks_the_maximum() {
    let zk = connect();
    let path = unique_path("max");
    let pool = LeaseSemaphore::new(&zk, &path, 2, SemaphoreLayout::Kazoo).unwrap();
    drop(pool.acquire(1, Duration::from_secs(30)).unwrap());
    assert_eq!(zk.get(&path).unwrap().0, b"2");
    let other = LeaseSemaphore::new(&zk, &path, 3, SemaphoreLayout::Kazoo).unwrap();
    assert!(matches!(
        other.acquire(1, Duration::from_secs(30)),
        Err(RecipeError::InvalidArgument(_))
    ));
}
