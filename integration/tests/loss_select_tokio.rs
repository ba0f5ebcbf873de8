//! A guard's `lost()` in `tokio::select!` (by value and by `&mut`), against a real
//! server: the compile-level guarantee of `LossSignal` (a crossbeam `Receiver` there was
//! E0277, "not a future"), and its outcomes on a runtime's worker threads.

use std::time::Duration;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::locks::{Lock, LockLost};

/// Generous: the machine is shared and loaded.
const T: Duration = Duration::from_secs(60);

fn connect() -> ZooKeeper {
    let zk = ZooKeeper::connect(&zk_harness::shared_test_connect_string(), T).unwrap();
    zk.wait_connected(T).unwrap();
    zk
}

fn unique_path(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/loss-select-{name}-{}-{nanos}", std::process::id())
}

#[test]
fn a_lock_guards_loss_in_tokio_select() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let zk = connect();
    let admin = connect();
    runtime.block_on(async {
        let lock = Lock::new(&zk, &unique_path("deleted")).unwrap();
        let guard = lock.acquire_async(Timeout::Never).await.unwrap();
        // `&mut`: a branch that does not fire leaves the signal for the next round.
        let mut lost = guard.lost();
        tokio::select! {
            reason = &mut lost => panic!("lost before anything happened: {reason:?}"),
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        admin.delete_async(guard.node(), None).await.unwrap();
        tokio::select! {
            reason = &mut lost => assert_eq!(reason, Some(LockLost::NodeDeleted)),
            _ = tokio::time::sleep(T) => panic!("the deletion was never reported"),
        }
        // By value, once known: ready at once.
        tokio::select! {
            reason = guard.lost() => assert_eq!(reason, Some(LockLost::NodeDeleted)),
            _ = tokio::time::sleep(T) => panic!("a known loss was not ready"),
        }
        assert!(
            guard.release_async().await.is_err(),
            "released after a loss"
        );

        // A guard released on another task: the signal resolves to `None`.
        let guard = lock.acquire_async(Timeout::Never).await.unwrap();
        let lost = guard.lost();
        let releaser = tokio::spawn(async move { guard.release_async().await });
        tokio::select! {
            reason = lost => assert_eq!(reason, None, "a release is no loss"),
            _ = tokio::time::sleep(T) => panic!("the release was never seen"),
        }
        releaser.await.unwrap().unwrap();
    });
}
