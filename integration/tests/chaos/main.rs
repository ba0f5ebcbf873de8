//! Fault tolerance against a real 3-node ensemble on loopback: members killed
//! with SIGKILL, the leader killed under a write load, a member frozen with SIGSTOP, and
//! the recipes (lock, work queue, id generator) run by separate processes while members
//! are killed and restarted, one lock holder's session is expired and work-queue
//! consumers are SIGKILLed mid-item.
//!
//! Every test starts its own ensemble; they run one at a time (`common_chaos::serial`).
//! The child processes are this test binary again, running only `chaos_child` with a
//! role in the environment; they report on stdout in `CHAOS|` lines, die with the test
//! (PDEATHSIG, a kill-on-drop guard, and they exit when their stdin closes).
//!
//! Run with `--nocapture` to see the figures (acquisitions, kills, items, ids, timings).
//! `ZK_CHAOS_LOCK_ROUNDS` (per lock process, default 250: 4 x 250 = 1000 acquisitions)
//! and `ZK_CHAOS_ITEMS` (default 200) scale the recipe workload; `ZK_CHAOS_DEADLINE_S`
//! (default 400) bounds it.

mod children;
mod clients;
#[path = "../common_chaos/mod.rs"]
mod common_chaos;
mod recipes;

use children::{consumer_child, ids_child, lock_child};
use common_chaos::{
    child_role, now_ns, report, serial, signal, unique, watch_stdin, Children, Event, Spec,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use zk_harness::{Ensemble, Mode, ServerOptions};
use zookeeper_mt::{
    CreateMode, Error, EventType, SessionEvents, SessionState, WatchedEvent, ZooKeeper,
};
use zookeeper_mt_recipes::locks::{Lock, LockGuard};
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::shared::{IdGenerator, IdStats};
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

/// Session timeout of the clients in the client tests: the server's maximum with the
/// harness's 500 ms tick (20 ticks), so a member can die without the session expiring.
const CLIENT_SESSION: Duration = Duration::from_secs(10);
/// Upper bound of any single wait (only reached when something is broken).
const WAIT: Duration = Duration::from_secs(60);
/// The name of the child entry point below.
const CHILD_ENTRY: &str = "chaos_child";

// ================================================================ helpers

fn start_ensemble() -> Ensemble {
    let started = Instant::now();
    let ensemble =
        Ensemble::start(3, &ServerOptions::for_tests()).expect("starting a 3-node ensemble");
    println!("ensemble of 3 serving after {:?}", started.elapsed());
    ensemble
}

fn connect(hosts: &str, session: Duration) -> ZooKeeper {
    ZooKeeper::builder(hosts)
        .session_timeout(session)
        .connect_timeout(WAIT)
        .connect()
        .unwrap_or_else(|e| panic!("connecting to {hosts}: {e}"))
}

/// Runs `op`, waiting for the connection and retrying while it fails with a connection
/// loss (only for idempotent operations).
fn retry<T>(zk: &ZooKeeper, what: &str, mut op: impl FnMut() -> zookeeper_mt::Result<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        match op() {
            Ok(value) => return value,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                let _ = zk.wait_connected(WAIT);
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Creates a node the test owns (a unique path), riding out a connection loss or an
/// operation timeout on a busy machine: after a retry, `NodeExists` means the earlier
/// attempt was applied.
fn create(zk: &ZooKeeper, path: &str, data: &[u8], mode: CreateMode) {
    let deadline = Instant::now() + WAIT;
    let mut retried = false;
    loop {
        match zk.create(path, data, mode) {
            Ok(_) => return,
            Err(zookeeper_mt::Error::NodeExists) if retried => return,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                let _ = zk.wait_connected(WAIT);
                retried = true;
            }
            Err(e) => panic!("creating {path}: {e}"),
        }
    }
}

/// The ensemble member whose client port is `addr`'s.
fn member_at(ensemble: &Ensemble, addr: SocketAddr) -> Option<usize> {
    (0..ensemble.len()).find(|&i| ensemble.member(i).port() == addr.port())
}

/// The member `zk` is connected to now.
fn connected_member(zk: &ZooKeeper, ensemble: &Ensemble) -> usize {
    zk.wait_connected(WAIT).expect("connected");
    let addr = zk
        .connected_host()
        .expect("connected_host")
        .expect("a connected session has a peer address");
    member_at(ensemble, addr).unwrap_or_else(|| panic!("{addr} is no member"))
}

/// Receives session events until one has `state`; returns them all.
fn wait_for_state(
    events: &SessionEvents,
    state: SessionState,
    timeout: Duration,
) -> Vec<WatchedEvent> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                let done = event.state == state;
                seen.push(event);
                if done {
                    return seen;
                }
            }
            Err(e) => panic!("no session event {state:?} within {timeout:?} ({e}); saw {seen:?}"),
        }
    }
}

/// Polls `condition` until it holds; only for conditions no event reports (a counter).
fn poll_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// True if a watch wait timed out; false once the watch fired (panics if it ended).
fn timed_out(waited: zookeeper_mt::Result<zookeeper_mt::WatchedEvent>) -> bool {
    match waited {
        Ok(_) => false,
        Err(zookeeper_mt::Error::Timeout) => true,
        Err(e) => panic!("the watch ended: {e}"),
    }
}

fn expect_event(watch: &zookeeper_mt::Watch, event_type: EventType, path: &str) {
    let event = watch
        .wait_timeout(WAIT)
        .unwrap_or_else(|e| panic!("the watch on {path} did not fire: {e}"));
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (event_type, path),
        "{event:?}"
    );
}

// ================================================================ child entry

/// Not a test of its own: the entry point of the child processes of
/// `recipes_survive_member_kills_expiry_and_consumer_kills` (does nothing unless the
/// role variable is set).
#[test]
fn chaos_child() {
    let Some((role, spec)) = child_role() else {
        return;
    };
    match role.as_str() {
        "lock" => lock_child(&spec),
        "wq" => consumer_child(&spec),
        "ids" => ids_child(&spec),
        other => panic!("unknown child role {other}"),
    }
}
