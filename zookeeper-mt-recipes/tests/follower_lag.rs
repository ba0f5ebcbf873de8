//! Recipes against a follower that lags: a write is applied by the quorum, its reply is
//! lost, and the client reconnects to a member that has not applied it yet. A recipe
//! that looked at that member's state without a `sync` first would conclude wrongly
//! (an item taken by us reported as still there and then lost, a second lock or
//! election node next to the first, an orphan claim, a duplicate id). Each scenario
//! checks the recipe's guarantee once the member has caught up.
//!
//! One 3-member ensemble serves every scenario, in sequence, in one test (the ensemble
//! is dropped, and its processes killed, even if a scenario fails).

use std::thread;
use std::time::Duration;
use zk_harness::fault_proxy::Request;
use zk_harness::testing::unique_path;
use zk_harness::{LaggingEnsemble, OpCode, ServerOptions};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::shared::IdGenerator;
use zookeeper_mt_recipes::NodeOptions;

const T: Duration = Duration::from_secs(60);

/// Requests a member answers from its own state.
const READS: [OpCode; 6] = [
    OpCode::EXISTS,
    OpCode::GET_DATA,
    OpCode::GET_ACL,
    OpCode::GET_CHILDREN,
    OpCode::GET_CHILDREN2,
    OpCode::MULTI_READ,
];
const SESSION: Duration = Duration::from_secs(10);

fn connect_to(hosts: &str) -> ZooKeeper {
    ZooKeeper::connect(hosts, SESSION).expect("connect")
}

/// How a scenario went.
struct Outcome<T> {
    /// What the operation returned.
    result: T,
    /// Whether the client really reconnected to the lagging member (it may refuse a
    /// client that has seen a newer zxid; the outcome is checked either way).
    established: bool,
}

/// Runs `op` on a session connected to follower `a` through its proxy: the `nth` request
/// matching `cut` is applied, its reply is lost (the connection is cut) and the session
/// reconnects to follower `b`, stalled so it has not applied that write. `b` resumes
/// once the client's first request after the reconnect is seen; no read may come before
/// a `sync` there.
fn lagging<T: Send + 'static>(
    ens: &LaggingEnsemble,
    name: &str,
    cut: (u64, fn(&Request) -> bool),
    op: impl FnOnce(ZooKeeper) -> T + Send + 'static,
) -> Outcome<T> {
    lagging_after(ens, name, |_| (), cut, move |zk, ()| op(zk))
}

