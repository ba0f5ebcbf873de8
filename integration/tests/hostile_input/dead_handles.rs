//! Every call on a closed handle and on an expired session: typed errors.

use super::*;

/// Every call a handle offers, with valid arguments, reduced to its error (or `None`).
fn every_call(zk: &ZooKeeper, path: &str) -> Vec<(&'static str, Option<Error>)> {
    let acl = open();
    let mode = CreateMode::Persistent;
    vec![
        (
            "create",
            zk.create(
                path,
                b"",
                zookeeper_mt::CreateOptions::new(mode).with_acl(acl),
            )
            .err(),
        ),
        (
            "create2",
            zk.create2(
                path,
                b"",
                zookeeper_mt::CreateOptions::new(mode).with_acl(acl),
            )
            .err(),
        ),
        (
            "create_async",
            zk.create_async(
                path,
                b"",
                zookeeper_mt::CreateOptions::new(mode).with_acl(acl),
            )
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
            zk.reconfig(zookeeper_mt::Reconfig::bulk("server.1=x"), None)
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
        zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(open()),
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
