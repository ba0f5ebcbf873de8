//! The benchmark scenarios through our crates (`zookeeper-mt` and `recipes`): the Rust
//! column of the table. Run as `zookeeper-bench client --hosts H --scenario S ...`, the
//! same flags and output protocol as `c/zkbench.c` and `py/benchlib.py`, so every client
//! is its own process with its own peak RSS.

use crate::flags::Flags;
use crate::proto::{self, Measurement};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::{Acl, CreateMode, Error, ZkFuture, ZooKeeper};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub(crate) type Result<T, E = BoxError> = std::result::Result<T, E>;

pub(crate) const DATA: &[u8] = &[b'x'; 64];
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A scenario's parameters (the flags every client takes).
#[derive(Debug, Clone)]
pub struct Params {
    pub hosts: String,
    pub scenario: String,
    pub rounds: u32,
    pub n: usize,
    pub window: usize,
    pub workers: usize,
    pub batch: u64,
    pub mode: String,
    pub prefix: String,
    /// The op kind of the `op` scenario (`get`, `exists`, `set`, `create_delete`, `aget`,
    /// `acreate`).
    pub op: String,
    /// Watches armed before timing (`watchscale`).
    pub watches: usize,
    /// Takes timed after the first (`queuescale`).
    pub takes: usize,
    /// Repetitions of the timed phase of `op` (profiling by difference).
    pub reps: usize,
    /// The value the burst of `tree_cache` sets (what the cache must come to show).
    pub value: String,
    /// Seconds `tree_cache` waits for the burst's events before reporting what it saw.
    pub bound: u64,
    /// Nodes `tree_cache` waits to hold before the burst (the whole tree).
    pub expect: u64,
}

impl Params {
    /// From the `client` subcommand's flags.
    pub fn from_flags(f: &Flags) -> Result<Params, String> {
        let known = [
            "hosts", "scenario", "rounds", "n", "window", "workers", "batch", "mode", "prefix",
            "op", "watches", "takes", "reps", "value", "bound", "expect",
        ];
        if let Some(bad) = f.unknown(&known).first() {
            return Err(format!("unknown flag --{bad}"));
        }
        let p = Params {
            hosts: f.get("hosts").ok_or("--hosts is required")?.to_string(),
            scenario: f
                .get("scenario")
                .ok_or("--scenario is required")?
                .to_string(),
            rounds: f.num("rounds", 1)?,
            n: f.num("n", 1000)?,
            window: f.num("window", 100)?,
            workers: f.num("workers", 1)?,
            batch: f.num("batch", 100)?,
            mode: f.get("mode").unwrap_or("naive").to_string(),
            prefix: f.get("prefix").unwrap_or("/zkbench").to_string(),
            op: f.get("op").unwrap_or("get").to_string(),
            watches: f.num("watches", 0)?,
            takes: f.num("takes", 100)?,
            reps: f.num("reps", 1)?,
            value: f.get("value").unwrap_or("burst").to_string(),
            bound: f.num("bound", 120)?,
            expect: f.num("expect", 0)?,
        };
        if p.n == 0
            || p.window == 0
            || p.workers == 0
            || p.batch == 0
            || p.rounds == 0
            || p.reps == 0
        {
            return Err(
                "--n, --window, --workers, --batch, --rounds, --reps must be positive".into(),
            );
        }
        Ok(p)
    }
}

/// Runs `p.rounds` rounds of the scenario, printing the protocol lines.
pub fn run(p: &Params) -> Result<()> {
    for round in 0..p.rounds {
        let base = format!(
            "{}/rust-{}-{}-r{round}",
            p.prefix,
            std::process::id(),
            p.scenario
        );
        let results = match p.scenario.as_str() {
            "sync" => sync_ops(p, &base)?,
            "async" => async_ops(p, &base)?,
            "watch" => watch_latency(p, &base)?,
            "queue" => queue(p, &base)?,
            "lock" => lock(p, &base)?,
            "latch" => crate::recipes_bench::latch(p, &base)?,
            "idgen" => idgen(p, &base)?,
            "op" => crate::scale_client::op(p, &base)?,
            "watchscale" => crate::scale_client::watch_scale(p, &base)?,
            "sessions" => crate::scale_client::sessions(p)?,
            "queuescale" => crate::recipes_bench::queue_scale(p, &base)?,
            "queueput" => crate::recipes_bench::queue_put_cost(p, &base)?,
            "tree_cache" => crate::cache_client::tree_cache(p, round)?,
            "tree_build" => crate::cache_scale::tree_build(p)?,
            "tree_burst" => crate::cache_scale::tree_burst(p)?,
            other => return Err(format!("unknown scenario {other}").into()),
        };
        for (metric, ops, secs, notif, extra) in results {
            let m = Measurement {
                metric,
                round,
                ops,
                secs,
                notif,
                extra,
            };
            println!("{}", m.line());
        }
    }
    println!("RSS peak_kb={}", proto::peak_rss_kb());
    Ok(())
}