/// [`lagging`], with `prepare` run on the session before the member is stalled (its
/// writes are then applied everywhere, and the member accepts the session).
fn lagging_after<S: Send + 'static, T: Send + 'static>(
    ens: &LaggingEnsemble,
    name: &str,
    prepare: impl FnOnce(&ZooKeeper) -> S,
    (nth, cut): (u64, fn(&Request) -> bool),
    op: impl FnOnce(ZooKeeper, S) -> T + Send + 'static,
) -> Outcome<T> {
    let followers = ens.followers();
    let (a, b) = (followers[0], followers[1]);
    let proxy = ens.proxy(a);
    proxy.redirect(ens.member(a).connect_string()).unwrap();
    let zk = connect_to(&ens.connect_string(a));
    let prepared = prepare(&zk);
    // Waits for `b` to have applied everything so far (the client's session included).
    ens.stall_member(b).unwrap();
    let mark = proxy.mark();
    let fired_before = proxy.fired().len();
    proxy.cut_after_matching(nth, cut);
    proxy.redirect(ens.member(b).connect_string()).unwrap();
    let worker = thread::spawn(move || op(zk, prepared));
    let fired = proxy.wait_for_fired(fired_before + 1, T).unwrap()[fired_before];
    assert_eq!(
        fired.reply.map(|r| r.err),
        Some(0),
        "{name}: the write was applied"
    );
    let first = proxy.first_request_after(mark, fired.request.connection, Duration::from_secs(8));
    eprintln!(
        "{name}: requests since the stall: {}",
        proxy
            .requests_since(mark)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if first.is_some() {
        // Writes go through the leader; a read served by the lagging member before a
        // `sync` would see the state from before the write.
        let after: Vec<OpCode> = proxy
            .requests_since(mark)
            .iter()
            .filter(|r| r.connection > fired.request.connection)
            .map(|r| r.op)
            .take_while(|op| *op != OpCode::SYNC)
            .collect();
        assert!(
            !after.iter().any(|op| READS.contains(op)),
            "{name}: reconnected to the lagging member, the recipe read before a sync: {after:?}"
        );
    }
    ens.resume_member(b);
    let result = worker.join().expect("the operation panicked");
    eprintln!(
        "{name}: {}",
        if first.is_some() {
            "reconnected to the lagging member"
        } else {
            "the lagging member refused the client: scenario not established, outcome checked"
        }
    );
    Outcome {
        result,
        established: first.is_some(),
    }
}

/// A session on the leader, for setting up and checking (reads after a `sync`).
fn admin(ens: &LaggingEnsemble) -> ZooKeeper {
    let zk = connect_to(&ens.member(ens.leader().expect("a leader")).connect_string());
    zk.sync("/").unwrap();
    zk
}

fn is_multi(r: &Request) -> bool {
    r.op == OpCode::MULTI
}

fn is_create(r: &Request) -> bool {
    [OpCode::CREATE, OpCode::CREATE2, OpCode::MULTI].contains(&r.op)
}

fn is_write(r: &Request) -> bool {
    [OpCode::SET_DATA, OpCode::MULTI].contains(&r.op)
}

#[test]
fn recipes_keep_their_guarantees_across_a_lagging_member() {
    let ens = LaggingEnsemble::start(&ServerOptions::for_tests()).unwrap();
    let mut established = 0;

    // Queue take: the take (delete + receipt marker) applied, reply lost. The item is
    // ours: delivered, and not left in the queue.
    {
        let path = unique_path("lag-queue");
        Queue::new(admin(&ens), &path)
            .unwrap()
            .put(b"item")
            .unwrap();
        let queue_path = path.clone();
        let out = lagging(&ens, "queue take", (1, is_multi), move |zk| {
            Queue::new(&zk, &queue_path).unwrap().take(T)
        });
        established += usize::from(out.established);
        assert_eq!(out.result.unwrap(), b"item", "the taken item is delivered");
        let check = Queue::new(admin(&ens), &path).unwrap();
        assert!(check.try_take().unwrap().is_none(), "and delivered once");
    }

    // Work queue: the claim applied, reply lost. The item is ours (not an orphan claim
    // nobody completes), and completing it removes it.
    {
        let path = unique_path("lag-work-take");
        WorkQueue::new(admin(&ens), &path)
            .unwrap()
            .put(b"job")
            .unwrap();
        let work_path = path.clone();
        let out = lagging(&ens, "work-queue take", (1, is_multi), move |zk| {
            let work = WorkQueue::new(&zk, &work_path).unwrap();
            let item = work.take(T)?;
            let data = item.data().to_vec();
            item.complete()?;
            Ok::<_, zookeeper_mt_recipes::RecipeError>(data)
        });
        established += usize::from(out.established);
        assert_eq!(out.result.unwrap(), b"job");
        let check = WorkQueue::new(admin(&ens), &path).unwrap();
        assert_eq!(check.len().unwrap(), 0, "completed once");
        assert_eq!(check.in_progress().unwrap(), 0, "no orphan claim");
    }

    // Work queue: the completion applied, reply lost: completed once, not claimable.
    {
        let path = unique_path("lag-work-complete");
        WorkQueue::new(admin(&ens), &path)
            .unwrap()
            .put(b"job")
            .unwrap();
        let work_path = path.clone();
        // Claimed before the stall; the completion's multi is cut.
        let out = lagging_after(
            &ens,
            "work-queue complete",
            move |zk| {
                let work = WorkQueue::new(zk, &work_path).unwrap();
                let item = work.take(T).unwrap();
                (work, item)
            },
            (1, is_multi),
            |_zk, (_work, item)| item.complete(),
        );
        established += usize::from(out.established);
        out.result.unwrap();
        let check = WorkQueue::new(admin(&ens), &path).unwrap();
        assert_eq!(check.len().unwrap(), 0, "completed");
        assert!(
            check.try_take().unwrap().is_none(),
            "never handed out again"
        );
    }

    // Lock: the create of our node applied, reply lost. Exactly one node of ours, which
    // the release removes: a rival gets the lock at once.
    {
        let path = unique_path("lag-lock");
        // The directory first: the create that is cut is then the lock node's.
        zookeeper_mt_recipes::nodes::ensure_path(admin(&ens), &path).unwrap();
        let lock_path = path.clone();
        let out = lagging(&ens, "lock acquire", (1, is_create), move |zk| {
            let lock = Lock::new(&zk, &lock_path).unwrap();
            let guard = lock.acquire(T)?;
            let children = zk.get_children(&lock_path)?;
            guard.release()?;
            Ok::<_, zookeeper_mt_recipes::RecipeError>(children)
        });
        established += usize::from(out.established);
        let children = out.result.unwrap();
        assert_eq!(children.len(), 1, "one node, not two: {children:?}");
        let admin = admin(&ens);
        assert!(admin.get_children(&path).unwrap().is_empty(), "released");
        let rival = Lock::new(&admin, &path).unwrap();
        rival
            .try_acquire()
            .unwrap()
            .expect("a rival gets the lock")
            .release()
            .unwrap();
    }

    // Lock release: the delete applied, reply lost: released once, a rival gets it.
    {
        let path = unique_path("lag-release");
        let lock_path = path.clone();
        let out = lagging_after(
            &ens,
            "lock release",
            move |zk| {
                let lock = Lock::new(zk, &lock_path).unwrap();
                lock.acquire(T).unwrap()
            },
            (1, |r| r.op == OpCode::DELETE),
            |_zk, guard| guard.release(),
        );
        established += usize::from(out.established);
        out.result.unwrap();
        let admin = admin(&ens);
        assert!(admin.get_children(&path).unwrap().is_empty(), "released");
        Lock::new(&admin, &path)
            .unwrap()
            .try_acquire()
            .unwrap()
            .expect("a rival gets the lock")
            .release()
            .unwrap();
    }

    // Queue put: the item and its receipt applied, reply lost: enqueued exactly once.
    {
        let path = unique_path("lag-put");
        let queue_path = path.clone();
        let out = lagging_after(
            &ens,
            "queue put",
            move |zk| Queue::new(zk, &queue_path).unwrap(),
            (1, is_multi),
            |_zk, queue| queue.put(b"once"),
        );
        established += usize::from(out.established);
        out.result.unwrap();
        let check = Queue::new(admin(&ens), &path).unwrap();
        assert_eq!(check.try_take().unwrap().as_deref(), Some(&b"once"[..]));
        assert!(check.try_take().unwrap().is_none(), "enqueued once");
    }

    // Batched put: the batch's multi applied, reply lost: every item once, in order.
    {
        let path = unique_path("lag-put-all");
        let queue_path = path.clone();
        let out = lagging_after(
            &ens,
            "queue put_all",
            // Its directories made before the stall, so the batch's multi is its first
            // write after it (a reply seen after the stall would make the lagging
            // member refuse the session).
            move |zk| {
                zookeeper_mt_recipes::nodes::ensure_path(zk, &format!("{queue_path}/receipts"))
                    .unwrap();
                Queue::new(zk, &queue_path).unwrap()
            },
            (1, is_multi),
            |_zk, queue| queue.put_all(["b0", "b1", "b2"]),
        );
        established += usize::from(out.established);
        out.result.unwrap();
        let check = Queue::new(admin(&ens), &path).unwrap();
        for expected in ["b0", "b1", "b2"] {
            assert_eq!(
                check.try_take().unwrap().as_deref(),
                Some(expected.as_bytes())
            );
        }
        assert!(check.try_take().unwrap().is_none(), "enqueued once");
    }

    // Election: the join's create applied, reply lost: one candidate node, leading.
    {
        let path = unique_path("lag-election");
        zookeeper_mt_recipes::nodes::ensure_path(admin(&ens), &path).unwrap();
        let election_path = path.clone();
        let out = lagging(&ens, "election join", (1, is_create), move |zk| {
            let election = LeaderElection::new(&zk, &election_path, b"me")?;
            election.wait_until_leader(T)?;
            let children = zk.get_children(&election_path)?;
            election.resign()?;
            Ok::<_, zookeeper_mt_recipes::RecipeError>(children)
        });
        established += usize::from(out.established);
        let children = out.result.unwrap();
        assert_eq!(children.len(), 1, "one candidate node: {children:?}");
        assert!(admin(&ens).get_children(&path).unwrap().is_empty());
    }

    // Id generator: the CAS applied, reply lost: the id is ours, never handed out again.
    {
        let path = unique_path("lag-ids");
        IdGenerator::create_counter(admin(&ens), &path, &NodeOptions::default()).unwrap();
        let id_path = path.clone();
        let out = lagging(&ens, "id next", (1, is_write), move |zk| {
            IdGenerator::new(&zk, &id_path)?.next_id()
        });
        established += usize::from(out.established);
        let ours = out.result.unwrap();
        let rival = IdGenerator::new(admin(&ens), &path).unwrap();
        let theirs: Vec<u64> = (0..3).map(|_| rival.next_id().unwrap()).collect();
        assert!(
            theirs.iter().all(|id| *id > ours),
            "ids unique and increasing: ours {ours}, then {theirs:?}"
        );
    }

    eprintln!("{established} of 9 scenarios reconnected to the lagging member");
}
