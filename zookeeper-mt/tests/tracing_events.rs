//! The `tracing` feature: the C client's log as structured events (C function, line,
//! session id), routine reconnection at WARN rather than ERROR, and the C level
//! following the subscriber's level while a handle is open.
//!
//! `cargo test -p zookeeper-mt --features tracing --test tracing_events` (the test
//! command runs it).
#![cfg(feature = "tracing")]

mod common;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One event of target `zookeeper_mt::c`.
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    fields: HashMap<String, String>,
}

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
/// The subscriber's level: 0 INFO, 1 DEBUG.
static VERBOSITY: AtomicUsize = AtomicUsize::new(0);
static SPANS: AtomicU64 = AtomicU64::new(1);

struct Collector;

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

fn current_level() -> LevelFilter {
    if VERBOSITY.load(Ordering::Relaxed) == 0 {
        LevelFilter::INFO
    } else {
        LevelFilter::DEBUG
    }
}

impl Subscriber for Collector {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= current_level()
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(current_level())
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(SPANS.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() != "zookeeper_mt::c" {
            return;
        }
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        SEEN.lock().push(Seen {
            level: *event.metadata().level(),
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Waits (bounded) for an event matching `wanted`, doing `nudge` between looks.
fn wait_for(what: &str, mut nudge: impl FnMut(), wanted: impl Fn(&Seen) -> bool) -> Seen {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(seen) = SEEN.lock().iter().find(|seen| wanted(seen)) {
            return seen.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within 20 s: {:#?}",
            SEEN.lock()
        );
        nudge();
        std::thread::sleep(Duration::from_millis(20));
    }
}

// One test: the subscriber is process-wide.
#[test]
fn c_records_are_structured_events_that_follow_the_subscriber() {
    tracing::subscriber::set_global_default(Collector).unwrap();
    let proxy = common::Proxy::start(&common::hosts());
    let zk = common::connect_to(&proxy.connect_string());
    let session = format!("{:#x}", zk.client_id().unwrap().session_id);

    // The session announcement, with its structure.
    let announced = wait_for(
        "session announcement",
        || {},
        |seen| {
            seen.fields
                .get("message")
                .is_some_and(|m| m.contains("session establishment complete"))
        },
    );
    assert_eq!(announced.level, Level::INFO);
    assert_eq!(announced.fields["session_id"], session, "{announced:?}");
    assert!(!announced.fields["c_function"].is_empty(), "{announced:?}");
    assert_ne!(announced.fields["c_line"], "0", "{announced:?}");

    // No DEBUG record while the subscriber listens at INFO.
    zk.exists("/").unwrap();
    assert!(SEEN.lock().iter().all(|seen| seen.level <= Level::INFO));

    // The subscriber turns to DEBUG while the handle is open: C follows within a second
    // or so (each request is logged at DEBUG by the C client).
    VERBOSITY.store(1, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();
    let debug = wait_for(
        "C DEBUG record after the subscriber's change",
        || drop(zk.exists("/")),
        |seen| seen.level == Level::DEBUG,
    );
    assert_eq!(debug.fields["session_id"], session, "{debug:?}");
    VERBOSITY.store(0, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();

    // A cut connection is routine: WARN, never ERROR.
    SEEN.lock().clear();
    proxy.block();
    let lost = wait_for(
        "connection-loss record",
        || {},
        |seen| {
            seen.fields
                .get("message")
                .is_some_and(|m| m.contains("zk retcode=-4"))
        },
    );
    assert_eq!(lost.level, Level::WARN, "{lost:?}");
    proxy.unblock();
    common::poll_until("reconnected", Duration::from_secs(20), || {
        zk.exists("/").is_ok()
    });
    let errors: Vec<_> = SEEN
        .lock()
        .iter()
        .filter(|seen| seen.level == Level::ERROR)
        .cloned()
        .collect();
    assert!(
        errors.is_empty(),
        "routine reconnection logged at ERROR: {errors:#?}"
    );
    zk.close().unwrap();
}
