//! A lock test: four threads ("processes"), each with its own
//! ZooKeeper session, contend for one resource lock; each holds it for a moment and
//! prints who holds it.
//!
//! ```text
//! cargo run --example lock             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example lock
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::locks::Lock;

const PROCESSES: usize = 4;
/// How long each holder keeps the lock (short, so the example is quick).
const HOLD: Duration = Duration::from_millis(200);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let connect_string = hosts.connect_string();
    // A fresh lock per run, so runs against a shared server do not meet.
    let resource = format!("/resource_lock_parent_resource-{}", std::process::id());
    let holders = Arc::new(AtomicUsize::new(0));

    let threads: Vec<_> = (1..=PROCESSES)
        .map(|id| {
            let connect_string = connect_string.clone();
            let resource = resource.clone();
            let holders = Arc::clone(&holders);
            thread::spawn(move || -> Result<u64, zookeeper_mt_recipes::RecipeError> {
                let zk = ZooKeeper::connect(&connect_string, Duration::from_secs(10))?;
                let lock = Lock::new(&zk, &resource)?.with_label(&format!("process {id}"));
                println!("{id} Acquiring Lock");
                let guard = lock.acquire(Timeout::Never)?;
                let holding = holders.fetch_add(1, Ordering::SeqCst) + 1;
                println!(
                    "{id} got Lock: holder is {} (node {}, {holding} holder(s) now)",
                    lock.holder()?.unwrap_or_default(),
                    guard.node().rsplit('/').next().unwrap_or_default(),
                );
                thread::sleep(HOLD); // the "work"
                println!("{id} Releasing Lock");
                holders.fetch_sub(1, Ordering::SeqCst);
                guard.release()?;
                println!("{id} Released Lock");
                let _ = zk.close();
                Ok(lock.wakeups())
            })
        })
        .collect();
    let mut wakeups = 0;
    for thread in threads {
        wakeups += thread.join().expect("a process panicked")?;
    }
    println!(
        "{PROCESSES} processes held the lock one at a time; {wakeups} wake-ups in all \
         (each release woke only the next waiter)"
    );

    let zk = ZooKeeper::connect(&connect_string, Duration::from_secs(10))?;
    zk.delete(&resource, None)?;
    zk.close()?;
    drop(hosts);
    Ok(())
}
