//! Helpers of the chaos suite (`tests/chaos.rs`): child processes re-executing the test
//! binary (several at once, their report lines multiplexed onto one channel), a guard
//! that kills them all, and serialization of the ensemble tests. Clock and unique paths
//! come from the harness.
#![allow(dead_code)]

use std::io::{BufRead, Write};
use std::process::ExitStatus;
use std::sync::mpsc::Sender;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;
use zk_harness::testing::TestChild;

/// Environment variable naming a child's role (its presence makes the child entry run).
pub const ROLE_ENV: &str = "ZK_CHAOS_CHILD_ROLE";
/// Environment variable holding a child's parameters (`key=value` lines).
pub const SPEC_ENV: &str = "ZK_CHAOS_CHILD_SPEC";
/// Prefix of every report line a child prints (libtest may print text before it on the
/// same line).
pub const MARK: &str = "CHAOS|";

/// Only one ensemble test runs at a time: the machine has two cores, and three JVMs per
/// test plus child processes already load it fully.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine, so
/// critical-section stamps of different children can be compared.
#[allow(unused_imports)]
pub use zk_harness::history::monotonic_nanos as now_ns;

/// A znode path no other test or run uses.
pub fn unique(name: &str) -> String {
    zk_harness::testing::unique_path(&format!("chaos-{name}"))
}

/// Sends `sig` to `pid`; false if it failed.
pub fn signal(pid: u32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions; callers pass pids of children
    // not reaped yet, so the pid cannot name another process.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

// ---------------------------------------------------------------- parent side

/// What a child's reader thread reports.
#[derive(Debug)]
pub enum Event {
    /// A report line: the words after [`MARK`].
    Line { child: usize, words: Vec<String> },
    /// The child's stdout closed (it exited or was killed).
    Eof { child: usize },
}

/// One child process (over [`TestChild`]: spawned with `PR_SET_PDEATHSIG`, killed and
/// reaped on drop).
pub struct ChildProc {
    pub name: String,
    pub role: String,
    child: TestChild,
}

impl ChildProc {
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}

/// Child processes of this test; every one still running is SIGKILLed and reaped when
/// the set is dropped, also while a failing test unwinds.
#[derive(Default)]
pub struct Children {
    list: Vec<ChildProc>,
}

impl Children {
    pub fn new() -> Children {
        Children::default()
    }

    /// Starts the test binary again, running only `entry` (a `#[test]` that does nothing
    /// unless [`ROLE_ENV`] is set), with `role` and `spec`. Its report lines go to
    /// `events` tagged with the returned index; it exits when its stdin closes.
    pub fn spawn(
        &mut self,
        entry: &str,
        name: &str,
        role: &str,
        spec: &str,
        events: &Sender<Event>,
    ) -> usize {
        let index = self.list.len();
        let mut cmd = TestChild::command(entry).expect("the test binary");
        cmd.env(ROLE_ENV, role)
            .env(SPEC_ENV, spec)
            .env("RUST_BACKTRACE", "1");
        let mut child = TestChild::spawn_command(name, cmd).expect("spawning a child process");
        let lines = child.take_lines();
        let events = events.clone();
        thread::spawn(move || {
            for line in lines {
                if let Some((_, report)) = line.split_once(MARK) {
                    let words = report.split_whitespace().map(str::to_string).collect();
                    if events
                        .send(Event::Line {
                            child: index,
                            words,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            }
            let _ = events.send(Event::Eof { child: index });
        });
        self.list.push(ChildProc {
            name: name.to_string(),
            role: role.to_string(),
            child,
        });
        index
    }

    pub fn get(&self, index: usize) -> &ChildProc {
        &self.list[index]
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// SIGKILLs child `index` (SIGCONT too, in case it is stopped) and reaps it.
    pub fn kill(&mut self, index: usize) {
        self.list[index].child.kill();
    }

    /// Sends a line to the child's stdin.
    pub fn send_line(&mut self, index: usize, line: &str) {
        let _ = self.list[index].child.send_line(line);
    }

    /// Closes the child's stdin (it exits when it notices).
    pub fn close_stdin(&mut self, index: usize) {
        self.list[index].child.close_stdin();
    }

    /// Reaps a child whose stdout has closed (it has exited or is exiting); kills it and
    /// fails the test if it is still there after `timeout`.
    pub fn reap(&mut self, index: usize, timeout: Duration) -> ExitStatus {
        let proc = &mut self.list[index];
        proc.child
            .wait_exit(timeout)
            .unwrap_or_else(|e| panic!("child {} did not exit in time: {e}", proc.name))
    }
}

// ---------------------------------------------------------------- child side

/// The role and spec of this process if it is a chaos child.
pub fn child_role() -> Option<(String, Spec)> {
    let role = std::env::var(ROLE_ENV).ok()?;
    let spec = Spec(std::env::var(SPEC_ENV).unwrap_or_default());
    Some((role, spec))
}

/// `key=value` lines.
pub struct Spec(pub String);

impl Spec {
    pub fn build(pairs: &[(&str, String)]) -> String {
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn get(&self, key: &str) -> &str {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .unwrap_or_else(|| panic!("spec has no {key}"))
    }

    pub fn num(&self, key: &str) -> u64 {
        self.get(key).parse().expect("a number")
    }
}

/// Prints one report line (whole lines: stdout is line buffered and the lock is held for
/// the line).
pub fn report(text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{MARK}{text}");
    let _ = out.flush();
}

/// Starts a thread reading stdin: each line goes to the returned receiver; at EOF (the
/// parent closed it, or died) the process exits at once.
pub fn watch_stdin() -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
        std::process::exit(0);
    });
    rx
}
