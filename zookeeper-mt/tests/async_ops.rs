//! Every operation in its `_async` form, driven both by a std-only `block_on` (the future
//! is woken from the C completion thread) and by `ZkFuture::wait`.

mod common;

use common::{block_on, block_on_timeout, connect, create, digest_id, poll_once, unique};
use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;
use zookeeper_mt::{
    Acl, CreateMode, Error, EventType, Op, OpResult, Perms, SessionState, WatchRemoval,
    WatcherType, ZooKeeper,
};

#[test]
fn create_modes_async() {
    let zk = connect();
    let parent = unique("async-create");
    assert_eq!(
        block_on(zk.create_async(&parent, b"p", CreateMode::Persistent)).unwrap(),
        parent
    );
    let eph = format!("{parent}/eph");
    assert_eq!(
        zk.create_async(&eph, b"", CreateMode::Ephemeral)
            .wait()
            .unwrap(),
        eph
    );
    let session = zk.client_id().unwrap().session_id;
    assert_eq!(
        block_on(zk.exists_async(&eph))
            .unwrap()
            .unwrap()
            .ephemeral_owner,
        session
    );
    let seq1 = block_on(zk.create_async(
        &format!("{parent}/s-"),
        b"",
        CreateMode::PersistentSequential,
    ))
    .unwrap();
    let seq2 = zk
        .create_async(
            &format!("{parent}/s-"),
            b"",
            CreateMode::EphemeralSequential,
        )
        .wait()
        .unwrap();
    assert!(seq1.starts_with(&format!("{parent}/s-")) && seq1.len() == parent.len() + 13);
    assert!(seq2 > seq1, "{seq1} {seq2}");
    let container = format!("{parent}/container");
    assert_eq!(
        block_on(zk.create_async(&container, b"", CreateMode::Container)).unwrap(),
        container
    );
    // The shared test server has extended types enabled.
    let ttl = format!("{parent}/ttl");
    assert_eq!(
        block_on(zk.create_async(
            &ttl,
            b"",
            CreateMode::PersistentWithTtl(Duration::from_secs(3600))
        ))
        .unwrap(),
        ttl
    );

    assert_eq!(
        block_on(zk.create_async(&parent, b"", CreateMode::Persistent)),
        Err(Error::NodeExists)
    );
    assert_eq!(
        zk.create_async(&format!("{eph}/child"), b"", CreateMode::Persistent)
            .wait(),
        Err(Error::NoChildrenForEphemerals)
    );
}

#[test]
fn create2_async() {
    let zk = connect();
    let path = unique("async-create2");
    let (created, stat) =
        block_on(zk.create2_async(&path, b"xyz", CreateMode::Persistent)).unwrap();
    assert_eq!(created, path);
    assert_eq!(stat.data_length, 3);
    assert_eq!(block_on(zk.exists_async(&path)).unwrap(), Some(stat));
    let (child, child_stat) = zk
        .create2_async(&format!("{path}/c-"), b"", CreateMode::PersistentSequential)
        .wait()
        .unwrap();
    assert!(child.starts_with(&format!("{path}/c-")));
    assert!(child_stat.czxid > stat.czxid);
    assert_eq!(
        zk.create2_async(&path, b"", CreateMode::Persistent)
            .wait()
            .unwrap_err(),
        Error::NodeExists
    );
}

#[test]
fn get_set_exists_delete_async() {
    let zk = connect();
    let path = unique("async-gsed");
    assert_eq!(block_on(zk.exists_async(&path)).unwrap(), None);
    assert_eq!(zk.exists_async(&path).wait().unwrap(), None);
    assert_eq!(block_on(zk.get_async(&path)).unwrap_err(), Error::NoNode);
    create(&zk, &path, b"zero");

    let (data, stat) = block_on(zk.get_async(&path)).unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"zero"[..], 0));
    let stat = block_on(zk.set_async(&path, b"one", Some(0))).unwrap();
    assert_eq!(stat.version, 1);
    let stat = zk.set_async(&path, b"two", None).wait().unwrap();
    assert_eq!(stat.version, 2);
    assert_eq!(
        block_on(zk.set_async(&path, b"bad", Some(1))).unwrap_err(),
        Error::BadVersion
    );
    assert_eq!(zk.get_async(&path).wait().unwrap(), (b"two".to_vec(), stat));
    assert_eq!(zk.exists_async(&path).wait().unwrap(), Some(stat));

    assert_eq!(
        block_on(zk.delete_async(&path, Some(1))).unwrap_err(),
        Error::BadVersion
    );
    create(&zk, &format!("{path}/child"), b"");
    assert_eq!(
        zk.delete_async(&path, None).wait().unwrap_err(),
        Error::NotEmpty
    );
    block_on(zk.delete_async(&format!("{path}/child"), None)).unwrap();
    zk.delete_async(&path, Some(2)).wait().unwrap();
    assert_eq!(
        block_on(zk.delete_async(&path, None)).unwrap_err(),
        Error::NoNode
    );
}

