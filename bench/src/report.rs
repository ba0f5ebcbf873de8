//! Renders the results as Markdown: a throughput table with ratios per server
//! configuration, then peak RSS and watch notifications per operation per client process.

use crate::launchers::Launchers;
use crate::proto::{Measurement, Report};
use crate::runner::{ClientKind, ConfigKind, Spec};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One client's processes for one scenario (one per round).
pub struct ProcResult {
    pub spec: Spec,
    pub client: ClientKind,
    /// The reports of the rounds that succeeded.
    pub reports: Vec<Report>,
    /// Why the other rounds failed.
    pub errors: Vec<String>,
}

impl ProcResult {
    fn measurements(&self) -> impl Iterator<Item = &Measurement> {
        self.reports.iter().flat_map(|r| r.measurements.iter())
    }

    /// The largest peak RSS over the rounds' processes.
    fn peak_rss_kb(&self) -> Option<u64> {
        self.reports.iter().filter_map(|r| r.peak_rss_kb).max()
    }
}

/// All processes run against one server configuration.
pub struct ConfigRun {
    pub kind: ConfigKind,
    pub procs: Vec<ProcResult>,
    /// Date, machine, server and load, taken when this configuration's runs ended.
    pub caption: String,
}

/// Where and how the numbers were taken.
pub struct Meta {
    pub date: String,
    pub machine: String,
    pub load_before: String,
    pub load_after: String,
    pub server_version: String,
    pub clients: String,
    pub quick: bool,
    pub rounds: u32,
    pub elapsed: Duration,
}

impl Meta {
    pub fn collect(launchers: &Launchers, quick: bool, rounds: u32) -> Meta {
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let mem_gib = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        let py = |code: &str| {
            Command::new(&launchers.python)
                .args(["-c", code])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let python = py("import platform; print(platform.python_version())");
        let kazoo = py("import kazoo.version; print(kazoo.version.__version__)");
        let java = Command::new("java")
            .arg("-version")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .map(|l| l.trim().to_string())
            })
            .unwrap_or_else(|| "?".into());
        Meta {
            date: utc_now(),
            machine: format!("{cpu}, {cores} cores, {mem_gib:.0} GiB RAM, Linux {kernel}"),
            load_before: loadavg(),
            load_after: String::new(),
            server_version: "?".into(),
            clients: format!(
                "Rust zookeeper-mt {} over libzookeeper_mt 3.8.0 (Debian); C: bench/c/zkbench.c on the same \
                 libzookeeper_mt; zkpython: Debian source package zookeeper 3.8.0 + 2 fixes, Python {python}; \
                 kazoo {kazoo}, Python {python}; Curator 5.4 (Debian libcurator-recipes-java), {java}",
                env!("CARGO_PKG_VERSION")
            ),
            quick,
            rounds,
            elapsed: Duration::ZERO,
        }
    }

    pub fn finish(&mut self, elapsed: Duration) {
        self.load_after = loadavg();
        self.elapsed = elapsed;
    }

    /// The line under a table: when, on what, against which server, and the load then.
    pub fn caption(&self, server: &str) -> String {
        format!(
            "_Taken {} (table finished {}) on {}; server: {}; load average (1/5/15 min) at the \
             table's end: {}._",
            self.date,
            utc_now(),
            self.machine,
            server,
            loadavg()
        )
    }
}

/// How the harness starts every server of this bench (for captions).
pub fn server_settings(version: &str) -> String {
    format!(
        "ZooKeeper {version} (Debian package) via zk-harness, tickTime 500 ms, -Xmx256m, full JIT, \
         log level WARN"
    )
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn loadavg() -> String {
    read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `YYYY-MM-DD HH:MM UTC` without a date crate (civil-from-days, Howard Hinnant's).
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `1,234` style (one decimal below 100).
pub fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if x < 100.0 {
        return format!("{x:.1}");
    }
    fmt_count(x.round() as u64)
}

/// A count in `1,234` style.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Median, min and max of samples.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// The median, min and max of `samples` (`None` if empty).
pub fn stats(samples: &[f64]) -> Option<Stats> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    let median = median(&mut v);
    Some(Stats {
        median,
        min: v[0],
        max: v[v.len() - 1],
    })
}

fn label(metric: &str) -> String {
    if let Some(op) = metric.strip_prefix("sync_") {
        return format!("sync {op}");
    }
    let (base, suffix) = match metric.rsplit_once('_') {
        Some((b, s)) if s.starts_with('w') || s.starts_with('c') => (b, Some(s)),
        _ => (metric, None),
    };
    let n = |s: &str| s[1..].to_string();
    match (base, suffix) {
        ("async_create" | "async_get", Some(w)) => {
            format!("{} pipelined, {} in flight", &base[6..], n(w))
        }
        ("queue_take", Some(c)) => format!("queue take, {} consumer(s)", n(c)),
        ("lock", Some(c)) => format!("lock acquire+release, {} contender(s)", n(c)),
        ("id_naive", Some(w)) => format!("id generator naive CAS, {} worker(s)", n(w)),
        ("id_batched", Some(w)) => format!("id generator batched, {} worker(s)", n(w)),
        ("queue_put", _) => "queue put".into(),
        ("watch", _) => "watch: set -> event on another handle".into(),
        _ => metric.to_string(),
    }
}

/// The targets for a metric: (versus, minimum ratio).
fn targets(metric: &str) -> Vec<(ClientKind, f64)> {
    if metric.starts_with("sync_") {
        vec![(ClientKind::C, 0.97)]
    } else if metric.starts_with("async_") {
        vec![(ClientKind::C, 0.95), (ClientKind::Kazoo, 2.0)]
    } else {
        Vec::new()
    }
}

type Samples = BTreeMap<(String, ClientKind), Vec<f64>>;

struct Collected<'a> {
    metrics: Vec<String>,
    rates: Samples,
    lat_p50: Samples,
    failures: Vec<(&'a Spec, ClientKind, &'a str)>,
}

