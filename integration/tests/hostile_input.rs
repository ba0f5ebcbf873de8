//! Hostile input: garbage paths, oversized data, absurd versions, malformed
//! ACLs and auth schemes, calls on closed and expired handles, a huge child list. Each
//! must give a typed error (the variant is asserted); nothing may panic, abort or hang
//! (every wait is bounded, and a watchdog ends the process if a test overruns).
//!
//! Path validation is checked against the server itself on the same inputs: each path
//! goes to a live 3.8.0 server twice, through the raw C client (`zookeeper_sys`, which
//! has its own client-side check) and over a raw socket speaking the wire protocol
//! (which reaches the server even with inputs the C client refuses, NUL and non-UTF-8
//! bytes included). `zookeeper::validate_path` must accept exactly what the server
//! accepts. Run with `--nocapture` to see the table.
//!
//! The fuzz targets' properties (the `zookeeper-fuzz-props` crate) also run over
//! generated inputs in that crate's own tests (`ZK_FUZZ_ITERS` per property, default
//! 100,000), so they are checked on stable Rust in the normal suite.

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use zookeeper::{
    validate_path, Acl, CreateMode, Error, EventType, Op, Perms, SessionState, WatchRemoval,
    WatcherType, ZooKeeper, MAX_DATA_LEN,
};
use zookeeper_sys as sys;

/// Bound for any single wait in these tests.
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- helpers

/// Ends the process if the test holding it runs past `limit`: a hang becomes a failure.
struct Watchdog {
    done: Arc<AtomicBool>,
    thread: std::thread::Thread,
}

impl Watchdog {
    fn new(name: &'static str, limit: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while !flag.load(Ordering::Acquire) {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    eprintln!("hostile_input: test {name} hung for {limit:?}; ending the run");
                    std::process::exit(101);
                }
                std::thread::park_timeout(left);
            }
        })
        .thread()
        .clone();
        Watchdog { done, thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

fn hosts() -> String {
    zk_harness::shared_test_connect_string()
}

fn connect() -> ZooKeeper {
    ZooKeeper::connect(&hosts(), Duration::from_secs(10)).expect("connect")
}

/// A znode path no other test (or earlier run) uses.
fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/hostile-{tag}-{}-{nanos}", std::process::id())
}

/// Deletes `path` and everything under it (best effort, for cleanup).
fn delete_tree(zk: &ZooKeeper, path: &str) {
    if let Ok(children) = zk.get_children_async(path).wait_timeout(WAIT) {
        for child in children {
            delete_tree(zk, &format!("{path}/{child}"));
        }
    }
    let _ = zk.delete_async(path, None).wait_timeout(WAIT);
}

fn open() -> &'static [Acl] {
    Acl::OPEN_UNSAFE
}

// ---------------------------------------------------------------- raw wire protocol

/// Just enough of the ZooKeeper wire protocol to put any bytes in a request path,
/// bypassing every client-side check.
mod wire {
    use super::*;

    /// What the server did with a request.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Verdict {
        /// A reply with this error code, and the body (e.g. a created path).
        Reply(i32, Vec<u8>),
        /// The server closed the connection instead of answering.
        Closed,
    }

    impl Verdict {
        pub fn accepts_path(&self) -> bool {
            matches!(self, Verdict::Reply(rc, _) if *rc != sys::ZBADARGUMENTS)
        }

        /// For a create: the node was made (or exists). NONODE does not count: the
        /// server looks the parent up before it validates the new name, so a path whose
        /// parent cannot exist (`B//`) gets NONODE.
        pub fn creates(&self) -> bool {
            matches!(self, Verdict::Reply(rc, _) if *rc == sys::ZOK || *rc == sys::ZNODEEXISTS)
        }

        pub fn describe(&self) -> String {
            match self {
                Verdict::Reply(rc, _) => rc_name(*rc),
                Verdict::Closed => "connection closed".into(),
            }
        }

        /// The path in a create reply.
        pub fn created(&self) -> Option<String> {
            match self {
                Verdict::Reply(0, body) if body.len() >= 4 => {
                    let len = i32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
                    Some(String::from_utf8_lossy(body.get(4..4 + len)?).into_owned())
                }
                _ => None,
            }
        }
    }

    pub struct Session {
        stream: TcpStream,
        xid: i32,
    }

    fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(bytes);
    }

    impl Session {
        pub fn connect(address: &str) -> io::Result<Session> {
            let stream = TcpStream::connect(address)?;
            stream.set_read_timeout(Some(WAIT))?;
            stream.set_write_timeout(Some(WAIT))?;
            let mut session = Session { stream, xid: 0 };
            // ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd,
            // readOnly.
            let mut body = Vec::new();
            body.extend_from_slice(&0i32.to_be_bytes());
            body.extend_from_slice(&0i64.to_be_bytes());
            body.extend_from_slice(&10_000i32.to_be_bytes());
            body.extend_from_slice(&0i64.to_be_bytes());
            put_bytes(&mut body, &[0; 16]);
            body.push(0);
            session.send(&body)?;
            let response = session.recv()?;
            if response.len() < 16 || response[8..16] == [0; 8] {
                return Err(io::Error::other("no session in the ConnectResponse"));
            }
            Ok(session)
        }

        fn send(&mut self, body: &[u8]) -> io::Result<()> {
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            self.stream.write_all(&frame)
        }

        fn recv(&mut self) -> io::Result<Vec<u8>> {
            let mut len = [0u8; 4];
            self.stream.read_exact(&mut len)?;
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            self.stream.read_exact(&mut body)?;
            Ok(body)
        }

        /// Sends one request (`op` code and body); the server's verdict.
        pub fn request(&mut self, op: i32, body: &[u8]) -> Verdict {
            self.xid += 1;
            let mut frame = self.xid.to_be_bytes().to_vec();
            frame.extend_from_slice(&op.to_be_bytes());
            frame.extend_from_slice(body);
            if self.send(&frame).is_err() {
                return Verdict::Closed;
            }
            loop {
                let Ok(reply) = self.recv() else {
                    return Verdict::Closed;
                };
                // ReplyHeader: xid, zxid, err. Skip anything that is not our reply.
                let xid = i32::from_be_bytes(reply[..4].try_into().unwrap());
                if xid == self.xid {
                    let err = i32::from_be_bytes(reply[12..16].try_into().unwrap());
                    return Verdict::Reply(err, reply[16..].to_vec());
                }
            }
        }

        /// SetData(path, empty data, version 123456): the server validates the path
        /// before anything else (BADARGUMENTS), then looks the node up (NONODE or
        /// BADVERSION).
        pub fn set_data(&mut self, path: &[u8]) -> Verdict {
            let mut body = Vec::new();
            put_bytes(&mut body, path);
            put_bytes(&mut body, b"");
            body.extend_from_slice(&123_456i32.to_be_bytes());
            self.request(5, &body)
        }

        /// Create(path, empty data, world:anyone ALL, flags).
        pub fn create(&mut self, path: &[u8], flags: i32) -> Verdict {
            let mut body = Vec::new();
            put_bytes(&mut body, path);
            put_bytes(&mut body, b"");
            body.extend_from_slice(&1i32.to_be_bytes());
            body.extend_from_slice(&31i32.to_be_bytes());
            put_bytes(&mut body, b"world");
            put_bytes(&mut body, b"anyone");
            body.extend_from_slice(&flags.to_be_bytes());
            self.request(1, &body)
        }

        pub fn close(mut self) {
            let _ = self.request(-11, &[]);
        }
    }
}