/// One result line: metric, ops, seconds, notifications, extra fields.
pub(crate) type Row = (String, u64, f64, u64, BTreeMap<String, String>);

pub(crate) fn row(metric: impl Into<String>, ops: usize, secs: f64, notif: u64) -> Row {
    (metric.into(), ops as u64, secs, notif, BTreeMap::new())
}

pub(crate) fn connect(hosts: &str) -> Result<ZooKeeper> {
    Ok(ZooKeeper::connect(hosts, SESSION_TIMEOUT)?)
}

pub(crate) fn ensure_path(zk: &ZooKeeper, path: &str) -> Result<()> {
    let mut cur = String::new();
    for part in path.trim_start_matches('/').split('/') {
        cur.push('/');
        cur.push_str(part);
        match zk.create(&cur, b"", CreateMode::Persistent) {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

pub(crate) fn delete_tree(zk: &ZooKeeper, path: &str) -> Result<()> {
    let children = match zk.get_children(path) {
        Ok(c) => c,
        Err(Error::NoNode) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for child in children {
        delete_tree(zk, &format!("{path}/{child}"))?;
    }
    match zk.delete(path, None) {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn node_paths(base: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{base}/n{i:07}")).collect()
}

fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

// ------------------------------------------------------------------ sync ops

fn sync_ops(p: &Params, base: &str) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    ensure_path(&zk, base)?;
    let paths = node_paths(base, p.n);
    let acl = Acl::OPEN_UNSAFE;
    let mut rows = Vec::new();
    let ((), s) = timed(|| {
        for path in &paths {
            zk.create(
                path,
                DATA,
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
            )?;
        }
        Ok(())
    })?;
    rows.push(row("sync_create", p.n, s, 0));
    let ((), s) = timed(|| {
        for path in &paths {
            zk.get(path)?;
        }
        Ok(())
    })?;
    rows.push(row("sync_get", p.n, s, 0));
    let ((), s) = timed(|| {
        for path in &paths {
            zk.set(path, DATA, None)?;
        }
        Ok(())
    })?;
    rows.push(row("sync_set", p.n, s, 0));
    let ((), s) = timed(|| {
        for path in &paths {
            zk.exists(path)?;
        }
        Ok(())
    })?;
    rows.push(row("sync_exists", p.n, s, 0));
    let ((), s) = timed(|| {
        for path in &paths {
            zk.delete(path, None)?;
        }
        Ok(())
    })?;
    rows.push(row("sync_delete", p.n, s, 0));
    delete_tree(&zk, base)?;
    zk.close()?;
    Ok(rows)
}

// ------------------------------------------------------------------ pipelined async

/// Submits one request per path with at most `window` in flight. Replies complete in
/// submission order (one C completion FIFO), so waiting on the oldest is exact.
pub(crate) fn pipelined<T>(
    paths: &[String],
    window: usize,
    submit: impl Fn(&str) -> ZkFuture<T>,
) -> Result<f64> {
    let t = Instant::now();
    let mut in_flight: VecDeque<ZkFuture<T>> = VecDeque::with_capacity(window);
    for path in paths {
        if in_flight.len() >= window {
            in_flight.pop_front().expect("window is not empty").wait()?;
        }
        in_flight.push_back(submit(path));
    }
    for f in in_flight {
        f.wait()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

fn async_ops(p: &Params, base: &str) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    ensure_path(&zk, base)?;
    let paths = node_paths(base, p.n);
    let acl = Acl::OPEN_UNSAFE;
    let w = p.window;
    let s = pipelined(&paths, w, |path| {
        zk.create_async(
            path,
            DATA,
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
        )
    })?;
    let mut rows = vec![row(format!("async_create_w{w}"), p.n, s, 0)];
    let s = pipelined(&paths, w, |path| zk.get_async(path))?;
    rows.push(row(format!("async_get_w{w}"), p.n, s, 0));
    pipelined(&paths, w.max(100), |path| zk.delete_async(path, None))?;
    delete_tree(&zk, base)?;
    zk.close()?;
    Ok(rows)
}

// ------------------------------------------------------------------ watch latency

fn watch_latency(p: &Params, base: &str) -> Result<Vec<Row>> {
    let writer = connect(&p.hosts)?;
    let watcher = connect(&p.hosts)?;
    ensure_path(&writer, base)?;
    let node = format!("{base}/w");
    writer.create(&node, DATA, CreateMode::Persistent)?;
    let mut lat = Vec::with_capacity(p.n);
    let mut notif = 0u64;
    let t = Instant::now();
    for _ in 0..p.n {
        let (_, _, watch) = watcher.get_watch(&node)?;
        let t0 = Instant::now();
        writer.set(&node, DATA, None)?;
        watch.wait_timeout(Duration::from_secs(10))?;
        notif += 1;
        lat.push(t0.elapsed());
    }
    let secs = t.elapsed().as_secs_f64();
    lat.sort();
    let mut r = row("watch", p.n, secs, notif);
    r.4.insert(
        "lat_p50_us".into(),
        lat[lat.len() / 2].as_micros().to_string(),
    );
    r.4.insert(
        "lat_p99_us".into(),
        lat[lat.len() * 99 / 100].as_micros().to_string(),
    );
    delete_tree(&writer, base)?;
    watcher.close()?;
    writer.close()?;
    Ok(vec![r])
}

// ------------------------------------------------------------------ the classic queue recipe

fn queue(p: &Params, base: &str) -> Result<Vec<Row>> {
    crate::recipes_bench::queue(p, base)
}

// ------------------------------------------------------------------ lock handoff

fn lock(p: &Params, base: &str) -> Result<Vec<Row>> {
    crate::recipes_bench::lock(p, base)
}

// ------------------------------------------------------------------ id generator

fn idgen(p: &Params, base: &str) -> Result<Vec<Row>> {
    use zookeeper_mt_recipes::shared::IdGenerator;
    let setup = connect(&p.hosts)?;
    ensure_path(&setup, base)?;
    let ctr = format!("{base}/ctr");
    IdGenerator::create_counter(&setup, &ctr, &zookeeper_mt_recipes::NodeOptions::default())?;
    let batch = if p.mode == "naive" { 1 } else { p.batch };
    let per = p.n / p.workers;
    let handles = (0..p.workers)
        .map(|_| connect(&p.hosts))
        .collect::<Result<Vec<_>>>()?;
    let generators = handles
        .iter()
        .map(|zk| IdGenerator::new(zk, &ctr).and_then(|ids| ids.with_batch(batch)))
        .collect::<Result<Vec<_>, _>>()?;
    let ids = Mutex::new(Vec::with_capacity(per * p.workers));
    let u0 = crate::usage::Usage::now();
    let t = Instant::now();
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = generators
            .iter()
            .map(|g| {
                let ids = &ids;
                s.spawn(move || -> Result<()> {
                    let mut mine = Vec::with_capacity(per);
                    for _ in 0..per {
                        mine.push(g.next_id()?);
                    }
                    ids.lock().expect("not poisoned").extend(mine);
                    Ok(())
                })
            })
            .collect();
        for j in joins {
            j.join().map_err(|_| "id worker panicked")??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let usage = u0.fields_since();
    let ids = ids.into_inner().expect("not poisoned");
    let distinct: HashSet<_> = ids.iter().collect();
    if distinct.len() != ids.len() {
        return Err("duplicate ids".into());
    }
    drop(generators);
    for zk in handles {
        zk.close()?;
    }
    delete_tree(&setup, base)?;
    setup.close()?;
    let mut r = row(format!("id_{}_w{}", p.mode, p.workers), ids.len(), secs, 0);
    r.4 = usage;
    Ok(vec![r])
}
