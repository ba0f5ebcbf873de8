//! Shared values against a real server: layouts, versioned CAS, concurrent increments
//! (each counted once), corrupt data as typed errors, the latest-value watch, lost
//! replies under connection cuts, the async forms on a plain executor, and a managed
//! client's new session.

mod common;

use common::{connect, connect_to, unique_path, Proxy};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::{Acl, Error, Perms, ZooKeeper};
use zookeeper_mt_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};
use zookeeper_mt_recipes::shared::{AtomicLong, KazooCounter, SharedCount};
use zookeeper_mt_recipes::{NodeOptions, RecipeError};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn shared_count_layout_and_versioned_sets() {
    let zk = connect();
    let path = unique_path("count");
    let count = SharedCount::new(&zk, &path, 7).unwrap();
    let (data, stat) = zk.get(&path).unwrap();
    assert_eq!(data, vec![0, 0, 0, 7], "Curator's 4-byte big-endian int");

    let seen = count.get().unwrap();
    assert_eq!((seen.value, seen.version), (7, stat.version));
    assert!(count.try_set(8, seen.version).unwrap());
    assert!(
        !count.try_set(9, seen.version).unwrap(),
        "a stale version must not write"
    );
    assert_eq!(count.count().unwrap(), 8);
    count.set(-5).unwrap();
    assert_eq!(zk.get(&path).unwrap().0, (-5i32).to_be_bytes());
    let change = count.add(3).unwrap();
    assert_eq!((change.succeeded, change.pre, change.post), (true, -5, -2));

    // A second SharedCount on an existing node keeps its value (the seed is only for
    // creation).
    let again = SharedCount::new(&zk, &path, 100).unwrap();
    assert_eq!(again.count().unwrap(), -2);

    // Overflow is refused and writes nothing.
    count.set(i32::MAX).unwrap();
    let version = count.get().unwrap().version;
    assert!(matches!(count.add(1), Err(RecipeError::InvalidArgument(_))));
    assert_eq!(count.get().unwrap().version, version);
}

#[test]
fn corrupt_data_is_a_typed_error() {
    let zk = connect();
    let path = unique_path("corrupt");
    let count = SharedCount::new(&zk, &path, 1).unwrap();
    let long = AtomicLong::new(&zk, &format!("{path}-long")).unwrap();
    let text = KazooCounter::new(&zk, &format!("{path}-text")).unwrap();

    zk.set(&path, &[0, 0, 1], None).unwrap();
    assert!(matches!(count.get(), Err(RecipeError::Corrupt(_))));
    assert!(matches!(count.add(1), Err(RecipeError::Corrupt(_))));
    assert_eq!(zk.get(&path).unwrap().0, vec![0, 0, 1], "nothing written");

    zk.set(long.path(), &[1, 2, 3, 4], None).unwrap();
    assert!(matches!(long.increment(), Err(RecipeError::Corrupt(_))));
    zk.set(text.path(), b"12.5", None).unwrap();
    match text.add(1) {
        Err(RecipeError::Corrupt(message)) => assert!(message.contains("12.5"), "{message}"),
        other => panic!("a float is not a kazoo int counter: {other:?}"),
    }

    // A plain set repairs them.
    count.set(4).unwrap();
    assert_eq!(count.add(1).unwrap().post, 5);
}

