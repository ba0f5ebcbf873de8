//! Every recipe type is cheap to clone and `Clone + Send + Sync + 'static`, and the
//! future of each `*_async` call made on a clone that the future owns is `Send`: the
//! way a spawned task uses a recipe. Checked at compile time; the test only names it.

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, SystemTime};
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::barriers::{Barrier, DoubleBarrier};
use zookeeper_mt_recipes::caches::{ChildrenCache, ConfigWatch, NodeCache, TreeCache};
use zookeeper_mt_recipes::leadership::{LeaderElection, LeaderLatch};
use zookeeper_mt_recipes::locks::{
    LeaseSemaphore, Lock, MultiLock, ReadWriteLock, ReentrantLock, Semaphore,
};
use zookeeper_mt_recipes::nodes::{Group, GroupMember, PersistentNode};
use zookeeper_mt_recipes::queues::{BoundedQueue, DelayedQueue, PriorityQueue, Queue, WorkQueue};
use zookeeper_mt_recipes::shared::{AtomicLong, IdGenerator, KazooCounter, SharedCount};

fn recipe<R: Clone + Send + Sync + 'static>() {}

fn assert_send<F: Future + Send + 'static>(f: F) -> F {
    f
}

const T: Duration = Duration::from_secs(1);

#[test]
fn every_recipe_type_is_clone_send_sync_static() {
    recipe::<Lock>();
    recipe::<MultiLock>();
    recipe::<ReadWriteLock>();
    recipe::<Semaphore>();
    recipe::<LeaseSemaphore>();
    recipe::<Queue>();
    recipe::<PriorityQueue>();
    recipe::<DelayedQueue>();
    recipe::<BoundedQueue>();
    recipe::<WorkQueue>();
    recipe::<Barrier>();
    recipe::<DoubleBarrier>();
    recipe::<SharedCount>();
    recipe::<AtomicLong>();
    recipe::<KazooCounter>();
    recipe::<IdGenerator>();
    recipe::<LeaderLatch>();
    recipe::<LeaderElection>();
    recipe::<NodeCache>();
    recipe::<ChildrenCache>();
    recipe::<TreeCache>();
    recipe::<ConfigWatch>();
    recipe::<Group>();
    recipe::<GroupMember>();
    recipe::<PersistentNode>();
    // Its owner is a thread: shared by reference, never cloned into a task.
    fn thread_owned<R: Send + Sync + 'static>() {}
    thread_owned::<ReentrantLock>();
}

/// `$call` on a clone of `$recipe` moved into the future (never called: it only has to
/// compile).
macro_rules! on_clone {
    ($recipe:expr, |$r:ident| $call:expr) => {{
        let $r = $recipe.clone();
        drop(assert_send(async move {
            let _ = $call.await;
        }));
    }};
}

fn lock_futures_are_send(
    lock: &Lock,
    multi: &MultiLock,
    rw: &ReadWriteLock,
    sem: &Semaphore,
    leases: &LeaseSemaphore,
) {
    on_clone!(lock, |l| l.acquire_async(T));
    on_clone!(lock, |l| l.try_acquire_async());
    on_clone!(lock, |l| l.holder_async());
    on_clone!(lock, |l| async move {
        let guard = l.acquire_async(Timeout::Never).await?;
        guard.release_async().await
    });
    on_clone!(multi, |m| m.acquire_async(T));
    on_clone!(multi, |m| m.try_acquire_async());
    on_clone!(rw, |l| l.read_async(T));
    on_clone!(rw, |l| l.write_async(T));
    on_clone!(rw, |l| l.try_read_async());
    on_clone!(rw, |l| l.try_write_async());
    on_clone!(sem, |s| s.acquire_async(T));
    on_clone!(sem, |s| s.try_acquire_async());
    on_clone!(sem, |s| s.requests_async());
    on_clone!(leases, |s| s.acquire_async(2, T));
    on_clone!(leases, |s| s.held_async());
}

