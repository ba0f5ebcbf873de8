//! Every recipe takes the same handle type: a plain `&ZooKeeper` or a managed client.
//! On a managed client each call runs on the session current when it starts: what a
//! call held in a session ends with it (a lock guard reports the loss), and the calls
//! after the expiry run on the new session, with no new recipe value.

mod common;

use std::time::{Duration, SystemTime};
use zk_harness::executor::block_on;
use zk_harness::testing::poll_until;
use zookeeper_mt::{ManagedZooKeeper, Timeout, ZooKeeper};
use zookeeper_mt_recipes::locks::{LockLost, SemaphoreLayout};
use zookeeper_mt_recipes::{
    Barrier, BoundedQueue, DelayedQueue, DoubleBarrier, IdGenerator, LeaderElection,
    LeaseSemaphore, Lock, MultiLock, NodeOptions, PriorityQueue, Queue, ReadWriteLock,
    ReentrantLock, Semaphore, WorkQueue,
};

const WAIT: Duration = Duration::from_secs(30);

/// Expires the managed client's current session (a second handle resumes it and closes
/// it, repeated until the client saw the expiry) and waits for the next session.
fn expire_and_renew(managed: &ManagedZooKeeper, hosts: &str) -> u64 {
    let before = managed.generation();
    let zk = managed.current();
    let events = zk.session_events();
    let id = zk.client_id().unwrap();
    let mut expired = false;
    for _ in 0..10 {
        match ZooKeeper::builder(hosts).session(id).connect() {
            Ok(twin) => twin.close().unwrap(),
            Err(zookeeper_mt::Error::SessionExpired) => {}
            Err(error) => panic!("resuming the session: {error}"),
        }
        while let Ok(event) = events.recv_timeout(Duration::from_secs(3)) {
            if event.state.is_terminal() {
                expired = true;
                break;
            }
        }
        if expired {
            break;
        }
    }
    assert!(expired, "could not expire the session");
    let session = managed.wait_connected(WAIT).unwrap();
    assert!(session.generation > before, "no new session");
    session.generation
}

/// The session id of the node's owner (0: not ephemeral, or gone).
fn owner(observer: &ZooKeeper, path: &str) -> i64 {
    observer
        .exists(path)
        .unwrap()
        .map_or(0, |stat| stat.ephemeral_owner)
}

fn session_id(managed: &ManagedZooKeeper) -> i64 {
    managed.current().client_id().unwrap().session_id
}

