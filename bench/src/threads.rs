//! `threads`: what waiting and following cost in threads, on one session.
//!
//! Starts, on one session, N pending async lock acquires on one lock held by another
//! session, N pending async takes on one empty queue, and M each of node caches, leader
//! latches, persistent nodes and config watches (blocking constructors; the async ones
//! where the API has them), printing after each step the threads the process gained
//! (`/proc/self/status`), the live contexts of both sessions and the recipes' background
//! tasks (`zookeeper_mt_recipes::live_background_tasks`). Then it drops them all (10 items
//! put into the queue before the takes go, the held lock released after the acquires
//! went) and waits up to 30 s for those counts to come back to the baseline, and checks
//! that the dropped ones left no node behind, took no queue item and no lock.
//!
//! The futures are kept on this thread by a tiny executor ([`pending`]): no runtime, so
//! every thread counted is one the client or the recipes started.

mod pending;
mod table;

use crate::flags::Flags;
use crate::rust_client::{connect, delete_tree, ensure_path, Result};
use pending::Pending;
use std::time::{Duration, Instant};
use table::{Snapshot, Table};
use zookeeper_mt::{CreateMode, Error, ZooKeeper};
use zookeeper_mt_recipes::caches::ConfigWatch;
use zookeeper_mt_recipes::caches::NodeCache;
use zookeeper_mt_recipes::leadership::{LatchStatus, LeaderLatch};
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::nodes::PersistentNode;
use zookeeper_mt_recipes::queues::Queue;

/// The timeout of every pending acquire and take (they never get to it).
const WAIT_TIMEOUT: Duration = Duration::from_secs(600);
/// How long started things get to reach their waiting state.
const SETTLE: Duration = Duration::from_secs(60);
/// How long dropped things get to give back their threads, contexts, tasks and nodes.
const DRAIN: Duration = Duration::from_secs(30);
/// Threads one row may add (the driver thread, the timer thread).
const ROW_THREADS: u64 = 4;
/// Threads everything started may add (the target).
const TOTAL_THREADS: u64 = 16;
/// Items put into the queue before the pending takes are dropped.
const ITEMS: usize = 10;

/// The paths used, under one base removed at the end.
struct Dirs {
    base: String,
    lock: String,
    queue: String,
    latch: String,
    persistent: String,
    /// The nodes the caches and config watches follow.
    watched: Vec<String>,
}

pub fn main(flags: &Flags) -> Result<()> {
    if let Some(bad) = flags.unknown(&["hosts", "quick", "check"]).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let (n, each) = if flags.switch("quick") {
        (100, 20)
    } else {
        (1000, 200)
    };
    let (_server, hosts) = flags.hosts_or_start()?;
    let zk = connect(&hosts)?;
    let other = connect(&hosts)?;
    let base = format!("/zkthreads-{}", std::process::id());
    let dirs = Dirs {
        lock: format!("{base}/lock"),
        queue: format!("{base}/queue"),
        latch: format!("{base}/latch"),
        persistent: format!("{base}/persistent"),
        watched: (0..each)
            .map(|i| format!("{base}/watched/n{i:04}"))
            .collect(),
        base,
    };
    ensure_path(&zk, &format!("{}/watched", dirs.base))?;
    ensure_path(&zk, &dirs.persistent)?;
    for path in &dirs.watched {
        zk.create(path, b"v1", CreateMode::Persistent)?;
    }
    let outcome = run(&zk, &other, &dirs, n, each);
    if let Err(error) = delete_tree(&zk, &dirs.base) {
        eprintln!("threads: could not remove {}: {error}", dirs.base);
    }
    let all_passed = outcome?;
    if flags.switch("check") && !all_passed {
        return Err("a target failed (see FAIL above)".into());
    }
    Ok(())
}

