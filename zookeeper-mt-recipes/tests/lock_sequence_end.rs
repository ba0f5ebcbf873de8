//! Lock at the end of its directory's sequence counter (a low
//! [`NodeOptions::sequence_limit`] brings the end within a few hundred operations):
//! nodes past the end take no part, an acquisition restarts the directory once its
//! holders are gone, mutual exclusion and fencing tokens hold across restarts.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path, wait_until};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::NodeOptions;
use zookeeper_mt_recipes::OptionalExtension;

/// Nodes named past the counter's end by someone else (persistent, so they stay) take no
/// part: they are never the holder nor a predecessor. Once the counter itself reaches the
/// limit, a waiter-less `try_acquire` / `acquire_timeout` give up without leaving a node
/// (the directory cannot be restarted while those nodes are in it), and once they are
/// gone the next acquisition restarts the directory.
#[test]
fn nodes_past_the_counters_end_take_no_part() {
    let zk = connect();
    let path = unique_path("crafted");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &path).unwrap();
    let crafted = [
        "x-lock-2147483647",
        "y-lock--2147483648",
        "z-lock-2147483648",
        "v-lock--000000005",
    ];
    for name in crafted {
        zk.create(
            &format!("{path}/{name}"),
            b"crafted",
            zookeeper_mt::CreateMode::Persistent,
        )
        .unwrap();
    }
    // The crafted creates moved the counter to 4: with a limit of 6, two lock nodes fit.
    let options = NodeOptions::default().sequence_limit(6);
    let lock = Lock::new(&zk, &path)
        .unwrap()
        .with_label("real")
        .with_node_options(options.clone());
    let other = Lock::new(connect(), &path)
        .unwrap()
        .with_node_options(options);
    assert_eq!(lock.holder().unwrap(), None, "crafted nodes hold nothing");
    let guard = lock
        .try_acquire()
        .unwrap()
        .expect("crafted nodes are no holders");
    assert_eq!(guard.sequence(), 4);
    assert_eq!(other.holder().unwrap().as_deref(), Some("real"));
    // A waiter (number 5) waits for the real holder only.
    let waiter = thread::spawn(move || {
        let guard = other.acquire(Timeout::Never).unwrap();
        let sequence = guard.sequence();
        guard.release().unwrap();
        (other, sequence)
    });
    wait_until("waiter queued", || {
        zk.get_children(&path).unwrap().len() == crafted.len() + 2
    });
    guard.release().unwrap();
    let (other, sequence) = waiter.join().unwrap();
    assert_eq!(sequence, 5);
    // Now the counter is at its end (6): attempts give up, leaving nothing behind.
    assert!(other.try_acquire().unwrap().is_none());
    assert!(other
        .acquire(Duration::from_millis(300))
        .optional()
        .unwrap()
        .is_none());
    assert_eq!(zk.get_children(&path).unwrap().len(), crafted.len());
    // Gone the crafted nodes, the next acquisition restarts the directory.
    for name in crafted {
        zk.delete(&format!("{path}/{name}"), None).unwrap();
    }
    let guard = other.try_acquire().unwrap().expect("restarted");
    assert_eq!(guard.sequence(), 0);
    guard.release().unwrap();
    assert_no_leftover_contexts(&zk);
}

/// An acquisition whose node comes back past the limit while the lock is held removes
/// it, waits for the directory to drain (holding no node meanwhile), then restarts the
/// directory and takes the lock with a new number and a greater fencing token.
#[test]
fn at_the_counters_end_an_acquisition_waits_for_the_holders_then_restarts() {
    let path = unique_path("drain");
    let options = NodeOptions::default().sequence_limit(2);
    let zk = connect();
    let lock = Lock::new(&zk, &path)
        .unwrap()
        .with_node_options(options.clone());
    lock.acquire(Timeout::Never).unwrap().release().unwrap(); // number 0
    let holder = lock.acquire(Timeout::Never).unwrap(); // number 1, the last below the limit
    let before = zk.exists(&path).unwrap().unwrap().czxid;
    let other = Lock::new(connect(), &path)
        .unwrap()
        .with_node_options(options);
    let waiter = thread::spawn(move || {
        let guard = other.acquire(Timeout::Never).unwrap();
        let seen = (guard.sequence(), guard.fencing_token());
        guard.release().unwrap();
        seen
    });
    // The waiter's node (number 2) is removed again: only the holder's stays.
    let watch = zk.get_children_watch(&path).unwrap().1;
    watch.wait_timeout(Duration::from_secs(10)).unwrap();
    wait_until("the out-of-range node removed", || {
        zk.get_children(&path).unwrap() == vec![holder.node().rsplit('/').next().unwrap()]
    });
    let holder_token = holder.fencing_token();
    holder.release().unwrap();
    let (sequence, token) = waiter.join().unwrap();
    assert_eq!(sequence, 0, "the directory was restarted");
    assert!(
        token > holder_token,
        "fencing token {token} <= {holder_token}"
    );
    assert!(zk.exists(&path).unwrap().unwrap().czxid > before);
}

/// Contending acquisitions in four sessions across many counter restarts (limit 4):
/// never two holders, every number below the limit, fencing tokens growing from holder
/// to holder, nothing left behind.
#[test]
fn mutual_exclusion_across_counter_restarts() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 10;
    let path = unique_path("restarts");
    let inside = Arc::new(AtomicUsize::new(0));
    let last_token = Arc::new(AtomicI64::new(0));
    let restarts = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (path, inside, last_token, restarts) = (
                path.clone(),
                Arc::clone(&inside),
                Arc::clone(&last_token),
                Arc::clone(&restarts),
            );
            thread::spawn(move || {
                let zk = connect();
                let lock = Lock::new(&zk, &path)
                    .unwrap()
                    .with_node_options(NodeOptions::default().sequence_limit(4));
                for _ in 0..ROUNDS {
                    let guard = lock.acquire(Timeout::Never).unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    assert!((0..4).contains(&guard.sequence()), "{}", guard.sequence());
                    let token = guard.fencing_token();
                    let previous = last_token.swap(token, Ordering::SeqCst);
                    assert!(token > previous, "token {token} after {previous}");
                    let dir = zk.exists(&path).unwrap().unwrap();
                    restarts.lock().unwrap().insert(dir.czxid);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().unwrap();
                }
                assert_no_leftover_contexts(&zk);
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let incarnations = restarts.lock().unwrap().len();
    eprintln!(
        "{} acquisitions over {incarnations} directory incarnations",
        THREADS * ROUNDS
    );
    assert!(incarnations >= THREADS * ROUNDS / 4, "{incarnations}");
    assert!(connect().get_children(&path).unwrap().is_empty());
}

/// The fencing token grows with every holder although the sequence number starts again
/// (counter restarts at a limit of 3, and a directory deleted while idle).
#[test]
fn fencing_token_grows_where_the_sequence_restarts() {
    let zk = connect();
    let path = unique_path("fencing");
    let lock = Lock::new(&zk, &path)
        .unwrap()
        .with_node_options(NodeOptions::default().sequence_limit(3));
    let mut sequences = Vec::new();
    let mut last = 0;
    for round in 0..8 {
        if round == 5 {
            zk.delete(&path, None).unwrap(); // idle: e.g. a container the server removed
        }
        let guard = lock.acquire(Timeout::Never).unwrap();
        sequences.push(guard.sequence());
        assert!(guard.fencing_token() > last, "round {round}");
        last = guard.fencing_token();
        guard.release().unwrap();
    }
    assert_eq!(sequences, vec![0, 1, 2, 0, 1, 0, 1, 2]);
}
