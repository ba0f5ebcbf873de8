//! Scaling tables: does a cost stay flat as the work around it grows? Per-op latency
//! against armed watches and against requests in flight (Rust and C), take cost against
//! queue length, lock hand-off against waiters, memory per session (Rust and C). Each cell
//! is the median over `rounds` processes (Rust and C alternating).

use crate::launchers::{run_client, Launchers};
use crate::proto::{Measurement, Report};
use crate::report::{fmt_count, fmt_rate, stats, Meta};
use crate::runner::ClientKind;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The tables, by `--tables` name.
pub const TABLES: [&str; 5] = ["watches", "inflight", "queue", "lock", "sessions"];

/// Sizes of every table.
pub struct Plan {
    pub tables: Vec<String>,
    pub rounds: u32,
    pub timeout: Duration,
    watches: Vec<usize>,
    watch_n: usize,
    windows: Vec<usize>,
    inflight_n: usize,
    queue_lens: Vec<usize>,
    queue_takes: usize,
    put_n: usize,
    waiters: Vec<usize>,
    lock_n: usize,
    sessions: Vec<usize>,
}

impl Plan {
    pub fn new(quick: bool, tables: Vec<String>, rounds: u32, timeout: Duration) -> Plan {
        let q = |full: Vec<usize>, small: Vec<usize>| if quick { small } else { full };
        Plan {
            tables,
            rounds,
            timeout,
            watches: q(vec![0, 1000, 100_000], vec![0, 1000]),
            watch_n: if quick { 300 } else { 5000 },
            windows: q(vec![1, 10, 100, 1000, 10_000], vec![1, 100, 1000]),
            inflight_n: if quick { 2000 } else { 20_000 },
            queue_lens: q(vec![10, 100, 1000, 10_000, 100_000], vec![10, 1000]),
            queue_takes: if quick { 9 } else { 100 },
            put_n: if quick { 100 } else { 1000 },
            waiters: q(vec![1, 2, 4, 8, 16, 32, 64, 128, 256], vec![1, 8]),
            lock_n: if quick { 40 } else { 400 },
            sessions: q(vec![1, 10, 100, 1000], vec![1, 10]),
        }
    }

    fn wants(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t == table)
    }
}

/// Reports of one (row, client) cell, plus failures.
#[derive(Default)]
struct Cell {
    reports: Vec<Report>,
}

impl Cell {
    fn metric(&self, name: &str) -> impl Iterator<Item = &Measurement> {
        let name = name.to_string();
        self.reports
            .iter()
            .flat_map(|r| r.measurements.iter())
            .filter(move |m| m.metric == name)
    }

    /// Median of `f` over the rounds' `metric` measurements.
    fn median(&self, metric: &str, f: impl Fn(&Measurement) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.metric(metric).filter_map(f).collect();
        stats(&v).map(|s| s.median)
    }

    /// Median wall µs per op of `metric`.
    fn us_per_op(&self, metric: &str) -> Option<f64> {
        self.median(metric, |m| (m.ops > 0).then(|| m.secs * 1e6 / m.ops as f64))
    }

    /// Median CPU µs per op of `metric`.
    fn cpu_per_op(&self, metric: &str) -> Option<f64> {
        self.median(metric, |m| Some(field(m, "cpu_us")? / m.ops.max(1) as f64))
    }
}

fn field(m: &Measurement, key: &str) -> Option<f64> {
    m.extra.get(key)?.parse().ok()
}

struct Runner<'a> {
    launchers: &'a Launchers,
    hosts: &'a str,
    plan: &'a Plan,
    failures: Vec<String>,
}

