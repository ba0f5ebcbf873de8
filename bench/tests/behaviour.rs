//! The behaviour comparison (zkpython vs our crates) and smoke runs of the benchmark
//! against a real server the harness starts.
//!
//! The comparison needs zkpython, which `bench/zkpython/build.sh` builds from Debian's
//! source package (the `compare` command runs it; it is a no-op once built). Set
//! `ZK_BENCH_SKIP_ZKPYTHON=1` to skip the comparison explicitly where that cannot work.

use std::process::Command;
use zk_harness::{Server, ServerOptions};

const BIN: &str = env!("CARGO_BIN_EXE_zookeeper-bench");

/// Runs the bench binary; returns whether it succeeded and its stdout (stderr joins
/// stdout in the messages of failed assertions).
fn run_bench(args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

fn server() -> Server {
    Server::start_with(&ServerOptions::for_tests().log_level("WARN"))
        .expect("start a ZooKeeper server")
}

#[test]
fn zkpython_and_rust_behave_the_same_and_a_difference_fails() {
    if std::env::var("ZK_BENCH_SKIP_ZKPYTHON").as_deref() == Ok("1") {
        eprintln!("ZK_BENCH_SKIP_ZKPYTHON=1: behaviour comparison skipped");
        return;
    }
    let server = server();
    let hosts = server.connect_string();

    let (same, stdout) = run_bench(&["compare", "--hosts", &hosts]);
    assert!(same, "behaviour differs:\n{stdout}");
    assert!(stdout.contains("identical"), "{stdout}");

    // the check must fail when one result differs
    let (succeeded, stdout) = run_bench(&["compare", "--hosts", &hosts, "--inject-difference"]);
    assert!(
        !succeeded,
        "an injected difference was not detected:\n{stdout}"
    );
    assert!(stdout.contains("err Injected"), "{stdout}");
}

#[test]
fn benchmark_smoke_run_prints_the_table() {
    // tiny: two clients, two scenarios, one round, on a server the runner starts itself
    let (succeeded, stdout) = run_bench(&[
        "--quick",
        "--sections",
        "side",
        "--rounds",
        "1",
        "--only",
        "sync,watch",
        "--clients",
        "rust,c",
    ]);
    assert!(succeeded, "{stdout}");
    for needle in [
        "## Side by side",
        "| sync create |",
        "| watch: set -> event on another handle |",
        "Rust/C",
        "peak RSS Rust",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("Failed runs"), "{stdout}");
}

#[test]
fn paired_runs_and_scaling_tables_are_printed() {
    // one pair per op; the scaling tables at their smallest sizes, one round
    let (succeeded, stdout) = run_bench(&[
        "--quick",
        "--sections",
        "paired,scaling",
        "--pairs",
        "1",
        "--rounds",
        "1",
    ]);
    assert!(succeeded, "{stdout}");
    for needle in [
        "| sync get | 300 |",
        "| pipelined create, 1000 in flight |",
        "Rust/C CPU per op",
        "### Per-op cost against armed watches",
        "| 1,000 |",
        "### Per-op cost against requests in flight",
        "### Queue take cost against queue length",
        "put / raw = ",
        "### Lock hand-off against waiters",
        "### Memory per session",
        // the tables' captions name the date, the machine and the server
        "server: standalone server, forceSync=no",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    // every paired row has a ratio (a complete pair), and no process failed
    assert!(!stdout.contains("no complete pair"), "{stdout}");
    assert!(!stdout.contains("Failed runs"), "{stdout}");
}

#[test]
fn memcheck_small_run_is_flat() {
    let server = server();
    let hosts = server.connect_string();
    let (succeeded, stdout) = run_bench(&[
        "memcheck", "--hosts", &hosts, "--n", "20000", "--sample", "5000",
    ]);
    assert!(succeeded, "{stdout}");
    assert!(stdout.contains("memcheck: flat"), "{stdout}");
}
