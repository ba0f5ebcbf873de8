//! A small tokio service on the recipes, every wait an `.await`, no thread marked:
//!
//! - a leader latch decides which of two instances runs the job loop, which hands out
//!   jobs through a work queue while it leads (`run_while_leader_async`);
//! - three consumer tasks take jobs under a `select!` against shutdown (a take dropped
//!   by `select!` loses nothing), each job's effect written under a lock whose loss is
//!   awaited beside the work (`guard.lost()` in `select!`);
//! - a tree cache over the results feeds a `tokio::sync::watch` channel the main task
//!   waits on;
//! - logs reach `tracing` (the `log` records of the library through tracing-subscriber's
//!   `log` bridge);
//! - the shutdown loses nothing, in this order: stop taking, release what is held, stop
//!   the followers, close the handles.
//!
//! ```text
//! cargo run --example tokio_service             # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example tokio_service
//! ```

use std::time::Duration;
use tokio::sync::watch;
use zookeeper_mt::{CreateMode, ManagedZooKeeper, Timeout};
use zookeeper_mt_recipes::caches::TreeCache;
use zookeeper_mt_recipes::leadership::LeaderLatch;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::nodes;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::RecipeError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const JOBS: usize = 12;
const CONSUMERS: usize = 3;
const SESSION: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .init();
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let base = format!("/tokio-service-{}", std::process::id());
    let zk = ManagedZooKeeper::connect_async(&hosts.connect_string(), SESSION).await?;
    // A second instance of the service, competing for leadership.
    let rival = ManagedZooKeeper::connect_async(&hosts.connect_string(), SESSION).await?;
    nodes::ensure_path_async(&zk, &format!("{base}/results")).await?;

    let jobs = WorkQueue::new(&zk, &format!("{base}/jobs"))?;
    let results = TreeCache::new(&zk, &format!("{base}/results"))?;
    results
        .wait_initialized_async(Duration::from_secs(30))
        .await?;
    let (done_tx, mut done_rx) = watch::channel(0usize);
    let (shutdown, stopping) = watch::channel(false);

    // The cache feeds the watch channel: how many results exist now.
    let feeder = {
        let results = results.clone();
        tokio::spawn(async move {
            while results.events().next().await.is_some() {
                // The tree's root is in the cache too.
                let count = results.len().saturating_sub(1);
                if done_tx.send(count).is_err() {
                    break;
                }
            }
        })
    };

    // Two instances run for leadership; the leader produces every job once.
    let latches = [
        LeaderLatch::new(&zk, &format!("{base}/leader"))?,
        LeaderLatch::new(&rival, &format!("{base}/leader"))?,
    ];
    let producers: Vec<_> = latches
        .iter()
        .enumerate()
        .map(|(instance, latch)| {
            let (latch, jobs, zk) = (latch.clone(), jobs.clone(), zk.clone());
            let mut stopping = stopping.clone();
            tokio::spawn(async move {
                let run = latch.run_while_leader_async(Timeout::Never, |guard| async move {
                    // Produce once: the job list is a node only the leader writes.
                    let marker = format!("{}/produced", jobs.path());
                    if zk.current().exists_async(&marker).await?.is_some() {
                        return Ok::<_, BoxError>(0);
                    }
                    for job in 0..JOBS {
                        if guard.is_lost() {
                            return Err("leadership lost while producing".into());
                        }
                        jobs.put_async(format!("job-{job}").as_bytes()).await?;
                    }
                    zk.current()
                        .create_async(&marker, b"", CreateMode::Persistent)
                        .await?;
                    println!("instance {instance} led and produced {JOBS} jobs");
                    Ok(JOBS)
                });
                tokio::select! {
                    produced = run => produced.map_err(BoxError::from)?,
                    _ = stopping.changed() => Ok(0),
                }
            })
        })
        .collect();

    // Consumers: a job's effect is written under a lock, whose loss is awaited beside it.
    let lock = Lock::new(&zk, &format!("{base}/results-lock"))?;
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|worker| {
            let (jobs, lock, zk, base) = (jobs.clone(), lock.clone(), zk.clone(), base.clone());
            let mut stopping = stopping.clone();
            tokio::spawn(async move {
                let mut done = 0;
                loop {
                    let item = tokio::select! {
                        item = jobs.take_async(Timeout::Never) => item?,
                        _ = stopping.changed() => return Ok::<_, BoxError>(done),
                    };
                    let guard = lock.acquire_async(Duration::from_secs(30)).await?;
                    let name = String::from_utf8_lossy(item.data()).into_owned();
                    let write = zk.current().create_async(
                        &format!("{base}/results/{name}"),
                        format!("by worker {worker}").as_bytes(),
                        CreateMode::Persistent,
                    );
                    tokio::select! {
                        written = write => match written {
                            Ok(_) | Err(zookeeper_mt::Error::NodeExists) => {}
                            Err(error) => return Err(error.into()),
                        },
                        lost = guard.lost() => {
                            // Not done: back to the queue for another worker.
                            item.release_async().await?;
                            return Err(format!("lock lost: {lost:?}").into());
                        }
                    }
                    guard.release_async().await?;
                    item.complete_async().await?;
                    done += 1;
                }
            })
        })
        .collect();

    // Wait until the cache shows every result.
    while *done_rx.borrow_and_update() < JOBS {
        done_rx.changed().await?;
    }
    // Shutdown: stop taking (pending takes are dropped, losing nothing), ...
    shutdown.send(true)?;
    let mut total = 0;
    for consumer in consumers {
        total += consumer.await??;
    }
    let mut produced = 0;
    for producer in producers {
        produced += producer.await??;
    }
    // ... release what is held (the latches' candidacies), stop the followers, ...
    for latch in &latches {
        latch.relinquish_async().await.map_err(BoxError::from)?;
    }
    drop(latches);
    results.close();
    let _ = feeder.await;
    let left = jobs.len_async().await?;
    let in_progress = jobs.in_progress_async().await?;
    println!(
        "{produced} jobs produced by the leader, {total} done by {CONSUMERS} workers; \
         {left} left in the queue, {in_progress} in progress"
    );
    assert_eq!(produced, JOBS);
    assert_eq!(total, JOBS);
    nodes::delete_recursive_async(&zk, &base, Duration::from_secs(30))
        .await
        .or_else(|error| match error {
            RecipeError::ZooKeeper(zookeeper_mt::Error::NoNode) => Ok(()),
            other => Err(other),
        })?;
    // ... and close the handles.
    rival.close_async().await?;
    zk.close_async().await?;
    println!("shut down: nothing lost, nothing left");
    Ok(())
}
