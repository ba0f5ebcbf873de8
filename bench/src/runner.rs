//! The `run` command: starts each server configuration through the harness, runs every
//! scenario through every client (each a separate process: peak RSS per client), and
//! prints the Markdown report.

use crate::flags::Flags;
use crate::launchers::{run_client, Launchers};
use crate::report::{self, ConfigRun, Meta, ProcResult};
use crate::rust_client::{BoxError, Result};
use crate::scale_client::OpKind;
use crate::{paired, scaling};
use std::time::{Duration, Instant};
use zk_harness::{Ensemble, Mode, Server, ServerOptions};

/// The clients, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKind {
    Rust,
    C,
    Zkpython,
    Kazoo,
    /// Apache Curator 5.4 (Java): only the recipe scenarios (queue, lock, counter).
    Curator,
}

impl ClientKind {
    pub const ALL: [ClientKind; 5] = [
        ClientKind::Rust,
        ClientKind::C,
        ClientKind::Zkpython,
        ClientKind::Kazoo,
        ClientKind::Curator,
    ];

    /// Whether this client runs `scenario` (Curator only has the recipe scenarios).
    pub fn runs(self, scenario: &str) -> bool {
        self != ClientKind::Curator || matches!(scenario, "queue" | "lock" | "idgen")
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Rust => "rust",
            ClientKind::C => "c",
            ClientKind::Zkpython => "zkpython",
            ClientKind::Kazoo => "kazoo",
            ClientKind::Curator => "curator",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ClientKind::Rust => "Rust",
            ClientKind::C => "C",
            ClientKind::Zkpython => "zkpython",
            ClientKind::Kazoo => "kazoo",
            ClientKind::Curator => "Curator",
        }
    }

    fn parse(s: &str) -> Option<ClientKind> {
        ClientKind::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// A server configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    FsyncOn,
    FsyncOff,
    Ensemble,
}

impl ConfigKind {
    fn parse(s: &str) -> Option<ConfigKind> {
        match s {
            "fsync-on" => Some(ConfigKind::FsyncOn),
            "fsync-off" => Some(ConfigKind::FsyncOff),
            "ensemble" => Some(ConfigKind::Ensemble),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ConfigKind::FsyncOn => "standalone server, forceSync=yes",
            ConfigKind::FsyncOff => "standalone server, forceSync=no",
            ConfigKind::Ensemble => {
                "3-node ensemble on loopback, forceSync=yes, clients on one follower"
            }
        }
    }

    fn options(self) -> ServerOptions {
        ServerOptions::new()
            .force_sync(self != ConfigKind::FsyncOff)
            .fast_startup(false)
            .log_level("WARN")
    }
}

/// One scenario run: a client process invocation (all its metrics come from it).
#[derive(Debug, Clone)]
pub struct Spec {
    pub label: String,
    pub scenario: &'static str,
    pub n: usize,
    pub window: usize,
    pub workers: usize,
    pub batch: u64,
    pub mode: &'static str,
    /// Also run on the 3-node ensemble.
    pub in_ensemble: bool,
}

fn spec(scenario: &'static str, n: usize) -> Spec {
    Spec {
        label: scenario.to_string(),
        scenario,
        n,
        window: 100,
        workers: 1,
        batch: 100,
        mode: "naive",
        in_ensemble: false,
    }
}

