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
//! and `ZK_CHAOS_ITEMS` (default 200) scale the recipe workload.

mod common_chaos;

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
use zookeeper::crossbeam_channel::Receiver;
use zookeeper::{CreateMode, Error, EventType, SessionState, WatchedEvent, ZooKeeper};
use zookeeper_recipes::id_generator::{IdGenerator, IdStats};
use zookeeper_recipes::lock::{Lock, LockGuard};
use zookeeper_recipes::work_queue::WorkQueue;
use zookeeper_recipes::OptionalExtension;
use zookeeper_recipes::RecipeError;

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
fn retry<T>(zk: &ZooKeeper, what: &str, mut op: impl FnMut() -> zookeeper::Result<T>) -> T {
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
            Err(zookeeper::Error::NodeExists) if retried => return,
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
    events: &Receiver<WatchedEvent>,
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
fn timed_out(waited: zookeeper::Result<zookeeper::WatchedEvent>) -> bool {
    match waited {
        Ok(_) => false,
        Err(zookeeper::Error::Timeout) => true,
        Err(e) => panic!("the watch ended: {e}"),
    }
}

fn expect_event(watch: &zookeeper::Watch, event_type: EventType, path: &str) {
    let event = watch
        .wait_timeout(WAIT)
        .unwrap_or_else(|e| panic!("the watch on {path} did not fire: {e}"));
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (event_type, path),
        "{event:?}"
    );
}

// ================================================================ client tests

/// SIGKILL of the member a client is connected to: blocked calls return ConnectionLoss
/// at once, the client reconnects to another member within the session timeout, and the
/// session, its ephemeral node and its watches survive.
#[test]
fn killing_the_connected_member_keeps_the_session() {
    let _serial = serial();
    let started = Instant::now();
    let ensemble = start_ensemble();
    let hosts = ensemble.connect_string();
    let zk = connect(&hosts, CLIENT_SESSION);
    let negotiated = zk.session_timeout().unwrap();
    let id = zk.client_id().unwrap();
    let base = unique("kill-connected");
    create(&zk, &base, b"", CreateMode::Persistent);
    let data = format!("{base}/data");
    create(&zk, &data, b"before", CreateMode::Persistent);
    let ephemeral = format!("{base}/ephemeral");
    create(&zk, &ephemeral, b"", CreateMode::Ephemeral);
    let missing = format!("{base}/missing");
    let (_, _, on_data) = zk.get_watch(&data).unwrap();
    let (_, on_create) = zk.exists_watch(&missing).unwrap();
    let (_, on_children) = zk.get_children_watch(&base).unwrap();
    assert_eq!(zk.live_contexts(), 3);

    let victim = connected_member(&zk, &ensemble);
    let victim_mode = ensemble.member(victim).mode();
    let observer = connect(
        &ensemble.member((victim + 1) % 3).connect_string(),
        CLIENT_SESSION,
    );
    let events = zk.session_events();

    // Freeze the member so requests stay unanswered, then issue blocking and async calls.
    ensemble.pause(victim).unwrap();
    let (sender, results) = mpsc::channel();
    let callers: Vec<_> = (0..4)
        .map(|i| {
            let (zk, base, data, sender) = (zk.clone(), base.clone(), data.clone(), sender.clone());
            thread::spawn(move || {
                let result = match i {
                    0 => zk.get(&data).map(drop),
                    1 => zk.set(&data, b"lost?", None).map(drop),
                    2 => zk.sync(&base).map(drop),
                    _ => zk
                        .create(&format!("{base}/pending"), b"", CreateMode::Persistent)
                        .map(drop),
                };
                sender.send((i, result)).unwrap();
            })
        })
        .collect();
    let gets: Vec<_> = (0..50).map(|_| zk.get_async(&data)).collect();
    let sets: Vec<_> = (0..50).map(|_| zk.set_async(&data, b"x", None)).collect();
    poll_until("the calls to be in flight", || {
        zk.live_contexts() == 3 + 4 + 100
    });
    assert!(
        results.try_recv().is_err(),
        "a call returned from a frozen member"
    );

    let killed = Instant::now();
    ensemble.kill(victim);
    for _ in 0..4 {
        let (i, result) = results.recv_timeout(WAIT).expect("a blocked call hung");
        assert_eq!(result, Err(Error::ConnectionLoss), "call {i}");
    }
    let calls_failed_after = killed.elapsed();
    for caller in callers {
        caller.join().unwrap();
    }
    for future in gets {
        assert_eq!(
            future.wait_timeout(WAIT).unwrap_err(),
            Error::ConnectionLoss
        );
    }
    for future in sets {
        assert_eq!(
            future.wait_timeout(WAIT).unwrap_err(),
            Error::ConnectionLoss
        );
    }
    assert!(
        calls_failed_after < Duration::from_secs(5),
        "pending calls took {calls_failed_after:?} to fail"
    );

    // Back on another member, same session, within the session timeout.
    let seen = wait_for_state(&events, SessionState::Connected, WAIT);
    let reconnected_after = killed.elapsed();
    assert!(
        seen.iter().all(|e| !e.state.is_terminal()),
        "session events {seen:?}"
    );
    assert!(
        reconnected_after < negotiated,
        "reconnected after {reconnected_after:?}, session timeout {negotiated:?}"
    );
    assert_eq!(zk.client_id().unwrap(), id, "same session");
    let now_on = connected_member(&zk, &ensemble);
    assert_ne!(now_on, victim);

    // The ephemeral node survived, still owned by the session.
    let stat = retry(&observer, "exists", || observer.exists(&ephemeral)).expect("ephemeral");
    assert_eq!(stat.ephemeral_owner, id.session_id);
    // Watches set before the crash have not fired, and fire now.
    assert_eq!(on_data.try_get(), Ok(None));
    assert_eq!(on_create.try_get(), Ok(None));
    assert_eq!(on_children.try_get(), Ok(None));
    retry(&observer, "set", || observer.set(&data, b"after", None));
    retry(&observer, "create", || {
        match observer.create(&missing, b"", CreateMode::Persistent) {
            Err(Error::NodeExists) => Ok(String::new()),
            other => other,
        }
    });
    expect_event(&on_data, EventType::NodeDataChanged, &data);
    expect_event(&on_create, EventType::NodeCreated, &missing);
    expect_event(&on_children, EventType::NodeChildrenChanged, &base);
    assert_eq!(zk.get(&data).unwrap().0, b"after");
    assert_eq!(zk.live_contexts(), 0);

    // The killed member comes back and has everything.
    let restart = Instant::now();
    ensemble.restart(victim).unwrap();
    let restarted_after = restart.elapsed();
    let direct = connect(&ensemble.member(victim).connect_string(), CLIENT_SESSION);
    direct.sync(&base).unwrap();
    assert!(direct.exists(&ephemeral).unwrap().is_some());
    assert_eq!(direct.get(&data).unwrap().0, b"after");

    zk.close().unwrap();
    assert_eq!(zk.live_contexts(), 0);
    assert_eq!(
        retry(&observer, "exists", || observer.exists(&ephemeral)),
        None,
        "the ephemeral node goes with the session"
    );
    println!(
        "kill connected member {victim} ({victim_mode:?}): 104 pending calls failed with \
         ConnectionLoss after {calls_failed_after:?}; reconnected to member {now_on} after \
         {reconnected_after:?} (session timeout {negotiated:?}); member back after \
         {restarted_after:?}; test took {:?}",
        started.elapsed()
    );
}

