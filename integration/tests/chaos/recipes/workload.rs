//! The parent's side of the recipe workload: its progress, the chaos thread that kills
//! and restarts members, the forced expiry of the lock victim, and what it reads from the
//! server (the queue's items, a stuck lock's state).

use super::*;

/// Progress of the workload, shared with the chaos thread and the producer.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) lock_ok: u64,
    pub(super) wq_done: u64,
    pub(super) member_kills: u64,
    pub(super) finished: bool,
}

#[derive(Default)]
pub(super) struct Shared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl Shared {
    pub(super) fn update(&self, f: impl FnOnce(&mut Progress)) {
        f(&mut self.progress.lock().unwrap());
        self.changed.notify_all();
    }

    /// Waits until `done` holds or the workload is finished; false on timeout.
    pub(super) fn wait(&self, timeout: Duration, done: impl Fn(&Progress) -> bool) -> bool {
        let guard = self.progress.lock().unwrap();
        let (guard, result) = self
            .changed
            .wait_timeout_while(guard, timeout, |p| !p.finished && !done(p))
            .unwrap();
        drop(guard);
        !result.timed_out()
    }

    pub(super) fn get<T>(&self, f: impl FnOnce(&Progress) -> T) -> T {
        f(&self.progress.lock().unwrap())
    }
}

/// Sets `finished` when dropped, also while the test unwinds, so helper threads stop.
pub(super) struct FinishOnDrop<'a>(pub(super) &'a Shared);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        self.0.update(|p| p.finished = true);
    }
}

/// One member kill of the chaos thread.
#[derive(Debug)]
pub(super) struct Kill {
    pub(super) member: usize,
    pub(super) was_leader: bool,
    pub(super) down: Duration,
    pub(super) restart: Duration,
}

/// Kills a member after every `CHAOS_STEP` lock acquisitions (alternately the leader and
/// a follower), lets the workload run on two members, restarts it.
pub(super) fn chaos(ensemble: &Ensemble, shared: &Shared) -> Vec<Kill> {
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
pub(super) fn expire_victim(
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

/// The payloads of the items in the work queue now (`None` if it cannot be read, e.g.
/// during an election).
pub(super) fn queue_payloads(zk: &ZooKeeper, queue: &str) -> Option<HashSet<String>> {
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

/// What a stuck lock workload looks like: each lock child's sections and last error, and
/// the lock's queue on the server with each node's owning session.
pub(super) fn lock_state(
    ensemble: &Ensemble,
    zk: &ZooKeeper,
    lock: &str,
    sections: &[Section],
    errors: &[String],
    sessions: &[String],
) -> String {
    let mut out = format!("lock children's sessions: {sessions:?}\n");
    for child in 0..LOCK_PROCESSES {
        let mine: Vec<&Section> = sections.iter().filter(|s| s.child == child).collect();
        out += &format!(
            "lock child {child}: {} sections, last {:?}\n",
            mine.len(),
            mine.last()
        );
    }
    out += &format!(
        "lock errors ({}), the last: {:?}\n",
        errors.len(),
        &errors[errors.len().saturating_sub(12)..]
    );
    let _ = zk.sync(lock);
    match zk.get_children(lock) {
        Ok(mut nodes) => {
            nodes.sort();
            for node in nodes {
                let owner = zk
                    .exists(&format!("{lock}/{node}"))
                    .map(|s| s.map(|s| format!("{:#x}", s.ephemeral_owner)));
                out += &format!("  {node}: session {owner:?}\n");
            }
        }
        Err(e) => out += &format!("  the lock's nodes cannot be listed: {e}\n"),
    }
    // Each member's own view, without a sync: a member that lost a transaction (the
    // server's DIFF-sync loss, ZOOKEEPER-4785) shows a node the others deleted.
    for (i, member) in ensemble.members().iter().enumerate() {
        let view = ZooKeeper::builder(&member.connect_string())
            .session_timeout(Duration::from_secs(4))
            .connect_timeout(Duration::from_secs(4))
            .connect()
            .and_then(|direct| {
                let mut nodes = direct.get_children(lock)?;
                nodes.sort();
                Ok(nodes)
            });
        out += &format!("  member {i} ({:?}) lists {view:?}\n", member.mode());
    }
    out
}
