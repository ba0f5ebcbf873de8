//! Every request's Rust->C conversion on a closed handle, and the verdict each input
//! deserves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use zookeeper_mt::{
    Acl, CreateMode, Error, Op, Perms, Reconfig, WatchRemoval, WatcherType, ZooKeeper,
    MAX_DATA_LEN, MAX_TTL,
};

use crate::paths::server_accepts_path;

/// Reads structured values out of fuzzer bytes (zeros once they run out).
pub struct Input<'a> {
    data: &'a [u8],
}

/// Pieces strings are built from: every rule of the path check, the forbidden Unicode
/// ranges at their edges, NUL, and plain names.
pub(crate) const FRAGMENTS: &[&str] = &[
    "/",
    "/",
    "/",
    "a",
    "b",
    "zookeeper",
    ".",
    "..",
    "...",
    "//",
    "\0",
    " ",
    "-",
    ":",
    "\u{1}",
    "\u{1f}",
    "\u{20}",
    "\u{7e}",
    "\u{7f}",
    "\u{9f}",
    "\u{a0}",
    "\u{d7ff}",
    "\u{e000}",
    "\u{f8ff}",
    "\u{f900}",
    "\u{ffef}",
    "\u{fff0}",
    "\u{fffd}",
    "\u{ffff}",
    "\u{10000}",
    "\u{1f600}",
    "\u{10ffff}",
    "é",
    "日本",
];

impl<'a> Input<'a> {
    /// Wraps fuzzer bytes.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn raw(&mut self, max: usize) -> &'a [u8] {
        let len = (self.byte() as usize % (max + 1)).min(self.data.len());
        let (head, rest) = self.data.split_at(len);
        self.data = rest;
        head
    }

    /// A string of up to 8 pieces: mostly [`FRAGMENTS`], sometimes raw bytes (lossy).
    fn string(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.byte() % 9 {
            let selector = self.byte();
            if (selector as usize) < FRAGMENTS.len() * 7 {
                out.push_str(FRAGMENTS[selector as usize % FRAGMENTS.len()]);
            } else {
                out.push_str(&String::from_utf8_lossy(self.raw(12)));
            }
        }
        out
    }

    /// Node data: usually short, sometimes exactly at or just over `MAX_DATA_LEN`.
    fn data(&mut self) -> Vec<u8> {
        match self.byte() {
            0xfe => vec![0x5a; MAX_DATA_LEN],
            0xff => vec![0x5a; MAX_DATA_LEN + 1],
            _ => self.raw(32).to_vec(),
        }
    }

    fn acl(&mut self) -> Vec<Acl> {
        (0..self.byte() % 4)
            .map(|_| {
                let perms = Perms(if self.bool() { self.i32() } else { 31 });
                let (scheme, id) = if self.bool() {
                    ("world".to_string(), "anyone".to_string())
                } else {
                    (self.string(), self.string())
                };
                Acl {
                    perms,
                    scheme: scheme.into(),
                    id: id.into(),
                }
            })
            .collect()
    }

    fn mode(&mut self) -> CreateMode {
        let ttl = match self.byte() % 5 {
            0 => Duration::ZERO,
            1 => Duration::from_micros(999),
            2 => MAX_TTL,
            3 => MAX_TTL + Duration::from_millis(1),
            _ => Duration::from_millis(u64::from(self.byte()) + 1),
        };
        match self.byte() % 7 {
            0 => CreateMode::Persistent,
            1 => CreateMode::Ephemeral,
            2 => CreateMode::PersistentSequential,
            3 => CreateMode::EphemeralSequential,
            4 => CreateMode::Container,
            5 => CreateMode::PersistentWithTtl(ttl),
            _ => CreateMode::PersistentSequentialWithTtl(ttl),
        }
    }

    fn version(&mut self) -> i32 {
        match self.byte() % 4 {
            0 => -1,
            1 => i32::MAX,
            2 => i32::MIN,
            _ => self.i32(),
        }
    }

    fn op(&mut self) -> Op {
        match self.byte() % 4 {
            0 => Op::Create {
                path: self.string(),
                data: self.data(),
                acl: self.acl().into(),
                mode: self.mode(),
            },
            1 => Op::Delete {
                path: self.string(),
                version: self.version().into(),
            },
            2 => Op::SetData {
                path: self.string(),
                data: self.data(),
                version: self.version().into(),
            },
            _ => Op::Check {
                path: self.string(),
                version: self.version().into(),
            },
        }
    }
}

