//! `TreeCache` against a real server: the initial load of a tree of 200 nodes with two
//! watches per node; a depth limit; events in order per path under concurrent writes;
//! changes made while the client is cut off, and during an expiry and a new session of
//! a managed client, reported after the reconnection; closing removes every watch.

mod cache_common;
mod common;

use cache_common::{create, delete_tree, expire, server_tree, settled_watches, Model, WAIT};
use common::{unique_path, Proxy};
use std::collections::BTreeSet;
use std::time::Duration;
use zookeeper_mt::{Acl, CreateMode, Op, ZooKeeper};
use zookeeper_mt_recipes::caches::{CacheEvent, TreeCache};
use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;

/// A tree of `1 + branches + branches * leaves` nodes under `root` (created in a few
/// multis), each holding its own path as data.
fn build_tree(zk: &ZooKeeper, root: &str, branches: usize, leaves: usize) {
    create(zk, root, root.as_bytes());
    for b in 0..branches {
        let branch = format!("{root}/b{b}");
        let mut ops = vec![Op::Create {
            path: branch.clone(),
            data: branch.clone().into_bytes(),
            acl: Acl::OPEN_UNSAFE.into(),
            mode: CreateMode::Persistent,
        }];
        for l in 0..leaves {
            let leaf = format!("{branch}/l{l}");
            ops.push(Op::Create {
                path: leaf.clone(),
                data: leaf.into_bytes(),
                acl: Acl::OPEN_UNSAFE.into(),
                mode: CreateMode::Persistent,
            });
        }
        zk.multi(&ops).unwrap();
    }
}

#[test]
fn initial_load_of_a_tree_of_200_nodes() {
    let writer = common::connect();
    let zk = common::connect();
    let root = unique_path("tree");
    build_tree(&writer, &root, 11, 17); // 1 + 11 + 187 = 199 nodes
    create(&writer, &format!("{root}/b0/l0/deepest"), b"d");
    let expected = server_tree(&writer, &root, usize::MAX);
    assert_eq!(expected.len(), 200);
    let baseline = zk.live_contexts();

    let cache = TreeCache::new(&zk, &root).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    // Every node was reported before Initialized, once each.
    assert_eq!(model.changes, 200);
    assert_eq!(model.data(), expected);
    assert!(cache.is_initialized());
    let snapshot = cache.snapshot();
    assert_eq!(snapshot.len(), 200);
    assert!(snapshot
        .iter()
        .all(|(path, node)| node.data == path.as_bytes() || path.ends_with("deepest")));
    assert_eq!(cache.children_of(&root).len(), 11);
    assert_eq!(cache.children_of(&format!("{root}/b3")).len(), 17);
    // One data and one child watch per node, nothing more.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 2 * 200);

    cache.close();
    common::assert_no_leftover_contexts(&zk);
    delete_tree(&writer, &root);
}

#[test]
fn a_depth_limit_bounds_what_is_read_and_watched() {
    let writer = common::connect();
    let zk = common::connect();
    let root = unique_path("shallow");
    build_tree(&writer, &root, 3, 4);
    let baseline = zk.live_contexts();
    let cache = TreeCache::builder(&root).max_depth(1).build(&zk).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert_eq!(model.data(), server_tree(&writer, &root, 1));
    assert_eq!(model.nodes.len(), 1 + 3);
    // The root: data and children; the branches: data only.
    settled_watches(|| cache.armed_watches(), &zk, baseline, 2 + 3);
    // Changes below the limit are not seen; at the limit they are.
    writer
        .set(&format!("{root}/b0/l0"), b"ignored", None)
        .unwrap();
    writer.set(&format!("{root}/b1"), b"seen", None).unwrap();
    model.read_until(cache.events(), "b1 updated", |m| {
        m.nodes[&format!("{root}/b1")].data == b"seen"
    });
    assert_eq!(model.nodes.len(), 1 + 3);
    drop(cache);
    common::assert_no_leftover_contexts_soon(&zk);
    delete_tree(&writer, &root);
}

