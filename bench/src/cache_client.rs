//! `--scenario tree_cache`: our `TreeCache` on a big tree (the Rust row of the cache
//! section; `cache_scale.rs` builds the tree and makes the burst). The process:
//!
//! 1. starts a `TreeCache` on `--prefix` (the tree's root) and times it to
//!    `wait_initialized`, then waits until it has read `--expect` `Added` events (the
//!    whole tree); prints `RESULT metric=cache_load ops=<nodes cached> secs=<load>
//!    notif=<Added events read> rss_kb=<VmRSS now> peak_kb=<VmHWM now> full_secs=<time
//!    to the last Added>`;
//! 2. prints `READY` and reads one line from stdin; on `GO` the timer starts (the
//!    runner writes `GO`, then sets `--n` distinct leaves to `--value` from its own
//!    session), and the process waits until its event reader has seen an `Updated` (or
//!    an `Added`) carrying `--value` for `--n` distinct paths, or `--bound` seconds; prints
//!    `RESULT metric=cache_burst ops=<paths seen> secs=<time> notif=<Updated events>
//!    cached_ok=<cached nodes holding the value> complete=<1 if all seen>`.
//!
//! One thread reads the events from the cache's start, so the reader never falls
//! behind enough for an `Added` and a later `Updated` to be merged.

use crate::proto::{self, Measurement};
use crate::rust_client::{connect, Params, Result, Row};
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt_recipes::caches::{CacheEvent, TreeCache};

/// How long the cache may take after its initialized signal to hold the whole tree.
const FULL_BOUND: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Tally {
    added: u64,
    updated: u64,
    /// Paths whose `Added` or `Updated` carried the burst's value.
    matched: HashSet<String>,
    /// When `added` reached the expected node count.
    full_at: Option<Instant>,
    /// When the last of the `want` paths was seen.
    done_at: Option<Instant>,
}

pub fn tree_cache(p: &Params, round: u32) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    let value = p.value.as_bytes().to_vec();
    let want = p.n;
    let expect = p.expect;
    let bound = Duration::from_secs(p.bound);
    let tally = Arc::new((Mutex::new(Tally::default()), Condvar::new()));

    let heap_base = heap_in_use_kb();
    let t = Instant::now();
    let cache = TreeCache::new(&zk, &p.prefix)?;
    let reader = {
        let (cache, tally) = (cache.clone(), Arc::clone(&tally));
        thread::spawn(move || {
            // Ends when the cache is closed (its stream ends after the queued events).
            for event in cache.events() {
                let (lock, cv) = &*tally;
                let mut t = lock.lock().expect("not poisoned");
                let node = match event {
                    CacheEvent::Added(node) => {
                        t.added += 1;
                        if t.added == expect {
                            t.full_at = Some(Instant::now());
                            cv.notify_all();
                        }
                        node
                    }
                    CacheEvent::Updated { new, .. } => {
                        t.updated += 1;
                        new
                    }
                    _ => continue,
                };
                if node.data == value
                    && t.matched.insert(node.path.clone())
                    && t.matched.len() == want
                {
                    t.done_at = Some(Instant::now());
                    cv.notify_all();
                }
            }
        })
    };
    let load_bound = bound.max(Duration::from_secs(600));
    cache.wait_initialized(load_bound)?;
    let load = t.elapsed().as_secs_f64();
    let init_added = tally.0.lock().expect("not poisoned").added;
    let full = {
        let (lock, cv) = &*tally;
        let t_lock = lock.lock().expect("not poisoned");
        let (t_lock, _) = cv
            .wait_timeout_while(t_lock, FULL_BOUND, |t| t.added < expect)
            .expect("not poisoned");
        t_lock.full_at.map(|at| (at - t).as_secs_f64().max(load))
    };
    let load_row = Measurement {
        metric: "cache_load".into(),
        round,
        ops: cache.len() as u64,
        secs: load,
        notif: init_added,
        extra: BTreeMap::from([
            ("rss_kb".to_string(), proto::rss_kb().to_string()),
            ("peak_kb".to_string(), proto::peak_rss_kb().to_string()),
            ("heap_kb".to_string(), heap_in_use_kb().to_string()),
            ("heap_base_kb".to_string(), heap_base.to_string()),
            ("mode".to_string(), "watches".to_string()),
            (
                "full_secs".to_string(),
                full.map_or("-1".into(), |s| format!("{s:.6}")),
            ),
        ]),
    };
    println!("{}", load_row.line());
    println!("READY");

    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let mut rows = Vec::new();
    if line.trim() == "GO" {
        let t0 = Instant::now();
        let deadline = t0 + bound;
        let (lock, cv) = &*tally;
        let mut t = lock.lock().expect("not poisoned");
        while t.done_at.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            t = cv.wait_timeout(t, left).expect("not poisoned").0;
        }
        let secs = t.done_at.unwrap_or_else(Instant::now) - t0;
        let (seen, updated, complete) = (t.matched.len(), t.updated, t.done_at.is_some());
        drop(t);
        let cached_ok = cache
            .snapshot()
            .values()
            .filter(|node| node.data == p.value.as_bytes())
            .count();
        let mut row: Row = (
            "cache_burst".into(),
            seen as u64,
            secs.as_secs_f64(),
            updated,
            BTreeMap::new(),
        );
        row.4.insert("cached_ok".into(), cached_ok.to_string());
        row.4
            .insert("complete".into(), u8::from(complete).to_string());
        rows.push(row);
    }
    cache.close();
    let _ = reader.join();
    zk.close()?;
    Ok(rows)
}

/// KiB in use on the heap (glibc's `mallinfo2`: every arena plus mmapped blocks), our
/// crates' and the C client's allocations alike.
fn heap_in_use_kb() -> u64 {
    // SAFETY: mallinfo2 has no preconditions; it only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    ((info.uordblks + info.hblkhd) / 1024) as u64
}
