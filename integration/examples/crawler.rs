//! A crawler queue: producers add links to a locking work queue and
//! several workers take, lock and complete them. One worker "crashes" (its session ends)
//! in the middle of a link, and the link comes back to the others. At the end each
//! worker prints how many notifications it handled: a lock-per-item work queue where every idle worker watches the directory (as kazoo's
//! `LockingQueue`) wake every worker on every change; here a change wakes one or two.
//!
//! ```text
//! cargo run --example crawler          # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example crawler
//! ```

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::queues::WorkQueue;

const PRODUCERS: usize = 2;
const LINKS_PER_PRODUCER: usize = 8;
const WORKERS: usize = 3;
const STOP: &[u8] = b"STOP";

fn connect(hosts: &str) -> Result<ZooKeeper, zookeeper_mt::Error> {
    ZooKeeper::connect(hosts, Duration::from_secs(10))
}

/// Deletes `path` and everything below it.
fn delete_tree(zk: &ZooKeeper, path: &str) -> Result<(), zookeeper_mt::Error> {
    for child in zk.get_children(path)? {
        delete_tree(zk, &format!("{path}/{child}"))?;
    }
    match zk.delete(path, None) {
        Ok(()) | Err(zookeeper_mt::Error::NoNode) => Ok(()),
        Err(error) => Err(error),
    }
}

struct Report {
    crawled: Vec<String>,
    crashed_on: Option<String>,
    wakeups: u64,
    notifications: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let connect_string = hosts.connect_string();
    let path = format!("/crawler-{}", std::process::id());
    let total = PRODUCERS * LINKS_PER_PRODUCER;
    let (crawled_tx, crawled_rx) = mpsc::channel::<String>();

    // Workers: take a link (locking it), crawl it, complete it. Worker 3 crashes on its
    // first link: its session ends without completing, so its ephemeral lock vanishes.
    let workers: Vec<_> = (1..=WORKERS)
        .map(|id| {
            let zk = connect(&connect_string)?;
            let queue = WorkQueue::new(&zk, &path)?;
            let crawled_tx = crawled_tx.clone();
            Ok(thread::spawn(
                move || -> Result<Report, zookeeper_mt_recipes::RecipeError> {
                    let mut report = Report {
                        crawled: Vec::new(),
                        crashed_on: None,
                        wakeups: 0,
                        notifications: 0,
                    };
                    loop {
                        let item = queue.take(Timeout::Never)?;
                        if item.data() == STOP {
                            item.complete()?;
                            break;
                        }
                        let link = String::from_utf8_lossy(item.data()).into_owned();
                        if id == WORKERS && report.crashed_on.is_none() {
                            println!("worker {id} crashes while crawling {link}");
                            report.crashed_on = Some(link);
                            let _ = zk.close(); // the session ends; `item` is never completed
                            drop(item);
                            break;
                        }
                        println!("worker {id} crawling {link}");
                        item.complete()?;
                        report.crawled.push(link.clone());
                        let _ = crawled_tx.send(link);
                    }
                    let stats = queue.stats();
                    report.wakeups = stats.wakeups;
                    report.notifications = stats.notifications;
                    Ok(report)
                },
            ))
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    drop(crawled_tx);

    // Producers add the links.
    let producers: Vec<_> = (1..=PRODUCERS)
        .map(|p| {
            let connect_string = connect_string.clone();
            let path = path.clone();
            thread::spawn(move || -> Result<(), zookeeper_mt_recipes::RecipeError> {
                let zk = connect(&connect_string)?;
                let queue = WorkQueue::new(&zk, &path)?;
                for i in 1..=LINKS_PER_PRODUCER {
                    queue.put(format!("http://example.com/site{p}/page{i}").as_bytes())?;
                }
                println!("producer {p} added {LINKS_PER_PRODUCER} links");
                let _ = zk.close();
                Ok(())
            })
        })
        .collect();
    for producer in producers {
        producer.join().expect("a producer panicked")?;
    }

    // Once every link is crawled, tell the surviving workers to stop.
    let mut done = BTreeMap::new();
    while done.len() < total {
        let link = crawled_rx.recv_timeout(Duration::from_secs(60))?;
        *done.entry(link).or_insert(0) += 1;
    }
    let zk = connect(&connect_string)?;
    let stopper = WorkQueue::new(&zk, &path)?;
    for _ in 1..WORKERS {
        stopper.put(STOP)?;
    }

    let mut notifications = 0;
    for (i, worker) in workers.into_iter().enumerate() {
        let report = worker.join().expect("a worker panicked")?;
        notifications += report.notifications;
        let crash = report
            .crashed_on
            .map(|link| format!(", crashed holding {link}"))
            .unwrap_or_default();
        println!(
            "worker {}: crawled {} links, handled {} notifications ({} wake-ups){crash}",
            i + 1,
            report.crawled.len(),
            report.notifications,
            report.wakeups,
        );
    }
    let twice = done.values().filter(|&&n| n > 1).count();
    println!(
        "{} links crawled, {twice} of them twice; {notifications} notifications in all \
         (a directory watch per worker would wake every worker on every change: {} or more)",
        done.len(),
        total * WORKERS
    );

    delete_tree(&zk, &path)?;
    zk.close()?;
    drop(hosts);
    Ok(())
}
