//! History format, checkers and fault schedules: pure, no server. Each checker accepts a
//! valid history and rejects each kind of violation it knows.

use std::collections::HashSet;
use std::time::Duration;

use zk_harness::history::{
    check_config_watch, check_fenced_writes, check_fifo, check_lock, check_queue, check_semaphore,
    check_unique_ids, check_work_queue, monotonic_nanos, parse_history, read_histories, records,
    Completion, ConfigSeen, CriticalSection, Event, FencedWrite, HistoryWriter, IssuedId, Put,
    Record, Take, Violation, Violations,
};
use zk_harness::{FaultAction, FaultKind, FaultSchedule, Rng, ScheduleShape};

fn sec(owner: &str, token: i64, start: u64, end: u64) -> CriticalSection {
    CriticalSection {
        owner: owner.into(),
        token,
        start,
        end,
    }
}

fn put(item: &str, start: u64, end: Option<u64>) -> Put {
    Put {
        item: item.into(),
        producer: "p".into(),
        start,
        end,
    }
}

fn take(item: &str, consumer: &str, at: u64) -> Take {
    Take {
        item: item.into(),
        consumer: consumer.into(),
        at,
    }
}

fn violations(result: Result<(), Violations>) -> Vec<Violation> {
    let err = result.expect_err("a violation");
    // The report names the checker and each violation.
    let text = err.to_string();
    assert!(text.starts_with(err.check), "{text}");
    assert_eq!(text.lines().count(), err.list.len() + 1, "{text}");
    eprintln!("{text}");
    err.list
}

// ---------------------------------------------------------------- format

#[test]
fn events_round_trip_through_lines_with_any_text() {
    let e = Event::new("put")
        .with("item", "a b=c%d\n\té€")
        .with("empty", "")
        .with("n", -17);
    let line = e.to_line();
    assert!(!line.contains('\n') && !line.contains('\t'), "{line}");
    assert_eq!(line.split(' ').count(), 4, "{line}");
    assert!(
        line.starts_with("event=put item=a%20b%3Dc%25d%0A%09"),
        "{line}"
    );
    let back = Event::parse_line(&line).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.kind(), "put");
    assert_eq!(back.get("item"), Some("a b=c%d\n\té€"));
    assert_eq!(back.get("empty"), Some(""));
    assert_eq!(back.parse::<i32>("n").unwrap(), -17);
    assert_eq!(back.parse_opt::<i32>("missing").unwrap(), None);
    assert!(back.parse::<u32>("n").is_err());
    assert!(back.require("missing").is_err());

    for record in [
        sec("o p", -3, 1, 2).to_event(),
        put("x", 1, None).to_event(),
        put("x", 1, Some(5)).to_event(),
    ] {
        assert_eq!(Event::parse_line(&record.to_line()).unwrap(), record);
    }
    assert_eq!(
        CriticalSection::from_event(&sec("o p", -3, 1, 2).to_event()).unwrap(),
        sec("o p", -3, 1, 2)
    );
    assert_eq!(
        Put::from_event(&put("x", 1, None).to_event()).unwrap(),
        put("x", 1, None)
    );
}

#[test]
fn malformed_lines_are_typed_errors_with_line_numbers() {
    for bad in [
        "item=x",            // no event= first
        "event=put item",    // not key=value
        "event=put =x",      // empty key
        "event=put item=%4", // short escape
        "event=put item=%zz",
        "event=put item=%ff", // not UTF-8
    ] {
        assert!(Event::parse_line(bad).is_err(), "{bad:?}");
    }
    let err = parse_history("event=a\n\nevent=b x=1\nbroken\nevent=c\n").unwrap_err();
    assert_eq!(err.line, Some(4), "{err}");
    assert!(err.to_string().starts_with("line 4: "), "{err}");

    // A torn last line (a writer killed mid-write) is skipped; a complete bad one is not.
    let events = parse_history("event=a\nevent=b x=%4").unwrap();
    assert_eq!(events.len(), 1);
    assert!(parse_history("event=a\nevent=b x=%4\n").is_err());

    // A record with a missing or bad field names the event.
    let events = parse_history("event=section owner=a token=1 start=1\n").unwrap();
    let err = records::<CriticalSection>(&events).unwrap_err();
    assert!(err.message.contains("end"), "{err}");
    let events =
        parse_history("event=id id=1 owner=a\nevent=section owner=a token=x start=1 end=2\n")
            .unwrap();
    assert!(records::<CriticalSection>(&events).is_err());
    assert_eq!(records::<IssuedId>(&events).unwrap().len(), 1);
}

