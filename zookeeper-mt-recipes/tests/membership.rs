//! Persistent nodes and group membership against a real server: re-creation after
//! deletion and expiry, lost-create recovery without a second node, conflicts, the
//! counter's end, group views in both layouts, and nothing left behind.

mod common;

use common::{assert_no_leftover_contexts, connect, connect_to, unique_path, Proxy};
use std::collections::BTreeSet;
use std::time::Duration;
use zk_harness::executor::block_on;
use zk_harness::testing::wait_until;
use zk_harness::{Crafted, FaultProxy, LaggingEnsemble, OpCode, Server, ServerOptions};
use zookeeper_mt::{Acl, CreateMode, ZooKeeper};
use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;
use zookeeper_mt_recipes::nodes::{
    Group, GroupEvent, GroupLayout, GroupMember, NodeMode, NodeStatus, PersistentNode,
};
use zookeeper_mt_recipes::RecipeError;

const T: Duration = Duration::from_secs(60);

fn expire(zk: &ZooKeeper) {
    let id = zk.client_id().unwrap();
    let thief = ZooKeeper::builder(&zk_harness::shared_test_connect_string())
        .session(id)
        .connect()
        .unwrap();
    thief.close().unwrap();
}

fn data_of(zk: &ZooKeeper, path: &str) -> Option<Vec<u8>> {
    zk.get(path).ok().map(|(data, _)| data)
}

#[test]
fn a_deleted_node_comes_back_with_the_latest_data() {
    let base = unique_path("recreate");
    let path = format!("{base}/me");
    let zk = connect();
    let admin = connect();
    let node = PersistentNode::new(&zk, &path, b"v1").unwrap();
    assert_eq!(node.wait_created(T).unwrap(), path);
    assert_eq!(data_of(&admin, &path).as_deref(), Some(&b"v1"[..]));
    let owner = admin.exists(&path).unwrap().unwrap().ephemeral_owner;
    assert_eq!(owner, zk.client_id().unwrap().session_id);

    node.set_data(b"v2").unwrap();
    wait_until("the new data is written", T, || {
        data_of(&admin, &path).as_deref() == Some(&b"v2"[..])
    });
    admin.delete(&path, None).unwrap();
    // The count moves when the create returns; the status is published after it.
    wait_until("the node is back", T, || {
        node.creations() == 2 && node.status() == NodeStatus::Created
    });
    assert_eq!(data_of(&admin, &path).as_deref(), Some(&b"v2"[..]));
    wait_until("the new node is watched", T, || node.armed_watches() == 1);
    // A data change by someone else does not make a second node or lose the watch.
    admin.set(&path, b"theirs", None).unwrap();
    wait_until("the watch is armed again", T, || node.armed_watches() == 1);
    assert_eq!(node.creations(), 2);
    node.close();
    assert!(
        admin.exists(&path).unwrap().is_none(),
        "closing deletes the node"
    );
    assert_no_leftover_contexts(&zk);
}

#[test]
fn a_managed_node_is_created_again_in_a_new_session() {
    let path = format!("{}/me", unique_path("managed"));
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let client = ManagedZooKeeper::connect(&proxy.addr, common::SESSION_TIMEOUT).unwrap();
    let admin = connect();
    let node = PersistentNode::builder(&path)
        .mode(NodeMode::Ephemeral)
        .data(b"here")
        .build(&client)
        .unwrap();
    node.wait_created(T).unwrap();
    proxy.cut();
    let old = client.current();
    expire(&old);
    assert!(admin.exists(&path).unwrap().is_none(), "expiry deleted it");
    proxy.restore();
    wait_until("a new session", T, || client.generation() == 2);
    node.wait_created(T).unwrap();
    let stat = admin.exists(&path).unwrap().unwrap();
    assert_eq!(
        stat.ephemeral_owner,
        client.current().client_id().unwrap().session_id
    );
    assert_eq!(data_of(&admin, &path).as_deref(), Some(&b"here"[..]));
    node.close();
    assert!(admin.exists(&path).unwrap().is_none());
}

#[test]
fn a_node_on_a_plain_handle_ends_with_its_session() {
    let path = format!("{}/me", unique_path("plain"));
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    let node = PersistentNode::new(&zk, &path, b"").unwrap();
    node.wait_created(T).unwrap();
    proxy.cut();
    expire(&zk);
    proxy.restore();
    wait_until("the node's thread ends", T, || {
        node.status() == NodeStatus::Ended
    });
    assert_eq!(
        node.wait_created(T).unwrap_err(),
        RecipeError::ZooKeeper(zookeeper_mt::Error::SessionExpired)
    );
    assert_eq!(node.status(), NodeStatus::Ended);
    assert_eq!(
        node.end_reason(),
        Some(RecipeError::ZooKeeper(zookeeper_mt::Error::SessionExpired))
    );
}

