//! Judging the history: every checker over the recorded events, with the run's counts.

use super::*;

#[derive(Default)]
pub(super) struct Verdict {
    pub(super) counts: BTreeMap<&'static str, usize>,
    pub(super) violations: Vec<String>,
    /// Queue and work-queue items delivered twice or lost, kept apart so they can be
    /// traced to the ensemble's logs (see [`Verdict::trace_to_server`]).
    pub(super) items: Vec<ItemViolation>,
}

/// A queue or work-queue item whose delivery broke the guarantee.
pub(super) struct ItemViolation {
    /// The item (its data).
    pub(super) item: String,
    /// The violation, as the checker reports it.
    pub(super) text: String,
}

/// Drops the violations a documented exception covers; returns the rest and how many
/// were excused.
fn excuse(
    result: Result<(), Violations>,
    excused: impl Fn(&Violation) -> bool,
) -> (Result<(), Violations>, usize) {
    let Err(found) = result else {
        return (Ok(()), 0);
    };
    let (covered, list): (Vec<Violation>, Vec<Violation>) =
        found.list.into_iter().partition(|v| excused(v));
    let rest = if list.is_empty() {
        Ok(())
    } else {
        Err(Violations { list, ..found })
    };
    (rest, covered.len())
}

/// Splits a checker's result into item violations (duplicated, lost) and the rest.
fn split_items(
    result: Result<(), Violations>,
    items: &mut Vec<ItemViolation>,
) -> Result<(), Violations> {
    let Err(found) = result else { return Ok(()) };
    let mut rest = Vec::new();
    for violation in found.list {
        let item = match &violation {
            Violation::Duplicated { item, .. } => item.clone(),
            Violation::Lost { put } => put.item.clone(),
            _ => {
                rest.push(violation);
                continue;
            }
        };
        items.push(ItemViolation {
            item,
            text: format!("{}: {violation}", found.check),
        });
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(Violations {
            list: rest,
            ..found
        })
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (what, n) in &self.counts {
            write!(f, "{what}={n} ")?;
        }
        write!(f, "violations={}", self.violations.len() + self.items.len())
    }
}

