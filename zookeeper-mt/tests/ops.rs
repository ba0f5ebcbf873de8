//! Every operation in its blocking form against a real server, and every error path the
//! server or the binding reports for them.

mod common;

use common::{connect, create, create_mode, unique};
use std::time::Duration;
use zookeeper_mt::{Acl, CreateMode, Error, Perms, WatchRemoval, ZooKeeper, MAX_DATA_LEN};

fn sequence_suffix<'a>(created: &'a str, prefix: &str) -> &'a str {
    let suffix = created
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{created} does not start with {prefix}"));
    assert_eq!(suffix.len(), 10, "sequence suffix of {created}");
    assert!(suffix.bytes().all(|b| b.is_ascii_digit()), "{created}");
    suffix
}

#[test]
fn create_persistent_and_get() {
    let zk = connect();
    let path = unique("persistent");
    assert_eq!(
        zk.create(&path, b"hello", CreateMode::Persistent).unwrap(),
        path
    );
    let (data, stat) = zk.get(&path).unwrap();
    assert_eq!(data, b"hello");
    assert_eq!(stat.version, 0);
    assert_eq!(stat.data_length, 5);
    assert_eq!(stat.ephemeral_owner, 0);
    assert_eq!(stat.num_children, 0);
    assert_eq!(stat.czxid, stat.mzxid);
    assert!(stat.ctime > 0);

    // Binary data (not UTF-8, with NULs) round-trips unchanged; empty data is empty.
    let binary: Vec<u8> = (0..=255u8).rev().chain([0, 0, 0xff]).collect();
    let child = format!("{path}/binary");
    create(&zk, &child, &binary);
    assert_eq!(zk.get(&child).unwrap().0, binary);
    let empty = format!("{path}/empty");
    create(&zk, &empty, b"");
    let (data, stat) = zk.get(&empty).unwrap();
    assert!(data.is_empty());
    assert_eq!(stat.data_length, 0);
}

#[test]
fn create_ephemeral_is_owned_by_the_session() {
    let zk = connect();
    let path = unique("ephemeral");
    create_mode(&zk, &path, b"e", CreateMode::Ephemeral);
    let stat = zk.exists(&path).unwrap().expect("ephemeral exists");
    assert_eq!(stat.ephemeral_owner, zk.client_id().unwrap().session_id);

    // Another session sees it, and sees it go when the owner closes.
    let other = connect();
    assert!(other.exists(&path).unwrap().is_some());
    zk.close().unwrap();
    assert_eq!(other.exists(&path).unwrap(), None);
}

#[test]
fn create_sequential_modes() {
    let zk = connect();
    let parent = unique("sequential");
    create(&zk, &parent, b"");
    let prefix = format!("{parent}/item-");

    let first = create_mode(&zk, &prefix, b"", CreateMode::PersistentSequential);
    let second = create_mode(&zk, &prefix, b"", CreateMode::EphemeralSequential);
    let third = create_mode(&zk, &prefix, b"", CreateMode::PersistentSequential);
    let (a, b, c) = (
        sequence_suffix(&first, &prefix).parse::<u64>().unwrap(),
        sequence_suffix(&second, &prefix).parse::<u64>().unwrap(),
        sequence_suffix(&third, &prefix).parse::<u64>().unwrap(),
    );
    assert!(a < b && b < c, "{first} {second} {third}");

    let session = zk.client_id().unwrap().session_id;
    assert_eq!(zk.exists(&first).unwrap().unwrap().ephemeral_owner, 0);
    assert_eq!(
        zk.exists(&second).unwrap().unwrap().ephemeral_owner,
        session
    );

    // A trailing '/' is allowed for sequential nodes: the name is just the number.
    let bare = create_mode(
        &zk,
        &format!("{parent}/"),
        b"",
        CreateMode::PersistentSequential,
    );
    sequence_suffix(&bare, &format!("{parent}/"));

    let mut children = zk.get_children(&parent).unwrap();
    children.sort();
    assert_eq!(children.len(), 4, "{children:?}");
}

#[test]
fn create_container() {
    let zk = connect();
    let path = unique("container");
    assert_eq!(create_mode(&zk, &path, b"c", CreateMode::Container), path);
    let child = format!("{path}/child");
    create(&zk, &child, b"");
    assert_eq!(zk.get_children(&path).unwrap(), vec!["child".to_string()]);
    assert_eq!(zk.get(&path).unwrap().0, b"c");
}