fn collect(run: &ConfigRun) -> Collected<'_> {
    let mut c = Collected {
        metrics: Vec::new(),
        rates: BTreeMap::new(),
        lat_p50: BTreeMap::new(),
        failures: Vec::new(),
    };
    for p in &run.procs {
        for e in &p.errors {
            c.failures.push((&p.spec, p.client, e.as_str()));
        }
        for m in p.measurements() {
            if !c.metrics.contains(&m.metric) {
                c.metrics.push(m.metric.clone());
            }
            let key = (m.metric.clone(), p.client);
            c.rates
                .entry(key.clone())
                .or_default()
                .push(m.ops_per_sec());
            if let Some(l) = m.extra.get("lat_p50_us").and_then(|v| v.parse().ok()) {
                c.lat_p50.entry(key).or_default().push(l);
            }
        }
    }
    c
}

fn notif_per_op(p: &ProcResult) -> Option<f64> {
    let relevant: Vec<&Measurement> = p
        .measurements()
        .filter(|m| {
            m.metric.starts_with("queue_take")
                || m.metric.starts_with("lock")
                || m.metric == "watch"
        })
        // A client that cannot count its recipes' watch events (Curator) says so.
        .filter(|m| !m.extra.contains_key("notif_unknown"))
        .collect();
    let ops: u64 = relevant.iter().map(|m| m.ops).sum();
    (ops > 0).then(|| relevant.iter().map(|m| m.notif).sum::<u64>() as f64 / ops as f64)
}

/// The report's header: when, where, against what.
pub fn render_header(meta: &Meta) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "## zookeeper-bench ({})\n",
        if meta.quick { "quick run" } else { "full run" }
    );
    let _ = writeln!(
        w,
        "- date: {}; took {:.0} s",
        meta.date,
        meta.elapsed.as_secs_f64()
    );
    let _ = writeln!(w, "- machine: {}", meta.machine);
    let _ = writeln!(
        w,
        "- load average (1/5/15 min) before: {}, after: {}",
        meta.load_before, meta.load_after
    );
    let _ = writeln!(
        w,
        "- server: ZooKeeper {} (Debian package) started by zk-harness: tickTime 500 ms, -Xmx256m, full JIT",
        meta.server_version
    );
    let _ = writeln!(w, "- clients: {}", meta.clients);
    out
}

