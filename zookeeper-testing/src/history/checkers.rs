//! The checkers: one per guarantee (mutual exclusion, one leader, at most N permits,
//! exactly-once queues, unique ids, the final config seen).

use super::*;

// ------------------------------------------------------------------------------------
// Checkers

pub(super) fn sorted_sections(
    sections: &[CriticalSection],
    out: &mut Vec<Violation>,
) -> Vec<CriticalSection> {
    let mut sorted: Vec<CriticalSection> = Vec::with_capacity(sections.len());
    for s in sections {
        if s.end < s.start {
            out.push(Violation::Malformed(format!(
                "section ends before it starts: {s}"
            )));
        } else {
            sorted.push(s.clone());
        }
    }
    sorted.sort_by_key(|s| (s.start, s.end));
    sorted
}

/// A lock or leadership history: no two sections overlap (touching ends do not count),
/// and fencing tokens strictly increase in the order sections started.
///
/// Every section overlapping an earlier one is reported (against the earlier section
/// that is held longest), so one long stale holder shows up once per intruder.
pub fn check_lock(sections: &[CriticalSection]) -> Result<(), Violations> {
    let mut out = Vec::new();
    let sorted = sorted_sections(sections, &mut out);
    let mut longest: Option<&CriticalSection> = None;
    let mut previous: Option<&CriticalSection> = None;
    for s in &sorted {
        if let Some(l) = longest {
            if s.start < l.end {
                out.push(Violation::Overlap {
                    first: l.clone(),
                    second: s.clone(),
                });
            }
        }
        if let Some(p) = previous {
            if s.token <= p.token {
                out.push(Violation::TokenNotIncreasing {
                    earlier: p.clone(),
                    later: s.clone(),
                });
            }
        }
        if longest.is_none_or(|l| s.end > l.end) {
            longest = Some(s);
        }
        previous = Some(s);
    }
    Violations::result("lock", out)
}

/// Writes to a fenced resource: an accepted write must not carry a token older than a
/// write that was accepted and had completed before it was sent (the resource had seen
/// the newer token, so it must reject the older one).
pub fn check_fenced_writes(writes: &[FencedWrite]) -> Result<(), Violations> {
    let mut out = Vec::new();
    let mut accepted: Vec<&FencedWrite> = Vec::new();
    for w in writes {
        if w.end < w.start {
            out.push(Violation::Malformed(format!(
                "write ends before it starts: {w}"
            )));
        } else if w.accepted {
            accepted.push(w);
        }
    }
    // Sweep accepted writes by start; keep the highest token among those completed.
    let mut by_end = accepted.clone();
    by_end.sort_by_key(|w| w.end);
    accepted.sort_by_key(|w| w.start);
    let mut newest: Option<&FencedWrite> = None;
    let mut j = 0;
    for w in accepted {
        while j < by_end.len() && by_end[j].end < w.start {
            if newest.is_none_or(|n| by_end[j].token > n.token) {
                newest = Some(by_end[j]);
            }
            j += 1;
        }
        if let Some(n) = newest {
            if w.token < n.token {
                out.push(Violation::StaleWriteAccepted {
                    stale: w.clone(),
                    newer: n.clone(),
                });
            }
        }
    }
    Violations::result("fenced writes", out)
}

/// A semaphore history: at no instant more than `permits` sections are held (touching
/// ends do not count). Each excess episode is reported once, at its beginning.
pub fn check_semaphore(sections: &[CriticalSection], permits: usize) -> Result<(), Violations> {
    let mut out = Vec::new();
    let sorted = sorted_sections(sections, &mut out);
    // (time, is_start, index); at equal times ends come first.
    let mut points: Vec<(u64, bool, usize)> = Vec::with_capacity(sorted.len() * 2);
    for (i, s) in sorted.iter().enumerate() {
        points.push((s.start, true, i));
        points.push((s.end, false, i));
    }
    points.sort();
    let mut held: HashSet<usize> = HashSet::new();
    let mut in_excess = false;
    for (at, is_start, i) in points {
        if is_start {
            held.insert(i);
        } else {
            held.remove(&i);
        }
        if held.len() > permits && !in_excess {
            let mut holders: Vec<CriticalSection> =
                held.iter().map(|&h| sorted[h].clone()).collect();
            holders.sort_by_key(|h| h.start);
            out.push(Violation::TooManyHolders {
                at,
                permits,
                holders,
            });
        }
        in_excess = held.len() > permits;
    }
    Violations::result("semaphore", out)
}

/// Deliveries per item, in input order: `(consumer, at)`.
pub(super) fn deliveries<'a>(
    items: impl Iterator<Item = (&'a str, &'a str, u64)>,
) -> BTreeMap<&'a str, Vec<(&'a str, u64)>> {
    let mut map: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (item, by, at) in items {
        map.entry(item).or_default().push((by, at));
    }
    map
}

pub(super) fn check_delivery(
    check: &'static str,
    puts: &[Put],
    delivered: BTreeMap<&str, Vec<(&str, u64)>>,
) -> Result<(), Violations> {
    let mut out = Vec::new();
    let mut put_by_item: HashMap<&str, &Put> = HashMap::new();
    for p in puts {
        if let Some(end) = p.end {
            if end < p.start {
                out.push(Violation::Malformed(format!(
                    "put of {:?} acknowledged before it was sent",
                    p.item
                )));
            }
        }
        if put_by_item.insert(&p.item, p).is_some() {
            out.push(Violation::Malformed(format!(
                "item {:?} put more than once; items must be unique",
                p.item
            )));
        }
    }
    for p in puts {
        if p.acknowledged() && !delivered.contains_key(p.item.as_str()) {
            out.push(Violation::Lost { put: p.clone() });
        }
    }
    for (item, by) in &delivered {
        let names: Vec<String> = by.iter().map(|(c, _)| c.to_string()).collect();
        if !put_by_item.contains_key(item) {
            out.push(Violation::Phantom {
                item: item.to_string(),
                by: names,
            });
        } else if by.len() > 1 {
            out.push(Violation::Duplicated {
                item: item.to_string(),
                by: names,
            });
        }
    }
    Violations::result(check, out)
}

