//! Drop steps: every request of a recipe call's async form, with its future dropped there.
//!
//! For each operation the driver first runs its async call once through a
//! [`FaultProxy`] to count the requests it sends (session upkeep left out, as in
//! `steps.rs`) and to find where it waits. Then, for every index `k` of that count, it
//! runs the call again on a fresh path (same proxy, same session) and drops its future:
//! - `Sent`: once the proxy has seen request `k` (connection healthy, reply unread);
//! - `Answered`: when woken by the reply of request `k`, without reading it;
//! - `Cut`: the connection cut after request `k` (applied, its reply lost), dropped
//!   while it waits for that reply (reconnecting is refused until the drop);
//! - `CutNoticed`: as `Cut`, dropped once it has seen the loss and waits to reconnect;
//! - `LostReply`: the reply of request `k` swallowed on a live connection, dropped while
//!   it waits for it;
//! - `Waiting` (only where the counting run waited after request `k`: a watch, a
//!   deadline): dropped while parked in that wait.
//!
//! Then, with the proxied session STILL OPEN (nothing may be left by a live session),
//! it waits for things to settle (polling with a deadline) and checks from an unproxied
//! admin session: no ephemeral node of the proxied session is left under the path but
//! the ones the recipe values legitimately hold; no watch or request is left
//! (`live_contexts()` of the proxied handle back to its baseline, plus the watches a
//! value keeps by design); an item is in the queue exactly once or was delivered exactly
//! once; no id is handed out twice; the recipe still works. Then it drops the recipe
//! values and checks that the session holds nothing under the path and no context.
//!
//! A poll or a drop that blocks (a blocking step inside an async call) is reported at
//! the end, not asserted. Each case prints its operation, `k` and variant;
//! `ZK_DROP_STEPS_ONLY=<name>[,<name>]` runs only those operations.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};
use zk_harness::fault_proxy::{Request, RequestMark};
use zk_harness::testing::{poll_until, unique_path};
use zk_harness::{FaultProxy, OpCode};
use zookeeper_mt::ZooKeeper;

#[path = "drop_steps/elections.rs"]
mod elections;
#[path = "drop_steps/ids.rs"]
mod ids;
#[path = "drop_steps/locks.rs"]
mod locks;
#[path = "drop_steps/queues.rs"]
mod queues;
#[path = "drop_steps/table.rs"]
mod table;

use elections::*;
use ids::*;
use locks::*;
use queues::*;
use table::ops;

/// Short, so a dropped reply is noticed soon (the next ping's reply exposes it).
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a call may take; long enough to ride out a reconnection.
const OP_TIMEOUT: Duration = Duration::from_secs(20);
/// The deadline of the calls that wait for a rival (a held lock, a leader, ...).
const WAIT: Duration = Duration::from_millis(1500);
/// A gap this long after a request of the counting run means the call waited there.
const WAITED: Duration = Duration::from_millis(400);
/// How long the `Waiting` variant lets the call sit in its wait before dropping it.
const PARKED: Duration = Duration::from_millis(200);
/// How long the checks wait for background work to settle.
const SETTLE: Duration = Duration::from_secs(30);
/// A poll (or drop) longer than this is reported: it may have blocked its executor.
const SLOW_POLL: Duration = Duration::from_millis(100);
/// A poll (or drop) this long certainly waited inside (a reconnection, a reply): it fails
/// the test. (The blocking steps this suite found took 1.5 to 2.7 s; a poll's own work
/// takes microseconds, also under a sanitizer.)
const BLOCKED: Duration = Duration::from_secs(1);
/// The slow polls and drops seen, reported at the end.
static SLOW_POLLS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// The polls and drops that blocked (at least [`BLOCKED`]).
static BLOCKED_POLLS: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Cases run (the counting runs left out).
static CASES: AtomicUsize = AtomicUsize::new(0);
/// Operations run at a time.
const WORKERS: usize = 4;

/// Cases left out of the asserted set: `(operation, k, variant)`, each with a `// KNOWN:`
/// comment saying why. They still run and print.
const KNOWN: &[(&str, u64, Variant)] = &[];

fn connect(hosts: &str) -> ZooKeeper {
    let zk = ZooKeeper::connect(hosts, SESSION_TIMEOUT).expect("connect");
    zk.wait_connected(OP_TIMEOUT).expect("connected");
    zk
}

