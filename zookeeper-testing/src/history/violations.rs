//! Violations: what a checker reports, each with the events that show it.

use super::*;

// ------------------------------------------------------------------------------------
// Violations

/// One broken guarantee, with the records that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// The input itself is unusable (end before start, an item put twice, ...).
    Malformed(String),
    /// Two critical sections (lock, leadership) overlap in time.
    Overlap {
        /// The section that started first.
        first: CriticalSection,
        /// The section that started while `first` was still held.
        second: CriticalSection,
    },
    /// A later critical section has a token not greater than an earlier one's.
    TokenNotIncreasing {
        /// The earlier section.
        earlier: CriticalSection,
        /// The later section.
        later: CriticalSection,
    },
    /// A write with a stale token was accepted although a write with a newer token had
    /// been accepted before it was sent.
    StaleWriteAccepted {
        /// The accepted stale write.
        stale: FencedWrite,
        /// The newer accepted write that completed before `stale` started.
        newer: FencedWrite,
    },
    /// More than `permits` holders at once.
    TooManyHolders {
        /// When the excess began.
        at: u64,
        /// The limit.
        permits: usize,
        /// The holders at that instant.
        holders: Vec<CriticalSection>,
    },
    /// An acknowledged item was never delivered (taken / completed).
    Lost {
        /// The put.
        put: Put,
    },
    /// An item was delivered more than once.
    Duplicated {
        /// The item.
        item: String,
        /// Who got it, once per delivery.
        by: Vec<String>,
    },
    /// An item was delivered that was never put.
    Phantom {
        /// The item.
        item: String,
        /// Who got it.
        by: Vec<String>,
    },
    /// A consumer took `later` before `earlier`, although `earlier`'s put was
    /// acknowledged before `later`'s put was sent (a FIFO queue must give `earlier`
    /// first).
    OutOfOrder {
        /// Who took them.
        consumer: String,
        /// The item that should have come first.
        earlier: String,
        /// The item that came first instead.
        later: String,
    },
    /// One id was issued more than once.
    DuplicateId {
        /// The id.
        id: String,
        /// Who got it, once per issue.
        owners: Vec<String>,
    },
    /// A watcher saw an older configuration after a newer one.
    ConfigWentBack {
        /// The watcher.
        watcher: String,
        /// The newer value seen first.
        newer: ConfigSeen,
        /// The older value seen after it.
        older: ConfigSeen,
    },
    /// Two different values were seen with the same `mzxid`.
    ConfigConflict {
        /// The shared mzxid.
        mzxid: i64,
        /// One sighting.
        a: ConfigSeen,
        /// A sighting with another value.
        b: ConfigSeen,
    },
    /// A watcher's last value is not the final value (or it saw none).
    ConfigNotFinal {
        /// The watcher.
        watcher: String,
        /// Its last sighting, if any.
        last: Option<ConfigSeen>,
        /// The final value.
        expected: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Malformed(why) => write!(f, "malformed history: {why}"),
            Violation::Overlap { first, second } => {
                write!(f, "overlapping holders: {first} and {second}")
            }
            Violation::TokenNotIncreasing { earlier, later } => write!(
                f,
                "fencing token not increasing: {earlier} then {later}"
            ),
            Violation::StaleWriteAccepted { stale, newer } => write!(
                f,
                "stale write accepted: {stale}, after {newer} had completed"
            ),
            Violation::TooManyHolders {
                at,
                permits,
                holders,
            } => {
                write!(f, "{} holders at {at} (permits: {permits}):", holders.len())?;
                for h in holders {
                    write!(f, " [{h}]")?;
                }
                Ok(())
            }
            Violation::Lost { put } => write!(
                f,
                "lost: item {:?} put by {} (acknowledged at {}) was never delivered",
                put.item,
                put.producer,
                put.end.unwrap_or_default()
            ),
            Violation::Duplicated { item, by } => {
                write!(f, "duplicated: item {item:?} delivered {} times, to {by:?}", by.len())
            }
            Violation::Phantom { item, by } => {
                write!(f, "phantom: item {item:?} was never put but delivered to {by:?}")
            }
            Violation::OutOfOrder {
                consumer,
                earlier,
                later,
            } => write!(
                f,
                "FIFO broken: {consumer} took {later:?} before {earlier:?}, whose put completed before {later:?}'s began"
            ),
            Violation::DuplicateId { id, owners } => {
                write!(f, "id {id:?} issued {} times, to {owners:?}", owners.len())
            }
            Violation::ConfigWentBack {
                watcher,
                newer,
                older,
            } => write!(
                f,
                "{watcher} went back: saw {:?} (mzxid {:#x}) then {:?} (mzxid {:#x})",
                newer.value, newer.mzxid, older.value, older.mzxid
            ),
            Violation::ConfigConflict { mzxid, a, b } => write!(
                f,
                "mzxid {mzxid:#x} seen with two values: {:?} by {} and {:?} by {}",
                a.value, a.watcher, b.value, b.watcher
            ),
            Violation::ConfigNotFinal {
                watcher,
                last,
                expected,
            } => match last {
                Some(last) => write!(
                    f,
                    "{watcher} ended at {:?} (mzxid {:#x}), not the final value {expected:?}",
                    last.value, last.mzxid
                ),
                None => write!(f, "{watcher} saw no value; the final value is {expected:?}"),
            },
        }
    }
}

/// Every violation a checker found. `Display` prints one per line, headed by the
/// checker's name and count, ready for a failing test's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violations {
    /// The checker that found them.
    pub check: &'static str,
    /// The violations (never empty).
    pub list: Vec<Violation>,
}

impl Violations {
    pub(super) fn result(check: &'static str, list: Vec<Violation>) -> Result<(), Violations> {
        if list.is_empty() {
            Ok(())
        } else {
            Err(Violations { check, list })
        }
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} violation(s)", self.check, self.list.len())?;
        for v in &self.list {
            write!(f, "\n  - {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violations {}
