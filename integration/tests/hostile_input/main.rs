//! Hostile input: garbage paths, oversized data, absurd versions, malformed
//! ACLs and auth schemes, calls on closed and expired handles, a huge child list. Each
//! must give a typed error (the variant is asserted); nothing may panic, abort or hang
//! (every wait is bounded, and a watchdog ends the process if a test overruns).
//!
//! Path validation is checked against the server itself on the same inputs: each path
//! goes to a live 3.8.0 server twice, through the raw C client (`zookeeper_mt_sys`, which
//! has its own client-side check) and over a raw socket speaking the wire protocol
//! (which reaches the server even with inputs the C client refuses, NUL and non-UTF-8
//! bytes included). `zookeeper_mt::validate_path` must accept exactly what the server
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
use zookeeper_mt::{
    validate_path, Acl, CreateMode, Error, EventType, Op, Perms, SessionState, WatchRemoval,
    WatcherType, ZooKeeper, MAX_DATA_LEN,
};
use zookeeper_mt_sys as sys;

/// Bound for any single wait in these tests.
const WAIT: Duration = Duration::from_secs(20);

/// Malformed ACLs and auth schemes.
mod acls;
/// Calls on closed handles and expired sessions.
mod dead_handles;
/// Paths against the server itself.
mod paths;
/// The raw C client, for its own verdict on a path.
mod raw;
/// Just enough of the wire protocol to send any path bytes.
mod wire;

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

fn rc_name(rc: c_int) -> String {
    match Error::from_code(rc) {
        None => "ZOK".into(),
        Some(error) => format!("{error:?}"),
    }
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
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/n");

    // Exactly MAX_DATA_LEN: accepted, and read back intact.
    let at: Vec<u8> = (0..MAX_DATA_LEN).map(|i| (i % 251) as u8).collect();
    zk.create(
        &node,
        &at,
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
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
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open())
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
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/{}", "p".repeat(2_000));
    let result = zk.create(
        &node,
        &vec![0u8; MAX_DATA_LEN],
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
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
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
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
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
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
                    zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
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