#[test]
fn a_create_whose_reply_is_lost_is_adopted_never_doubled() {
    for mode in [NodeMode::Ephemeral, NodeMode::ProtectedSequential] {
        let parent = unique_path("lost-create");
        let admin = connect();
        zookeeper_mt_recipes::nodes::ensure_path(&admin, &parent).unwrap();
        let proxy = FaultProxy::start(zk_harness::shared_test_connect_string()).unwrap();
        let zk = connect_to(&proxy.connect_string());
        proxy.cut_after_matching(1, |r| r.op == OpCode::CREATE);
        let node = PersistentNode::builder(&format!("{parent}/member-"))
            .mode(mode)
            .build(&zk)
            .unwrap();
        let fired = proxy.wait_for_fired(1, T).unwrap();
        assert_eq!(
            fired[0].reply.map(|r| r.err),
            Some(0),
            "{mode:?}: the server applied the create"
        );
        let actual = node.wait_created(T).unwrap();
        let children = admin.get_children(&parent).unwrap();
        assert_eq!(
            children.len(),
            1,
            "{mode:?}: one node, not two: {children:?}"
        );
        assert_eq!(actual, format!("{parent}/{}", children[0]));
        assert_eq!(node.creations(), 1);
        if mode == NodeMode::ProtectedSequential {
            assert!(children[0].starts_with("_c_"), "Curator's protected prefix");
        }
        let owner = admin.exists(&actual).unwrap().unwrap().ephemeral_owner;
        assert_eq!(owner, zk.client_id().unwrap().session_id);
        node.close();
        assert!(admin.get_children(&parent).unwrap().is_empty());
        assert_no_leftover_contexts(&zk);
    }
}

#[test]
fn another_sessions_node_is_waited_for_not_taken_over() {
    let path = format!("{}/me", unique_path("conflict"));
    let other = connect();
    zookeeper_mt_recipes::nodes::ensure_path(&other, path.rsplit_once('/').unwrap().0).unwrap();
    other
        .create(&path, b"other", CreateMode::Ephemeral)
        .unwrap();
    let zk = connect();
    let node = PersistentNode::new(&zk, &path, b"mine").unwrap();
    wait_until("the node sees the conflict", T, || {
        node.status() == NodeStatus::Conflict
    });
    assert_eq!(node.armed_watches(), 1);
    assert_eq!(data_of(&other, &path).as_deref(), Some(&b"other"[..]));
    assert_eq!(
        node.wait_created(Duration::from_millis(200)).unwrap_err(),
        RecipeError::Timeout
    );
    other.close().unwrap();
    node.wait_created(T).unwrap();
    let admin = connect();
    assert_eq!(data_of(&admin, &path).as_deref(), Some(&b"mine"[..]));
    node.close();
    assert_no_leftover_contexts(&zk);
}

#[test]
fn protected_names_stay_unique_past_the_counters_end() {
    let parent = "/edge/members";
    let server = Server::start_crafted(&Crafted::new().dir(parent, i32::MAX - 1)).unwrap();
    let zk = connect_to(&server.connect_string());
    let nodes: Vec<PersistentNode> = (0..4)
        .map(|_| {
            let node = PersistentNode::builder(&format!("{parent}/m-"))
                .mode(NodeMode::ProtectedSequential)
                .build(&zk)
                .unwrap();
            node.wait_created(T).unwrap();
            node
        })
        .collect();
    let children = zk.get_children(parent).unwrap();
    assert_eq!(children.len(), 4, "{children:?}");
    let suffixes: BTreeSet<String> = children
        .iter()
        .map(|c| c.rsplit('-').next().unwrap().to_string())
        .collect();
    assert!(
        suffixes.len() < 4,
        "the server repeated a number past the counter's end: {children:?}"
    );
    // A drop does not wait: the nodes go a moment later.
    drop(nodes);
    wait_until("the dropped nodes are deleted", T, || {
        zk.get_children(parent).unwrap().is_empty()
    });
}

