use std::time::Duration;
use zookeeper::{Acl, CreateMode, Error, EventType, Op, OpResult, ZooKeeper};

#[test]
fn sanity() {
    let hosts = zk_harness::shared_test_connect_string();
    let zk = ZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let _ = zk.delete("/sanity", None);
    let (none, watch) = zk.exists_watch("/sanity").unwrap();
    assert!(none.is_none());
    assert_eq!(
        zk.create("/sanity", b"x", &Acl::open_unsafe(), CreateMode::Persistent)
            .unwrap(),
        "/sanity"
    );
    let ev = watch.wait_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(ev.event_type, EventType::NodeCreated);
    assert_eq!(ev.path, "/sanity");
    let (data, stat) = zk.get("/sanity").unwrap();
    assert_eq!(data, b"x");
    let r = zk
        .multi(&[
            Op::check("/sanity", stat.version),
            Op::create("/sanity/a", b"", CreateMode::Persistent),
            Op::set_data("/sanity", b"y", -1),
        ])
        .unwrap();
    assert!(
        matches!(&r[1], OpResult::Created(p) if p == "/sanity/a"),
        "{r:?}"
    );
    let e = zk
        .multi(&[
            Op::create("/sanity/b", b"", CreateMode::Persistent),
            Op::check("/sanity", 99),
        ])
        .unwrap_err();
    assert!(matches!(e, Error::MultiFailed { index: 1, .. }), "{e:?}");
    assert_eq!(zk.exists("/sanity/b").unwrap(), None);
    let (kids, w) = zk.get_children_watch("/sanity").unwrap();
    assert_eq!(kids, vec!["a".to_string()]);
    zk.delete("/sanity/a", None).unwrap();
    assert_eq!(w.wait().unwrap().event_type, EventType::NodeChildrenChanged);
    zk.delete("/sanity", None).unwrap();
    let futs: Vec<_> = (0..1000)
        .map(|i| {
            zk.create_async(
                &format!("/s{i}"),
                b"",
                &Acl::open_unsafe(),
                CreateMode::Ephemeral,
            )
        })
        .collect();
    for f in futs {
        f.wait().unwrap();
    }
    let (_, _, w) = zk.get_watch("/s1").unwrap();
    assert!(zk.live_contexts() >= 1);
    zk.close().unwrap();
    assert_eq!(w.wait(), Err(Error::Closed));
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(zk.get("/x").unwrap_err(), Error::Closed);
}