#[test]
fn events_follow_each_paths_history_under_concurrent_writes() {
    let writer = common::connect();
    let zk = common::connect();
    let root = unique_path("order");
    create(&writer, &root, b"");
    let cache = TreeCache::new(&zk, &root).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);

    // A writer on its own thread runs through every kind of change on a few paths
    // (nested nodes, re-creation) while this thread reads and checks each event
    // against the path's history (`Model::apply`).
    let writer_thread = {
        let root = root.clone();
        std::thread::spawn(move || {
            for round in 0..20 {
                for p in 0..4 {
                    let path = format!("{root}/p{p}");
                    let child = format!("{path}/child");
                    create(&writer, &path, format!("{round}").as_bytes());
                    create(&writer, &child, b"c");
                    for v in 0..3 {
                        writer
                            .set(&path, format!("{round}.{v}").as_bytes(), None)
                            .unwrap();
                        writer.set(&child, format!("{v}").as_bytes(), None).unwrap();
                    }
                    if round < 19 {
                        delete_tree(&writer, &path);
                    }
                }
            }
            writer
        })
    };
    while !writer_thread.is_finished() {
        if let Ok(event) = cache.events().recv_timeout(Duration::from_millis(50)) {
            model.apply(event);
        }
    }
    let writer = writer_thread.join().unwrap();
    let expected = server_tree(&writer, &root, usize::MAX);
    assert_eq!(expected.len(), 1 + 4 * 2);
    model.read_until(cache.events(), "the final state", |m| m.data() == expected);
    assert!(
        cache.events().try_recv().is_err(),
        "nothing owed after the final state"
    );
    println!("order: {} changes received", model.changes);
    assert!(
        model.changes > 20,
        "the reader kept up with part of the history"
    );
    let zk_baseline = 0;
    settled_watches(
        || cache.armed_watches(),
        &zk,
        zk_baseline,
        2 * expected.len(),
    );
    drop(cache);
    common::assert_no_leftover_contexts_soon(&zk);
    delete_tree(&writer, &root);
}

/// Makes the same set of changes to the tree built by `build_tree(root, 3, 3)`: one
/// update, one deletion of a subtree, one re-creation, one new subtree.
fn change_while_away(writer: &ZooKeeper, root: &str) {
    writer.set(&format!("{root}/b0"), b"changed", None).unwrap();
    delete_tree(writer, &format!("{root}/b1"));
    writer.delete(&format!("{root}/b2/l2"), None).unwrap();
    create(writer, &format!("{root}/b2/l2"), b"re-created");
    create(writer, &format!("{root}/new"), b"n");
    create(writer, &format!("{root}/new/leaf"), b"nl");
}

#[test]
fn changes_while_cut_off_are_reported_after_reconnecting() {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = Proxy::start(&hosts);
    let zk = ZooKeeper::connect(&proxy.addr, Duration::from_secs(20)).unwrap();
    let writer = common::connect();
    let root = unique_path("cut");
    build_tree(&writer, &root, 3, 3);
    let cache = TreeCache::new(&zk, &root).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    assert_eq!(model.nodes.len(), 13);
    let old_l2 = model.nodes[&format!("{root}/b2/l2")].stat.czxid;

    proxy.cut();
    model.read_until_signal(cache.events(), CacheEvent::Suspended);
    change_while_away(&writer, &root);
    let expected = server_tree(&writer, &root, usize::MAX);
    proxy.restore();
    model.read_until_signal(cache.events(), CacheEvent::Reconnected);
    model.read_until(cache.events(), "the changes made while away", |m| {
        m.data() == expected
    });
    // The re-created node came back as a new node (Removed, then Added).
    assert!(model.nodes[&format!("{root}/b2/l2")].stat.czxid > old_l2);
    assert_eq!(
        model.signals,
        vec![
            CacheEvent::Initialized,
            CacheEvent::Suspended,
            CacheEvent::Reconnected
        ]
    );
    // The re-read added no second watch anywhere.
    settled_watches(|| cache.armed_watches(), &zk, 0, 2 * expected.len());
    drop(cache);
    common::assert_no_leftover_contexts_soon(&zk);
    delete_tree(&writer, &root);
}

#[test]
fn changes_during_an_expiry_are_reported_in_the_new_session() {
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = Proxy::start(&hosts);
    let via_proxy = proxy.addr.clone();
    let managed = ManagedZooKeeper::with_connector(move || {
        ZooKeeper::connect(&via_proxy, Duration::from_secs(6))
    })
    .unwrap();
    let writer = common::connect();
    let root = unique_path("expiry");
    build_tree(&writer, &root, 3, 3);
    let cache = TreeCache::new(&managed, &root).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);
    let first = managed.current();
    settled_watches(|| cache.armed_watches(), &first, 0, 2 * 13);

    proxy.cut();
    model.read_until_signal(cache.events(), CacheEvent::Suspended);
    expire(&first, &hosts);
    change_while_away(&writer, &root);
    let expected = server_tree(&writer, &root, usize::MAX);
    proxy.restore();

    model.read_until_signal(cache.events(), CacheEvent::Lost);
    model.read_until_signal(cache.events(), CacheEvent::NewSession { generation: 2 });
    model.read_until(cache.events(), "the changes made during the expiry", |m| {
        m.data() == expected
    });
    let paths: BTreeSet<_> = cache.snapshot().into_keys().collect();
    assert_eq!(paths, expected.keys().cloned().collect());
    // The old session's watches are gone; the new one has exactly two per node.
    assert_eq!(first.live_contexts(), 0);
    let second = managed.current();
    assert_eq!(managed.generation(), 2);
    settled_watches(|| cache.armed_watches(), &second, 0, 2 * expected.len());

    // The cache goes on following the tree in the new session.
    writer
        .set(&format!("{root}/new/leaf"), b"later", None)
        .unwrap();
    model.read_until(cache.events(), "a change in the new session", |m| {
        m.nodes[&format!("{root}/new/leaf")].data == b"later"
    });
    cache.close();
    common::assert_no_leftover_contexts(&second);
    managed.close();
    delete_tree(&writer, &root);
}

