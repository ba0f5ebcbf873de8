//! The child processes: one session per incarnation, a thread per recipe role, each
//! appending what it did to the shared history.

use super::*;
use std::sync::{Condvar, Mutex};

#[test]
fn child_worker() {
    if child_role().as_deref() != Some(CHILD) {
        return;
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let hosts = env("FH_HOSTS");
    let paths = Paths {
        base: env("FH_BASE"),
    };
    let history = PathBuf::from(env("FH_HISTORY"));
    let name = env("FH_NAME");
    let batch: u64 = env("FH_BATCH").parse().expect("FH_BATCH");

    let stop = Arc::new(AtomicBool::new(false));
    let lines = watch_parent();
    {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            for line in lines {
                if line.trim() == "stop" {
                    stop.store(true, Ordering::SeqCst);
                }
            }
        });
    }

    let config = {
        let (hosts, path, history, name, stop) = (
            hosts.clone(),
            paths.config(),
            history.clone(),
            name.clone(),
            Arc::clone(&stop),
        );
        thread::spawn(move || config_role(&hosts, &path, &history, &name, &stop))
    };

    let mut incarnations = 0;
    let mut totals: BTreeMap<&'static str, u64> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        let zk = connect(&hosts);
        let events = zk.session_events();
        let id = zk.client_id().expect("client id");
        report(
            "SESSION|",
            format!("{} {}", id.session_id, hex(&id.password)),
        );
        let over = Arc::new(Over::default());
        let ctx = Ctx {
            zk: zk.clone(),
            paths: paths.clone(),
            history: history.clone(),
            owner: format!("{name}.{incarnations}"),
            stop: Arc::clone(&stop),
            over: Arc::clone(&over),
            batch,
        };
        let roles: Vec<(&'static str, JoinHandle<u64>)> = vec![
            ("lock", ctx.spawn(lock_role)),
            ("lead", ctx.spawn(election_role)),
            ("sem", ctx.spawn(semaphore_role)),
            ("put", ctx.spawn(queue_producer)),
            ("take", ctx.spawn(queue_consumer)),
            ("submit", ctx.spawn(work_producer)),
            ("work", ctx.spawn(work_consumer)),
            ("ids", ctx.spawn(id_role)),
            ("latch", ctx.spawn(latch_role)),
            ("lease", ctx.spawn(lease_role)),
            ("count", ctx.spawn(counter_role)),
            ("member", ctx.spawn(membership::member_role)),
        ];
        let mut disturbances = HistoryWriter::append_to(&history).expect("history");
        while !stop.load(Ordering::SeqCst) {
            if let Ok(event) = events.recv_timeout(Duration::from_millis(100)) {
                if !matches!(
                    event.state,
                    SessionState::Connected | SessionState::ConnectedReadOnly
                ) {
                    disturbances
                        .write(
                            &Event::new(DISTURBED)
                                .with("owner", &ctx.owner)
                                .with("at", monotonic_nanos()),
                        )
                        .expect("history");
                }
                if event.state == SessionState::Expired {
                    break;
                }
            }
            if zk.state() == SessionState::Expired {
                break;
            }
        }
        over.set();
        for (what, handle) in roles {
            *totals.entry(what).or_default() += handle.join().expect("role thread");
        }
        let _ = zk.close();
        incarnations += 1;
    }
    let seen = config.join().expect("config role");
    let totals: Vec<String> = totals.iter().map(|(k, n)| format!("{k}={n}")).collect();
    report(
        "DONE|",
        format!(
            "{name} sessions={incarnations} {} config_seen={seen}",
            totals.join(" ")
        ),
    );
}

/// The end of an incarnation, waitable.
#[derive(Default)]
pub(super) struct Over {
    flag: Mutex<bool>,
    changed: Condvar,
}

impl Over {
    fn set(&self) {
        *self.flag.lock().expect("incarnation flag") = true;
        self.changed.notify_all();
    }

    fn is_set(&self) -> bool {
        *self.flag.lock().expect("incarnation flag")
    }
}

