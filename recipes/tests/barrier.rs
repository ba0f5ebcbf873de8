//! Barrier and double barrier against a real server.

mod common;

use common::{connect, unique_path};
use recipes::barrier::{Barrier, DoubleBarrier};
use recipes::RecipeError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn barrier_blocks_until_removed() {
    let zk = connect();
    let path = unique_path("gate");
    let barrier = Barrier::new(&zk, &path);
    // An absent barrier does not block.
    barrier.wait(Duration::from_millis(1)).unwrap();
    barrier.set().unwrap();
    barrier.set().unwrap(); // idempotent
    assert!(barrier.is_set().unwrap());
    assert_eq!(
        barrier.wait(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    );

    let (released, done) = crossbeam_channel::unbounded();
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let path = path.clone();
            let released = released.clone();
            thread::spawn(move || {
                let zk = connect();
                Barrier::new(&zk, &path).wait(WAIT).unwrap();
                released.send(i).unwrap();
            })
        })
        .collect();
    // Nobody passes while the barrier is up.
    assert!(done.recv_timeout(Duration::from_millis(300)).is_err());
    barrier.remove().unwrap();
    let mut who: Vec<i32> = (0..3).map(|_| done.recv_timeout(WAIT).unwrap()).collect();
    who.sort();
    assert_eq!(who, vec![0, 1, 2]);
    for waiter in waiters {
        waiter.join().unwrap();
    }
    barrier.remove().unwrap(); // removing an absent barrier is fine
    assert!(!barrier.is_set().unwrap());
}

#[test]
fn double_barrier_enter_and_leave_with_n_threads() {
    let dir = unique_path("double");
    let n = 5;
    let entering = Arc::new(AtomicUsize::new(0));
    let leaving = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (dir, entering, leaving) =
                (dir.clone(), Arc::clone(&entering), Arc::clone(&leaving));
            thread::spawn(move || {
                let zk = connect();
                let barrier = DoubleBarrier::new(&zk, &dir, n).unwrap();
                for round in 0..3 {
                    entering.fetch_add(1, Ordering::SeqCst);
                    barrier.enter(WAIT).unwrap();
                    // Everyone of this round has arrived.
                    assert!(entering.load(Ordering::SeqCst) >= n * (round + 1));
                    leaving.fetch_add(1, Ordering::SeqCst);
                    barrier.leave(WAIT).unwrap();
                    // Everyone of this round has started to leave.
                    assert!(leaving.load(Ordering::SeqCst) >= n * (round + 1));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let zk = connect();
    assert!(
        zk.get_children(&dir).unwrap().is_empty(),
        "nothing left behind"
    );
}

#[test]
fn double_barrier_enter_times_out_and_withdraws() {
    let zk = connect();
    let dir = unique_path("short");
    let barrier = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    assert_eq!(
        barrier.enter(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    );
    assert!(zk.get_children(&dir).unwrap().is_empty(), "withdrawn");
    assert!(matches!(
        barrier.leave(WAIT),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(matches!(
        DoubleBarrier::new(&zk, &dir, 0),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// A participant whose session dies counts as having left.
#[test]
fn double_barrier_leave_survives_a_dead_participant() {
    let dir = unique_path("dead");
    let alive_zk = connect();
    let dead_zk = connect();
    let alive = DoubleBarrier::new(&alive_zk, &dir, 2).unwrap();
    let dead = DoubleBarrier::new(&dead_zk, &dir, 2).unwrap();
    let entering = thread::spawn(move || {
        dead.enter(WAIT).unwrap();
        dead
    });
    alive.enter(WAIT).unwrap();
    let dead = entering.join().unwrap();
    dead_zk.close().unwrap();
    alive.leave(WAIT).unwrap();
    drop(dead);
}