// ---------------------------------------------------------------- raw C client

/// A handle of the raw C client, to see what it (and then the server) does with a path.
mod raw {
    use super::*;

    struct Connection {
        state: Mutex<c_int>,
        changed: Condvar,
    }

    unsafe extern "C" fn global_watcher(
        _zh: *mut sys::zhandle_t,
        event_type: c_int,
        state: c_int,
        _path: *const c_char,
        context: *mut c_void,
    ) {
        // SAFETY: the context is the boxed Connection, which outlives the handle.
        let connection = unsafe { &*(context as *const Connection) };
        // SAFETY: reading an extern const int.
        if event_type == unsafe { sys::ZOO_SESSION_EVENT } {
            *connection.state.lock().unwrap() = state;
            connection.changed.notify_all();
        }
    }

    /// One completion's result, filled on the C completion thread.
    #[derive(Default)]
    struct Slot {
        result: Mutex<Option<(c_int, Option<String>)>>,
        done: Condvar,
    }

    impl Slot {
        fn fill(&self, rc: c_int, value: Option<String>) {
            *self.result.lock().unwrap() = Some((rc, value));
            self.done.notify_all();
        }
    }

    unsafe extern "C" fn string_done(rc: c_int, value: *const c_char, data: *const c_void) {
        // SAFETY: `data` is an `Arc<Slot>` leaked by `submit` for this completion.
        let slot = unsafe { Arc::from_raw(data as *const Slot) };
        let value = (!value.is_null())
            // SAFETY: a NUL-terminated string valid during the call.
            .then(|| {
                unsafe { CStr::from_ptr(value) }
                    .to_string_lossy()
                    .into_owned()
            });
        slot.fill(rc, value);
    }

    unsafe extern "C" fn stat_done(rc: c_int, _stat: *const sys::Stat, data: *const c_void) {
        // SAFETY: as in `string_done`.
        let slot = unsafe { Arc::from_raw(data as *const Slot) };
        slot.fill(rc, None);
    }