/// What a role thread works with: one incarnation of the child's main session.
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) zk: ZooKeeper,
    pub(super) paths: Paths,
    pub(super) history: PathBuf,
    pub(super) owner: String,
    pub(super) stop: Arc<AtomicBool>,
    /// Set when this incarnation ends (its session expired, or the parent said stop).
    pub(super) over: Arc<Over>,
    pub(super) batch: u64,
}

impl Ctx {
    pub(super) fn live(&self) -> bool {
        !self.stop.load(Ordering::SeqCst) && !self.over.is_set()
    }

    /// Blocks until this incarnation ends.
    pub(super) fn wait_until_over(&self) {
        let mut over = self.over.flag.lock().expect("incarnation flag");
        while !*over {
            over = self.over.changed.wait(over).expect("incarnation flag");
        }
    }

    fn spawn(&self, role: fn(&Ctx, &mut HistoryWriter) -> u64) -> JoinHandle<u64> {
        let ctx = self.clone();
        thread::spawn(move || {
            let mut writer = HistoryWriter::append_to(&ctx.history).expect("history");
            role(&ctx, &mut writer)
        })
    }

    /// A pause after a failed call (most fail only after waiting for a reconnect).
    fn back_off(&self) {
        thread::sleep(Duration::from_millis(50));
    }

    /// Whether node `path` still exists with czxid `czxid`, read after a `sync` (so not
    /// from a member behind the leader); returns the czxid seen.
    fn confirm(&self, path: &str, czxid: Option<i64>) -> Option<i64> {
        self.zk.sync(path).ok()?;
        let stat = self.zk.exists(path).ok()??;
        (czxid.is_none() || czxid == Some(stat.czxid)).then_some(stat.czxid)
    }

    fn section(&self, w: &mut HistoryWriter, role: &str, token: i64, start: u64, end: u64) {
        w.record(&CriticalSection {
            owner: format!("{role}:{}", self.owner),
            token,
            start,
            end,
        })
        .expect("history");
    }
}

/// A little work inside a critical section: one round trip.
fn work_inside(ctx: &Ctx) {
    let _ = ctx.zk.exists(&ctx.paths.base);
}

fn lock_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let mut n = 0;
    let Ok(lock) = Lock::new(&ctx.zk, &ctx.paths.lock()) else {
        return 0;
    };
    while ctx.live() {
        match lock.acquire(TURN).optional() {
            Ok(Some(guard)) => {
                let start = monotonic_nanos();
                work_inside(ctx);
                let end = monotonic_nanos();
                let token = guard.fencing_token();
                if ctx.confirm(guard.node(), Some(token)).is_some() {
                    ctx.section(w, "lock", token, start, end);
                    n += 1;
                }
                let _ = guard.release();
            }
            Ok(None) => {}
            Err(_) => ctx.back_off(),
        }
    }
    n
}

fn election_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let mut n = 0;
    while ctx.live() {
        let candidate = match LeaderElection::new(&ctx.zk, &ctx.paths.election(), b"c") {
            Ok(c) => c,
            Err(_) => {
                ctx.back_off();
                continue;
            }
        };
        while ctx.live() {
            match candidate.wait_until_leader(TURN) {
                Ok(()) => {
                    let start = monotonic_nanos();
                    work_inside(ctx);
                    let end = monotonic_nanos();
                    let token = candidate.fencing_token();
                    let node = format!("{}/{}", ctx.paths.election(), candidate.node());
                    if ctx.confirm(&node, Some(token)).is_some() {
                        ctx.section(w, "lead", token, start, end);
                        n += 1;
                    }
                    break;
                }
                Err(zookeeper_mt_recipes::RecipeError::Timeout) => {}
                Err(_) => {
                    ctx.back_off();
                    break;
                }
            }
        }
        let _ = candidate.resign();
    }
    n
}

fn semaphore_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let mut n = 0;
    let dir = ctx.paths.semaphore();
    let Ok(semaphore) = Semaphore::new(&ctx.zk, &dir, PERMITS) else {
        return 0;
    };
    while ctx.live() {
        match semaphore.acquire(TURN) {
            Ok(lease) => {
                let start = monotonic_nanos();
                work_inside(ctx);
                let end = monotonic_nanos();
                let node = format!("{dir}/{}", lease.node());
                if let Some(czxid) = ctx.confirm(&node, None) {
                    ctx.section(w, "sem", czxid, start, end);
                    n += 1;
                }
                let _ = lease.release();
            }
            Err(zookeeper_mt_recipes::RecipeError::Timeout) => {}
            Err(_) => ctx.back_off(),
        }
    }
    n
}