#[test]
fn create2_returns_the_stat() {
    let zk = connect();
    let path = unique("create2");
    let (created, stat) = zk.create2(&path, b"abc", CreateMode::Persistent).unwrap();
    assert_eq!(created, path);
    assert_eq!(stat.version, 0);
    assert_eq!(stat.data_length, 3);
    assert_eq!(stat.czxid, stat.mzxid);
    assert_eq!(zk.exists(&path).unwrap(), Some(stat));

    let (seq, seq_stat) = zk
        .create2(&format!("{path}/s-"), b"", CreateMode::EphemeralSequential)
        .unwrap();
    sequence_suffix(&seq, &format!("{path}/s-"));
    assert_eq!(seq_stat.ephemeral_owner, zk.client_id().unwrap().session_id);
    assert!(seq_stat.czxid > stat.czxid);
    assert_eq!(
        zk.create2(&path, b"", CreateMode::Persistent).unwrap_err(),
        Error::NodeExists
    );
}

#[test]
fn set_returns_the_new_stat_and_checks_versions() {
    let zk = connect();
    let path = unique("set");
    create(&zk, &path, b"v0");
    let stat = zk.set(&path, b"value-1", Some(0)).unwrap();
    assert_eq!(stat.version, 1);
    assert_eq!(stat.data_length, 7);
    assert!(stat.mzxid > stat.czxid);
    assert_eq!(zk.get(&path).unwrap(), (b"value-1".to_vec(), stat));

    assert_eq!(zk.set(&path, b"x", Some(0)).unwrap_err(), Error::BadVersion);
    assert_eq!(zk.get(&path).unwrap().0, b"value-1");
    let stat = zk.set(&path, b"", None).unwrap();
    assert_eq!(stat.version, 2);
    assert_eq!(stat.data_length, 0);
    assert_eq!(
        zk.set(&format!("{path}/missing"), b"", None).unwrap_err(),
        Error::NoNode
    );
}

#[test]
fn delete_with_version() {
    let zk = connect();
    let path = unique("delete");
    create(&zk, &path, b"");
    zk.set(&path, b"1", None).unwrap();
    assert_eq!(zk.delete(&path, Some(0)).unwrap_err(), Error::BadVersion);
    assert!(zk.exists(&path).unwrap().is_some());
    zk.delete(&path, Some(1)).unwrap();
    assert_eq!(zk.exists(&path).unwrap(), None);
    assert_eq!(zk.delete(&path, None).unwrap_err(), Error::NoNode);

    create(&zk, &path, b"");
    zk.delete(&path, None).unwrap();
    assert_eq!(zk.exists(&path).unwrap(), None);
}

#[test]
fn exists_reports_presence_and_stat() {
    let zk = connect();
    let path = unique("exists");
    assert_eq!(zk.exists(&path).unwrap(), None);
    assert_eq!(zk.exists(&format!("{path}/deeper")).unwrap(), None);
    create(&zk, &path, b"12");
    let stat = zk.exists(&path).unwrap().unwrap();
    assert_eq!(stat.data_length, 2);
    assert_eq!(stat, zk.get(&path).unwrap().1);
    assert!(zk.exists("/").unwrap().is_some());
    assert!(zk.exists("/zookeeper").unwrap().is_some());
}

#[test]
fn children_and_children2() {
    let zk = connect();
    let path = unique("children");
    create(&zk, &path, b"");
    assert!(zk.get_children(&path).unwrap().is_empty());
    for name in ["a", "b", "c"] {
        create(&zk, &format!("{path}/{name}"), b"");
    }
    let mut children = zk.get_children(&path).unwrap();
    children.sort();
    assert_eq!(children, ["a", "b", "c"]);

    let (mut children2, stat) = zk.get_children2(&path).unwrap();
    children2.sort();
    assert_eq!(children2, children);
    assert_eq!(stat.num_children, 3);
    assert_eq!(stat.cversion, 3);
    assert_eq!(stat, zk.exists(&path).unwrap().unwrap());

    assert_eq!(
        zk.get_children(&format!("{path}/missing")).unwrap_err(),
        Error::NoNode
    );
    assert_eq!(
        zk.get_children2(&format!("{path}/missing")).unwrap_err(),
        Error::NoNode
    );
    assert!(zk
        .get_children("/")
        .unwrap()
        .contains(&"zookeeper".to_string()));
}