#[test]
fn curator_layout_group_members_see_each_other() {
    let path = unique_path("group");
    let sessions: Vec<ZooKeeper> = (0..3).map(|_| connect()).collect();
    let mut members: Vec<GroupMember> = sessions
        .iter()
        .enumerate()
        .map(|(i, zk)| {
            GroupMember::new(
                zk,
                &path,
                &format!("m{i}"),
                format!("10.0.0.{i}").as_bytes(),
            )
            .unwrap()
        })
        .collect();
    for member in &members {
        member.group().wait_initialized(T).unwrap();
        wait_until("all members are seen", T, || {
            member.group().ids().len() == 3
        });
        assert_eq!(member.group().ids(), ["m0", "m1", "m2"]);
    }
    let m1 = &members[1];
    let payloads: Vec<Vec<u8>> = m1.group().members().into_iter().map(|m| m.data).collect();
    assert_eq!(payloads[2], b"10.0.0.2");
    // The observer reads the events: a payload change, then a departure.
    let leaving = members.pop().unwrap();
    let observer = &members[0];
    let events = observer.group().events();
    while !matches!(
        events.try_recv(),
        Err(zookeeper_mt_recipes::events::TryRecvError::Empty)
    ) {}
    members[1].set_data(b"moved").unwrap();
    match events.recv_timeout(T).unwrap() {
        GroupEvent::Updated(member) => {
            assert_eq!(
                (member.id.as_str(), member.data.as_slice()),
                ("m1", &b"moved"[..])
            )
        }
        other => panic!("expected Updated, got {other:?}"),
    }
    leaving.leave();
    match block_on(events.next()) {
        Some(GroupEvent::Left(member)) => assert_eq!(member.id, "m2"),
        other => panic!("expected Left, got {other:?}"),
    }
    assert_eq!(observer.group().ids(), ["m0", "m1"]);
    // Bad ids fail at once.
    assert!(matches!(
        GroupMember::new(&sessions[0], &path, "a/b", b""),
        Err(RecipeError::InvalidArgument(_))
    ));
    // A drop does not wait: the members' tasks end a moment later.
    drop(members);
    for zk in &sessions {
        wait_until("the dropped members' tasks have ended", T, || {
            zk.exists("/").unwrap();
            zk.live_contexts() == 0
        });
        assert_no_leftover_contexts(zk);
    }
}