    /// What the C client did with a request.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Verdict {
        /// The C call refused it before sending (its return code).
        ClientRejected(c_int),
        /// It was sent; the completion's code (and the created path).
        Server(c_int, Option<String>),
        /// The input cannot be a C string (it contains NUL).
        NotACString,
    }

    impl Verdict {
        pub fn describe(&self) -> String {
            match self {
                Verdict::ClientRejected(rc) => format!("C client: {}", rc_name(*rc)),
                Verdict::Server(rc, _) => format!("server: {}", rc_name(*rc)),
                Verdict::NotACString => "n/a (NUL: not a C string)".into(),
            }
        }
    }

    pub struct Handle {
        zh: *mut sys::zhandle_t,
        connection: Box<Connection>,
    }

    impl Handle {
        pub fn connect(hosts: &str) -> Handle {
            let hosts = CString::new(hosts).unwrap();
            let connection = Box::new(Connection {
                state: Mutex::new(0),
                changed: Condvar::new(),
            });
            // SAFETY: hosts NUL-terminated; the watcher context (the boxed Connection)
            // outlives the handle, closed in Drop before the box is freed.
            let zh = unsafe {
                sys::zookeeper_init(
                    hosts.as_ptr(),
                    Some(global_watcher),
                    15_000,
                    ptr::null(),
                    &*connection as *const Connection as *mut c_void,
                    0,
                )
            };
            assert!(!zh.is_null(), "zookeeper_init returned NULL");
            let handle = Handle { zh, connection };
            handle.wait_connected();
            handle
        }

        /// Waits (bounded) for ZOO_CONNECTED_STATE, e.g. after the server dropped the
        /// connection over an oversized request.
        pub fn wait_connected(&self) {
            // SAFETY: reading an extern const int.
            let want = unsafe { sys::ZOO_CONNECTED_STATE };
            let state = self.connection.state.lock().unwrap();
            let (state, _) = self
                .connection
                .changed
                .wait_timeout_while(state, WAIT, |s| *s != want)
                .unwrap();
            assert_eq!(*state, want, "raw C handle not connected within {WAIT:?}");
        }

        fn submit(&self, call: impl FnOnce(*const c_void) -> c_int) -> Verdict {
            self.wait_connected();
            let slot = Arc::new(Slot::default());
            let context = Arc::into_raw(Arc::clone(&slot)) as *const c_void;
            let rc = call(context);
            if rc != sys::ZOK {
                // SAFETY: the submission failed, so C never calls the completion.
                drop(unsafe { Arc::from_raw(context as *const Slot) });
                return Verdict::ClientRejected(rc);
            }
            let result = slot.result.lock().unwrap();
            let (mut result, _) = slot
                .done
                .wait_timeout_while(result, WAIT, |r| r.is_none())
                .unwrap();
            let (rc, value) = result.take().expect("no completion from the C client");
            Verdict::Server(rc, value)
        }

        /// `zoo_aset(path, data, version 123456)`.
        pub fn set(&self, path: &[u8], data: &[u8]) -> Verdict {
            let Ok(path) = CString::new(path) else {
                return Verdict::NotACString;
            };
            self.submit(|context| {
                // SAFETY: live handle; path and data valid for the call (serialized by
                // C before it returns); the completion owns `context`.
                unsafe {
                    sys::zoo_aset(
                        self.zh,
                        path.as_ptr(),
                        data.as_ptr() as *const c_char,
                        data.len() as c_int,
                        123_456,
                        Some(stat_done),
                        context,
                    )
                }
            })
        }

        /// `zoo_acreate(path, "", acl, mode)`; `acl` None: OPEN_ACL_UNSAFE.
        pub fn create(&self, path: &[u8], mode: c_int, acl: Option<&sys::ACL_vector>) -> Verdict {
            let Ok(path) = CString::new(path) else {
                return Verdict::NotACString;
            };
            self.submit(|context| {
                // SAFETY: live handle; path and ACL valid for the call; OPEN_ACL_UNSAFE
                // is the library's static vector, only read.
                unsafe {
                    sys::zoo_acreate(
                        self.zh,
                        path.as_ptr(),
                        b"".as_ptr() as *const c_char,
                        0,
                        acl.map_or(ptr::addr_of!(sys::ZOO_OPEN_ACL_UNSAFE), |a| a as *const _),
                        mode,
                        Some(string_done),
                        context,
                    )
                }
            })
        }
    }

    impl Drop for Handle {
        fn drop(&mut self) {
            // SAFETY: no other thread uses the handle; not used after this.
            unsafe { sys::zookeeper_close(self.zh) };
        }
    }
}

fn rc_name(rc: c_int) -> String {
    match Error::from_code(rc) {
        None => "ZOK".into(),
        Some(error) => format!("{error:?}"),
    }
}

// ---------------------------------------------------------------- paths vs the server

struct PathCase {
    label: String,
    bytes: Vec<u8>,
    sequential: bool,
}

fn path_cases(base: &str) -> Vec<PathCase> {
    let b = base;
    let mut cases = Vec::new();
    let mut add = |label: &str, bytes: Vec<u8>, sequential: bool| {
        cases.push(PathCase {
            label: label.to_string(),
            bytes,
            sequential,
        })
    };
    let s = |text: &str| text.replace('B', b).into_bytes();
    // Structure.
    for label in [
        "",
        "a",
        "a/b",
        "/",
        "B",
        "/zookeeper",
        "B/",
        "//",
        "B//x",
        "/.",
        "/..",
        "B/.",
        "B/..",
        "B/./x",
        "B/../x",
        "B/...",
        "B/.x",
        "B/x.",
        "B/..x",
        "B/ x",
    ] {
        add(label, s(label), false);
    }
    add("B/a\\0b (NUL)", s("B/a\0b"), false);
    // Unicode: each forbidden range at its edges, and its neighbours.
    for c in [
        '\u{1}',
        '\t',
        '\u{1f}',
        '\u{7f}',
        '\u{80}',
        '\u{85}',
        '\u{9f}',
        '\u{a0}',
        '\u{d7ff}',
        '\u{e000}',
        '\u{f8ff}',
        '\u{f900}',
        '\u{feff}',
        '\u{ffef}',
        '\u{fff0}',
        '\u{fffd}',
        '\u{ffff}',
        '\u{10000}',
        '\u{1f600}',
        '\u{10ffff}',
    ] {
        add(
            &format!("B/x{}", c.escape_unicode()),
            s(&format!("B/x{c}")),
            false,
        );
    }
    add("B/日本語ü", s("B/日本語ü"), false);
    // Not UTF-8 at all (the API takes &str, so only the server side applies).
    add(
        "B/x\\xff (not UTF-8)",
        [s("B/x"), vec![0xff]].concat(),
        false,
    );
    add(
        "B/x\\xed\\xa0\\x80 (UTF-8 surrogate)",
        [s("B/x"), vec![0xed, 0xa0, 0x80]].concat(),
        false,
    );
    add(
        "B/x\\xc0\\xaf (overlong)",
        [s("B/x"), vec![0xc0, 0xaf]].concat(),
        false,
    );
    // Length.
    add(
        "B/a×100000 (100 KB)",
        [s("B/"), vec![b'a'; 100_000]].concat(),
        false,
    );
    add(
        "B/a×1048577 (> 1 MiB)",
        [s("B/"), vec![b'a'; (1 << 20) + 1]].concat(),
        false,
    );
    // Sequential creates: the server validates path + sequence number.
    for label in ["/", "B/", "B/s-", "B/.", "B/..", "B//", "B/./", "B/x\u{1}"] {
        add(
            &format!("{} (sequential)", label.escape_debug()),
            s(label),
            true,
        );
    }
    cases
}

