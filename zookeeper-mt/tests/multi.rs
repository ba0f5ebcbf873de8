//! `multi`: per-operation results, atomicity (a failure anywhere applies nothing), the
//! index and error of the failing operation, and what the binding rejects up front.

mod common;

use common::{block_on, connect, create, unique};
use std::time::Duration;
use zookeeper_mt::{Acl, CreateMode, Error, Op, OpResult, MAX_DATA_LEN};

fn failed(index: usize, error: Error) -> Error {
    Error::MultiFailed {
        index,
        error: Box::new(error),
    }
}

#[test]
fn every_op_kind_with_results() {
    let zk = connect();
    let base = unique("multi-all");
    create(&zk, &base, b"base");
    create(&zk, &format!("{base}/doomed"), b"");
    let results = zk
        .multi(&[
            Op::check(&base, 0),
            Op::create(&format!("{base}/a"), b"A", CreateMode::Persistent),
            Op::create(&format!("{base}/q-"), b"", CreateMode::PersistentSequential),
            Op::create(&format!("{base}/e"), b"", CreateMode::Ephemeral),
            Op::set_data(&base, b"base-2", 0),
            Op::set_data(&format!("{base}/a"), b"A-2", -1),
            Op::delete(&format!("{base}/doomed"), 0),
            Op::check(&base, 1),
        ])
        .unwrap();
    assert_eq!(results.len(), 8);
    assert_eq!(results[0], OpResult::Checked);
    assert_eq!(results[1], OpResult::Created(format!("{base}/a")));
    let OpResult::Created(sequential) = &results[2] else {
        panic!("{results:?}")
    };
    let suffix = sequential.strip_prefix(&format!("{base}/q-")).unwrap();
    assert_eq!(suffix.len(), 10);
    assert_eq!(results[3], OpResult::Created(format!("{base}/e")));
    let OpResult::DataSet(base_stat) = results[4] else {
        panic!("{results:?}")
    };
    assert_eq!(base_stat.version, 1);
    assert_eq!(base_stat.data_length, 6);
    let OpResult::DataSet(a_stat) = results[5] else {
        panic!("{results:?}")
    };
    // Created and changed in the same transaction.
    assert_eq!(a_stat.version, 1);
    assert_eq!(a_stat.czxid, a_stat.mzxid);
    assert_eq!(results[6], OpResult::Deleted);
    assert_eq!(results[7], OpResult::Checked);

    // The server state matches (the Stat of a set is taken at that op: later ops of the
    // same multi changed the children since).
    let (data, stat) = zk.get(&base).unwrap();
    assert_eq!(data, b"base-2");
    assert_eq!(
        (stat.version, stat.mzxid),
        (base_stat.version, base_stat.mzxid)
    );
    assert_eq!(base_stat.num_children, 4);
    assert_eq!(stat.num_children, 3);
    assert_eq!(zk.get(&format!("{base}/a")).unwrap().0, b"A-2");
    assert!(zk.exists(sequential).unwrap().is_some());
    assert_eq!(
        zk.exists(&format!("{base}/e"))
            .unwrap()
            .unwrap()
            .ephemeral_owner,
        zk.client_id().unwrap().session_id
    );
    assert_eq!(zk.exists(&format!("{base}/doomed")).unwrap(), None);
}

#[test]
fn failing_check_rolls_back_the_creates() {
    let zk = connect();
    let base = unique("multi-rollback");
    create(&zk, &base, b"");
    let watch = zk.get_children_watch(&base).unwrap().1;
    let error = zk
        .multi(&[
            Op::create(&format!("{base}/one"), b"", CreateMode::Persistent),
            Op::create(&format!("{base}/two"), b"", CreateMode::Ephemeral),
            Op::set_data(&base, b"changed", -1),
            Op::check(&base, 0), // the set above made it version 1
            Op::create(&format!("{base}/three"), b"", CreateMode::Persistent),
        ])
        .unwrap_err();
    assert_eq!(error, failed(3, Error::BadVersion));
    assert!(error.to_string().contains("multi operation 3 failed"));
    // Nothing was applied.
    assert!(zk.get_children(&base).unwrap().is_empty());
    let (data, stat) = zk.get(&base).unwrap();
    assert!(data.is_empty());
    assert_eq!(stat.version, 0);
    assert_eq!(stat.cversion, 0);
    // No event fired either.
    zk.sync(&base).unwrap();
    assert_eq!(watch.try_get(), Ok(None));
}