#[derive(Default)]
struct WriterReport {
    creates: Vec<(String, Vec<u8>)>,
    last_set: Option<(String, u64, i32)>,
    acknowledged_sets: u64,
    uncertain: u64,
}

/// Writes until `stop`: sequential creates (unique paths) and sets of a counter, both
/// synchronous; records what was acknowledged.
fn writer(
    hosts: &str,
    base: &str,
    t: usize,
    stop: &AtomicBool,
    progress: &mpsc::Sender<()>,
) -> WriterReport {
    let zk = connect(hosts, CLIENT_SESSION);
    let counter = format!("{base}/counter-{t}");
    create(&zk, &counter, b"0", CreateMode::Persistent);
    let mut report = WriterReport::default();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let path = format!("{base}/w-{t}-{i:06}");
        let data = format!("{t}:{i}").into_bytes();
        match zk.create(&path, &data, CreateMode::Persistent) {
            Ok(created) => {
                assert_eq!(created, path);
                report.creates.push((path, data));
            }
            Err(e) if e.is_retryable() => {
                report.uncertain += 1;
                let _ = zk.wait_connected(WAIT);
            }
            Err(e) => panic!("writer {t}: create {path}: {e}"),
        }
        match zk.set(&counter, i.to_string().as_bytes(), None) {
            Ok(stat) => {
                report.acknowledged_sets += 1;
                report.last_set = Some((counter.clone(), i, stat.version));
            }
            Err(e) if e.is_retryable() => {
                report.uncertain += 1;
                let _ = zk.wait_connected(WAIT);
            }
            Err(e) => panic!("writer {t}: set {counter}: {e}"),
        }
        let _ = progress.send(());
    }
    zk.close().unwrap();
    report
}

/// Async writer: pipelines 20 creates at a time.
fn async_writer(
    hosts: &str,
    base: &str,
    stop: &AtomicBool,
    progress: &mpsc::Sender<()>,
) -> WriterReport {
    let zk = connect(hosts, CLIENT_SESSION);
    let mut report = WriterReport::default();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let batch: Vec<_> = (0..20)
            .map(|_| {
                i += 1;
                let path = format!("{base}/a-{i:06}");
                let data = format!("async:{i}").into_bytes();
                let future = zk.create_async(&path, &data, CreateMode::Persistent);
                (path, data, future)
            })
            .collect();
        let mut lost = false;
        for (path, data, future) in batch {
            match future.wait_timeout(WAIT) {
                Ok(created) => {
                    assert_eq!(created, path);
                    report.creates.push((path, data));
                }
                Err(e) if e.is_retryable() => {
                    report.uncertain += 1;
                    lost = true;
                }
                Err(e) => panic!("async create {path}: {e}"),
            }
        }
        if lost {
            let _ = zk.wait_connected(WAIT);
        }
        let _ = progress.send(());
    }
    zk.close().unwrap();
    report
}

/// The leader is SIGKILLed under a write load: every acknowledged write is there
/// afterwards (read back from a fresh session after `sync`, and from the old leader
/// once it has rejoined).
#[test]
fn killing_the_leader_loses_no_acknowledged_write() {
    let _serial = serial();
    let started = Instant::now();
    let ensemble = start_ensemble();
    let hosts = ensemble.connect_string();
    let setup = connect(&hosts, CLIENT_SESSION);
    let base = unique("leader-kill");
    create(&setup, &base, b"", CreateMode::Persistent);
    let old_leader = ensemble.wait_for_leader(WAIT).unwrap();

    let stop = AtomicBool::new(false);
    let (progress_tx, progress) = mpsc::channel();
    let (reports, write_gap, kill_at) = thread::scope(|s| {
        let mut workers = Vec::new();
        for t in 0..3 {
            let (hosts, base, stop, progress_tx) = (&hosts, &base, &stop, progress_tx.clone());
            workers.push(s.spawn(move || writer(hosts, base, t, stop, &progress_tx)));
        }
        {
            let (hosts, base, stop, progress_tx) = (&hosts, &base, &stop, progress_tx.clone());
            workers.push(s.spawn(move || async_writer(hosts, base, stop, &progress_tx)));
        }
        drop(progress_tx);
        let take = |n: usize| {
            let mut longest = Duration::ZERO;
            let mut last = Instant::now();
            for _ in 0..n {
                progress
                    .recv_timeout(WAIT)
                    .expect("the writers stopped making progress");
                longest = longest.max(last.elapsed());
                last = Instant::now();
            }
            longest
        };
        take(200);
        let kill_at = Instant::now();
        ensemble.kill(old_leader);
        // The writers go on with the new leader.
        let gap = take(300);
        stop.store(true, Ordering::SeqCst);
        let reports: Vec<WriterReport> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        (reports, gap, kill_at)
    });
    let new_leader = ensemble.wait_for_leader(WAIT).unwrap();
    assert_ne!(new_leader, old_leader);

    let check = |zk: &ZooKeeper, who: &str| {
        zk.sync(&base).unwrap();
        let children: HashSet<String> = zk.get_children(&base).unwrap().into_iter().collect();
        let mut creates = 0;
        for report in &reports {
            for (path, data) in &report.creates {
                let name = path.rsplit('/').next().unwrap();
                assert!(
                    children.contains(name),
                    "{who}: acknowledged {path} is missing"
                );
                assert_eq!(&zk.get(path).unwrap().0, data, "{who}: {path}");
                creates += 1;
            }
            if let Some((counter, value, version)) = &report.last_set {
                let (data, stat) = zk.get(counter).unwrap();
                let now: u64 = String::from_utf8(data).unwrap().parse().unwrap();
                assert!(
                    now >= *value,
                    "{who}: {counter} is {now}, acknowledged {value}"
                );
                assert!(
                    stat.version >= *version,
                    "{who}: {counter} version went back"
                );
            }
        }
        creates
    };
    let fresh = connect(&hosts, CLIENT_SESSION);
    let creates = check(&fresh, "fresh session");
    let restart = Instant::now();
    ensemble.restart(old_leader).unwrap();
    let restarted_after = restart.elapsed();
    let direct = connect(
        &ensemble.member(old_leader).connect_string(),
        CLIENT_SESSION,
    );
    assert_eq!(check(&direct, "old leader"), creates);

    let sets: u64 = reports.iter().map(|r| r.acknowledged_sets).sum();
    let uncertain: u64 = reports.iter().map(|r| r.uncertain).sum();
    assert!(creates > 0 && sets > 0);
    println!(
        "leader {old_leader} killed {:?} into the load: {creates} acknowledged creates and \
         {sets} acknowledged sets all read back ({uncertain} writes failed with connection \
         loss, outcome unknown); longest write gap {write_gap:?}; new leader {new_leader}; \
         old leader rejoined after {restarted_after:?}; test took {:?}",
        kill_at.duration_since(started),
        started.elapsed()
    );
}