/// Runs both phases; whether every target passed.
fn run(zk: &ZooKeeper, other: &ZooKeeper, dirs: &Dirs, n: usize, each: usize) -> Result<bool> {
    let snap = || Snapshot::now(&[zk, other]);
    println!(
        "## Threads, live contexts and background tasks: {n} pending acquires, {n} pending \
         takes, {each} of each follower, on one session\n"
    );
    let mut table = Table::start(snap());
    let baseline_names = thread_names();

    let holder_lock = Lock::new(other, &dirs.lock)?;
    let held = holder_lock.acquire(Duration::from_secs(30))?;
    table.row("1 lock held by another session (setup)", snap(), None);

    let lock = Lock::new(zk, &dirs.lock)?;
    let mut acquires = Pending::new();
    for _ in 0..n {
        acquires.push(lock.acquire_async(WAIT_TIMEOUT));
    }
    acquires.drive_until(Instant::now() + SETTLE, || lock.waiting() >= n);
    let what = format!(
        "{n} pending async lock acquires (`Lock::acquire_async`, one lock): {} pending, {} on a watch, {} completed",
        acquires.pending(),
        lock.waiting(),
        acquires.outputs().count()
    );
    table.row(&what, snap(), Some(ROW_THREADS));

    let queue = Queue::new(zk, &dirs.queue)?;
    let mut takes = Pending::new();
    for _ in 0..n {
        takes.push(queue.take_async(WAIT_TIMEOUT));
    }
    takes.drive_until(Instant::now() + SETTLE, || queue.waiting() >= n);
    let what = format!(
        "{n} pending async queue takes (`Queue::take_async`, one empty queue): {} pending, {} on the watch, {} completed",
        takes.pending(),
        queue.waiting(),
        takes.outputs().count()
    );
    table.row(&what, snap(), Some(ROW_THREADS));

    let same = "the same constructor serves async callers: it sends nothing and waits for nothing (the task on the driver does the work)";
    let caches = dirs
        .watched
        .iter()
        .map(|path| NodeCache::new(zk, path))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    for cache in &caches {
        cache.wait_initialized(SETTLE)?;
    }
    table.row(
        &format!("{each} node caches (`NodeCache::new`), initialized"),
        snap(),
        Some(ROW_THREADS),
    );
    table.not_started(&format!("{each} node caches, async API"), same);

    let latches = (0..each)
        .map(|i| {
            LeaderLatch::builder(&dirs.latch)
                .id(format!("p{i}"))
                .build(zk)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let settled = settle(|| {
        latches.iter().all(|latch| match latch.status() {
            LatchStatus::Leading => true,
            LatchStatus::Waiting => latch.armed_watches() == 1,
            _ => false,
        })
    });
    table.row(
        &format!("{each} leader latches (`LeaderLatch::new`, one election){settled}"),
        snap(),
        Some(ROW_THREADS),
    );
    table.not_started(&format!("{each} leader latches, async API"), same);

    let nodes = (0..each)
        .map(|i| PersistentNode::new(zk, &format!("{}/n{i:04}", dirs.persistent), b"x"))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    for node in &nodes {
        node.wait_created(SETTLE)?;
    }
    let settled = settle(|| nodes.iter().all(|node| node.armed_watches() == 1));
    table.row(
        &format!("{each} persistent nodes (`PersistentNode::new`), created{settled}"),
        snap(),
        Some(ROW_THREADS),
    );
    table.not_started(&format!("{each} persistent nodes, async API"), same);

    let configs = dirs
        .watched
        .iter()
        .map(|path| ConfigWatch::new(zk, path))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    table.row(
        &format!("{each} config watches (`ConfigWatch::new`)"),
        snap(),
        Some(ROW_THREADS),
    );
    let mut starts = Pending::new();
    for path in &dirs.watched {
        starts.push(ConfigWatch::new_async(zk, path));
    }
    starts.drive_all(Instant::now() + SETTLE);
    let async_configs = starts
        .into_outputs()
        .into_iter()
        .collect::<std::result::Result<Vec<_>, _>>()?;
    table.row(
        &format!(
            "{} more config watches (`ConfigWatch::new_async`, driven without a thread)",
            async_configs.len()
        ),
        snap(),
        Some(ROW_THREADS),
    );
    table.total(snap(), TOTAL_THREADS);

    println!("\n## After dropping every future and every instance\n");
    // A producer on the other session: the takes are only woken, never polled again.
    let producer = Queue::new(other, &dirs.queue)?;
    for i in 0..ITEMS {
        producer.put(format!("item {i}").as_bytes())?;
    }
    drop(producer);
    let originals = item_names(zk, &dirs.queue)?;
    let dropping = Instant::now();
    let completed_takes = takes.outputs().count();
    drop(takes);
    drop(queue);
    let completed_acquires = acquires.outputs().count();
    drop(acquires);
    held.release()?;
    drop(holder_lock);
    drop(caches);
    drop(latches);
    drop(nodes);
    drop(configs);
    drop(async_configs);
    println!(
        "dropping took {:.0} ms ({completed_takes} takes and {completed_acquires} acquires had completed before)",
        dropping.elapsed().as_secs_f64() * 1e3
    );

    let baseline = table.baseline();
    let waiting = Instant::now();
    let left = |dir: &str| children(zk, dir).map(|c| c.len());
    let (now, lock_left, latch_left, persistent_left) = loop {
        let now = snap();
        let counts = (
            left(&dirs.lock)?,
            left(&dirs.latch)?,
            left(&dirs.persistent)?,
        );
        let clean = counts == (0, 0, 0);
        if (now.within(&baseline) && clean) || waiting.elapsed() >= DRAIN {
            break (now, counts.0, counts.1, counts.2);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let back = now.within(&baseline) && (lock_left, latch_left, persistent_left) == (0, 0, 0);
    println!(
        "{} after {:.2} s (polled every 50 ms, deadline {} s)\n",
        if back {
            "back to the baseline, no node left,"
        } else {
            "NOT back to the baseline or nodes left"
        },
        waiting.elapsed().as_secs_f64(),
        DRAIN.as_secs()
    );
    if now.threads > baseline.threads {
        println!(
            "threads beyond the baseline's (by name): {}\n",
            extra_names(&baseline_names).join(", ")
        );
    }
    // A dropped acquire woken by the release (or holding a node at the head) took it.
    let took = lock.wakeups() > 0 || head_owned_by(zk, &dirs.lock)?;
    drop(lock);
    let remaining = item_names(zk, &dirs.queue)?;
    let kept = originals.iter().filter(|n| remaining.contains(n)).count();
    let others = remaining.len() - kept;

    println!("| check | now | expected | target |\n|---|---:|---:|---|");
    for (what, value, expected) in [
        (
            "threads of the process vs the baseline",
            now.threads,
            baseline.threads,
        ),
        (
            "live contexts vs the baseline",
            now.contexts as u64,
            baseline.contexts as u64,
        ),
        (
            "background tasks vs the baseline",
            now.tasks as u64,
            baseline.tasks as u64,
        ),
        ("nodes left under the lock dir", lock_left as u64, 0),
        ("nodes left under the latch dir", latch_left as u64, 0),
        (
            "nodes left under the persistent nodes dir",
            persistent_left as u64,
            0,
        ),
    ] {
        let pass = value <= expected;
        table.check(what, value.to_string(), format!("<= {expected}"), pass);
    }
    table.check(
        "queue items still there (the originals, by name)",
        format!("{kept} of {} (+{others} others)", originals.len()),
        format!("{ITEMS} of {ITEMS} (+0 others)"),
        kept == ITEMS && originals.len() == ITEMS && others == 0,
    );
    table.check(
        "a dropped acquire took the lock",
        if took { "yes" } else { "no" }.to_string(),
        "no".to_string(),
        !took,
    );
    Ok(table.summary())
}

/// Waits (up to 5 s: these are refinements, the starts returned already) for `done`;
/// a note for the row if it did not hold.
fn settle(mut done: impl FnMut() -> bool) -> &'static str {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        if Instant::now() >= deadline {
            return " (not all settled after 5 s)";
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ""
}

/// The names of this process's threads (`/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect()
}

/// The names of the threads running now that `baseline` does not account for.
fn extra_names(baseline: &[String]) -> Vec<String> {
    let mut known = baseline.to_vec();
    let mut extra = Vec::new();
    for name in thread_names() {
        match known.iter().position(|k| *k == name) {
            Some(i) => {
                known.swap_remove(i);
            }
            None => extra.push(name),
        }
    }
    extra
}

fn children(zk: &ZooKeeper, dir: &str) -> Result<Vec<String>> {
    match zk.get_children(dir) {
        Ok(children) => Ok(children),
        Err(Error::NoNode) => Ok(Vec::new()),
        Err(error) => Err(error.into()),
    }
}

/// The queue's item nodes (its receipts directory left out).
fn item_names(zk: &ZooKeeper, dir: &str) -> Result<Vec<String>> {
    let mut items = children(zk, dir)?;
    items.retain(|name| name.starts_with("item"));
    Ok(items)
}

/// Whether the lock's first node (lowest sequence number) belongs to `zk`'s session.
fn head_owned_by(zk: &ZooKeeper, dir: &str) -> Result<bool> {
    let mut nodes = children(zk, dir)?;
    // The server's sequence suffix: the last 10 characters.
    nodes.sort_by_key(|name| name[name.len().saturating_sub(10)..].to_string());
    let Some(head) = nodes.first() else {
        return Ok(false);
    };
    let session = zk.client_id()?.session_id;
    Ok(match zk.exists(&format!("{dir}/{head}"))? {
        Some(stat) => stat.ephemeral_owner == session,
        None => false,
    })
}
