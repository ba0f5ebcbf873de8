//! The `run` command: starts each server configuration through the harness, runs every
//! scenario through every client (each a separate process: peak RSS per client), and
//! prints the Markdown report.

use crate::flags::Flags;
use crate::proto;
use crate::report::{self, ConfigRun, Meta, ProcResult};
use crate::rust_client::{BoxError, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Ensemble, Mode, Server, ServerOptions};

/// The four clients, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientKind {
    Rust,
    C,
    Zkpython,
    Kazoo,
}

impl ClientKind {
    pub const ALL: [ClientKind; 4] = [
        ClientKind::Rust,
        ClientKind::C,
        ClientKind::Zkpython,
        ClientKind::Kazoo,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Rust => "rust",
            ClientKind::C => "c",
            ClientKind::Zkpython => "zkpython",
            ClientKind::Kazoo => "kazoo",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ClientKind::Rust => "Rust",
            ClientKind::C => "C",
            ClientKind::Zkpython => "zkpython",
            ClientKind::Kazoo => "kazoo",
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

/// How to start each client's process.
pub struct Launchers {
    pub bench_dir: PathBuf,
    pub python: PathBuf,
    pub c_bin: Option<PathBuf>,
    pub zkpython_lib: Option<PathBuf>,
    /// Why a client is unavailable.
    pub unavailable: Vec<(ClientKind, String)>,
}

impl Launchers {
    pub fn discover(build_zkpython: bool) -> Launchers {
        let bench_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = std::env::var_os("ZK_BENCH_PYTHON")
            .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from);
        let mut unavailable = Vec::new();
        let c_bin = match env!("ZKBENCH_C_BIN") {
            "" => {
                unavailable.push((
                    ClientKind::C,
                    format!("not built: {}", env!("ZKBENCH_C_ERROR")),
                ));
                None
            }
            p => Some(PathBuf::from(p)),
        };
        let zkpython_lib = match zkpython_lib(&bench_dir, build_zkpython) {
            Ok(lib) => Some(lib),
            Err(e) => {
                unavailable.push((ClientKind::Zkpython, e));
                None
            }
        };
        let kazoo = Command::new(&python).args(["-c", "import kazoo"]).output();
        if !matches!(kazoo, Ok(ref o) if o.status.success()) {
            unavailable.push((
                ClientKind::Kazoo,
                format!(
                    "{} cannot import kazoo (apt-get install python3-kazoo)",
                    python.display()
                ),
            ));
        }
        Launchers {
            bench_dir,
            python,
            c_bin,
            zkpython_lib,
            unavailable,
        }
    }

    pub fn available(&self, client: ClientKind) -> bool {
        !self.unavailable.iter().any(|(c, _)| *c == client)
    }

    /// The command for `client` (flags are appended by the caller).
    pub fn command(&self, client: ClientKind) -> Command {
        match client {
            ClientKind::Rust => {
                let mut cmd = Command::new(std::env::current_exe().expect("own executable path"));
                cmd.arg("client");
                cmd
            }
            ClientKind::C => Command::new(self.c_bin.as_ref().expect("C client available")),
            ClientKind::Zkpython => {
                let mut cmd = Command::new(&self.python);
                cmd.arg(self.bench_dir.join("py/zkpython_bench.py"));
                cmd.env(
                    "PYTHONPATH",
                    self.zkpython_lib.as_ref().expect("zkpython available"),
                );
                cmd
            }
            ClientKind::Kazoo => {
                let mut cmd = Command::new(&self.python);
                cmd.arg(self.bench_dir.join("py/kazoo_bench.py"));
                cmd
            }
        }
    }
}

/// The directory holding the built zkpython module, building it if needed.
pub fn zkpython_lib(bench_dir: &Path, build: bool) -> Result<PathBuf, String> {
    let lib = bench_dir.join("zkpython/build/lib");
    let built = std::fs::read_dir(&lib)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("zookeeper"))
        })
        .unwrap_or(false);
    if !build {
        return if built {
            Ok(lib)
        } else {
            Err("not built (run bench/zkpython/build.sh)".into())
        };
    }
    // build.sh is idempotent: a no-op when the module is up to date.
    let script = bench_dir.join("zkpython/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())),
        Ok(o) => Err(format!("{} failed ({})", script.display(), o.status)),
        Err(e) => Err(format!("cannot run {}: {e}", script.display())),
    }
}

/// Runs one client process to completion (killed after `timeout`) and parses its report.
pub fn run_client(cmd: &mut Command, timeout: Duration) -> Result<proto::Report, String> {
    proto::parse(&run_client_raw(cmd, timeout)?)
}

/// Runs a process to completion (killed after `timeout`): its stdout, or why it failed.
pub fn run_client_raw(cmd: &mut Command, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn failed: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("wait failed: {e}")),
        }
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    };
    match status {
        None => Err(format!(
            "timed out after {} s; {}",
            timeout.as_secs(),
            tail(&err)
        )),
        Some(s) if !s.success() => Err(format!("exit {s}: {}", tail(&err))),
        Some(_) => Ok(out),
    }
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
    ];
    if let Some(bad) = flags.unknown(&known).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let quick = flags.switch("quick");
    let rounds: u32 = flags.num("rounds", if quick { 2 } else { 3 })?;
    let timeout = Duration::from_secs(flags.num("timeout", if quick { 60 } else { 300 })?);
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
    let wanted = list(
        flags.get("clients"),
        "rust,c,zkpython,kazoo",
        ClientKind::parse,
        "client",
    )?;
    let only: Option<Vec<&str>> = flags.get("only").map(|s| s.split(',').collect());
    let mut specs = specs(quick);
    if let Some(only) = &only {
        specs.retain(|s| only.contains(&s.scenario) || only.contains(&s.label.as_str()));
    }
    if specs.is_empty() {
        return Err("--only selected no scenario".into());
    }

    let launchers = Launchers::discover(
        !flags.switch("no-zkpython-build") && wanted.contains(&ClientKind::Zkpython),
    );
    for (client, why) in &launchers.unavailable {
        if wanted.contains(client) {
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
        let mut procs = Vec::new();
        for spec in selected {
            let mut results: Vec<ProcResult> = clients
                .iter()
                .map(|&client| ProcResult {
                    spec: spec.clone(),
                    client,
                    reports: Vec::new(),
                    errors: Vec::new(),
                })
                .collect();
            // Rounds are separate processes, interleaved across clients (and the order
            // rotated each round) so drifting machine load hits every client alike.
            for round in 0..rounds {
                for k in 0..clients.len() {
                    let i = (k + round as usize) % clients.len();
                    let client = clients[i];
                    let t = Instant::now();
                    let mut cmd = launchers.command(client);
                    cmd.args(client_args(spec, &hosts, 1));
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
        drop(servers);
        runs.push(ConfigRun { kind, procs });
    }
    meta.finish(started.elapsed());
    let text = report::render(&meta, &clients, &runs);
    println!("{text}");
    if let Some(out) = flags.get("out") {
        std::fs::write(out, &text).map_err(|e| format!("writing {out}: {e}"))?;
    }
    Ok(())
}

/// A short untimed Rust run so the server's JIT is warm before the first measured client.
fn warm_up(launchers: &Launchers, hosts: &str, quick: bool, timeout: Duration) -> Result<()> {
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
