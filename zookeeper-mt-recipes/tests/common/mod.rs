//! Set-up shared by the recipes' integration tests: sessions on the shared test server,
//! unique base paths, polling for a condition, a TCP proxy the test can cut, and child
//! processes running one test of the same binary.
//!
//! Each test binary compiles this module and uses only a part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;
use zk_harness::testing::TestChild;
use zookeeper_mt::ZooKeeper;

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
        "/recipes-tests/{binary}{}",
        zk_harness::testing::unique_path(name)
    )
}

/// Polls `condition` until it holds; fails the test after 10 s. For states nothing
/// signals, such as "another thread is now blocked" (read from a recipe's own gauge).
pub fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    zk_harness::testing::wait_until(what, Duration::from_secs(10), condition);
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

/// [`assert_no_leftover_contexts`] after a drop, which does not wait for the dropped
/// value's task: its watches go once the task has ended on the driver, a moment later.
pub fn assert_no_leftover_contexts_soon(zk: &ZooKeeper) {
    zk_harness::testing::poll_until(Duration::from_secs(10), || {
        zk.exists("/").is_ok() && zk.live_contexts() == 0
    });
    assert_no_leftover_contexts(zk);
}

/// A proxy the test can cut (closing every connection and refusing new ones) and
/// restore: a client behind it loses its connection and cannot come back until the test
/// says so. The vocabulary of these tests over [`zk_harness::FaultProxy`].
pub struct Proxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    inner: zk_harness::FaultProxy,
}

impl Proxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> Proxy {
        let inner = zk_harness::FaultProxy::start(target).expect("starting a proxy");
        Proxy {
            addr: inner.connect_string(),
            inner,
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.inner.block();
        self.inner.cut_all();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.inner.unblock();
    }
}

/// A command that runs only the test `test` of this test binary, printing its output
/// (libtest's capture off), as a child process.
pub fn child_test(test: &str) -> Command {
    TestChild::command(test).expect("the test binary's path")
}

/// A child process running one test of this binary (see [`child_session`] for its side)
/// that reports to the parent on stdout and then hangs. Killed on drop (also when the
/// test fails); it exits by itself once the parent goes away. Over
/// [`zk_harness::testing::TestChild`].
pub struct Child(TestChild);

impl Child {
    /// Starts the test `test` as a child working on `path` of the shared test server,
    /// told so through the environment variable `env_var`.
    pub fn start(test: &str, env_var: &str, path: &str) -> Child {
        let spec = format!("{}\n{path}", zk_harness::shared_test_connect_string());
        Child(TestChild::spawn(test, &[(env_var, &spec)]).expect("starting the child"))
    }

    /// Reads the child's stdout until a line contains `marker` (30 s at most); returns
    /// what follows it.
    pub fn wait_for_marker(&mut self, marker: &str) -> String {
        self.0
            .wait_for_marker(marker, Duration::from_secs(30))
            .expect("the child did not report in time (or exited)")
    }

    /// SIGKILL: no cleanup, its session just stops talking.
    pub fn kill(&mut self) {
        self.0.kill();
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

/// One request a client sent through a [`FaultProxy`] (pings are not recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Which client connection (0, 1, ... in accept order).
    pub connection: usize,
    /// Its opcode (see [`opcode`]).
    pub opcode: i32,
}

/// A proxy that records every request's opcode, counts the bytes sent to clients, can
/// cut the connection right after a chosen request is forwarded (its reply never
/// reaches the client, though the server applies it), and can be cut and restored as a
/// whole. The vocabulary of these tests over [`zk_harness::FaultProxy`].
pub struct FaultProxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    inner: zk_harness::FaultProxy,
    start: zk_harness::fault_proxy::RequestMark,
    /// Faults fired before the last `cut_after`.
    fired_before: std::sync::atomic::AtomicUsize,
}

impl FaultProxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> FaultProxy {
        let inner = zk_harness::FaultProxy::start(target).expect("starting a proxy");
        FaultProxy {
            addr: inner.connect_string(),
            start: inner.mark(),
            inner,
            fired_before: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Cuts the connection right after the next request with `opcode` is forwarded: the
    /// server applies it, its reply is lost, the client reconnects.
    pub fn cut_after(&self, opcode: i32) {
        self.fired_before
            .store(self.inner.fired().len(), Ordering::SeqCst);
        self.inner
            .cut_after_matching(1, move |r| r.op == zk_harness::OpCode(opcode));
    }

    /// Whether the cut armed by the last `cut_after` happened.
    pub fn has_cut(&self) -> bool {
        self.inner.fired().len() > self.fired_before.load(Ordering::SeqCst)
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.inner.block();
        self.inner.cut_all();
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.inner.unblock();
    }

    /// Every request sent through the proxy so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.inner
            .requests_since(self.start)
            .iter()
            .map(|r| Request {
                connection: r.connection as usize,
                opcode: r.op.0,
            })
            .collect()
    }

    /// The number of requests so far.
    pub fn request_count(&self) -> usize {
        self.requests().len()
    }

    /// Bytes sent to clients so far.
    pub fn bytes_to_client(&self) -> u64 {
        self.inner.bytes_to_clients()
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

/// A boxed future, for driving several different ones together ([`join_all`]).
pub type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Runs `body` as test `test` alone in a child process of this binary, so no other
/// test's threads come and go while it counts threads; the parent checks it passed.
pub fn alone(test: &str, body: impl FnOnce()) {
    if zk_harness::testing::child_role().as_deref() == Some(test) {
        body();
        return;
    }
    let status = child_test(test)
        .env(
            zk_harness::TEST_HOSTS_ENV,
            zk_harness::shared_test_connect_string(),
        )
        .status()
        .expect("starting the child");
    assert!(status.success(), "{test} failed in its child process");
}

/// Drives `futures` together on this thread until each is done; their outputs, in order.
pub fn join_all<T>(futures: Vec<Boxed<'_, T>>) -> Vec<T> {
    let mut pending: Vec<Option<Boxed<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    zk_harness::executor::block_on(std::future::poll_fn(|cx| {
        for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                if let std::task::Poll::Ready(value) = future.as_mut().poll(cx) {
                    *output = Some(value);
                    *slot = None;
                }
            }
        }
        if pending.iter().all(Option::is_none) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }));
    outputs.into_iter().map(Option::unwrap).collect()
}
