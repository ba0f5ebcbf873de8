//! The recipes from async code on tokio: workers take jobs from a queue and update a
//! shared report under a lock, each wait an `.await` that occupies no runtime thread;
//! a shutdown signal cancels the idle takes through `select!` without losing an item.
//!
//! ```text
//! cargo run --example async_tokio             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example async_tokio
//! ```

use std::time::Duration;
use tokio::sync::{mpsc, watch};
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::queues::Queue;

const WORKERS: usize = 3;
const JOBS: usize = 9;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let base = format!("/async-tokio-{}", std::process::id());
    let zk = ZooKeeper::connect(&hosts.connect_string(), Duration::from_secs(10))?;
    zk.create_async(&base, b"0", zookeeper_mt::CreateMode::Persistent)
        .await?;

    let jobs = Queue::new(&zk, &format!("{base}/jobs"))?;
    let report = Lock::new(&zk, &format!("{base}/report-lock"))?;
    let (shutdown, stopping) = watch::channel(false);
    let (finished, mut finishing) = mpsc::unbounded_channel();

    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let (jobs, report, zk, base) = (jobs.clone(), report.clone(), zk.clone(), base.clone());
            let mut stopping = stopping.clone();
            let finished = finished.clone();
            tokio::spawn(async move {
                let mut done = 0;
                loop {
                    // A take dropped by `select!` puts an item it got back: none is lost.
                    let job = tokio::select! {
                        job = jobs.take_async(Timeout::Never) => job?,
                        _ = stopping.changed() => return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(done),
                    };
                    let guard = report.acquire_async(Duration::from_secs(30)).await?;
                    // Read-modify-write of the report, protected by the lock.
                    let (count, _) = zk.get_async(&base).await?;
                    let count: u64 = String::from_utf8_lossy(&count).parse()?;
                    zk.set_async(&base, (count + 1).to_string().as_bytes(), None).await?;
                    guard.release_async().await?;
                    println!("worker {id} did {}", String::from_utf8_lossy(&job));
                    done += 1;
                    let _ = finished.send(());
                }
            })
        })
        .collect();

    for i in 0..JOBS {
        jobs.put_async(format!("job {i}").as_bytes()).await?;
    }
    // Once every job is done, stop the workers (idle in `take`).
    for _ in 0..JOBS {
        finishing.recv().await;
    }
    shutdown.send(true)?;
    let mut total = 0;
    for worker in workers {
        total += worker.await?.map_err(|e| e.to_string())?;
    }
    let (count, _) = zk.get_async(&base).await?;
    println!(
        "{total} jobs done by {WORKERS} workers, report says {}; {} left in the queue",
        String::from_utf8_lossy(&count),
        jobs.len_async().await?
    );
    assert_eq!(total, JOBS);
    assert_eq!(String::from_utf8_lossy(&count), JOBS.to_string());
    Ok(())
}
