//! Semaphore against a real server: never more than N holders, FIFO hand-over,
//! timeouts withdraw, permit count agreement.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_mt_recipes::locks::semaphore::Semaphore;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn n_permits_then_blocks() {
    let zk = connect();
    let dir = unique_path("basic");
    let sem = Semaphore::new(&zk, &dir, 3).unwrap();
    let leases: Vec<_> = (0..3).map(|_| sem.acquire(WAIT).unwrap()).collect();
    assert!(sem.try_acquire().unwrap().is_none());
    assert_eq!(
        sem.acquire(Duration::from_millis(200)).err(),
        Some(RecipeError::Timeout)
    );
    assert_eq!(sem.requests().unwrap(), 3, "timed-out requests withdrew");
    let mut leases = leases.into_iter();
    leases.next().unwrap().release().unwrap();
    let again = sem.try_acquire().unwrap().expect("a permit is free");
    assert!(again.is_held().unwrap());
    assert!(sem.try_acquire().unwrap().is_none());
    drop(leases);
    drop(again);
    assert_eq!(sem.requests().unwrap(), 0);
}

#[test]
fn permit_count_must_agree() {
    let zk = connect();
    let dir = unique_path("agree");
    // The first acquisition creates the directory with its count.
    drop(Semaphore::new(&zk, &dir, 2).unwrap().acquire(WAIT).unwrap());
    Semaphore::new(&zk, &dir, 2).unwrap();
    assert!(matches!(
        Semaphore::new(&zk, &dir, 3),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(matches!(
        Semaphore::new(&zk, &unique_path("zero"), 0),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// Waiters queue FIFO and each release wakes the next one, even when the holders
/// release in another order than they acquired.
#[test]
fn releases_in_any_order_wake_waiters_in_order() {
    let zk = connect();
    let dir = unique_path("order");
    let sem = Semaphore::new(&zk, &dir, 2).unwrap();
    let a = sem.acquire(WAIT).unwrap();
    let b = sem.acquire(WAIT).unwrap();
    let (granted, granted_rx) = crossbeam_channel::unbounded();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (waiter_dir, granted) = (dir.clone(), granted.clone());
        waiters.push(thread::spawn(move || {
            let zk = connect();
            let sem = Semaphore::new(&zk, &waiter_dir, 2).unwrap();
            let lease = sem.acquire(WAIT).unwrap();
            granted.send(i).unwrap();
            // Hold until told to go (the test drives the releases).
            lease
        }));
        // Queue them in a known order.
        let queued = i + 3;
        loop {
            let (children, watch) = zk.get_children_watch(&dir).unwrap();
            if children.len() >= queued {
                break;
            }
            watch.wait_timeout(WAIT).expect("waiter queued");
        }
    }
    assert!(granted_rx.recv_timeout(Duration::from_millis(300)).is_err());
    drop(b); // the second holder releases first
    assert_eq!(granted_rx.recv_timeout(WAIT).unwrap(), 0);
    assert!(granted_rx.recv_timeout(Duration::from_millis(300)).is_err());
    drop(a);
    assert_eq!(granted_rx.recv_timeout(WAIT).unwrap(), 1);
    let first = waiters.remove(0).join().unwrap();
    drop(first);
    assert_eq!(granted_rx.recv_timeout(WAIT).unwrap(), 2);
    for waiter in waiters {
        drop(waiter.join().unwrap());
    }
}

/// 10 threads in separate sessions, 3 permits: the number of concurrent holders never
/// exceeds 3.
#[test]
fn never_more_than_n_holders() {
    let dir = unique_path("stress");
    let permits = 3;
    let holding = Arc::new(AtomicUsize::new(0));
    let max_holding = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let dir = dir.clone();
            let (holding, max_holding) = (Arc::clone(&holding), Arc::clone(&max_holding));
            thread::spawn(move || {
                let zk = connect();
                let sem = Semaphore::new(&zk, &dir, permits).unwrap();
                for round in 0..6 {
                    let lease = sem.acquire(WAIT).unwrap();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    max_holding.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= permits as usize, "{now} holders");
                    for _ in 0..(1 + round % 3) {
                        zk.exists(&dir).unwrap(); // work while holding
                    }
                    holding.fetch_sub(1, Ordering::SeqCst);
                    drop(lease);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let max = max_holding.load(Ordering::SeqCst);
    println!("max concurrent holders: {max} of {permits}");
    assert!(max <= permits as usize);
    assert_eq!(
        Semaphore::new(connect(), &dir, permits)
            .unwrap()
            .requests()
            .unwrap(),
        0
    );
}

#[test]
fn lease_goes_with_its_session() {
    let dir = unique_path("session");
    let holder_zk = connect();
    let holder = Semaphore::new(&holder_zk, &dir, 1).unwrap();
    let lease = holder.acquire(WAIT).unwrap();
    let other = Semaphore::new(connect(), &dir, 1).unwrap();
    let waiting = thread::spawn(move || other.acquire(WAIT).map(drop));
    holder_zk.close().unwrap();
    waiting
        .join()
        .unwrap()
        .expect("permit passes on when the session closes");
    drop(lease);
}

/// Requests that time out, as the first waiter (children watch) and behind another
/// waiter (predecessor watch), leave no watch registered.
#[test]
fn timed_out_requests_leave_nothing_registered() {
    let dir = unique_path("leak");
    let holder_zk = connect();
    let holder = Semaphore::new(&holder_zk, &dir, 1).unwrap();
    let _lease = holder.acquire(WAIT).unwrap();
    let zk = connect();
    let sem = Semaphore::new(&zk, &dir, 1).unwrap();
    for _ in 0..20 {
        assert_eq!(
            sem.acquire(Duration::from_millis(10)).err(),
            Some(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);
    // Behind a first waiter that stays: this one watches its predecessor.
    let waiter_zk = connect();
    let waiter = Semaphore::new(&waiter_zk, &dir, 1).unwrap();
    let first = thread::spawn(move || waiter.acquire(Duration::from_secs(3)).map(drop));
    common::wait_until("the first waiter queued", || sem.requests().unwrap() == 2);
    for _ in 0..20 {
        assert_eq!(
            sem.acquire(Duration::from_millis(10)).err(),
            Some(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);
    assert_eq!(first.join().unwrap(), Err(RecipeError::Timeout));
}

/// At the end of the counter (limit 3, 2 permits) a request waits within its timeout for
/// the directory to drain (then `Timeout`, leaving nothing behind); after the holders
/// leave, the directory is restarted holding the permit count again.
#[test]
fn counter_end_waits_for_the_holders_then_restarts() {
    let zk = connect();
    let dir = unique_path("counter-end");
    let sem = Semaphore::new(&zk, &dir, 2)
        .unwrap()
        .with_node_options(NodeOptions::default().sequence_limit(3));
    drop(sem.acquire(WAIT).unwrap()); // number 0
    let a = sem.acquire(WAIT).unwrap(); // 1
    let b = sem.acquire(WAIT).unwrap(); // 2
    assert_eq!(
        sem.acquire(Duration::from_millis(200)).err(),
        Some(RecipeError::Timeout)
    );
    assert!(sem.try_acquire().unwrap().is_none());
    assert_eq!(sem.requests().unwrap(), 2, "nothing left");
    let waiter = {
        let sem = sem.clone();
        thread::spawn(move || sem.acquire(WAIT).map(|lease| lease.node().to_string()))
    };
    drop(a);
    assert!(
        zk.exists(&dir).unwrap().is_some(),
        "not empty: not restarted yet"
    );
    drop(b);
    let node = waiter.join().unwrap().unwrap();
    assert!(node.ends_with("0000000000"), "{node}");
    assert_eq!(zk.get(&dir).unwrap().0, b"2", "the permit count was kept");
    assert_no_leftover_contexts(&zk);
}

/// Never more than N holders across many counter restarts (limit 4, 2 permits, four
/// sessions contending).
#[test]
fn never_more_than_n_holders_across_counter_restarts() {
    let dir = unique_path("restarts");
    let permits = 2;
    let holding = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (dir, holding) = (dir.clone(), Arc::clone(&holding));
            thread::spawn(move || {
                let zk = connect();
                let sem = Semaphore::new(&zk, &dir, permits)
                    .unwrap()
                    .with_node_options(NodeOptions::default().sequence_limit(4));
                for _ in 0..8 {
                    let lease = sem.acquire(WAIT).unwrap();
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= permits as usize, "{now} holders");
                    zk.exists(&dir).unwrap();
                    holding.fetch_sub(1, Ordering::SeqCst);
                    drop(lease);
                }
                assert_no_leftover_contexts(&zk);
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

/// With an ACL for authenticated users only, another session cannot delete a lease nor
/// queue a request.
#[test]
fn node_options_acl_protects_the_leases() {
    let dir = unique_path("acl");
    let zk = connect();
    zk.add_auth("digest", b"sem:secret").unwrap();
    let owner_only = NodeOptions::default().acl(vec![zookeeper_mt::Acl::new(
        zookeeper_mt::Perms::ALL,
        "auth",
        "",
    )]);
    let sem = Semaphore::new(&zk, &dir, 1)
        .unwrap()
        .with_node_options(owner_only);
    let lease = sem.acquire(WAIT).unwrap();
    let stranger = connect();
    let node = format!("{dir}/{}", lease.node());
    assert_eq!(
        stranger.delete(&node, None),
        Err(zookeeper_mt::Error::NoAuth)
    );
    // It cannot even read the permit count.
    assert_eq!(
        Semaphore::new(&stranger, &dir, 1).err(),
        Some(RecipeError::ZooKeeper(zookeeper_mt::Error::NoAuth))
    );
    lease.release().unwrap();
}
