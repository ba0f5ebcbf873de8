//! ACLs and authentication: digest ACLs computed here (SHA-1 + base64), NoAuth for other
//! sessions, `add_auth` granting access, the `auth` scheme, per-permission checks.

mod common;

use common::{base64, connect, create, digest_id, sha1, unique};
use zookeeper_mt::{Acl, CreateMode, Error, Perms};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn digest_helpers_match_known_vectors() {
    assert_eq!(
        hex(&sha1(b"abc")),
        "a9993e364706816aba3e25717850c26c9cd0d89d"
    );
    assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    assert_eq!(
        hex(&sha1(&[b'a'; 1000])),
        "291e9a6c66994949b57ba5e650361e98fc36b1ba"
    );
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"M"), "TQ==");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(base64(b"Man"), "TWFu");
    // The example id from the ZooKeeper documentation.
    assert_eq!(
        digest_id("super", "test"),
        "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    );
}

#[test]
fn digest_acl_denies_other_sessions_until_they_authenticate() {
    let owner = connect();
    let path = unique("digest");
    let acl = vec![Acl::new(Perms::ALL, "digest", &digest_id("user", "pass"))];
    // The owner itself is not authenticated yet: creating with a digest ACL is allowed
    // (the ACL is checked on later access), but reading it back is not.
    owner
        .create(
            &path,
            b"secret",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl),
        )
        .unwrap();
    assert_eq!(owner.get(&path).unwrap_err(), Error::NoAuth);
    // exists needs no permission; get_acl needs READ or ADMIN (since 3.6).
    assert!(owner.exists(&path).unwrap().is_some());
    assert_eq!(owner.get_acl(&path).unwrap_err(), Error::NoAuth);

    let other = connect();
    assert_eq!(other.get(&path).unwrap_err(), Error::NoAuth);
    assert_eq!(other.set(&path, b"x", None).unwrap_err(), Error::NoAuth);
    assert_eq!(other.get_children(&path).unwrap_err(), Error::NoAuth);
    assert_eq!(
        other
            .create(&format!("{path}/child"), b"", CreateMode::Persistent)
            .unwrap_err(),
        Error::NoAuth
    );
    assert_eq!(
        other.set_acl(&path, Acl::OPEN_UNSAFE, None).unwrap_err(),
        Error::NoAuth
    );
    // A watching read that is refused registers nothing.
    assert_eq!(other.get_watch(&path).unwrap_err(), Error::NoAuth);
    assert_eq!(other.live_contexts(), 0);

    // Wrong credentials: digest auth itself succeeds, but grants nothing.
    other.add_auth("digest", b"user:wrong").unwrap();
    assert_eq!(other.get(&path).unwrap_err(), Error::NoAuth);

    other.add_auth("digest", b"user:pass").unwrap();
    assert_eq!(other.get(&path).unwrap().0, b"secret");
    other.set(&path, b"changed", None).unwrap();
    create(&other, &format!("{path}/child"), b"");
    // The delete permission is the parent's: ours allows it.
    other.delete(&format!("{path}/child"), None).unwrap();

    // A third session with no auth is still refused; the first can authenticate too.
    assert_eq!(connect().get(&path).unwrap_err(), Error::NoAuth);
    owner.add_auth("digest", b"user:pass").unwrap();
    assert_eq!(owner.get(&path).unwrap().0, b"changed");
    assert_eq!(owner.get_acl(&path).unwrap().0, acl);
}

#[test]
fn auth_scheme_uses_the_session_identity() {
    let zk = connect();
    zk.add_auth("digest", b"carol:s3cret").unwrap();
    let path = unique("auth-scheme");
    zk.create(
        &path,
        b"mine",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(Acl::CREATOR_ALL),
    )
    .unwrap();
    // The server replaced `auth:` with the session's digest identity, which must be
    // exactly what we compute.
    let (acl, _) = zk.get_acl(&path).unwrap();
    assert_eq!(
        acl,
        vec![Acl::new(
            Perms::ALL,
            "digest",
            &digest_id("carol", "s3cret")
        )]
    );
    assert_eq!(zk.get(&path).unwrap().0, b"mine");
    assert_eq!(connect().get(&path).unwrap_err(), Error::NoAuth);
}