#[test]
fn the_failing_index_and_error_are_reported() {
    let zk = connect();
    let base = unique("multi-index");
    create(&zk, &base, b"");
    let child = format!("{base}/child");
    create(&zk, &child, b"");

    let cases: Vec<(Vec<Op>, Error)> = vec![
        (
            vec![Op::delete(&format!("{base}/missing"), -1)],
            failed(0, Error::NoNode),
        ),
        (
            vec![
                Op::check(&base, -1),
                Op::create(&child, b"", CreateMode::Persistent),
            ],
            failed(1, Error::NodeExists),
        ),
        (
            vec![
                Op::check(&base, 0),
                Op::set_data(&child, b"", 0),
                Op::set_data(&child, b"", 0), // version is 1 by now
            ],
            failed(2, Error::BadVersion),
        ),
        (
            vec![Op::check(&base, -1), Op::delete(&base, -1)],
            failed(1, Error::NotEmpty),
        ),
        (
            vec![Op::check(&format!("{base}/missing"), -1)],
            failed(0, Error::NoNode),
        ),
        (
            vec![Op::Create {
                path: format!("{base}/noacl"),
                data: vec![],
                acl: Acl::CREATOR_ALL.into(),
                mode: CreateMode::Persistent,
            }],
            failed(0, Error::InvalidAcl),
        ),
    ];
    for (ops, expected) in cases {
        assert_eq!(zk.multi(&ops).unwrap_err(), expected, "{ops:?}");
    }
    // Every multi failed as a whole.
    assert_eq!(zk.get(&child).unwrap().1.version, 0);
    assert_eq!(zk.get_children(&base).unwrap(), ["child"]);
}

#[test]
fn ephemeral_parent_in_multi() {
    let zk = connect();
    let base = unique("multi-ephemeral");
    let error = zk
        .multi(&[
            Op::create(&base, b"", CreateMode::Ephemeral),
            Op::create(&format!("{base}/c"), b"", CreateMode::Persistent),
        ])
        .unwrap_err();
    assert_eq!(error, failed(1, Error::NoChildrenForEphemerals));
    assert_eq!(zk.exists(&base).unwrap(), None);
}

#[test]
fn async_multi_both_ways() {
    let zk = connect();
    let base = unique("multi-async");
    let results = block_on(zk.multi_async(&[
        Op::create(&base, b"", CreateMode::Persistent),
        Op::create(&format!("{base}/x"), b"", CreateMode::EphemeralSequential),
    ]))
    .unwrap();
    assert_eq!(results[0], OpResult::Created(base.clone()));
    let OpResult::Created(x) = &results[1] else {
        panic!("{results:?}")
    };
    assert!(x.starts_with(&format!("{base}/x")) && x.len() == base.len() + 12);
    let error = zk
        .multi_async(&[Op::delete(x, 0), Op::delete(&base, 5)])
        .wait()
        .unwrap_err();
    assert_eq!(error, failed(1, Error::BadVersion));
    assert!(zk.exists(x).unwrap().is_some());

    // Many multis in flight at once, all on one handle.
    let futures: Vec<_> = (0..50)
        .map(|i| {
            zk.multi_async(&[
                Op::create(&format!("{base}/m{i}"), b"", CreateMode::Persistent),
                Op::set_data(&base, format!("{i}").as_bytes(), i),
            ])
        })
        .collect();
    for (i, future) in futures.into_iter().enumerate() {
        let results = future.wait().unwrap();
        assert!(matches!(&results[1], OpResult::DataSet(stat) if stat.version == i as i32 + 1));
    }
    assert_eq!(zk.get_children(&base).unwrap().len(), 51);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn rejected_before_reaching_c() {
    let zk = connect();
    let base = unique("multi-reject");
    assert!(matches!(zk.multi(&[]), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        zk.multi(&[
            Op::create(&base, b"", CreateMode::Persistent),
            Op::check("bad//path", -1)
        ]),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zk.multi(&[Op::create(
            &base,
            b"",
            CreateMode::PersistentWithTtl(Duration::from_secs(5))
        )]),
        Err(Error::InvalidArgument(_))
    ));
    // The 3.8.0 C client misparses the reply to a container create inside a multi and
    // aborts the process: the binding refuses it.
    assert!(matches!(
        zk.multi(&[
            Op::create(&base, b"", CreateMode::Persistent),
            Op::create(&format!("{base}/c"), b"", CreateMode::Container)
        ]),
        Err(Error::InvalidArgument(_))
    ));
    // Each part fits; together they exceed the request limit (0xfffff bytes).
    let half = vec![0u8; MAX_DATA_LEN / 2 + 1024];
    assert!(matches!(
        zk.multi(&[
            Op::create(&base, &half, CreateMode::Persistent),
            Op::set_data(&base, &half, -1)
        ]),
        Err(Error::DataTooLarge { .. })
    ));
    assert!(matches!(
        zk.multi(&[Op::Create {
            path: base.clone(),
            data: vec![],
            acl: Vec::new().into(),
            mode: CreateMode::Persistent
        }]),
        Err(Error::InvalidAcl)
    ));
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(zk.exists(&base).unwrap(), None);
}

/// A waker that, when called (on the C completion thread), holds that thread until the
/// test lets it go, so that events queued behind it (here: the expiry) wait.
struct HoldingWaker {
    entered: std::sync::mpsc::SyncSender<()>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl std::task::Wake for HoldingWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let _ = self.entered.try_send(());
        // Bounded: a broken test must not hang the C thread (and close) forever.
        let _ = self.release.lock().unwrap().recv_timeout(common::WAIT);
    }
}