/// The scenario list; `quick` shrinks every count for a CI-size run.
pub fn specs(quick: bool) -> Vec<Spec> {
    let q = |full: usize, small: usize| if quick { small } else { full };
    let mut v = Vec::new();
    v.push(Spec {
        in_ensemble: true,
        ..spec("sync", q(1000, 300))
    });
    for (window, full, small) in [(1, 1000, 200), (100, 5000, 1000), (10_000, 10_000, 10_000)] {
        v.push(Spec {
            label: format!("async w{window}"),
            window,
            in_ensemble: window == 100,
            ..spec("async", q(full, small))
        });
    }
    v.push(Spec {
        in_ensemble: true,
        ..spec("watch", q(500, 200))
    });
    for workers in [1, 4] {
        v.push(Spec {
            label: format!("queue c{workers}"),
            workers,
            ..spec("queue", q(500, 200))
        });
    }
    for workers in [1, 8] {
        v.push(Spec {
            label: format!("lock c{workers}"),
            workers,
            in_ensemble: workers == 8,
            ..spec("lock", q(200, 80))
        });
    }
    for mode in ["naive", "batched"] {
        for workers in [1, 8] {
            let n = if mode == "naive" {
                q(200, 80)
            } else {
                q(5000, 2000)
            };
            v.push(Spec {
                label: format!("id {mode} w{workers}"),
                workers,
                mode,
                ..spec("idgen", n)
            });
        }
    }
    v
}

fn client_args(spec: &Spec, hosts: &str, rounds: u32) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |k: &str, v: String| {
        a.push(format!("--{k}"));
        a.push(v);
    };
    push("hosts", hosts.to_string());
    push("scenario", spec.scenario.to_string());
    push("rounds", rounds.to_string());
    push("n", spec.n.to_string());
    push("window", spec.window.to_string());
    push("workers", spec.workers.to_string());
    push("batch", spec.batch.to_string());
    push("mode", spec.mode.to_string());
    push("prefix", "/zkbench".to_string());
    a
}

/// Servers of one configuration, kept alive while its scenarios run.
enum Servers {
    One(Box<Server>),
    Three(Ensemble),
}

impl Servers {
    fn start(kind: ConfigKind) -> Result<Servers> {
        let opts = kind.options();
        Ok(match kind {
            ConfigKind::Ensemble => Servers::Three(Ensemble::start(3, &opts)?),
            _ => Servers::One(Box::new(Server::start_with(&opts)?)),
        })
    }

    /// Where every client connects. In the ensemble: one follower, the same for every
    /// client process (a full host list would let each process pick a member at random,
    /// and leader vs follower differ more than the clients do).
    fn connect_string(&self) -> String {
        match self {
            Servers::One(s) => s.connect_string(),
            Servers::Three(e) => {
                let follower = (0..e.len()).find(|&i| e.member(i).mode() == Some(Mode::Follower));
                follower.map_or_else(|| e.connect_string(), |i| e.member(i).connect_string())
            }
        }
    }

    fn version(&self) -> String {
        let srvr = match self {
            Servers::One(s) => s.four_letter("srvr"),
            Servers::Three(e) => e.member(0).four_letter("srvr"),
        };
        srvr.ok()
            .and_then(|s| {
                s.lines().next().map(|l| {
                    let v = l.trim_start_matches("Zookeeper version: ");
                    v.split(['-', ',']).next().unwrap_or(v).to_string()
                })
            })
            .unwrap_or_else(|| "?".into())
    }
}

/// The report's sections, by `--sections` name.
const SECTIONS: [&str; 4] = ["side", "paired", "scaling", "cache"];
/// The sections run without `--sections` (`cache` takes ~10 minutes of its own).
const DEFAULT_SECTIONS: &str = "side,paired,scaling";