#[test]
fn several_writers_append_whole_lines_to_one_file() {
    let dir = std::env::temp_dir().join(format!("zk-harness-history-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shared = dir.join("shared.history");
    let own = dir.join("own.history");
    let _ = std::fs::remove_file(&shared);
    let _ = std::fs::remove_file(&own);

    const WRITERS: usize = 4;
    const EACH: usize = 500;
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let shared = shared.clone();
            s.spawn(move || {
                // Each writer its own open file description, as separate processes have.
                let mut writer = HistoryWriter::append_to(&shared).unwrap();
                for i in 0..EACH {
                    let id = IssuedId {
                        id: format!("{w}-{i}"),
                        owner: format!("writer {w} {}", "x".repeat(i % 300)),
                    };
                    writer.record(&id).unwrap();
                }
            });
        }
    });
    let mut writer = HistoryWriter::append_to(&own).unwrap();
    writer.record(&sec("solo", 1, 10, 20)).unwrap();
    assert_eq!(writer.path(), own.as_path());

    let events = read_histories(&[&shared, &own]).unwrap();
    let ids: Vec<IssuedId> = records(&events).unwrap();
    assert_eq!(ids.len(), WRITERS * EACH);
    let distinct: HashSet<&str> = ids.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(distinct.len(), WRITERS * EACH);
    // Each writer's own lines stay in its order.
    for w in 0..WRITERS {
        let mine: Vec<String> = ids
            .iter()
            .filter(|i| i.id.starts_with(&format!("{w}-")))
            .map(|i| i.id.clone())
            .collect();
        let expected: Vec<String> = (0..EACH).map(|i| format!("{w}-{i}")).collect();
        assert_eq!(mine, expected);
    }
    assert_eq!(
        records::<CriticalSection>(&events).unwrap(),
        [sec("solo", 1, 10, 20)]
    );
    check_unique_ids(&ids).unwrap();

    let missing = read_histories(&[dir.join("missing")]).unwrap_err();
    assert!(missing.file.is_some(), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn monotonic_clock_does_not_go_back() {
    let a = monotonic_nanos();
    let b = monotonic_nanos();
    assert!(a > 0 && b >= a);
}

// ---------------------------------------------------------------- lock

#[test]
fn lock_accepts_disjoint_sections_with_increasing_tokens() {
    // Out of order on input; touching ends are not an overlap.
    check_lock(&[
        sec("b", 2, 20, 30),
        sec("a", 1, 10, 20),
        sec("a", 7, 31, 40),
    ])
    .unwrap();
    check_lock(&[]).unwrap();
}

#[test]
fn lock_rejects_overlap_stale_tokens_and_bad_intervals() {
    let v = violations(check_lock(&[
        sec("a", 1, 10, 50),
        sec("b", 2, 20, 30),
        sec("c", 3, 40, 60),
    ]));
    // Both b and c started while a held the lock.
    assert_eq!(v.len(), 2);
    assert!(v
        .iter()
        .all(|v| matches!(v, Violation::Overlap { first, .. } if first.owner == "a")));

    let v = violations(check_lock(&[
        sec("a", 5, 10, 20),
        sec("b", 5, 30, 40),
        sec("c", 4, 50, 60),
    ]));
    assert_eq!(v.len(), 2);
    assert!(
        matches!(&v[0], Violation::TokenNotIncreasing { earlier, later } if earlier.owner == "a" && later.owner == "b")
    );
    assert!(matches!(&v[1], Violation::TokenNotIncreasing { later, .. } if later.owner == "c"));

    let v = violations(check_lock(&[sec("a", 1, 20, 10)]));
    assert!(matches!(&v[0], Violation::Malformed(_)));
}

#[test]
fn fenced_writes_reject_stale_tokens_once_a_newer_one_was_accepted() {
    let w = |owner: &str, token, start, end, accepted| FencedWrite {
        owner: owner.into(),
        token,
        start,
        end,
        accepted,
    };
    // Valid: the stale write after the newer one was rejected; concurrent writes (the
    // resource may order them either way) are not judged.
    check_fenced_writes(&[
        w("a", 1, 0, 10, true),
        w("b", 2, 20, 30, true),
        w("a", 1, 40, 50, false),
        w("c", 3, 60, 70, true),
        w("b", 2, 65, 80, true),
    ])
    .unwrap();
    let v = violations(check_fenced_writes(&[
        w("b", 2, 20, 30, true),
        w("a", 1, 40, 50, true),
    ]));
    assert!(
        matches!(&v[0], Violation::StaleWriteAccepted { stale, newer } if stale.owner == "a" && newer.owner == "b")
    );
}

// ---------------------------------------------------------------- semaphore

#[test]
fn semaphore_counts_holders_at_each_instant() {
    let sections = [
        sec("a", 0, 0, 100),
        sec("b", 0, 10, 50),
        sec("c", 0, 50, 60), // starts as b ends: still 2
        sec("d", 0, 70, 80),
    ];
    check_semaphore(&sections, 2).unwrap();
    let v = violations(check_semaphore(&sections, 1));
    // One report per excess episode, naming who held then: b's release and c's acquire
    // at 50 end one episode and begin another.
    assert_eq!(v.len(), 3);
    let intruders: Vec<&str> = v
        .iter()
        .map(|v| match v {
            Violation::TooManyHolders { holders, .. } => holders[1].owner.as_str(),
            other => panic!("{other}"),
        })
        .collect();
    assert_eq!(intruders, ["b", "c", "d"]);
    match &v[0] {
        Violation::TooManyHolders {
            at,
            permits,
            holders,
        } => {
            assert_eq!((*at, *permits), (10, 1));
            let names: Vec<&str> = holders.iter().map(|h| h.owner.as_str()).collect();
            assert_eq!(names, ["a", "b"]);
        }
        other => panic!("{other}"),
    }
    let v = violations(check_semaphore(
        &[sec("a", 0, 0, 10), sec("b", 0, 1, 10), sec("c", 0, 2, 10)],
        2,
    ));
    assert!(
        matches!(&v[0], Violation::TooManyHolders { at: 2, holders, .. } if holders.len() == 3)
    );
}

// ---------------------------------------------------------------- queues

#[test]
fn queue_accepts_exactly_once_delivery_and_optional_unacknowledged_items() {
    let puts = [
        put("a", 0, Some(1)),
        put("b", 2, Some(3)),
        put("maybe-in", 4, None),
        put("maybe-out", 5, None),
    ];
    let takes = [
        take("b", "c1", 10),
        take("a", "c2", 11),
        take("maybe-in", "c1", 12),
    ];
    check_queue(&puts, &takes).unwrap();
}

#[test]
fn queue_rejects_lost_duplicated_and_phantom_items() {
    let puts = [
        put("a", 0, Some(1)),
        put("b", 2, Some(3)),
        put("u", 4, None),
    ];
    let takes = [
        take("b", "c1", 10),
        take("b", "c2", 11),
        take("u", "c1", 12),
        take("u", "c1", 13),
        take("ghost", "c2", 14),
    ];
    let v = violations(check_queue(&puts, &takes));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Lost { put } if put.item == "a")));
    assert!(v.iter().any(
        |v| matches!(v, Violation::Duplicated { item, by } if item == "b" && by == &["c1", "c2"])
    ));
    // An unacknowledged item may appear, but at most once.
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Duplicated { item, .. } if item == "u")));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Phantom { item, by } if item == "ghost" && by == &["c2"])));
    assert_eq!(v.len(), 4);

    // Item names must be unique for the check to mean anything.
    let v = violations(check_queue(
        &[put("a", 0, Some(1)), put("a", 2, Some(3))],
        &[take("a", "c", 5)],
    ));
    assert!(matches!(&v[0], Violation::Malformed(_)));
}

