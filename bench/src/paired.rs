//! Paired runs: Rust against C, one op kind per process, the two processes of a pair back
//! to back on the same server (order alternating between pairs), so each ratio compares
//! runs that saw the same server state and nearly the same machine load. Both clients use
//! a 10 s host re-resolution delay (the binding's default; `zkbench.c` sets it with
//! `zoo_set_servers_resolution_delay`). Reports the median of the per-pair throughput
//! ratios and of the per-pair CPU-per-op ratios (the client process's user + system time,
//! all threads, over the timed phase).

use crate::launchers::{run_client, Launchers};
use crate::proto::Measurement;
use crate::report::{fmt_count, fmt_rate, stats, Meta};
use crate::runner::ClientKind;
use crate::scale_client::OpKind;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// What the paired runs measure.
pub struct Plan {
    pub ops: Vec<OpKind>,
    pub pairs: u32,
    /// Ops per sync process.
    pub n_sync: usize,
    /// Ops per pipelined process.
    pub n_pipelined: usize,
    /// Requests in flight for the pipelined ops.
    pub window: usize,
    pub timeout: Duration,
}

impl Plan {
    pub fn new(quick: bool, pairs: Option<u32>, ops: Vec<OpKind>, timeout: Duration) -> Plan {
        Plan {
            ops,
            pairs: pairs.unwrap_or(if quick { 2 } else { 7 }),
            n_sync: if quick { 300 } else { 5000 },
            n_pipelined: if quick { 3000 } else { 50_000 },
            window: 1000,
            timeout,
        }
    }

    fn n(&self, k: OpKind) -> usize {
        if k.pipelined() {
            self.n_pipelined
        } else {
            self.n_sync
        }
    }
}

/// One process's timed phase.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ops_per_sec: f64,
    cpu_us_per_op: f64,
    sys_us_per_op: f64,
    csw_per_op: f64,
}

impl Sample {
    fn of(m: &Measurement) -> Option<Sample> {
        let field = |k: &str| m.extra.get(k)?.parse::<f64>().ok();
        let ops = m.ops.max(1) as f64;
        Some(Sample {
            ops_per_sec: m.ops_per_sec(),
            cpu_us_per_op: field("cpu_us")? / ops,
            sys_us_per_op: field("sys_us")? / ops,
            csw_per_op: field("csw")? / ops,
        })
    }
}

/// The label of an op kind in the table.
pub fn op_label(k: OpKind, window: usize) -> String {
    match k {
        OpKind::Get => "sync get".into(),
        OpKind::Exists => "sync exists".into(),
        OpKind::Set => "sync set".into(),
        OpKind::CreateDelete => "sync create+delete".into(),
        OpKind::AGet => format!("pipelined get, {window} in flight"),
        OpKind::ACreate => format!("pipelined create, {window} in flight"),
        OpKind::GetHop => "sync get vs C through zoo_aget + wait (the binding's hand-off)".into(),
    }
}

fn run_one(
    launchers: &Launchers,
    client: ClientKind,
    hosts: &str,
    k: OpKind,
    plan: &Plan,
) -> Result<Sample, String> {
    let mut cmd = launchers.command(client);
    cmd.args([
        "--hosts",
        hosts,
        "--scenario",
        "op",
        "--op",
        k.name(),
        "--n",
        &plan.n(k).to_string(),
        "--window",
        &plan.window.to_string(),
        "--prefix",
        "/zkpaired",
    ]);
    let report = run_client(&mut cmd, plan.timeout)?;
    report
        .measurements
        .first()
        .and_then(Sample::of)
        .ok_or_else(|| "no measurement with cpu_us/sys_us/csw in its output".to_string())
}