#[test]
fn path_validation_agrees_with_the_server() {
    let _watchdog = Watchdog::new(
        "path_validation_agrees_with_the_server",
        Duration::from_secs(120),
    );
    let hosts = hosts();
    let address = hosts
        .split(',')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let zk = connect();
    let base = unique("paths");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let c_client = raw::Handle::connect(&hosts);
    let mut wire = wire::Session::connect(&address).expect("raw wire session");
    // SAFETY: reading extern const ints.
    let (persistent, sequential) = unsafe { (sys::ZOO_PERSISTENT, sys::ZOO_PERSISTENT_SEQUENTIAL) };

    let mut created_at_root = Vec::new();
    let mut disagreements = Vec::new();
    println!(
        "{:<44} | {:<38} | {:<40} | ours",
        "input (B = test base)",
        "C client (zoo_aset / zoo_acreate)",
        "server (raw wire setData / create)"
    );
    for case in path_cases(&base) {
        let (server, c_verdict) = if case.sequential {
            (
                wire.create(&case.bytes, 2),
                c_client.create(&case.bytes, sequential, None),
            )
        } else {
            (wire.set_data(&case.bytes), c_client.set(&case.bytes, b""))
        };
        if server == wire::Verdict::Closed {
            wire = wire::Session::connect(&address).expect("raw wire session");
        }
        // Sequential creates at the root are not under the base: remember them.
        if let Some(path) = server.created() {
            created_at_root.push(path);
        }
        if let raw::Verdict::Server(0, Some(path)) = &c_verdict {
            created_at_root.push(path.clone());
        }
        // A plain create through C too, where the path is valid for us (it must then
        // be valid for the server: any error but BADARGUMENTS).
        let ours = match std::str::from_utf8(&case.bytes) {
            Ok(path) => Some(validate_path(path, case.sequential)),
            Err(_) => None,
        };
        if !case.sequential && matches!(ours, Some(Ok(()))) {
            let create = c_client.create(&case.bytes, persistent, None);
            if matches!(
                create,
                raw::Verdict::ClientRejected(sys::ZBADARGUMENTS)
                    | raw::Verdict::Server(sys::ZBADARGUMENTS, _)
            ) {
                disagreements.push(format!(
                    "{}: zoo_create {}, ours accept",
                    case.label,
                    create.describe()
                ));
            }
        }
        let ours_text = match &ours {
            None => "n/a (not &str)".to_string(),
            Some(Ok(())) => "accept".to_string(),
            Some(Err(Error::InvalidPath { reason, .. })) => format!("InvalidPath: {reason}"),
            Some(Err(other)) => panic!("{}: validate_path gave {other:?}", case.label),
        };
        println!(
            "{:<44} | {:<38} | {:<40} | {}",
            case.label,
            c_verdict.describe(),
            server.describe(),
            ours_text
        );
        // The C client must not accept what the server rejects, nor the reverse.
        if let raw::Verdict::ClientRejected(rc) = c_verdict {
            assert_eq!(rc, sys::ZBADARGUMENTS, "{}", case.label);
        }
        let server_accepts = if case.sequential {
            server.creates()
        } else {
            server.accepts_path()
        };
        if let Some(ours) = ours {
            if ours.is_ok() != server_accepts {
                disagreements.push(format!(
                    "{}: server {}, ours {}",
                    case.label,
                    server.describe(),
                    ours_text
                ));
            }
        }
    }
    wire.close();
    drop(c_client);
    for path in created_at_root {
        if !path.starts_with(&base) {
            let _ = zk.delete(&path, None);
        }
    }
    delete_tree(&zk, &base);
    zk.close().unwrap();
    assert!(
        disagreements.is_empty(),
        "validate_path disagrees with the server:\n{}",
        disagreements.join("\n")
    );
}

#[test]
fn long_paths_are_typed_errors() {
    let _watchdog = Watchdog::new("long_paths_are_typed_errors", Duration::from_secs(60));
    let zk = connect();
    let base = unique("long");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    // 100 KB name: valid for the server and for us; round trip.
    let long = format!("{base}/{}", "n".repeat(100_000));
    assert_eq!(
        zk.create(
            &long,
            b"x",
            zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open())
        )
        .unwrap(),
        long
    );
    assert_eq!(zk.get(&long).unwrap().0, b"x");
    assert_eq!(zk.get_children(&base).unwrap(), vec!["n".repeat(100_000)]);
    zk.delete(&long, None).unwrap();
    // Over 1 MiB: the server would drop the connection; we refuse it first.
    let huge = format!("{base}/{}", "n".repeat((1 << 20) + 1));
    let error = zk
        .create(
            &huge,
            b"",
            zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
        )
        .unwrap_err();
    assert!(matches!(error, Error::InvalidPath { .. }), "{error:?}");
    assert!(matches!(zk.exists(&huge), Err(Error::InvalidPath { .. })));
    assert!(matches!(
        zk.delete(&huge, None),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zk.multi(&[Op::check(&huge, -1)]),
        Err(Error::InvalidPath { .. })
    ));
    // The session never dropped.
    assert_eq!(zk.state(), SessionState::Connected);
    zk.delete(&base, None).unwrap();
    zk.close().unwrap();
}

