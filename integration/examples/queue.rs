//! The classic ZooKeeper queue: queue three
//! items, then consume everything in the queue.
//!
//! ```text
//! cargo run --example queue            # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example queue
//! ```
//!
//! The Python script dequeued with `block_dequeue`, which never returns `None`, so it
//! hung after the last item; here the blocking take has a timeout and the loop ends
//! once the queue stays empty.

use std::time::Duration;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::OptionalExtension;

const QUEUE: &str = "/myfirstqueue";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ZK_HOSTS, or a throwaway server stopped when `hosts` is dropped.
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let connect_string = hosts.connect_string();
    let zk = match ZooKeeper::connect(&connect_string, Duration::from_secs(10)) {
        Ok(zk) => zk,
        Err(error) => {
            println!(
                "Connection to ZooKeeper cluster timed out - is a server running on \
                 {connect_string}? ({error})"
            );
            std::process::exit(1);
        }
    };
    println!("Connected");
    if zk.exists(QUEUE)?.is_some() {
        println!("Queue already exists");
    }
    let queue = Queue::new(&zk, QUEUE)?;

    println!("Enqueuing three items");
    queue.put(b"queue item 1")?;
    queue.put(b"queue item 2")?;
    queue.put(b"queue item 3")?;
    println!("Done");

    println!("Consuming all items in queue");
    while let Some(item) = queue.take(Duration::from_millis(250)).optional()? {
        println!("{}", String::from_utf8_lossy(&item));
    }
    println!("Done");

    zk.close()?;
    drop(hosts);
    Ok(())
}