/// SIGSTOP of the member a client is connected to (a partitioned or hung server): the
/// client notices by its read timeout and moves to another member within the session
/// timeout, keeping its session; it keeps working after the member resumes.
#[test]
fn pausing_the_connected_member_moves_the_client() {
    let _serial = serial();
    let started = Instant::now();
    let ensemble = start_ensemble();
    let hosts = ensemble.connect_string();
    // Pausing the leader would stall the whole ensemble until a new election (syncLimit
    // 5 s): pause a follower, where only its own clients are affected.
    let mut attempts = 0;
    let (zk, paused) = loop {
        attempts += 1;
        let zk = connect(&hosts, CLIENT_SESSION);
        let member = connected_member(&zk, &ensemble);
        if ensemble.member(member).mode() == Some(Mode::Follower) {
            break (zk, member);
        }
        assert!(attempts < 20, "never connected to a follower");
        zk.close().unwrap();
    };
    let negotiated = zk.session_timeout().unwrap();
    let id = zk.client_id().unwrap();
    let base = unique("pause");
    create(&zk, &base, b"0", CreateMode::Persistent);
    let ephemeral = format!("{base}/ephemeral");
    create(&zk, &ephemeral, b"", CreateMode::Ephemeral);
    let (_, _, on_data) = zk.get_watch(&base).unwrap();
    let events = zk.session_events();

    let paused_at = Instant::now();
    ensemble.pause(paused).unwrap();
    // A write issued now is stuck on the frozen member until the client gives up on it.
    let stuck = zk.set(&base, b"1", None);
    let stuck_for = paused_at.elapsed();
    // The C client fails requests pending on a server that stopped answering with
    // OperationTimeout (ZOPERATIONTIMEOUT), a kind of connection loss.
    let stuck = stuck.unwrap_err();
    assert!(stuck.is_connection_loss(), "{stuck:?}");
    wait_for_state(&events, SessionState::Connected, WAIT);
    let moved_after = paused_at.elapsed();
    let now_on = connected_member(&zk, &ensemble);
    assert_ne!(now_on, paused);
    assert!(
        moved_after < negotiated,
        "moved after {moved_after:?}, session timeout {negotiated:?}"
    );
    assert_eq!(zk.client_id().unwrap(), id);
    // Keeps working on the new member; its session and watch are intact.
    zk.set(&base, b"2", None).unwrap();
    expect_event(&on_data, EventType::NodeDataChanged, &base);
    assert!(zk.exists(&ephemeral).unwrap().is_some());
    let other = connect(&ensemble.member(now_on).connect_string(), CLIENT_SESSION);
    assert_eq!(
        other.exists(&ephemeral).unwrap().unwrap().ephemeral_owner,
        id.session_id
    );

    ensemble.resume(paused).unwrap();
    ensemble.wait_for_all_serving(WAIT).unwrap();
    let back = connect(&ensemble.member(paused).connect_string(), CLIENT_SESSION);
    back.sync(&base).unwrap();
    assert_eq!(back.get(&base).unwrap().0, b"2");
    zk.set(&base, b"3", None).unwrap();
    assert_eq!(zk.live_contexts(), 0);
    zk.close().unwrap();
    println!(
        "paused follower {paused}: a write stuck {stuck_for:?} then {stuck:?}; client \
         on member {now_on} {moved_after:?} after the pause (session timeout {negotiated:?}, \
         read timeout 2/3 of it); same session; test took {:?}",
        started.elapsed()
    );
}

// ================================================================ recipes under chaos

/// Session timeout of the lock and id-generator children.
const CHILD_SESSION_MS: u64 = 6000;
/// Session timeout of the work-queue consumers: short, so a killed consumer's item comes
/// back soon.
const CONSUMER_SESSION_MS: u64 = 4000;
const LOCK_PROCESSES: usize = 4;
/// The last lock process has its session expired (SIGSTOP longer than the session
/// timeout) while it holds the lock for the n-th time.
const VICTIM_ROUND: u64 = 30;
/// Work-queue consumers at the start, and the item count at which each parks mid-item
/// to be SIGKILLed (0: never).
const CONSUMER_PARK_AT: [u64; 4] = [6, 18, 0, 0];
/// Id generator children: batch sizes (1 = a CAS per id).
const ID_BATCHES: [u64; 2] = [1, 25];
/// Lock acquisitions between two member kills.
const CHAOS_STEP: u64 = 70;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Progress of the workload, shared with the chaos thread and the producer.
#[derive(Default)]
struct Progress {
    lock_ok: u64,
    wq_done: u64,
    member_kills: u64,
    finished: bool,
}

#[derive(Default)]
struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.progress.lock().unwrap());
        self.changed.notify_all();
    }

    /// Waits until `done` holds or the workload is finished; false on timeout.
    fn wait(&self, timeout: Duration, done: impl Fn(&Progress) -> bool) -> bool {
        let guard = self.progress.lock().unwrap();
        let (guard, result) = self
            .changed
            .wait_timeout_while(guard, timeout, |p| !p.finished && !done(p))
            .unwrap();
        drop(guard);
        !result.timed_out()
    }

    fn get<T>(&self, f: impl FnOnce(&Progress) -> T) -> T {
        f(&self.progress.lock().unwrap())
    }
}

/// Sets `finished` when dropped, also while the test unwinds, so helper threads stop.
struct FinishOnDrop<'a>(&'a Shared);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.update(|p| p.finished = true);
    }
}

