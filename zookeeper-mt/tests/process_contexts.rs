//! `ZooKeeper::live_contexts_in_process`: the process-wide count of contexts held for C.
//! Alone in its test binary, so no other test's handles are counted.

mod common;

use common::{connect, create, unique, WAIT};
use zookeeper_mt::{Error, EventType, ZooKeeper};

#[test]
fn process_wide_context_count() {
    assert_eq!(ZooKeeper::live_contexts_in_process(), 0);
    let a = connect();
    let b = connect();
    assert_eq!(ZooKeeper::live_contexts_in_process(), 0);

    let base = unique("process");
    create(&a, &base, b"");
    let (_, wa1) = a.exists_watch(&format!("{base}/x")).unwrap();
    let (_, _, wa2) = a.get_watch(&base).unwrap();
    let (_, wa3) = a.get_children_watch(&base).unwrap();
    let (_, wb1) = b.exists_watch(&format!("{base}/y")).unwrap();
    let (_, _, wb2) = b.get_watch(&base).unwrap();
    assert_eq!((a.live_contexts(), b.live_contexts()), (3, 2));
    assert_eq!(ZooKeeper::live_contexts_in_process(), 5);

    // Requests in flight count too, until their replies are delivered.
    let futures: Vec<_> = (0..200).map(|_| a.exists_async(&base)).collect();
    assert!(ZooKeeper::live_contexts_in_process() > 5);
    for future in futures {
        future.wait().unwrap();
    }
    assert_eq!(ZooKeeper::live_contexts_in_process(), 5);

    // A fired watch is freed: b's data watch on base and a's data watch both fire.
    b.set(&base, b"x", None).unwrap();
    for watch in [&wa2, &wb2] {
        assert_eq!(
            watch.wait_timeout(WAIT).unwrap().event_type,
            EventType::NodeDataChanged
        );
    }
    assert_eq!(ZooKeeper::live_contexts_in_process(), 3);

    // Closing a frees all of a's.
    a.close().unwrap();
    assert_eq!(wa1.wait(), Err(Error::Closed));
    assert_eq!(wa3.wait(), Err(Error::Closed));
    assert_eq!(ZooKeeper::live_contexts_in_process(), 1);
    assert_eq!(b.live_contexts(), 1);

    // Dropping b (the last clone) frees the rest.
    drop(b);
    assert_eq!(wb1.wait(), Err(Error::Closed));
    assert_eq!(ZooKeeper::live_contexts_in_process(), 0);
}
