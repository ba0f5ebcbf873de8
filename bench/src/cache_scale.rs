//! `--sections cache`: tree caches at scale, side by side. The runner builds one tree of
//! ~100,000 nodes (the fan-out of a service registry) once, with pipelined creates from
//! its own session, on a throwaway server; then each client process (our `TreeCache`,
//! Curator's `TreeCache` and `CuratorCache`, kazoo's `TreeCache`) starts its cache on
//! the tree's root and reports the time to its initial load and its memory after it,
//! prints `READY`, and on the runner's `GO` (stdin) times how long its cache takes to
//! see a burst of changes the runner makes right after writing `GO`: setData on
//! distinct leaves, pipelined from the runner's session, each process with a value of
//! its own. The burst is the same Rust code for every client, outside the measured
//! process.

use crate::launchers::Launchers;
use crate::proto::{self, Report};
use crate::report::{self, fmt_count, Meta};
use crate::runner::ClientKind;
use crate::rust_client::{connect, pipelined, Params, Result, Row as RustRow};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Server, ServerOptions};
use zookeeper_mt::{Acl, CreateMode, CreateOptions, ZooKeeper};

/// Where the tree goes.
const ROOT: &str = "/zkcache/registry";
/// Fan-out per level below the root: services, versions, instances.
const FANOUT: [usize; 3] = [100, 10, 100];
/// Leaves changed by the burst.
const BURST: usize = 10_000;
/// Payload bytes of every node (and of the burst's values).
const PAYLOAD: usize = 48;
/// How long a client may take to report its load, and to see the burst.
const LOAD_BOUND: Duration = Duration::from_secs(900);
const BURST_BOUND_SECS: u64 = 120;
/// How long the clients wait after the initialized signal for the rest of the tree (the
/// clients' own constant).
const FULL_BOUND_SECS: u64 = 30;
/// The server's heap: 100,000 nodes plus the watches of one cache session.
const SERVER_HEAP_MB: u32 = 512;
/// The JVM heap of the Curator processes.
pub const CURATOR_XMX: &str = "-Xmx1g";

/// One row of the table: a cache implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    client: ClientKind,
    scenario: &'static str,
    title: &'static str,
}

const ROWS: [Row; 4] = [
    Row {
        client: ClientKind::Rust,
        scenario: "tree_cache",
        title: "Rust `zookeeper_mt_recipes::TreeCache`",
    },
    Row {
        client: ClientKind::Curator,
        scenario: "tree_cache",
        title: "Curator `TreeCache`",
    },
    Row {
        client: ClientKind::Curator,
        scenario: "curator_cache",
        title: "Curator `CuratorCache` (persistent recursive watch)",
    },
    Row {
        client: ClientKind::Kazoo,
        scenario: "tree_cache",
        title: "kazoo `TreeCache`",
    },
];

/// The tree's shape in words (for the caption).
fn shape() -> String {
    let nodes = tree_levels().iter().map(Vec::len).sum::<usize>() + 1;
    format!(
        "{ROOT} with {} services × {} versions × {} instances below it ({} levels, {} nodes \
         with the root, {PAYLOAD}-byte payloads)",
        FANOUT[0],
        FANOUT[1],
        FANOUT[2],
        FANOUT.len(),
        fmt_count(nodes as u64)
    )
}

/// The tree's paths, level by level (parents before children).
fn tree_levels() -> Vec<Vec<String>> {
    tree_levels_at(ROOT)
}

fn tree_levels_at(root: &str) -> Vec<Vec<String>> {
    let names = ["svc", "v", "i"];
    let mut levels: Vec<Vec<String>> = Vec::new();
    let mut parents = vec![root.to_string()];
    for (depth, &fan) in FANOUT.iter().enumerate() {
        let level: Vec<String> = parents
            .iter()
            .flat_map(|p| (0..fan).map(move |i| format!("{p}/{}{i:03}", names[depth])))
            .collect();
        parents = level.clone();
        levels.push(level);
    }
    levels
}

/// `BURST` distinct leaves spread evenly over the tree.
fn burst_paths(levels: &[Vec<String>]) -> Vec<String> {
    let leaves = levels.last().expect("the tree has levels");
    let stride = (leaves.len() / BURST).max(1);
    leaves.iter().step_by(stride).take(BURST).cloned().collect()
}