impl Runner<'_> {
    /// `rounds` processes per client (alternating which client goes first), one cell each.
    fn cells(&mut self, what: &str, clients: &[ClientKind], args: &[String]) -> Vec<Cell> {
        let mut cells: Vec<Cell> = clients.iter().map(|_| Cell::default()).collect();
        for round in 0..self.plan.rounds {
            for k in 0..clients.len() {
                let i = (k + round as usize) % clients.len();
                if !self.launchers.available(clients[i]) {
                    continue; // its column stays empty
                }
                let mut cmd = self.launchers.command(clients[i]);
                cmd.args(["--hosts", self.hosts, "--prefix", "/zkscale"]);
                cmd.args(args);
                let t = Instant::now();
                let outcome = run_client(&mut cmd, self.plan.timeout);
                eprintln!(
                    "  scaling {what:<28} round {round} {:<5} {:>6.1} s {}",
                    clients[i].title(),
                    t.elapsed().as_secs_f64(),
                    outcome.as_ref().err().map_or("", String::as_str)
                );
                match outcome {
                    Ok(report) => cells[i].reports.push(report),
                    Err(e) => self
                        .failures
                        .push(format!("{what} {} round {round}: {e}", clients[i].title())),
                }
            }
        }
        cells
    }
}

fn args(list: &[(&str, String)]) -> Vec<String> {
    list.iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.clone()])
        .collect()
}

fn f1(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| {
        if x >= 100.0 {
            fmt_rate(x)
        } else {
            format!("{x:.1}")
        }
    })
}

fn f0(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| fmt_count(x.round() as u64))
}