/// One member kill of the chaos thread.
#[derive(Debug)]
struct Kill {
    member: usize,
    was_leader: bool,
    down: Duration,
    restart: Duration,
}

/// Kills a member after every `CHAOS_STEP` lock acquisitions (alternately the leader and
/// a follower), lets the workload run on two members, restarts it.
fn chaos(ensemble: &Ensemble, shared: &Shared) -> Vec<Kill> {
    let mut kills = Vec::new();
    let progress = |p: &Progress| p.lock_ok + p.wq_done;
    for round in 0.. {
        let base = shared.get(progress);
        shared.wait(Duration::from_secs(90), |p| {
            progress(p) >= base + CHAOS_STEP
        });
        if shared.get(|p| p.finished) {
            break;
        }
        let leader = ensemble.wait_for_leader(WAIT).expect("a leader");
        let member = if round % 2 == 0 {
            leader
        } else {
            (leader + 1 + round / 2 % 2) % 3
        };
        let killed = Instant::now();
        ensemble.kill(member);
        shared.update(|p| p.member_kills += 1);
        let base = shared.get(progress);
        shared.wait(Duration::from_secs(60), |p| {
            progress(p) >= base + CHAOS_STEP / 3
        });
        let down = killed.elapsed();
        let restarting = Instant::now();
        ensemble
            .restart(member)
            .unwrap_or_else(|e| panic!("restarting member {member}: {e}"));
        kills.push(Kill {
            member,
            was_leader: member == leader,
            down,
            restart: restarting.elapsed(),
        });
    }
    ensemble
        .wait_for_all_serving(WAIT)
        .expect("all members back");
    kills
}

/// The parent's side of the forced expiry: freezes the victim, waits until the server
/// has expired its session (its lock node is deleted) and another process has taken the
/// lock (the owner token moved past the victim's), then lets it run again.
fn expire_victim(
    zk: &ZooKeeper,
    shared: &Shared,
    pid: u32,
    node: &str,
    owner: &str,
    token: u64,
) -> (Duration, Duration) {
    assert!(signal(pid, libc::SIGSTOP), "SIGSTOP the victim");
    let stopped = Instant::now();
    let (stat, deleted) = retry(zk, "exists_watch", || zk.exists_watch(node));
    assert!(stat.is_some(), "the victim's lock node {node} is there");
    while timed_out(deleted.wait_timeout(Duration::from_millis(500))) {
        assert!(
            stopped.elapsed() < Duration::from_secs(120),
            "never expired"
        );
        if shared.get(|p| p.finished) {
            break;
        }
    }
    let expired_after = stopped.elapsed();
    loop {
        let (data, _, changed) = retry(zk, "get_watch", || zk.get_watch(owner));
        if parse_token(&data).is_some_and(|t| t > token) || shared.get(|p| p.finished) {
            break;
        }
        while timed_out(changed.wait_timeout(Duration::from_millis(500))) {
            assert!(
                stopped.elapsed() < Duration::from_secs(120),
                "lock not taken over"
            );
            if shared.get(|p| p.finished) {
                break;
            }
        }
    }
    let taken_over_after = stopped.elapsed();
    assert!(signal(pid, libc::SIGCONT), "SIGCONT the victim");
    (expired_after, taken_over_after)
}

