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

/// The cells of the Markdown table whose header starts with `header`, row by row.
fn table_rows(stdout: &str, header: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .skip_while(|line| !line.starts_with(header))
        .skip(2) // the header and the separator
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn threads_quick_run_prints_every_row() {
    // Every row, and (`--check`) every target met: threads flat in the number of
    // pending calls and recipe instances, nothing left after dropping them.
    let server = server();
    let hosts = server.connect_string();
    let (succeeded, stdout) = run_bench(&["threads", "--quick", "--check", "--hosts", &hosts]);
    assert!(succeeded, "a target failed:\n{stdout}");

    let started = table_rows(&stdout, "| what was started |");
    let what: Vec<&str> = started.iter().map(|row| row[0].as_str()).collect();
    for needle in [
        "baseline: both sessions connected",
        "1 lock held by another session",
        "100 pending async lock acquires",
        "100 pending async queue takes",
        "20 node caches (",
        "20 node caches, async API",
        "20 leader latches (",
        "20 leader latches, async API",
        "20 persistent nodes (",
        "20 persistent nodes, async API",
        "20 config watches (",
        "20 more config watches (`ConfigWatch::new_async`",
        "**total, all of the above**",
    ] {
        assert!(
            what.iter().any(|w| w.starts_with(needle)),
            "no row {needle:?} in:\n{stdout}"
        );
    }
    for row in &started[1..] {
        assert_eq!(row.len(), 5, "{row:?} in:\n{stdout}");
        for count in &row[1..4] {
            assert!(
                count == "n/a" || count.parse::<i64>().is_ok(),
                "{count:?} in {row:?}"
            );
        }
        let target = &row[4];
        assert!(
            target == "-"
                || target.ends_with(": PASS")
                || target.ends_with(": FAIL")
                || target.starts_with("not measured: "),
            "{target:?} in {row:?}"
        );
    }

    let checks = table_rows(&stdout, "| check |");
    let what: Vec<&str> = checks.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(
        what,
        [
            "threads of the process vs the baseline",
            "live contexts vs the baseline",
            "background tasks vs the baseline",
            "nodes left under the lock dir",
            "nodes left under the latch dir",
            "nodes left under the persistent nodes dir",
            "queue items still there (the originals, by name)",
            "a dropped acquire took the lock",
        ],
        "{stdout}"
    );
    for row in &checks {
        assert_eq!(row.len(), 4, "{row:?} in:\n{stdout}");
        assert!(row[3] == "PASS" || row[3] == "FAIL", "{row:?}");
    }
    for row in &checks[..6] {
        row[1].parse::<u64>().unwrap();
        row[2].trim_start_matches("<= ").parse::<u64>().unwrap();
    }
    let queue = &checks[6][1];
    let (kept, rest) = queue.split_once(" of ").expect(queue);
    kept.parse::<u64>().unwrap();
    assert!(rest.starts_with("10 (+"), "{queue:?}");
    assert!(
        ["yes", "no"].contains(&checks[7][1].as_str()),
        "{:?}",
        checks[7]
    );

    assert!(stdout.contains("dropping took "), "{stdout}");
    assert!(
        stdout.contains(" s (polled every 50 ms, deadline 30 s)"),
        "{stdout}"
    );
    let summary = stdout
        .lines()
        .find_map(|line| line.strip_prefix("targets: "))
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    let (passed, total) = summary
        .trim_end_matches(" PASS")
        .split_once(" of ")
        .unwrap();
    assert!(passed.parse::<u32>().unwrap() <= total.parse::<u32>().unwrap());
}

#[test]
fn before_after_against_itself_prints_every_selected_row() {
    // This binary as both versions (an A/A run): the lock hand-off, the latch hand-over and
    // the queue, one pair, no peers, on a server it starts itself.
    let (succeeded, stdout) = run_bench(&[
        "before-after",
        "--old",
        BIN,
        "--quick",
        "--pairs",
        "1",
        "--peers",
        "none",
        "--only",
        "lock c2,latch,queue c1",
    ]);
    assert!(succeeded, "{stdout}");
    for label in [
        "| queue put (`Queue::put`) |",
        "| queue take, 1 consumer (`Queue::take`) |",
        "| lock hand-off between 2 sessions |",
        "| leader latch hand-over between 2 sessions |",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
        assert!(!line.contains("no complete pair"), "{line}");
    }
    assert!(!stdout.contains("Failed runs"), "{stdout}");
    assert!(
        !stdout.contains("lock acquire+release, 8 contenders"),
        "{stdout}"
    );
}
