//! A service registry followed with a `TreeCache`: services with their instances under
//! one root. A reader thread prints every event while a writer registers and updates
//! instances and removes a service; then the writer bursts 500 updates while the reader
//! is paused, and the reader gets them coalesced into one event with the final value.
//! Finally it times the initial load of a larger tree.
//!
//! `cargo run --example tree_cache` (uses `ZK_HOSTS` if set, else starts a server).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::{Acl, CreateMode, Op, ZooKeeper};
use zookeeper_mt_recipes::caches::{CacheEvent, TreeCache};
use zookeeper_testing::{Hosts, HOSTS_ENV};

fn create(zk: &ZooKeeper, path: &str, data: &str) -> zookeeper_mt::Result<()> {
    zk.create(path, data.as_bytes(), CreateMode::Persistent)
        .map(|_| ())
}

fn describe(event: &CacheEvent) -> String {
    match event {
        CacheEvent::Added(node) => format!(
            "+ {} = {:?}",
            node.path,
            String::from_utf8_lossy(&node.data)
        ),
        CacheEvent::Updated { old, new } => format!(
            "~ {}: {:?} -> {:?}",
            new.path,
            String::from_utf8_lossy(&old.data),
            String::from_utf8_lossy(&new.data)
        ),
        CacheEvent::Removed(node) => format!("- {}", node.path),
        other => format!("{other:?}"),
    }
}

fn delete_tree(zk: &ZooKeeper, path: &str) -> zookeeper_mt::Result<()> {
    for name in zk.get_children(path)? {
        delete_tree(zk, &format!("{path}/{name}"))?;
    }
    zk.delete(path, None)
}

/// 100 writes of `path`, each waiting for the cache's event; prints the mean time.
fn round_trips(
    writer: &ZooKeeper,
    cache: &TreeCache,
    path: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    while cache.events().try_recv().is_ok() {}
    let started = Instant::now();
    for n in 0..100 {
        let value = format!("round trip {n}");
        writer.set(path, value.as_bytes(), None)?;
        loop {
            let event = cache.events().recv_timeout(Duration::from_secs(10))?;
            if event
                .node()
                .is_some_and(|node| node.data == value.as_bytes())
            {
                break;
            }
        }
    }
    println!(
        "write-to-event round trip with {} watches armed: {:?} on average",
        cache.armed_watches(),
        started.elapsed() / 100
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    println!("ZooKeeper at {connect}");
    let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    let writer = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    let root = format!("/examples/tree-cache-{}", std::process::id());
    zookeeper_mt_recipes::nodes::ensure_path(&writer, &root)?;
    for service in ["billing", "search"] {
        create(&writer, &format!("{root}/{service}"), "v1")?;
        for i in 0..2 {
            create(
                &writer,
                &format!("{root}/{service}/i{i}"),
                &format!("10.0.0.{i}:80"),
            )?;
        }
    }

    let cache = TreeCache::builder(&root).max_depth(2).build(&zk)?;
    cache.wait_initialized(Duration::from_secs(10))?;
    println!("initial load: {} nodes", cache.len());

    // The reader: prints events; pauses when told, to show coalescing.
    // `true`: stop reading until the next message; `false`: finish.
    let (pause_tx, pause_rx) = mpsc::channel::<bool>();
    let reader = thread::scope(|scope| -> Result<(), Box<dyn std::error::Error>> {
        let cache = &cache;
        scope.spawn(move || {
            let mut received = 0;
            loop {
                match pause_rx.try_recv() {
                    Ok(true) => {
                        println!("[reader] not reading until told");
                        let _ = pause_rx.recv();
                        println!("[reader] {} events queued", cache.events().len());
                    }
                    Ok(false) => break,
                    Err(_) => {}
                }
                match cache.events().recv_timeout(Duration::from_millis(50)) {
                    Ok(event) => {
                        received += 1;
                        println!("[reader] {}", describe(&event));
                    }
                    Err(error) if error.is_timeout() => {}
                    Err(_) => break, // the cache stopped
                }
            }
            println!("[reader] {received} events in all");
        });

        create(&writer, &format!("{root}/search/i2"), "10.0.0.2:80")?;
        writer.set(&format!("{root}/billing"), b"v2", None)?;
        delete_tree(&writer, &format!("{root}/search/i0"))?;
        delete_tree(&writer, &format!("{root}/billing"))?;
        thread::sleep(Duration::from_millis(300));

        pause_tx.send(true)?;
        for n in 0..500 {
            writer.set(&format!("{root}/search"), format!("v{n}").as_bytes(), None)?;
        }
        println!("[writer] 500 updates of {root}/search done (last: v499)");
        thread::sleep(Duration::from_millis(300)); // the cache catches up; nobody reads
        pause_tx.send(true)?; // resume
        thread::sleep(Duration::from_millis(300));
        pause_tx.send(false)?;
        Ok(())
    });
    reader?;
    cache.close();

    // The initial load of a larger tree: 20 branches of 100 leaves (2,021 nodes).
    let big = format!("{root}/big");
    create(&writer, &big, "")?;
    for b in 0..20 {
        let branch = format!("{big}/b{b}");
        let mut ops = vec![Op::Create {
            path: branch.clone(),
            data: Vec::new(),
            acl: Acl::OPEN_UNSAFE.into(),
            mode: CreateMode::Persistent,
        }];
        ops.extend((0..100).map(|l| Op::Create {
            path: format!("{branch}/l{l}"),
            data: vec![b'x'; 100],
            acl: Acl::OPEN_UNSAFE.into(),
            mode: CreateMode::Persistent,
        }));
        writer.multi(&ops)?;
    }
    let started = Instant::now();
    let cache = TreeCache::new(&zk, &big)?;
    cache.wait_initialized(Duration::from_secs(60))?;
    println!(
        "initial load of {} nodes: {:?}, {} watches armed",
        cache.len(),
        started.elapsed(),
        cache.armed_watches()
    );
    // Round trips through the big cache, then through a cache of that one node: write,
    // then wait for its event (each wake-up of a cache thread looks at all its watches).
    round_trips(&writer, &cache, &format!("{big}/b7/l7"))?;
    cache.close(); // waits for the task's end (a drop would let it end on the driver)
    let one = TreeCache::new(&zk, &format!("{big}/b7/l7"))?;
    one.wait_initialized(Duration::from_secs(10))?;
    round_trips(&writer, &one, &format!("{big}/b7/l7"))?;
    one.close();
    println!(
        "after close: {} contexts left on the handle",
        zk.live_contexts()
    );

    delete_tree(&writer, &root)?;
    zk.close()?;
    writer.close()?;
    Ok(())
}