/// A multi in the window where the C client already knows the session expired but the
/// expiry event has not reached the binding yet. `zoo_amulti` then answers
/// ZMARSHALLINGERROR (its per-operation state check folded in), which must come out as
/// `SessionExpired`, and nothing may be kept for C: the handle's contexts go back to 0
/// without a close.
#[test]
fn multi_in_the_expiry_window_reports_session_expired() {
    use common::{wait_for_state, Proxy, WAIT};
    use std::future::Future;
    use std::sync::{mpsc, Arc, Mutex};
    use zookeeper_mt::{SessionState, ZooKeeper};

    let proxy = Proxy::start(&common::hosts());
    let zk = ZooKeeper::builder(&proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .unwrap();
    let base = unique("multi-expiry");
    create(&zk, &base, b"");
    let events = zk.session_events();
    let id = zk.client_id().unwrap();

    // Cut off; a request made now fails with ConnectionLoss at the next failed
    // connection attempt, and its waker then holds the completion thread.
    proxy.block();
    wait_for_state(&events, SessionState::Connecting, WAIT);
    let (entered_tx, entered) = mpsc::sync_channel(1);
    let (release, release_rx) = mpsc::channel();
    let waker = std::task::Waker::from(Arc::new(HoldingWaker {
        entered: entered_tx,
        release: Mutex::new(release_rx),
    }));
    // A request may fail at once if a connection attempt fails just then: take the
    // first one still pending after its first poll.
    let held = (0..1000).find_map(|_| {
        let mut request = zk.exists_async(&base);
        let mut cx = std::task::Context::from_waker(&waker);
        std::pin::Pin::new(&mut request)
            .poll(&mut cx)
            .is_pending()
            .then_some(request)
    });
    let held = held.expect("a request pending while cut off");
    entered.recv_timeout(WAIT).expect("the waker runs");

    // Expire the session (another handle takes it over and closes it), then let the
    // first handle reach the server: C learns of the expiry, its event waits behind
    // the held completion thread.
    let thief = ZooKeeper::builder(&common::hosts())
        .session(id)
        .connect()
        .unwrap();
    thief.close().unwrap();
    proxy.unblock();
    common::poll_until("the C client to see the expiry", WAIT, || {
        zk.is_unrecoverable()
    });
    assert!(
        !zk.state().is_terminal(),
        "the expiry event was not held back"
    );

    let result = zk.multi(&[
        Op::check(&base, -1),
        Op::create(&format!("{base}/x"), b"", CreateMode::Persistent),
    ]);
    let async_result = block_on(zk.multi_async(&[Op::delete(&base, -1)]));
    release.send(()).unwrap();
    assert_eq!(result.unwrap_err(), Error::SessionExpired);
    assert_eq!(async_result.unwrap_err(), Error::SessionExpired);
    assert!(block_on(held).is_err());

    wait_for_state(&events, SessionState::Expired, WAIT);
    common::poll_until("every context freed without close", WAIT, || {
        zk.live_contexts() == 0
    });
    zk.close().unwrap();
}