#[test]
fn call_style_recipes_carry_on_in_a_managed_clients_new_session() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let observer = common::connect_to(&hosts);
    let base = common::unique_path("managed-recipes");

    // Every call-style recipe made from the managed client (by reference and by value).
    let lock = Lock::new(&managed, &format!("{base}/lock")).unwrap();
    let reentrant = ReentrantLock::new(managed.clone(), &format!("{base}/reentrant")).unwrap();
    let multi = MultiLock::new(
        &managed,
        &[&format!("{base}/multi-a"), &format!("{base}/multi-b")],
    )
    .unwrap();
    let rwlock = ReadWriteLock::new(&managed, &format!("{base}/rw")).unwrap();
    let semaphore = Semaphore::new(&managed, &format!("{base}/sem"), 2).unwrap();
    let leases = LeaseSemaphore::new(
        &managed,
        &format!("{base}/leases"),
        2,
        SemaphoreLayout::Curator,
    )
    .unwrap();
    let queue = Queue::new(&managed, &format!("{base}/queue")).unwrap();
    let priority = PriorityQueue::new(&managed, &format!("{base}/priority")).unwrap();
    let delayed = DelayedQueue::new(&managed, &format!("{base}/delayed")).unwrap();
    let bounded = BoundedQueue::new(&managed, &format!("{base}/bounded"), 4).unwrap();
    let work = WorkQueue::new(&managed, &format!("{base}/work")).unwrap();
    let ids_path = format!("{base}/ids");
    IdGenerator::create_counter(&managed, &ids_path, &NodeOptions::default()).unwrap();
    let ids = IdGenerator::new(&managed, &ids_path).unwrap();
    let barrier = Barrier::new(&managed, &format!("{base}/barrier"));
    let double = DoubleBarrier::new(&managed, &format!("{base}/double"), 1).unwrap();

    // First session: a lock held, an item queued, an id handed out.
    let first = session_id(&managed);
    let held = lock.acquire(WAIT).unwrap();
    assert_eq!(owner(&observer, held.node()), first);
    queue.put(b"queued before").unwrap();
    let first_id = ids.next_id().unwrap();
    let first_election = LeaderElection::new(&managed, &format!("{base}/election"), b"a").unwrap();
    assert!(first_election.is_leader().unwrap());

    let generation = expire_and_renew(&managed, &hosts);
    assert_eq!(generation, 2);
    let second = session_id(&managed);
    assert_ne!(first, second);

    // What the first session held went with it, and says so.
    assert!(
        poll_until(WAIT, || held.lost_reason().is_some()),
        "the guard of the expired session does not report the loss"
    );
    // With no disconnect grace the first report is the disconnection that led there.
    assert!(matches!(
        held.lost_reason(),
        Some(LockLost::SessionExpired | LockLost::Disconnected)
    ));
    assert_eq!(owner(&observer, held.node()), 0);
    drop(held);

    // Every recipe works again, on the new session, with the same values.
    let again = lock.acquire(WAIT).unwrap();
    assert_eq!(owner(&observer, again.node()), second);
    assert!(again.lost_reason().is_none());
    drop(again);
    let async_again = block_on(lock.acquire_async(WAIT)).unwrap();
    assert_eq!(owner(&observer, async_again.node()), second);
    drop(async_again);

    let inner = reentrant.acquire(WAIT).unwrap();
    let nested = reentrant.acquire(WAIT).unwrap();
    drop(nested);
    drop(inner);

    let both = multi.acquire(WAIT).unwrap();
    for guard in both.guards() {
        assert_eq!(owner(&observer, guard.node()), second);
    }
    drop(both);

    drop(rwlock.write(WAIT).unwrap());
    let readers = (rwlock.read(WAIT).unwrap(), rwlock.read(WAIT).unwrap());
    drop(readers);

    let permits = (
        semaphore.acquire(WAIT).unwrap(),
        semaphore.acquire(WAIT).unwrap(),
    );
    assert!(semaphore.try_acquire().unwrap().is_none());
    drop(permits);
    let granted = leases.acquire(2, WAIT).unwrap();
    assert_eq!(granted.len(), 2);
    drop(granted);

    // The item queued in the first session is still there (items are persistent).
    assert_eq!(queue.take(WAIT).unwrap(), b"queued before");
    queue.put(b"queued after").unwrap();
    assert_eq!(
        block_on(queue.take_async(Timeout::from(WAIT))).unwrap(),
        b"queued after"
    );
    priority.put(b"low", 9).unwrap();
    priority.put(b"high", 1).unwrap();
    assert_eq!(priority.take(WAIT).unwrap(), b"high");
    assert_eq!(priority.take(WAIT).unwrap(), b"low");
    delayed.put_at(b"due", SystemTime::now()).unwrap();
    assert_eq!(delayed.take(WAIT).unwrap(), b"due");
    bounded.put(b"bounded", WAIT).unwrap();
    assert_eq!(bounded.take(WAIT).unwrap(), b"bounded");

    work.put(b"job").unwrap();
    let item = work.take(WAIT).unwrap();
    assert_eq!(item.data(), b"job");
    item.complete().unwrap();
    assert_eq!(work.len().unwrap(), 0);

    let next_id = ids.next_id().unwrap();
    assert!(
        next_id > first_id,
        "ids went back: {next_id} after {first_id}"
    );

    barrier.set().unwrap();
    assert!(barrier.wait(Duration::from_millis(50)).is_err());
    barrier.remove().unwrap();
    barrier.wait(WAIT).unwrap();

    double.enter(WAIT).unwrap();
    double.leave(WAIT).unwrap();

    // The first candidate went with its session; a new one leads on the new session.
    drop(first_election);
    let election = LeaderElection::new(&managed, &format!("{base}/election"), b"b").unwrap();
    assert!(election.is_leader().unwrap());
    assert_eq!(election.leader_data().unwrap().as_deref(), Some(&b"b"[..]));
    drop(election);

    managed.close();
}

/// A plain handle and a managed client are interchangeable at every constructor: the
/// same values made from either see each other's nodes.
#[test]
fn plain_and_managed_handles_share_one_recipe() {
    let hosts = zk_harness::shared_test_connect_string();
    let plain = common::connect_to(&hosts);
    let managed = ManagedZooKeeper::new(plain.clone());
    let path = common::unique_path("managed-plain-lock");
    let by_plain = Lock::new(&plain, &path).unwrap();
    let by_managed = Lock::new(&managed, &path).unwrap();
    let held = by_plain.acquire(WAIT).unwrap();
    assert!(by_managed.try_acquire().unwrap().is_none());
    drop(held);
    let held = by_managed.acquire(WAIT).unwrap();
    assert!(by_plain.try_acquire().unwrap().is_none());
    drop(held);
}

/// A take waiting on an empty queue when the managed client's session expires ends with
/// an error (its session is over); takes on the new session wait on a watch of the new
/// session: one blocked before the put gets the item, exactly once.
#[test]
fn a_take_waiting_across_an_expiry_ends_and_the_next_session_takes_over() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let observer = common::connect_to(&hosts);
    let path = common::unique_path("managed-take");
    let queue = Queue::new(&managed, &path).unwrap();
    std::thread::scope(|scope| {
        let stranded = scope.spawn(|| queue.take(WAIT));
        common::wait_until("the first take waits on the queue's watch", || {
            queue.waiting() == 1
        });
        expire_and_renew(&managed, &hosts);
        let ended = stranded.join().unwrap();
        assert!(ended.is_err(), "a take outlived its session: {ended:?}");

        let waiting = scope.spawn(|| queue.take(WAIT));
        common::wait_until("the new take waits on the queue's watch", || {
            queue.waiting() == 1
        });
        queue.put(b"after the expiry").unwrap();
        assert_eq!(waiting.join().unwrap().unwrap(), b"after the expiry");
    });
    assert!(
        queue.try_take().unwrap().is_none(),
        "the item was taken twice"
    );
    assert_eq!(
        observer.get_children(&path).unwrap().len(),
        1,
        "only the receipts node is left"
    );
    managed.close();
}
