//! How each client's process is started: the Rust, C, zkpython, kazoo and Curator
//! benches, with what each needs found (or built) first, and a client's run with a
//! timeout.

use crate::proto;
use crate::runner::ClientKind;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How to start each client's process.
pub struct Launchers {
    pub bench_dir: PathBuf,
    pub python: PathBuf,
    pub c_bin: Option<PathBuf>,
    pub zkpython_lib: Option<PathBuf>,
    /// The Curator bench's classpath (compiled classes + Debian's jars).
    pub curator_classpath: Option<String>,
    /// Why a client is unavailable.
    pub unavailable: Vec<(ClientKind, String)>,
}

impl Launchers {
    pub fn discover(build_zkpython: bool, build_curator: bool) -> Launchers {
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
        let curator_classpath = if build_curator {
            match curator_classpath(&bench_dir) {
                Ok(cp) => Some(cp),
                Err(e) => {
                    unavailable.push((ClientKind::Curator, e));
                    None
                }
            }
        } else {
            unavailable.push((ClientKind::Curator, "not requested".into()));
            None
        };
        Launchers {
            bench_dir,
            python,
            c_bin,
            zkpython_lib,
            curator_classpath,
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
            ClientKind::Curator => {
                let mut cmd = Command::new("java");
                cmd.args([
                    "-Xmx256m",
                    "-cp",
                    self.curator_classpath
                        .as_deref()
                        .expect("Curator available"),
                    "CuratorBench",
                ]);
                cmd
            }
        }
    }
}

/// Debian's Curator 5.4 jars (their manifests name ZooKeeper, Guava and SLF4J), plus
/// slf4j-nop so Curator's logging stays quiet.
const CURATOR_JARS: [&str; 3] = [
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/slf4j-nop.jar",
];

/// Compiles `peers/CuratorBench.java` (once per source change) next to this executable
/// and returns the classpath to run it with.
pub fn curator_classpath(bench_dir: &Path) -> Result<String, String> {
    if let Some(missing) = CURATOR_JARS.iter().find(|j| !Path::new(j).exists()) {
        return Err(format!(
            "{missing} missing (apt-get install libcurator-recipes-java)"
        ));
    }
    let source = bench_dir.join("peers/CuratorBench.java");
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let out = exe
        .parent()
        .ok_or("executable has no directory")?
        .join("zkbench-curator");
    let class = out.join("CuratorBench.class");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = matches!((modified(&class), modified(&source)), (Some(c), Some(s)) if c >= s);
    if !fresh {
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let compiled = Command::new("javac")
            .arg("-d")
            .arg(&out)
            .arg("-cp")
            .arg(CURATOR_JARS.join(":"))
            .arg(&source)
            .output()
            .map_err(|e| format!("cannot run javac (apt-get install default-jdk-headless): {e}"))?;
        if !compiled.status.success() {
            return Err(format!(
                "javac failed: {}",
                String::from_utf8_lossy(&compiled.stderr).trim()
            ));
        }
    }
    Ok(format!("{}:{}", out.display(), CURATOR_JARS.join(":")))
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
