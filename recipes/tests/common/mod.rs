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
    format!(
        "/recipes-tests/{binary}/{name}-{}",
        zookeeper_recipes::util::guid()
    )
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

/// ZooKeeper request opcodes (the protocol's `OpCode`), as seen by [`FaultProxy`].
pub mod opcode {
    /// create
    pub const CREATE: i32 = 1;
    /// delete
    pub const DELETE: i32 = 2;
    /// exists
    pub const EXISTS: i32 = 3;
    /// getData
    pub const GET_DATA: i32 = 4;
    /// setData
    pub const SET_DATA: i32 = 5;
    /// getChildren
    pub const GET_CHILDREN: i32 = 8;
    /// sync
    pub const SYNC: i32 = 9;
    /// ping
    pub const PING: i32 = 11;
    /// getChildren2
    pub const GET_CHILDREN2: i32 = 12;
    /// multi
    pub const MULTI: i32 = 14;
}

/// One request a client sent through a [`FaultProxy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Which client connection (0, 1, ... in accept order).
    pub connection: usize,
    /// Its opcode (see [`opcode`]).
    pub opcode: i32,
}

#[derive(Default)]
struct FaultState {
    up: AtomicBool,
    /// Cut the connection right after forwarding the next request with this opcode.
    cut_after: Mutex<Option<i32>>,
    /// Set once such a cut happened.
    cut_done: AtomicBool,
    requests: Mutex<Vec<Request>>,
    bytes_to_client: std::sync::atomic::AtomicU64,
    connections: std::sync::atomic::AtomicUsize,
    /// Both sockets of every live connection, for `cut`.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A TCP forwarder that understands ZooKeeper's framing on the client-to-server side:
/// it records every request's opcode, counts the bytes sent to the client, can cut the
/// connection right after a chosen request is forwarded (its reply never reaches the
/// client, though the server applies it), and can be cut and restored as a whole.
pub struct FaultProxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    state: Arc<FaultState>,
}

fn read_frame(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).ok()?;
    let len = i32::from_be_bytes(len);
    let mut frame = vec![0u8; usize::try_from(len).ok()? + 4];
    frame[..4].copy_from_slice(&len.to_be_bytes());
    from.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

impl FaultProxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(FaultState::default());
        state.up.store(true, Ordering::SeqCst);
        let (target, accept_state) = (target.to_string(), Arc::clone(&state));
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                if !accept_state.up.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let connection = accept_state.connections.fetch_add(1, Ordering::SeqCst);
                accept_state
                    .sockets
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                // Set before a cut request is forwarded: its reply is then dropped.
                let deaf = Arc::new(AtomicBool::new(false));
                Self::pump_requests(
                    Arc::clone(&accept_state),
                    connection,
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Arc::clone(&deaf),
                );
                let state = Arc::clone(&accept_state);
                let (mut from, mut to) = (server, client);
                thread::spawn(move || {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let n = match from.read(&mut buffer) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if deaf.load(Ordering::SeqCst) || to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                        state.bytes_to_client.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    let _ = to.shutdown(Shutdown::Both);
                    let _ = from.shutdown(Shutdown::Both);
                });
            }
        });
        FaultProxy { addr, state }
    }

    fn pump_requests(
        state: Arc<FaultState>,
        connection: usize,
        mut from: TcpStream,
        mut to: TcpStream,
        deaf: Arc<AtomicBool>,
    ) {
        thread::spawn(move || {
            // The first frame is the connect request (no request header).
            let mut first = true;
            while let Some(frame) = read_frame(&mut from) {
                let opcode = if first || frame.len() < 12 {
                    None
                } else {
                    Some(i32::from_be_bytes(frame[8..12].try_into().unwrap()))
                };
                first = false;
                let cut = opcode.is_some_and(|op| {
                    let mut armed = state.cut_after.lock().unwrap();
                    let hit = *armed == Some(op);
                    if hit {
                        *armed = None;
                    }
                    hit
                });
                if let Some(op) = opcode {
                    state.requests.lock().unwrap().push(Request {
                        connection,
                        opcode: op,
                    });
                }
                if cut {
                    deaf.store(true, Ordering::SeqCst);
                }
                if to.write_all(&frame).is_err() {
                    break;
                }
                if cut {
                    // Forwarded: the server applies it; its reply is dropped.
                    let _ = to.flush();
                    state.cut_done.store(true, Ordering::SeqCst);
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        });
    }

    /// Cuts the connection right after the next request with `opcode` is forwarded to
    /// the server (the server applies it; the client never gets its reply and sees a
    /// connection loss). The client may reconnect at once.
    pub fn cut_after(&self, opcode: i32) {
        self.state.cut_done.store(false, Ordering::SeqCst);
        *self.state.cut_after.lock().unwrap() = Some(opcode);
    }

    /// Whether the cut armed by [`cut_after`](Self::cut_after) has happened.
    pub fn has_cut(&self) -> bool {
        self.state.cut_done.load(Ordering::SeqCst)
    }

    /// Closes every connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.state.up.store(false, Ordering::SeqCst);
        for socket in self.state.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.state.up.store(true, Ordering::SeqCst);
    }

    /// Every request forwarded so far (pings included), in order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Requests forwarded so far, pings excluded.
    pub fn request_count(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.opcode != opcode::PING)
            .count()
    }

    /// Bytes the server sent to clients so far.
    pub fn bytes_to_client(&self) -> u64 {
        self.state.bytes_to_client.load(Ordering::SeqCst)
    }
}

/// The opcodes a client sent on connection `connection`, pings and watch
/// re-registration left out.
pub fn opcodes_on(requests: &[Request], connection: usize) -> Vec<i32> {
    requests
        .iter()
        .filter(|r| r.connection == connection && r.opcode != opcode::PING && r.opcode < 100)
        .map(|r| r.opcode)
        .collect()
}
