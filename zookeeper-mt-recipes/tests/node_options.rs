//! The nodes of the queue, work queue, barriers and id generator take an ACL and may use
//! container directories (`with_node_options` / `create_counter`): with digest
//! authentication, a client without the credentials can neither read nor change them;
//! container directories are removed by the server once empty and recreated by the
//! recipe.

mod common;

use common::{connect, connect_to, unique_path, wait_until};
use std::time::Duration;
use zookeeper_mt::{Acl, Error, ZooKeeper};
use zookeeper_mt_recipes::barriers::{Barrier, DoubleBarrier};
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::shared::IdGenerator;
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

const WAIT: Duration = Duration::from_secs(10);

/// A session authenticated as alice (digest).
fn alice() -> ZooKeeper {
    let zk = connect();
    zk.add_auth("digest", b"alice:secret").unwrap();
    zk
}

/// Everything for the authenticated creator (alice), nothing for anyone else.
fn only_alice() -> NodeOptions {
    NodeOptions::default().acl(Acl::CREATOR_ALL)
}

/// A fresh path whose parent exists with an open ACL (so only the recipe's own nodes
/// get alice's ACL).
fn fresh(zk: &ZooKeeper, name: &str) -> String {
    let path = unique_path(name);
    zookeeper_mt_recipes::nodes::ensure_path(zk, path.rsplit_once('/').unwrap().0).unwrap();
    path
}

/// Asserts `path` carries alice's ACL (digest) and nothing for the world.
fn assert_alice_only(zk: &ZooKeeper, path: &str) {
    let (acl, _) = zk.get_acl(path).unwrap();
    assert!(
        acl.iter()
            .all(|entry| entry.scheme == "digest" && entry.id.starts_with("alice:")),
        "{path}: {acl:?}"
    );
}

fn no_auth<T: std::fmt::Debug>(result: zookeeper_mt::Result<T>) {
    assert_eq!(result.unwrap_err(), Error::NoAuth);
}

#[test]
fn queue_nodes_take_the_acl() {
    let zk = alice();
    let path = fresh(&zk, "queue");
    let queue = Queue::new(&zk, &path)
        .unwrap()
        .with_node_options(only_alice());
    queue.put(b"secret").unwrap();
    for node in [path.clone(), format!("{path}/receipts")] {
        assert_alice_only(&zk, &node);
    }
    let item = zk
        .get_children(&path)
        .unwrap()
        .into_iter()
        .find(|c| c.starts_with("item-"))
        .unwrap();
    assert_alice_only(&zk, &format!("{path}/{item}"));

    let stranger = connect();
    no_auth(stranger.get_children(&path));
    no_auth(stranger.delete(&format!("{path}/{item}"), None));
    no_auth(stranger.set(&format!("{path}/{item}"), b"forged", None));
    assert!(matches!(
        Queue::new(&stranger, &path).unwrap().try_take(),
        Err(RecipeError::ZooKeeper(Error::NoAuth))
    ));
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"secret"[..]));
}

#[test]
fn work_queue_nodes_take_the_acl() {
    let zk = alice();
    let path = fresh(&zk, "work-queue");
    let queue = WorkQueue::new(&zk, &path)
        .unwrap()
        .with_node_options(only_alice());
    queue.put(b"job").unwrap();
    let item = queue.take(WAIT).optional().unwrap().expect("claimed");
    for dir in ["items", "locks", "receipts"] {
        assert_alice_only(&zk, &format!("{path}/{dir}"));
    }
    let lock = format!("{path}/locks/{}", item.name());
    assert_alice_only(&zk, &lock);
    assert_alice_only(&zk, &format!("{path}/items/{}", item.name()));

    let stranger = connect();
    no_auth(stranger.delete(&lock, None));
    no_auth(stranger.get_children(&format!("{path}/items")));
    assert!(item.is_held().unwrap());
    item.complete().unwrap();
    // An idle consumer's waiter node too (a deadline long enough for the take to join
    // the line on a loaded machine before it gives up).
    assert!(queue
        .take(Duration::from_secs(2))
        .optional()
        .unwrap()
        .is_none());
    assert_alice_only(&zk, &format!("{path}/waiters"));
}

