//! Test support shared by every crate's tests: unique znode paths, polling with a
//! deadline, reproducible seeds with a small deterministic RNG, and child processes
//! running one test of the current test binary.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_testing::testing::{unique_path, wait_until, Seed};
//!
//! let path = unique_path("lock"); // "/lock-<pid>-<n>-<stamp>"
//! let seed = Seed::from_env_or_random("ZK_FAULT_SEED")?; // prints "seed=..."
//! let mut rng = seed.rng();
//! let k = 1 + rng.below(5);
//! wait_until("the node to appear", Duration::from_secs(10), || true);
//! # Ok::<(), zookeeper_testing::HarnessError>(())
//! ```

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{HarnessError, Result};
use crate::spawner;

// ---------------------------------------------------------------- unique names

/// A stamp fixed for the process: start time in nanoseconds, so names of two runs with
/// the same pid still differ.
fn process_stamp() -> u64 {
    static STAMP: OnceLock<u64> = OnceLock::new();
    *STAMP.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

/// `name` with every character a znode name should not carry replaced by `_`.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s == "." || s == ".." {
        format!("node{s}")
    } else {
        s
    }
}

/// A znode name no other call, process or run produces: `<name>-<pid>-<n>-<stamp>`,
/// where `n` counts calls in this process and `stamp` is the process start time in hex.
/// Characters of `name` outside `[A-Za-z0-9._-]` become `_`.
pub fn unique_name(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}-{:x}",
        sanitize(name),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        process_stamp()
    )
}

/// A top-level znode path no other call, process or run produces: `/` +
/// [`unique_name`]. Tests sharing a server (or an external one across runs) never meet.
pub fn unique_path(name: &str) -> String {
    format!("/{}", unique_name(name))
}

// ---------------------------------------------------------------- polling

/// Polls `condition` (starting at 1 ms, backing off to 50 ms between calls) until it
/// returns true; false if `timeout` passes first. For states no event reports; wait on
/// the event where there is one.
pub fn poll_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Like [`poll_until`], but a timeout is an error naming `what` was awaited.
pub fn try_wait_until(
    what: &str,
    timeout: Duration,
    condition: impl FnMut() -> bool,
) -> Result<()> {
    if poll_until(timeout, condition) {
        Ok(())
    } else {
        Err(HarnessError::Timeout {
            what: what.to_string(),
            waited: timeout,
            details: String::new(),
        })
    }
}

/// Like [`poll_until`] for tests: fails the calling test when `timeout` passes.
///
/// # Panics
/// After `timeout`, with "timed out after .. waiting for `what`", at the caller's line.
#[track_caller]
pub fn wait_until(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    if !poll_until(timeout, condition) {
        panic!("timed out after {timeout:?} waiting for {what}");
    }
}

/// Runs `body` on a thread of its own and returns its result; fails the calling test if
/// it has not returned within `bound` (a deadlock, or a wait without a deadline that
/// never ends), instead of hanging the test binary. The thread is left to finish.
///
/// # Panics
/// After `bound`, with "`what` did not return within ..", or if `body` panicked.
#[track_caller]
pub fn within<T: Send + 'static>(
    what: &str,
    bound: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(body());
    });
    match finished.recv_timeout(bound) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not return within {bound:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

/// The threads of this process now (the entries of `/proc/self/task`), for tests that
/// check what a recipe or the client costs in threads.
pub fn process_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count())
}

/// The threads of this process whose name starts with `prefix`.
pub fn process_threads_named(prefix: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

/// Whether this process runs under valgrind (its preload library is mapped): big tests
/// scale down there.
pub fn under_valgrind() -> bool {
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|maps| maps.contains("vgpreload"))
}

// ---------------------------------------------------------------- seeds

/// The seed of a randomized (fault) test. The test prints it; running again with the
/// printed value in the environment variable replays the same choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Seed(u64);

impl Seed {
    /// A fixed seed.
    pub fn new(value: u64) -> Seed {
        Seed(value)
    }

    /// The seed in environment variable `var` (decimal, or hex with `0x`), else a random
    /// one. Prints `seed=<value>` and how to replay it to stderr (shown with a failing
    /// test's output). A set but unparsable variable is an error, not a silent random
    /// seed.
    pub fn from_env_or_random(var: &str) -> Result<Seed> {
        let seed = match std::env::var(var) {
            Ok(text) if !text.trim().is_empty() => Seed::parse(&text).map_err(|_| {
                HarnessError::InvalidArgument(format!(
                    "{var}={text:?} is not a seed (a u64, decimal or 0x-hex)"
                ))
            })?,
            _ => Seed::random(),
        };
        eprintln!("seed={} (replay: {var}={})", seed.0, seed.0);
        Ok(seed)
    }

