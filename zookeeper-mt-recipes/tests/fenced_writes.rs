//! Fenced writes against a real server: applied while the lock is held, refused by the
//! server once the holder has lost its lock, even when the holder does not know yet.

mod common;

use common::{connect, connect_to, unique_path, Proxy};
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::{CreateMode, Error, Op, OpResult, ZooKeeper};
use zookeeper_mt_recipes::locks::MultiLock;
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::locks::ReentrantLock;
use zookeeper_mt_recipes::locks::{Lock, LockLayout};
use zookeeper_mt_recipes::RecipeError;

fn data_node(zk: &ZooKeeper, path: &str) -> String {
    let node = format!("{path}-data");
    zookeeper_mt_recipes::nodes::ensure_path(zk, path).unwrap();
    zk.create(&node, b"v0", CreateMode::Persistent).unwrap();
    node
}

fn read(zk: &ZooKeeper, node: &str) -> Vec<u8> {
    zk.get(node).unwrap().0
}

#[test]
fn fenced_write_applies_while_held() {
    let zk = connect();
    let path = unique_path("held");
    let data = data_node(&zk, &path);
    for layout in [LockLayout::Native, LockLayout::Curator, LockLayout::Kazoo] {
        let lock = Lock::new(&zk, &format!("{path}/{layout:?}"))
            .unwrap()
            .with_layout(layout);
        let guard = lock.acquire(Timeout::Never).unwrap();
        let results = guard
            .fenced_multi(&[Op::set_data(&data, format!("{layout:?}").as_bytes(), -1)])
            .unwrap();
        // Only the caller's results: the check is not among them.
        assert!(matches!(results.as_slice(), [OpResult::DataSet(_)]));
        assert_eq!(read(&zk, &data), format!("{layout:?}").as_bytes());
        guard.release().unwrap();
    }
    // A failing operation of the caller's is reported with its own index.
    let lock = Lock::new(&zk, &format!("{path}/native")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let missing = format!("{path}-missing");
    match guard.fenced_multi(&[
        Op::set_data(&data, b"x", -1),
        Op::set_data(&missing, b"x", -1),
    ]) {
        Err(RecipeError::ZooKeeper(Error::MultiFailed { index, error })) => {
            assert_eq!(index, 1);
            assert_eq!(*error, Error::NoNode);
        }
        other => panic!("expected MultiFailed at 1, got {other:?}"),
    }
    assert_eq!(
        read(&zk, &data),
        b"Kazoo",
        "nothing of a failed multi applied"
    );
    assert!(matches!(
        guard.fenced_multi(&[]),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// The holder does not know its node was deleted (it never asked `lost()`), a new
/// holder took the lock and wrote: the stale holder's fenced write is refused by the
/// server and changes nothing, where a plain write would have gone through.
#[test]
fn stale_holder_cannot_write() {
    let zk = connect();
    let other = connect();
    let path = unique_path("stale");
    let data = data_node(&zk, &path);
    let lock = Lock::new(&zk, &path).unwrap();
    let stale = lock.acquire(Timeout::Never).unwrap();
    other.delete(stale.node(), None).unwrap();
    let fresh = Lock::new(&other, &path)
        .unwrap()
        .acquire(Timeout::Never)
        .unwrap();
    fresh
        .fenced_multi(&[Op::set_data(&data, b"fresh", -1)])
        .unwrap();
    assert!(
        !stale.is_lost(),
        "the stale holder has not heard of its loss"
    );
    let refused = stale.fenced_multi(&[Op::set_data(&data, b"stale", -1)]);
    assert!(matches!(refused, Err(RecipeError::Lost(_))), "{refused:?}");
    assert_eq!(read(&other, &data), b"fresh");

    // The same for a write lock, a reentrant lock and a multi-lock.
    let rw = ReadWriteLock::new(&zk, &format!("{path}-rw")).unwrap();
    let write = rw.write(Duration::from_secs(30)).unwrap();
    other
        .delete(&format!("{path}-rw/{}", write.node()), None)
        .unwrap();
    assert!(matches!(
        write.fenced_multi(&[Op::set_data(&data, b"stale", -1)]),
        Err(RecipeError::Lost(_))
    ));
    let reentrant = ReentrantLock::new(&zk, &format!("{path}-re")).unwrap();
    let outer = reentrant.acquire(Timeout::Never).unwrap();
    let inner = reentrant.acquire(Timeout::Never).unwrap();
    other.delete(&inner.node(), None).unwrap();
    assert!(matches!(
        inner.fenced_multi(&[Op::set_data(&data, b"stale", -1)]),
        Err(RecipeError::Lost(_))
    ));
    drop((inner, outer));
    let multi = MultiLock::new(&zk, &[&format!("{path}-m1"), &format!("{path}-m2")]).unwrap();
    let both = multi.acquire(Timeout::Never).unwrap();
    both.fenced_multi(&[Op::set_data(&data, b"both", -1)])
        .unwrap();
    other.delete(both.guards()[1].node(), None).unwrap();
    assert!(matches!(
        both.fenced_multi(&[Op::set_data(&data, b"stale", -1)]),
        Err(RecipeError::Lost(_))
    ));
    assert_eq!(read(&other, &data), b"both");
}

/// A holder cut off from the server (a paused process, a partition) whose session
/// expired meanwhile and whose lock went to someone else: once back, its fenced write
/// fails and the new holder's value stays.
#[test]
fn expired_holder_cannot_write() {
    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap().split('/').next().unwrap();
    let proxy = Proxy::start(server);
    let zk = connect_to(&proxy.addr);
    let other = connect();
    let path = unique_path("expired");
    let data = data_node(&other, &path);
    // A long grace: the guard does not count the disconnection as a loss by itself.
    let lock = Lock::new(&zk, &path)
        .unwrap()
        .with_disconnect_grace(Duration::from_secs(60));
    let stale = lock.acquire(Timeout::Never).unwrap();
    proxy.cut();
    let thief = ZooKeeper::builder(&hosts)
        .session(zk.client_id().unwrap())
        .connect()
        .unwrap();
    thief.close().unwrap();
    let fresh = Lock::new(&other, &path)
        .unwrap()
        .acquire(Timeout::Never)
        .unwrap();
    fresh
        .fenced_multi(&[Op::set_data(&data, b"fresh", -1)])
        .unwrap();
    proxy.restore();
    let refused = stale.fenced_multi(&[Op::set_data(&data, b"stale", -1)]);
    assert!(refused.is_err(), "{refused:?}");
    eprintln!("expired holder's fenced write: {refused:?}");
    assert_eq!(read(&other, &data), b"fresh");
}