#[test]
fn children_async() {
    let zk = connect();
    let path = unique("async-children");
    create(&zk, &path, b"");
    for name in ["x", "y"] {
        create(&zk, &format!("{path}/{name}"), b"");
    }
    let mut children = block_on(zk.get_children_async(&path)).unwrap();
    children.sort();
    assert_eq!(children, ["x", "y"]);
    let (mut children2, stat) = zk.get_children2_async(&path).wait().unwrap();
    children2.sort();
    assert_eq!(children2, children);
    assert_eq!(stat.num_children, 2);
    let (_, stat2) = block_on(zk.get_children2_async(&path)).unwrap();
    assert_eq!(stat2, stat);
    assert_eq!(
        zk.get_children_async(&format!("{path}/none"))
            .wait()
            .unwrap_err(),
        Error::NoNode
    );
    assert_eq!(
        block_on(zk.get_children2_async(&format!("{path}/none"))).unwrap_err(),
        Error::NoNode
    );
}

#[test]
fn watches_async() {
    let zk = connect();
    let path = unique("async-watch");
    let (stat, created) = block_on(zk.exists_watch_async(&path)).unwrap();
    assert_eq!(stat, None);
    create(&zk, &path, b"");
    let event = created.wait_timeout(common::WAIT).unwrap();
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeCreated, path.as_str())
    );

    let (_, _, changed) = zk.get_watch_async(&path).wait().unwrap();
    let (kids, child_watch) = block_on(zk.get_children_watch_async(&path)).unwrap();
    assert!(kids.is_empty());
    zk.set(&path, b"new", None).unwrap();
    create(&zk, &format!("{path}/kid"), b"");
    assert_eq!(
        changed.wait_timeout(common::WAIT).unwrap().event_type,
        EventType::NodeDataChanged
    );
    assert_eq!(
        child_watch.wait_timeout(common::WAIT).unwrap().event_type,
        EventType::NodeChildrenChanged
    );
    // A failing watching read registers nothing.
    assert_eq!(
        block_on(zk.get_watch_async(&format!("{path}/none"))).unwrap_err(),
        Error::NoNode
    );
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn acl_and_auth_async() {
    let zk = connect();
    let path = unique("async-acl");
    create(&zk, &path, b"secret");
    let (acl, stat) = block_on(zk.get_acl_async(&path)).unwrap();
    assert_eq!(acl, Acl::OPEN_UNSAFE);
    assert_eq!(stat.aversion, 0);

    block_on(zk.add_auth_async("digest", b"alice:wonderland")).unwrap();
    let restricted = vec![Acl::new(
        Perms::ALL,
        "digest",
        &digest_id("alice", "wonderland"),
    )];
    block_on(zk.set_acl_async(&path, &restricted, Some(0))).unwrap();
    assert_eq!(
        zk.set_acl_async(&path, &restricted, Some(0)).wait(),
        Err(Error::BadVersion)
    );
    let (acl, stat) = zk.get_acl_async(&path).wait().unwrap();
    assert_eq!(acl, restricted);
    assert_eq!(stat.aversion, 1);
    // We are alice: still allowed.
    assert_eq!(block_on(zk.get_async(&path)).unwrap().0, b"secret");

    let other = connect();
    assert_eq!(block_on(other.get_async(&path)).unwrap_err(), Error::NoAuth);
    other
        .add_auth_async("digest", b"alice:wonderland")
        .wait()
        .unwrap();
    assert_eq!(other.get_async(&path).wait().unwrap().0, b"secret");
    assert!(matches!(
        block_on(zk.add_auth_async("", b"x")),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn sync_and_config_async() {
    let zk = connect();
    let path = unique("async-sync");
    assert_eq!(block_on(zk.sync_async(&path)).unwrap(), path);
    assert_eq!(zk.sync_async("/").wait().unwrap(), "/");
    let (data, _) = block_on(zk.get_config_async()).unwrap();
    assert!(data.is_empty());
    let (data, _) = zk.get_config_async().wait().unwrap();
    assert!(data.is_empty());
    assert_eq!(
        block_on(zk.reconfig_async(zookeeper_mt::Reconfig::remove("1"), None)).unwrap_err(),
        Error::ReconfigDisabled
    );
}

#[test]
fn multi_async() {
    let zk = connect();
    let path = unique("async-multi");
    let results = block_on(zk.multi_async(&[
        Op::create(&path, b"a", CreateMode::Persistent),
        Op::create(&format!("{path}/n-"), b"", CreateMode::PersistentSequential),
        Op::set_data(&path, b"b", 0),
        Op::check(&path, 1),
    ]))
    .unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], OpResult::Created(path.clone()));
    assert!(matches!(&results[1], OpResult::Created(p) if p.starts_with(&format!("{path}/n-"))));
    assert!(matches!(&results[2], OpResult::DataSet(stat) if stat.version == 1));
    assert_eq!(results[3], OpResult::Checked);

    let error = zk
        .multi_async(&[
            Op::create(&format!("{path}/never"), b"", CreateMode::Persistent),
            Op::check(&path, 0),
        ])
        .wait()
        .unwrap_err();
    assert_eq!(
        error,
        Error::MultiFailed {
            index: 1,
            error: Box::new(Error::BadVersion)
        }
    );
    assert_eq!(zk.exists(&format!("{path}/never")).unwrap(), None);
}

#[test]
fn requests_keep_call_order() {
    let zk = connect();
    let path = unique("async-order");
    // Nothing waited on in between: the C client sends them in call order and the server
    // answers in order, so each read sees the writes issued before it.
    let create = zk.create_async(&path, b"0", CreateMode::Persistent);
    let sets: Vec<_> = (1..=50)
        .map(|i| zk.set_async(&path, i.to_string().as_bytes(), Some(i - 1)))
        .collect();
    let read = zk.get_async(&path);
    let delete = zk.delete_async(&path, Some(50));
    let gone = zk.exists_async(&path);

    // Resolve them in reverse order: each future is independent.
    assert_eq!(block_on(gone).unwrap(), None);
    delete.wait().unwrap();
    let (data, stat) = block_on(read).unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"50"[..], 50));
    for (i, set) in sets.into_iter().enumerate().rev() {
        assert_eq!(set.wait().unwrap().version, i as i32 + 1);
    }
    assert_eq!(block_on(create).unwrap(), path);
}