/// The side-by-side tables (every scenario through every client).
pub fn render_side(meta: &Meta, clients: &[ClientKind], runs: &[ConfigRun]) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "\n## Side by side: every scenario through every client\n"
    );
    let _ = writeln!(
        w,
        "Each cell: ops/s, median of {} rounds (min–max); each client is its own process, run \
         one at a time. The queue and lock rows run each client's own recipe: Rust \
         `zookeeper_mt_recipes::Queue`/`Lock`/`IdGenerator`, Curator \
         `SimpleDistributedQueue`/`InterProcessMutex`/`DistributedAtomicLong`, kazoo its `Lock`; \
         C, zkpython and kazoo's queue and counter run the classic queue algorithm and a versioned \
         get + set.",
        meta.rounds
    );
    let rust = ClientKind::Rust;
    for run in runs {
        let c = collect(run);
        let _ = writeln!(w, "\n### {}\n", run.kind.describe());

        let mut header = String::from("| scenario |");
        let mut sep = String::from("|---|");
        for cl in clients {
            header.push_str(&format!(" {} |", cl.title()));
            sep.push_str("---:|");
        }
        let others: Vec<ClientKind> = clients.iter().copied().filter(|c| *c != rust).collect();
        if clients.contains(&rust) {
            for o in &others {
                header.push_str(&format!(" Rust/{} |", o.title()));
                sep.push_str("---:|");
            }
            header.push_str(" target |");
            sep.push_str("---|");
        }
        let _ = writeln!(w, "{header}\n{sep}");
        for metric in &c.metrics {
            let get = |cl: ClientKind| c.rates.get(&(metric.clone(), cl)).and_then(|v| stats(v));
            let mut line = format!("| {} |", label(metric));
            for cl in clients {
                match get(*cl) {
                    Some(s) => line.push_str(&format!(
                        " {} ({}–{}) |",
                        fmt_rate(s.median),
                        fmt_rate(s.min),
                        fmt_rate(s.max)
                    )),
                    None => line.push_str(" – |"),
                }
            }
            if clients.contains(&rust) {
                let ratio = |o: ClientKind| Some(get(rust)?.median / get(o)?.median);
                for o in &others {
                    match ratio(*o) {
                        Some(r) => line.push_str(&format!(" {r:.2} |")),
                        None => line.push_str(" – |"),
                    }
                }
                let verdicts: Vec<String> = targets(metric)
                    .into_iter()
                    .filter(|(o, _)| clients.contains(o))
                    .map(|(o, min)| match ratio(o) {
                        Some(r) => format!(
                            "{} ≥{min} {}",
                            o.title(),
                            if r >= min { "met" } else { "**missed**" }
                        ),
                        None => format!("{} ≥{min} ?", o.title()),
                    })
                    .collect();
                line.push_str(&format!(" {} |", verdicts.join(", ")));
            }
            let _ = writeln!(w, "{line}");
        }

        // derived: latency, batched vs naive, lock wake-ups
        let _ = writeln!(w);
        let lat: Vec<String> = clients
            .iter()
            .filter_map(|cl| {
                let mut v = c.lat_p50.get(&("watch".to_string(), *cl))?.clone();
                Some(format!("{} {:.0} µs", cl.title(), median(&mut v)))
            })
            .collect();
        if !lat.is_empty() {
            let _ = writeln!(
                w,
                "- watch notification latency (set on one handle -> event on another), p50: {}",
                lat.join(", ")
            );
        }
        let speedup: Vec<String> = clients
            .iter()
            .filter_map(|cl| {
                let b = stats(c.rates.get(&("id_batched_w8".to_string(), *cl))?)?.median;
                let n = stats(c.rates.get(&("id_naive_w8".to_string(), *cl))?)?.median;
                Some(format!("{} {:.0}×", cl.title(), b / n))
            })
            .collect();
        if !speedup.is_empty() {
            let _ = writeln!(w, "- id generator, batched (100 ids per CAS) / naive CAS at 8 workers (target ≥ 20×): {}", speedup.join(", "));
        }

        // per process: peak RSS and notifications per op
        let _ = writeln!(
            w,
            "\n| client process (scenario) | {} | {} |",
            clients
                .iter()
                .map(|c| format!("peak RSS {} (MiB)", c.title()))
                .collect::<Vec<_>>()
                .join(" | "),
            clients
                .iter()
                .map(|c| format!("notif/op {}", c.title()))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(w, "|---|{}", "---:|".repeat(clients.len() * 2));
        let mut labels: Vec<&Spec> = Vec::new();
        for p in &run.procs {
            if !labels.iter().any(|s| s.label == p.spec.label) {
                labels.push(&p.spec);
            }
        }
        for spec in labels {
            let find = |cl: ClientKind| {
                run.procs
                    .iter()
                    .find(|p| p.spec.label == spec.label && p.client == cl)
            };
            let mut line = format!("| {} (n={}) |", spec.label, spec.n);
            for cl in clients {
                match find(*cl).and_then(ProcResult::peak_rss_kb) {
                    Some(kb) => line.push_str(&format!(" {:.1} |", kb as f64 / 1024.0)),
                    None => line.push_str(" – |"),
                }
            }
            for cl in clients {
                match find(*cl).and_then(notif_per_op) {
                    Some(x) => line.push_str(&format!(" {x:.2} |")),
                    None => line.push_str(" |"),
                }
            }
            let _ = writeln!(w, "{line}");
        }
        let _ = writeln!(w, "\n{}", run.caption);
        if !c.failures.is_empty() {
            let _ = writeln!(w, "\nFailed runs:");
            for (spec, cl, e) in &c.failures {
                let _ = writeln!(w, "- {} / {}: {}", spec.label, cl.title(), e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(fmt_rate(1234567.4), "1,234,567");
        assert_eq!(fmt_rate(999.0), "999");
        assert_eq!(fmt_rate(12.34), "12.3");
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(100_000), "100,000");
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(label("async_get_w100"), "get pipelined, 100 in flight");
        assert_eq!(label("sync_create"), "sync create");
        assert_eq!(label("id_batched_w8"), "id generator batched, 8 worker(s)");
        assert!(utc_now().ends_with(" UTC"));
        assert_eq!(utc_now().len(), "2025-01-01 00:00 UTC".len());
    }
}