/// A queue history: every acknowledged put was taken exactly once; an unacknowledged put
/// (outcome unknown) was taken at most once; nothing was taken that was never put.
/// Item names must be unique across puts.
pub fn check_queue(puts: &[Put], takes: &[Take]) -> Result<(), Violations> {
    let delivered = deliveries(
        takes
            .iter()
            .map(|t| (t.item.as_str(), t.consumer.as_str(), t.at)),
    );
    check_delivery("queue", puts, delivered)
}

/// A work-queue history: every acknowledged submission was completed exactly once, an
/// unacknowledged one at most once, and nothing completed that was never submitted.
pub fn check_work_queue(submitted: &[Put], completed: &[Completion]) -> Result<(), Violations> {
    let delivered = deliveries(
        completed
            .iter()
            .map(|c| (c.item.as_str(), c.worker.as_str(), c.at)),
    );
    check_delivery("work queue", submitted, delivered)
}

/// FIFO order: if item `a`'s put was acknowledged before item `b`'s put was sent, no
/// consumer takes `b` and later `a` (when it took `b`, `a` was already at the head).
/// Each consumer's takes are ordered by `at`; several consumers may share the queue.
/// Takes of items never put are ignored here ([`check_queue`] reports them).
pub fn check_fifo(puts: &[Put], takes: &[Take]) -> Result<(), Violations> {
    let put_by_item: HashMap<&str, &Put> = puts.iter().map(|p| (p.item.as_str(), p)).collect();
    let mut by_consumer: BTreeMap<&str, Vec<&Take>> = BTreeMap::new();
    for t in takes {
        by_consumer.entry(&t.consumer).or_default().push(t);
    }
    let mut out = Vec::new();
    for (consumer, mut list) in by_consumer {
        list.sort_by_key(|t| t.at);
        // The taken item whose put started last so far: any later take whose put was
        // acknowledged before that start came out of order.
        let mut latest_start: Option<(u64, &str)> = None;
        for t in list {
            let Some(p) = put_by_item.get(t.item.as_str()) else {
                continue;
            };
            if let (Some(end), Some((start, item))) = (p.end, latest_start) {
                if end < start {
                    out.push(Violation::OutOfOrder {
                        consumer: consumer.to_string(),
                        earlier: t.item.clone(),
                        later: item.to_string(),
                    });
                }
            }
            if latest_start.is_none_or(|(s, _)| p.start > s) {
                latest_start = Some((p.start, &p.item));
            }
        }
    }
    Violations::result("fifo", out)
}

/// An id generator history: no id was issued twice (each duplicate lists who got it).
pub fn check_unique_ids(ids: &[IssuedId]) -> Result<(), Violations> {
    let mut owners: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for i in ids {
        owners.entry(&i.id).or_default().push(i.owner.clone());
    }
    let out = owners
        .into_iter()
        .filter(|(_, o)| o.len() > 1)
        .map(|(id, owners)| Violation::DuplicateId {
            id: id.to_string(),
            owners,
        })
        .collect();
    Violations::result("unique ids", out)
}

/// A config-watch history: each watcher's sightings (ordered by `at`) never go back to
/// an older `mzxid` (seeing the same mzxid again, e.g. a re-read, is fine), one mzxid
/// always carries one value, and every watcher's last sighting is `final_value`.
/// `watchers` names the watchers that must have seen it, including any that recorded
/// nothing.
pub fn check_config_watch(
    seen: &[ConfigSeen],
    watchers: &[&str],
    final_value: &str,
) -> Result<(), Violations> {
    let mut out = Vec::new();
    let mut by_mzxid: BTreeMap<i64, &ConfigSeen> = BTreeMap::new();
    for s in seen {
        match by_mzxid.get(&s.mzxid) {
            Some(first) if first.value != s.value => out.push(Violation::ConfigConflict {
                mzxid: s.mzxid,
                a: (*first).clone(),
                b: s.clone(),
            }),
            Some(_) => {}
            None => {
                by_mzxid.insert(s.mzxid, s);
            }
        }
    }
    let mut by_watcher: BTreeMap<&str, Vec<&ConfigSeen>> =
        watchers.iter().map(|w| (*w, Vec::new())).collect();
    for s in seen {
        by_watcher.entry(&s.watcher).or_default().push(s);
    }
    for (watcher, mut list) in by_watcher {
        list.sort_by_key(|s| s.at); // stable: equal times keep record order
        let mut newest: Option<&ConfigSeen> = None;
        for s in &list {
            match newest {
                Some(n) if s.mzxid < n.mzxid => out.push(Violation::ConfigWentBack {
                    watcher: watcher.to_string(),
                    newer: n.clone(),
                    older: (*s).clone(),
                }),
                _ => newest = Some(s),
            }
        }
        let last = list.last();
        if last.is_none_or(|l| l.value != final_value) {
            out.push(Violation::ConfigNotFinal {
                watcher: watcher.to_string(),
                last: last.map(|l| (*l).clone()),
                expected: final_value.to_string(),
            });
        }
    }
    Violations::result("config watch", out)
}