// ---------------------------------------------------------------- data size

#[test]
fn data_at_and_over_the_limit() {
    let _watchdog = Watchdog::new("data_at_and_over_the_limit", Duration::from_secs(90));
    let zk = connect();
    let base = unique("data");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/n");

    // Exactly MAX_DATA_LEN: accepted, and read back intact.
    let at: Vec<u8> = (0..MAX_DATA_LEN).map(|i| (i % 251) as u8).collect();
    zk.create(
        &node,
        &at,
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    assert_eq!(zk.get(&node).unwrap().0, at);
    let stat = zk.set(&node, &at, Some(0)).unwrap();
    assert_eq!(stat.data_length as usize, MAX_DATA_LEN);

    // One byte over, and over 1 MiB: DataTooLarge before anything is sent.
    for len in [MAX_DATA_LEN + 1, (1 << 20) + 1, 4 << 20] {
        let over = vec![7u8; len];
        let too_large = Error::DataTooLarge {
            len,
            max: MAX_DATA_LEN,
        };
        assert_eq!(
            zk.create(
                &format!("{base}/o"),
                &over,
                zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open())
            ),
            Err(too_large.clone())
        );
        assert_eq!(zk.set(&node, &over, None), Err(too_large.clone()));
        assert_eq!(
            zk.set_async(&node, &over, None).wait_timeout(WAIT),
            Err(too_large.clone())
        );
        assert_eq!(
            zk.multi(&[Op::set_data(&node, &over, -1)]),
            Err(too_large.clone())
        );
    }
    // A multi whose parts are each small enough but not together: refused as a whole
    // request over the server's 0xfffff-byte limit, before anything is sent.
    let half = vec![1u8; MAX_DATA_LEN / 2 + 1024];
    let result = zk.multi(&[
        Op::set_data(&node, &half, -1),
        Op::create(&format!("{base}/m"), &half, CreateMode::Persistent),
    ]);
    assert!(
        matches!(result, Err(Error::DataTooLarge { len, max: 0xfffff }) if len > 2 * half.len()),
        "{result:?}"
    );
    assert_eq!(zk.get(&node).unwrap().1.version, 1, "nothing was applied");

    // The server side of the same limit, through the raw C client: 1 MiB + 1 bytes
    // make the server drop the connection (ConnectionLoss), which is what our check
    // prevents; MAX_DATA_LEN + 1 still fits (our limit keeps 1 KiB for path and ACL).
    let c_client = raw::Handle::connect(&hosts());
    assert_eq!(
        c_client.set(node.as_bytes(), &vec![7u8; (1 << 20) + 1]),
        raw::Verdict::Server(sys::ZCONNECTIONLOSS, None)
    );
    assert_eq!(
        c_client.set(node.as_bytes(), &vec![7u8; MAX_DATA_LEN + 1]),
        raw::Verdict::Server(sys::ZBADVERSION, None),
        "the server accepts the request (and checks the version)"
    );
    drop(c_client);

    assert_eq!(zk.state(), SessionState::Connected);
    delete_tree(&zk, &base);
    zk.close().unwrap();
}

/// Data under the limit plus a long path can still exceed the server's request limit.
/// What the client does then is recorded here .
#[test]
fn data_at_the_limit_with_a_long_path() {
    let _watchdog = Watchdog::new(
        "data_at_the_limit_with_a_long_path",
        Duration::from_secs(60),
    );
    let zk = connect();
    let base = unique("datapath");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/{}", "p".repeat(2_000));
    let result = zk.create(
        &node,
        &vec![0u8; MAX_DATA_LEN],
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    );
    // Path + data together exceed the request limit: a typed error, not a dropped
    // connection.
    assert!(
        matches!(result, Err(Error::DataTooLarge { max: 0xfffff, .. })),
        "{result:?}"
    );
    zk.wait_connected(WAIT).unwrap();
    delete_tree(&zk, &base);
    zk.close().unwrap();
}

// ---------------------------------------------------------------- versions

#[test]
fn negative_and_huge_versions() {
    let _watchdog = Watchdog::new("negative_and_huge_versions", Duration::from_secs(60));
    let zk = connect();
    let node = unique("versions");
    zk.create(
        &node,
        b"v0",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    for version in [-5, -2, i32::MIN, i32::MAX, 1] {
        assert_eq!(
            zk.set(&node, b"x", Some(version)),
            Err(Error::BadVersion),
            "set {version}"
        );
        assert_eq!(
            zk.delete(&node, Some(version)),
            Err(Error::BadVersion),
            "delete {version}"
        );
        assert_eq!(
            zk.set_acl(&node, open(), Some(version)),
            Err(Error::BadVersion),
            "set_acl {version}"
        );
        for op in [
            Op::check(&node, version),
            Op::set_data(&node, b"x", version),
            Op::delete(&node, version),
        ] {
            assert_eq!(
                zk.multi(std::slice::from_ref(&op)),
                Err(Error::MultiFailed {
                    index: 0,
                    error: Box::new(Error::BadVersion)
                }),
                "{op:?}"
            );
        }
    }
    let (data, stat) = zk.get(&node).unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"v0"[..], 0));
    // -1 means "any version".
    zk.set(&node, b"v1", Some(-1)).unwrap();
    zk.delete(&node, Some(-1)).unwrap();
    zk.close().unwrap();
}

