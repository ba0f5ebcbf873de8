//! Test helpers of the ordered recipes (lock, election, read-write lock, semaphore): a
//! proxy that reads the client's requests (to lose one reply on purpose and to see which
//! requests a recovery sends), the process's thread count, and detection of a valgrind
//! run (to scale the big tests down).
//!
//! Each test binary compiles this module and uses only a part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
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

#[derive(Default)]
struct State {
    /// Accept connections (false: refuse them, as if the server were unreachable).
    up: bool,
    /// Lose the reply to the next request with one of these opcodes, then cut the
    /// connection.
    lose_reply_of: Vec<i32>,
    /// The xid whose reply is to be dropped, per connection.
    dropping: Vec<Option<i32>>,
    /// Replies lost so far.
    lost: usize,
    log: Vec<Request>,
    sockets: Vec<TcpStream>,
    connections: usize,
}

/// A TCP forwarder to one server that parses the ZooKeeper frames (4-byte length, then
/// the payload; after the connect request, each request starts with xid and opcode, each
/// reply with xid, zxid and error) so a test can lose the reply to a chosen request
/// after the server has applied it (the connection is cut right then), refuse
/// reconnections for a while, and read which requests the client sent.
pub struct RequestProxy {
    /// Where clients connect (`127.0.0.1:<port>`).
    pub addr: String,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl RequestProxy {
    /// Forwards to `target` (`host:port`).
    pub fn start(target: &str) -> RequestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new((
            Mutex::new(State {
                up: true,
                ..State::default()
            }),
            Condvar::new(),
        ));
        let (target, accept_state) = (target.to_string(), Arc::clone(&state));
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let connection = {
                    let mut s = accept_state.0.lock().unwrap();
                    if !s.up {
                        continue; // dropped: closed at once
                    }
                    s.connections += 1;
                    s.dropping.push(None);
                    s.connections - 1
                };
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                {
                    let mut s = accept_state.0.lock().unwrap();
                    s.sockets.push(client.try_clone().unwrap());
                    s.sockets.push(server.try_clone().unwrap());
                }
                let up_state = Arc::clone(&accept_state);
                let (c, s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || requests(c, s, connection, up_state));
                let down_state = Arc::clone(&accept_state);
                thread::spawn(move || replies(server, client, connection, down_state));
            }
        });
        RequestProxy { addr, state }
    }

    /// Loses the reply to the next request with one of the opcodes `ops` (the server
    /// applies it; the client never hears back): the proxy drops that reply and cuts the
    /// connection.
    pub fn lose_reply_of(&self, ops: &[i32]) {
        self.state.0.lock().unwrap().lose_reply_of = ops.to_vec();
    }

    /// Blocks until `count` replies have been lost in all (fails the test after 30 s).
    pub fn wait_lost(&self, count: usize) {
        let (lock, changed) = &*self.state;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut s = lock.lock().unwrap();
        while s.lost < count {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the reply was never lost");
            s = changed.wait_timeout(s, left).unwrap().0;
        }
    }

    /// Refuses new connections (or accepts them again).
    pub fn set_up(&self, up: bool) {
        self.state.0.lock().unwrap().up = up;
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        let mut s = self.state.0.lock().unwrap();
        s.up = false;
        for socket in s.sockets.drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// The requests sent so far, in order.
    pub fn log(&self) -> Vec<Request> {
        self.state.0.lock().unwrap().log.clone()
    }

    /// The connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.0.lock().unwrap().connections
    }
}

/// Reads one frame (length and payload) from `from`.
fn read_frame(from: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).ok()?;
    let len = i32::from_be_bytes(len);
    let mut frame = Vec::with_capacity(4 + len.max(0) as usize);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.resize(4 + len.max(0) as usize, 0);
    from.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

fn int_at(frame: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(at..at + 4)?.try_into().ok()?))
}

/// Client to server: logs each request (after the connect request) and marks the one
/// whose reply is to be lost.
fn requests(
    mut client: TcpStream,
    mut server: TcpStream,
    connection: usize,
    state: Arc<(Mutex<State>, Condvar)>,
) {
    let mut first = true;
    while let Some(frame) = read_frame(&mut client) {
        if !std::mem::take(&mut first) {
            if let (Some(xid), Some(op)) = (int_at(&frame, 4), int_at(&frame, 8)) {
                let mut s = state.0.lock().unwrap();
                s.log.push(Request { connection, op });
                if s.lose_reply_of.contains(&op) {
                    s.lose_reply_of.clear();
                    s.dropping[connection] = Some(xid);
                }
            }
        }
        if server.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// Server to client: forwards replies, except the one to lose (then cuts both sides).
fn replies(
    mut server: TcpStream,
    mut client: TcpStream,
    connection: usize,
    state: Arc<(Mutex<State>, Condvar)>,
) {
    let mut first = true;
    while let Some(frame) = read_frame(&mut server) {
        if !std::mem::take(&mut first) {
            let xid = int_at(&frame, 4);
            let mut s = state.0.lock().unwrap();
            if xid.is_some() && s.dropping[connection] == xid {
                s.dropping[connection] = None;
                s.lost += 1;
                state.1.notify_all();
                drop(s);
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                return;
            }
        }
        if client.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
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

/// Whether the test runs under valgrind (its preloaded tool library): big tests scale
/// down there.
pub fn under_valgrind() -> bool {
    std::env::var("LD_PRELOAD").is_ok_and(|preload| preload.contains("vgpreload"))
}

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
