//! The queue variants side by side: a priority queue (urgent jobs first), a delayed
//! queue (a retry not before its due time), a bounded queue (a producer told the queue
//! is full) and a work queue whose poison item ends in the dead letters.
//!
//! ```text
//! cargo run --example priority_queue            # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example priority_queue
//! ```

use std::time::{Duration, Instant};
use zookeeper_mt::Timeout;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::queues::DelayedQueue;
use zookeeper_mt_recipes::queues::PriorityQueue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::queues::{BoundedQueue, Offer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ZK_HOSTS, or a throwaway server stopped when `hosts` is dropped.
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let zk = ZooKeeper::connect(&hosts.connect_string(), Duration::from_secs(10))?;
    let base = format!("/queue-variants-{}", zookeeper_mt_recipes::nodes::guid());

    let jobs = PriorityQueue::new(&zk, &format!("{base}/jobs"))?;
    jobs.put(b"nightly report", 100)?;
    jobs.put(b"resize images", 50)?;
    jobs.put(b"page the on-call", 0)?;
    jobs.put(b"weekly digest", 100)?;
    println!("priority queue, smaller number first:");
    while let Some(job) = jobs.try_take()? {
        println!("  {}", String::from_utf8_lossy(&job));
    }

    let retries = DelayedQueue::new(&zk, &format!("{base}/retries"))?;
    let started = Instant::now();
    retries.put_after(b"retry upload 7", Duration::from_millis(800))?;
    println!(
        "delayed queue: get right away -> {:?}",
        retries.try_take()?.map(String::from_utf8)
    );
    let retry = retries.take(Timeout::Never)?;
    println!(
        "delayed queue: take -> {:?} after {:?} (due after 800 ms)",
        String::from_utf8_lossy(&retry),
        started.elapsed()
    );

    let uploads = BoundedQueue::new(&zk, &format!("{base}/uploads"), 2)?;
    for name in ["a.png", "b.png", "c.png"] {
        match uploads.try_put(name.as_bytes())? {
            Offer::Enqueued => println!("bounded queue (max 2): {name} enqueued"),
            Offer::Full => println!("bounded queue (max 2): {name} refused, queue full"),
        }
    }

    let work = WorkQueue::new(&zk, &format!("{base}/work"))?.with_dead_letter(2);
    work.put(b"poison message")?;
    while let Some(item) = work.try_take()? {
        println!(
            "work queue: attempt {} at {:?} fails, released",
            item.attempt(),
            String::from_utf8_lossy(item.data())
        );
        item.release()?;
    }
    println!("work queue: dead letters {:?}", work.dead_letters()?);
    Ok(())
}