fn payload(text: &str) -> Vec<u8> {
    let mut v = text.as_bytes().to_vec();
    v.resize(PAYLOAD.max(v.len()), b'.');
    v
}

/// Creates the tree with pipelined creates (1,000 in flight), level by level.
fn build_tree(zk: &ZooKeeper, levels: &[Vec<String>]) -> Result<f64> {
    let t = Instant::now();
    let root = levels[0][0]
        .rsplit_once('/')
        .map_or(ROOT, |(parent, _)| parent);
    zookeeper_mt_recipes::nodes::ensure_path(zk, root)?;
    let data = payload("node");
    for level in levels {
        pipelined(level, 1000, |path| {
            zk.create_async(
                path,
                &data,
                CreateOptions::new(CreateMode::Persistent).with_acl(Acl::OPEN_UNSAFE),
            )
        })?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// `client --scenario tree_build --prefix ROOT`: the section's tree under `--prefix`
/// (the default `/zkbench` stands for the section's own root), for runs by hand.
pub fn tree_build(p: &Params) -> Result<Vec<RustRow>> {
    let zk = connect(&p.hosts)?;
    let levels = tree_levels_at(root_of(p));
    let secs = build_tree(&zk, &levels)?;
    zk.close()?;
    let nodes = levels.iter().map(Vec::len).sum::<usize>() + 1;
    Ok(vec![crate::rust_client::row("tree_build", nodes, secs, 0)])
}

/// `client --scenario tree_burst --prefix ROOT --value V`: the section's burst (pipelined
/// setData of `BURST` leaves to V), for runs by hand.
pub fn tree_burst(p: &Params) -> Result<Vec<RustRow>> {
    let zk = connect(&p.hosts)?;
    let changed = burst_paths(&tree_levels_at(root_of(p)));
    let data = payload(&p.value);
    let secs = pipelined(&changed, 1000, |path| zk.set_async(path, &data, None))?;
    zk.close()?;
    Ok(vec![crate::rust_client::row(
        "tree_burst",
        changed.len(),
        secs,
        0,
    )])
}

fn root_of(p: &Params) -> &str {
    if p.prefix == "/zkbench" {
        ROOT
    } else {
        &p.prefix
    }
}

/// One client process's outcome.
#[derive(Debug, Default)]
struct Outcome {
    report: Report,
    /// Seconds the runner's pipelined burst took (all replies in).
    burst_submit: Option<f64>,
    error: Option<String>,
}

/// Runs one client process through the READY / GO exchange, making the burst after GO.
fn run_interactive(cmd: &mut Command, burst: impl FnOnce() -> Result<f64>) -> Outcome {
    let mut out = Outcome::default();
    let mut child = match cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            out.error = Some(format!("spawn failed: {e}"));
            return out;
        }
    };
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let mut stdin = child.stdin.take().expect("piped");
    let (tx, lines) = mpsc::channel::<String>();
    let out_reader = thread::spawn(move || {
        for line in BufReader::new(stdout)
            .lines()
            .map_while(std::io::Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut text = String::new();
    let mut failure = None;
    // Until READY (or the end of its output, or the load bound).
    let deadline = Instant::now() + LOAD_BOUND;
    let ready = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.trim() == "READY" => break true,
            Ok(line) => {
                text.push_str(&line);
                text.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                failure = Some(format!("no READY within {} s", LOAD_BOUND.as_secs()));
                break false;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break false,
        }
    };
    if ready {
        let sent = stdin.write_all(b"GO\n").and_then(|()| stdin.flush());
        match sent
            .map_err(|e| e.to_string())
            .and_then(|()| burst().map_err(|e| format!("burst failed: {e}")))
        {
            Ok(secs) => out.burst_submit = Some(secs),
            Err(e) => failure = Some(e),
        }
        // The rest of its output: it reports by itself within its own bound.
        let deadline = Instant::now() + Duration::from_secs(BURST_BOUND_SECS + 60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    text.push_str(&line);
                    text.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    failure.get_or_insert_with(|| "no report after the burst".into());
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }
    drop(stdin);
    // Its output has ended (or it overran): it exits now, or is killed.
    let exit_deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if failure.is_some() || Instant::now() >= exit_deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    drop(lines);
    let _ = out_reader.join();
    let err = err_reader.join().unwrap_or_default();
    let tail: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = tail[tail.len().saturating_sub(3)..].join(" | ");
    if failure.is_none() && !matches!(status, Some(s) if s.success()) {
        failure = Some(format!("exit {status:?}: {tail}"));
    } else if let Some(f) = &mut failure {
        f.push_str(&format!("; {tail}"));
    }
    out.error = failure;
    match proto::parse(&text) {
        Ok(r) => out.report = r,
        Err(e) => {
            out.error.get_or_insert(e);
        }
    }
    out
}

/// The command of one row's process.
fn command(launchers: &Launchers, row: Row, hosts: &str, value: &str, nodes: usize) -> Command {
    let mut cmd = match row.client {
        ClientKind::Curator => {
            let mut cmd = Command::new("java");
            cmd.args([
                CURATOR_XMX,
                "-cp",
                launchers
                    .curator_classpath
                    .as_deref()
                    .expect("Curator available"),
                "CuratorBench",
            ]);
            cmd
        }
        other => launchers.command(other),
    };
    cmd.args([
        "--hosts",
        hosts,
        "--scenario",
        row.scenario,
        "--prefix",
        ROOT,
    ]);
    cmd.args(["--n", &BURST.to_string(), "--value", value]);
    cmd.args(["--bound", &BURST_BOUND_SECS.to_string()]);
    cmd.args(["--expect", &nodes.to_string()]);
    cmd
}

/// The section: server, tree, every row's process (`rounds` each, interleaved), table.
pub fn run(
    launchers: &Launchers,
    clients: &[ClientKind],
    meta: &mut Meta,
    rounds: u32,
) -> Result<String> {
    let rows: Vec<Row> = ROWS
        .into_iter()
        .filter(|r| clients.contains(&r.client) && launchers.available(r.client))
        .collect();
    for r in ROWS.iter().filter(|r| !rows.contains(r)) {
        eprintln!("  cache: {} left out (client unavailable)", r.title);
    }
    let options = ServerOptions::new()
        .force_sync(false)
        .fast_startup(false)
        .log_level("WARN")
        .heap_mb(SERVER_HEAP_MB);
    let server = Server::start_with(&options)?;
    let hosts = server.connect_string();
    let zk = connect(&hosts)?;
    let levels = tree_levels();
    let built = build_tree(&zk, &levels)?;
    let nodes = levels.iter().map(Vec::len).sum::<usize>() + 1;
    eprintln!("  cache: tree of {nodes} nodes built in {built:.1} s");
    let changed = burst_paths(&levels);
    let mut results: Vec<Vec<Outcome>> = rows.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..rows.len() {
            let i = (k + round as usize) % rows.len();
            let row = rows[i];
            let value = format!("burst-r{round}-{}-{}", row.client.name(), row.scenario);
            let data = payload(&value);
            let value = String::from_utf8(data.clone()).expect("ASCII");
            let t = Instant::now();
            let mut cmd = command(launchers, row, &hosts, &value, nodes);
            let outcome = run_interactive(&mut cmd, || {
                pipelined(&changed, 1000, |path| zk.set_async(path, &data, None))
            });
            eprintln!(
                "  cache round {round} {:<52} {:>6.1} s {}",
                row.title,
                t.elapsed().as_secs_f64(),
                outcome.error.as_deref().unwrap_or("")
            );
            results[i].push(outcome);
        }
    }
    drop(zk);
    let version = server
        .four_letter("srvr")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.trim_start_matches("Zookeeper version: ").to_string())
        })
        .map(|v| v.split(['-', ',']).next().unwrap_or("?").to_string())
        .unwrap_or_else(|| "?".into());
    drop(server);
    if meta.server_version.is_empty() || meta.server_version == "?" {
        meta.server_version = version.clone();
    }
    Ok(render(meta, &rows, &results, built, &version))
}

