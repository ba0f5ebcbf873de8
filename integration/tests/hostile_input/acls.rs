//! Malformed ACLs and auth schemes: typed errors, never a panic or a hang.

use super::*;

#[test]
fn malformed_acls() {
    let _watchdog = Watchdog::new("malformed_acls", Duration::from_secs(60));
    let zk = connect();
    let base = unique("acl");
    zk.create(
        &base,
        b"",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let node = format!("{base}/n");
    let all = Perms::ALL;

    // Empty ACL list: ours refuses it (InvalidAcl), and so does the server.
    assert_eq!(
        zk.create(
            &node,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&[])
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
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl)
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
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&mixed)
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
                zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl)
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
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(&acl),
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