/// One validation error an input deserves.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// `InvalidPath` naming this path.
    Path(String),
    /// `DataTooLarge` with this length.
    Data(usize),
    /// `DataTooLarge` for the whole request (over the server's 0xfffff-byte limit).
    Request,
    /// `InvalidAcl` (an empty ACL list).
    EmptyAcl,
    /// `InteriorNul` for this argument.
    Nul(&'static str),
    /// Some `InvalidArgument` (bad TTL, empty scheme or host list, empty multi, TTL or
    /// container create in a multi).
    Argument,
}

impl Expect {
    fn matches(&self, error: &Error) -> bool {
        match (self, error) {
            (Expect::Path(p), Error::InvalidPath { path, .. }) => p == path,
            (Expect::Data(n), Error::DataTooLarge { len, max }) => n == len && *max == MAX_DATA_LEN,
            (Expect::Request, Error::DataTooLarge { max, .. }) => *max == MAX_REQUEST_LEN,
            (Expect::EmptyAcl, Error::InvalidAcl) => true,
            (Expect::Nul(what), Error::InteriorNul(w)) => what == w,
            (Expect::Argument, Error::InvalidArgument(_)) => true,
            _ => false,
        }
    }
}

fn expect_path(out: &mut Vec<Expect>, path: &str, sequential: bool) {
    if !server_accepts_path(path, sequential) {
        out.push(Expect::Path(path.to_string()));
    }
}

fn expect_data(out: &mut Vec<Expect>, data: &[u8]) {
    if data.len() > MAX_DATA_LEN {
        out.push(Expect::Data(data.len()));
    }
}

/// The server's `jute.maxbuffer` default, which bounds a whole request.
const MAX_REQUEST_LEN: usize = 0xfffff;

/// The binding's documented, deliberately generous size estimate of one (sub)request.
fn request_estimate(path: &str, data: &[u8], acl: &[Acl]) -> usize {
    64 + path.len()
        + data.len()
        + acl
            .iter()
            .map(|a| 12 + a.scheme.len() + a.id.len())
            .sum::<usize>()
}

fn expect_request(out: &mut Vec<Expect>, estimate: usize) {
    if estimate > MAX_REQUEST_LEN {
        out.push(Expect::Request);
    }
}

fn expect_acl(out: &mut Vec<Expect>, acl: &[Acl]) {
    if acl.is_empty() {
        out.push(Expect::EmptyAcl);
    }
    if acl.iter().any(|a| a.scheme.contains('\0')) {
        out.push(Expect::Nul("ACL scheme"));
    }
    if acl.iter().any(|a| a.id.contains('\0')) {
        out.push(Expect::Nul("ACL id"));
    }
}

fn expect_mode(out: &mut Vec<Expect>, mode: CreateMode) {
    if let CreateMode::PersistentWithTtl(ttl) | CreateMode::PersistentSequentialWithTtl(ttl) = mode
    {
        if ttl.as_millis() == 0 || ttl > MAX_TTL {
            out.push(Expect::Argument);
        }
    }
}

fn expect_create(out: &mut Vec<Expect>, path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) {
    expect_path(out, path, mode.is_sequential());
    expect_data(out, data);
    expect_acl(out, acl);
    expect_mode(out, mode);
    expect_request(out, request_estimate(path, data, acl));
}

fn expect_string(out: &mut Vec<Expect>, value: &str, what: &'static str) {
    if value.contains('\0') {
        out.push(Expect::Nul(what));
    }
}

