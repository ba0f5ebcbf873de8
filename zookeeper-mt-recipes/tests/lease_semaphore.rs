//! Lease semaphore against a real server: `acquire(n)` all or nothing, at most `max`
//! leases, and a timed-out wait leaving nothing behind, in both layouts.

mod common;
mod ordered_support;

use common::{assert_no_leftover_contexts, connect, connect_to, unique_path};
use ordered_support::{eventually, op, shared_server_addr, RequestProxy};
use std::time::Duration;
use zookeeper_mt_recipes::locks::lease_semaphore::{LeaseSemaphore, SemaphoreLayout};
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

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
            .optional()
            .unwrap()
            .expect("two free");
        assert_eq!(two.len(), 2);
        assert_eq!(pool.held().unwrap(), 2);
        // Two more do not fit: none is kept.
        assert!(theirs
            .acquire(2, Duration::from_millis(300))
            .optional()
            .unwrap()
            .is_none());
        assert_eq!(
            pool.held().unwrap(),
            2,
            "{layout:?}: a partial acquire kept a lease"
        );
        let one = theirs
            .acquire(1, Duration::from_secs(30))
            .optional()
            .unwrap()
            .expect("the third");
        assert!(theirs
            .acquire(1, Duration::ZERO)
            .optional()
            .unwrap()
            .is_none());
        let mut two = two;
        two.pop().unwrap().release().unwrap();
        let again = theirs
            .acquire(1, Duration::from_secs(30))
            .optional()
            .unwrap()
            .expect("a released lease is free again");
        assert!(again[0].is_held().unwrap());
        // A drop sends its delete without waiting for it: `other`'s deletes apply a
        // moment later as `zk` sees them.
        drop((two, one, again));
        assert!(eventually(Duration::from_secs(10), || pool.held().unwrap() == 0));
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
    drop(pool.acquire(1, Duration::from_secs(30)).optional().unwrap());
    assert_eq!(zk.get(&path).unwrap().0, b"2");
    let other = LeaseSemaphore::new(&zk, &path, 3, SemaphoreLayout::Kazoo).unwrap();
    assert!(matches!(
        other.acquire(1, Duration::from_secs(30)),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// The lease create's reply is lost with the connection (after the guard lock's create
/// had its reply lost too): the lease is found again, never made twice, in both
/// layouts.
#[test]
fn lost_lease_create_is_not_repeated() {
    for layout in [SemaphoreLayout::Curator, SemaphoreLayout::Kazoo] {
        let proxy = RequestProxy::start(&shared_server_addr());
        let zk = connect_to(&proxy.addr);
        let path = unique_path("lost-lease");
        let pool = LeaseSemaphore::new(&zk, &path, 2, layout).unwrap();
        proxy.lose_reply_of(&[op::CREATE, op::CREATE2]);
        let leases = std::thread::scope(|scope| {
            let taking = scope.spawn(|| pool.acquire(1, Duration::from_secs(60)));
            // The guard lock's node first; then the lease's.
            proxy.wait_lost(1);
            proxy.lose_reply_of(&[op::CREATE, op::CREATE2]);
            proxy.wait_lost(2);
            taking.join().unwrap()
        });
        let leases = leases.unwrap();
        let direct = connect();
        let held = pool.held().unwrap();
        eprintln!("{layout:?}: {held} lease(s) after two lost creates");
        assert_eq!(held, 1, "{layout:?}: the lease create was repeated");
        assert!(leases[0].is_held().unwrap());
        drop(leases);
        assert!(eventually(Duration::from_secs(30), || {
            LeaseSemaphore::new(&direct, &path, 2, layout)
                .unwrap()
                .held()
                .unwrap()
                == 0
        }));
    }
}

#[test]
fn dropped_async_acquires_leave_nothing_behind() {
    for layout in [SemaphoreLayout::Curator, SemaphoreLayout::Kazoo] {
        let zk = connect();
        let path = unique_path("lease-async-drop");
        let semaphore = LeaseSemaphore::new(&zk, &path, 1, layout).unwrap();
        let held = semaphore.acquire(1, Duration::from_secs(10)).unwrap();
        let contexts = zk.live_contexts();
        // Dropped after each step: waiting for the guard lock, holding it and waiting
        // for a lease, or with nothing started.
        for polls in 0..6 {
            let mut acquire = Box::pin(semaphore.acquire_async(1, Duration::from_secs(30)));
            for _ in 0..polls {
                let _ = zk_harness::executor::poll_once(&mut acquire);
            }
            drop(acquire);
            assert!(
                eventually(Duration::from_secs(10), || zk.live_contexts() == contexts),
                "{layout:?}: the dropped acquire's watches were not released"
            );
            assert_eq!(
                semaphore.held().unwrap(),
                1,
                "{layout:?}: a lease left behind"
            );
        }
        drop(held);
        // The guard lock is free and no lease is left: a new acquire gets one at once.
        let lease = semaphore.acquire(1, Duration::from_secs(10)).unwrap();
        assert_eq!(semaphore.held().unwrap(), 1);
        drop(lease);
        assert_no_leftover_contexts(&zk);
    }
}