#[test]
fn permissions_are_checked_one_by_one() {
    let owner = connect();
    owner.add_auth("digest", b"admin:admin").unwrap();
    let admin = Acl::new(Perms::ALL, "digest", &digest_id("admin", "admin"));
    let path = unique("perms");
    let others = |perms| vec![admin.clone(), Acl::new(perms, "world", "anyone")];
    owner
        .create(
            &path,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&others(Perms::READ)),
        )
        .unwrap();
    let guest = connect();

    // READ only.
    guest.get(&path).unwrap();
    guest.get_children(&path).unwrap();
    assert_eq!(guest.set(&path, b"x", None).unwrap_err(), Error::NoAuth);
    let child = format!("{path}/c");
    let create_child = || guest.create(&child, b"", CreateMode::Persistent);
    assert_eq!(create_child().unwrap_err(), Error::NoAuth);

    // + WRITE.
    owner
        .set_acl(&path, &others(Perms::READ | Perms::WRITE), None)
        .unwrap();
    guest.set(&path, b"x", None).unwrap();
    assert_eq!(create_child().unwrap_err(), Error::NoAuth);

    // + CREATE, but not DELETE.
    owner
        .set_acl(&path, &others(Perms::READ | Perms::CREATE), None)
        .unwrap();
    assert_eq!(create_child().unwrap(), child);
    assert_eq!(guest.delete(&child, None).unwrap_err(), Error::NoAuth);

    // + DELETE; ADMIN is needed to change the ACL.
    owner.set_acl(&path, &others(Perms::DELETE), None).unwrap();
    guest.delete(&child, None).unwrap();
    assert_eq!(
        guest.set_acl(&path, Acl::OPEN_UNSAFE, None).unwrap_err(),
        Error::NoAuth
    );
    owner.set_acl(&path, &others(Perms::ADMIN), None).unwrap();
    guest.set_acl(&path, Acl::OPEN_UNSAFE, None).unwrap();
    assert_eq!(guest.get_acl(&path).unwrap().0, Acl::OPEN_UNSAFE);
    assert!(Perms::ALL.contains(Perms::ADMIN | Perms::READ));
    assert!(!Perms::READ.contains(Perms::WRITE));
}

#[test]
fn ip_acl_matches_loopback() {
    let zk = connect();
    let path = unique("ip");
    let loopback = vec![Acl::new(Perms::ALL, "ip", "127.0.0.0/8")];
    zk.create(
        &path,
        b"local",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&loopback),
    )
    .unwrap();
    assert_eq!(zk.get(&path).unwrap().0, b"local");
    zk.set_acl(&path, &[Acl::new(Perms::ALL, "ip", "10.1.2.3")], None)
        .unwrap();
    assert_eq!(zk.get(&path).unwrap_err(), Error::NoAuth);
}

#[test]
fn add_auth_rejects_bad_input_before_c() {
    let zk = connect();
    assert!(matches!(
        zk.add_auth("", b"user:pass"),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        zk.add_auth("dig\0est", b"user:pass").unwrap_err(),
        Error::InteriorNul("auth scheme")
    );
    assert_eq!(zk.live_contexts(), 0);
    // An unknown scheme: the server fails the session's authentication, which is terminal.
    let events = zk.session_events();
    let error = zk.add_auth("no-such-scheme", b"x").unwrap_err();
    assert_eq!(error, Error::AuthFailed);
    common::wait_for_state(
        &events,
        zookeeper_mt::SessionState::AuthFailed,
        common::WAIT,
    );
    assert_eq!(zk.get("/").unwrap_err(), Error::AuthFailed);
    assert!(zk.is_unrecoverable());
    assert_eq!(zk.live_contexts(), 0);
}

/// Credentials above the server's request limit: the server would drop the connection
/// instead of answering, and the C client, which resends every credential after each
/// reconnect, would reconnect in a loop until the session expired. They are refused up
/// front, and the session is not disturbed.
#[test]
fn oversized_credentials_are_refused_before_sending() {
    let zk = connect();
    let events = zk.session_events();
    let mut credentials = b"user:".to_vec();
    credentials.resize(2 << 20, b'x');
    let error = zk.add_auth("digest", &credentials).unwrap_err();
    assert!(
        matches!(error, Error::DataTooLarge { len, max } if len > max && max == 0xfffff),
        "{error:?}"
    );
    // An oversized scheme counts too.
    assert!(matches!(
        common::block_on(zk.add_auth_async(&"s".repeat(1 << 20), b"user:pass")),
        Err(Error::DataTooLarge { .. })
    ));
    assert_eq!(zk.live_contexts(), 0);

    // No connection loss followed: the session and its connection are the same.
    let path = unique("after-big-auth");
    create(&zk, &path, b"still here");
    assert_eq!(zk.get(&path).unwrap().0, b"still here");
    assert!(zk.state().is_connected());
    let seen: Vec<_> = events.try_iter().collect();
    assert!(
        seen.iter()
            .all(|event| event.state == zookeeper_mt::SessionState::Connected),
        "the connection dropped: {seen:?}"
    );
    // A credential just under the limit still goes through.
    credentials.truncate(0xfffff - 200);
    zk.add_auth("digest", &credentials).unwrap();
    zk.exists("/").unwrap();
    assert!(zk.state().is_connected());
}

#[test]
fn a_new_session_is_made_like_the_old_one_with_its_credentials() {
    let zk = connect();
    zk.add_auth("digest", b"renewed:secret").unwrap();
    let path = unique("new-session");
    let acl = vec![Acl::new(
        Perms::ALL,
        "digest",
        &digest_id("renewed", "secret"),
    )];
    zk.create(
        &path,
        b"mine",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl),
    )
    .unwrap();
    let old_id = zk.client_id().unwrap().session_id;
    zk.close().unwrap();

    // The old handle is closed; a session made like it carries its credentials.
    let fresh = zk.new_session().unwrap();
    assert_ne!(fresh.client_id().unwrap().session_id, old_id);
    assert_eq!(fresh.get(&path).unwrap().0, b"mine");
    // A plain new connection does not.
    assert_eq!(connect().get(&path).unwrap_err(), Error::NoAuth);
    fresh.delete(&path, None).unwrap();
}