/// Requests a call sends itself (not session upkeep).
fn counts(request: &Request) -> bool {
    ![
        OpCode::PING,
        OpCode::SET_WATCHES,
        OpCode::SET_WATCHES2,
        OpCode::AUTH,
        OpCode::CLOSE_SESSION,
    ]
    .contains(&request.op)
}

fn counted_since(proxy: &FaultProxy, mark: RequestMark) -> u64 {
    proxy
        .requests_since(mark)
        .iter()
        .filter(|r| counts(r))
        .count() as u64
}

fn err_text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

thread_local! {
    /// What completed calls returned (guards, leases, items), dropped right after the
    /// drive: a guard's drop may wait for its delete, which is no step of the call.
    static KEPT: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

/// `text`, keeping `value` until the call has been driven (see [`KEPT`]).
fn kept(text: String, value: impl Any) -> String {
    KEPT.with(|kept| kept.borrow_mut().push(Box::new(value)));
    text
}

fn lossy(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Dropped once request `k` was sent, its reply not read.
    Sent,
    /// Dropped when woken by the reply of request `k`, before reading it.
    Answered,
    /// The connection cut after request `k` (applied, reply lost); dropped at once.
    Cut,
    /// As `Cut`, dropped once the call has seen the loss and waits to reconnect.
    CutNoticed,
    /// The reply of request `k` swallowed on a live connection; dropped while waiting.
    LostReply,
    /// Dropped while parked in the wait that follows request `k`.
    Waiting,
}

/// What a call returned: its value as text, or the error's text.
type Outcome = Result<String, String>;
type Call<'a> = Pin<Box<dyn Future<Output = Outcome> + 'a>>;

/// The recipe values of one case: made on the proxied session (and the admin one for
/// rivals), they outlive the call, which borrows them.
trait Subject {
    /// The call under test.
    fn call(&mut self) -> Call<'_>;
    /// Checks the session's ephemeral nodes under the path (relative names) once the
    /// dropped call settled: by default there are none.
    fn ours(&self, ours: &[String]) -> Result<(), String> {
        match ours {
            [] => Ok(()),
            left => Err(format!("left behind: {left:?}")),
        }
    }
    /// Watches the values hold by design after the call (the range allowed above the
    /// handle's contexts before the call). `past_wait`: the call was dropped after its
    /// wait ended (as it did in the counting run).
    fn extra_contexts(&self, _outcome: Option<&Outcome>, _past_wait: bool) -> (usize, usize) {
        (0, 0)
    }
    /// Further state to wait for (items, lines); reads only, polled until it holds.
    fn settled(&self, _admin: &ZooKeeper, _outcome: Option<&Outcome>) -> Result<(), String> {
        Ok(())
    }
    /// Once settled: the guarantee that needs acting (the recipe still works, ids).
    fn after(&mut self, _admin: &ZooKeeper, _outcome: Option<&Outcome>) -> Result<(), String> {
        Ok(())
    }
}

/// A subject, or why it could not be made.
type Made = Result<Box<dyn Subject>, String>;

/// One recipe call under test.
struct Op {
    name: &'static str,
    /// Makes the subject on a fresh path: `(admin, proxied, path)`. Its requests are
    /// not counted.
    make: fn(&ZooKeeper, &ZooKeeper, &str) -> Made,
}

// ------------------------------------------------------------------ driving

struct Flag {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// What [`drive`] tells its `stop` before each poll.
#[derive(Clone, Copy)]
struct Look {
    /// The call was woken: it is about to be polled unless stopped now.
    woken: bool,
    /// Polls so far.
    polls: u64,
}

enum Driven {
    Done(Outcome),
    Stopped,
    Stuck,
}

/// Polls `call` whenever it is woken until it completes, `stop()` says to stop (asked
/// before every poll, so a wake-up caused by a reply is seen after the request it
/// answers is counted), or `limit` passes.
fn drive(
    call: &mut Call<'_>,
    limit: Duration,
    slowest: &mut Duration,
    mut stop: impl FnMut(Look) -> bool,
) -> Driven {
    let flag = Arc::new(Flag {
        thread: thread::current(),
        woken: AtomicBool::new(true),
    });
    let waker = Waker::from(Arc::clone(&flag));
    let mut cx = Context::from_waker(&waker);
    let deadline = Instant::now() + limit;
    let mut polls = 0;
    loop {
        let woken = flag.woken.swap(false, Ordering::AcqRel);
        if stop(Look { woken, polls }) {
            return Driven::Stopped;
        }
        if woken {
            polls += 1;
            let polled = Instant::now();
            let poll = call.as_mut().poll(&mut cx);
            *slowest = (*slowest).max(polled.elapsed());
            if let Poll::Ready(outcome) = poll {
                return Driven::Done(outcome);
            }
            continue;
        }
        if Instant::now() >= deadline {
            return Driven::Stuck;
        }
        // Also wakes up to look at the proxy, which reports nothing by itself.
        thread::park_timeout(Duration::from_millis(1));
    }
}

// ------------------------------------------------------------------ checks

/// The ephemeral nodes of `session` under `root`, relative to it.
fn ephemerals_of(admin: &ZooKeeper, root: &str, session: i64) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_string()];
    while let Some(path) = stack.pop() {
        let Ok(children) = admin.get_children(&path) else {
            continue;
        };
        for child in children {
            let child = format!("{path}/{child}");
            if let Ok(Some(stat)) = admin.exists(&child) {
                if stat.ephemeral_owner == session {
                    found.push(child[root.len() + 1..].to_string());
                }
            }
            stack.push(child);
        }
    }
    found.sort();
    found
}