#[test]
fn fifo_checks_each_consumer_against_completed_puts() {
    let puts = [
        put("a", 0, Some(10)),
        put("b", 20, Some(30)),
        put("c", 25, Some(40)), // concurrent with b: either order is FIFO
        put("u", 50, None),
    ];
    check_fifo(
        &puts,
        &[
            take("a", "x", 100),
            take("c", "x", 101),
            take("b", "x", 102),
        ],
    )
    .unwrap();
    // Two consumers, each in order.
    check_fifo(
        &puts,
        &[take("a", "x", 100), take("b", "y", 99), take("c", "x", 103)],
    )
    .unwrap();
    // Unknown items are check_queue's business.
    check_fifo(&puts, &[take("ghost", "x", 1), take("a", "x", 2)]).unwrap();

    let v = violations(check_fifo(
        &puts,
        &[take("b", "x", 100), take("a", "x", 101)],
    ));
    assert!(
        matches!(&v[0], Violation::OutOfOrder { consumer, earlier, later } if consumer == "x" && earlier == "a" && later == "b")
    );
    // Input order does not matter, `at` does.
    let v = violations(check_fifo(
        &puts,
        &[take("a", "y", 201), take("c", "y", 200)],
    ));
    assert_eq!(v.len(), 1);
}

#[test]
fn work_queue_wants_every_acknowledged_item_completed_once() {
    let done = |item: &str, worker: &str| Completion {
        item: item.into(),
        worker: worker.into(),
        at: 1,
    };
    let submitted = [
        put("j1", 0, Some(1)),
        put("j2", 0, Some(1)),
        put("j3", 0, None),
    ];
    check_work_queue(&submitted, &[done("j2", "w1"), done("j1", "w2")]).unwrap();
    let v = violations(check_work_queue(
        &submitted,
        &[done("j2", "w1"), done("j2", "w2"), done("j9", "w1")],
    ));
    assert_eq!(v.len(), 3);
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Lost { put } if put.item == "j1")));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Duplicated { item, .. } if item == "j2")));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::Phantom { item, .. } if item == "j9")));
    // Round trip of the record type.
    assert_eq!(
        Completion::from_event(&done("j", "w").to_event()).unwrap(),
        done("j", "w")
    );
}

