//! Helpers shared by the integration tests: connecting to the harness's servers, unique
//! znode paths, `block_on` (from the harness), SHA-1/base64 for digest ACL ids, waiting on session
//! events, and a small TCP proxy that can cut a client off from its server.
//!
//! Each test file is its own crate and uses a subset of these.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use zookeeper_mt::{CreateMode, Error, SessionEvents, SessionState, WatchedEvent, ZooKeeper};

/// Upper bound for anything a test waits on (events, futures, threads). Generous: it is
/// only reached when something is broken, and then the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(20);

/// The shared server of this test binary.
pub fn hosts() -> String {
    zk_harness::shared_test_connect_string()
}

/// A new session on the shared server.
pub fn connect() -> ZooKeeper {
    connect_to(&hosts())
}

/// A new session on `hosts` (10 s session timeout).
pub fn connect_to(hosts: &str) -> ZooKeeper {
    ZooKeeper::connect(hosts, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connecting to {hosts}: {e}"))
}

/// A znode path no other test (or earlier run against an external server) uses.
pub fn unique(name: &str) -> String {
    zk_harness::testing::unique_path(&format!("zkrs-{name}"))
}

/// Creates a persistent node with open ACL; panics on failure.
pub fn create(zk: &ZooKeeper, path: &str, data: &[u8]) -> String {
    zk.create(path, data, CreateMode::Persistent)
        .unwrap_or_else(|e| panic!("creating {path}: {e}"))
}

/// Creates a persistent node with open ACL in the given mode; panics on failure.
pub fn create_mode(zk: &ZooKeeper, path: &str, data: &[u8], mode: CreateMode) -> String {
    zk.create(path, data, mode)
        .unwrap_or_else(|e| panic!("creating {path} ({mode:?}): {e}"))
}

// ---------------------------------------------------------------- block_on

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use zk_harness::executor::{block_on, block_on_timeout, poll_once};

// ---------------------------------------------------------------- session events

/// Receives session events until one has `state`; returns every event seen (the last
/// one has `state`). Panics after `timeout` or if the stream ends first.
pub fn wait_for_state(
    events: &SessionEvents,
    state: SessionState,
    timeout: Duration,
) -> Vec<WatchedEvent> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                let done = event.state == state;
                seen.push(event);
                if done {
                    return seen;
                }
            }
            Err(Error::Timeout) => {
                panic!("no session event with state {state:?} within {timeout:?}; saw {seen:?}")
            }
            Err(Error::Closed) => {
                panic!("session stream ended before state {state:?}; saw {seen:?}")
            }
            Err(error) => panic!("waiting for state {state:?}: {error}; saw {seen:?}"),
        }
    }
}

/// Waits until the session event stream ends (the handle closed); returns the events seen.
pub fn wait_for_stream_end(events: &SessionEvents, timeout: Duration) -> Vec<WatchedEvent> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => seen.push(event),
            Err(Error::Closed) => return seen,
            Err(Error::Timeout) => {
                panic!("session stream still open after {timeout:?}; saw {seen:?}")
            }
            Err(error) => panic!("waiting for the stream's end: {error}; saw {seen:?}"),
        }
    }
}

/// Polls `condition` every few ms until it holds; panics after `timeout`. Only for
/// conditions no event reports (e.g. a context count).
pub fn poll_until(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    zk_harness::testing::wait_until(what, timeout, condition);
}

// ---------------------------------------------------------------- digest ids

/// SHA-1 (FIPS 180-1).
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in message.chunks_exact(64) {
        let mut w = [0u32; 80];
        for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
            *word = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, word) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*word);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (state, value) in h.iter_mut().zip([a, b, c, d, e]) {
            *state = state.wrapping_add(value);
        }
    }
    let mut out = [0u8; 20];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The id of a `digest` ACL entry for `user:password`: `user:base64(sha1(user:password))`.
pub fn digest_id(user: &str, password: &str) -> String {
    format!(
        "{user}:{}",
        base64(&sha1(format!("{user}:{password}").as_bytes()))
    )
}

// ---------------------------------------------------------------- proxy

/// A proxy in front of a server. [`block`](Proxy::block) cuts every connection and
/// refuses new ones (accepts and closes them at once) until [`unblock`](Proxy::unblock):
/// a client behind it is cut off from the server while the server (and other clients)
/// keep running. The vocabulary of these tests over [`zk_harness::FaultProxy`].
pub struct Proxy {
    inner: zk_harness::FaultProxy,
}

impl Proxy {
    pub fn start(target: &str) -> Proxy {
        Proxy::start_on("127.0.0.1", target)
    }

    pub fn start_on(ip: &str, target: &str) -> Proxy {
        let ip = ip.parse().expect("an IP address");
        Proxy {
            inner: zk_harness::FaultProxy::start_on(ip, target).expect("starting a proxy"),
        }
    }

    /// `IP:PORT` of the proxy, for a client's connect string.
    pub fn connect_string(&self) -> String {
        self.inner.connect_string()
    }

    /// Cuts every open connection and refuses new ones.
    pub fn block(&self) {
        self.inner.block();
        self.inner.cut_all();
    }

    /// Forwards new connections again.
    pub fn unblock(&self) {
        self.inner.unblock();
    }
}
