//! A service that survives the expiry of its session: a `ManagedZooKeeper` reports
//! Curator's connection states and starts a new session after the old one expired; a
//! `NodeCache` on it carries on by itself, while a "lease" taken on the first session
//! (standing in for a lock or leadership) reports its loss and is not taken again behind
//! the application's back.
//!
//! The expiry is forced from the session's id and password by the testing crate's
//! `expire_session` (`support::expire_session`), while the service stays connected.
//! The example checks that the session's ephemeral node is gone before it says the
//! session expired.
//!
//! `cargo run --example managed_session` (uses `ZK_HOSTS` if set, else starts a server).

mod support;

use std::time::Duration;
use zookeeper_mt::{CreateMode, ZooKeeper};
use zookeeper_mt_recipes::caches::{CacheEvent, NodeCache};
use zookeeper_mt_recipes::lifecycle::{ConnectionState, ConnectionStates, ManagedZooKeeper};
use zookeeper_testing::{Hosts, HOSTS_ENV};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    println!("ZooKeeper at {connect}");
    let base = format!("/examples/managed-{}", std::process::id());
    let admin = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    zookeeper_mt_recipes::nodes::ensure_path(&admin, &base)?;
    let config = format!("{base}/config");
    admin.create(&config, b"threads=4", CreateMode::Persistent)?;

    let service_hosts = connect.clone();
    let client = ManagedZooKeeper::with_connector(move || {
        ZooKeeper::builder(&service_hosts)
            .session_timeout(Duration::from_secs(6))
            .connect()
    })?;
    let states = client.states();
    let cache = NodeCache::new(&client, &config)?;
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

    // Expire the service's session while it is connected.
    let session_id = support::expire_session(&session.zk, &connect)?;
    admin.sync(&base)?; // an ensemble member may lag behind the one the expiry used
    if admin.exists(&lease)?.is_some() {
        return Err("the expired session's lease is still there".into());
    }
    println!("session {session_id:#x} expired by the server (its ephemeral lease is gone)");
    admin.set(&config, b"threads=8", None)?; // changed while the service is away

    // The service learns its session expired and starts a new one.
    next_state(&states, ConnectionState::NewSession)?;
    // The guard's check: its generation is gone, so the lease is lost for good.
    if client.is_current(lease_generation) {
        return Err("the lease's session generation is still current after expiry".into());
    }
    println!(
        "lease lost with generation {lease_generation}; it still exists: {} (not re-taken)",
        admin.exists(&lease)?.is_some()
    );
    // The cache re-reads the node in the new session. Its events are coalesced per node
    // for a reader that reads late (the first load and the change may arrive as one
    // event), so read them until the cache holds the new value.
    let events = cache.events();
    loop {
        let event = events.recv_timeout(Duration::from_secs(30))?;
        match &event {
            CacheEvent::Added(node) => {
                println!("[cache] loaded {:?}", String::from_utf8_lossy(&node.data))
            }
            CacheEvent::Updated { new, .. } => {
                println!(
                    "[cache] updated to {:?}",
                    String::from_utf8_lossy(&new.data)
                )
            }
            other => println!("[cache] {other:?}"),
        }
        if let Some(node) = cache.current().filter(|node| node.data == b"threads=8") {
            println!(
                "[cache] config now {:?} (read in session generation {})",
                String::from_utf8_lossy(&node.data),
                client.generation()
            );
            break;
        }
    }

    drop(cache);
    client.close();
    admin.delete(&config, None)?;
    admin.delete(&base, None)?;
    admin.close()?;
    Ok(())
}

/// Prints connection states until `wanted` arrives; fails after 30 s without an event.
fn next_state(
    states: &ConnectionStates,
    wanted: ConnectionState,
) -> Result<(), Box<dyn std::error::Error>> {
    loop {
        let event = states.recv_timeout(Duration::from_secs(30))?;
        println!(
            "[states] {:?} (generation {})",
            event.state, event.generation
        );
        if event.state == wanted {
            return Ok(());
        }
    }
}
