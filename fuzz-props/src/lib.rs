//! Fuzz properties of the `zookeeper` crate, shared by the cargo-fuzz targets in
//! `fuzz/fuzz_targets/` and by plain `cargo test` loops over generated inputs (the tests
//! at the end of this file, which run on stable Rust in the normal test suite).
//!
//! Each entry point takes raw fuzzer bytes and panics only when a property fails:
//!
//! - [`path_input`]: `validate_path` never panics and accepts exactly what the server
//!   accepts: [`java_validate_path`] is `PathUtils.validatePath` of ZooKeeper 3.8.0
//!   ported line by line over UTF-16 code units (as Java sees the string), plus the
//!   request-size bound (a path over `MAX_DATA_LEN` bytes makes the server drop the
//!   connection).
//! - [`error_code_input`]: `Error::from_code` and `Error::code` round-trip for any i32,
//!   and `Display` and the predicates never panic.
//! - [`request_input`]: arbitrary paths, data, ACLs, create modes, versions, auth
//!   schemes, host lists and multi ops go through every request's Rust->C conversion
//!   (CString, ACL vectors, `zoo_*_op_init`) on a closed handle: each call gives exactly
//!   one of the validation errors the input deserves, or `Closed` if it deserves none.
//!   The closed handle comes from a handshake-only fake server on loopback
//!   ([`closed_handle`]): no ZooKeeper server is needed.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use zookeeper::{
    validate_path, Acl, CreateMode, Error, Op, Perms, Reconfig, WatchRemoval, WatcherType,
    ZooKeeper, MAX_DATA_LEN, MAX_TTL,
};

// ---------------------------------------------------------------- the path oracle

/// `org.apache.zookeeper.common.PathUtils.validatePath(String)` (3.8.0), over the UTF-16
/// code units of the path, exactly as the Java loop walks them.
pub fn java_validate_path(chars: &[u16]) -> bool {
    const SLASH: u16 = b'/' as u16;
    const DOT: u16 = b'.' as u16;
    if chars.is_empty() || chars[0] != SLASH {
        return false;
    }
    if chars.len() == 1 {
        return true; // the root
    }
    if chars[chars.len() - 1] == SLASH {
        return false;
    }
    let mut lastc = SLASH;
    for i in 1..chars.len() {
        let c = chars[i];
        let at_end_or_slash = i + 1 == chars.len() || chars[i + 1] == SLASH;
        if c == 0 || (c == SLASH && lastc == SLASH) {
            return false;
        } else if c == DOT && lastc == DOT {
            if chars[i - 2] == SLASH && at_end_or_slash {
                return false;
            }
        } else if c == DOT {
            if chars[i - 1] == SLASH && at_end_or_slash {
                return false;
            }
        } else if (c > 0 && c <= 0x1f)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || c >= 0xfff0
        {
            return false;
        }
        lastc = c;
    }
    true
}

/// Whether the server accepts `path` for a request (`sequential`: a create with a
/// sequence suffix, validated by the server as `path + "1"`, as `PathUtils` does).
pub fn server_accepts_path(path: &str, sequential: bool) -> bool {
    let mut units: Vec<u16> = path.encode_utf16().collect();
    if sequential {
        units.push(u16::from(b'1'));
    }
    path.len() <= MAX_DATA_LEN && java_validate_path(&units)
}

/// Property: `validate_path` agrees with the server on `path` in both modes, and a
/// rejection is `InvalidPath` naming the path.
pub fn check_path(path: &str) {
    for sequential in [false, true] {
        let ours = validate_path(path, sequential);
        let server = server_accepts_path(path, sequential);
        match &ours {
            Ok(()) => assert!(
                server,
                "validate_path({path:?}, {sequential}) accepts what the server rejects"
            ),
            Err(Error::InvalidPath { path: p, reason }) => {
                assert!(
                    !server,
                    "validate_path({path:?}, {sequential}) rejects ({reason}) what the server accepts"
                );
                assert_eq!(p, path, "InvalidPath names another path");
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("validate_path({path:?}) gave {other:?}, not InvalidPath"),
        }
    }
}

/// Fuzz entry: the bytes as a path (lossy UTF-8, so every input is tried), and when
/// they are valid UTF-8 also with a `/` prepended.
pub fn path_input(data: &[u8]) {
    let path = String::from_utf8_lossy(data);
    check_path(&path);
    if !path.starts_with('/') {
        check_path(&format!("/{path}"));
    }
}

// ---------------------------------------------------------------- error codes

/// Property for one C code: round trip, `Display` and predicates.
pub fn check_error_code(code: i32) {
    match Error::from_code(code) {
        None => assert_eq!(code, 0, "only ZOK maps to no error"),
        Some(error) => {
            assert_eq!(error.code(), Some(code), "{error:?} does not round-trip");
            let text = error.to_string();
            assert!(!text.is_empty());
            if let Error::Unknown(c) = error {
                assert_eq!(c, code);
                assert!(text.contains(&code.to_string()), "{text}");
            }
            if error.is_connection_loss() {
                assert!(error.is_retryable());
            }
            let _ = error.is_session_terminal();
        }
    }
}

/// Fuzz entry: the first four bytes (little endian, zero-padded) as a C code.
pub fn error_code_input(data: &[u8]) {
    let mut bytes = [0u8; 4];
    for (dst, src) in bytes.iter_mut().zip(data) {
        *dst = *src;
    }
    check_error_code(i32::from_le_bytes(bytes));
}

// ---------------------------------------------------------------- requests

/// Reads structured values out of fuzzer bytes (zeros once they run out).
pub struct Input<'a> {
    data: &'a [u8],
}