#[test]
fn get_acl_and_set_acl() {
    let zk = connect();
    let path = unique("acl");
    create(&zk, &path, b"");
    let (acl, stat) = zk.get_acl(&path).unwrap();
    assert_eq!(acl, Acl::OPEN_UNSAFE);
    assert_eq!(stat.aversion, 0);

    let new_acl = vec![
        Acl::new(Perms::READ | Perms::WRITE, "world", "anyone"),
        Acl::new(Perms::ALL, "ip", "127.0.0.1"),
    ];
    assert_eq!(
        zk.set_acl(&path, &new_acl, Some(5)).unwrap_err(),
        Error::BadVersion
    );
    zk.set_acl(&path, &new_acl, Some(0)).unwrap();
    let (acl, stat) = zk.get_acl(&path).unwrap();
    assert_eq!(acl, new_acl);
    assert_eq!(stat.aversion, 1);
    assert_eq!(stat.version, 0, "an ACL change is not a data change");

    zk.set_acl(&path, Acl::READ_UNSAFE, None).unwrap();
    assert_eq!(zk.get_acl(&path).unwrap().0, Acl::READ_UNSAFE);
    // Our client connects from 127.0.0.1 but the ip entry is gone: read-only now.
    assert_eq!(zk.set(&path, b"x", None).unwrap_err(), Error::NoAuth);
    assert_eq!(
        zk.get_acl(&format!("{path}/missing")).unwrap_err(),
        Error::NoNode
    );
    assert_eq!(
        zk.set_acl(&format!("{path}/missing"), Acl::OPEN_UNSAFE, None)
            .unwrap_err(),
        Error::NoNode
    );
    assert_eq!(
        zk.set_acl(&path, &[], None).unwrap_err(),
        Error::InvalidAcl,
        "an empty ACL is rejected"
    );
}

#[test]
fn sync_returns_the_path() {
    let zk = connect();
    let path = unique("sync");
    create(&zk, &path, b"");
    assert_eq!(zk.sync(&path).unwrap(), path);
    // The server does not check that the node exists.
    let missing = format!("{path}/missing");
    assert_eq!(zk.sync(&missing).unwrap(), missing);
    assert!(matches!(
        zk.sync("no-slash"),
        Err(Error::InvalidPath { .. })
    ));
}

#[test]
fn get_config_on_a_standalone_server() {
    let zk = connect();
    // A standalone server (no dynamic config) answers with an empty config node.
    let (data, stat) = zk.get_config().unwrap();
    assert!(data.is_empty(), "{:?}", String::from_utf8_lossy(&data));
    assert_eq!(stat.data_length, 0);
    assert_eq!(stat.version, 0);
}

#[test]
fn reconfig_on_a_standalone_server_is_a_typed_error() {
    let zk = connect();
    let error = zk
        .reconfig(
            zookeeper_mt::Reconfig::bulk("server.1=127.0.0.1:1:2;3"),
            None,
        )
        .unwrap_err();
    // Dynamic reconfiguration is off unless `reconfigEnabled=true`.
    assert_eq!(error, Error::ReconfigDisabled);
}

#[test]
fn error_no_node() {
    let zk = connect();
    let path = unique("nonode");
    assert_eq!(zk.get(&path).unwrap_err(), Error::NoNode);
    assert_eq!(zk.delete(&path, None).unwrap_err(), Error::NoNode);
    assert_eq!(zk.set(&path, b"", None).unwrap_err(), Error::NoNode);
    // Creating under a missing parent.
    assert_eq!(
        zk.create(&format!("{path}/child"), b"", CreateMode::Persistent)
            .unwrap_err(),
        Error::NoNode
    );
}

#[test]
fn error_node_exists() {
    let zk = connect();
    let path = unique("exists-error");
    create(&zk, &path, b"first");
    for mode in [
        CreateMode::Persistent,
        CreateMode::Ephemeral,
        CreateMode::Container,
    ] {
        assert_eq!(
            zk.create(&path, b"second", mode).unwrap_err(),
            Error::NodeExists,
            "{mode:?}"
        );
    }
    assert_eq!(zk.get(&path).unwrap().0, b"first");
    assert_eq!(
        zk.create("/zookeeper", b"", CreateMode::Persistent)
            .unwrap_err(),
        Error::NodeExists
    );
}