fn field(m: &proto::Measurement, key: &str) -> Option<f64> {
    m.extra.get(key).and_then(|v| v.parse().ok())
}

fn median(v: Vec<f64>) -> Option<f64> {
    report::stats(&v).map(|s| s.median)
}

fn render(
    meta: &Meta,
    rows: &[Row],
    results: &[Vec<Outcome>],
    built: f64,
    version: &str,
) -> String {
    let expected = tree_levels().iter().map(Vec::len).sum::<usize>() + 1;
    let metric = |o: &Outcome, name: &str| {
        o.report
            .measurements
            .iter()
            .find(|m| m.metric == name)
            .cloned()
    };
    let loads = |i: usize| -> Vec<proto::Measurement> {
        results[i]
            .iter()
            .filter_map(|o| metric(o, "cache_load"))
            .collect()
    };
    // The load: until the whole tree is in (a cache may signal initialized earlier).
    let full_secs = |m: &proto::Measurement| field(m, "full_secs").filter(|&s| s >= 0.0);
    // No figure for a process whose cache never held the whole tree.
    let load_of = |m: &proto::Measurement| full_secs(m);
    let curator = rows
        .iter()
        .position(|r| r.client == ClientKind::Curator && r.scenario == "tree_cache");
    let curator_load = curator.and_then(|i| median(loads(i).iter().filter_map(load_of).collect()));
    let curator_kb = |key: &str| {
        curator.and_then(|i| median(loads(i).iter().filter_map(|m| field(m, key)).collect()))
    };
    let (curator_rss, curator_heap) = (curator_kb("rss_kb"), curator_kb("heap_kb"));
    let mut s = String::new();
    s.push_str("\n## Tree caches at scale (`--sections cache`)\n\n");
    s.push_str(
        "| cache | initialized s (nodes then) | all nodes in s | load vs Curator TreeCache | \
         RSS after load MiB (peak) | heap in use after load MiB (B per node) | burst s | events seen / 10,000 | \
         cached = new value | load ≤ Curator | RSS ≤ Curator | heap ≤ Curator | no event \
         lost |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let load = loads(i);
        let bursts: Vec<proto::Measurement> = results[i]
            .iter()
            .filter_map(|o| metric(o, "cache_burst"))
            .collect();
        let init_s = median(load.iter().map(|m| m.secs).collect());
        let all_s = median(load.iter().filter_map(full_secs).collect());
        let load_s = median(load.iter().filter_map(load_of).collect());
        let partial: Vec<u64> = load
            .iter()
            .filter(|m| full_secs(m).is_none())
            .map(|m| m.ops)
            .collect();
        let kb = |key: &str| median(load.iter().filter_map(|m| field(m, key)).collect());
        let f1 = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{:.1}", x / 1024.0));
        let f2 = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.2}"));
        let ratio = match (load_s, curator_load) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        };
        let seen: Vec<u64> = bursts.iter().map(|m| m.ops).collect();
        let cached: Vec<u64> = bursts
            .iter()
            .filter_map(|m| field(m, "cached_ok"))
            .map(|x| x as u64)
            .collect();
        let per_node = match (
            kb("heap_kb"),
            kb("heap_base_kb"),
            median(load.iter().map(|m| m.ops as f64).collect()),
        ) {
            (Some(h), Some(b), Some(n)) if n > 0.0 => {
                format!(" ({})", fmt_count(((h - b) * 1024.0 / n).max(0.0) as u64))
            }
            _ => String::new(),
        };
        let at_init: Vec<u64> = load.iter().map(|m| m.notif).collect();
        let lost_ok = !bursts.is_empty()
            && bursts.len() == results[i].len()
            && seen.iter().all(|&n| n as usize == BURST);
        let at_most = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if a <= b => "yes",
            (Some(_), Some(_)) => "**no**",
            _ => "–",
        };
        let list = |v: &[u64]| {
            if v.is_empty() {
                return "–".to_string();
            }
            v.iter()
                .map(|&x| fmt_count(x))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        s.push_str(&format!(
            "| {} | {} ({}) | {} | {} | {} ({}) | {}{} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.title,
            f2(init_s),
            list(&at_init),
            if partial.is_empty() {
                f2(all_s)
            } else {
                format!(
                    "not within {} s (held {} of {})",
                    FULL_BOUND_SECS,
                    list(&partial),
                    fmt_count(expected as u64)
                )
            },
            ratio.map_or("–".into(), |r| format!("{r:.2} ×")),
            f1(kb("rss_kb")),
            f1(kb("peak_kb")),
            f1(kb("heap_kb")),
            per_node,
            f2(median(bursts.iter().map(|m| m.secs).collect())),
            list(&seen),
            list(&cached),
            at_most(load_s, curator_load),
            at_most(kb("rss_kb"), curator_rss),
            at_most(kb("heap_kb"), curator_heap),
            if lost_ok {
                "yes"
            } else if seen.is_empty() {
                "–"
            } else {
                "**no**"
            }
        ));
        for (round, o) in results[i].iter().enumerate() {
            if let Some(e) = &o.error {
                failures.push(format!("- {} round {round}: {e}", row.title));
            }
        }
    }
    let submit: Vec<f64> = results
        .iter()
        .flatten()
        .filter_map(|o| o.burst_submit)
        .collect();
    let rounds = results.first().map_or(0, Vec::len);
    let server = format!(
        "standalone server, forceSync=no, ZooKeeper {version} (Debian package) via zk-harness, \
         tickTime 500 ms, -Xmx{SERVER_HEAP_MB}m, full JIT, log level WARN"
    );
    s.push_str(&format!(
        "\nTree: {}, built once per run by the runner with pipelined creates (1,000 in \
         flight) in {built:.1} s. Each cell: median over {rounds} process(es) per cache (a \
         list: every process). Initialized: from the cache's start to its initialized signal \
         (ours: `wait_initialized`; Curator `TreeCache`: `TreeCacheEvent` INITIALIZED; \
         `CuratorCache`: its `forInitialized` listener; kazoo: `TreeEvent.INITIALIZED`), with \
         the added events its listener had seen then; all nodes: until the listener had seen \
         an added event for every node of the tree (`CuratorCache`: until it held every \
         node; at most {FULL_BOUND_SECS} s after the initialized signal): the load, and the \
         ratio is Curator `TreeCache`'s load / this one's (> 1: faster). Every process is a fresh one: the JVM's load \
         includes its JIT warm-up, as an application's first load does. \
         `CuratorCache` was built with `CuratorCache.build` (Curator 5.4 on a 3.8 server): \
         one persistent recursive watch on the root (`addWatch`), no per-node watches; the \
         `TreeCache`s arm a data and a child watch per node. RSS after load: `VmRSS` right \
         after the load (all nodes in; peak: `VmHWM` then); the JVM runs with `{CURATOR_XMX}`. Heap in \
         use: the JVM's `Runtime` total − free after `System.gc()`; ours: glibc's `mallinfo2` \
         (in-use bytes of every arena plus mmapped blocks: our crates' and the C client's \
         allocations); per node: (after the load − before the cache started) / nodes cached; \
         kazoo: not measured (RSS only). Burst: the process prints READY, the \
         runner writes GO to its stdin and then sets {} distinct leaves (every {}th) to a value \
         of that process's own, pipelined (1,000 in flight) from the runner's session \
         (median {:.2} s until all replies were in); burst s is from reading GO until the \
         cache's listener has seen an update (or added) event carrying the value for every \
         one of them (bound {BURST_BOUND_SECS} s: a process that sees fewer reports what it saw); \
         cached = new value counts the nodes whose cached data equals the value afterwards. \
         Targets: load at least as fast as Curator's `TreeCache`, memory at most Curator's, \
         no event lost.\n\n{}\n",
        shape(),
        fmt_count(BURST as u64),
        tree_levels().last().map_or(1, |l| l.len() / BURST),
        median(submit).unwrap_or(f64::NAN),
        meta.caption(&server)
    ));
    if !failures.is_empty() {
        s.push_str("\nFailed processes:\n\n");
        s.push_str(&failures.join("\n"));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shape() {
        let levels = tree_levels();
        assert_eq!(
            levels.iter().map(Vec::len).collect::<Vec<_>>(),
            [100, 1000, 100_000]
        );
        assert_eq!(levels[2][0], format!("{ROOT}/svc000/v000/i000"));
        let burst = burst_paths(&levels);
        assert_eq!(burst.len(), BURST);
        let distinct: std::collections::HashSet<_> = burst.iter().collect();
        assert_eq!(distinct.len(), BURST);
        assert_eq!(payload("x").len(), PAYLOAD);
    }
}
