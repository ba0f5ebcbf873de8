//! Workers that reload their configuration when it
//! changes in ZooKeeper. A watcher thread prints every change it receives while an
//! updater thread edits the node: first at a human pace (every value arrives), then in a
//! burst (intermediate values may be coalesced, the last one always arrives), then it
//! deletes the node, which ends the watcher.
//!
//! `cargo run --example config_watch` (uses `ZK_HOSTS` if set, else starts a server).

use std::thread;
use std::time::Duration;
use zookeeper_mt::{CreateMode, ZooKeeper};
use zookeeper_mt_recipes::caches::{ConfigEvent, ConfigWatch};
use zookeeper_testing::{Hosts, HOSTS_ENV};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    println!(
        "ZooKeeper at {connect} ({})",
        if hosts.is_external() {
            "from ZK_HOSTS"
        } else {
            "throwaway server"
        }
    );
    let parent = format!("/examples/config-watch-{}", std::process::id());
    let path = format!("{parent}/worker.conf");

    let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &parent)?;
    zk.create(&path, b"threads=1", CreateMode::Persistent)?;

    // The watcher: prints each state as it arrives; the node's deletion ends it.
    let watch = ConfigWatch::new(&zk, &path)?;
    let events = watch.receiver();
    let watcher = thread::spawn(move || {
        let mut seen = Vec::new();
        for event in events {
            match event {
                ConfigEvent::Value { data, stat } => {
                    println!(
                        "[watcher] version {:>2}: {}",
                        stat.version,
                        String::from_utf8_lossy(&data)
                    );
                    seen.push(stat.version);
                }
                ConfigEvent::Deleted => {
                    println!("[watcher] config deleted, stopping");
                    break;
                }
            }
        }
        seen
    });

    // The updater, on its own session.
    let updater = {
        let (connect, path) = (connect.clone(), path.clone());
        thread::spawn(move || -> Result<i32, zookeeper_mt::Error> {
            let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
            let mut last = 0;
            for threads in 2..=5 {
                // A human pace: the watcher re-arms between updates and sees each one.
                thread::sleep(Duration::from_millis(200));
                let stat = zk.set(&path, format!("threads={threads}").as_bytes(), None)?;
                println!(
                    "[updater] wrote version {:>2}: threads={threads}",
                    stat.version
                );
                last = stat.version;
            }
            println!("[updater] burst of 20 updates");
            for i in 0..20 {
                last = zk
                    .set(&path, format!("threads=8 burst={i}").as_bytes(), None)?
                    .version;
            }
            println!("[updater] last version written: {last}");
            thread::sleep(Duration::from_millis(300));
            zk.delete(&path, None)?;
            println!("[updater] deleted the config");
            Ok(last)
        })
    };

    let last_written = updater.join().map_err(|_| "updater panicked")??;
    let seen = watcher.join().map_err(|_| "watcher panicked")?;
    drop(watch);
    let in_order = seen.windows(2).all(|w| w[0] < w[1]);
    println!(
        "watcher saw {} of {} versions, in order: {in_order}, final version {last_written} seen: {}",
        seen.len(),
        last_written + 1,
        seen.last() == Some(&last_written)
    );
    zk.delete(&parent, None)?;
    zk.close()?;
    if !hosts.is_external() {
        println!("stopping the throwaway server");
    }
    drop(hosts);
    Ok(())
}