/// Waits until `check` passes; its last complaint if it never does.
fn settles(mut check: impl FnMut() -> Result<(), String>) -> Result<(), String> {
    let mut last = Ok(());
    if poll_until(SETTLE, || {
        last = check();
        last.is_ok()
    }) {
        Ok(())
    } else {
        Err(format!("never settled: {}", last.err().unwrap_or_default()))
    }
}

/// The state of the proxied session the checks look at.
struct Session<'a> {
    zk: &'a ZooKeeper,
    id: i64,
    path: &'a str,
}

impl Session<'_> {
    fn contexts_within(&self, low: usize, high: usize) -> Result<(), String> {
        if !self.zk.state().is_connected() {
            return Err("the proxied session is not connected".into());
        }
        let now = self.zk.live_contexts();
        if now < low || now > high {
            return Err(format!("{now} live contexts, expected {low}..={high}"));
        }
        Ok(())
    }

    fn ours(&self, admin: &ZooKeeper) -> Vec<String> {
        ephemerals_of(admin, self.path, self.id)
    }
}

// ------------------------------------------------------------------ one case

struct Count {
    n: u64,
    /// Requests after whose reply the call waited.
    waits: Vec<u64>,
}

/// Runs `op` once without a fault, through every check: the number of requests and
/// where it waited.
fn count(op: &Op, rig: &Rig<'_>) -> Count {
    let mut times = Vec::new();
    let result = run_case(op, rig, None, None, &mut times);
    let (n, sent) = (times.len() as u64, result.expect("fault-free run"));
    assert!(n > 0, "{}: sent no request ({sent:?})", op.name);
    assert!(
        matches!(&sent, Some(Ok(_))) || op.name.ends_with("-held") || op.name.ends_with("-wait"),
        "{}: fails without a fault: {sent:?}",
        op.name
    );
    let end = Instant::now();
    let waits = (1..=n)
        .filter(|&k| {
            let next = times.get(k as usize).copied().unwrap_or(end);
            next.duration_since(times[k as usize - 1]) >= WAITED
        })
        .collect();
    Count { n, waits }
}

/// What the cases of one operation share.
struct Rig<'a> {
    proxy: &'a FaultProxy,
    /// The proxied session.
    zk: &'a ZooKeeper,
    admin: &'a ZooKeeper,
    /// The proxied handle's live contexts with no recipe value alive.
    base: usize,
}

