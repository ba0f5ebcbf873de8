//! `before-after`: the recipe rows of two builds of the recipes, against one server in one
//! run. `--old BIN` is a `zookeeper-bench` binary built from an older tree (see
//! `bench/before-after.sh`, which builds it with this tree's scenario files, so both
//! binaries run the same scenario code and only the libraries differ); "after" is this
//! binary. Every pair runs each row once through each binary, back to back (which goes
//! first alternates, so an even number of pairs balances the order), then once through
//! each peer client that has the row (C, zkpython, kazoo, Curator), for reference. The table gives each version's median ops/s, the
//! median of the per-pair after/before ratios with min–max, and CPU time, context switches
//! and watch wake-ups per op.

use crate::flags::Flags;
use crate::launchers::{run_client, Launchers};
use crate::proto::{Measurement, Report};
use crate::report::{self, fmt_count, fmt_rate, stats, Meta};
use crate::runner::ClientKind;
use crate::rust_client::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod instructions;

/// One client process per pair and version: a scenario and the rows it reports.
struct Run {
    /// `--only` name.
    name: &'static str,
    scenario: &'static str,
    n: usize,
    workers: usize,
    mode: &'static str,
    /// Whether the peers (C, zkpython, kazoo, Curator) have this scenario.
    peers: bool,
    /// (metric, table label).
    rows: Vec<(String, String)>,
    /// `--instructions`: the smaller n of the callgrind runs, and what one op is.
    cg: (usize, &'static str),
}

fn runs(quick: bool) -> Vec<Run> {
    let q = |full: usize, small: usize| if quick { small } else { full };
    let run = |name, scenario, n, workers, cg, rows: &[(&str, &str)]| Run {
        name,
        scenario,
        n,
        workers,
        mode: "naive",
        peers: true,
        rows: rows
            .iter()
            .map(|(m, l)| (m.to_string(), l.to_string()))
            .collect(),
        cg,
    };
    let mut v = vec![
        run(
            "queue c1",
            "queue",
            q(2000, 100),
            1,
            (100, "queue: one put and one take, 1 consumer"),
            &[
                ("queue_put", "queue put (`Queue::put`)"),
                ("queue_take_c1", "queue take, 1 consumer (`Queue::take`)"),
            ],
        ),
        run(
            "queue c4",
            "queue",
            q(2000, 100),
            4,
            (100, "queue: one put and one take, 4 consumers"),
            &[("queue_take_c4", "queue take, 4 consumers")],
        ),
    ];
    for (name, workers, label, cg) in [
        ("lock c1", 1, "lock acquire+release, 1 contender", "lock c1"),
        (
            "lock c2",
            2,
            "lock hand-off between 2 sessions",
            "lock c2 (hand-off)",
        ),
        (
            "lock c8",
            8,
            "lock acquire+release, 8 contenders",
            "lock c8",
        ),
    ] {
        let cg_n = if workers == 8 { 160 } else { 100 };
        v.push(run(
            name,
            "lock",
            q(2000, 80),
            workers,
            (cg_n, cg),
            &[(&format!("lock_c{workers}"), label)],
        ));
    }
    v.push(Run {
        peers: false,
        ..run(
            "latch w2",
            "latch",
            q(1000, 40),
            2,
            (100, "leader latch hand-over"),
            &[("latch_w2", "leader latch hand-over between 2 sessions")],
        )
    });
    for (name, mode, workers, full, small, cg_n) in [
        ("id naive w1", "naive", 1, 1000, 80, 100),
        ("id naive w8", "naive", 8, 1000, 80, 160),
        ("id batched w1", "batched", 1, 50_000, 2000, 2000),
        ("id batched w8", "batched", 8, 50_000, 2000, 2000),
    ] {
        let metric = format!("id_{mode}_w{workers}");
        let label = format!("id generator {mode}, {workers} worker(s)");
        v.push(Run {
            mode,
            ..run(
                name,
                "idgen",
                q(full, small),
                workers,
                (cg_n, name),
                &[(&metric, &label)],
            )
        });
    }
    v.push(Run {
        peers: false,
        ..run(
            "queueput",
            "queueput",
            q(500, 100),
            1,
            (100, "queueput: one put, one raw create, one put_all item"),
            &[
                (
                    "qp_put",
                    "queue put, alternating with the two below (`Queue::put`)",
                ),
                ("qp_put_all", "queue put_all, 50 items a batch"),
                (
                    "qp_raw_create",
                    "control: raw sequential create (no recipe)",
                ),
            ],
        )
    });
    v
}

fn args(run: &Run, hosts: &str, n: usize) -> Vec<String> {
    [
        ("hosts", hosts.to_string()),
        ("scenario", run.scenario.to_string()),
        ("n", n.to_string()),
        ("workers", run.workers.to_string()),
        ("batch", "100".to_string()),
        ("mode", run.mode.to_string()),
        ("prefix", "/zkbeforeafter".to_string()),
    ]
    .into_iter()
    .flat_map(|(k, v)| [format!("--{k}"), v])
    .collect()
}

/// Who runs a process: the old binary, this one, or a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Before,
    After,
    Peer(ClientKind),
}

