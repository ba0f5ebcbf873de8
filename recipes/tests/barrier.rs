//! Barrier and double barrier against a real server.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_recipes::barrier::{Barrier, DoubleBarrier};
use zookeeper_recipes::RecipeError;

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

/// Timed-out waits leave no watch registered: the barrier's wait, the double barrier's
/// enter and its leave (each used to leave one behind per timeout).
#[test]
fn timed_out_waits_leave_nothing_registered() {
    let zk = connect();
    let barrier = Barrier::new(&zk, &unique_path("gate-timeouts"));
    barrier.set().unwrap();
    for _ in 0..30 {
        assert_eq!(
            barrier.wait(Duration::from_millis(10)),
            Err(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);

    let dir = unique_path("double-timeouts");
    let lone = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    for _ in 0..10 {
        assert_eq!(
            lone.enter(Duration::from_millis(20)),
            Err(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);

    // Two enter; one leaves only after the other has timed out leaving several times.
    let other_zk = connect();
    let other = DoubleBarrier::new(&other_zk, &dir, 2).unwrap();
    let entering = thread::spawn(move || {
        other.enter(WAIT).unwrap();
        other
    });
    lone.enter(WAIT).unwrap();
    let other = entering.join().unwrap();
    let seq = |b: &DoubleBarrier| zookeeper_recipes::util::sequence_of(&b.node().unwrap());
    // The lowest leaves last: it waits on the other, which stays in the round meanwhile.
    let (waiter, holder) = if seq(&lone) < seq(&other) {
        (lone, other)
    } else {
        (other, lone)
    };
    for _ in 0..10 {
        assert_eq!(
            waiter.leave(Duration::from_millis(20)),
            Err(RecipeError::Timeout)
        );
    }
    let holder = thread::spawn(move || {
        holder.leave(WAIT).unwrap();
        holder
    });
    waiter.leave(WAIT).unwrap();
    let holder = holder.join().unwrap();
    let (lone, other) = (waiter, holder);
    drop((lone, other));
    assert_no_leftover_contexts(&zk);
    assert_no_leftover_contexts(&other_zk);
}

/// The lowest participant dies while the others wait in `leave`: they return, and the
/// next round still waits for its own participants (the round's `ready` node used to
/// stay, letting every later `enter` pass at once).
#[test]
fn a_dead_lowest_participant_does_not_open_the_next_round() {
    let dir = unique_path("dead-lowest");
    let sessions: Vec<_> = (0..3).map(|_| connect()).collect();
    let barriers: Vec<_> = sessions
        .iter()
        .map(|zk| Arc::new(DoubleBarrier::new(zk, &dir, 3).unwrap()))
        .collect();
    let entering: Vec<_> = barriers
        .iter()
        .map(|b| {
            let b = Arc::clone(b);
            thread::spawn(move || b.enter(WAIT).unwrap())
        })
        .collect();
    for e in entering {
        e.join().unwrap();
    }
    let lowest = (0..3)
        .min_by_key(|i| zookeeper_recipes::util::sequence_of(&barriers[*i].node().unwrap()))
        .unwrap();
    let leaving: Vec<_> = (0..3)
        .filter(|i| *i != lowest)
        .map(|i| {
            let b = Arc::clone(&barriers[i]);
            thread::spawn(move || b.leave(WAIT))
        })
        .collect();
    // The others have deleted their own nodes and wait on the lowest.
    let zk = connect();
    common::wait_until("the others left their nodes", || {
        zk.get_children(&dir)
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("p-"))
            .count()
            == 1
    });
    sessions[lowest].close().unwrap();
    for l in leaving {
        l.join().unwrap().unwrap();
    }
    let next = DoubleBarrier::new(&zk, &dir, 3).unwrap();
    assert_eq!(
        next.enter(Duration::from_millis(500)),
        Err(RecipeError::Timeout),
        "a later round passed without its participants"
    );
}

/// Participants numbered past the directory counter's end take no part: a crafted
/// `p-…-2147483647` does not make up the count (it used to be counted, releasing the
/// round early).
#[test]
fn participants_past_the_counters_end_are_not_counted() {
    let zk = connect();
    let dir = unique_path("counter-end");
    let barrier = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    zookeeper_recipes::util::ensure_path(&zk, &dir).unwrap();
    let peer = connect();
    peer.create(
        &format!("{dir}/p-{}-2147483647", zookeeper_recipes::util::guid()),
        b"",
        zookeeper::CreateMode::Ephemeral,
    )
    .unwrap();
    assert_eq!(
        barrier.enter(Duration::from_millis(500)),
        Err(RecipeError::Timeout),
        "released by a participant past the counter's end"
    );
}