#[test]
fn error_not_empty() {
    let zk = connect();
    let path = unique("notempty");
    create(&zk, &path, b"");
    create(&zk, &format!("{path}/child"), b"");
    assert_eq!(zk.delete(&path, None).unwrap_err(), Error::NotEmpty);
    zk.delete(&format!("{path}/child"), None).unwrap();
    zk.delete(&path, None).unwrap();
}

#[test]
fn error_no_children_for_ephemerals() {
    let zk = connect();
    let path = unique("ephemeral-parent");
    create_mode(&zk, &path, b"", CreateMode::Ephemeral);
    for mode in [CreateMode::Persistent, CreateMode::EphemeralSequential] {
        assert_eq!(
            zk.create(&format!("{path}/child"), b"", mode).unwrap_err(),
            Error::NoChildrenForEphemerals,
            "{mode:?}"
        );
    }
}

#[test]
fn error_invalid_acl() {
    let zk = connect();
    let path = unique("invalid-acl");
    // Rejected by the binding: an empty ACL.
    assert_eq!(
        zk.create(
            &path,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&[])
        )
        .unwrap_err(),
        Error::InvalidAcl
    );
    // Rejected by the server: `auth` with no authenticated identity, an unknown scheme,
    // a malformed digest id.
    for acl in [
        Acl::CREATOR_ALL.to_vec(),
        vec![Acl::new(Perms::ALL, "no-such-scheme", "x")],
        vec![Acl::new(Perms::ALL, "digest", "missing-colon")],
    ] {
        assert_eq!(
            zk.create(
                &path,
                b"",
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl)
            )
            .unwrap_err(),
            Error::InvalidAcl,
            "{acl:?}"
        );
    }
    assert_eq!(zk.exists(&path).unwrap(), None);
    // An ACL string with a NUL never reaches C.
    assert_eq!(
        zk.create(
            &path,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&[Acl::new(
                Perms::ALL,
                "world",
                "any\0one"
            )])
        )
        .unwrap_err(),
        Error::InteriorNul("ACL id")
    );
}

const BAD_PATHS: &[&str] = &[
    "",
    "relative",
    "/trailing/",
    "/double//slash",
    "/dot/./x",
    "/dotdot/../x",
    "/nul\0byte",
    "/control\u{1}",
    "/private\u{e000}use",
];

/// Every path-taking call rejects a bad path with `InvalidPath`, before the handle is
/// even looked at: on a closed handle the error is still `InvalidPath`, not `Closed`.
fn assert_all_reject(zk: &ZooKeeper, bad: &str) {
    let is_invalid = |result: Result<(), Error>, what: &str| match result {
        Err(Error::InvalidPath { path, .. }) => assert_eq!(path, bad, "{what}"),
        other => panic!("{what}({bad:?}) gave {other:?}"),
    };
    let acl = Acl::OPEN_UNSAFE;
    is_invalid(
        zk.create(
            bad,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
        )
        .map(drop),
        "create",
    );
    is_invalid(
        zk.create2(
            bad,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(acl),
        )
        .map(drop),
        "create2",
    );
    is_invalid(zk.delete(bad, None), "delete");
    is_invalid(zk.exists(bad).map(drop), "exists");
    is_invalid(zk.exists_watch(bad).map(drop), "exists_watch");
    is_invalid(zk.get(bad).map(drop), "get");
    is_invalid(zk.get_watch(bad).map(drop), "get_watch");
    is_invalid(zk.set(bad, b"", None).map(drop), "set");
    is_invalid(zk.get_children(bad).map(drop), "get_children");
    is_invalid(zk.get_children2(bad).map(drop), "get_children2");
    is_invalid(zk.get_children_watch(bad).map(drop), "get_children_watch");
    is_invalid(zk.get_acl(bad).map(drop), "get_acl");
    is_invalid(zk.set_acl(bad, acl, None), "set_acl");
    is_invalid(zk.sync(bad).map(drop), "sync");
    is_invalid(
        zk.remove_watches(bad, zookeeper_mt::WatcherType::Any, WatchRemoval::Server),
        "remove_watches",
    );
    is_invalid(
        zk.multi(&[zookeeper_mt::Op::check(bad, -1)]).map(drop),
        "multi",
    );
}

