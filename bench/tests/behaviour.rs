//! The behaviour comparison (zkpython vs our crates) and a smoke run of the benchmark,
//! against a real server the harness starts.
//!
//! The comparison needs zkpython, which `bench/zkpython/build.sh` builds from Debian's
//! source package (the `compare` command runs it; it is a no-op once built). Set
//! `ZK_BENCH_SKIP_ZKPYTHON=1` to skip the comparison explicitly where that cannot work.

use std::process::Command;
use zk_harness::{Server, ServerOptions};

const BIN: &str = env!("CARGO_BIN_EXE_zookeeper-bench");

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

    let same = Command::new(BIN)
        .args(["compare", "--hosts", &hosts])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&same.stdout);
    assert!(
        same.status.success(),
        "behaviour differs:\n{stdout}\n{}",
        String::from_utf8_lossy(&same.stderr)
    );
    assert!(stdout.contains("identical"), "{stdout}");

    // the check must fail when one result differs
    let injected = Command::new(BIN)
        .args(["compare", "--hosts", &hosts, "--inject-difference"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&injected.stdout);
    assert!(
        !injected.status.success(),
        "an injected difference was not detected:\n{stdout}"
    );
    assert!(stdout.contains("err Injected"), "{stdout}");
}

#[test]
fn benchmark_smoke_run_prints_the_table() {
    // tiny: two clients, two scenarios, one round, on a server the runner starts itself
    let out = Command::new(BIN)
        .args([
            "--quick",
            "--rounds",
            "1",
            "--only",
            "sync,watch",
            "--clients",
            "rust,c",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
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
fn memcheck_small_run_is_flat() {
    let server = server();
    let out = Command::new(BIN)
        .args([
            "memcheck",
            "--hosts",
            &server.connect_string(),
            "--n",
            "20000",
            "--sample",
            "5000",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("memcheck: flat"), "{stdout}");
}