/// The fencing token in the owner node (`None`: nobody has held the lock yet).
fn parse_token(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// The payloads of the items in the work queue now (`None` if it cannot be read, e.g.
/// during an election).
fn queue_payloads(zk: &ZooKeeper, queue: &str) -> Option<HashSet<String>> {
    let items = format!("{queue}/items");
    let mut payloads = HashSet::new();
    for name in zk.get_children(&items).ok()? {
        match zk.get(&format!("{items}/{name}")) {
            Ok((data, _)) => {
                payloads.insert(String::from_utf8_lossy(&data).into_owned());
            }
            Err(Error::NoNode) => {}
            Err(_) => return None,
        }
    }
    Some(payloads)
}

/// A critical section as reported by a lock child.
#[derive(Debug, Clone)]
struct Section {
    child: usize,
    token: u64,
    enter: u64,
    exit: u64,
    outcome: String,
    lost: String,
    released: String,
}

/// Lock, work queue and id generators, each run by separate processes, all at once,
/// while members are killed and restarted, a lock holder's session is expired and
/// consumers are SIGKILLed mid-item.
#[test]
fn recipes_survive_member_kills_expiry_and_consumer_kills() {
    let _serial = serial();
    let started = Instant::now();
    let lock_rounds = env_num("ZK_CHAOS_LOCK_ROUNDS", 250);
    let items = env_num("ZK_CHAOS_ITEMS", 200) as usize;
    let ensemble = start_ensemble();
    let hosts = ensemble.connect_string();
    let zk = connect(&hosts, CLIENT_SESSION);
    let base = unique("recipes");
    let lock_path = format!("{base}/lock");
    let owner = format!("{base}/owner");
    let queue_path = format!("{base}/queue");
    let counter_path = format!("{base}/ids");
    create(&zk, &base, b"", CreateMode::Persistent);
    create(&zk, &owner, b"", CreateMode::Persistent);
    drop(WorkQueue::new(&zk, &queue_path).expect("work queue"));
    IdGenerator::create_counter(
        &zk,
        &counter_path,
        &zookeeper_recipes::NodeOptions::default(),
    )
    .expect("id counter");

    let shared = Shared::default();
    let (events_tx, events) = mpsc::channel();
    let mut children = Children::new();
    let mut roles: HashMap<usize, &'static str> = HashMap::new();
    for i in 0..LOCK_PROCESSES {
        let victim = i == LOCK_PROCESSES - 1;
        let spec = Spec::build(&[
            ("hosts", hosts.clone()),
            ("lock", lock_path.clone()),
            ("owner", owner.clone()),
            ("rounds", lock_rounds.to_string()),
            (
                "victim_round",
                if victim { VICTIM_ROUND } else { 0 }.to_string(),
            ),
            ("session_ms", CHILD_SESSION_MS.to_string()),
        ]);
        let c = children.spawn(CHILD_ENTRY, &format!("lock-{i}"), "lock", &spec, &events_tx);
        roles.insert(c, "lock");
    }
    let consumer_spec = |park_at: u64| {
        Spec::build(&[
            ("hosts", hosts.clone()),
            ("queue", queue_path.clone()),
            ("park_at", park_at.to_string()),
            ("session_ms", CONSUMER_SESSION_MS.to_string()),
        ])
    };
    for (i, park_at) in CONSUMER_PARK_AT.iter().enumerate() {
        let c = children.spawn(
            CHILD_ENTRY,
            &format!("consumer-{i}"),
            "wq",
            &consumer_spec(*park_at),
            &events_tx,
        );
        roles.insert(c, "wq");
    }
    for (i, batch) in ID_BATCHES.iter().enumerate() {
        let spec = Spec::build(&[
            ("hosts", hosts.clone()),
            ("counter", counter_path.clone()),
            ("batch", batch.to_string()),
            ("threads", "2".to_string()),
            ("session_ms", CHILD_SESSION_MS.to_string()),
        ]);
        let c = children.spawn(CHILD_ENTRY, &format!("ids-{i}"), "ids", &spec, &events_tx);
        roles.insert(c, "ids");
    }

    // Results gathered from the children's reports.
    let mut sections: Vec<Section> = Vec::new();
    let mut lock_errors: Vec<String> = Vec::new();
    let mut lock_done: HashSet<usize> = HashSet::new();
    let mut victim_report: Option<Vec<String>> = None;
    let mut victim_parent: Option<(Duration, Duration)> = None;
    let mut took: Vec<(usize, String)> = Vec::new();
    let mut done: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut consumer_kills: Vec<(String, String)> = Vec::new();
    let mut wq_other: Vec<String> = Vec::new();
    let mut completion_failed: HashSet<String> = HashSet::new();
    let mut ids: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut id_stats: Vec<String> = Vec::new();
    let mut id_errors: Vec<String> = Vec::new();
    let mut ids_stopped = 0;
    let mut produced: Option<(Vec<String>, Vec<String>)> = None;
    let deadline = started + Duration::from_secs(400);

    let kills = thread::scope(|s| {
        let _finish = FinishOnDrop(&shared);
        let chaos_thread = s.spawn(|| chaos(&ensemble, &shared));
        // The producer puts the items in four batches, one before each of the first
        // member kills, so the queue is fed through the chaos.
        let (produced_tx, produced_rx) = mpsc::channel();
        {
            let (hosts, queue_path, shared) = (&hosts, &queue_path, &shared);
            s.spawn(move || {
                let zk = connect(hosts, CLIENT_SESSION);
                let queue = WorkQueue::new(&zk, queue_path).expect("producer queue");
                let (mut acked, mut uncertain) = (Vec::new(), Vec::new());
                let per_batch = items.div_ceil(4);
                for n in 0..items {
                    if n > 0 && n % per_batch == 0 {
                        let batch = (n / per_batch) as u64;
                        shared.wait(Duration::from_secs(90), |p| p.member_kills >= batch);
                    }
                    let mut payload = format!("item-{n:04}");
                    let mut attempt = 0;
                    loop {
                        match queue.put(payload.as_bytes()) {
                            Ok(()) => break,
                            Err(e) => {
                                // Maybe enqueued, never twice: retry under a new name.
                                uncertain.push(format!("{payload} ({e})"));
                                attempt += 1;
                                payload = format!("item-{n:04}-retry{attempt}");
                                let _ = zk.wait_connected(WAIT);
                            }
                        }
                    }
                    acked.push(payload);
                }
                let _ = produced_tx.send((acked, uncertain));
                zk.close().unwrap();
            });
        }
        let (victim_tx, victim_rx) = mpsc::channel();
        // Every acknowledged item completed: reported DONE, or, if its consumer's
        // `complete` failed with a connection loss (outcome unknown), gone from the queue
        // (only a completion removes an item node).
        let all_items_done = |produced: &Option<(Vec<String>, Vec<String>)>,
                              done: &BTreeMap<String, Vec<usize>>,
                              failed: &HashSet<String>| {
            let Some((acked, _)) = produced else {
                return false;
            };
            let open: Vec<&String> = acked.iter().filter(|i| !done.contains_key(*i)).collect();
            if open.is_empty() {
                return true;
            }
            open.iter().all(|i| failed.contains(*i))
                && queue_payloads(&zk, &queue_path)
                    .is_some_and(|queued| open.iter().all(|i| !queued.contains(*i)))
        };
        let mut ids_stopping = false;
        loop {
            if produced.is_none() {
                produced = produced_rx.try_recv().ok();
            }
            if let Ok(result) = victim_rx.try_recv() {
                victim_parent = Some(result);
            }
            let work_done = lock_done.len() == LOCK_PROCESSES
                && all_items_done(&produced, &done, &completion_failed);
            if work_done && !ids_stopping {
                ids_stopping = true;
                shared.update(|p| p.finished = true);
                for c in 0..children.len() {
                    match roles[&c] {
                        "ids" => children.send_line(c, "stop"),
                        "wq" => children.close_stdin(c),
                        _ => {}
                    }
                }
            }
            if work_done && ids_stopped == ID_BATCHES.len() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let event = match events.recv_timeout(left.min(Duration::from_millis(500))) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => continue,
                Err(e) => panic!(
                    "the workload did not finish ({e}): {} lock sections ({} \
                     processes done), {} of {items} items done, produced: {}",
                    sections.len(),
                    lock_done.len(),
                    done.len(),
                    produced.is_some()
                ),
            };
            let (child, words) = match event {
                Event::Line { child, words } => (child, words),
                Event::Eof { child } => {
                    let name = children.get(child).name.clone();
                    let status = children.reap(child, WAIT);
                    let killed = consumer_kills.iter().any(|(n, _)| *n == name);
                    if !killed {
                        assert!(status.success(), "child {name} failed: {status}");
                    }
                    if roles[&child] == "lock" {
                        assert!(lock_done.contains(&child), "{name} exited early");
                    }
                    continue;
                }
            };
            let word = |i: usize| words.get(i).map(String::as_str).unwrap_or("");
            let name = children.get(child).name.clone();
            match (roles[&child], word(0)) {
                ("lock", "CS") => {
                    let section = Section {
                        child,
                        token: word(1).parse().unwrap(),
                        enter: word(2).parse().unwrap(),
                        exit: word(3).parse().unwrap(),
                        outcome: word(4).to_string(),
                        lost: word(5).to_string(),
                        released: word(6).to_string(),
                    };
                    if section.outcome == "ok" && section.lost == "none" && section.released == "ok"
                    {
                        shared.update(|p| p.lock_ok += 1);
                    }
                    sections.push(section);
                }
                ("lock", "HOLDING") => {
                    let node = word(1).to_string();
                    let token: u64 = word(2).parse().unwrap();
                    let pid = children.get(child).pid();
                    let (zk, shared, owner, victim_tx) = (&zk, &shared, &owner, victim_tx.clone());
                    s.spawn(move || {
                        let result = expire_victim(zk, shared, pid, &node, owner, token);
                        let _ = victim_tx.send(result);
                    });
                }
                ("lock", "VICTIM") => victim_report = Some(words.clone()),
                ("lock", "DONE") => {
                    lock_done.insert(child);
                }
                ("lock", _) => lock_errors.push(format!("{name}: {}", words.join(" "))),
                ("wq", "TOOK") => took.push((child, word(1).to_string())),
                ("wq", "DONE") => {
                    done.entry(word(1).to_string()).or_default().push(child);
                    shared.update(|p| p.wq_done += 1);
                }
                ("wq", "PARKED") => {
                    // SIGKILL mid-item; a fresh consumer takes its place.
                    children.kill(child);
                    consumer_kills.push((name.clone(), word(1).to_string()));
                    let c = children.spawn(
                        CHILD_ENTRY,
                        &format!("{name}-replacement"),
                        "wq",
                        &consumer_spec(0),
                        &events_tx,
                    );
                    roles.insert(c, "wq");
                }
                ("wq", other) => {
                    if other == "FAILED" {
                        completion_failed.insert(word(1).to_string());
                    }
                    wq_other.push(format!("{name}: {}", words.join(" ")));
                }
                ("ids", "IDS") => ids
                    .entry(child)
                    .or_default()
                    .extend(words[1..].iter().map(|w| w.parse::<u64>().unwrap())),
                ("ids", "STATS") => id_stats.push(format!("{name}: {}", words[1..].join(" "))),
                ("ids", "DONE") => ids_stopped += 1,
                ("ids", _) => id_errors.push(format!("{name}: {}", words.join(" "))),
                (role, other) => panic!("unexpected report {other:?} from a {role} child"),
            }
        }
        if victim_parent.is_none() {
            victim_parent = victim_rx.recv_timeout(WAIT).ok();
        }
        chaos_thread.join().expect("chaos thread")
    });
    let workload_time = started.elapsed();

    // ---- lock: no two critical sections of live sessions overlap, tokens grow.
    let victim_child = (0..LOCK_PROCESSES).last().unwrap();
    let excluded = |s: &Section| {
        s.outcome == "victim"
            || matches!(s.lost.as_str(), "SessionExpired" | "NodeDeleted" | "Closed")
    };
    let mut checked: Vec<&Section> = sections.iter().filter(|s| !excluded(s)).collect();
    checked.sort_by_key(|s| s.enter);
    for pair in checked.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            a.exit < b.enter,
            "critical sections overlap: {a:?} and {b:?}"
        );
        assert!(
            a.token < b.token,
            "fencing tokens out of order: {a:?}, {b:?}"
        );
    }
    let tokens: HashSet<u64> = sections.iter().map(|s| s.token).collect();
    assert_eq!(
        tokens.len(),
        sections.len(),
        "a fencing token was handed out twice"
    );
    let violations: Vec<&&Section> = checked
        .iter()
        .filter(|s| {
            s.outcome.starts_with("stale")
                || s.outcome.starts_with("conflict")
                || s.outcome.starts_with("changed")
        })
        .collect();
    assert!(violations.is_empty(), "owner checks failed: {violations:?}");
    let ok = checked
        .iter()
        .filter(|s| s.outcome == "ok" && s.lost == "none" && s.released == "ok")
        .count() as u64;
    assert!(
        ok >= LOCK_PROCESSES as u64 * lock_rounds,
        "{ok} clean acquisitions"
    );
    let aborted = checked
        .iter()
        .filter(|s| s.outcome.starts_with("abort"))
        .count();
    let lost_disconnected = checked.iter().filter(|s| s.lost == "Disconnected").count();
    let expired_others: Vec<&Section> = sections
        .iter()
        .filter(|s| s.outcome != "victim" && excluded(s))
        .collect();
    // The expired holder learned it through its guard, and was fenced off.
    let victim = victim_report.expect("the victim reported");
    let victim_section = sections
        .iter()
        .find(|s| s.outcome == "victim")
        .expect("the victim's section");
    assert_eq!(victim_section.child, victim_child);
    // Which notice comes first depends on the server: expiring the session deletes the
    // node, and the NodeDeleted notification for the victim's own watch is queued on its
    // connection before the server closes it; the victim reads it on SIGCONT, before it
    // reconnects and hears "expired". Both say the lock is gone; the grace period keeps
    // the disconnection itself from being reported first.
    assert!(
        matches!(victim[1].as_str(), "SessionExpired" | "NodeDeleted"),
        "victim learned {victim:?}"
    );
    // The old session can write nothing: SessionExpired once the client has heard the
    // verdict, ConnectionLoss if the write went out while it was still finding out.
    assert!(
        matches!(
            victim[2].as_str(),
            "SessionExpired" | "ConnectionLoss" | "OperationTimeout"
        ),
        "the old session still worked: {victim:?}"
    );
    let owner_after: u64 = victim[3].parse().unwrap();
    assert!(owner_after > victim_section.token, "{victim:?}");
    assert_eq!(
        victim[4], "BadVersion",
        "the stale CAS went through: {victim:?}"
    );
    let (expired_after, taken_over_after) = victim_parent.expect("victim handled");
    let owner_now = parse_token(&zk.get(&owner).unwrap().0).expect("an owner token");
    let max_ok = checked.iter().map(|s| s.token).max().unwrap();
    assert!(owner_now >= max_ok);

    // ---- work queue: every acknowledged item completed exactly once, none left.
    let (acked, uncertain_puts) = produced.expect("producer finished");
    let queued = queue_payloads(&zk, &queue_path).expect("queue listing");
    let mut unacknowledged_completions = Vec::new();
    for item in &acked {
        assert!(!queued.contains(item), "{item} is still in the queue");
        match done.get(item).map_or(0, Vec::len) {
            1 => {}
            // Completed (it is gone), but the consumer's `complete` reported a
            // connection loss: done once, without an acknowledgement.
            0 if completion_failed.contains(item) => unacknowledged_completions.push(item),
            0 => panic!("{item} was lost"),
            n => panic!("{item} completed {n} times"),
        }
    }
    for (item, by) in &done {
        assert_eq!(by.len(), 1, "{item} completed {} times", by.len());
        assert!(
            acked.contains(item) || uncertain_puts.iter().any(|u| u.starts_with(item.as_str())),
            "{item} was never put"
        );
    }
    for (consumer, item) in &consumer_kills {
        let by = done
            .get(item)
            .unwrap_or_else(|| panic!("{item} of killed {consumer} lost"));
        assert_ne!(children.get(by[0]).name, *consumer);
    }
    assert_eq!(
        consumer_kills.len(),
        CONSUMER_PARK_AT.iter().filter(|p| **p > 0).count()
    );
    zk.sync(&queue_path).unwrap();
    assert_eq!(
        zk.get_children(&format!("{queue_path}/items")).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        zk.get_children(&format!("{queue_path}/locks")).unwrap(),
        Vec::<String>::new()
    );

    // ---- id generators: no id handed out twice.
    let mut seen = HashSet::new();
    let mut per_child = Vec::new();
    for (child, drawn) in &ids {
        per_child.push(format!("{}: {}", children.get(*child).name, drawn.len()));
        for id in drawn {
            assert!(seen.insert(*id), "id {id} handed out twice");
        }
    }
    let total_ids = seen.len();
    assert!(total_ids > 0);
    let counter = String::from_utf8(zk.get(&counter_path).unwrap().0).unwrap();
    let high: u64 = counter.split(' ').next().unwrap().parse().unwrap();
    assert!(
        seen.iter().all(|id| *id <= high),
        "an id above the counter {high}"
    );

    let leader_kills = kills.iter().filter(|k| k.was_leader).count();
    println!(
        "recipes under chaos: workload {workload_time:?}, test {:?}",
        started.elapsed()
    );
    println!(
        "  member kills: {} ({leader_kills} leaders, {} followers): {:?}",
        kills.len(),
        kills.len() - leader_kills,
        kills
            .iter()
            .map(|k| format!(
                "m{}{} down {:?} restart {:?}",
                k.member,
                if k.was_leader { "(L)" } else { "" },
                k.down,
                k.restart
            ))
            .collect::<Vec<_>>()
    );
    println!(
        "  lock: {} acquisitions by {LOCK_PROCESSES} processes, {ok} clean, {aborted} \
         aborted by connection loss, {lost_disconnected} reported Disconnected, no overlap, \
         tokens increasing; sessions expired: victim + {} others {:?}; errors {}: {:?}",
        sections.len(),
        expired_others.len(),
        expired_others,
        lock_errors.len(),
        lock_errors.iter().take(5).collect::<Vec<_>>()
    );
    println!(
        "  lock victim: SIGSTOP, session expired after {expired_after:?}, lock taken over \
         after {taken_over_after:?}; on SIGCONT its guard reported {}, old session \
         {}, owner token {owner_after} > {}, stale CAS {}",
        victim[1], victim[2], victim_section.token, victim[4]
    );
    println!(
        "  work queue: {} items put (uncertain puts, retried under a new name: {:?}), {} \
         takes, {} completions \
         acknowledged + {} unacknowledged, each exactly once; {} consumers SIGKILLed \
         mid-item {:?}; other reports {:?}",
        acked.len(),
        uncertain_puts,
        took.len(),
        done.len(),
        unacknowledged_completions.len(),
        consumer_kills.len(),
        consumer_kills,
        wq_other
    );
    println!(
        "  ids: {total_ids} unique ids ({}), counter at {high}; {} errors {:?}",
        per_child.join(", "),
        id_errors.len(),
        id_errors.iter().take(5).collect::<Vec<_>>()
    );
    for stats in id_stats {
        println!("    {stats}");
    }
}

