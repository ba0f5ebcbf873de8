//! Service discovery with group membership: Rust services join a group in Curator's
//! `GroupMember` layout (node = service id, data = address) while an observer prints the
//! changes; one service changes its address, one leaves, and one loses its session to
//! expiry and is back by itself in its new session. Then a Rust service and, if
//! installed, a kazoo `Party` process join one party in kazoo's layout and see each
//! other.
//!
//! `cargo run --example group_membership` (uses `ZK_HOSTS` if set, else starts a
//! server). The kazoo process needs `./setup.sh` (python3-kazoo); without it that part
//! is skipped.

mod support;

use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::events::EventStream;
use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;
use zookeeper_mt_recipes::nodes::{Group, GroupEvent, GroupLayout, GroupMember};
use zookeeper_testing::peers::{Participant, Peer};
use zookeeper_testing::{Hosts, HOSTS_ENV};

const WAIT: Duration = Duration::from_secs(60);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    let base = format!("/examples/groups-{}", zookeeper_mt_recipes::nodes::guid());
    let path = format!("{base}/web");
    let admin = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    println!("group {path} on {connect}");

    let observer = Group::watch(&admin, &path, GroupLayout::CuratorGroupMember)?;
    observer.wait_initialized(WAIT)?;
    let events = observer.events();

    let web0 = connect.clone();
    let mut clients = vec![ManagedZooKeeper::with_connector(move || {
        ZooKeeper::builder(&web0)
            .session_timeout(Duration::from_secs(6))
            .connect()
    })?];
    for _ in 1..3 {
        clients.push(ManagedZooKeeper::connect(&connect, Duration::from_secs(6))?);
    }
    let mut members: Vec<GroupMember> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            GroupMember::new(
                client,
                &path,
                &format!("web-{i}"),
                format!("10.0.0.{i}:8080").as_bytes(),
            )
        })
        .collect::<Result<_, _>>()?;
    until(events, "three members", || observer.ids().len() == 3)?;

    members[1].set_data(b"10.0.1.1:8080")?;
    until(events, "web-1's new address", || {
        observer
            .members()
            .iter()
            .any(|m| m.id == "web-1" && m.data == b"10.0.1.1:8080")
    })?;

    members.remove(2).leave();
    until(events, "web-2 gone", || {
        observer.ids() == ["web-0", "web-1"]
    })?;

    // web-0's session expires; its member node is created again in the new session.
    support::expire_session(&clients[0].current(), &connect)?;
    until(events, "web-0 back in a new session", || {
        clients[0].generation() == 2
            && members[0].node().creations() == 2
            && observer.ids() == ["web-0", "web-1"]
    })?;
    drop(members);
    until(events, "an empty group", || observer.ids().is_empty())?;
    observer.close();

    // kazoo's layout: a Rust member and a kazoo Party process in one party.
    let party_path = format!("{base}/party");
    let zk = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    let rust = GroupMember::builder(&party_path, "rust-worker")
        .layout(GroupLayout::KazooParty)
        .build(&zk)?;
    rust.node().wait_created(WAIT)?;
    match Peer::builder(Participant::KazooParty, &connect, &party_path)
        .id("python-worker")
        .start()
    {
        Ok(mut kazoo) => {
            kazoo.join(WAIT)?;
            println!("  kazoo sees {:?}", kazoo.members(WAIT)?);
            let view = rust.group();
            let started = Instant::now();
            while view.ids().len() < 2 && started.elapsed() < WAIT {
                let _ = view.events().recv_timeout(Duration::from_millis(200));
            }
            println!("  we see {:?}", view.ids());
            kazoo.leave(WAIT)?;
            kazoo.quit(WAIT)?;
        }
        Err(error) => println!("  (skipping the kazoo process: {error})"),
    }
    rust.leave();
    Ok(())
}

/// Prints the observer's events until `done` holds (the member list is read after the
/// events that led to it).
fn until(
    events: &EventStream<GroupEvent>,
    what: &str,
    done: impl Fn() -> bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    loop {
        while let Ok(event) = events.try_recv() {
            print_event(event);
        }
        if done() {
            println!("{what}: yes");
            return Ok(());
        }
        if started.elapsed() > WAIT {
            return Err(format!("never saw {what}").into());
        }
        if let Ok(event) = events.recv_timeout(Duration::from_millis(200)) {
            print_event(event);
        }
    }
}

fn print_event(event: GroupEvent) {
    match event {
        GroupEvent::Joined(m) => println!("  + {} at {}", m.id, String::from_utf8_lossy(&m.data)),
        GroupEvent::Updated(m) => {
            println!("  ~ {} now at {}", m.id, String::from_utf8_lossy(&m.data))
        }
        GroupEvent::Left(m) => println!("  - {}", m.id),
        other => println!("  ({other:?})"),
    }
}