// ---------------------------------------------------------------- ACLs and auth

#[test]
fn malformed_acls() {
    let _watchdog = Watchdog::new("malformed_acls", Duration::from_secs(60));
    let zk = connect();
    let base = unique("acl");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/n");
    let all = Perms::ALL;

    // Empty ACL list: ours refuses it (InvalidAcl), and so does the server.
    assert_eq!(
        zk.create(
            &node,
            b"",
            zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(&[])
        ),
        Err(Error::InvalidAcl)
    );
    assert_eq!(
        zk.multi(&[Op::Create {
            path: node.clone(),
            data: vec![],
            acl: Vec::new().into(),
            mode: CreateMode::Persistent
        }]),
        Err(Error::InvalidAcl)
    );
    let c_client = raw::Handle::connect(&hosts());
    let empty = sys::ACL_vector {
        count: 0,
        data: ptr::null_mut(),
    };
    // SAFETY: reading an extern const int.
    let persistent = unsafe { sys::ZOO_PERSISTENT };
    assert_eq!(
        c_client.create(node.as_bytes(), persistent, Some(&empty)),
        raw::Verdict::Server(sys::ZINVALIDACL, None),
        "the server's verdict on an empty ACL"
    );
    drop(c_client);

    // Rejected by the server: typed InvalidAcl, nothing created.
    for (scheme, id) in [
        ("nosuchscheme", "x"),
        ("", ""),
        ("digest", "no-colon"),
        ("digest", ""),
        ("ip", "10.0.0.0/99"),
        ("ip", "10.0.0.0/-1"),
        ("ip", "not-an-ip"),
        ("ip", ""),
        ("world", "someone"),
        ("auth", ""), // no credentials were added to this session
        ("x509", "CN=x"),
        ("sasl", "someone"),
    ] {
        let acl = [Acl::new(all, scheme, id)];
        assert_eq!(
            zk.create(
                &node,
                b"",
                zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(&acl)
            ),
            Err(Error::InvalidAcl),
            "create with {scheme}:{id}"
        );
        assert_eq!(
            zk.set_acl(&base, &acl, None),
            Err(Error::InvalidAcl),
            "set_acl with {scheme}:{id}"
        );
        // One bad entry among good ones spoils the list.
        let mixed = [Acl::new(all, "world", "anyone"), Acl::new(all, scheme, id)];
        assert_eq!(
            zk.create(
                &node,
                b"",
                zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(&mixed)
            ),
            Err(Error::InvalidAcl)
        );
    }
    assert_eq!(zk.exists(&node).unwrap(), None);
    assert_eq!(zk.get_acl(&base).unwrap().0, open(), "ACL unchanged");

    // NUL in scheme or id: InteriorNul before C.
    for (scheme, id, what) in [
        ("wor\0ld", "anyone", "ACL scheme"),
        ("world", "any\0one", "ACL id"),
    ] {
        let acl = [Acl::new(all, scheme, id)];
        assert_eq!(
            zk.create(
                &node,
                b"",
                zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(&acl)
            ),
            Err(Error::InteriorNul(what))
        );
        assert_eq!(zk.set_acl(&base, &acl, None), Err(Error::InteriorNul(what)));
    }
    assert_eq!(zk.set_acl(&base, &[], None), Err(Error::InvalidAcl));

    // Perms the server does not check: 0, negative, unknown bits. The node is created;
    // with no READ bit, reading it is NoAuth (a typed error, not a hang).
    for (i, perms) in [0, -1, 1 << 20, i32::MIN].into_iter().enumerate() {
        let path = format!("{base}/perms{i}");
        let acl = [Acl::new(Perms(perms), "world", "anyone")];
        let created = zk.create(
            &path,
            b"",
            zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(&acl),
        );
        println!("create with perms {perms:#x} -> {created:?}");
        match created {
            Ok(_) => {
                // get_acl needs READ or ADMIN (since 3.6), get needs READ.
                let perms = Perms(perms);
                match zk.get_acl(&path) {
                    Ok((stored, _)) => assert_eq!(stored, acl, "perms stored as given"),
                    Err(error) => {
                        assert_eq!(error, Error::NoAuth);
                        assert!(!perms.contains(Perms::READ) && !perms.contains(Perms::ADMIN));
                    }
                }
                if !perms.contains(Perms::READ) {
                    assert_eq!(zk.get(&path).unwrap_err(), Error::NoAuth);
                }
            }
            Err(error) => assert_eq!(error, Error::InvalidAcl),
        }
    }
    delete_tree(&zk, &base);
    zk.close().unwrap();
}