#[test]
fn futures_complete_on_other_threads_and_when_dropped() {
    let zk = connect();
    let path = unique("async-threads");
    create(&zk, &path, b"data");

    // Futures are Send: await them on other threads.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let future = zk.get_async(&path);
            thread::spawn(move || block_on(future))
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().unwrap().unwrap().0, b"data");
    }

    // A dropped future does not cancel the request, and leaks nothing.
    for i in 0..100 {
        drop(zk.set_async(&path, format!("{i}").as_bytes(), None));
        drop(zk.exists_watch_async(&format!("{path}/missing-{i}")));
    }
    // Nothing wants the exists watches (their Watch went with the future): each is
    // released on the client when its reply comes, before any later reply. The server
    // keeps its watches until they fire or are removed there.
    let (data, stat) = zk.get(&path).unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"99"[..], 100));
    assert_eq!(zk.live_contexts(), 0);
    zk.remove_watches(
        &format!("{path}/missing-7"),
        WatcherType::Any,
        WatchRemoval::Server,
    )
    .unwrap();
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn a_future_is_pending_then_woken() {
    let zk = connect();
    let path = unique("async-pending");
    // The reply needs a round trip: the first poll right after submission is (almost
    // always) pending; either way a later block_on must complete it via the waker.
    let mut future = zk.create_async(&path, b"", CreateMode::Persistent);
    let first = poll_once(&mut future);
    match first {
        Poll::Pending => assert_eq!(block_on(future).unwrap(), path),
        Poll::Ready(result) => assert_eq!(result.unwrap(), path),
    }
    // A failed-at-submission future is ready at once.
    let mut invalid = zk.get_async("bad");
    assert!(matches!(
        poll_once(&mut invalid),
        Poll::Ready(Err(Error::InvalidPath { .. }))
    ));
    // wait_timeout on a healthy request.
    assert!(zk
        .exists_async(&path)
        .wait_timeout(common::WAIT)
        .unwrap()
        .is_some());
}

