//! A reentrant lock: a function that takes the lock calls another that takes it again
//! (no deadlock, one lock node), while a second "process" waits for the last release.
//!
//! ```text
//! cargo run --example reentrant_lock             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example reentrant_lock
//! ```

use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::locks::LockLayout;
use zookeeper_mt_recipes::locks::ReentrantLock;

/// Takes the lock, then calls a helper that takes it again.
fn transfer(lock: &ReentrantLock) -> Result<(), zookeeper_mt_recipes::RecipeError> {
    let guard = lock.acquire(Timeout::Never)?;
    println!("transfer: holding (holds: {})", guard.hold_count());
    audit(lock)?;
    println!("transfer: done (holds: {})", guard.hold_count());
    Ok(())
}

fn audit(lock: &ReentrantLock) -> Result<(), zookeeper_mt_recipes::RecipeError> {
    let guard = lock.acquire(Timeout::Never)?; // same thread: at once, no new node
    println!(
        "audit: re-entered (holds: {}, node {})",
        guard.hold_count(),
        guard.node()
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let connect_string = hosts.connect_string();
    let path = format!("/example-reentrant-{}", std::process::id());
    let zk = ZooKeeper::connect(&connect_string, Duration::from_secs(10))?;
    // The Curator layout: Java services using InterProcessMutex on this path take part.
    let lock = ReentrantLock::new(&zk, &path)?.with_layout(LockLayout::Curator);

    let outer = lock.acquire(Timeout::Never)?;
    let other = {
        let (connect_string, path) = (connect_string.clone(), path.clone());
        thread::spawn(move || -> Result<(), zookeeper_mt_recipes::RecipeError> {
            let zk = ZooKeeper::connect(&connect_string, Duration::from_secs(10))?;
            let lock = ReentrantLock::new(&zk, &path)?.with_layout(LockLayout::Curator);
            println!("other process: waiting");
            let guard = lock.acquire(Timeout::Never)?;
            println!("other process: got it (holds: {})", guard.hold_count());
            Ok(())
        })
    };
    transfer(&lock)?;
    println!("main: still holding once (holds: {})", lock.hold_count());
    drop(outer);
    println!("main: released");
    other.join().expect("other process panicked")?;
    zk.delete(&path, None)?;
    Ok(())
}
