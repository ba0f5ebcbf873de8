//! `memcheck`: does our client's RSS stay flat across a million watch registrations and
//! firings? (kazoo issue #175 was a leak of exactly this kind: per-watch objects kept
//! after they fired.) Each batch registers `exists` watches on `batch` nodes (pipelined),
//! fires them all with pipelined `set`s and waits for every event; RSS is sampled every
//! `sample` firings. Fails when RSS grows by more than `--max-growth-mb` from the first
//! sample to the last, or when contexts are left registered.
//!
//! `memcheck --per-watch N` measures instead the heap each armed watch costs, our client
//! next to the raw C client in the same process (see [`per_watch`]).

mod per_watch;

use crate::flags::Flags;
use crate::proto::rss_kb;
use crate::rust_client::{connect, delete_tree, ensure_path, Result};
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::{Acl, CreateMode, EventType};

pub fn main(flags: &Flags) -> Result<()> {
    let known = [
        "n",
        "batch",
        "sample",
        "hosts",
        "max-growth-mb",
        "per-watch",
    ];
    if let Some(bad) = flags.unknown(&known).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    if flags.get("per-watch").is_some() {
        return per_watch::main(flags);
    }
    let n: u64 = flags.num("n", 1_000_000)?;
    let batch: u64 = flags.num("batch", 1000)?;
    let sample: u64 = flags.num("sample", 100_000)?;
    let max_growth_mb: f64 = flags.num("max-growth-mb", 16.0)?;
    if n == 0 || batch == 0 || sample == 0 {
        return Err("--n, --batch and --sample must be positive".into());
    }
    let server;
    let hosts = match flags.get("hosts") {
        Some(h) => h.to_string(),
        None => {
            server = Server::start_with(
                &ServerOptions::new()
                    .force_sync(false)
                    .fast_startup(false)
                    .log_level("WARN"),
            )?;
            server.connect_string()
        }
    };
    let zk = connect(&hosts)?;
    let base = format!("/zkmemcheck-{}", std::process::id());
    ensure_path(&zk, &base)?;
    let acl = Acl::OPEN_UNSAFE;
    let paths: Vec<String> = (0..batch).map(|i| format!("{base}/n{i:05}")).collect();
    for p in &paths {
        zk.create(
            p,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
        )?;
    }
    let mut samples: Vec<(u64, u64, usize)> = vec![(0, rss_kb(), zk.live_contexts())];
    println!("| watches fired | RSS (MiB) | live contexts | elapsed (s) |\n|---:|---:|---:|---:|");
    println!(
        "| 0 | {:.1} | {} | 0 |",
        samples[0].1 as f64 / 1024.0,
        samples[0].2
    );
    let t = Instant::now();
    let mut fired = 0u64;
    let mut next_sample = sample;
    while fired < n {
        let k = batch.min(n - fired) as usize;
        let registrations: Vec<_> = paths[..k]
            .iter()
            .map(|p| zk.exists_watch_async(p))
            .collect();
        let mut watches = Vec::with_capacity(k);
        for r in registrations {
            let (stat, watch) = r.wait()?;
            if stat.is_none() {
                return Err("watched node vanished".into());
            }
            watches.push(watch);
        }
        let sets: Vec<_> = paths[..k]
            .iter()
            .map(|p| zk.set_async(p, b"x", None))
            .collect();
        for s in sets {
            s.wait()?;
        }
        for w in watches {
            match w.wait_timeout(Duration::from_secs(30)).map(Some)? {
                Some(ev) if ev.event_type == EventType::NodeDataChanged => {}
                other => return Err(format!("unexpected watch outcome {other:?}").into()),
            }
        }
        fired += k as u64;
        if fired >= next_sample || fired == n {
            let s = (fired, rss_kb(), zk.live_contexts());
            println!(
                "| {} | {:.1} | {} | {:.1} |",
                s.0,
                s.1 as f64 / 1024.0,
                s.2,
                t.elapsed().as_secs_f64()
            );
            samples.push(s);
            next_sample += sample;
        }
    }
    delete_tree(&zk, &base)?;
    zk.close()?;
    let live_after_close = zk.live_contexts();
    // the first sample after the first interval is the baseline (allocator and C client
    // buffers have reached their working size by then)
    let first = samples.get(1).copied().unwrap_or(samples[0]);
    let last = *samples.last().expect("at least one sample");
    let growth_mb = (last.1 as f64 - first.1 as f64) / 1024.0;
    println!(
        "\n{} watch registrations + firings in {:.1} s; RSS after {} firings {:.1} MiB, after {} firings {:.1} MiB \
         (growth {:+.1} MiB, limit {max_growth_mb} MiB); live contexts at the end {} (after close {})",
        fired,
        t.elapsed().as_secs_f64(),
        first.0,
        first.1 as f64 / 1024.0,
        last.0,
        last.1 as f64 / 1024.0,
        growth_mb,
        last.2,
        live_after_close
    );
    if growth_mb > max_growth_mb {
        return Err(format!(
            "RSS grew by {growth_mb:.1} MiB over {} firings",
            last.0 - first.0
        )
        .into());
    }
    if last.2 != 0 || live_after_close != 0 {
        return Err("contexts left registered after every watch fired".into());
    }
    println!("memcheck: flat");
    Ok(())
}