#[test]
fn malformed_auth_schemes() {
    let _watchdog = Watchdog::new("malformed_auth_schemes", Duration::from_secs(60));
    let zk = connect();
    assert_eq!(
        zk.add_auth("", b"user:pass"),
        Err(Error::InvalidArgument("empty auth scheme"))
    );
    assert_eq!(
        zk.add_auth("dig\0est", b"user:pass"),
        Err(Error::InteriorNul("auth scheme"))
    );
    assert_eq!(
        zk.add_auth("\0", b""),
        Err(Error::InteriorNul("auth scheme"))
    );
    // Credentials the digest provider takes as they are (binary, empty, no colon).
    for credentials in [&b""[..], b"no-colon", b"a:b\0c", b"\xff\xfe:\x00", b":"] {
        assert_eq!(
            zk.add_auth_async("digest", credentials).wait_timeout(WAIT),
            Ok(()),
            "digest {credentials:?}"
        );
    }
    assert_eq!(zk.state(), SessionState::Connected);
    zk.close().unwrap();

    // A scheme the server has no provider for: AuthFailed, and the session is over.
    for scheme in ["nosuchscheme", "x\u{1}y", "日本"] {
        let zk = connect();
        let events = zk.session_events();
        let (_, watch) = zk.exists_watch("/hostile-auth-watch").unwrap();
        assert_eq!(
            zk.add_auth_async(scheme, b"whatever").wait_timeout(WAIT),
            Err(Error::AuthFailed),
            "{scheme:?}"
        );
        let deadline = Instant::now() + WAIT;
        while zk.state() != SessionState::AuthFailed {
            let left = deadline.saturating_duration_since(Instant::now());
            events.recv_timeout(left).expect("AuthFailed session event");
        }
        assert!(zk.is_unrecoverable());
        assert_eq!(zk.get("/"), Err(Error::AuthFailed));
        assert_eq!(zk.add_auth("digest", b"a:b"), Err(Error::AuthFailed));
        let event = watch.wait_timeout(WAIT).expect("watch ends");
        assert_eq!(
            (event.event_type, event.state),
            (EventType::Session, SessionState::AuthFailed)
        );
        zk.close().unwrap();
        assert_eq!(zk.live_contexts(), 0);
    }
}

// ---------------------------------------------------------------- dead handles

/// Every call a handle offers, with valid arguments, reduced to its error (or `None`).
fn every_call(zk: &ZooKeeper, path: &str) -> Vec<(&'static str, Option<Error>)> {
    let acl = open();
    let mode = CreateMode::Persistent;
    vec![
        (
            "create",
            zk.create(path, b"", zookeeper::CreateOptions::new(mode).with_acl(acl))
                .err(),
        ),
        (
            "create2",
            zk.create2(path, b"", zookeeper::CreateOptions::new(mode).with_acl(acl))
                .err(),
        ),
        (
            "create_async",
            zk.create_async(path, b"", zookeeper::CreateOptions::new(mode).with_acl(acl))
                .wait_timeout(WAIT)
                .err(),
        ),
        ("delete", zk.delete(path, None).err()),
        ("exists", zk.exists(path).err()),
        ("exists_watch", zk.exists_watch(path).err()),
        ("get", zk.get(path).err()),
        ("get_watch", zk.get_watch(path).err()),
        ("set", zk.set(path, b"", None).err()),
        ("get_children", zk.get_children(path).err()),
        ("get_children2", zk.get_children2(path).err()),
        ("get_children_watch", zk.get_children_watch(path).err()),
        ("get_children2_watch", zk.get_children2_watch(path).err()),
        ("get_acl", zk.get_acl(path).err()),
        ("set_acl", zk.set_acl(path, acl, None).err()),
        ("add_auth", zk.add_auth("digest", b"a:b").err()),
        ("sync", zk.sync(path).err()),
        ("get_config", zk.get_config().err()),
        ("get_config_watch", zk.get_config_watch().err()),
        (
            "reconfig",
            zk.reconfig(zookeeper::Reconfig::bulk("server.1=x"), None)
                .err(),
        ),
        ("multi", zk.multi(&[Op::check(path, -1)]).err()),
        (
            "remove_watches",
            zk.remove_watches(path, WatcherType::Any, WatchRemoval::Server)
                .err(),
        ),
        ("client_id", zk.client_id().err()),
        ("session_timeout", zk.session_timeout().err()),
        ("current_server", zk.current_server().err()),
        ("connected_host", zk.connected_host().err()),
        // SAFETY: only called on closed or ended handles (see the callers), where neither
        // call reaches C: there is no running IO thread to race.
        (
            "set_servers",
            unsafe { zk.set_servers("127.0.0.1:1") }.err(),
        ),
        // SAFETY: as above.
        ("cycle_next_server", unsafe { zk.cycle_next_server() }.err()),
    ]
}

#[test]
fn calls_on_a_closed_handle() {
    let _watchdog = Watchdog::new("calls_on_a_closed_handle", Duration::from_secs(60));
    let zk = connect();
    let clone = zk.clone();
    let path = unique("closed");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    let pending = zk.sync_async("/");
    zk.close().unwrap();
    zk.close().unwrap(); // idempotent
    assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
    // Issued before close: completed (ZCLOSING or the reply) or failed Closed; never hangs.
    let pending = pending.wait_timeout(WAIT);
    assert!(
        matches!(pending, Ok(_) | Err(Error::Closed) | Err(Error::Closing)),
        "{pending:?}"
    );
    for handle in [&zk, &clone] {
        for (call, error) in every_call(handle, &path) {
            assert_eq!(error, Some(Error::Closed), "{call} on a closed handle");
        }
        assert_eq!(handle.state(), SessionState::Closed);
        assert!(handle.is_unrecoverable());
        assert_eq!(handle.wait_connected(WAIT), Err(Error::Closed));
        assert_eq!(handle.live_contexts(), 0);
    }
    // Invalid input on a closed handle: the validation error still comes first.
    assert!(matches!(zk.get("bad"), Err(Error::InvalidPath { .. })));
    drop(clone);
    drop(zk);
}

