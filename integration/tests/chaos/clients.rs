//! The client under faults: a killed or frozen member, a killed leader under a write
//! load. Sessions survive and no acknowledged write is lost.

use super::*;

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