#[test]
fn atomic_long_operations() {
    let zk = connect();
    let path = unique_path("long");
    let value = AtomicLong::new(&zk, &path).unwrap();
    assert_eq!(zk.get(&path).unwrap().0, vec![0; 8], "8-byte big-endian 0");
    assert_eq!(value.get().unwrap(), 0);

    let up = value.increment().unwrap();
    assert_eq!((up.succeeded, up.pre, up.post), (true, 0, 1));
    assert_eq!(value.add(1 << 40).unwrap().post, (1 << 40) + 1);
    assert_eq!(value.decrement().unwrap().post, 1 << 40);
    assert_eq!(value.subtract(1 << 40).unwrap().post, 0);

    let hit = value.compare_and_set(0, 42).unwrap();
    assert_eq!((hit.succeeded, hit.pre, hit.post), (true, 0, 42));
    let miss = value.compare_and_set(0, 7).unwrap();
    assert_eq!((miss.succeeded, miss.pre, miss.post), (false, 42, 42));
    assert_eq!(value.get().unwrap(), 42);

    let set = value.try_set(-9).unwrap();
    assert_eq!((set.succeeded, set.pre, set.post), (true, 42, -9));
    value.force_set(i64::MAX).unwrap();
    assert_eq!(zk.get(&path).unwrap().0, i64::MAX.to_be_bytes());
    assert!(matches!(
        value.increment(),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(matches!(
        value.subtract(i64::MIN),
        Err(RecipeError::InvalidArgument(_))
    ));

    // A deleted node is created again at 0, as Curator does.
    zk.delete(&path, None).unwrap();
    assert_eq!(value.increment().unwrap().post, 1);
}

#[test]
fn kazoo_counter_layout() {
    let zk = connect();
    let path = unique_path("text");
    let counter = KazooCounter::new(&zk, &path).unwrap();
    assert_eq!(
        zk.get(&path).unwrap().0,
        b"",
        "created empty, as ensure_path does"
    );
    assert_eq!(counter.value().unwrap(), 0);
    let change = counter.add(12).unwrap();
    assert_eq!((change.pre, change.post), (0, 12));
    assert_eq!(zk.get(&path).unwrap().0, b"12");
    assert_eq!(counter.subtract(20).unwrap().post, -8);
    assert_eq!(zk.get(&path).unwrap().0, b"-8", "repr(int)");
}

#[test]
fn nodes_get_the_acl_asked_for() {
    let zk = connect();
    let path = unique_path("acl");
    // Everyone may read, write and create, nobody may delete.
    let keep = Perms::READ | Perms::WRITE | Perms::CREATE;
    let no_delete = NodeOptions::default().acl(vec![Acl::new(keep, "world", "anyone")]);
    let count = SharedCount::with_options(&zk, &format!("{path}/a/count"), 1, no_delete).unwrap();
    let (acl, _) = zk.get_acl(count.path()).unwrap();
    assert_eq!(acl[0].perms, keep);
    let (parent_acl, _) = zk.get_acl(&format!("{path}/a")).unwrap();
    assert_eq!(parent_acl[0].perms, keep);
    assert!(matches!(zk.delete(count.path(), None), Err(Error::NoAuth)));
    assert_eq!(count.add(1).unwrap().post, 2);
}

/// Threads on separate sessions increment one node: every increment is applied once,
/// on top of the one before it, so the `pre` values are exactly 0..total.
#[test]
fn concurrent_increments_are_each_counted_once() {
    let path = unique_path("race");
    let threads = 4;
    let per_thread = 50;
    let mut handles = Vec::new();
    for _ in 0..threads {
        let path = path.clone();
        handles.push(thread::spawn(move || {
            let zk = connect();
            let count = SharedCount::new(&zk, &path, 0).unwrap();
            (0..per_thread)
                .map(|_| count.add(1).unwrap())
                .collect::<Vec<_>>()
        }));
    }
    let mut pres = BTreeSet::new();
    for handle in handles {
        for change in handle.join().unwrap() {
            assert!(change.succeeded);
            assert_eq!(change.post, change.pre + 1);
            assert!(
                pres.insert(change.pre),
                "two increments from {}",
                change.pre
            );
        }
    }
    let total = threads * per_thread;
    assert_eq!(pres, (0..total).collect::<BTreeSet<_>>());
    let zk = connect();
    assert_eq!(
        SharedCount::new(&zk, &path, 0).unwrap().count().unwrap(),
        total
    );
}

#[test]
fn a_slow_watcher_gets_the_latest_and_the_final_value() {
    let zk = connect();
    let path = unique_path("watch");
    let count = SharedCount::new(&zk, &path, 0).unwrap();
    let mut watch = count.watch().unwrap();
    let first = watch.next(WAIT).expect("the current value first");
    assert_eq!(first.value, 0);
    assert!(matches!(
        watch.next(Duration::from_millis(100)),
        Err(RecipeError::Timeout)
    ));

    // Many writes while the reader does not read: it then gets the newest, not a backlog.
    for _ in 0..30 {
        count.add(1).unwrap();
    }
    let mut last = first;
    let deadline = Instant::now() + WAIT;
    while last.value != 30 {
        assert!(
            Instant::now() < deadline,
            "final value never came: {last:?}"
        );
        let next = watch.next(WAIT).expect("a newer value");
        assert!(next.stat.mzxid > last.stat.mzxid, "values in mzxid order");
        last = next;
    }
    assert_eq!(watch.latest().map(|v| v.value), Some(30));
    assert!(matches!(
        watch.next(Duration::from_millis(100)),
        Err(RecipeError::Timeout)
    ));

    // Writes from another session, and a corrupt value reported in order.
    let other = connect();
    other.set(&path, &[0, 0, 0, 9], None).unwrap();
    assert_eq!(watch.next(WAIT).unwrap().value, 9);
    other.set(&path, b"bad", None).unwrap();
    assert!(matches!(watch.next(WAIT), Err(RecipeError::Corrupt(_))));
    other.set(&path, &[0, 0, 0, 10], None).unwrap();
    assert_eq!(watch.next(WAIT).unwrap().value, 10);

    // Deleted and re-created: the new value comes, the deletion is not a value.
    other.delete(&path, None).unwrap();
    other
        .create(&path, &[0, 0, 0, 11], zookeeper_mt::CreateMode::Persistent)
        .unwrap();
    assert_eq!(watch.next(WAIT).unwrap().value, 11);

    // The session ends: the watch stops and says why.
    let watcher_zk = connect();
    let mut ended = SharedCount::new(&watcher_zk, &path, 0)
        .unwrap()
        .watch()
        .unwrap();
    assert_eq!(ended.next(WAIT).unwrap().value, 11);
    watcher_zk.close().unwrap();
    assert!(ended.next(WAIT).is_err());
    drop(watch);
    drop(ended);
    common::assert_no_leftover_contexts(&zk);
}

/// The async forms on a plain executor give what the blocking calls give; a
/// `next_async` dropped while it waits loses nothing; nothing is left registered.
#[test]
fn async_forms_on_a_plain_executor() {
    use zk_harness::executor::{block_on, poll_once};
    let zk = connect();
    let long = AtomicLong::new(&zk, &unique_path("async-long")).unwrap();
    let count = SharedCount::new(&zk, &unique_path("async-count"), 3).unwrap();
    let kazoo = KazooCounter::new(&zk, &unique_path("async-kazoo")).unwrap();
    block_on(async {
        assert_eq!(long.increment_async().await.unwrap().post, 1);
        assert_eq!(long.add_async(4).await.unwrap().post, 5);
        assert_eq!(long.subtract_async(2).await.unwrap().post, 3);
        assert_eq!(long.decrement_async().await.unwrap().post, 2);
        assert!(long.compare_and_set_async(2, 7).await.unwrap().succeeded);
        let refused = long.compare_and_set_async(2, 9).await.unwrap();
        assert!(!refused.succeeded && refused.pre == 7);
        assert!(long.try_set_async(8).await.unwrap().succeeded);
        assert_eq!(long.get_async().await.unwrap(), 8);

        let mut watch = long.watch_async().await.unwrap();
        assert_eq!(watch.next_async(WAIT).await.unwrap().value, 8);
        assert!(matches!(
            watch.next_async(Duration::from_millis(50)).await,
            Err(RecipeError::Timeout)
        ));
        {
            let mut pending = Box::pin(watch.next_async(WAIT));
            assert!(poll_once(&mut pending).is_pending());
        }
        long.force_set_async(11).await.unwrap();
        assert_eq!(watch.next_async(WAIT).await.unwrap().value, 11);
        assert_eq!(long.get_versioned_async().await.unwrap().value, 11);

        let seen = count.get_async().await.unwrap();
        assert_eq!(seen.value, 3);
        assert!(count.try_set_async(4, seen.version).await.unwrap());
        assert!(!count.try_set_async(5, seen.version).await.unwrap());
        assert_eq!(count.add_async(-1).await.unwrap().post, 3);
        count.set_async(10).await.unwrap();
        assert_eq!(count.count_async().await.unwrap(), 10);
        let mut counted = count.watch_async().await.unwrap();
        assert_eq!(counted.next_async(WAIT).await.unwrap().value, 10);

        assert_eq!(kazoo.add_async(6).await.unwrap().post, 6);
        assert_eq!(kazoo.subtract_async(2).await.unwrap().post, 4);
        assert_eq!(kazoo.value_async().await.unwrap(), 4);
        let mut text = kazoo.watch_async().await.unwrap();
        assert_eq!(text.next_async(WAIT).await.unwrap().value, 4);
    });
    // The watches were dropped with the block: their tasks end on the driver.
    common::assert_no_leftover_contexts_soon(&zk);
}

/// Expires `zk`'s session: a second handle resumes it and closes it. The two handles
/// can steal the connection from each other (a resumed session closes the other
/// connection), so the close may not get through: repeat until `zk` sees the expiry.
fn expire(zk: &ZooKeeper, hosts: &str) {
    let events = zk.session_events();
    let id = zk.client_id().unwrap();
    for _ in 0..10 {
        match ZooKeeper::builder(hosts).session(id).connect() {
            Ok(twin) => twin.close().unwrap(),
            Err(Error::SessionExpired) => {}
            Err(error) => panic!("resuming the session: {error}"),
        }
        while let Ok(event) = events.recv_timeout(Duration::from_secs(3)) {
            if event.state.is_terminal() {
                return;
            }
        }
    }
    panic!("could not expire the session");
}

/// On a managed client a counter works in each new session, and its watch carries on
/// there: a change made while no session of the client watched arrives once the new
/// session has read the node, and later changes follow.
#[test]
fn a_managed_counter_and_its_watch_carry_on_in_a_new_session() {
    let hosts = zk_harness::shared_test_connect_string();
    let managed = ManagedZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let states = managed.states();
    let path = unique_path("managed");
    let count = SharedCount::new(&managed, &path, 1).unwrap();
    let mut watch = count.watch().unwrap();
    assert_eq!(watch.next(WAIT).unwrap().value, 1);

    let old = managed.current();
    expire(&old, &hosts);
    let other = SharedCount::new(connect(), &path, 0).unwrap();
    assert_eq!(other.add(1).unwrap().post, 2);
    loop {
        let event = states.recv_timeout(WAIT).expect("a new session in time");
        if event.state == ConnectionState::NewSession {
            break;
        }
    }
    assert_eq!(watch.next(WAIT).unwrap().value, 2);
    assert_eq!(count.add(3).unwrap().post, 5, "a change on the new session");
    assert_eq!(watch.next(WAIT).unwrap().value, 5);
    assert!(watch.is_running());
    assert_eq!(old.live_contexts(), 0, "nothing left on the old session");

    let current = managed.current();
    drop(watch);
    common::assert_no_leftover_contexts_soon(&current);
    managed.close();
}

/// A tiny xorshift generator: the fault schedule comes from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Our increments go through a proxy that is cut again and again (replies get lost)
/// while another session increments directly. No increment that returned `Ok` is lost
/// or doubled: the final value is the acknowledged increments plus at most the ones
/// whose outcome was reported unknown.
#[test]
fn lost_replies_never_double_or_lose_an_acknowledged_increment() {
    let seed = std::env::var("SHARED_VALUES_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("lost_replies seed {seed} (rerun with SHARED_VALUES_SEED={seed})");
    let mut rng = Rng(seed);

    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap().split('/').next().unwrap();
    let proxy = Arc::new(Proxy::start(server));
    let path = unique_path("cuts");
    let zk = connect_to(&proxy.addr);
    let count = AtomicLong::new(&zk, &path)
        .unwrap()
        .with_timeout(Duration::from_secs(5));
    let direct_zk = connect();
    let direct = AtomicLong::new(&direct_zk, &path).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let direct_count = Arc::new(AtomicU64::new(0));
    let other = {
        let (done, direct_count) = (Arc::clone(&done), Arc::clone(&direct_count));
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                direct.increment().unwrap();
                direct_count.fetch_add(1, Ordering::SeqCst);
                // Contend, but leave the shared machine some air.
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let cutter = {
        let (done, proxy) = (Arc::clone(&done), Arc::clone(&proxy));
        let schedule: Vec<(u64, u64)> = (0..1000)
            .map(|_| (5 + rng.below(40), rng.below(30)))
            .collect();
        thread::spawn(move || {
            let mut cuts = 0;
            for (up_ms, down_ms) in schedule {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                thread::sleep(Duration::from_millis(up_ms));
                proxy.cut();
                cuts += 1;
                thread::sleep(Duration::from_millis(down_ms));
                proxy.restore();
            }
            proxy.restore();
            cuts
        })
    };

    let (mut acked, mut unknown, mut timeouts) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while acked < 60 && started.elapsed() < Duration::from_secs(30) {
        match count.increment() {
            Ok(change) => {
                assert!(change.succeeded && change.post == change.pre + 1);
                acked += 1;
            }
            Err(RecipeError::ZooKeeper(Error::ConnectionLoss)) => unknown += 1,
            Err(RecipeError::Timeout) => timeouts += 1,
            Err(other) => panic!("seed {seed}: unexpected {other}"),
        }
    }
    done.store(true, Ordering::SeqCst);
    let cuts = cutter.join().unwrap();
    other.join().unwrap();
    proxy.restore();

    let direct_total = direct_count.load(Ordering::SeqCst);
    let final_value = AtomicLong::new(&direct_zk, &path).unwrap().get().unwrap() as u64;
    eprintln!(
        "seed {seed}: {cuts} cuts, {acked} acknowledged, {unknown} unknown, {timeouts} timed out, \
         {direct_total} direct, final {final_value}"
    );
    assert!(acked > 0, "seed {seed}: no increment got through");
    let known = acked + direct_total;
    let maybe = unknown + timeouts;
    assert!(
        final_value >= known && final_value <= known + maybe,
        "seed {seed}: final {final_value} outside [{known}, {}]",
        known + maybe
    );
}

/// Nodes whose data version is at -1 or `i32::MAX` (a server started from a crafted
/// snapshot): a conditional write at -1 must stay conditional (ZOOKEEPER-4743), and
/// versions wrap from `i32::MAX` to `i32::MIN`.
#[test]
fn conditional_writes_at_the_ends_of_the_version() {
    let five = 5i32.to_be_bytes();
    let crafted = zk_harness::Crafted::new()
        .node("/ends/raced", &five, -1)
        .node("/ends/free", &five, -1)
        .node("/ends/long", &5i64.to_be_bytes(), -1)
        .node("/ends/max", &five, i32::MAX);
    let server =
        zk_harness::Server::start_crafted_with(&crafted, &zk_harness::ServerOptions::for_tests())
            .unwrap();
    let zk = connect_to(&server.connect_string());
    let other = connect_to(&server.connect_string());

    // Read at -1, then another writer moves the node on: our CAS must fail.
    let raced = SharedCount::new(&zk, "/ends/raced", 0).unwrap();
    let seen = raced.get().unwrap();
    assert_eq!((seen.value, seen.version), (5, -1));
    other
        .set("/ends/raced", &6i32.to_be_bytes(), Some(seen.version))
        .unwrap();
    assert!(
        !raced.try_set(42, seen.version).unwrap(),
        "a CAS at version -1 overwrote a newer value"
    );
    assert_eq!(raced.count().unwrap(), 6);
    // What a plain setData at the version read would have done: overwrite it.
    other
        .set("/ends/raced", &42i32.to_be_bytes(), Some(seen.version))
        .expect("setData(-1) is unconditional");

    // At -1 with nobody in between, the write applies and moves the version to 0.
    let free = SharedCount::new(&zk, "/ends/free", 0).unwrap();
    assert!(free.try_set(7, -1).unwrap());
    let now = free.get().unwrap();
    assert_eq!((now.value, now.version), (7, 0));
    assert!(!free.try_set(8, -1).unwrap(), "version 0 is not -1");

    let long = AtomicLong::new(&zk, "/ends/long").unwrap();
    assert_eq!(long.get_versioned().unwrap().version, -1);
    let up = long.increment().unwrap();
    assert_eq!((up.succeeded, up.pre, up.post), (true, 5, 6));
    assert_eq!(long.get_versioned().unwrap().version, 0);

    // From i32::MAX the version wraps to i32::MIN; CAS goes on working.
    let max = SharedCount::new(&zk, "/ends/max", 0).unwrap();
    assert_eq!(max.get().unwrap().version, i32::MAX);
    assert_eq!(max.add(1).unwrap().post, 6);
    assert_eq!(max.get().unwrap().version, i32::MIN);
    assert_eq!(max.add(1).unwrap().post, 7);
    assert_eq!(max.get().unwrap().version, i32::MIN + 1);
}
