//! Read-write lock against a real server: writers exclusive, readers concurrent, FIFO,
//! timeouts withdraw.

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn readers_share_writers_exclude() {
    let zk = connect();
    let lock = ReadWriteLock::new(&zk, &unique_path("basic")).unwrap();
    let r1 = lock.read(WAIT).unwrap();
    let r2 = lock.read(WAIT).unwrap(); // concurrent readers
    assert!(
        lock.try_write().unwrap().is_none(),
        "no writer while reading"
    );
    assert!(lock.try_read().unwrap().is_some());
    drop(r1);
    assert!(lock.try_write().unwrap().is_none());
    r2.release().unwrap();
    let w = lock.try_write().unwrap().expect("free now");
    assert!(w.is_held().unwrap());
    assert!(
        lock.try_read().unwrap().is_none(),
        "no reader while writing"
    );
    assert!(lock.try_write().unwrap().is_none(), "one writer");
    assert_eq!(
        lock.write(Duration::from_millis(200)).err(),
        Some(RecipeError::Timeout)
    );
    drop(w);
    // Timed-out requests withdrew their nodes: nothing is left.
    assert!(zk.get_children(lock.path()).unwrap().is_empty());
}

/// A reader queued behind a writer does not overtake it (FIFO), and is released when
/// the writer is.
#[test]
fn readers_wait_for_the_preceding_writer() {
    let zk = connect();
    let dir = unique_path("fifo");
    let lock = ReadWriteLock::new(&zk, &dir).unwrap();
    let reading = lock.read(WAIT).unwrap();
    let (order, order_rx) = crossbeam_channel::unbounded();
    let writer = {
        let (dir, order) = (dir.clone(), order.clone());
        thread::spawn(move || {
            let zk = connect();
            let lock = ReadWriteLock::new(&zk, &dir).unwrap();
            let guard = lock.write(WAIT).unwrap();
            order.send("writer").unwrap();
            guard.release().unwrap();
        })
    };
    // Wait until the writer's request is queued before queueing the second reader.
    let watched = zk.get_children_watch(&dir).unwrap();
    if watched.0.len() < 2 {
        watched.1.wait_timeout(WAIT).expect("writer queued");
    }
    let reader = {
        let dir = dir.clone();
        thread::spawn(move || {
            let zk = connect();
            let lock = ReadWriteLock::new(&zk, &dir).unwrap();
            let guard = lock.read(WAIT).unwrap();
            order.send("reader").unwrap();
            drop(guard);
        })
    };
    // Both wait for the first reader.
    assert!(order_rx.recv_timeout(Duration::from_millis(300)).is_err());
    drop(reading);
    assert_eq!(order_rx.recv_timeout(WAIT).unwrap(), "writer");
    assert_eq!(order_rx.recv_timeout(WAIT).unwrap(), "reader");
    writer.join().unwrap();
    reader.join().unwrap();
}