/// Runs the pairs and renders the table.
pub fn run(launchers: &Launchers, hosts: &str, server: &str, meta: &Meta, plan: &Plan) -> String {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for &k in &plan.ops {
        let mut pairs: Vec<(Sample, Sample)> = Vec::new();
        for pair in 0..plan.pairs {
            // Alternate who goes first, so a trend in load or server state does not
            // favour one client.
            let order = if pair % 2 == 0 {
                [ClientKind::Rust, ClientKind::C]
            } else {
                [ClientKind::C, ClientKind::Rust]
            };
            let mut got = [None, None];
            for client in order {
                let t = Instant::now();
                let outcome = run_one(launchers, client, hosts, k, plan);
                eprintln!(
                    "  paired {:<14} pair {pair} {:<5} {:>6.1} s {}",
                    k.name(),
                    client.title(),
                    t.elapsed().as_secs_f64(),
                    outcome.as_ref().err().map_or("", String::as_str)
                );
                match outcome {
                    Ok(s) => got[usize::from(client == ClientKind::C)] = Some(s),
                    Err(e) => failures.push(format!(
                        "{} pair {pair} {}: {e}",
                        op_label(k, plan.window),
                        client.title()
                    )),
                }
            }
            if let [Some(rust), Some(c)] = got {
                pairs.push((rust, c));
            }
        }
        rows.push((k, pairs));
    }
    render(meta, server, plan, &rows, &failures)
}

fn range(v: &[f64]) -> String {
    match stats(v) {
        Some(s) => format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max),
        None => "–".into(),
    }
}

fn med(v: &[f64]) -> Option<f64> {
    stats(v).map(|s| s.median)
}

fn render(
    meta: &Meta,
    server: &str,
    plan: &Plan,
    rows: &[(OpKind, Vec<(Sample, Sample)>)],
    failures: &[String],
) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "\n## Paired runs: Rust vs C, one op kind per process\n");
    let _ = writeln!(
        w,
        "{} pairs per op; a pair is one Rust and one C process run back to back on the same \
         server, order alternating between pairs; each process times its n ops after an untimed \
         warm-up on other nodes; both clients re-resolve host names at most every 10 s. \
         Ratios: median over the pairs of the per-pair ratio (min–max). CPU: the client \
         process's user + system time over the timed phase (all threads), per op, with the \
         system (kernel) part in brackets. Targets (the performance issue): throughput ≥ 0.98 × C, \
         CPU per op ≤ 1.03 × C.\n",
        plan.pairs
    );
    let _ = writeln!(
        w,
        "| op | n | Rust ops/s | C ops/s | Rust/C throughput | Rust CPU µs/op (kernel) | C CPU µs/op (kernel) | Rust/C CPU per op | ctx switches/op Rust | ctx switches/op C | targets |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (k, pairs) in rows {
        let col = |f: fn(&(Sample, Sample)) -> f64| pairs.iter().map(f).collect::<Vec<f64>>();
        let thr = col(|(r, c)| r.ops_per_sec / c.ops_per_sec);
        let cpu = col(|(r, c)| r.cpu_us_per_op / c.cpu_us_per_op);
        let fmt1 = |v: Option<f64>| v.map_or("–".into(), |x| format!("{x:.1}"));
        let rate = |v: Option<f64>| v.map_or("–".into(), fmt_rate);
        let cpu_cell = |total: Option<f64>, sys: Option<f64>| match (total, sys) {
            (Some(t), Some(s)) => format!("{t:.1} ({s:.1})"),
            _ => "–".into(),
        };
        let verdict = match (med(&thr), med(&cpu)) {
            (Some(t), Some(c)) => format!(
                "thr ≥0.98 {}, CPU ≤1.03 {}",
                if t >= 0.98 { "met" } else { "**missed**" },
                if c <= 1.03 { "met" } else { "**missed**" }
            ),
            _ => "no complete pair".into(),
        };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            op_label(*k, plan.window),
            fmt_count(plan.n(*k) as u64),
            rate(med(&col(|(r, _)| r.ops_per_sec))),
            rate(med(&col(|(_, c)| c.ops_per_sec))),
            range(&thr),
            cpu_cell(
                med(&col(|(r, _)| r.cpu_us_per_op)),
                med(&col(|(r, _)| r.sys_us_per_op))
            ),
            cpu_cell(
                med(&col(|(_, c)| c.cpu_us_per_op)),
                med(&col(|(_, c)| c.sys_us_per_op))
            ),
            range(&cpu),
            fmt1(med(&col(|(r, _)| r.csw_per_op))),
            fmt1(med(&col(|(_, c)| c.csw_per_op))),
            verdict
        );
    }
    let _ = writeln!(w, "\n{}", meta.caption(server));
    if !failures.is_empty() {
        let _ = writeln!(w, "\nFailed runs:");
        for f in failures {
            let _ = writeln!(w, "- {f}");
        }
    }
    out
}