#[test]
fn invalid_paths_are_typed_errors_that_never_reach_c() {
    let zk = connect();
    let events = zk.session_events();
    for bad in BAD_PATHS {
        assert_all_reject(&zk, bad);
    }
    assert_eq!(zk.live_contexts(), 0, "no context was handed to C");
    // The connection was never disturbed (a bad path sent to the server drops it).
    assert!(events.try_recv().is_err());
    assert!(zk.state().is_connected());
    zk.get("/zookeeper").unwrap();

    zk.close().unwrap();
    for bad in BAD_PATHS {
        assert_all_reject(&zk, bad);
    }
}

#[test]
fn data_too_large() {
    let zk = connect();
    let path = unique("large");
    let too_large = vec![b'x'; MAX_DATA_LEN + 1];
    let expected = Error::DataTooLarge {
        len: MAX_DATA_LEN + 1,
        max: MAX_DATA_LEN,
    };
    assert_eq!(
        zk.create(&path, &too_large, CreateMode::Persistent)
            .unwrap_err(),
        expected
    );
    assert_eq!(zk.exists(&path).unwrap(), None);
    assert_eq!(zk.live_contexts(), 0);

    // The limit itself is accepted by the server and read back intact.
    let largest: Vec<u8> = (0..MAX_DATA_LEN).map(|i| (i % 251) as u8).collect();
    create(&zk, &path, &largest);
    let (data, stat) = zk.get(&path).unwrap();
    assert_eq!(stat.data_length as usize, MAX_DATA_LEN);
    assert!(data == largest, "large data differs");

    assert_eq!(zk.set(&path, &too_large, None).unwrap_err(), expected);
    assert_eq!(zk.get(&path).unwrap().1.version, 0);
    // The session survived all of it.
    assert!(zk.state().is_connected());
    zk.delete(&path, None).unwrap();
}

#[test]
fn calls_after_close_fail_with_closed() {
    let zk = connect();
    let path = unique("closed");
    create(&zk, &path, b"");
    let clone = zk.clone();
    zk.close().unwrap();
    for handle in [&zk, &clone] {
        let acl = Acl::OPEN_UNSAFE;
        assert_eq!(
            handle
                .create(
                    &format!("{path}/x"),
                    b"",
                    zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl)
                )
                .unwrap_err(),
            Error::Closed
        );
        assert_eq!(handle.get(&path).unwrap_err(), Error::Closed);
        assert_eq!(handle.exists(&path).unwrap_err(), Error::Closed);
        assert_eq!(handle.set(&path, b"", None).unwrap_err(), Error::Closed);
        assert_eq!(handle.delete(&path, None).unwrap_err(), Error::Closed);
        assert_eq!(handle.get_children(&path).unwrap_err(), Error::Closed);
        assert_eq!(handle.get_acl(&path).unwrap_err(), Error::Closed);
        assert_eq!(handle.sync(&path).unwrap_err(), Error::Closed);
        assert_eq!(handle.get_config().unwrap_err(), Error::Closed);
        assert_eq!(
            handle.add_auth("digest", b"u:p").unwrap_err(),
            Error::Closed
        );
        assert_eq!(
            handle
                .multi(&[zookeeper_mt::Op::check(&path, -1)])
                .unwrap_err(),
            Error::Closed
        );
        assert_eq!(handle.client_id().unwrap_err(), Error::Closed);
        assert_eq!(handle.session_timeout().unwrap_err(), Error::Closed);
        assert_eq!(handle.current_server().unwrap_err(), Error::Closed);
        assert_eq!(handle.connected_host().unwrap_err(), Error::Closed);
        // SAFETY: the handle is closed: neither call reaches C, no IO thread runs.
        assert_eq!(
            unsafe { handle.set_servers(&common::hosts()) }.unwrap_err(),
            Error::Closed
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { handle.cycle_next_server() }.unwrap_err(),
            Error::Closed
        );
        assert_eq!(
            handle
                .wait_connected(Duration::from_millis(10))
                .unwrap_err(),
            Error::Closed
        );
        assert_eq!(handle.state(), zookeeper_mt::SessionState::Closed);
        assert!(handle.is_unrecoverable());
        assert_eq!(handle.live_contexts(), 0);
    }
    // The node is still there for others.
    assert!(connect().exists(&path).unwrap().is_some());
}