/// One case: `fault` is `(k, variant)`, `None` for the counting run (driven to the end;
/// `times` gets the time each request was seen). Returns the call's outcome if it
/// completed, or the first failed check.
fn run_case(
    op: &Op,
    rig: &Rig<'_>,
    fault: Option<(u64, Variant)>,
    last_wait: Option<u64>,
    times: &mut Vec<Instant>,
) -> Result<Option<Outcome>, String> {
    let Rig {
        proxy,
        zk,
        admin,
        base,
    } = *rig;
    let started = Instant::now();
    let past_wait = matches!((fault, last_wait), (Some((k, _)), Some(w)) if k > w);
    let path = unique_path(op.name);
    let id = zk.client_id().map_err(err_text)?.session_id;
    let session = Session {
        zk,
        id,
        path: &path,
    };
    // The session's own baseline (no recipe value alive), not a value measured after
    // making the subject, which may still have a request of its own in flight.
    settles(|| session.contexts_within(base, base))?;
    let mut subject = (op.make)(admin, zk, &path).map_err(|e| format!("setup: {e}"))?;

    let mark = proxy.mark();
    // The proxy lists every fault it fired; this case's come after these.
    let fired_before = proxy.fired().len();
    match fault {
        Some((k, Variant::Cut | Variant::CutNoticed)) => {
            // Refused until the drop: the call cannot find out before it is dropped.
            proxy.block();
            proxy.cut_after_matching(k, counts);
        }
        Some((k, Variant::LostReply)) => proxy.drop_reply_matching(k, counts),
        _ => {}
    }
    // When request `k` was first seen sent (`Waiting`), or at which poll and when the
    // client was seen disconnected (`CutNoticed`).
    let mut reached: Option<Instant> = None;
    let mut noticed: Option<(u64, Instant)> = None;
    let mut slowest = Duration::ZERO;
    let slowest_drop;
    let driven = {
        let mut call = subject.call();
        let limit = if fault.is_some() { SETTLE } else { OP_TIMEOUT };
        let driven = drive(&mut call, limit, &mut slowest, |look| {
            let sent = counted_since(proxy, mark);
            while (times.len() as u64) < sent {
                times.push(Instant::now());
            }
            let fired = || proxy.fired().len() > fired_before;
            match fault {
                None => false,
                Some((k, Variant::Sent)) => sent >= k,
                // Woken after request `k` was sent: by its reply, which the call is
                // not allowed to read.
                Some((k, Variant::Answered)) => sent >= k && look.woken,
                Some((_, Variant::Cut | Variant::LostReply)) => fired(),
                Some((_, Variant::CutNoticed)) => {
                    if noticed.is_none() && fired() && !zk.state().is_connected() {
                        noticed = Some((look.polls, Instant::now()));
                    }
                    // Polled once since: it has seen the loss and waits to reconnect. A
                    // call that is not told (the latch's task is) is dropped soon all the
                    // same: reconnecting is refused meanwhile, and the session must live.
                    noticed.is_some_and(|(at, when)| {
                        (look.polls > at && !look.woken) || when.elapsed() >= PARKED
                    })
                }
                Some((k, Variant::Waiting)) => {
                    if sent > k {
                        return true; // it did not wait after all: dropped as `Sent`
                    }
                    if sent < k {
                        return false;
                    }
                    let since = *reached.get_or_insert_with(Instant::now);
                    since.elapsed() >= PARKED
                }
            }
        });
        let dropping = Instant::now();
        drop(call); // the point of it all
        slowest_drop = dropping.elapsed();
        driven
    };
    // Requests sent in the poll that completed the call count too (a blocking step).
    let sent = counted_since(proxy, mark);
    while (times.len() as u64) < sent {
        times.push(Instant::now());
    }
    KEPT.with(|kept| kept.borrow_mut().clear());
    proxy.unblock();
    // Still armed: its request never came. Else it may wait for its reply yet.
    let armed = matches!(
        fault,
        Some((_, Variant::Cut | Variant::CutNoticed | Variant::LostReply))
    );
    let pending_fault = armed && !proxy.is_armed();
    proxy.disarm();
    // An async call must not block its executor, nor its drop.
    let case = fault.map_or("counting run".into(), |(k, v)| format!("k={k} {v:?}"));
    for (what, took) in [("one poll", slowest), ("the drop", slowest_drop)] {
        if took >= SLOW_POLL {
            let line = format!("{} {case}: {what} blocked for {took:?}", op.name);
            println!("SLOW {line}");
            if took >= BLOCKED {
                BLOCKED_POLLS.lock().unwrap().push(line.clone());
            }
            SLOW_POLLS.lock().unwrap().push(line);
        }
    }
    let outcome = match driven {
        Driven::Done(outcome) => Some(outcome),
        Driven::Stopped => None,
        Driven::Stuck => return Err("the call neither completed nor reached its fault".into()),
    };
    if let Some((k, variant)) = fault {
        let fired = proxy.fired();
        let hit = fired
            .get(fired_before)
            .map_or("(no fault)".to_string(), |f| f.request.to_string());
        let what = match &outcome {
            Some(outcome) => format!("completed first: {outcome:?}"),
            None => format!("dropped, {} requests sent", times.len()),
        };
        println!("{} k={k} {variant:?}: {hit}: {what}", op.name);
    }
    // A fault already waiting for its reply still acts: let it.
    if pending_fault {
        let _ = proxy.wait_for_fired(fired_before + 1, SETTLE);
    }

    let outcome_ref = outcome.as_ref();
    settles(|| {
        let (low, high) = subject.extra_contexts(outcome_ref, past_wait);
        session.contexts_within(base + low, base + high)?;
        subject.ours(&session.ours(admin))?;
        subject.settled(admin, outcome_ref)
    })?;
    subject.after(admin, outcome_ref)?;
    drop(subject);
    settles(|| {
        session.contexts_within(base, base)?;
        match session.ours(admin).as_slice() {
            [] => Ok(()),
            left => Err(format!("left once the values were dropped: {left:?}")),
        }
    })?;
    if let Some((k, variant)) = fault {
        println!(
            "{} k={k} {variant:?}: checked after {:?}",
            op.name,
            started.elapsed()
        );
    }
    match zk.client_id() {
        Ok(now) if now.session_id == id => Ok(outcome),
        other => Err(format!("the proxied session did not survive: {other:?}")),
    }
}

