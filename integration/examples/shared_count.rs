//! A counter shared by Rust, Java and Python services: our `SharedCount` threads, a
//! Curator `SharedCount` process and a kazoo `Counter(support_curator=True)` process
//! increment one znode at the same time, while a watcher follows the value. Every
//! increment is counted: the final value is the sum of all increments.
//!
//! `cargo run --example shared_count` (uses `ZK_HOSTS` if set, else starts a server).
//! The Curator and kazoo processes need `./setup.sh` (libcurator-recipes-java,
//! default-jdk-headless, python3-kazoo); without them the Rust side runs alone.

use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::shared::SharedCount;
use zookeeper_testing::peers::{Participant, Peer};
use zookeeper_testing::{Hosts, HOSTS_ENV};

const THREADS: usize = 4;
const EACH: u32 = 100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    let path = format!(
        "/examples/shared-count-{}",
        zookeeper_mt_recipes::nodes::guid()
    );
    let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    let count = SharedCount::new(&zk, &path, 0)?;
    println!("counter {path} on {connect}");

    // Peers in other languages, if installed.
    let mut peers = Vec::new();
    for participant in [
        Participant::CuratorSharedCount { seed: 0 },
        Participant::KazooCuratorCounter,
    ] {
        match Peer::start(participant, &connect, &path) {
            Ok(peer) => peers.push(peer),
            Err(error) => println!("  (skipping {participant:?}: {error})"),
        }
    }

    // A watcher that reads slowly: it sees the newest value each time, never a backlog.
    let mut watch = count.watch()?;
    let started = Instant::now();
    for peer in &mut peers {
        peer.send_add(1, EACH)?;
    }
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (connect, path) = (connect.clone(), path.clone());
            thread::spawn(move || -> Result<u32, String> {
                let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))
                    .map_err(|e| e.to_string())?;
                let count = SharedCount::new(&zk, &path, 0).map_err(|e| e.to_string())?;
                for _ in 0..EACH {
                    count.add(1).map_err(|e| e.to_string())?;
                }
                Ok(EACH)
            })
        })
        .collect();

    let total = (THREADS + peers.len()) as i32 * EACH as i32;
    let mut observed = 0;
    loop {
        // A timeout here means the counter stopped moving before the total.
        let value = watch.next(Duration::from_secs(30))?;
        observed += 1;
        if observed % 10 == 1 || value.value == total {
            println!("  watcher: {:>5} (version {})", value.value, value.version);
        }
        if value.value == total {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    for worker in workers {
        worker.join().map_err(|_| "worker panicked")??;
    }
    for peer in &mut peers {
        let added = peer.finish_add(Duration::from_secs(60))?;
        println!("  {}: {} increments", peer.label(), added.len());
    }
    println!(
        "final value {} = {THREADS} Rust threads + {} peers x {EACH} increments, in {:?}; \
         the watcher saw {observed} of the {total} values",
        count.count()?,
        peers.len(),
        started.elapsed()
    );
    assert_eq!(count.count()?, total, "an increment was lost");
    Ok(())
}