pub fn main(flags: &Flags) -> Result<()> {
    let known = [
        "old",
        "old-label",
        "new-label",
        "pairs",
        "hosts",
        "fsync",
        "peers",
        "only",
        "timeout",
        "out",
        "quick",
        "command",
        "instructions",
    ];
    if let Some(bad) = flags.unknown(&known).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let old = PathBuf::from(flags.get("old").ok_or("--old BIN is required")?);
    if !old.is_file() {
        return Err(format!("--old {}: no such file", old.display()).into());
    }
    let quick = flags.switch("quick");
    let pairs: u32 = flags.num("pairs", if quick { 2 } else { 6 })?;
    let timeout = Duration::from_secs(flags.num("timeout", 300)?);
    let mut runs = runs(quick);
    if let Some(only) = flags.get("only") {
        let only: Vec<&str> = only.split(',').collect();
        runs.retain(|r| only.contains(&r.name) || only.contains(&r.scenario));
        if runs.is_empty() {
            return Err("--only selected no row".into());
        }
    }
    let wanted: Vec<ClientKind> = match flags.get("peers").unwrap_or("c,zkpython,kazoo,curator") {
        "none" | "" => Vec::new(),
        list => list
            .split(',')
            .map(|s| {
                ClientKind::ALL
                    .into_iter()
                    .find(|c| c.name() == s && *c != ClientKind::Rust)
                    .ok_or_else(|| format!("unknown peer {s:?}"))
            })
            .collect::<std::result::Result<_, _>>()?,
    };
    let launchers = Launchers::discover(
        wanted.contains(&ClientKind::Zkpython),
        wanted.contains(&ClientKind::Curator),
    );
    let mut peers: Vec<ClientKind> = wanted
        .into_iter()
        .filter(|c| {
            let ok = launchers.available(*c);
            if !ok {
                eprintln!("before-after: {} left out (unavailable)", c.title());
            }
            ok
        })
        .collect();
    peers.sort();
    peers.dedup();

    let fsync = match flags.get("fsync").unwrap_or("off") {
        "on" => true,
        "off" => false,
        other => return Err(format!("--fsync on|off, not {other:?}").into()),
    };
    let server = match flags.get("hosts") {
        Some(_) => None,
        None => Some(zk_harness::Server::start_with(
            &zk_harness::ServerOptions::new()
                .force_sync(fsync)
                .fast_startup(false)
                .log_level("WARN"),
        )?),
    };
    let hosts = match (&server, flags.get("hosts")) {
        (Some(s), _) => s.connect_string(),
        (None, Some(h)) => h.to_string(),
        (None, None) => unreachable!("a server was started"),
    };
    let mut meta = Meta::collect(&launchers, quick, pairs);
    if let Some(s) = &server {
        meta.server_version = s
            .four_letter("srvr")
            .ok()
            .and_then(|t| t.lines().next().map(str::to_string))
            .map(|l| {
                let v = l.trim_start_matches("Zookeeper version: ");
                v.split(['-', ',']).next().unwrap_or(v).to_string()
            })
            .unwrap_or_else(|| "?".into());
    }
    crate::runner::warm_up(&launchers, &hosts, quick, timeout)?;
    // The recipes' server paths (multi, sequential nodes, watches) warmed too, untimed.
    for run in &runs {
        let mut cmd = launchers.command(ClientKind::Rust);
        cmd.args(args(run, &hosts, run.n.min(100)));
        run_client(&mut cmd, timeout).map_err(|e| format!("warm-up {}: {e}", run.name))?;
    }

    let command_of = |who: Who| -> Command {
        match who {
            Who::Before => {
                let mut cmd = Command::new(&old);
                cmd.arg("client");
                cmd
            }
            Who::After => launchers.command(ClientKind::Rust),
            Who::Peer(c) => launchers.command(c),
        }
    };
    // (run index, who) -> one report per pair (None: failed).
    let mut got: BTreeMap<(usize, Who), Vec<Option<Report>>> = BTreeMap::new();
    let mut failures = Vec::new();
    let started = Instant::now();
    for pair in 0..pairs {
        for (i, run) in runs.iter().enumerate() {
            let mut order = if (pair as usize + i) % 2 == 0 {
                vec![Who::Before, Who::After]
            } else {
                vec![Who::After, Who::Before]
            };
            if run.peers {
                let k = peers.len().max(1);
                order.extend((0..peers.len()).map(|j| Who::Peer(peers[(j + pair as usize) % k])));
            }
            for who in order {
                let t = Instant::now();
                let mut cmd = command_of(who);
                cmd.args(args(run, &hosts, run.n));
                let outcome = run_client(&mut cmd, timeout);
                eprintln!(
                    "  pair {pair} {:<14} {:<9} {:>6.1} s {}",
                    run.name,
                    name(who),
                    t.elapsed().as_secs_f64(),
                    outcome.as_ref().err().map_or("", String::as_str)
                );
                if let Err(e) = &outcome {
                    failures.push(format!("pair {pair} {} {}: {e}", run.name, name(who)));
                }
                got.entry((i, who)).or_default().push(outcome.ok());
            }
        }
    }
    // Load-independent: instructions per op, once per version (not part of the pairs).
    let mut instr: Vec<[Option<f64>; 2]> = Vec::new();
    if flags.switch("instructions") {
        if !instructions::available() {
            return Err("--instructions: valgrind cannot be run".into());
        }
        let this = std::env::current_exe()?;
        for run in &runs {
            let mut pair = [None, None];
            for (k, bin) in [&old, &this].into_iter().enumerate() {
                let t = Instant::now();
                let outcome =
                    instructions::per_op(bin, &|n| args(run, &hosts, n), run.cg.0, timeout);
                eprintln!(
                    "  callgrind {:<14} {:<6} {:>6.1} s {}",
                    run.name,
                    ["before", "after"][k],
                    t.elapsed().as_secs_f64(),
                    outcome.as_ref().err().map_or("", String::as_str)
                );
                match outcome {
                    Ok(v) => pair[k] = Some(v),
                    Err(e) => failures.push(format!(
                        "callgrind {} {}: {e}",
                        run.name,
                        ["before", "after"][k]
                    )),
                }
            }
            instr.push(pair);
        }
    }
    drop(server);
    meta.finish(started.elapsed());
    let labels = (
        flags.get("old-label").unwrap_or("before"),
        flags.get("new-label").unwrap_or("after"),
    );
    let server_desc = match flags.get("hosts") {
        Some(h) => format!("the server at {h}"),
        None => format!(
            "standalone server, forceSync={}; {}",
            if fsync { "yes" } else { "no" },
            report::server_settings(&meta.server_version)
        ),
    };
    let text = render(
        &runs,
        &peers,
        &got,
        &instr,
        &failures,
        &meta,
        &server_desc,
        labels,
        flags.get("command"),
        pairs,
    );
    println!("{text}");
    if let Some(out) = flags.get("out") {
        std::fs::write(out, &text).map_err(|e| format!("writing {out}: {e}"))?;
    }
    Ok(())
}

