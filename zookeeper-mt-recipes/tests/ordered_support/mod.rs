//! Test helpers of the ordered recipes (lock, election, read-write lock, semaphore): a
//! proxy that reads the client's requests (to lose one reply on purpose and to see which
//! requests a recovery sends), the process's thread count, and detection of a valgrind
//! run (to scale the big tests down).
//!
//! Each test binary compiles this module and uses only a part of it.
#![allow(dead_code)]

use std::thread;
use std::time::{Duration, Instant};

/// ZooKeeper request opcodes (`ZooDefs.OpCode`) the tests look for.
pub mod op {
    /// `create`.
    pub const CREATE: i32 = 1;
    /// `delete`.
    pub const DELETE: i32 = 2;
    /// `exists`.
    pub const EXISTS: i32 = 3;
    /// `getData`.
    pub const GET_DATA: i32 = 4;
    /// `getChildren`.
    pub const GET_CHILDREN: i32 = 8;
    /// `sync`.
    pub const SYNC: i32 = 9;
    /// `getChildren2`.
    pub const GET_CHILDREN2: i32 = 12;
    /// `create2`.
    pub const CREATE2: i32 = 15;
}

/// One request the client sent through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Which client connection carried it (0 = the first).
    pub connection: usize,
    /// Its opcode (see [`op`]).
    pub op: i32,
}

/// A proxy that can lose the reply to a chosen request after the server has applied it
/// (the connection is cut right then), refuse reconnections for a while, and tell which
/// requests the client sent (pings left out). The vocabulary of these tests over
/// [`zk_harness::FaultProxy`].
pub struct RequestProxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    inner: zk_harness::FaultProxy,
    start: zk_harness::fault_proxy::RequestMark,
}

impl RequestProxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> RequestProxy {
        let inner = zk_harness::FaultProxy::start(target).expect("starting a proxy");
        RequestProxy {
            addr: inner.connect_string(),
            start: inner.mark(),
            inner,
        }
    }

    /// Loses the reply to the next request with one of the opcodes `ops` (the server
    /// applies it; the client never hears back): the proxy drops that reply and cuts the
    /// connection.
    pub fn lose_reply_of(&self, ops: &[i32]) {
        let ops = ops.to_vec();
        self.inner
            .cut_after_matching(1, move |r| ops.contains(&r.op.0));
    }

    /// Blocks until `count` replies have been lost in all (fails the test after 30 s).
    pub fn wait_lost(&self, count: usize) {
        self.inner
            .wait_for_fired(count, Duration::from_secs(30))
            .expect("the reply was not lost in time");
    }

    /// Refuses new connections (or accepts them again).
    pub fn set_up(&self, up: bool) {
        if up {
            self.inner.unblock();
        } else {
            self.inner.block();
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.inner.block();
        self.inner.cut_all();
    }

    /// The requests sent so far, in order.
    pub fn log(&self) -> Vec<Request> {
        self.inner
            .requests_since(self.start)
            .iter()
            .map(|r| Request {
                connection: r.connection as usize,
                op: r.op.0,
            })
            .collect()
    }

    /// The connections accepted so far.
    pub fn connections(&self) -> usize {
        self.inner.connections_accepted() as usize
    }
}

/// The server address (`host:port`) of the shared test server.
pub fn shared_server_addr() -> String {
    let hosts = zk_harness::shared_test_connect_string();
    hosts
        .split(',')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// Threads of this process now whose name starts with `prefix` (all with "").
pub fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let comm = std::fs::read_to_string(task.ok()?.path().join("comm")).ok()?;
            comm.trim_end().starts_with(prefix).then_some(())
        })
        .count()
}

#[allow(unused_imports)] // not every binary that shares this module scales down
pub use zk_harness::testing::under_valgrind;

/// Polls `condition` until it holds or `timeout` passes; whether it held. For states
/// nothing signals (a background step finishing, a thread ending).
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