// ================================================================ child processes

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

fn connect_child(hosts: &str, session: Duration) -> ZooKeeper {
    loop {
        match ZooKeeper::builder(hosts)
            .session_timeout(session)
            .connect_timeout(WAIT)
            .connect()
        {
            Ok(zk) => return zk,
            Err(e) => report(format_args!("ERR connect {e:?}")),
        }
    }
}

/// Retries a recipe constructor (it creates its nodes, which can fail under chaos).
fn make<T>(zk: &ZooKeeper, what: &str, f: impl Fn() -> zookeeper_recipes::Result<T>) -> T {
    loop {
        match f() {
            Ok(value) => return value,
            Err(e) => {
                report(format_args!("ERR {what} {}", word(&e)));
                let _ = zk.wait_connected(WAIT);
            }
        }
    }
}

/// A value as one report word.
fn word(value: &dyn std::fmt::Debug) -> String {
    format!("{value:?}").replace(char::is_whitespace, "")
}

fn lock_child(spec: &Spec) {
    let _stdin = watch_stdin();
    let hosts = spec.get("hosts");
    let path = spec.get("lock");
    let owner = spec.get("owner");
    let rounds = spec.num("rounds");
    let victim_round = spec.num("victim_round");
    let session = Duration::from_millis(spec.num("session_ms"));
    // The victim waits for the server's verdict (the expiry) rather than reporting the
    // disconnection as a loss at once (the default).
    let grace = if victim_round > 0 {
        Duration::from_secs(120)
    } else {
        Duration::ZERO
    };
    let new_lock = |zk: &ZooKeeper| {
        make(zk, "lock", || {
            Lock::new(zk, path).map(|l| l.with_disconnect_grace(grace))
        })
    };
    let mut zk = connect_child(hosts, session);
    let mut lock = new_lock(&zk);
    let mut ok = 0;
    let mut victim_pending = victim_round > 0;
    while ok < rounds {
        if zk.state().is_terminal() {
            zk = connect_child(hosts, session);
            lock = new_lock(&zk);
        }
        let guard = match lock.acquire(WAIT).optional() {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                report(format_args!("ERR acquire-timeout"));
                continue;
            }
            Err(e) => {
                report(format_args!("ERR acquire {}", word(&e)));
                let _ = zk.wait_connected(WAIT);
                continue;
            }
        };
        let token = u64::try_from(guard.fencing_token()).expect("a zxid is positive");
        let enter = now_ns();
        let outcome = if victim_pending && ok + 1 >= victim_round {
            match victim_section(&zk, &guard, token, owner, hosts, session) {
                Some(outcome) => {
                    victim_pending = false;
                    outcome
                }
                None => "abort:victim-entry".to_string(),
            }
        } else {
            critical_section(&zk, token, owner)
        };
        let exit = now_ns();
        let lost = guard.lost_reason().map_or("none".to_string(), |r| word(&r));
        let released = match guard.release() {
            Ok(()) => "ok".to_string(),
            Err(e) => word(&e),
        };
        report(format_args!(
            "CS {token} {enter} {exit} {outcome} {lost} {released}"
        ));
        if outcome == "ok" && lost == "none" && released == "ok" {
            ok += 1;
        }
    }
    report(format_args!("DONE {ok}"));
}