    /// Parses a seed: a `u64` in decimal, or in hex with `0x`.
    pub fn parse(text: &str) -> Result<Seed> {
        let t = text.trim();
        let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => t.parse(),
        };
        parsed.map(Seed).map_err(|_| {
            HarnessError::InvalidArgument(format!(
                "{text:?} is not a seed (a u64, decimal or 0x-hex)"
            ))
        })
    }

    /// A seed from the clock, the pid and a per-process counter.
    pub fn random() -> Seed {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut state = nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ NEXT
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0xA076_1D64_78BD_642F);
        Seed(splitmix64(&mut state))
    }

    /// The seed's value.
    pub fn value(self) -> u64 {
        self.0
    }

    /// A generator started from this seed.
    pub fn rng(self) -> Rng {
        Rng::new(self.0)
    }

    /// An independent generator for sub-stream `stream` (e.g. one per child process or
    /// per worker thread), so the streams do not depend on each other's consumption.
    pub fn rng_for(self, stream: u64) -> Rng {
        let mut state = self.0 ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Rng::new(splitmix64(&mut state))
    }
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small deterministic generator (SplitMix64): the same seed gives the same sequence
/// on every platform and run. Not for cryptography.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }

    /// Uniform in `0..n` (no modulo bias); 0 when `n == 0`.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift with rejection of the biased low zone (the fault
        // schedules' sequences depend on it: keep it so recorded seeds replay).
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in `range` (`lo..hi`); `lo` when the range is empty.
    pub fn range(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.below(range.end.saturating_sub(range.start))
    }

    /// A duration in `lo..=hi` (millisecond resolution; `lo` if `hi <= lo`).
    pub fn duration_between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let lo_ms = lo.as_millis() as u64;
        let hi_ms = hi.as_millis() as u64;
        if hi_ms <= lo_ms {
            return lo;
        }
        Duration::from_millis(lo_ms + self.below(hi_ms - lo_ms + 1))
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p` (clamped to `[0, 1]`).
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// A uniformly chosen element; `None` for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

// ---------------------------------------------------------------- child processes

/// Environment variable set in every child started by [`TestChild`]: the name of the
/// test it runs. Its presence is how a test function knows it runs as a child.
pub const CHILD_ENV: &str = "ZK_HARNESS_CHILD";

/// How long [`TestChild::wait_exit`] waits for the exit after the stdout closed.
const EXIT_POLL: Duration = Duration::from_millis(10);

/// A child process running one test of the current test binary, for multi-process
/// tests (several sessions from several processes, a process killed mid-operation).
///
/// The parent starts it with [`TestChild::spawn`]; the test function, seeing
/// [`child_role`], does the child's work: it reads its parameters from the environment,
/// reports with [`report`] lines the parent awaits with
/// [`wait_for_marker`](TestChild::wait_for_marker), and calls [`watch_parent`] so it
/// exits when the parent goes away. In a normal run (no [`CHILD_ENV`]) the same test
/// function returns at once.
///
/// The child is killed (SIGKILL) and reaped when this value is dropped, also while a
/// failing test unwinds, and the kernel kills it if the test process dies abruptly
/// (`PR_SET_PDEATHSIG`, set from the harness's long-lived spawner thread).
pub struct TestChild {
    name: String,
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    eof: bool,
    status: Option<ExitStatus>,
}

impl fmt::Debug for TestChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestChild")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .field("status", &self.status)
            .finish()
    }
}

impl TestChild {
    /// The command running only test `test` of this binary (`--exact`, output not
    /// captured, one test thread) with [`CHILD_ENV`] set to `test`. Add environment
    /// variables and pass it to [`spawn_command`](Self::spawn_command).
    pub fn command(test: &str) -> Result<Command> {
        let exe = std::env::current_exe()
            .map_err(|e| HarnessError::io("locating the current test binary", e))?;
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, test);
        Ok(cmd)
    }

    /// Starts test `test` of this binary as a child with the extra environment `env`.
    pub fn spawn(test: &str, env: &[(&str, &str)]) -> Result<TestChild> {
        let mut cmd = Self::command(test)?;
        for (key, value) in env {
            cmd.env(key, value);
        }
        Self::spawn_command(test, cmd)
    }

    /// Starts `cmd` as a child called `name` (in error messages): stdin and stdout
    /// piped, stderr inherited.
    pub fn spawn_command(name: &str, mut cmd: Command) -> Result<TestChild> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = spawner::spawn(cmd)
            .map_err(|e| HarnessError::io(format!("spawning the child {name}"), e))?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            let spawned = thread::Builder::new()
                .name("test-child-stdout".into())
                .spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
            if let Err(e) = spawned {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::io("starting a child's stdout reader", e));
            }
        }
        Ok(TestChild {
            name: name.to_string(),
            child,
            stdin,
            lines,
            seen: Vec::new(),
            eof: false,
            status: None,
        })
    }

    /// Hands over the child's stdout lines, for a caller that reads several children on
    /// one channel of its own; [`next_line`](Self::next_line) then sees the end.
    pub fn take_lines(&mut self) -> Receiver<String> {
        let (_, empty) = mpsc::channel();
        self.eof = true;
        std::mem::replace(&mut self.lines, empty)
    }

    /// Whether the child has been reaped.
    pub fn has_exited(&self) -> bool {
        self.status.is_some()
    }

    /// The child's pid (valid until it is reaped).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every stdout line read so far.
    pub fn output(&self) -> &[String] {
        &self.seen
    }

    /// The next stdout line; `Ok(None)` once stdout is closed (the child exited), an
    /// error after `timeout`.
    pub fn next_line(&mut self, timeout: Duration) -> Result<Option<String>> {
        if self.eof {
            return Ok(None);
        }
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.seen.push(line.clone());
                Ok(Some(line))
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.eof = true;
                Ok(None)
            }
            Err(RecvTimeoutError::Timeout) => {
                Err(self.timeout(format!("a line from the child {}", self.name), timeout))
            }
        }
    }

    /// Reads stdout until a line contains `marker`; returns the rest of that line after
    /// the marker, trimmed. Fails after `timeout` or if the child's stdout closes first.
    pub fn wait_for_marker(&mut self, marker: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left) {
                Ok(Some(line)) => {
                    if let Some((_, rest)) = line.split_once(marker) {
                        return Ok(rest.trim().to_string());
                    }
                }
                Ok(None) => {
                    return Err(HarnessError::NotRunning {
                        what: format!(
                            "the child {} closed its stdout before printing {marker:?}; its output:\n{}",
                            self.name,
                            self.seen.join("\n")
                        ),
                    })
                }
                Err(_) => {
                    return Err(self.timeout(format!("{marker:?} from the child {}", self.name), timeout))
                }
            }
        }
    }

    fn timeout(&self, what: String, waited: Duration) -> HarnessError {
        HarnessError::Timeout {
            what,
            waited,
            details: format!("child output so far:\n{}", self.seen.join("\n")),
        }
    }

    /// Writes one line to the child's stdin (see [`watch_parent`]).
    pub fn send_line(&mut self, line: &str) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| HarnessError::NotRunning {
                what: format!("the stdin of the child {} is closed", self.name),
            })?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| HarnessError::io(format!("writing to the child {}", self.name), e))
    }

    /// Closes the child's stdin: a child in [`watch_parent`] exits.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Stops the child with SIGSTOP (a process that hangs: its session stops pinging).
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// Continues a paused child with SIGCONT.
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, sig: libc::c_int) -> Result<()> {
        if self.status.is_some() || !spawner::signal(self.child.id(), sig) {
            return Err(HarnessError::NotRunning {
                what: format!("the child {} is not running", self.name),
            });
        }
        Ok(())
    }

    /// SIGKILLs the child (continuing it if paused) and reaps it; no-op once reaped.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        // Not reaped yet, so the pid is still this child's.
        let _ = self.child.kill();
        spawner::signal(self.child.id(), libc::SIGCONT);
        self.status = self.child.wait().ok();
    }

    /// Waits until the child exits by itself and returns its status; kills it and fails
    /// after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.status = Some(status);
                    return Ok(status);
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(EXIT_POLL),
                Ok(None) => {
                    self.kill();
                    return Err(self.timeout(format!("the child {} to exit", self.name), timeout));
                }
                Err(e) => return Err(HarnessError::io(format!("waiting for {}", self.name), e)),
            }
        }
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// In a child started by [`TestChild`]: the name of the test it was started for; `None`
/// in a normal test run.
pub fn child_role() -> Option<String> {
    std::env::var(CHILD_ENV).ok().filter(|v| !v.is_empty())
}

/// In a child: prints one report line `<marker><text>` for
/// [`TestChild::wait_for_marker`] and flushes it. The line starts on a fresh line (libtest
/// may have printed the test name without a newline).
pub fn report(marker: &str, text: impl fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{marker}{text}");
    let _ = out.flush();
}

/// In a child: reads stdin on a thread and passes each line (from
/// [`TestChild::send_line`]) to the returned receiver; when stdin closes (the parent
/// closed it, dropped the child, or died) the process exits at once with status 0.
pub fn watch_parent() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("test-child-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
            std::process::exit(0);
        });
    if spawned.is_err() {
        // Without the watcher the child could outlive its parent: better not run.
        std::process::exit(1);
    }
    rx
}

#[cfg(test)]
mod tests;