pub(super) fn judge(history: &Path, summaries: &[String]) -> Verdict {
    let events = read_history(history).expect("reading the history");
    let of_kind = |kind: &str| -> Vec<_> {
        events
            .iter()
            .filter(|e| e.kind() == kind)
            .cloned()
            .collect()
    };
    let sections: Vec<CriticalSection> =
        records(&of_kind(CriticalSection::KIND)).expect("sections");
    let puts: Vec<Put> = records(&of_kind(Put::KIND)).expect("puts");
    let takes: Vec<Take> = records(&of_kind(Take::KIND)).expect("takes");
    let done: Vec<Completion> = records(&of_kind(Completion::KIND)).expect("completions");
    let ids: Vec<IssuedId> = records(&of_kind(IssuedId::KIND)).expect("ids");
    let seen: Vec<ConfigSeen> = records(&of_kind(ConfigSeen::KIND)).expect("config");

    let role = |prefix: &str| -> Vec<CriticalSection> {
        sections
            .iter()
            .filter(|s| s.owner.starts_with(prefix))
            .cloned()
            .collect()
    };
    let (locks, leads, leases) = (role("lock:"), role("lead:"), role("sem:"));
    let (latch_terms, curator_leases) = (role("latch:"), role("lsem:"));
    let queue_puts: Vec<Put> = puts
        .iter()
        .filter(|p| p.item.starts_with("q:"))
        .cloned()
        .collect();
    let work_puts: Vec<Put> = puts
        .iter()
        .filter(|p| p.item.starts_with("w:"))
        .cloned()
        .collect();
    let watchers: Vec<String> = (0..CHILDREN).map(|k| format!("w{k}")).collect();
    let watchers: Vec<&str> = watchers.iter().map(String::as_str).collect();

    let mut v = Verdict::default();
    v.counts.insert("lock_sections", locks.len());
    v.counts.insert("leader_terms", leads.len());
    v.counts.insert("semaphore_leases", leases.len());
    v.counts.insert("latch_terms", latch_terms.len());
    v.counts
        .insert("lease_semaphore_leases", curator_leases.len());
    v.counts.insert(
        "counter_increments",
        ids.iter()
            .filter(|i| i.id.starts_with(COUNTER_PREFIX))
            .count(),
    );
    v.counts.insert("queue_puts", queue_puts.len());
    v.counts.insert("queue_takes", takes.len());
    v.counts.insert("work_puts", work_puts.len());
    v.counts.insert("work_done", done.len());
    v.counts.insert("ids", ids.len());
    v.counts.insert("config_seen", seen.len());
    let mut add = |r: Result<(), zk_harness::history::Violations>| {
        if let Err(e) = r {
            v.violations.push(e.to_string());
        }
    };
    add(check_lock(&locks));
    add(check_lock(&leads));
    add(check_semaphore(&leases, PERMITS as usize));
    add(check_lock(&latch_terms));
    add(check_semaphore(&curator_leases, PERMITS as usize));
    // The queue's one documented exception: a consumer whose connection dropped during
    // its delete and finds the item gone returns it (at-least-once). A duplicate is only
    // excused if one of its deliveries rode out a disturbance of its session.
    let disturbed = |consumer: &str, item: &str| {
        events.iter().filter(|e| e.kind() == TAKE_SPAN).any(|span| {
            span.get("item") == Some(item)
                && span.get("consumer") == Some(consumer)
                && events.iter().filter(|e| e.kind() == DISTURBED).any(|d| {
                    let at: u64 = d.parse("at").unwrap_or(0);
                    d.get("owner") == Some(consumer)
                        && span.parse::<u64>("start").unwrap_or(u64::MAX) <= at
                        && at <= span.parse::<u64>("at").unwrap_or(0) + DISTURBANCE_SLACK
                })
        })
    };
    let (queue_check, excused) = excuse(
        check_queue(&queue_puts, &takes),
        |v| matches!(v, Violation::Duplicated { item, by } if by.iter().any(|c| disturbed(c, item))),
    );
    v.counts.insert("queue_at_least_once_duplicates", excused);
    let mut items = Vec::new();
    add(split_items(queue_check, &mut items));
    // A `complete` that failed without a verdict (session expired or the connection
    // stayed down mid-multi) may have applied: its item may be gone uncounted. Only a
    // `Lost` verdict (the multi was refused) says it changed nothing.
    let maybe_done: Vec<&str> = events
        .iter()
        .filter(|e| e.kind() == COMPLETE_FAILED)
        .filter(|e| !e.get("error").is_some_and(|err| err.starts_with("lost:")))
        .filter_map(|e| e.get("item"))
        .collect();
    let (work_check, unknown) = excuse(
        check_work_queue(&work_puts, &done),
        |v| matches!(v, Violation::Lost { put } if maybe_done.contains(&put.item.as_str())),
    );
    if let Err(found) = &work_check {
        for violation in &found.list {
            let item = match violation {
                Violation::Lost { put } => &put.item,
                Violation::Duplicated { item, .. } => item,
                _ => continue,
            };
            let about: Vec<String> = events
                .iter()
                .filter(|e| e.get("item") == Some(item.as_str()))
                .map(|e| e.to_line())
                .collect();
            println!("work item {item}: {about:#?}");
        }
    }
    v.counts.insert("work_completions_outcome_unknown", unknown);
    add(split_items(work_check, &mut items));
    add(check_unique_ids(&ids));
    add(check_config_watch(&seen, &watchers, FINAL));
    let membership = events.iter().find(|e| e.kind() == MEMBERSHIP);
    v.counts.insert(
        "member_views",
        membership.and_then(|e| e.parse("views").ok()).unwrap_or(0),
    );
    v.violations.extend(membership::judge(
        membership,
        &latest_incarnations(summaries),
    ));
    v.items = items;
    // Every role made progress, or the run proved nothing.
    for (what, n) in &v.counts {
        let excused = [
            "queue_at_least_once_duplicates",
            "work_completions_outcome_unknown",
        ];
        if *n == 0 && !excused.contains(what) {
            v.violations
                .push(format!("no {what} recorded (children: {summaries:?})"));
        }
    }
    v
}

/// Each child's last owner name (`w0.3`), sorted, from the children's `DONE|` summaries
/// (`w0 sessions=4 ...`: incarnations are numbered from 0).
fn latest_incarnations(summaries: &[String]) -> Vec<String> {
    let mut latest: Vec<String> = summaries
        .iter()
        .filter_map(|s| {
            let mut words = s.split_whitespace();
            let name = words.next()?;
            let sessions: u64 = words.next()?.strip_prefix("sessions=")?.parse().ok()?;
            Some(format!("{name}.{}", sessions.checked_sub(1)?))
        })
        .collect();
    latest.sort();
    latest
}