/// A small deterministic generator (xorshift64*), so a seed reproduces the run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random creates, updates and deletes on a small tree, with the cache's connection cut
/// and restored at random and its session expired at random (a managed client makes a
/// new one), while nobody reads the events. At the end the reader catches up and must
/// hold exactly the server's tree, with two watches per node and a queue that never
/// held more than one entry per path (plus connection signals). The run prints its
/// seed; `CACHE_FAULT_SEED=<seed>` replays the same sequence of faults and changes.
#[test]
fn random_changes_cuts_and_expiries_end_in_the_servers_state() {
    let seed = std::env::var("CACHE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("cache fault run: seed {seed} (CACHE_FAULT_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let hosts = zk_harness::shared_test_connect_string();
    let proxy = Proxy::start(&hosts);
    let via_proxy = proxy.addr.clone();
    let managed = ManagedZooKeeper::with_connector(move || {
        ZooKeeper::connect(&via_proxy, Duration::from_secs(10))
    })
    .unwrap();
    let writer = common::connect();
    let root = unique_path("faults");
    create(&writer, &root, b"");
    // The paths the run plays with (parents before children).
    let pool: Vec<String> = ["a", "a/x", "a/x/deep", "a/y", "b", "b/z", "c", "d"]
        .iter()
        .map(|p| format!("{root}/{p}"))
        .collect();
    let cache = TreeCache::new(&managed, &root).unwrap();
    let mut model = Model::default();
    model.read_until_signal(cache.events(), CacheEvent::Initialized);

    let (mut cut, mut expiries, mut cuts, mut most_queued) = (false, 0, 0, 0);
    let mut expired_generation = 0;
    for step in 0..400 {
        let roll = rng.below(100);
        if roll < 4 && !cut {
            proxy.cut();
            cut = true;
            cuts += 1;
        } else if roll < 8 && cut {
            proxy.restore();
            cut = false;
        } else if roll < 9 && cut {
            // Once per session: a session already expired cannot be taken over.
            let session = managed.session();
            if session.generation > expired_generation && !session.zk.state().is_terminal() {
                expire(&session.zk, &hosts);
                expired_generation = session.generation;
                expiries += 1;
            }
        } else {
            let path = &pool[rng.below(pool.len() as u64) as usize];
            let value = format!("{step}");
            match writer.exists(path).unwrap() {
                Some(stat) if stat.num_children == 0 && rng.below(3) == 0 => {
                    writer.delete(path, None).unwrap()
                }
                Some(_) => drop(writer.set(path, value.as_bytes(), None).unwrap()),
                None => {
                    let parent = path.rsplit_once('/').unwrap().0;
                    if writer.exists(parent).unwrap().is_some() {
                        create(&writer, path, value.as_bytes());
                    }
                }
            }
        }
        most_queued = most_queued.max(cache.events().len());
    }
    proxy.restore();
    let expected = server_tree(&writer, &root, usize::MAX);
    println!(
        "{cuts} cuts, {expiries} expiries, {} nodes at the end, at most {most_queued} events queued",
        expected.len()
    );
    // Each expiry was followed by exactly one new session.
    let current = managed.wait_connected(WAIT).unwrap();
    assert_eq!(current.generation, 1 + expiries);
    let final_signal = CacheEvent::NewSession {
        generation: current.generation,
    };
    model.read_until(cache.events(), "the server's final tree", |m| {
        m.data() == expected && (expiries == 0 || m.signals.contains(&final_signal))
    });
    // One entry per path of the pool and the root, plus the connection signals kept.
    assert!(
        most_queued <= pool.len() + 1 + 32 + 3,
        "{most_queued} events queued"
    );
    settled_watches(|| cache.armed_watches(), &current.zk, 0, 2 * expected.len());
    drop(cache);
    common::assert_no_leftover_contexts_soon(&current.zk);
    managed.close();
    delete_tree(&writer, &root);
}