/// Every case of `op` on one proxy and one session; the failures.
fn run_op(op: &Op, server: &str, admin: &ZooKeeper) -> Vec<String> {
    let started = Instant::now();
    let proxy = FaultProxy::start(server).unwrap();
    let zk = connect(&proxy.connect_string());
    let rig = Rig {
        proxy: &proxy,
        zk: &zk,
        admin,
        // What the session holds by itself: every case must come back to it.
        base: zk.live_contexts(),
    };
    let Count { n, waits } = count(op, &rig);
    println!("{}: {n} requests, waits after {waits:?}", op.name);
    let mut cases: Vec<(u64, Variant)> = Vec::new();
    for variant in [
        Variant::Sent,
        Variant::Answered,
        Variant::Cut,
        Variant::CutNoticed,
        Variant::LostReply,
    ] {
        cases.extend((1..=n).map(|k| (k, variant)));
    }
    cases.extend(waits.iter().map(|&k| (k, Variant::Waiting)));
    let mut failures = Vec::new();
    for (k, variant) in cases {
        let last_wait = waits.last().copied();
        let fault = Some((k, variant));
        let result = run_case(op, &rig, fault, last_wait, &mut Vec::new());
        CASES.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = result {
            let known = KNOWN.contains(&(op.name, k, variant));
            let line = format!("{} k={k}/{n} {variant:?}: {error}", op.name);
            println!("{}{line}", if known { "KNOWN " } else { "FAILED " });
            if !known {
                failures.push(line);
            }
        }
    }
    println!("{}: done in {:?}", op.name, started.elapsed());
    failures
}

#[test]
fn every_call_can_be_dropped_after_every_request() {
    let started = Instant::now();
    let server = zk_harness::shared_test_connect_string();
    let admin = connect(&server);
    let tasks_before = zookeeper_mt_recipes::live_background_tasks();
    let only = std::env::var("ZK_DROP_STEPS_ONLY").ok();
    let ops: Vec<Op> = ops()
        .into_iter()
        .filter(|op| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|o| o == op.name))
        })
        .collect();
    assert!(!ops.is_empty(), "no operation named {only:?}");
    // A few operations at a time: each waits on the server most of the time (the
    // longest ones come first in the table).
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let (server, admin, ops) = (&server, &admin, &ops);
    thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                while let Some(op) = ops.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let run =
                        std::panic::catch_unwind(AssertUnwindSafe(|| run_op(op, server, admin)));
                    let failed = run.unwrap_or_else(|_| vec![format!("{}: panicked", op.name)]);
                    failures.lock().unwrap().extend(failed);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let cases = CASES.load(Ordering::Relaxed);
    println!(
        "{} operations, {cases} cases in {:?}",
        ops.len(),
        started.elapsed()
    );
    let slow = SLOW_POLLS.lock().unwrap();
    if !slow.is_empty() {
        println!(
            "{} blocking polls or drops:\n{}",
            slow.len(),
            slow.join("\n")
        );
    }
    let blocked = BLOCKED_POLLS.lock().unwrap();
    assert!(
        blocked.is_empty(),
        "{} polls or drops blocked their executor:\n{}",
        blocked.len(),
        blocked.join("\n")
    );
    assert!(
        failures.is_empty(),
        "{} failed cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let settled = poll_until(SETTLE, || {
        zookeeper_mt_recipes::live_background_tasks() <= tasks_before
    });
    assert!(
        settled,
        "{} background tasks left (before: {tasks_before})",
        zookeeper_mt_recipes::live_background_tasks()
    );
}