pub fn main(flags: &Flags) -> Result<()> {
    let known = [
        "quick",
        "rounds",
        "configs",
        "clients",
        "only",
        "timeout",
        "out",
        "no-zkpython-build",
        "sections",
        "pairs",
        "ops",
        "tables",
        "perf-config",
        "cache-rounds",
    ];
    if let Some(bad) = flags.unknown(&known).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let quick = flags.switch("quick");
    let rounds: u32 = flags.num("rounds", if quick { 2 } else { 3 })?;
    let timeout = Duration::from_secs(flags.num("timeout", if quick { 60 } else { 300 })?);
    let sections = list(
        flags.get("sections"),
        DEFAULT_SECTIONS,
        |s| SECTIONS.contains(&s).then(|| s.to_string()),
        "section",
    )?;
    let wants = |s: &str| sections.iter().any(|x| x == s);
    let configs = list(
        flags.get("configs"),
        if quick {
            "fsync-off"
        } else {
            "fsync-on,fsync-off,ensemble"
        },
        ConfigKind::parse,
        "config",
    )?;
    let perf_config = list(
        flags.get("perf-config"),
        "fsync-off",
        ConfigKind::parse,
        "config",
    )?;
    let perf_config = match perf_config.as_slice() {
        [kind] if *kind != ConfigKind::Ensemble => *kind,
        _ => return Err("--perf-config takes one standalone config: fsync-off or fsync-on".into()),
    };
    let wanted = list(
        flags.get("clients"),
        "rust,c,zkpython,kazoo,curator",
        ClientKind::parse,
        "client",
    )?;
    let only: Option<Vec<&str>> = flags.get("only").map(|s| s.split(',').collect());
    let mut specs = specs(quick);
    if let Some(only) = &only {
        specs.retain(|s| only.contains(&s.scenario) || only.contains(&s.label.as_str()));
    }
    if wants("side") && specs.is_empty() {
        return Err("--only selected no scenario".into());
    }
    let ops = list(
        flags.get("ops"),
        &OpKind::ALL.map(OpKind::name).join(","),
        OpKind::parse,
        "op",
    )?;
    let tables = list(
        flags.get("tables"),
        &scaling::TABLES.join(","),
        |s| scaling::TABLES.contains(&s).then(|| s.to_string()),
        "table",
    )?;
    let pairs = flags.get("pairs").map(str::parse::<u32>).transpose()?;

    let launchers = Launchers::discover(
        wants("side")
            && !flags.switch("no-zkpython-build")
            && wanted.contains(&ClientKind::Zkpython),
        (wants("side") || wants("cache")) && wanted.contains(&ClientKind::Curator),
    );
    for (client, why) in &launchers.unavailable {
        let used = wants("side")
            || (wants("cache") && matches!(client, ClientKind::Kazoo | ClientKind::Curator));
        if wanted.contains(client) && (used || *client == ClientKind::C) {
            eprintln!("zookeeper-bench: {} unavailable: {why}", client.title());
        }
    }
    let clients: Vec<ClientKind> = wanted
        .into_iter()
        .filter(|c| launchers.available(*c))
        .collect();
    if !clients.contains(&ClientKind::Rust) {
        eprintln!("zookeeper-bench: note: without the Rust client there are no ratios");
    }

    let started = Instant::now();
    let mut meta = Meta::collect(&launchers, quick, rounds);
    let mut body = String::new();
    if wants("paired") || wants("scaling") {
        // First, while the machine is as it was when the run started: the client-cost
        // measurements want the quietest machine.
        eprintln!(
            "== paired runs and scaling tables: {} ==",
            perf_config.describe()
        );
        let servers = Servers::start(perf_config)?;
        let hosts = servers.connect_string();
        meta.server_version = servers.version();
        let server = format!(
            "{}; {}",
            perf_config.describe(),
            report::server_settings(&meta.server_version)
        );
        warm_up(&launchers, &hosts, quick, timeout)?;
        if wants("paired") {
            let plan = paired::Plan::new(quick, pairs, ops, timeout);
            body.push_str(&paired::run(&launchers, &hosts, &server, &meta, &plan));
        }
        if wants("scaling") {
            let plan = scaling::Plan::new(quick, tables, rounds.min(3), timeout);
            body.push_str(&scaling::run(&launchers, &hosts, &server, &meta, &plan));
        }
        drop(servers);
    }
    if wants("side") {
        let mut runs = Vec::new();
        for kind in configs {
            let selected: Vec<&Spec> = specs
                .iter()
                .filter(|s| kind != ConfigKind::Ensemble || s.in_ensemble)
                .collect();
            if selected.is_empty() {
                continue;
            }
            eprintln!("== {} ==", kind.describe());
            let servers = Servers::start(kind)?;
            let hosts = servers.connect_string();
            meta.server_version = servers.version();
            warm_up(&launchers, &hosts, quick, timeout)?;
            let procs = side_by_side(&launchers, &clients, &selected, &hosts, rounds, timeout);
            drop(servers);
            let server = format!(
                "{}; {}",
                kind.describe(),
                report::server_settings(&meta.server_version)
            );
            runs.push(ConfigRun {
                kind,
                procs,
                caption: meta.caption(&server),
            });
        }
        body.push_str(&report::render_side(&meta, &clients, &runs));
    }
    if wants("cache") {
        eprintln!("== tree caches at scale ==");
        let cache_rounds: u32 = flags.num("cache-rounds", 1)?;
        body.push_str(&crate::cache_scale::run(
            &launchers,
            &clients,
            &mut meta,
            cache_rounds.max(1),
        )?);
    }
    meta.finish(started.elapsed());
    let text = format!("{}{body}", report::render_header(&meta));
    println!("{text}");
    if let Some(out) = flags.get("out") {
        std::fs::write(out, &text).map_err(|e| format!("writing {out}: {e}"))?;
    }
    Ok(())
}