/// The property: `result` is `Err(Closed)` when nothing was expected, else an error
/// matching one of `expected`. Never `Ok` (the handle is closed).
fn verdict<T: std::fmt::Debug>(call: &str, expected: &[Expect], result: Result<T, Error>) {
    match result {
        Ok(value) => panic!("{call}: Ok({value:?}) on a closed handle"),
        Err(Error::Closed) if expected.is_empty() => {
            CALLS_PASSED_VALIDATION.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => {
            assert!(
                expected.iter().any(|e| e.matches(&error)),
                "{call}: got {error:?}, expected one of {expected:?} (or Closed if none)"
            );
            CALLS_REJECTED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Calls (since the process started) whose input passed every check and reached the
/// closed handle, and calls rejected with a deserved validation error.
static CALLS_PASSED_VALIDATION: AtomicU64 = AtomicU64::new(0);
static CALLS_REJECTED: AtomicU64 = AtomicU64::new(0);

/// (calls that reached the handle, calls rejected by validation) so far.
pub fn call_counts() -> (u64, u64) {
    (
        CALLS_PASSED_VALIDATION.load(Ordering::Relaxed),
        CALLS_REJECTED.load(Ordering::Relaxed),
    )
}

/// Fuzz entry: decodes a few calls with arbitrary arguments and runs them on `zk`, which
/// must be closed (see [`closed_handle`](crate::closed_handle)).
pub fn request_input(zk: &ZooKeeper, data: &[u8]) {
    let mut input = Input::new(data);
    for _ in 0..1 + input.byte() % 4 {
        one_request(zk, &mut input);
    }
}

fn one_request(zk: &ZooKeeper, input: &mut Input<'_>) {
    let mut expected = Vec::new();
    let e = &mut expected;
    match input.byte() % 16 {
        0 => {
            let (path, data, acl, mode) = (input.string(), input.data(), input.acl(), input.mode());
            expect_create(e, &path, &data, &acl, mode);
            if input.bool() {
                verdict(
                    "create",
                    e,
                    zk.create(
                        &path,
                        &data,
                        zookeeper_mt::CreateOptions::new(mode).with_acl(&acl),
                    ),
                );
            } else {
                verdict(
                    "create2",
                    e,
                    zk.create2_async(
                        &path,
                        &data,
                        zookeeper_mt::CreateOptions::new(mode).with_acl(&acl),
                    )
                    .wait(),
                );
            }
        }
        1 => {
            let (path, version) = (input.string(), input.version());
            expect_path(e, &path, false);
            verdict("delete", e, zk.delete(&path, Some(version)));
        }
        2 => {
            let path = input.string();
            expect_path(e, &path, false);
            verdict("exists", e, zk.exists(&path));
            verdict("exists_watch", e, zk.exists_watch(&path));
        }
        3 => {
            let path = input.string();
            expect_path(e, &path, false);
            verdict("get", e, zk.get(&path));
            verdict("get_watch", e, zk.get_watch_async(&path).wait());
        }
        4 => {
            let (path, data, version) = (input.string(), input.data(), input.version());
            expect_path(e, &path, false);
            expect_data(e, &data);
            expect_request(e, request_estimate(&path, &data, &[]));
            verdict("set", e, zk.set(&path, &data, Some(version)));
        }
        5 => {
            let path = input.string();
            expect_path(e, &path, false);
            verdict("get_children", e, zk.get_children(&path));
            verdict("get_children2", e, zk.get_children2(&path));
            verdict("get_children_watch", e, zk.get_children_watch(&path));
            verdict("get_children2_watch", e, zk.get_children2_watch(&path));
        }
        6 => {
            let path = input.string();
            expect_path(e, &path, false);
            verdict("get_acl", e, zk.get_acl(&path));
            verdict("sync", e, zk.sync(&path));
        }
        7 => {
            let (path, acl, version) = (input.string(), input.acl(), input.version());
            expect_path(e, &path, false);
            expect_acl(e, &acl);
            verdict("set_acl", e, zk.set_acl(&path, &acl, Some(version)));
        }
        8 => {
            let (scheme, credentials) = (input.string(), input.raw(16).to_vec());
            expect_string(e, &scheme, "auth scheme");
            if scheme.is_empty() {
                e.push(Expect::Argument);
            }
            verdict("add_auth", e, zk.add_auth(&scheme, &credentials));
        }
        9 | 10 => {
            let ops: Vec<Op> = (0..input.byte() % 5).map(|_| input.op()).collect();
            expect_multi(e, &ops);
            verdict("multi", e, zk.multi(&ops));
        }
        11 => {
            let path = input.string();
            let which = match input.byte() % 3 {
                0 => WatcherType::Children,
                1 => WatcherType::Data,
                _ => WatcherType::Any,
            };
            expect_path(e, &path, false);
            verdict(
                "remove_watches",
                e,
                zk.remove_watches(
                    &path,
                    which,
                    if input.bool() {
                        WatchRemoval::Local
                    } else {
                        WatchRemoval::Server
                    },
                ),
            );
        }
        12 => {
            let hosts = input.string();
            if hosts.trim().is_empty() {
                e.push(Expect::Argument);
            }
            expect_string(e, &hosts, "host list");
            // SAFETY: the handle is closed, so no C call is made (the ZOOKEEPER-4699 race
            // needs a live IO thread).
            verdict("set_servers", e, unsafe { zk.set_servers(&hosts) });
        }
        13 => {
            let bulk = input.bool();
            let (first, second) = (input.string(), input.string());
            let (change, parts) = if bulk {
                (Reconfig::bulk(&first), vec![(&first, "members")])
            } else {
                (
                    Reconfig::Incremental {
                        joining: &first,
                        leaving: &second,
                    },
                    vec![(&first, "joining servers"), (&second, "leaving servers")],
                )
            };
            for (value, what) in parts.iter().filter(|(value, _)| !value.is_empty()) {
                expect_string(e, value, what);
            }
            if parts.iter().all(|(value, _)| value.is_empty()) {
                e.push(Expect::Argument);
            }
            verdict(
                "reconfig",
                e,
                zk.reconfig(change, Some(i64::from(input.i32()))),
            );
        }
        14 => {
            verdict("get_config", e, zk.get_config());
            verdict("client_id", e, zk.client_id());
            verdict("session_timeout", e, zk.session_timeout());
            // SAFETY: the handle is closed: no C call, no IO thread to race.
            verdict("cycle_next_server", e, unsafe { zk.cycle_next_server() });
            assert!(zk.is_unrecoverable());
            assert_eq!(zk.live_contexts(), 0);
        }
        _ => {
            // Pure value conversions.
            let (a, b) = (input.i32(), input.i32());
            assert!((Perms(a) | Perms(b)).contains(Perms(a)));
            assert!(Perms::ALL.contains(Perms::READ | Perms::ADMIN));
            let (scheme, id) = (input.string(), input.string());
            let acl = Acl::new(Perms(a), &scheme, &id);
            assert_eq!((&*acl.scheme, &*acl.id), (&*scheme, &*id));
            let mode = input.mode();
            let _ = (mode.is_sequential(), mode.is_ephemeral());
            let op = input.op();
            assert_eq!(op.clone(), op);
        }
    }
}

fn expect_multi(e: &mut Vec<Expect>, ops: &[Op]) {
    if ops.is_empty() {
        e.push(Expect::Argument);
    }
    let total: usize = ops
        .iter()
        .map(|op| match op {
            Op::Create {
                path, data, acl, ..
            } => request_estimate(path, data, acl),
            Op::SetData { path, data, .. } => request_estimate(path, data, &[]),
            Op::Delete { path, .. } | Op::Check { path, .. } => request_estimate(path, &[], &[]),
        })
        .sum();
    expect_request(e, total);
    for op in ops {
        match op {
            Op::Create {
                path,
                data,
                acl,
                mode,
            } => {
                // Modes the C client cannot do inside a multi: TTL (no API) and
                // containers (it misparses the reply).
                if matches!(
                    mode,
                    CreateMode::PersistentWithTtl(_)
                        | CreateMode::PersistentSequentialWithTtl(_)
                        | CreateMode::Container
                ) {
                    e.push(Expect::Argument);
                }
                expect_create(e, path, data, acl, *mode);
            }
            Op::SetData { path, data, .. } => {
                expect_path(e, path, false);
                expect_data(e, data);
            }
            Op::Delete { path, .. } | Op::Check { path, .. } => expect_path(e, path, false),
        }
    }
}