/// Entering the critical section: move the owner znode from the previous holder's token
/// to ours by compare-and-set. `Err` is the outcome to report.
fn enter_section(zk: &ZooKeeper, token: u64, owner: &str) -> Result<zookeeper::Stat, String> {
    let (data, stat) = zk
        .get(owner)
        .map_err(|e| format!("abort:get:{}", word(&e)))?;
    if let Some(previous) = parse_token(&data).filter(|p| *p >= token) {
        return Err(format!("stale:{previous}"));
    }
    match zk.set(owner, token.to_string().as_bytes(), Some(stat.version)) {
        Ok(stat) => Ok(stat),
        Err(Error::BadVersion) => Err("conflict".to_string()),
        Err(e) => Err(format!("abort:set:{}", word(&e))),
    }
}

/// Inside the lock: enter (see `enter_section`), then check nobody changed the owner
/// node before leaving. A second holder inside at the same time would make one of the
/// two fail (stale token, bad version, or changed).
fn critical_section(zk: &ZooKeeper, token: u64, owner: &str) -> String {
    let written = match enter_section(zk, token, owner) {
        Ok(stat) => stat,
        Err(outcome) => return outcome,
    };
    match zk.get(owner) {
        Ok((data, stat))
            if parse_token(&data) == Some(token) && stat.version == written.version =>
        {
            "ok".to_string()
        }
        Ok((data, stat)) => format!("changed:{}:{}", word(&parse_token(&data)), stat.version),
        Err(e) => format!("abort:verify:{}", word(&e)),
    }
}