/// Every selected scenario through every client that runs it.
fn side_by_side(
    launchers: &Launchers,
    clients: &[ClientKind],
    selected: &[&Spec],
    hosts: &str,
    rounds: u32,
    timeout: Duration,
) -> Vec<ProcResult> {
    let mut procs = Vec::new();
    for spec in selected {
        let here: Vec<ClientKind> = clients
            .iter()
            .copied()
            .filter(|c| c.runs(spec.scenario))
            .collect();
        let mut results: Vec<ProcResult> = here
            .iter()
            .map(|&client| ProcResult {
                spec: (*spec).clone(),
                client,
                reports: Vec::new(),
                errors: Vec::new(),
            })
            .collect();
        // Rounds are separate processes, interleaved across clients (and the order
        // rotated each round) so drifting machine load hits every client alike.
        for round in 0..rounds {
            for k in 0..here.len() {
                let i = (k + round as usize) % here.len();
                let client = here[i];
                let t = Instant::now();
                let mut cmd = launchers.command(client);
                cmd.args(client_args(spec, hosts, 1));
                let outcome = run_client(&mut cmd, timeout);
                eprintln!(
                    "  {:<16} round {round} {:<9} {:>6.1} s {}",
                    spec.label,
                    client.title(),
                    t.elapsed().as_secs_f64(),
                    outcome.as_ref().err().map_or("", String::as_str)
                );
                match outcome {
                    Ok(mut report) => {
                        for m in &mut report.measurements {
                            m.round = round;
                        }
                        results[i].reports.push(report);
                    }
                    Err(e) => results[i].errors.push(format!("round {round}: {e}")),
                }
            }
        }
        procs.extend(results);
    }
    procs
}

/// A short untimed Rust run so the server's JIT is warm before the first measured client.
pub(crate) fn warm_up(
    launchers: &Launchers,
    hosts: &str,
    quick: bool,
    timeout: Duration,
) -> Result<()> {
    let n = if quick { 2000 } else { 10_000 };
    for (scenario, n) in [("async", n), ("sync", n / 10)] {
        let mut cmd = launchers.command(ClientKind::Rust);
        cmd.args([
            "--hosts",
            hosts,
            "--scenario",
            scenario,
            "--n",
            &n.to_string(),
            "--prefix",
            "/zkwarmup",
        ]);
        run_client(&mut cmd, timeout)
            .map_err(|e| -> BoxError { format!("warm-up failed: {e}").into() })?;
    }
    Ok(())
}

fn list<T>(
    given: Option<&str>,
    default: &str,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Vec<T>> {
    given
        .unwrap_or(default)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| parse(s).ok_or_else(|| -> BoxError { format!("unknown {what} {s:?}").into() }))
        .collect()
}