#[test]
fn calls_on_an_expired_session() {
    let _watchdog = Watchdog::new("calls_on_an_expired_session", Duration::from_secs(90));
    let hosts = hosts();
    let zk = connect();
    let events = zk.session_events();
    let path = unique("expired");
    zk.create(
        &path,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Ephemeral).with_acl(open()),
    )
    .unwrap();
    let (_, _, watch) = zk.get_watch(&path).unwrap();
    let id = zk.client_id().unwrap();

    // Expire it: take the session over from a second handle and close it there; the
    // first handle's next reconnect is told the session expired. Retried, in case the
    // first handle wins the session back before the close is sent.
    let mut expired = false;
    for attempt in 1..=5 {
        let thief = ZooKeeper::builder(&hosts)
            .session(id)
            .session_timeout(Duration::from_secs(10))
            .connect();
        match thief {
            Ok(thief) => thief.close().unwrap(),
            Err(Error::SessionExpired) => {}
            Err(error) => panic!("resuming the session: {error:?}"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !zk.state().is_terminal() {
            let left = deadline.saturating_duration_since(Instant::now());
            if events.recv_timeout(left).is_err() {
                break;
            }
        }
        if zk.state() == SessionState::Expired {
            println!("session expired after {attempt} takeover(s)");
            expired = true;
            break;
        }
    }
    assert!(expired, "the session did not expire: {:?}", zk.state());

    for (call, error) in every_call(&zk, &path) {
        assert_eq!(
            error,
            Some(Error::SessionExpired),
            "{call} on an expired session"
        );
    }
    assert!(zk.is_unrecoverable());
    assert_eq!(zk.wait_connected(WAIT), Err(Error::SessionExpired));
    // The watch ends: with the expiry, or earlier with the node's deletion (seen by
    // the first handle if it briefly won the session back after the close).
    let event = watch.wait_timeout(WAIT).expect("watch ends");
    assert!(
        matches!(
            (event.event_type, event.state),
            (EventType::Session, SessionState::Expired)
                | (EventType::NodeDeleted, SessionState::Connected)
        ),
        "{event:?}"
    );
    // The ephemeral node went with the session.
    let other = connect();
    assert_eq!(other.exists(&path).unwrap(), None);
    other.close().unwrap();
    let closed = zk.close();
    assert!(
        matches!(closed, Ok(()) | Err(Error::InvalidState)),
        "{closed:?}"
    );
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(zk.get(&path), Err(Error::Closed));
}

// ---------------------------------------------------------------- huge child list

#[test]
fn huge_child_list() {
    let _watchdog = Watchdog::new("huge_child_list", Duration::from_secs(120));
    const CHILDREN: usize = 20_000;
    let zk = connect();
    let base = unique("children");
    zk.create(
        &base,
        b"",
        zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let started = Instant::now();
    let names: Vec<String> = (0..CHILDREN).map(|i| format!("child-{i:05}")).collect();
    for chunk in names.chunks(2_000) {
        let futures: Vec<_> = chunk
            .iter()
            .map(|name| {
                zk.create_async(
                    &format!("{base}/{name}"),
                    b"",
                    zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
                )
            })
            .collect();
        for future in futures {
            future.wait_timeout(WAIT).unwrap();
        }
    }
    println!("created {CHILDREN} children in {:?}", started.elapsed());

    let mut children = zk.get_children(&base).unwrap();
    children.sort();
    assert_eq!(children, names);
    let (children, stat) = zk.get_children2(&base).unwrap();
    assert_eq!(
        (children.len(), stat.num_children as usize),
        (CHILDREN, CHILDREN)
    );
    let (children, watch) = zk.get_children_watch(&base).unwrap();
    assert_eq!(children.len(), CHILDREN);
    assert_eq!(zk.delete(&base, None), Err(Error::NotEmpty));

    // One multi deleting every child is a request over the server's 1 MiB limit (the
    // server would drop the connection): refused before sending.
    let ops: Vec<Op> = names
        .iter()
        .map(|name| Op::delete(&format!("{base}/{name}"), -1))
        .collect();
    let result = zk.multi_async(&ops).wait_timeout(WAIT);
    assert!(
        matches!(result, Err(Error::DataTooLarge { max: 0xfffff, .. })),
        "{:?}",
        result.map(|r| r.len())
    );
    zk.wait_connected(WAIT).unwrap();

    let started = Instant::now();
    let remaining = zk.get_children(&base).unwrap();
    for chunk in remaining.chunks(2_000) {
        let futures: Vec<_> = chunk
            .iter()
            .map(|name| zk.delete_async(&format!("{base}/{name}"), None))
            .collect();
        for future in futures {
            future.wait_timeout(WAIT).unwrap();
        }
    }
    println!(
        "deleted {} children in {:?}",
        remaining.len(),
        started.elapsed()
    );
    let event = watch.wait_timeout(WAIT).expect("child watch fires");
    assert_eq!(event.event_type, EventType::NodeChildrenChanged);
    zk.delete(&base, None).unwrap();
    zk.close().unwrap();
    assert_eq!(zk.live_contexts(), 0);
}
