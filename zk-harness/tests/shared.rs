//! The process-wide shared server, the atexit hook and PDEATHSIG.
//!
//! Two tests re-run this test binary as a child process (selecting an ignored test with
//! `ZK_HARNESS_CHILD` set) to watch what happens to its JVM when the child exits.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use zk_harness::{process_alive, shared_server, Server, ServerOptions};

const CHILD_ENV: &str = "ZK_HARNESS_CHILD";

#[test]
fn shared_server_is_one_server() {
    let a = shared_server();
    let b = std::thread::spawn(|| shared_server().connect_string())
        .join()
        .unwrap();
    assert_eq!(a.connect_string(), b);
    assert_eq!(a.four_letter("ruok").unwrap(), "imok");
}

/// Runs the ignored test `name` of this binary in a child process; returns the JVM pid
/// and dir it reports.
fn run_child(name: &str, mode: &str) -> (u32, PathBuf) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--include-ignored", "--nocapture"])
        .env(CHILD_ENV, mode)
        .env_remove("ZK_TEST_HOSTS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ZK-CHILD "))
        .unwrap_or_else(|| {
            panic!(
                "child printed no report; status {}\nstdout:\n{stdout}\nstderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let (pid, dir) = line.split_once(' ').unwrap();
    (pid.parse().unwrap(), PathBuf::from(dir))
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[test]
fn atexit_kills_the_shared_server_and_removes_its_dir() {
    let (pid, dir) = run_child("child_process", "shared");
    // The child has exited: the atexit hook ran before it did.
    assert!(!process_alive(pid), "shared JVM {pid} outlived its process");
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn jvm_dies_with_an_abruptly_killed_process() {
    let (pid, dir) = run_child("child_process", "sigkill");
    let gone = wait_gone(pid, Duration::from_secs(10));
    // No cleanup code ran in the child: remove its dir here.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(gone, "JVM {pid} outlived its SIGKILLed parent");
}

/// Not a test on its own: the body of the child processes above.
#[test]
#[ignore = "run by the other tests of this file as a child process"]
fn child_process() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    match mode.as_str() {
        "shared" => {
            let server = shared_server();
            println!(
                "ZK-CHILD {} {}",
                server.pid().unwrap(),
                server.dir().display()
            );
            // Returning lets the test harness exit normally: atexit cleans up.
        }
        "sigkill" => {
            // Started from a short-lived thread: the JVM must survive that thread (it is
            // forked by the harness's spawner thread) but not the process.
            let server = std::thread::spawn(|| {
                Server::start_with(&ServerOptions::for_tests()).expect("server starts")
            })
            .join()
            .unwrap();
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(server.four_letter("ruok").unwrap(), "imok");
            println!(
                "ZK-CHILD {} {}",
                server.pid().unwrap(),
                server.dir().display()
            );
            use std::io::Write;
            std::io::stdout().flush().unwrap();
            // SAFETY: kill(2) on our own pid; we mean to die here.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}
