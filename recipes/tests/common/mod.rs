//! Set-up shared by the recipes' integration tests: sessions on the shared test server,
//! unique base paths, polling for a condition, a TCP proxy the test can cut, and child
//! processes running one test of the same binary.
//!
//! Each test binary compiles this module and uses only a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper::ZooKeeper;

/// Session timeout of the tests' sessions.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A session on `hosts`.
pub fn connect_to(hosts: &str) -> ZooKeeper {
    ZooKeeper::connect(hosts, SESSION_TIMEOUT).expect("connect")
}

/// A session on the shared test server (or `ZK_TEST_HOSTS`).
pub fn connect() -> ZooKeeper {
    connect_to(&zk_harness::shared_test_connect_string())
}

/// A fresh path `/recipes-tests/<test binary>/<name>-<guid>`, so tests sharing a server
/// never meet.
pub fn unique_path(name: &str) -> String {
    let binary = env!("CARGO_CRATE_NAME");
    format!("/recipes-tests/{binary}/{name}-{}", recipes::util::guid())
}

/// Polls `condition` until it holds; fails the test after 10 s. For states nothing
/// signals, such as "another thread is now blocked" (read from a recipe's own gauge).
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// No watch or request context left behind by `zk` once the recipe values are gone. (A
/// request first: completions are delivered in order, so earlier ones are done.)
pub fn assert_no_leftover_contexts(zk: &ZooKeeper) {
    zk.exists("/").unwrap();
    assert_eq!(
        zk.live_contexts(),
        0,
        "a watch or request was left registered"
    );
}

/// A TCP forwarder to a server that the test can cut (closing every connection and
/// refusing new ones) and restore: a client behind it loses its connection and cannot
/// come back until the test says so.
pub struct Proxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (target, accept_up, accept_connections) = (
            target.to_string(),
            Arc::clone(&up),
            Arc::clone(&connections),
        );
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if !accept_up.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut kept = accept_connections.lock().unwrap();
                kept.push(client.try_clone().unwrap());
                kept.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy {
            addr,
            up,
            connections,
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            let _ = connection.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// A command that runs only the test `test` of this test binary, printing its output
/// (libtest's capture off), as a child process.
pub fn child_test(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    command
}

/// A child process running one test of this binary (see [`child_session`] for its side)
/// that reports to the parent on stdout and then hangs. Killed on drop (also when the
/// test fails); it exits by itself once the parent goes away.
pub struct Child(std::process::Child);

impl Child {
    /// Starts the test `test` as a child working on `path` of the shared test server,
    /// told so through the environment variable `env_var`.
    pub fn start(test: &str, env_var: &str, path: &str) -> Child {
        let hosts = zk_harness::shared_test_connect_string();
        Child(
            child_test(test)
                .env(env_var, format!("{hosts}\n{path}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )
    }

    /// Reads the child's stdout (on a helper thread, so a silent child cannot hang the
    /// test) until a line contains `marker`; returns what follows it.
    pub fn wait_for_marker(&mut self, marker: &str) -> String {
        let stdout = self.0.stdout.take().unwrap();
        let (line_tx, line_rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if line_tx.send(line).is_err() {
                    return;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = line_rx
                .recv_timeout(left)
                .expect("the child did not report in time (or exited)");
            // libtest prints "test child_... ... " before the child's own output.
            if let Some((_, rest)) = line.split_once(marker) {
                return rest.trim().to_string();
            }
        }
    }

    /// SIGKILL: no cleanup, its session just stops talking.
    pub fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's side of [`Child::start`]: `None` in a normal test run (`env_var` unset);
/// in the child, a session with `session_timeout` on the parent's server and the path to
/// work on. The child exits once the parent goes away (its end of our stdin closes).
pub fn child_session(env_var: &str, session_timeout: Duration) -> Option<(ZooKeeper, String)> {
    let spec = std::env::var(env_var).ok()?;
    let (hosts, path) = spec.split_once('\n').unwrap();
    thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let zk = ZooKeeper::connect(hosts, session_timeout).unwrap();
    Some((zk, path.to_string()))
}

/// In a child: prints `line` for the parent's [`Child::wait_for_marker`], then hangs
/// until killed.
pub fn report_and_hang(line: &str) -> ! {
    let mut out = std::io::stdout();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
    loop {
        thread::park();
    }
}
