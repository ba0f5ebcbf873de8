//! Servers started from crafted data dirs: what the 3.8.0 server does at the ends of its
//! 32-bit znode counters. Each test prints what it observed; the assertions are what the
//! server does every time (sequential requests, or one multi, so no timing is involved).

use std::time::{Duration, Instant};

use zk_harness::{Crafted, Server};
use zookeeper_mt::{CreateMode, Error, Op, OpResult, ZooKeeper};

const MAX: i32 = i32::MAX;
const MIN: i32 = i32::MIN;

fn start(crafted: &Crafted) -> Server {
    let t = Instant::now();
    let server = Server::start_crafted(crafted).expect("crafted server starts");
    eprintln!("crafted server serving after {:?}", t.elapsed());
    server
}

fn connect(server: &Server) -> ZooKeeper {
    ZooKeeper::connect(&server.connect_string(), Duration::from_secs(10)).expect("connects")
}

/// The sequence suffix of `path`, created with `prefix` (a negative suffix is 11
/// characters: `x--2147483648` for prefix `x-`).
fn suffix(path: &str, prefix: &str) -> i32 {
    path.strip_prefix(prefix)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{path:?} is not {prefix:?} + a number"))
}

/// Creates a persistent sequential node and returns its suffix.
fn create_seq(zk: &ZooKeeper, prefix: &str) -> zookeeper_mt::Result<i32> {
    zk.create(prefix, b"", CreateMode::PersistentSequential)
        .map(|path| suffix(&path, prefix))
}
#[test]
fn sequential_suffixes_stick_at_i32_max() {
    let server = start(
        &Crafted::new()
            .dir("/edge/seq", MAX - 3)
            .dir("/edge/fixed", MAX - 1)
            .dir("/edge/multi", MAX)
            .dir("/edge/pipe", MAX - 1),
    );
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.starts_with("CraftSnapshot: "), "{log}");
    assert!(
        log.contains("/edge/seq version=0 cversion=2147483644"),
        "{log}"
    );
    let zk = connect(&server);

    // The client sees 2 * stored - numChildren, not the stored counter (wrapping).
    let stat = zk
        .exists("/edge/seq")
        .unwrap()
        .expect("crafted node exists");
    assert_eq!(stat.cversion, (MAX - 3).wrapping_mul(2), "{stat:?}");
    assert_eq!(stat.num_children, 0);

    // Distinct prefixes (like guid-prefixed lock nodes): below the end the suffix counts
    // up; from i32::MAX on it stays there.
    let got: Vec<i32> = (0..6)
        .map(|i| create_seq(&zk, &format!("/edge/seq/g{i}-n-")).unwrap())
        .collect();
    eprintln!("sequential creates from MAX-3, one at a time: {got:?}");
    assert_eq!(got, [MAX - 3, MAX - 2, MAX - 1, MAX, MAX, MAX]);
    let stat = zk.exists("/edge/seq").unwrap().unwrap();
    assert_eq!(
        stat.cversion,
        MAX.wrapping_mul(2).wrapping_sub(6),
        "stored counter stuck at MAX with 6 children: {stat:?}"
    );

    // One fixed prefix: the name repeats, so creates fail from the second MAX on.
    let fixed: Vec<_> = (0..4).map(|_| create_seq(&zk, "/edge/fixed/x-")).collect();
    eprintln!("fixed prefix from MAX-1: {fixed:?}");
    assert_eq!(
        fixed,
        [
            Ok(MAX - 1),
            Ok(MAX),
            Err(Error::NodeExists),
            Err(Error::NodeExists)
        ]
    );

    // Creates prepared while an earlier create on the same parent is still pending
    // continue from the pending (wrapped) counter: one multi makes that deterministic.
    let ops: Vec<Op> = (0..3)
        .map(|_| Op::create("/edge/multi/m-", b"", CreateMode::PersistentSequential))
        .collect();
    let results = zk.multi(&ops).expect("multi of sequential creates");
    let names: Vec<String> = results
        .into_iter()
        .map(|r| match r {
            OpResult::Created(path) => path,
            other => panic!("unexpected multi result {other:?}"),
        })
        .collect();
    eprintln!("one multi of 3 creates at MAX: {names:?}");
    assert_eq!(
        names,
        [
            "/edge/multi/m-2147483647",
            "/edge/multi/m--2147483648",
            "/edge/multi/m--2147483647"
        ]
    );
    // Negative names sort before every positive one, as text and as numbers.
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted[2], names[0]);

    // Pipelined async creates: whether each one got a pending record is timing, so only
    // the possible outcomes are asserted; the observed mix is printed.
    let prefixes: Vec<String> = (0..20).map(|i| format!("/edge/pipe/p{i}-")).collect();
    let futures: Vec<_> = prefixes
        .iter()
        .map(|prefix| zk.create_async(prefix, b"", CreateMode::PersistentSequential))
        .collect();
    let piped: Vec<i32> = futures
        .into_iter()
        .zip(&prefixes)
        .map(|(f, prefix)| suffix(&f.wait().expect("pipelined create"), prefix))
        .collect();
    eprintln!("20 pipelined creates from MAX-1: {piped:?}");
    assert_eq!(piped[..2], [MAX - 1, MAX]);
    for s in &piped[2..] {
        assert!(
            *s == MAX || (MIN..MIN + 20).contains(s),
            "suffix {s} after the end: {piped:?}"
        );
    }
    eprintln!(
        "  {} of 18 pipelined creates after the end got a negative suffix",
        piped[2..].iter().filter(|s| **s < 0).count()
    );

    // The crafted state is ordinary data: it survives a restart, still stuck.
    drop(zk);
    server.restart().expect("restart");
    let zk = connect(&server);
    assert_eq!(zk.get_children("/edge/seq").unwrap().len(), 6);
    assert_eq!(create_seq(&zk, "/edge/seq/after-restart-"), Ok(MAX));
}

