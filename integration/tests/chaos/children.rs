//! The child processes of the recipe chaos test: one role each (lock, work-queue
//! consumer, id generator), reporting in `CHAOS|` lines.

use super::recipes::parse_token;
use super::*;

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
fn make<T>(zk: &ZooKeeper, what: &str, f: impl Fn() -> zookeeper_mt_recipes::Result<T>) -> T {
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

pub(super) fn lock_child(spec: &Spec) {
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
    let report_session = |zk: &ZooKeeper| {
        if let Ok(id) = zk.client_id() {
            report(format_args!("SESSION {:#x}", id.session_id));
        }
    };
    let mut zk = connect_child(hosts, session);
    report_session(&zk);
    let mut lock = new_lock(&zk);
    let mut ok = 0;
    let mut victim_pending = victim_round > 0;
    while ok < rounds {
        if zk.state().is_terminal() {
            zk = connect_child(hosts, session);
            report_session(&zk);
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
fn enter_section(zk: &ZooKeeper, token: u64, owner: &str) -> Result<zookeeper_mt::Stat, String> {
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
    let reason = match lost.wait(Duration::from_secs(180)) {
        Ok(Some(reason)) => reason,
        Ok(None) | Err(_) => return Some("victim-never-told".to_string()),
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

pub(super) fn consumer_child(spec: &Spec) {
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

pub(super) fn ids_child(spec: &Spec) {
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
