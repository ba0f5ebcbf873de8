//! Distinct integer ids for workers that run in parallel, from one counter
//! znode updated by versioned read + compare-and-set. Several worker threads (each with
//! its own session, like separate processes) draw ids; the run prints each worker's
//! count, checks that no id was handed out twice, and compares one-CAS-per-id
//! scheme with the commenter's batches of 50.
//!
//! `cargo run --example id_generator` (uses `ZK_HOSTS` if set, else starts a server).

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::shared::{IdGenerator, IdStats};
use zookeeper_testing::{Hosts, HOSTS_ENV};

const WORKERS: usize = 8;
const IDS_PER_WORKER: usize = 250;

struct Run {
    per_worker: Vec<(Vec<u64>, IdStats)>,
    elapsed: Duration,
}

fn run(hosts: &str, path: &str, batch: u64) -> Result<Run, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let handles: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (hosts, path) = (hosts.to_string(), path.to_string());
            thread::spawn(move || -> Result<(Vec<u64>, IdStats), String> {
                let zk = ZooKeeper::connect(&hosts, Duration::from_secs(10))
                    .map_err(|e| e.to_string())?;
                let ids = IdGenerator::new(&zk, &path)
                    .and_then(|ids| ids.with_batch(batch))
                    .map_err(|e| e.to_string())?;
                let mut drawn = Vec::with_capacity(IDS_PER_WORKER);
                for _ in 0..IDS_PER_WORKER {
                    drawn.push(ids.next_id().map_err(|e| e.to_string())?);
                }
                Ok((drawn, ids.stats()))
            })
        })
        .collect();
    let mut per_worker = Vec::new();
    for handle in handles {
        per_worker.push(handle.join().map_err(|_| "worker panicked")??);
    }
    Ok(Run {
        per_worker,
        elapsed: started.elapsed(),
    })
}

fn report(label: &str, run: &Run) -> IdStats {
    println!("\n{label}");
    println!(
        "  {:<7} {:>5} {:>12} {:>12} {:>9} {:>9}",
        "worker", "ids", "lowest", "highest", "CAS", "conflicts"
    );
    let mut total = IdStats::default();
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    for (worker, (ids, stats)) in run.per_worker.iter().enumerate() {
        println!(
            "  {:<7} {:>5} {:>12} {:>12} {:>9} {:>9}",
            worker,
            ids.len(),
            ids.iter().min().copied().unwrap_or_default(),
            ids.iter().max().copied().unwrap_or_default(),
            stats.cas_attempts,
            stats.conflicts
        );
        for id in ids {
            if !seen.insert(*id) {
                duplicates += 1;
            }
        }
        total.ids += stats.ids;
        total.reservations += stats.reservations;
        total.cas_attempts += stats.cas_attempts;
        total.conflicts += stats.conflicts;
        total.connection_losses += stats.connection_losses;
        total.reads += stats.reads;
    }
    println!(
        "  {} ids, {} distinct, {} duplicates -> {}",
        total.ids,
        seen.len(),
        duplicates,
        if duplicates == 0 {
            "all unique"
        } else {
            "DUPLICATES!"
        }
    );
    println!("  {total} in {:.2?}", run.elapsed);
    total
}

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
    let tag = format!(
        "{}-{}",
        std::process::id(),
        zookeeper_mt_recipes::nodes::guid()
    );
    let naive_path = format!("/examples/id-generator/{tag}/naive");
    let batched_path = format!("/examples/id-generator/{tag}/batched");
    // A counter is created once, when it is set up; generators never create it, so one
    // that vanished is an error rather than a restart at 0 (which would repeat ids).
    let setup = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    for path in [&naive_path, &batched_path] {
        IdGenerator::create_counter(&setup, path, &zookeeper_mt_recipes::NodeOptions::default())?;
    }

    println!("{WORKERS} workers x {IDS_PER_WORKER} ids, each worker with its own session");
    let naive = run(&connect, &naive_path, 1)?;
    let naive_total = report("naive: one CAS per id (the seed)", &naive);
    let batched = run(&connect, &batched_path, 50)?;
    let batched_total = report("batched: one CAS per 50 ids (the commenter)", &batched);

    println!(
        "\n  {:<8} {:>6} {:>12} {:>10} {:>10} {:>9}",
        "mode", "ids", "CAS attempts", "conflicts", "CAS/id", "time"
    );
    for (label, total, run) in [
        ("naive", naive_total, &naive),
        ("batch 50", batched_total, &batched),
    ] {
        println!(
            "  {:<8} {:>6} {:>12} {:>10} {:>10.3} {:>9.2?}",
            label,
            total.ids,
            total.cas_attempts,
            total.conflicts,
            total.cas_attempts as f64 / total.ids.max(1) as f64,
            run.elapsed
        );
    }

    let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    for path in [&naive_path, &batched_path] {
        zk.delete(path, None)?;
    }
    zk.delete(&format!("/examples/id-generator/{tag}"), None)?;
    zk.close()?;
    if !hosts.is_external() {
        println!("\nstopping the throwaway server");
    }
    drop(hosts);
    Ok(())
}
