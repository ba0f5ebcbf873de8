//! Fenced writes: a lock holder whose lock node was deleted (as when its session expired
//! during a long pause) does not know it yet, but the server refuses its fenced write,
//! while the new holder's goes through.
//!
//! ```text
//! cargo run --example fenced_writes             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example fenced_writes
//! ```

use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::{CreateMode, Op, ZooKeeper};
use zookeeper_mt_recipes::locks::Lock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let base = format!("/example-fenced-{}", std::process::id());
    let (lock_path, data) = (format!("{base}/lock"), format!("{base}/data"));
    let first = ZooKeeper::connect(&hosts.connect_string(), Duration::from_secs(10))?;
    let second = ZooKeeper::connect(&hosts.connect_string(), Duration::from_secs(10))?;
    zookeeper_mt_recipes::nodes::ensure_path(&first, &base)?;
    first.create(&data, b"initial", CreateMode::Persistent)?;

    let stale = Lock::new(&first, &lock_path)?.acquire(Timeout::Never)?;
    stale.fenced_multi(&[Op::set_data(&data, b"written by the first holder", -1)])?;
    println!("first holder wrote under its lock");

    // The first holder loses its lock without hearing of it.
    second.delete(stale.node(), None)?;
    let fresh = Lock::new(&second, &lock_path)?.acquire(Timeout::Never)?;
    fresh.fenced_multi(&[Op::set_data(&data, b"written by the second holder", -1)])?;
    println!("second holder took the lock and wrote");

    println!("first holder believes it is lost: {}", stale.is_lost());
    match stale.fenced_multi(&[Op::set_data(&data, b"stale write", -1)]) {
        Ok(_) => println!("stale write applied (must not happen)"),
        Err(error) => println!("stale write refused by the server: {error}"),
    }
    let (value, _) = second.get(&data)?;
    println!("data: {}", String::from_utf8_lossy(&value));
    drop((stale, fresh));
    for path in [&data, &lock_path, &base] {
        second.delete(path, None)?;
    }
    Ok(())
}