fn queue_futures_are_send(
    queue: &Queue,
    prio: &PriorityQueue,
    delayed: &DelayedQueue,
    bounded: &BoundedQueue,
    work: &WorkQueue,
) {
    on_clone!(queue, |q| q.take_async(T));
    on_clone!(queue, |q| q.try_take_async());
    on_clone!(queue, |q| q.put_async(b"x"));
    on_clone!(queue, |q| q.put_all_async([b"x", b"y"]));
    on_clone!(queue, |q| q.len_async());
    on_clone!(queue, |q| q.is_empty_async());
    on_clone!(prio, |q| q.take_async(Timeout::Never));
    on_clone!(prio, |q| q.try_take_async());
    on_clone!(prio, |q| q.put_async(b"x", 1));
    on_clone!(prio, |q| q.put_all_async([b"x"], 1));
    on_clone!(prio, |q| q.len_async());
    on_clone!(delayed, |q| q.take_async(T));
    on_clone!(delayed, |q| q.try_take_async());
    on_clone!(delayed, |q| q.put_at_async(b"x", SystemTime::now()));
    on_clone!(delayed, |q| q.put_after_async(b"x", T));
    on_clone!(delayed, |q| q.is_empty_async());
    on_clone!(bounded, |q| q.take_async(T));
    on_clone!(bounded, |q| q.try_take_async());
    on_clone!(bounded, |q| q.put_async(b"x", T));
    on_clone!(bounded, |q| q.try_put_async(b"x"));
    on_clone!(bounded, |q| q.len_async());
    on_clone!(work, |q| q.take_async(T));
    on_clone!(work, |q| q.try_take_async());
    on_clone!(work, |q| q.put_async(b"x"));
    on_clone!(work, |q| q.put_all_async([b"x"]));
    on_clone!(work, |q| q.len_async());
    on_clone!(work, |q| q.in_progress_async());
    on_clone!(work, |q| q.waiters_in_line_async());
    on_clone!(work, |q| q.dead_letters_async());
    on_clone!(work, |q| async move {
        let item = q.take_async(T).await?;
        item.complete_async().await
    });
}

fn coordination_futures_are_send(
    gate: &Barrier,
    double: &DoubleBarrier,
    count: &SharedCount,
    long: &AtomicLong,
    kazoo: &KazooCounter,
    ids: &IdGenerator,
) {
    on_clone!(gate, |b| b.set_async());
    on_clone!(gate, |b| b.remove_async());
    on_clone!(gate, |b| b.is_set_async());
    on_clone!(gate, |b| b.wait_async(T));
    on_clone!(double, |b| b.enter_async(T));
    on_clone!(double, |b| b.leave_async(T));
    on_clone!(count, |c| c.get_async());
    on_clone!(count, |c| c.count_async());
    on_clone!(count, |c| c.try_set_async(1, 0));
    on_clone!(count, |c| c.set_async(1));
    on_clone!(count, |c| c.add_async(1));
    on_clone!(count, |c| c.watch_async());
    on_clone!(long, |c| c.get_async());
    on_clone!(long, |c| c.increment_async());
    on_clone!(long, |c| c.compare_and_set_async(1, 2));
    on_clone!(long, |c| c.force_set_async(3));
    on_clone!(long, |c| c.watch_async());
    on_clone!(kazoo, |c| c.value_async());
    on_clone!(kazoo, |c| c.add_async(1));
    on_clone!(ids, |g| g.next_id_async());
    on_clone!(ids, |g| g.reserve_async(3, T));
    on_clone!(ids, |g| g.current_async());
}

#[allow(clippy::too_many_arguments)]
fn follower_futures_are_send(
    latch: &LeaderLatch,
    election: &LeaderElection,
    node_cache: &NodeCache,
    children: &ChildrenCache,
    tree: &TreeCache,
    group: &Group,
    member: &GroupMember,
    node: &PersistentNode,
    config: &ConfigWatch,
) {
    on_clone!(latch, |l| l.await_leadership_async(T));
    on_clone!(latch, |l| l.relinquish_async());
    on_clone!(latch, |l| l.participants_async());
    on_clone!(latch, |l| l.run_while_leader_async(T, |guard| async move {
        guard.relinquish_async().await
    }));
    on_clone!(election, |e| e.is_leader_async());
    on_clone!(election, |e| e.wait_until_leader_async(T));
    on_clone!(election, |e| e.leader_data_async());
    on_clone!(election, |e| e.resign_async());
    on_clone!(node_cache, |c| c.wait_initialized_async(T));
    on_clone!(children, |c| c.wait_initialized_async(T));
    on_clone!(tree, |c| c.wait_initialized_async(T));
    on_clone!(group, |g| g.wait_initialized_async(T));
    on_clone!(member.group(), |g| g.wait_initialized_async(T));
    on_clone!(node, |n| n.wait_created_async(T));
    on_clone!(config, |c| c.next_async(T));
}