/// The victim's critical section: enter as usual, report, and wait (frozen by the
/// parent meanwhile) until the guard says the lock is lost. Then show the fencing: the
/// old session can do nothing, and a compare-and-set at the version we wrote fails
/// because a later holder moved the owner node on. `None` if entering failed (chaos):
/// the victim tries again next time.
fn victim_section(
    zk: &ZooKeeper,
    guard: &LockGuard,
    token: u64,
    owner: &str,
    hosts: &str,
    session: Duration,
) -> Option<String> {
    let written = enter_section(zk, token, owner).ok()?;
    let lost = guard.lost();
    report(format_args!("HOLDING {} {token}", guard.node()));
    let reason = match lost.recv_timeout(Duration::from_secs(180)) {
        Ok(reason) => reason,
        Err(_) => return Some("victim-never-told".to_string()),
    };
    assert_eq!(guard.lost_reason(), Some(reason));
    let old = match zk.set(owner, token.to_string().as_bytes(), Some(written.version)) {
        Ok(_) => "applied".to_string(),
        Err(e) => word(&e),
    };
    let fresh = connect_child(hosts, session);
    let (data, _) = retry(&fresh, "get owner", || fresh.get(owner));
    let cas = match fresh.set(owner, token.to_string().as_bytes(), Some(written.version)) {
        Ok(_) => "applied".to_string(),
        Err(e) => word(&e),
    };
    fresh.close().unwrap();
    report(format_args!(
        "VICTIM {} {old} {} {cas}",
        word(&reason),
        parse_token(&data).map_or("none".to_string(), |t| t.to_string())
    ));
    Some("victim".to_string())
}

fn consumer_child(spec: &Spec) {
    let _stdin = watch_stdin();
    let hosts = spec.get("hosts");
    let path = spec.get("queue");
    let park_at = spec.num("park_at");
    let session = Duration::from_millis(spec.num("session_ms"));
    let mut zk = connect_child(hosts, session);
    let mut queue = make(&zk, "queue", || WorkQueue::new(&zk, path));
    let mut taken = 0;
    loop {
        if zk.state().is_terminal() {
            zk = connect_child(hosts, session);
            queue = make(&zk, "queue", || WorkQueue::new(&zk, path));
        }
        let item = match queue.take(Duration::from_secs(5)).optional() {
            Ok(Some(item)) => item,
            Ok(None) => continue,
            Err(e) => {
                report(format_args!("ERR take {}", word(&e)));
                let _ = zk.wait_connected(WAIT);
                continue;
            }
        };
        taken += 1;
        let data = String::from_utf8_lossy(item.data()).into_owned();
        report(format_args!("TOOK {data}"));
        if taken == park_at {
            // Mid-item: the parent SIGKILLs us now.
            report(format_args!("PARKED {data}"));
            loop {
                thread::park();
            }
        }
        match item.complete() {
            Ok(()) => report(format_args!("DONE {data}")),
            Err(RecipeError::Lost(_)) => report(format_args!("LOSTITEM {data}")),
            Err(e) => report(format_args!("FAILED {data} {}", word(&e))),
        }
    }
}

fn ids_child(spec: &Spec) {
    let lines = watch_stdin();
    let hosts = spec.get("hosts");
    let path = spec.get("counter");
    let batch = spec.num("batch");
    let threads = spec.num("threads");
    let session = Duration::from_millis(spec.num("session_ms"));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            for line in lines {
                if line == "stop" {
                    stop.store(true, Ordering::SeqCst);
                }
            }
        });
    }
    thread::scope(|s| {
        for t in 0..threads {
            let stop = &stop;
            s.spawn(move || {
                let mut zk = connect_child(hosts, session);
                let mut ids = make(&zk, "ids", || {
                    IdGenerator::new(&zk, path).and_then(|ids| ids.with_batch(batch))
                });
                let mut total = IdStats::default();
                let mut drawn = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    match ids.next_id() {
                        Ok(id) => drawn.push(id),
                        Err(e) => {
                            report(format_args!("ERR next_id {}", word(&e)));
                            if zk.state().is_terminal() {
                                add(&mut total, &ids.stats());
                                zk = connect_child(hosts, session);
                                ids = make(&zk, "ids", || {
                                    IdGenerator::new(&zk, path)
                                        .and_then(|ids| ids.with_batch(batch))
                                });
                            } else {
                                let _ = zk.wait_connected(WAIT);
                            }
                        }
                    }
                    if drawn.len() == 100 {
                        report(format_args!("IDS {}", join(&drawn)));
                        drawn.clear();
                    }
                }
                if !drawn.is_empty() {
                    report(format_args!("IDS {}", join(&drawn)));
                }
                add(&mut total, &ids.stats());
                report(format_args!("STATS thread {t} batch {batch}: {total}"));
            });
        }
    });
    report(format_args!("DONE"));
}

fn join(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
}

fn add(total: &mut IdStats, s: &IdStats) {
    total.ids += s.ids;
    total.reservations += s.reservations;
    total.cas_attempts += s.cas_attempts;
    total.conflicts += s.conflicts;
    total.connection_losses += s.connection_losses;
    total.recovered += s.recovered;
    total.discarded_ranges += s.discarded_ranges;
    total.discarded_ids += s.discarded_ids;
    total.reads += s.reads;
}