#[test]
fn data_and_acl_versions_cross_minus_one_and_wrap() {
    let server = start(
        &Crafted::new()
            .node("/edge/ids", b"41", -5)
            .node("/edge/top", b"t", MAX - 1)
            .acl_version("/edge/acl", -2),
    );
    let a = connect(&server);
    let b = connect(&server);

    let (data, stat) = a.get("/edge/ids").unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"41"[..], -5));

    // Versioned sets walk up to -1 like any other version.
    for expected in [-5, -4, -3, -2] {
        let stat = a.set("/edge/ids", b"42", Some(expected)).unwrap();
        assert_eq!(stat.version, expected + 1);
    }

    // At version -1 a compare-and-set is no CAS (ZOOKEEPER-4743): two clients read
    // version -1 and both "conditional" writes succeed; a lost update.
    let (_, seen_a) = a.get("/edge/ids").unwrap();
    let (_, seen_b) = b.get("/edge/ids").unwrap();
    assert_eq!((seen_a.version, seen_b.version), (-1, -1));
    let first = a.set("/edge/ids", b"from a", Some(seen_a.version));
    let second = b.set("/edge/ids", b"from b", Some(seen_b.version));
    eprintln!(
        "CAS at version -1: a -> {:?}, b -> {:?}",
        first.as_ref().map(|s| s.version),
        second.as_ref().map(|s| s.version)
    );
    assert_eq!(first.unwrap().version, 0);
    assert_eq!(second.unwrap().version, 1, "b's stale CAS succeeded too");
    assert_eq!(a.get("/edge/ids").unwrap().0, b"from b");
    // A real version is checked again.
    assert_eq!(a.set("/edge/ids", b"x", Some(0)), Err(Error::BadVersion));

    // The data version wraps from i32::MAX to i32::MIN.
    let versions: Vec<_> = [MAX - 1, MAX, MAX, MIN]
        .iter()
        .map(|v| a.set("/edge/top", b"t", Some(*v)).map(|s| s.version))
        .collect();
    eprintln!("sets at MAX-1, MAX, MAX, MIN: {versions:?}");
    assert_eq!(
        versions,
        [Ok(MAX), Ok(MIN), Err(Error::BadVersion), Ok(MIN + 1)]
    );

    // The ACL version follows the same rules.
    let (acl, stat) = a.get_acl("/edge/acl").unwrap();
    assert_eq!(stat.aversion, -2);
    a.set_acl("/edge/acl", &acl, Some(-2)).unwrap();
    assert_eq!(a.get_acl("/edge/acl").unwrap().1.aversion, -1);
    a.set_acl("/edge/acl", &acl, Some(-1)).unwrap();
    b.set_acl("/edge/acl", &acl, Some(-1)).unwrap();
    assert_eq!(a.get_acl("/edge/acl").unwrap().1.aversion, 1);
}

#[test]
fn bad_crafted_nodes_are_typed_errors() {
    // Refused before any process starts, so no server and no JVM is left behind.
    for crafted in [
        Crafted::new().dir("relative", 1),
        Crafted::new().dir("/zookeeper/quota/x", 1),
        Crafted::new().node("/big", &vec![0u8; 1 << 20], 0),
    ] {
        let err = Server::start_crafted(&crafted).expect_err("refused");
        assert!(
            matches!(err, zk_harness::HarnessError::InvalidArgument(_)),
            "{err}"
        );
    }
}

#[test]
fn write_to_puts_a_snapshot_into_any_data_dir() {
    // For servers the harness does not start itself (e.g. ensemble members prepared by
    // hand): the snapshot lands in `version-2/`, named after its last zxid.
    let dir = std::env::temp_dir().join(format!("zk-harness-edge-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = Crafted::new()
        .dir("/a/b", 5)
        .node("/a", b"x", 3)
        .write_to(&dir);
    let names: Vec<String> = std::fs::read_dir(dir.join("version-2"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    result.expect("snapshot written");
    // Zxids 1 and 2 create /a and /a/b, 3 and 4 set their fields.
    assert_eq!(names, ["snapshot.4"]);
}