fn constructors_are_send(zk: &zookeeper_mt::ZooKeeper) {
    let zk = zk.clone();
    drop(assert_send(async move {
        let _ = LeaderElection::new_async(&zk, "/e", b"me").await;
        let _ = ConfigWatch::new_async(&zk, "/c").await;
        let _ = LeaderLatch::builder("/l")
            .run_once_async(&zk, T, |_guard| async move { 7 })
            .await;
    }));
}

mod served {
    //! Against a real server: a clone is the same value, so dropping one clone stops
    //! nothing; the last one's drop does what the value's drop did.

    use super::T;
    use std::time::Duration;
    use zk_harness::testing::{unique_path, wait_until};
    use zookeeper_mt::ZooKeeper;
    use zookeeper_mt_recipes::barriers::DoubleBarrier;
    use zookeeper_mt_recipes::caches::NodeCache;
    use zookeeper_mt_recipes::leadership::LeaderElection;
    use zookeeper_mt_recipes::nodes::PersistentNode;

    fn connect() -> ZooKeeper {
        let servers = zk_harness::shared_test_connect_string();
        ZooKeeper::connect(&servers, Duration::from_secs(10)).expect("connect")
    }

    fn children(zk: &ZooKeeper, path: &str) -> usize {
        zk.get_children(path).map_or(0, |c| c.len())
    }

    #[test]
    fn the_last_clone_ends_what_the_value_holds() {
        let (zk, observer) = (connect(), connect());
        let wait = Duration::from_secs(60);

        let node_path = unique_path("clone-node");
        let node = PersistentNode::new(&zk, &node_path, b"x").unwrap();
        node.wait_created(wait).unwrap();
        let node_clone = node.clone();
        drop(node);
        assert!(observer.exists(&node_path).unwrap().is_some());
        node_clone.wait_created(T).unwrap();
        drop(node_clone);
        wait_until("the node deleted by the last clone's drop", wait, || {
            observer.exists(&node_path).unwrap().is_none()
        });

        let dir = unique_path("clone-election");
        let election = LeaderElection::new(&zk, &dir, b"me").unwrap();
        let election_clone = election.clone();
        drop(election);
        assert_eq!(children(&observer, &dir), 1, "a clone's drop resigned");
        assert!(election_clone.is_leader().unwrap());
        drop(election_clone);
        wait_until("the candidate withdrawn by the last drop", wait, || {
            children(&observer, &dir) == 0
        });

        let barrier_dir = unique_path("clone-double");
        let alone = DoubleBarrier::new(&zk, &barrier_dir, 1).unwrap();
        alone.enter(wait).unwrap();
        // Its participant node and the round's ready node.
        let entered = children(&observer, &barrier_dir);
        let alone_clone = alone.clone();
        drop(alone);
        assert_eq!(
            children(&observer, &barrier_dir),
            entered,
            "a clone's drop withdrew"
        );
        assert!(
            alone_clone.node().is_some(),
            "the clone is the entered participant"
        );
        drop(alone_clone);
        wait_until("the participant withdrawn by the last drop", wait, || {
            children(&observer, &barrier_dir) == entered - 1
        });

        let cache_path = unique_path("clone-cache");
        let cache = NodeCache::new(&zk, &cache_path).unwrap();
        cache.wait_initialized(wait).unwrap();
        let cache_clone = cache.clone();
        drop(cache);
        assert!(cache_clone.is_running(), "a clone's drop stopped the cache");
        drop(cache_clone);
    }
}