#[test]
fn barrier_and_counter_nodes_take_the_acl() {
    let zk = alice();
    let stranger = connect();

    let gate = fresh(&zk, "gate");
    let barrier = Barrier::new(&zk, &gate).with_node_options(only_alice());
    barrier.set().unwrap();
    assert_alice_only(&zk, &gate);
    no_auth(stranger.set(&gate, b"x", None));

    let dir = fresh(&zk, "double");
    let double = DoubleBarrier::new(&zk, &dir, 1)
        .unwrap()
        .with_node_options(only_alice());
    double.enter(WAIT).unwrap();
    assert_alice_only(&zk, &dir);
    for child in zk.get_children(&dir).unwrap() {
        assert_alice_only(&zk, &format!("{dir}/{child}"));
    }
    let mine = format!("{dir}/{}", double.node().unwrap());
    no_auth(stranger.delete(&mine, None));
    double.leave(WAIT).unwrap();

    let counter = fresh(&zk, "ids");
    IdGenerator::create_counter(&zk, &counter, &only_alice()).unwrap();
    assert_alice_only(&zk, &counter);
    no_auth(stranger.set(&counter, b"0", None));
    assert!(matches!(
        IdGenerator::new(&stranger, &counter).unwrap().next_id(),
        Err(RecipeError::ZooKeeper(Error::NoAuth))
    ));
    assert_eq!(
        IdGenerator::new(&zk, &counter).unwrap().next_id().unwrap(),
        1
    );
}

/// With container directories the server removes a recipe's emptied directories (here
/// every 100 ms), and the recipes recreate them when next needed.
#[test]
fn container_directories_go_when_empty_and_come_back() {
    let server = zk_harness::Server::start_with(
        &zk_harness::ServerOptions::for_tests().jvm_arg("-Dznode.container.checkIntervalMs=100"),
    )
    .unwrap();
    let zk = connect_to(&server.connect_string());
    let containers = NodeOptions::default().container_dirs(true);
    let gone = |path: &str| zk.exists(path).unwrap().is_none();

    zookeeper_mt_recipes::nodes::ensure_path(&zk, "/apps").unwrap();
    let queue = Queue::new(&zk, "/apps/queue")
        .unwrap()
        .with_node_options(containers.clone());
    queue.put(b"one").unwrap();
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"one"[..]));
    wait_until("the emptied queue container removed", || {
        gone("/apps/queue")
    });
    queue.put(b"two").unwrap();
    assert_eq!(
        queue.take(WAIT).optional().unwrap().as_deref(),
        Some(&b"two"[..])
    );

    let work = WorkQueue::new(&zk, "/apps/work")
        .unwrap()
        .with_node_options(containers.clone());
    work.put(b"job").unwrap();
    work.take(WAIT)
        .optional()
        .unwrap()
        .unwrap()
        .complete()
        .unwrap();
    for dir in ["items", "locks", "receipts"] {
        wait_until("the emptied work-queue containers removed", || {
            gone(&format!("/apps/work/{dir}"))
        });
    }
    work.put(b"again").unwrap();
    let item = work
        .take(WAIT)
        .optional()
        .unwrap()
        .expect("recreated and claimed");
    assert_eq!(item.data(), b"again");
    item.complete().unwrap();

    let double = DoubleBarrier::new(&zk, "/apps/phase", 1)
        .unwrap()
        .with_node_options(containers);
    double.enter(WAIT).unwrap();
    double.leave(WAIT).unwrap();
    wait_until("the emptied barrier container removed", || {
        gone("/apps/phase")
    });
    double.enter(WAIT).unwrap();
    double.leave(WAIT).unwrap();
    drop((queue, work));
    zk.close().unwrap();
}