// ---------------------------------------------------------------- ids

#[test]
fn id_generator_duplicates_are_reported_with_their_owners() {
    let id = |id: &str, owner: &str| IssuedId {
        id: id.into(),
        owner: owner.into(),
    };
    check_unique_ids(&[id("1", "a"), id("2", "a"), id("3", "b")]).unwrap();
    let v = violations(check_unique_ids(&[
        id("1", "a"),
        id("2", "b"),
        id("1", "c"),
        id("2", "b"),
    ]));
    assert_eq!(
        v,
        [
            Violation::DuplicateId {
                id: "1".into(),
                owners: vec!["a".into(), "c".into()]
            },
            Violation::DuplicateId {
                id: "2".into(),
                owners: vec!["b".into(), "b".into()]
            },
        ]
    );
}

// ---------------------------------------------------------------- config

fn seen(watcher: &str, value: &str, mzxid: i64, at: u64) -> ConfigSeen {
    ConfigSeen {
        watcher: watcher.into(),
        value: value.into(),
        mzxid,
        at,
    }
}

#[test]
fn config_watch_accepts_monotone_sightings_ending_at_the_final_value() {
    check_config_watch(
        &[
            seen("w1", "v1", 0x10, 1),
            seen("w2", "v2", 0x20, 2),
            seen("w1", "v3", 0x30, 3),
            seen("w1", "v3", 0x30, 4), // a re-read after reconnect
            seen("w2", "v3", 0x30, 5),
        ],
        &["w1", "w2"],
        "v3",
    )
    .unwrap();
}