/// 4 writers and 6 readers, each in its own session, hammering one lock: a writer is
/// always alone, readers overlap.
#[test]
fn exclusion_under_contention() {
    let dir = unique_path("stress");
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let dir = dir.clone();
            let (readers_in, writers_in, max_readers) = (
                Arc::clone(&readers_in),
                Arc::clone(&writers_in),
                Arc::clone(&max_readers),
            );
            thread::spawn(move || {
                let zk = connect();
                let lock = ReadWriteLock::new(&zk, &dir).unwrap();
                for round in 0..8 {
                    if i < 4 {
                        let guard = lock.write(WAIT).unwrap();
                        assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader during write");
                        // Some work on the server while holding the lock.
                        zk.exists(&dir).unwrap();
                        assert_eq!(readers_in.load(Ordering::SeqCst), 0, "reader during write");
                        writers_in.fetch_sub(1, Ordering::SeqCst);
                        drop(guard);
                    } else {
                        let guard = lock.read(WAIT).unwrap();
                        let now = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer during read");
                        for _ in 0..(1 + round % 3) {
                            zk.exists(&dir).unwrap();
                        }
                        assert_eq!(writers_in.load(Ordering::SeqCst), 0, "writer during read");
                        readers_in.fetch_sub(1, Ordering::SeqCst);
                        drop(guard);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    println!(
        "max concurrent readers: {}",
        max_readers.load(Ordering::SeqCst)
    );
    assert!(connect().get_children(&dir).unwrap().is_empty());
}

#[test]
fn lock_is_lost_with_the_session() {
    let dir = unique_path("session");
    let zk = connect();
    let lock = ReadWriteLock::new(&zk, &dir).unwrap();
    let guard = lock.write(WAIT).unwrap();
    let other_zk = connect();
    let other = ReadWriteLock::new(&other_zk, &dir).unwrap();
    let waiting = thread::spawn(move || other.write(WAIT).map(drop));
    zk.close().unwrap();
    waiting
        .join()
        .unwrap()
        .expect("the lock passes on when the session closes");
    assert!(guard.is_held().is_err(), "closed session");
    drop(guard); // releasing on a closed session is quiet
}

/// Read and write requests that time out behind a writer leave no watch registered.
#[test]
fn timed_out_requests_leave_nothing_registered() {
    let dir = unique_path("leak");
    let holder_zk = connect();
    let holder = ReadWriteLock::new(&holder_zk, &dir).unwrap();
    let _writing = holder.write(WAIT).unwrap();
    let zk = connect();
    let lock = ReadWriteLock::new(&zk, &dir).unwrap();
    for round in 0..40 {
        let outcome = if round % 2 == 0 {
            lock.read(Duration::from_millis(10)).map(drop)
        } else {
            lock.write(Duration::from_millis(10)).map(drop)
        };
        assert_eq!(outcome, Err(RecipeError::Timeout));
    }
    assert_no_leftover_contexts(&zk);
    assert_eq!(
        zk.get_children(&dir).unwrap().len(),
        1,
        "requests withdrawn"
    );
}

/// At the end of the counter (limit 2) requests wait for the directory to drain within
/// their timeout (then `Timeout`, leaving nothing behind); after the holders leave, the
/// directory restarts and the new guard's fencing token is greater.
#[test]
fn counter_end_waits_for_the_holders_then_restarts() {
    let zk = connect();
    let dir = unique_path("counter-end");
    let lock = ReadWriteLock::new(&zk, &dir)
        .unwrap()
        .with_node_options(NodeOptions::default().sequence_limit(2));
    let first = lock.read(WAIT).unwrap();
    let second = lock.read(WAIT).unwrap();
    assert_eq!(
        lock.read(Duration::from_millis(200)).err(),
        Some(RecipeError::Timeout)
    );
    assert!(lock.try_write().unwrap().is_none());
    assert_eq!(zk.get_children(&dir).unwrap().len(), 2, "nothing left");
    let token = second.fencing_token().max(first.fencing_token());
    let writer = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.write(WAIT).unwrap();
            (guard.node().to_string(), guard.fencing_token())
        })
    };
    drop(first);
    drop(second);
    let (node, writer_token) = writer.join().unwrap();
    assert!(node.ends_with("0000000000"), "{node}");
    assert!(writer_token > token);
    assert_no_leftover_contexts(&zk);
}

/// Writers' fencing tokens grow, also across a restart of the directory.
#[test]
fn fencing_tokens_grow_across_restarts() {
    let zk = connect();
    let dir = unique_path("fencing");
    let lock = ReadWriteLock::new(&zk, &dir)
        .unwrap()
        .with_node_options(NodeOptions::default().sequence_limit(2));
    let mut last = 0;
    for _ in 0..5 {
        let guard = lock.write(WAIT).unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        let read = {
            drop(guard);
            lock.read(WAIT).unwrap()
        };
        assert!(read.fencing_token() > last);
        last = read.fencing_token();
    }
}

/// With an ACL for authenticated users only, another session cannot delete a holder's
/// node nor queue a request.
#[test]
fn node_options_acl_protects_the_lock() {
    let dir = unique_path("acl");
    let zk = connect();
    zk.add_auth("digest", b"rw:secret").unwrap();
    let owner_only = NodeOptions::default().acl(vec![zookeeper_mt::Acl::new(
        zookeeper_mt::Perms::ALL,
        "auth",
        "",
    )]);
    let lock = ReadWriteLock::new(&zk, &dir)
        .unwrap()
        .with_node_options(owner_only);
    let guard = lock.write(WAIT).unwrap();
    let stranger = connect();
    let node = format!("{dir}/{}", guard.node());
    assert_eq!(
        stranger.delete(&node, None),
        Err(zookeeper_mt::Error::NoAuth)
    );
    let rogue = ReadWriteLock::new(&stranger, &dir).unwrap();
    assert_eq!(
        rogue.try_read().err(),
        Some(RecipeError::ZooKeeper(zookeeper_mt::Error::NoAuth))
    );
    guard.release().unwrap();
}
