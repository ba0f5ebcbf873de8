//! `RetryPolicy`: its defaults (the rules the recipes always had), its validation, the
//! recipes' `with_retry_policy` / `with_reconnect_timeout` / `retry_policy`, and a queue
//! put against a real server behind a proxy that is cut: a short reconnect timeout gives
//! up with `ConnectionLoss`, the default rides out a short outage.

mod common;

use common::{connect, connect_to, unique_path, FaultProxy};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::Error;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::queues::BoundedQueue;
use zookeeper_mt_recipes::queues::DelayedQueue;
use zookeeper_mt_recipes::queues::PriorityQueue;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::{PauseGrowth, RecipeError, RetryPolicy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn the_default_is_the_old_behaviour() {
    let policy = RetryPolicy::default();
    assert_eq!(policy, RetryPolicy::new());
    assert_eq!(
        policy.reconnect_timeout(),
        None,
        "twice the session timeout"
    );
    assert_eq!(policy.first_pause(), ms(5));
    assert_eq!(policy.pause_growth(), PauseGrowth::Linear(ms(5)));
    assert_eq!(policy.max_pause(), ms(100));
    // 5 ms longer each try, at most 100 ms.
    let pauses: Vec<_> = (1..=22).map(|n| policy.pause(n)).collect();
    let old: Vec<_> = (1..=22u64).map(|n| ms(5 * n.min(20))).collect();
    assert_eq!(pauses, old);
    assert_eq!(policy.pause(0), ms(5));
    assert_eq!(policy.pause(u32::MAX), ms(100));
}

#[test]
fn pauses_grow_as_told_and_stop_at_the_longest() {
    let doubling = RetryPolicy::new()
        .with_pauses(ms(10), PauseGrowth::Exponential(2), ms(1000))
        .unwrap();
    let pauses: Vec<_> = (1..=9).map(|n| doubling.pause(n)).collect();
    let expected = [10, 20, 40, 80, 160, 320, 640, 1000, 1000].map(ms);
    assert_eq!(pauses, expected);
    assert_eq!(doubling.pause(u32::MAX), ms(1000), "no overflow");
    let constant = RetryPolicy::new()
        .with_pauses(ms(50), PauseGrowth::Linear(Duration::ZERO), ms(50))
        .unwrap();
    assert!((1..100).all(|n| constant.pause(n) == ms(50)));
    let once = RetryPolicy::new()
        .with_pauses(ms(50), PauseGrowth::Exponential(1), ms(80))
        .unwrap();
    assert_eq!(once.pause(7), ms(50));
    // Setting the pauses keeps the reconnect timeout, and the other way round.
    let both = RetryPolicy::new()
        .with_reconnect_timeout(ms(300))
        .with_pauses(ms(1), PauseGrowth::Linear(ms(1)), ms(2))
        .unwrap()
        .with_reconnect_timeout(ms(400));
    assert_eq!(both.reconnect_timeout(), Some(ms(400)));
    assert_eq!(both.max_pause(), ms(2));
}

#[test]
fn nonsense_is_refused_where_it_is_given() {
    let invalid = |result: zookeeper_mt_recipes::Result<RetryPolicy>| {
        assert!(
            matches!(result, Err(RecipeError::InvalidArgument(_))),
            "{result:?}"
        );
    };
    let policy = RetryPolicy::new();
    invalid(policy.with_pauses(Duration::ZERO, PauseGrowth::Linear(ms(5)), ms(100)));
    invalid(policy.with_pauses(ms(100), PauseGrowth::Linear(ms(5)), ms(99)));
    invalid(policy.with_pauses(ms(5), PauseGrowth::Exponential(0), ms(100)));
    invalid(policy.with_pauses(Duration::ZERO, PauseGrowth::Linear(ms(5)), Duration::ZERO));
    // The extremes that make sense are accepted.
    policy
        .with_pauses(ms(1), PauseGrowth::Exponential(u32::MAX), Duration::MAX)
        .unwrap();
    let at_once = policy.with_reconnect_timeout(Duration::ZERO);
    assert_eq!(at_once.reconnect_timeout(), Some(Duration::ZERO));
}

#[test]
fn the_default_reconnect_timeout_is_twice_the_session_timeout() {
    let zk = connect();
    let session = zk.session_timeout().unwrap();
    assert_eq!(
        RetryPolicy::default().reconnect_timeout_for(&zk),
        2 * session.max(Duration::from_secs(1))
    );
    assert_eq!(
        RetryPolicy::default()
            .with_reconnect_timeout(ms(300))
            .reconnect_timeout_for(&zk),
        ms(300)
    );
}

#[test]
fn every_recipe_with_a_reconnect_timeout_takes_a_policy() {
    let zk = connect();
    let path = unique_path("policies");
    let custom = RetryPolicy::new()
        .with_reconnect_timeout(ms(700))
        .with_pauses(ms(2), PauseGrowth::Exponential(3), ms(50))
        .unwrap();
    // The shorthand changes the reconnect timeout of the policy set before.
    let shorthand = custom.with_reconnect_timeout(ms(900));
    let short = RetryPolicy::new().with_reconnect_timeout(ms(900));
    macro_rules! check {
        ($new:expr) => {{
            assert_eq!($new.retry_policy(), RetryPolicy::default());
            assert_eq!($new.with_retry_policy(custom).retry_policy(), custom);
            assert_eq!($new.with_reconnect_timeout(ms(900)).retry_policy(), short);
            assert_eq!(
                $new.with_retry_policy(custom)
                    .with_reconnect_timeout(ms(900))
                    .retry_policy(),
                shorthand
            );
        }};
    }
    check!(Queue::new(&zk, &format!("{path}/q")).unwrap());
    check!(PriorityQueue::new(&zk, &format!("{path}/p")).unwrap());
    check!(DelayedQueue::new(&zk, &format!("{path}/d")).unwrap());
    check!(BoundedQueue::new(&zk, &format!("{path}/b"), 3).unwrap());
    check!(Lock::new(&zk, &format!("{path}/l")).unwrap());
    check!(WorkQueue::new(&zk, &format!("{path}/w")).unwrap());
}

/// A client behind a proxy, its queue (with `policy`), and the queue seen directly.
fn queue_behind_proxy(name: &str, policy: RetryPolicy) -> (FaultProxy, Queue, Queue) {
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let path = unique_path(name);
    let queue = Queue::new(connect_to(&proxy.addr), &path)
        .unwrap()
        .with_retry_policy(policy);
    queue.put(b"before").unwrap(); // the session works, the queue exists
    let direct = Queue::new(connect(), &path).unwrap();
    (proxy, queue, direct)
}

#[test]
fn a_short_reconnect_timeout_gives_up_with_connection_loss() {
    let limit = ms(300);
    let (proxy, queue, direct) =
        queue_behind_proxy("short", RetryPolicy::new().with_reconnect_timeout(limit));
    proxy.cut();
    let started = Instant::now();
    let result = queue.put(b"during");
    let took = started.elapsed();
    assert_eq!(result, Err(RecipeError::ZooKeeper(Error::ConnectionLoss)));
    assert!(took >= limit, "gave up after {took:?}, before the limit");
    let default = RetryPolicy::default().reconnect_timeout_for(&connect());
    assert!(
        took < default / 2,
        "took {took:?}: the default ({default:?}) was used"
    );
    // The session outlives the cut; the next put goes through.
    proxy.restore();
    queue.put(b"after").unwrap();
    assert_eq!(direct.try_take().unwrap(), Some(b"before".to_vec()));
    assert_eq!(direct.try_take().unwrap(), Some(b"after".to_vec()));
    assert_eq!(
        direct.try_take().unwrap(),
        None,
        "the failed put enqueued nothing"
    );
}

#[test]
fn the_default_rides_out_a_short_cut() {
    let cut = ms(800);
    let (proxy, queue, direct) = queue_behind_proxy("default", RetryPolicy::default());
    assert!(RetryPolicy::default().reconnect_timeout_for(&connect()) > 4 * cut);
    proxy.cut();
    let put = thread::spawn(move || queue.put(b"during"));
    // The cut outlasts the short limit above (nothing to await: its length is the test).
    thread::sleep(cut);
    assert!(!put.is_finished(), "the put ended during the cut");
    proxy.restore();
    put.join().unwrap().unwrap();
    assert_eq!(direct.try_take().unwrap(), Some(b"before".to_vec()));
    assert_eq!(direct.try_take().unwrap(), Some(b"during".to_vec()));
    assert_eq!(direct.try_take().unwrap(), None, "enqueued once");
}

/// The followers' default is the rule they always had (10 ms, doubling, at most 1 s, no
/// reconnect timeout), and a follower built with another policy follows its node: a
/// persistent node deleted behind its back is created again, and a tree cache sees it.
#[test]
fn followers_take_a_policy_and_default_to_their_old_rule() {
    let followers = RetryPolicy::for_followers();
    assert_eq!(followers.reconnect_timeout(), None);
    assert_eq!(followers.first_pause(), ms(10));
    assert_eq!(followers.pause_growth(), PauseGrowth::Exponential(2));
    assert_eq!(followers.max_pause(), ms(1000));

    let zk = connect();
    let patient = RetryPolicy::new()
        .with_pauses(ms(1), PauseGrowth::Linear(ms(1)), ms(3))
        .unwrap();
    let path = unique_path("follower-policy");
    let node_path = format!("{path}/member");
    let cache = zookeeper_mt_recipes::caches::TreeCache::builder(&path)
        .retry_policy(patient)
        .build(&zk)
        .unwrap();
    let node = zookeeper_mt_recipes::nodes::PersistentNode::builder(&node_path)
        .data(b"x")
        .retry_policy(patient)
        .build(&zk)
        .unwrap();
    node.wait_created(Duration::from_secs(20)).unwrap();
    let first = zk.exists(&node_path).unwrap().expect("created").czxid;
    zk.delete(&node_path, None).unwrap();
    common::wait_until("the node is created again", || {
        zk.exists(&node_path)
            .unwrap()
            .is_some_and(|stat| stat.czxid != first)
    });
    cache.wait_initialized(Duration::from_secs(20)).unwrap();
    common::wait_until("the cache sees the node again", || {
        cache
            .snapshot()
            .get(&node_path)
            .is_some_and(|data| data.data == b"x")
    });
}
