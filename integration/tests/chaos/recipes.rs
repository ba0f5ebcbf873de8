//! Recipes under chaos: lock, work queue and id generator processes while members are
//! killed and restarted, a lock holder's session is expired and consumers are SIGKILLed
//! mid-item.

use super::*;

mod workload;

use workload::{chaos, expire_victim, lock_state, queue_payloads, FinishOnDrop, Shared};

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

/// The fencing token in the owner node (`None`: nobody has held the lock yet).
pub(super) fn parse_token(data: &[u8]) -> Option<u64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
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
        &zookeeper_mt_recipes::NodeOptions::default(),
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
    let mut lock_sessions: Vec<String> = Vec::new();
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
    let deadline = started + Duration::from_secs(env_num("ZK_CHAOS_DEADLINE_S", 400));

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
                     processes done), {} of {items} items done, produced: {}\n{}",
                    sections.len(),
                    lock_done.len(),
                    done.len(),
                    produced.is_some(),
                    lock_state(
                        &ensemble,
                        &zk,
                        &lock_path,
                        &sections,
                        &lock_errors,
                        &lock_sessions
                    )
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
                ("lock", "SESSION") => lock_sessions.push(format!("{name}: {}", word(1))),
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
    // Which notice comes first depends on timing: the guard's liveness bound (the last
    // answered request's submit instant + the session timeout) has passed while the
    // victim was stopped, so on SIGCONT its timer may report "Disconnected" (the session
    // may be gone) before anything arrives; else the NodeDeleted notification queued on
    // its connection, or "expired" once it reconnects. All three say the lock is gone,
    // and all come before the victim's fenced write below.
    assert!(
        matches!(
            victim[1].as_str(),
            "SessionExpired" | "NodeDeleted" | "Disconnected"
        ),
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