fn name(who: Who) -> &'static str {
    match who {
        Who::Before => "before",
        Who::After => "after",
        Who::Peer(c) => c.title(),
    }
}

fn find<'a>(report: &'a Report, metric: &str) -> Option<&'a Measurement> {
    report.measurements.iter().find(|m| m.metric == metric)
}

fn per_op(m: &Measurement, field: &str) -> Option<f64> {
    let v: f64 = m.extra.get(field)?.parse().ok()?;
    Some(v / m.ops.max(1) as f64)
}

fn range(v: &[f64], digits: usize) -> String {
    stats(v).map_or("–".into(), |s| {
        format!("{:.d$} ({:.d$}–{:.d$})", s.median, s.min, s.max, d = digits)
    })
}

fn med(v: &[f64]) -> Option<f64> {
    stats(v).map(|s| s.median)
}

fn rate_range(v: &[f64]) -> String {
    stats(v).map_or("–".into(), |s| {
        format!(
            "{} ({}–{})",
            fmt_rate(s.median),
            fmt_rate(s.min),
            fmt_rate(s.max)
        )
    })
}

/// Only the pairs where both versions succeeded are compared.
#[allow(clippy::too_many_arguments)]
fn render(
    runs: &[Run],
    peers: &[ClientKind],
    got: &BTreeMap<(usize, Who), Vec<Option<Report>>>,
    instr: &[[Option<f64>; 2]],
    failures: &[String],
    meta: &Meta,
    server: &str,
    (old, new): (&str, &str),
    command: Option<&str>,
    pairs: u32,
) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "| row | n | before ({old}) ops/s | after ({new}) ops/s | after/before | verdict | CPU µs/op before → after | ctx switches/op before → after | wake-ups/op before → after |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---|---:|---:|---:|");
    let empty = Vec::new();
    let mut peer_rows = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let before = got.get(&(i, Who::Before)).unwrap_or(&empty);
        let after = got.get(&(i, Who::After)).unwrap_or(&empty);
        for (metric, label) in &run.rows {
            let both: Vec<(&Measurement, &Measurement)> = before
                .iter()
                .zip(after)
                .filter_map(|(b, a)| Some((find(b.as_ref()?, metric)?, find(a.as_ref()?, metric)?)))
                .collect();
            let col = |f: &dyn Fn(&(&Measurement, &Measurement)) -> Option<f64>| {
                both.iter().filter_map(f).collect::<Vec<f64>>()
            };
            let b_rate = col(&|(b, _)| Some(b.ops_per_sec()));
            let a_rate = col(&|(_, a)| Some(a.ops_per_sec()));
            let ratio = col(&|(b, a)| Some(a.ops_per_sec() / b.ops_per_sec()));
            let verdict = match stats(&ratio) {
                Some(s) if s.min > 1.0 => "faster in every pair",
                Some(s) if s.max < 1.0 => "**slower in every pair**",
                Some(s) if s.median >= 1.0 => "mixed, median not slower",
                Some(_) => "mixed, median slower",
                None => "no complete pair",
            };
            let pair_of = |field: &'static str, digits: usize| {
                let b = med(&col(&|(b, _)| per_op(b, field)));
                let a = med(&col(&|(_, a)| per_op(a, field)));
                match (b, a) {
                    (Some(b), Some(a)) => format!("{b:.d$} → {a:.d$}", d = digits),
                    _ => "–".into(),
                }
            };
            let notif = {
                let b = med(&col(&|(b, _)| Some(b.notif as f64 / b.ops.max(1) as f64)));
                let a = med(&col(&|(_, a)| Some(a.notif as f64 / a.ops.max(1) as f64)));
                match (b, a) {
                    (Some(b), Some(a)) if b > 0.0 || a > 0.0 => format!("{b:.2} → {a:.2}"),
                    _ => String::new(),
                }
            };
            let _ = writeln!(
                w,
                "| {label} | {} | {} | {} | {} | {verdict} | {} | {} | {notif} |",
                fmt_count(run.n as u64),
                rate_range(&b_rate),
                rate_range(&a_rate),
                range(&ratio, 2),
                pair_of("cpu_us", 0),
                pair_of("csw", 1),
            );
            if run.peers && !peers.is_empty() {
                let rates = |who: Who| -> Vec<f64> {
                    got.get(&(i, who))
                        .unwrap_or(&empty)
                        .iter()
                        .filter_map(|r| Some(find(r.as_ref()?, metric)?.ops_per_sec()))
                        .collect()
                };
                peer_rows.push((label.clone(), rates(Who::After), {
                    peers
                        .iter()
                        .map(|&c| rates(Who::Peer(c)))
                        .collect::<Vec<_>>()
                }));
            }
        }
    }
    let _ = writeln!(
        w,
        "\n{pairs} pairs; in each pair every row ran once through each version, back to back \
         (which went first alternated), on one server. ops/s: median (min–max) over the pairs; \
         after/before: median (min–max) of the per-pair throughput ratios; CPU (user + system, \
         all threads of the client process) and context switches over the timed phase, per op, \
         medians. Verdict: \"every pair\" only when all the pairs agree; otherwise the median \
         decides the wording and the difference is within this machine's noise."
    );
    if !peer_rows.is_empty() {
        let _ = write!(w, "\nThe same rows through the peer clients (the same pairs; reference only):\n\n| row | after (Rust) |");
        for c in peers {
            let _ = write!(w, " {} |", c.title());
        }
        for c in peers {
            let _ = write!(w, " after/{} |", c.title());
        }
        let _ = write!(w, "\n|---|---:|");
        for _ in 0..peers.len() * 2 {
            let _ = write!(w, "---:|");
        }
        let _ = writeln!(w);
        for (label, after, others) in &peer_rows {
            let _ = write!(w, "| {label} | {} |", rate_range(after));
            for o in others {
                let _ = write!(w, " {} |", rate_range(o));
            }
            for o in others {
                let cell = match (med(after), med(o)) {
                    (Some(a), Some(p)) if p > 0.0 => format!("{:.2}", a / p),
                    _ => "–".into(),
                };
                let _ = write!(w, " {cell} |");
            }
            let _ = writeln!(w);
        }
    }
    if !instr.is_empty() {
        let _ = writeln!(
            w,
            "\nInstructions per op (callgrind; every thread of the client process; runs of n \
             and 3n ops, the difference over the 2n extra; the same server, between the pairs):\n\n\
             | one op | n | before ({old}) | after ({new}) | after/before |\n|---|---:|---:|---:|---:|"
        );
        for (run, [b, a]) in runs.iter().zip(instr) {
            let cell = |v: &Option<f64>| v.map_or("–".into(), |x| fmt_count(x.round() as u64));
            let ratio = match (b, a) {
                (Some(b), Some(a)) if *b > 0.0 => format!("{:.3}", a / b),
                _ => "–".into(),
            };
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {ratio} |",
                run.cg.1,
                run.cg.0,
                cell(b),
                cell(a)
            );
        }
    }
    let _ = writeln!(w, "\n{}", meta.caption(server));
    let _ = writeln!(
        w,
        "_Wall time {:.0} s; load average (1/5/15 min) at the start: {}._",
        meta.elapsed.as_secs_f64(),
        meta.load_before
    );
    if let Some(cmd) = command {
        let _ = writeln!(w, "\nCommand: `{cmd}`");
    }
    if !failures.is_empty() {
        let _ = writeln!(w, "\nFailed runs:");
        for f in failures {
            let _ = writeln!(w, "- {f}");
        }
    }
    out
}