/// Every other put is a batch of three (`put_all`, one multi): each of its items must
/// keep the single put's guarantees too.
fn queue_producer(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(queue) = Queue::new(&ctx.zk, &ctx.paths.queue()) else {
        return 0;
    };
    produce(ctx, w, "q", Duration::from_millis(20), &[1, 3], |items| {
        match items {
            [item] => queue.put(item.as_bytes()),
            batch => queue.put_all(batch),
        }
        .is_ok()
    })
}

/// Puts `<prefix>:<owner>-<n>` items with `put` while the session lives, `sizes` items
/// at a time (in turn), a pause between puts, recording each item's put span (its end
/// only if acknowledged).
fn produce(
    ctx: &Ctx,
    w: &mut HistoryWriter,
    prefix: &str,
    pause: Duration,
    sizes: &[u64],
    put: impl Fn(&[String]) -> bool,
) -> u64 {
    let mut n = 0;
    for &size in sizes.iter().cycle() {
        if !ctx.live() {
            break;
        }
        let items: Vec<String> = (n..n + size)
            .map(|i| format!("{prefix}:{}-{i}", ctx.owner))
            .collect();
        let start = monotonic_nanos();
        let end = put(&items).then(monotonic_nanos);
        for item in items {
            w.record(&Put {
                item,
                producer: ctx.owner.clone(),
                start,
                end,
            })
            .expect("history");
        }
        n += size;
        thread::sleep(pause);
    }
    n
}

fn queue_consumer(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(queue) = Queue::new(&ctx.zk, &ctx.paths.queue()) else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        let start = monotonic_nanos();
        match queue.take(TURN).optional() {
            Ok(Some(data)) => {
                let take = Take {
                    item: String::from_utf8(data).expect("utf-8 item"),
                    consumer: ctx.owner.clone(),
                    at: monotonic_nanos(),
                };
                w.write(
                    &Event::new(TAKE_SPAN)
                        .with("item", &take.item)
                        .with("consumer", &take.consumer)
                        .with("start", start)
                        .with("at", take.at),
                )
                .expect("history");
                w.record(&take).expect("history");
                n += 1;
            }
            Ok(None) => {}
            Err(_) => ctx.back_off(),
        }
    }
    n
}

fn work_producer(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(queue) = WorkQueue::new(&ctx.zk, &ctx.paths.work()) else {
        return 0;
    };
    produce(ctx, w, "w", Duration::from_millis(30), &[1], |items| {
        queue.put(items[0].as_bytes()).is_ok()
    })
}

fn work_consumer(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(queue) = WorkQueue::new(&ctx.zk, &ctx.paths.work()) else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        match queue.take(TURN).optional() {
            Ok(Some(item)) => {
                let name = String::from_utf8(item.data().to_vec()).expect("utf-8 item");
                match item.complete() {
                    Ok(()) => {
                        w.record(&Completion {
                            item: name,
                            worker: ctx.owner.clone(),
                            at: monotonic_nanos(),
                        })
                        .expect("history");
                        n += 1;
                    }
                    Err(e) => w
                        .write(
                            &Event::new(COMPLETE_FAILED)
                                .with("item", &name)
                                .with("worker", &ctx.owner)
                                .with("error", e)
                                .with("at", monotonic_nanos()),
                        )
                        .expect("history"),
                }
            }
            Ok(None) => {}
            Err(_) => ctx.back_off(),
        }
    }
    n
}

fn id_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(ids) =
        IdGenerator::new(&ctx.zk, &ctx.paths.ids()).and_then(|ids| ids.with_batch(ctx.batch))
    else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        match ids.next_id() {
            Ok(id) => {
                w.record(&IssuedId {
                    id: id.to_string(),
                    owner: ctx.owner.clone(),
                })
                .expect("history");
                n += 1;
            }
            Err(_) => ctx.back_off(),
        }
        thread::sleep(Duration::from_millis(10));
    }
    n
}