#[test]
fn async_errors_before_c() {
    let zk = connect();
    let big = vec![0u8; zookeeper_mt::MAX_DATA_LEN + 1];
    assert!(matches!(
        block_on(zk.create_async("/x", &big, CreateMode::Persistent)),
        Err(Error::DataTooLarge { .. })
    ));
    assert!(matches!(
        zk.set_async("/x", &big, None).wait(),
        Err(Error::DataTooLarge { .. })
    ));
    assert!(matches!(
        block_on(zk.exists_async("x")),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zk.multi_async(&[]).wait(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        block_on(zk.create_async("/x", b"", CreateMode::PersistentWithTtl(Duration::ZERO))),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
    assert_eq!(block_on(zk.get_async("/")).unwrap_err(), Error::Closed);
    assert_eq!(zk.sync_async("/").wait().unwrap_err(), Error::Closed);
}

/// A waker that runs blocking calls when woken. Our wakers are called on the C
/// completion thread, where blocking would deadlock: those calls must fail instead.
struct BlockingWaker {
    zk: ZooKeeper,
    path: String,
    results: Mutex<Vec<Result<(), Error>>>,
    done: Mutex<bool>,
    signal: Condvar,
}

impl Wake for BlockingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut done = self.done.lock().unwrap();
        if *done {
            return;
        }
        let outcomes = vec![
            self.zk.get(&self.path).map(drop),
            self.zk.get_async(&self.path).wait().map(drop),
            self.zk
                .exists_async(&self.path)
                .wait_timeout(Duration::from_secs(1))
                .map(drop),
        ];
        *self.results.lock().unwrap() = outcomes;
        *done = true;
        self.signal.notify_all();
    }
}

#[test]
fn blocking_calls_from_a_waker_fail_instead_of_deadlocking() {
    let zk = connect();
    let path = unique("async-waker-block");
    create(&zk, &path, b"");
    let state = Arc::new(BlockingWaker {
        zk: zk.clone(),
        path: path.clone(),
        results: Mutex::new(Vec::new()),
        done: Mutex::new(false),
        signal: Condvar::new(),
    });
    let waker = Waker::from(Arc::clone(&state));
    // Poll until one request's first poll is pending (its waker then runs on C).
    let mut pending = None;
    for _ in 0..100 {
        let mut future = zk.exists_async(&path);
        if std::pin::Pin::new(&mut future)
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
        {
            pending = Some(future);
            break;
        }
    }
    let future = pending.expect("a pending first poll");
    let done = state.done.lock().unwrap();
    let (done, timeout) = state
        .signal
        .wait_timeout_while(done, common::WAIT, |done| !*done)
        .unwrap();
    assert!(*done && !timeout.timed_out(), "the waker never ran");
    drop(done);
    let results = state.results.lock().unwrap().clone();
    assert_eq!(results.len(), 3);
    for result in results {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{result:?}"
        );
    }
    // The handle is fine afterwards.
    assert!(block_on(future).unwrap().is_some());
    zk.get(&path).unwrap();
}

#[test]
fn huge_timeouts_do_not_overflow() {
    let zk = connect();
    assert!(zk
        .exists_async("/")
        .wait_timeout(Duration::MAX)
        .unwrap()
        .is_some());
    zk.wait_connected(Duration::MAX).unwrap();
}

/// Session events are an async stream too: a pending `next` is woken by the next event,
/// and the stream ends (`None`) when the handle closes.
#[test]
fn session_events_stream_wakes_and_ends_at_close() {
    let zk = connect();
    let mut events = zk.session_events();
    {
        let mut next = Box::pin(events.next_event());
        assert!(poll_once(&mut next).is_pending(), "no event yet");
        let closer = {
            let zk = zk.clone();
            thread::spawn(move || zk.close().unwrap())
        };
        // Woken through the waker stored by the pending poll: the close publishes
        // `Closed` or ends the stream.
        let mut event = block_on_timeout(next, Duration::from_secs(30)).expect("never woken");
        // A `Connected` published just before this stream was opened may come first.
        while let Some(e) = event.filter(|e| e.state != SessionState::Closed) {
            assert_eq!(e.state, SessionState::Connected, "{e:?}");
            event = block_on_timeout(events.next_event(), Duration::from_secs(30))
                .expect("never woken");
        }
        closer.join().unwrap();
    }
    let end = block_on_timeout(events.next_event(), Duration::from_secs(30)).expect("never ended");
    assert!(end.is_none(), "the stream ends at close: {end:?}");
    // A blocking receiver of the same stream sees it closed as well.
    assert!(zk.session_events().recv().is_err());
}

/// `get_children2_watch` has an async form: children, the parent's Stat and an armed
/// watch that fires on the next child change.
#[test]
fn children2_watch_async_arms_a_watch() {
    let zk = connect();
    let path = create(&zk, &unique("children2-async"), b"");
    let (children, stat, watch) = block_on(zk.get_children2_watch_async(&path)).unwrap();
    assert!(children.is_empty());
    assert_eq!(stat.num_children, 0);
    create(&zk, &format!("{path}/a"), b"");
    let event = block_on_timeout(watch, Duration::from_secs(30))
        .expect("fired")
        .unwrap();
    assert_eq!(event.event_type, EventType::NodeChildrenChanged);
}