/// Pieces strings are built from: every rule of the path check, the forbidden Unicode
/// ranges at their edges, NUL, and plain names.
const FRAGMENTS: &[&str] = &[
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
/// must be closed (see [`closed_handle`]).
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
                        zookeeper::CreateOptions::new(mode).with_acl(&acl),
                    ),
                );
            } else {
                verdict(
                    "create2",
                    e,
                    zk.create2_async(
                        &path,
                        &data,
                        zookeeper::CreateOptions::new(mode).with_acl(&acl),
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

// ---------------------------------------------------------------- a closed handle

/// A closed `ZooKeeper` handle, made once per process: the client connects to a
/// handshake-only fake server on loopback (it answers the connect request and replies
/// ZOK to every later request, including the close), then closes.
pub fn closed_handle() -> &'static ZooKeeper {
    static HANDLE: OnceLock<ZooKeeper> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let address = listener.local_addr().expect("local address");
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = fake_session(stream);
                });
            }
        });
        let zk = ZooKeeper::builder(&address.to_string())
            .session_timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(30))
            .connect()
            .expect("connect to the fake server");
        zk.close().expect("close");
        zk
    })
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

fn write_frame(stream: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    stream.write_all(&frame)
}

/// Serves one client connection: the ConnectResponse (protocol 0, timeout, session id,
/// 16-byte password, readOnly), then a ReplyHeader (xid, zxid, ZOK) per request.
fn fake_session(mut stream: TcpStream) -> io::Result<()> {
    read_frame(&mut stream)?;
    let mut response = Vec::new();
    response.extend_from_slice(&0i32.to_be_bytes());
    response.extend_from_slice(&30_000i32.to_be_bytes());
    response.extend_from_slice(&0x5eed_i64.to_be_bytes());
    response.extend_from_slice(&16i32.to_be_bytes());
    response.extend_from_slice(&[7u8; 16]);
    response.push(0);
    write_frame(&mut stream, &response)?;
    loop {
        let request = read_frame(&mut stream)?;
        if request.len() < 8 {
            return Ok(());
        }
        let mut reply = request[..4].to_vec(); // xid
        reply.extend_from_slice(&1i64.to_be_bytes()); // zxid
        reply.extend_from_slice(&0i32.to_be_bytes()); // err
        write_frame(&mut stream, &reply)?;
        if request[4..8] == (-11i32).to_be_bytes() {
            return Ok(()); // closeSession
        }
    }
}

// ---------------------------------------------------------------- generated inputs

/// xorshift64*: a tiny deterministic generator for the plain-test loops.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A random path-like string: pieces of `FRAGMENTS` and random scalar values.
    pub fn path(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.next_u64() % 10 {
            let r = self.next_u64();
            if r & 3 == 0 {
                // Any scalar value, weighted towards the BMP edges the server checks.
                let c = match r % 3 {
                    0 => (r >> 8) % 0x100,
                    1 => (r >> 8) % 0x1_0000,
                    _ => (r >> 8) % 0x11_0000,
                } as u32;
                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
            } else {
                out.push_str(FRAGMENTS[(r >> 8) as usize % FRAGMENTS.len()]);
            }
        }
        out
    }
}

/// Iterations for the plain-test loops: `ZK_FUZZ_ITERS` or `default`.
pub fn iterations(default: u64) -> u64 {
    std::env::var("ZK_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `n` generated inputs through each property; returns the inputs tried per
/// property (path, error code, request).
pub fn run_generated(n: u64, seed: u64) -> (u64, u64, u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..n {
        check_path(&rng.path());
        let len = (rng.next_u64() % 48) as usize;
        path_input(&rng.bytes(len));
    }
    // Every code near the defined range, then random ones.
    let mut codes = 0;
    for code in -200..=10 {
        check_error_code(code);
        codes += 1;
    }
    for code in [i32::MIN, i32::MIN + 1, -1000, 1000, i32::MAX] {
        check_error_code(code);
        codes += 1;
    }
    for _ in 0..n {
        check_error_code(rng.next_u64() as i32);
        codes += 1;
    }
    let zk = closed_handle();
    for _ in 0..n {
        let len = (rng.next_u64() % 160) as usize;
        request_input(zk, &rng.bytes(len));
    }
    assert_eq!(zk.live_contexts(), 0);
    (2 * n, codes, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_matches_known_server_verdicts() {
        // From the server table in integration/tests/hostile_input/paths.rs.
        for ok in [
            "/",
            "/a",
            "/a/...",
            "/.a",
            "/a.",
            "/..a",
            "/a b",
            "/\u{a0}",
            "/\u{d7ff}",
        ] {
            assert!(server_accepts_path(ok, false), "{ok:?}");
        }
        for bad in [
            "", "a", "/a/", "//", "/.", "/..", "/a/./b", "/a\0", "/\u{1f}", "/\u{7f}",
        ] {
            assert!(!server_accepts_path(bad, false), "{bad:?}");
        }
        for bad in [
            "/\u{9f}",
            "/\u{e000}",
            "/\u{f8ff}",
            "/\u{fff0}",
            "/\u{ffff}",
            "/\u{10000}",
        ] {
            assert!(!server_accepts_path(bad, false), "{bad:?}");
        }
        for ok in ["/", "/a/", "/a/.", "/a/..", "/a/-"] {
            assert!(server_accepts_path(ok, true), "{ok:?}");
        }
        assert!(!server_accepts_path("/a//", true));
        assert!(!server_accepts_path("/./", true));
    }

    #[test]
    fn generated_inputs_hold_every_property() {
        let n = iterations(100_000);
        let (paths, codes, requests) = run_generated(n, 0x5eed_0001);
        let (reached, rejected) = call_counts();
        println!(
            "fuzz loops: {paths} paths, {codes} error codes, {requests} request inputs \
             ({reached} calls passed validation, {rejected} rejected with a typed error)"
        );
    }
}