/// Leader latch: a term is a section, judged like a lock's (never two leaders at once,
/// tokens growing); each term ends by relinquishing, so leadership keeps moving.
fn latch_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(latch) = LeaderLatch::new(&ctx.zk, &ctx.paths.latch()) else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        match latch.await_leadership(TURN) {
            Ok(guard) => {
                let start = monotonic_nanos();
                work_inside(ctx);
                let end = monotonic_nanos();
                let token = guard.token();
                if guard.check().is_ok() && ctx.confirm(guard.node(), Some(token)).is_some() {
                    ctx.section(w, "latch", token, start, end);
                    n += 1;
                }
                let _ = guard.relinquish();
            }
            Err(zookeeper_mt_recipes::RecipeError::Timeout) => {}
            Err(_) => ctx.back_off(),
        }
    }
    latch.close();
    n
}

/// The semaphore with leases (Curator's layout): at most `PERMITS` leases at once.
fn lease_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(semaphore) = LeaseSemaphore::new(
        &ctx.zk,
        &ctx.paths.leases(),
        PERMITS,
        SemaphoreLayout::Curator,
    ) else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        match semaphore.acquire(1, TURN) {
            Ok(mut leases) => {
                let start = monotonic_nanos();
                work_inside(ctx);
                let end = monotonic_nanos();
                if let Some(lease) = leases.pop() {
                    if let Some(czxid) = ctx.confirm(lease.node(), None) {
                        ctx.section(w, "lsem", czxid, start, end);
                        n += 1;
                    }
                    let _ = lease.release();
                }
            }
            Err(zookeeper_mt_recipes::RecipeError::Timeout) => {}
            Err(_) => ctx.back_off(),
        }
    }
    n
}

/// Ids of the shared counter's increments in the history (each increment's new value
/// must be unique: a lost or doubled increment repeats one).
pub(super) const COUNTER_PREFIX: &str = "count-";

/// The atomic long (Curator's `DistributedAtomicLong` layout): every acknowledged
/// increment's new value is recorded; two increments seeing the same value would mean
/// one was lost or applied twice.
fn counter_role(ctx: &Ctx, w: &mut HistoryWriter) -> u64 {
    let Ok(counter) = AtomicLong::new(&ctx.zk, &ctx.paths.counter()) else {
        return 0;
    };
    let mut n = 0;
    while ctx.live() {
        match counter.increment() {
            Ok(change) if change.succeeded => {
                w.record(&IssuedId {
                    id: format!("{COUNTER_PREFIX}{}", change.post),
                    owner: ctx.owner.clone(),
                })
                .expect("history");
                n += 1;
            }
            Ok(_) => {}
            Err(_) => ctx.back_off(),
        }
        thread::sleep(Duration::from_millis(10));
    }
    n
}

/// Follows the config node on a session of its own until stopped and the final value
/// has been seen; returns how many values it saw.
fn config_role(hosts: &str, path: &str, history: &Path, name: &str, stop: &AtomicBool) -> u64 {
    let mut w = HistoryWriter::append_to(history).expect("history");
    let zk = connect(hosts);
    let mut n = 0;
    let mut last = String::new();
    let mut stopped_at: Option<Instant> = None;
    'outer: loop {
        let watch = match ConfigWatch::new(&zk, path) {
            Ok(watch) => watch,
            Err(_) => {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        loop {
            if stop.load(Ordering::SeqCst) {
                let since = *stopped_at.get_or_insert_with(Instant::now);
                if last == FINAL || since.elapsed() > WAIT {
                    break 'outer;
                }
            }
            match watch.next(Duration::from_millis(200)) {
                Ok(event) => {
                    if let (Some(data), Some(stat)) = (event.data(), event.stat()) {
                        last = String::from_utf8_lossy(data).into_owned();
                        w.record(&ConfigSeen {
                            watcher: name.to_string(),
                            value: last.clone(),
                            mzxid: stat.mzxid,
                            at: monotonic_nanos(),
                        })
                        .expect("history");
                        n += 1;
                    }
                }
                Err(zookeeper_mt_recipes::RecipeError::Timeout) => {}
                Err(_) => break, // the watch ended: start another
            }
            if !watch.is_running() {
                break;
            }
        }
    }
    let _ = zk.close();
    n
}
