//! Many threads on one handle (results must stay correct), close racing with calls from
//! other threads, and many handles at once.

mod common;

use common::{block_on, connect, create, unique, WAIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use zookeeper_mt::{Acl, CreateMode, Error, EventType, Op, OpResult, ZooKeeper};

const THREADS: usize = 8;

/// One worker's mixed workload in its own subtree, checking every result.
fn workload(zk: &ZooKeeper, dir: &str, thread: usize, rounds: usize) {
    let acl = Acl::OPEN_UNSAFE;
    for round in 0..rounds {
        let path = format!("{dir}/n{round}");
        let data = format!("t{thread}-r{round}");
        // create: sync or async
        let created = if round % 2 == 0 {
            zk.create(
                &path,
                data.as_bytes(),
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
            )
        } else {
            block_on(zk.create_async(
                &path,
                data.as_bytes(),
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
            ))
        }
        .unwrap();
        assert_eq!(created, path);

        let (got, stat) = zk.get(&path).unwrap();
        assert_eq!(got, data.as_bytes());
        assert_eq!(stat.version, 0);

        // A watch armed by this thread, fired by this thread's own write.
        let (_, _, watch) = zk.get_watch(&path).unwrap();
        let stat = zk.set(&path, b"v1", Some(0)).unwrap();
        assert_eq!(stat.version, 1);
        let event = watch.wait_timeout(WAIT).expect("watch fired");
        assert_eq!(event.event_type, EventType::NodeDataChanged);
        assert_eq!(event.path, path);

        assert_eq!(
            zk.set(&path, b"stale", Some(0)).unwrap_err(),
            Error::BadVersion
        );
        let exists = zk.exists_async(&path).wait().unwrap().unwrap();
        assert_eq!((exists.version, exists.data_length), (1, 2));

        let results = zk
            .multi(&[
                Op::check(&path, 1),
                Op::create(&format!("{path}/child"), b"", CreateMode::Ephemeral),
                Op::set_data(&path, b"v2", 1),
            ])
            .unwrap();
        assert_eq!(results[1], OpResult::Created(format!("{path}/child")));
        assert!(matches!(results[2], OpResult::DataSet(s) if s.version == 2));
        assert_eq!(zk.get_children(&path).unwrap(), ["child"]);
        assert_eq!(zk.delete(&path, None).unwrap_err(), Error::NotEmpty);

        block_on(zk.delete_async(&format!("{path}/child"), Some(0))).unwrap();
        zk.delete(&path, Some(2)).unwrap();
        assert_eq!(zk.exists(&path).unwrap(), None);
    }
    let (children, stat) = zk.get_children2(dir).unwrap();
    assert!(children.is_empty());
    assert_eq!(stat.cversion as usize, 2 * rounds);
}

#[test]
fn eight_threads_hammer_one_handle() {
    let zk = connect();
    let base = unique("hammer");
    create(&zk, &base, b"");
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let zk = zk.clone();
            let dir = format!("{base}/t{t}");
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                create(&zk, &dir, b"");
                barrier.wait();
                workload(&zk, &dir, t, 60);
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(zk.get_children(&base).unwrap().len(), THREADS);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn clones_share_one_session_across_threads() {
    let zk = connect();
    let id = zk.client_id().unwrap();
    let path = unique("clones");
    zk.create(&path, b"", CreateMode::Ephemeral).unwrap();
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let zk = zk.clone();
            let path = path.clone();
            thread::spawn(move || {
                (
                    zk.client_id().unwrap(),
                    zk.exists(&path).unwrap().unwrap().ephemeral_owner,
                )
            })
        })
        .collect();
    for handle in handles {
        let (thread_id, owner) = handle.join().unwrap();
        assert_eq!(thread_id, id);
        assert_eq!(owner, id.session_id);
    }
}

#[test]
fn close_races_with_calls_from_eight_threads() {
    let zk = connect();
    let base = unique("close-race");
    create(&zk, &base, b"");
    let started = Arc::new(Barrier::new(THREADS + 1));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let zk = zk.clone();
            let base = base.clone();
            let started = Arc::clone(&started);
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                started.wait();
                let mut ok = 0usize;
                let mut watches = Vec::new();
                for i in 0.. {
                    // Every call below can only fail because of the close.
                    let result = match i % 6 {
                        0 => zk.get(&base).map(drop),
                        1 => zk.set(&base, b"x", None).map(drop),
                        2 => block_on(zk.exists_async(&base)).map(drop),
                        3 => zk.exists_watch(&format!("{base}/w{t}-{i}")).map(|(_, w)| {
                            watches.push(w);
                        }),
                        4 => zk.multi(&[Op::check(&base, -1)]).map(drop),
                        _ => zk
                            .create(&format!("{base}/e{t}-{i}"), b"", CreateMode::Ephemeral)
                            .map(drop),
                    };
                    match result {
                        Ok(()) => ok += 1,
                        Err(Error::Closed) => break,
                        Err(other) => panic!("call racing close: {other:?}"),
                    }
                    assert!(!stop.load(Ordering::SeqCst), "never saw Closed");
                }
                // Their watches end with the handle.
                for watch in watches {
                    assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
                }
                ok
            })
        })
        .collect();
    started.wait();
    common::poll_until("some traffic", WAIT, || {
        zk.exists(&base).unwrap().unwrap().version >= 50
    });
    zk.close().unwrap();
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, Ordering::SeqCst);
    assert!(total >= 50, "{total}");
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn many_handles_at_once() {
    let base = unique("many-handles");
    create(&connect(), &base, b"");
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let base = base.clone();
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let zk = connect();
                let path = format!("{base}/h{t}");
                zk.create(&path, b"", CreateMode::Ephemeral).unwrap();
                barrier.wait();
                // Every handle sees every other's ephemeral once all are created.
                assert_eq!(zk.get_children(&base).unwrap().len(), THREADS);
                let (_, watch) = zk.exists_watch(&format!("{base}/gone-{t}")).unwrap();
                barrier.wait();
                zk.close().unwrap();
                assert_eq!(watch.wait(), Err(Error::Closed));
                assert_eq!(zk.live_contexts(), 0);
                zk.client_id()
            })
        })
        .collect();
    for worker in workers {
        assert_eq!(worker.join().unwrap().unwrap_err(), Error::Closed);
    }
    assert!(connect().get_children(&base).unwrap().is_empty());
}