#[test]
fn config_watch_rejects_going_back_conflicts_and_stale_or_silent_watchers() {
    let v = violations(check_config_watch(
        &[
            seen("w1", "v2", 0x20, 1),
            seen("w1", "v1", 0x10, 2),
            seen("w1", "v3", 0x30, 3),
        ],
        &["w1"],
        "v3",
    ));
    assert_eq!(v.len(), 1);
    assert!(
        matches!(&v[0], Violation::ConfigWentBack { newer, older, .. } if newer.mzxid == 0x20 && older.mzxid == 0x10)
    );

    let v = violations(check_config_watch(
        &[seen("w1", "v3", 0x30, 1), seen("w2", "other", 0x30, 1)],
        &["w1"],
        "v3",
    ));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::ConfigConflict { mzxid: 0x30, .. })));
    assert!(v.iter().any(
        |v| matches!(v, Violation::ConfigNotFinal { watcher, last: Some(_), .. } if watcher == "w2")
    ));

    let v = violations(check_config_watch(
        &[seen("w1", "v3", 0x30, 1)],
        &["w1", "silent"],
        "v3",
    ));
    assert!(
        matches!(&v[0], Violation::ConfigNotFinal { watcher, last: None, .. } if watcher == "silent")
    );
}

// ---------------------------------------------------------------- schedules

#[test]
fn splitmix_matches_the_reference_sequence_and_stays_in_range() {
    let mut rng = Rng::new(0);
    assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let mut rng = Rng::new(7);
    let mut hits = [0u32; 3];
    for _ in 0..3000 {
        hits[rng.below(3) as usize] += 1;
    }
    assert!(hits.iter().all(|h| *h > 800), "{hits:?}");
    assert_eq!(rng.below(0), 0);
    let d = rng.duration_between(Duration::from_millis(5), Duration::from_millis(9));
    assert!((5..=9).contains(&(d.as_millis() as u64)));
}

#[test]
fn fault_schedules_reproduce_from_their_seed() {
    let duration = Duration::from_secs(60);
    let a = FaultSchedule::generate(12345, duration, &FaultKind::ALL);
    let b = FaultSchedule::generate(12345, duration, &FaultKind::ALL);
    let c = FaultSchedule::generate(12346, duration, &FaultKind::ALL);
    assert_eq!(a, b);
    assert_eq!(a.to_string(), b.to_string());
    assert_ne!(a.actions(), c.actions());
    let text = a.to_string();
    eprintln!("{text}");
    assert!(text.starts_with("fault schedule seed=12345 "), "{text}");
    assert_eq!(text.lines().count(), a.actions().len() + 1);
    assert!(a.actions().len() >= 10, "{text}");
    // Over a minute every kind shows up.
    let shown: HashSet<std::mem::Discriminant<FaultAction>> = a
        .actions()
        .iter()
        .map(|t| std::mem::discriminant(&t.action))
        .collect();
    assert_eq!(shown.len(), 9, "{text}");
}