fn f2(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{x:.2}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

/// Runs the selected tables and renders them.
pub fn run(launchers: &Launchers, hosts: &str, server: &str, meta: &Meta, plan: &Plan) -> String {
    let mut r = Runner {
        launchers,
        hosts,
        plan,
        failures: Vec::new(),
    };
    let both = [ClientKind::Rust, ClientKind::C];
    let rust = [ClientKind::Rust];
    let mut out = String::from("\n## Scaling: costs against the work around them\n");
    let w = &mut out;
    let _ = writeln!(
        w,
        "\nEach cell: median over {} process(es) per client (Rust and C alternating).",
        plan.rounds
    );

    if plan.wants("watches") {
        let _ = writeln!(
            w,
            "\n### Per-op cost against armed watches\n\nK exists-watches armed on absent \
             nodes (registered, never firing), then {} sync gets and {} pipelined gets (1000 in \
             flight) on other nodes.\n",
            fmt_count(plan.watch_n as u64),
            fmt_count(plan.watch_n as u64)
        );
        let _ = writeln!(w, "| armed watches | sync get µs/op Rust | sync get µs/op C | pipelined get µs/op Rust | pipelined get µs/op C | CPU µs/op sync get Rust | CPU µs/op sync get C | RSS MiB Rust | RSS MiB C |");
        let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut rss: Vec<(usize, Option<f64>, Option<f64>)> = Vec::new();
        let mut sync_us: Vec<(usize, Option<f64>, Option<f64>)> = Vec::new();
        for &k in &plan.watches {
            let a = args(&[
                ("scenario", "watchscale".into()),
                ("watches", k.to_string()),
                ("n", plan.watch_n.to_string()),
                ("window", "1000".into()),
            ]);
            let cells = r.cells(&format!("watches {k}"), &both, &a);
            let rss_kb = |c: &Cell| c.median("ws_aget", |m| field(m, "rss_kb"));
            rss.push((k, rss_kb(&cells[0]), rss_kb(&cells[1])));
            sync_us.push((
                k,
                cells[0].us_per_op("ws_get"),
                cells[1].us_per_op("ws_get"),
            ));
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_count(k as u64),
                f1(cells[0].us_per_op("ws_get")),
                f1(cells[1].us_per_op("ws_get")),
                f1(cells[0].us_per_op("ws_aget")),
                f1(cells[1].us_per_op("ws_aget")),
                f1(cells[0].cpu_per_op("ws_get")),
                f1(cells[1].cpu_per_op("ws_get")),
                f1(rss_kb(&cells[0]).map(|kb| kb / 1024.0)),
                f1(rss_kb(&cells[1]).map(|kb| kb / 1024.0)),
            );
        }
        if let (Some(first), Some(last)) = (sync_us.first(), sync_us.last()) {
            let _ = writeln!(
                w,
                "\n- sync get µs/op at {} watches / at {}: Rust {}, C {}",
                fmt_count(last.0 as u64),
                fmt_count(first.0 as u64),
                f2(ratio(last.1, first.1)),
                f2(ratio(last.2, first.2))
            );
        }
        if let (Some(first), Some(last)) = (rss.first(), rss.last()) {
            if last.0 > first.0 {
                let per = |a: Option<f64>, b: Option<f64>| {
                    Some((a? - b?) * 1024.0 / (last.0 - first.0) as f64)
                };
                let _ = writeln!(
                    w,
                    "- memory per armed watch (RSS growth / watches): Rust {} bytes, C {} bytes",
                    f1(per(last.1, first.1)),
                    f1(per(last.2, first.2))
                );
            }
        }
        let _ = writeln!(w, "\n{}", meta.caption(server));
    }

    if plan.wants("inflight") {
        let _ = writeln!(
            w,
            "\n### Per-op cost against requests in flight\n\n{} pipelined gets with at most W \
             in flight (one process per cell). Mean request latency = W × µs/op (Little's law).\n",
            fmt_count(plan.inflight_n as u64)
        );
        let _ = writeln!(w, "| in flight | µs/op Rust | µs/op C | Rust/C time per op | CPU µs/op Rust | CPU µs/op C | Rust/C CPU per op | mean latency ms Rust | mean latency ms C |");
        let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &win in &plan.windows {
            let n = plan.inflight_n.max(2 * win);
            let a = args(&[
                ("scenario", "op".into()),
                ("op", "aget".into()),
                ("n", n.to_string()),
                ("window", win.to_string()),
            ]);
            let cells = r.cells(&format!("in flight {win}"), &both, &a);
            let us = |c: &Cell| c.us_per_op("op_aget");
            let cpu = |c: &Cell| c.cpu_per_op("op_aget");
            let lat = |c: &Cell| us(c).map(|u| u * win as f64 / 1000.0);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_count(win as u64),
                f1(us(&cells[0])),
                f1(us(&cells[1])),
                f2(ratio(us(&cells[0]), us(&cells[1]))),
                f1(cpu(&cells[0])),
                f1(cpu(&cells[1])),
                f2(ratio(cpu(&cells[0]), cpu(&cells[1]))),
                f2(lat(&cells[0])),
                f2(lat(&cells[1])),
            );
        }
        let _ = writeln!(w, "\n{}", meta.caption(server));
    }

    if plan.wants("queue") {
        let _ = writeln!(
            w,
            "\n### Queue take cost against queue length (`zookeeper_mt_recipes::queues::Queue`)\n\nThe queue \
             is filled with L items, then a fresh `Queue` value takes one item (it lists the \
             whole queue: one `get_children` of L names) and {} more (served from that listing: \
             get + delete each).\n",
            plan.queue_takes
        );
        let _ = writeln!(
            w,
            "| items in queue | first take ms | µs per later take | CPU µs per later take |"
        );
        let _ = writeln!(w, "|---:|---:|---:|---:|");
        for &len in &plan.queue_lens {
            let a = args(&[
                ("scenario", "queuescale".into()),
                ("n", len.to_string()),
                ("takes", plan.queue_takes.to_string()),
            ]);
            let cells = r.cells(&format!("queue length {len}"), &rust, &a);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                fmt_count(len as u64),
                f2(cells[0].us_per_op("qs_first_take").map(|us| us / 1000.0)),
                f1(cells[0].us_per_op("qs_take")),
                f1(cells[0].cpu_per_op("qs_take")),
            );
        }
        let a = args(&[
            ("scenario", "queueput".into()),
            ("n", plan.put_n.to_string()),
        ]);
        let cells = r.cells("queue put vs raw create", &rust, &a);
        let put = cells[0].median("qp_put", |m| Some(m.ops_per_sec()));
        let raw = cells[0].median("qp_raw_create", |m| Some(m.ops_per_sec()));
        let batch = cells[0].median("qp_put_all", |m| Some(m.ops_per_sec()));
        let _ = writeln!(
            w,
            "\nPut cost ({} of each, alternating in chunks of 50, one session): \
             `Queue::put` (exactly-once: multi of item + receipt, then the receipt's delete, \
             pipelined) {} puts/s, CPU {} µs/put; one raw sequential create {} creates/s, \
             CPU {} µs/create; put / raw = {} (target ≥ 0.9). `Queue::put_all` of 50 items \
             (one multi of 50 items + 50 receipts after one `exists`, then one multi deleting \
             the receipts, pipelined) {} items/s, CPU {} µs/item; batched / single put = {} \
             (target ≥ 5).",
            plan.put_n,
            f1(put),
            f1(cells[0].cpu_per_op("qp_put")),
            f1(raw),
            f1(cells[0].cpu_per_op("qp_raw_create")),
            f2(ratio(put, raw)),
            f1(batch),
            f1(cells[0].cpu_per_op("qp_put_all")),
            f2(ratio(batch, put))
        );
        let _ = writeln!(w, "\n{}", meta.caption(server));
    }

    if plan.wants("lock") {
        let _ = writeln!(
            w,
            "\n### Lock hand-off against waiters (`zookeeper_mt_recipes::locks::Lock`)\n\nW contenders, each \
             its own session and `Lock` value in one process, acquire and release in a loop \
             (max(2, {} / W) times each), so up to W − 1 are queued at every hand-off. With \
             W = 1 there is no hand-off: the uncontended acquire + release.\n",
            plan.lock_n
        );
        let _ = writeln!(
            w,
            "| waiters W | µs per acquisition | wake-ups per acquisition | acquisitions |"
        );
        let _ = writeln!(w, "|---:|---:|---:|---:|");
        for &wt in &plan.waiters {
            let per = (plan.lock_n / wt).max(2);
            let a = args(&[
                ("scenario", "lock".into()),
                ("workers", wt.to_string()),
                ("n", (per * wt).to_string()),
            ]);
            let cells = r.cells(&format!("lock waiters {wt}"), &rust, &a);
            let metric = format!("lock_c{wt}");
            let wake = cells[0].median(&metric, |m| Some(m.notif as f64 / m.ops.max(1) as f64));
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} |",
                wt,
                f1(cells[0].us_per_op(&metric)),
                f2(wake),
                per * wt
            );
        }
        let _ = writeln!(w, "\n{}", meta.caption(server));
    }

    if plan.wants("sessions") {
        let _ = writeln!(
            w,
            "\n### Memory per session\n\nS sessions opened in one process (each connected and \
             having answered one `exists`); RSS growth from before the first / S.\n"
        );
        let _ = writeln!(w, "| sessions S | KiB/session Rust | KiB/session C | threads Rust | threads C | ms to open one Rust | ms to open one C |");
        let _ = writeln!(w, "|---:|---:|---:|---:|---:|---:|---:|");
        for &s in &plan.sessions {
            let a = args(&[("scenario", "sessions".into()), ("n", s.to_string())]);
            let cells = r.cells(&format!("sessions {s}"), &both, &a);
            let per = |c: &Cell| {
                c.median("sessions", |m| {
                    Some((field(m, "rss_kb")? - field(m, "rss0_kb")?) / m.ops.max(1) as f64)
                })
            };
            let threads = |c: &Cell| c.median("sessions", |m| field(m, "threads"));
            let open = |c: &Cell| c.us_per_op("sessions").map(|us| us / 1000.0);
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} | {} |",
                fmt_count(s as u64),
                f1(per(&cells[0])),
                f1(per(&cells[1])),
                f0(threads(&cells[0])),
                f0(threads(&cells[1])),
                f2(open(&cells[0])),
                f2(open(&cells[1])),
            );
        }
        let _ = writeln!(w, "\n{}", meta.caption(server));
    }

    if !r.failures.is_empty() {
        let _ = writeln!(w, "\nFailed runs:");
        for f in &r.failures {
            let _ = writeln!(w, "- {f}");
        }
    }
    out
}
