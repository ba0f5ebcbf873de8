//! A service that survives the expiry of its session: a `ManagedZooKeeper` reports
//! Curator's connection states and starts a new session after the old one expired; a
//! `NodeCache` on it carries on by itself, while a "lease" taken on the first session
//! (standing in for a lock or leadership) reports its loss and is not taken again behind
//! the application's back.
//!
//! The expiry is forced the way ZooKeeper's own tests do it: another handle takes the
//! session over with its id and password, and closes it.
//!
//! `cargo run --example managed_session` (uses `ZK_HOSTS` if set, else starts a server).

use std::time::Duration;
use zk_harness::{Hosts, HOSTS_ENV};
use zookeeper::{CreateMode, ZooKeeper};
use zookeeper_recipes::cache::{CacheEvent, NodeCache};
use zookeeper_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    println!("ZooKeeper at {connect}");
    let base = format!("/examples/managed-{}", std::process::id());
    let admin = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    zookeeper_recipes::util::ensure_path(&admin, &base)?;
    let config = format!("{base}/config");
    admin.create(&config, b"threads=4", CreateMode::Persistent)?;

    let client = ManagedZooKeeper::connect(&connect, Duration::from_secs(6))?;
    let states = client.states();
    let cache = NodeCache::start(&client, &config)?;
    cache.wait_initialized(Duration::from_secs(10))?;
    println!(
        "config: {:?}",
        String::from_utf8_lossy(&cache.current().unwrap().data)
    );

    // A lease tied to the first session: an ephemeral node, and the generation it was
    // taken on.
    let lease = format!("{base}/lease");
    let session = client.session();
    session.zk.create(&lease, b"", CreateMode::Ephemeral)?;
    let lease_generation = session.generation;
    println!("lease taken on session generation {lease_generation}");

    // Expire the session.
    let id = session.zk.client_id()?;
    let thief = ZooKeeper::builder(&connect).session(id).connect()?;
    thief.close()?;
    admin.set(&config, b"threads=8", None)?; // changed while the service is away
    println!("session {:#x} expired by the server", id.session_id);

    loop {
        let event = states.recv_timeout(Duration::from_secs(30))?;
        println!(
            "[states] {:?} (generation {})",
            event.state, event.generation
        );
        if event.state == ConnectionState::NewSession {
            break;
        }
    }
    // The guard's check: its generation is gone, so the lease is lost for good.
    if !client.is_current(lease_generation) {
        println!(
            "lease lost with generation {lease_generation}; it still exists: {} (not re-taken)",
            admin.exists(&lease)?.is_some()
        );
    }
    // The cache re-read the node in the new session and reports what changed.
    loop {
        match cache.events().recv_timeout(Duration::from_secs(30))? {
            CacheEvent::Updated { new, .. } => {
                println!(
                    "[cache] config now {:?} (read in session generation {})",
                    String::from_utf8_lossy(&new.data),
                    client.generation()
                );
                break;
            }
            CacheEvent::Added(node) => {
                println!("[cache] loaded {:?}", String::from_utf8_lossy(&node.data))
            }
            other => println!("[cache] {other:?}"),
        }
    }

    drop(cache);
    client.close();
    admin.delete(&config, None)?;
    admin.delete(&base, None)?;
    admin.close()?;
    Ok(())
}