#[test]
fn kazoo_layout_counts_party_nodes_only() {
    let path = unique_path("party");
    let zk = connect();
    let admin = connect();
    let member = GroupMember::builder(&path, "rust-1")
        .layout(GroupLayout::KazooParty)
        .build(&zk)
        .unwrap();
    let node = member.node().wait_created(T).unwrap();
    let name = node.rsplit('/').next().unwrap();
    assert!(
        name.ends_with("__party__") && name.len() == 32 + 9,
        "{name}"
    );
    assert_eq!(data_of(&admin, &node).as_deref(), Some(&b"rust-1"[..]));
    // A node of another recipe in the same directory is no member.
    admin
        .create(
            &format!("{path}/lock-0000000001"),
            b"x",
            CreateMode::Ephemeral,
        )
        .unwrap();
    admin
        .create(
            &format!("{path}/0123456789abcdef0123456789abcdef__party__"),
            b"py-1",
            CreateMode::Ephemeral,
        )
        .unwrap();
    let observer = Group::watch(&admin, &path, GroupLayout::KazooParty).unwrap();
    observer.wait_initialized(T).unwrap();
    assert_eq!(observer.ids(), ["py-1", "rust-1"]);
    wait_until("the member sees both", T, || {
        member.group().ids().len() == 2
    });
    assert!(matches!(
        member.set_data(b"x"),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(matches!(
        GroupMember::builder(&path, "x")
            .layout(GroupLayout::KazooParty)
            .data(b"y")
            .build(&zk),
        Err(RecipeError::InvalidArgument(_))
    ));
    member.leave();
    wait_until("the observer sees the departure", T, || {
        observer.ids() == ["py-1"]
    });
    observer.close();
    assert_no_leftover_contexts(&zk);
}

#[test]
fn a_managed_member_rejoins_after_expiry_and_observers_end_on_it() {
    let path = unique_path("rejoin");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let client = ManagedZooKeeper::connect(&proxy.addr, common::SESSION_TIMEOUT).unwrap();
    let member = GroupMember::new(&client, &path, "svc", b"payload").unwrap();
    member.node().wait_created(T).unwrap();
    let admin = connect();
    let observer = Group::watch(&admin, &path, GroupLayout::CuratorGroupMember).unwrap();
    observer.wait_initialized(T).unwrap();
    wait_until("the observer sees the member", T, || {
        observer.ids() == ["svc"]
    });
    proxy.cut();
    expire(&client.current());
    wait_until("the observer sees it leave", T, || {
        observer.ids().is_empty()
    });
    proxy.restore();
    wait_until("the observer sees it again", T, || {
        observer.ids() == ["svc"]
    });
    wait_until("the member's own view ends on itself", T, || {
        member.group().ids() == ["svc"]
    });
    // The count is bumped once the create's reply is handled, which can be just after
    // the observer has seen the node.
    wait_until("the member counts its second creation", T, || {
        member.node().creations() == 2
    });
    member.leave();
    wait_until("gone", T, || observer.ids().is_empty());
}

#[test]
fn nodes_get_the_acl_asked_for() {
    let parent = unique_path("acl");
    let path = format!("{parent}/me");
    let zk = connect();
    zk.add_auth("digest", b"member:secret").unwrap();
    let only_us = zookeeper_mt_recipes::NodeOptions::default().acl(vec![Acl::new(
        zookeeper_mt::Perms::ALL,
        "auth",
        "",
    )]);
    let node = PersistentNode::builder(&path)
        .node_options(only_us)
        .build(&zk)
        .unwrap();
    node.wait_created(T).unwrap();
    let (acl, _) = zk.get_acl(&path).unwrap();
    assert_eq!(acl[0].scheme, "digest");
    let (parent_acl, _) = zk.get_acl(&parent).unwrap();
    assert_eq!(parent_acl[0].scheme, "digest");
    let stranger = connect();
    assert_eq!(
        stranger.delete(&path, None),
        Err(zookeeper_mt::Error::NoAuth)
    );
    node.close();
    assert!(zk.get_children(&parent).unwrap().is_empty());
}

/// A protected sequential create whose reply is lost on member A, the client then moved
/// to member B, which lags: the node `sync`s before it looks for its uuid, so it adopts
/// its node instead of creating a second one.
#[test]
fn a_lost_protected_create_is_found_on_a_lagging_member_after_sync() {
    let ens = LaggingEnsemble::start(&ServerOptions::for_tests()).unwrap();
    let followers = ens.followers();
    let (a, b) = (followers[0], followers[1]);
    let parent = unique_path("lagging");
    let admin = connect_to(&ens.member(a).connect_string());
    zookeeper_mt_recipes::nodes::ensure_path(&admin, &parent).unwrap();
    let proxy = ens.proxy(a);
    let zk = connect_to(&ens.connect_string(a));
    // Stall B only once it has the client's session: a client that has seen a zxid
    // (a ping reply carries the server's latest) is refused by a member behind it
    // ("has seen zxid ... client must try another server") and never reconnects there.
    ens.stall_member(b).unwrap(); // (waits for B to catch up first)
    let mark = proxy.mark();
    proxy.cut_after_matching(1, |r| r.op == OpCode::CREATE);
    proxy.redirect(ens.member(b).connect_string()).unwrap();
    let node = PersistentNode::builder(&format!("{parent}/member-"))
        .mode(NodeMode::ProtectedSequential)
        .build(&zk)
        .unwrap();
    let fired = proxy.wait_for_fired(1, T).unwrap();
    assert_eq!(fired[0].reply.map(|r| r.err), Some(0), "the create applied");
    // A lagging member refuses a client that has seen a newer zxid than its own; then
    // the reconnection to it is not established and only the outcome is checked.
    // Waits less than the session timeout: a refused client must still find its session
    // alive once B resumes.
    let first =
        proxy.first_request_after(mark, fired[0].request.connection, Duration::from_secs(6));
    let reconnected = first.is_some();
    if reconnected {
        assert_eq!(first, Some(OpCode::SYNC), "it catches B up before looking");
    } else {
        eprintln!("the lagging member refused the client: scenario not established");
    }
    ens.resume_member(b);
    let actual = match node.wait_created(T) {
        Ok(actual) => actual,
        // Refused for long enough (a slow machine, valgrind), the session can expire
        // before B lets the client in; its node then ended with it, and nothing doubled.
        Err(RecipeError::ZooKeeper(zookeeper_mt::Error::SessionExpired)) if !reconnected => {
            assert!(admin.get_children(&parent).unwrap().is_empty());
            assert!(node.creations() <= 1);
            return;
        }
        Err(e) => panic!("the node was not created: {e:?}"),
    };
    let children = admin.get_children(&parent).unwrap();
    assert_eq!(children.len(), 1, "one node, not two: {children:?}");
    assert_eq!(actual, format!("{parent}/{}", children[0]));
    assert_eq!(node.creations(), 1);
    node.close();
}
