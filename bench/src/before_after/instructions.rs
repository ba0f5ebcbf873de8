//! Instructions per op by callgrind (valgrind): the figure the machine's load does not
//! move. A version's client runs a scenario twice under callgrind, with n and 3n ops; the
//! difference of the program totals (every thread: the caller's, the C client's, the
//! recipes' driver and timer) over the 2n extra ops cancels start-up, connecting, set-up
//! and tear-down. Contended scenarios vary a little with the interleaving valgrind's
//! serialised threads give them.

use crate::launchers::run_client_raw;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Whether valgrind can be run.
pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Instructions per op of `bin client ARGS(n)`.
pub fn per_op(
    bin: &Path,
    args: &dyn Fn(usize) -> Vec<String>,
    n: usize,
    timeout: Duration,
) -> Result<f64, String> {
    let small = total(bin, &args(n), timeout)?;
    let large = total(bin, &args(3 * n), timeout)?;
    Ok((large as f64 - small as f64) / (2 * n) as f64)
}

/// The program total of one run under callgrind.
fn total(bin: &Path, args: &[String], timeout: Duration) -> Result<u64, String> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let out = std::env::temp_dir().join(format!(
        "zkbench-callgrind-{}-{}.out",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(bin)
        .arg("client")
        .args(args);
    let outcome = run_client_raw(&mut cmd, timeout);
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    outcome?;
    let text = text.map_err(|e| format!("{}: {e}", out.display()))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no program total in {}", out.display()))
}