#[test]
fn faults_never_overlap_and_are_healed_by_the_end() {
    let shape = ScheduleShape {
        members: 5,
        proxies: 2,
        clients: 4,
        ..ScheduleShape::default()
    };
    for seed in 0..200 {
        let s =
            FaultSchedule::generate_with(seed, Duration::from_secs(30), &FaultKind::ALL, &shape);
        let mut open: Option<FaultAction> = None;
        let mut last = Duration::ZERO;
        for t in s.actions() {
            assert!(t.at >= last && t.at <= s.duration(), "{s}");
            last = t.at;
            match (open, t.action) {
                (None, FaultAction::Kill { member } | FaultAction::Pause { member }) => {
                    assert!(member < 5, "{s}");
                    open = Some(t.action);
                }
                (None, FaultAction::CutProxy { proxy }) => {
                    assert!(proxy < 2, "{s}");
                    open = Some(t.action);
                }
                (None, FaultAction::KillLeader) => open = Some(t.action),
                (None, FaultAction::ExpireSession { client }) => assert!(client < 4, "{s}"),
                (Some(FaultAction::Kill { member: a }), FaultAction::Restart { member: b })
                | (Some(FaultAction::Pause { member: a }), FaultAction::Resume { member: b })
                | (
                    Some(FaultAction::CutProxy { proxy: a }),
                    FaultAction::RestoreProxy { proxy: b },
                ) => {
                    assert_eq!(a, b, "{s}");
                    open = None;
                }
                (Some(FaultAction::KillLeader), FaultAction::RestartLeader) => open = None,
                (open, action) => panic!("{action:?} while {open:?} is open\n{s}"),
            }
        }
        assert_eq!(open, None, "a fault is left open at the end\n{s}");
    }
}

#[test]
fn only_the_requested_kinds_with_targets_are_scheduled() {
    let s = FaultSchedule::generate(
        9,
        Duration::from_secs(60),
        &[FaultKind::ExpireSession, FaultKind::ExpireSession],
    );
    assert_eq!(s.kinds(), [FaultKind::ExpireSession]);
    assert!(!s.actions().is_empty());
    assert!(s
        .actions()
        .iter()
        .all(|t| matches!(t.action, FaultAction::ExpireSession { client: 0 })));

    let no_members = ScheduleShape {
        members: 0,
        ..ScheduleShape::default()
    };
    let s = FaultSchedule::generate_with(
        9,
        Duration::from_secs(60),
        &[FaultKind::KillMember, FaultKind::PauseMember],
        &no_members,
    );
    assert!(s.actions().is_empty() && s.kinds().is_empty(), "{s}");
    assert!(FaultSchedule::generate(9, Duration::from_secs(60), &[])
        .actions()
        .is_empty());
    // A run too short for any fault.
    assert!(
        FaultSchedule::generate(9, Duration::from_millis(100), &FaultKind::ALL)
            .actions()
            .is_empty()
    );
}

#[test]
fn play_runs_actions_in_order_not_before_their_time() {
    let shape = ScheduleShape {
        min_gap: Duration::from_millis(5),
        max_gap: Duration::from_millis(20),
        min_outage: Duration::from_millis(5),
        max_outage: Duration::from_millis(20),
        ..ScheduleShape::default()
    };
    let s = FaultSchedule::generate_with(3, Duration::from_millis(300), &FaultKind::ALL, &shape);
    assert!(s.actions().len() >= 4, "{s}");
    let start = std::time::Instant::now();
    let mut played = Vec::new();
    s.play(|t| {
        assert!(start.elapsed() >= t.at, "{:?} played early", t);
        played.push(*t);
    });
    assert_eq!(played, s.actions());
}

#[test]
fn seeds_come_from_the_environment_or_the_clock() {
    // Only this test touches this variable.
    const VAR: &str = "ZK_HARNESS_HISTORY_TEST_SEED";
    std::env::set_var(VAR, "0x2a");
    assert_eq!(FaultSchedule::seed_from_env(VAR).unwrap(), 42);
    std::env::set_var(VAR, " 17 ");
    assert_eq!(FaultSchedule::seed_from_env(VAR).unwrap(), 17);
    std::env::set_var(VAR, "seventeen");
    let err = FaultSchedule::seed_from_env(VAR).unwrap_err();
    assert!(err.to_string().contains(VAR), "{err}");
    std::env::remove_var(VAR);
    let a = FaultSchedule::seed_from_env(VAR).unwrap();
    let b = FaultSchedule::seed_from_env(VAR).unwrap();
    assert_ne!(a, b);
}
