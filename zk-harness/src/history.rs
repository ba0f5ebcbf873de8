//! Histories recorded by (multi-process) fault runs, and checkers that judge them.
//!
//! A run's processes each append one line per event to a history file
//! ([`HistoryWriter`]); the parent test reads them all ([`read_histories`]), turns the
//! lines into typed records ([`records`]) and hands them to a checker:
//!
//! | checker | guarantee |
//! |---|---|
//! | [`check_lock`] | no two critical sections overlap; fencing tokens increase in section order |
//! | [`check_fenced_writes`] | a write with a token older than an already accepted one is rejected |
//! | [`check_semaphore`] | at most N holders at any instant |
//! | [`check_queue`] | no acknowledged put lost, nothing delivered twice, nothing delivered that was never put |
//! | [`check_fifo`] | each consumer takes items in the order their puts completed |
//! | [`check_work_queue`] | every acknowledged item completed exactly once |
//! | [`check_unique_ids`] | no id issued twice |
//! | [`check_config_watch`] | each watcher's values have non-decreasing mzxid and end at the final value |
//!
//! A checker returns every violation it finds ([`Violations`], printable as is), not just
//! the first.
//!
//! # Time
//! Timestamps are [`monotonic_nanos`]: `CLOCK_MONOTONIC`, which all processes on one
//! machine share, so sections recorded by different processes compare. A recorder takes
//! the start timestamp after the guarded operation returned (e.g. lock acquired) and the
//! end timestamp before releasing, so a recorded section lies inside the real one:
//! recorded overlaps are real overlaps (the checkers report no false positives), while
//! very short real overlaps may go unseen.
//!
//! # Line format
//! One event per line: space-separated `key=value` pairs, the first being `event=<kind>`:
//!
//! ```text
//! event=section owner=p1 token=17 start=81234000 end=81299000
//! event=put item=a%20b producer=p2 start=10 end=12
//! ```
//!
//! Keys and values are percent-encoded: every byte outside `!`..=`~`, and `%` and `=`,
//! is written `%XX`, so any text survives (no JSON, nothing to depend on).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::str::FromStr;

// ------------------------------------------------------------------------------------
// Time

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: comparable between processes on one
/// machine (unlike [`std::time::Instant`], whose value cannot be written down).
pub fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the valid timespec we pass; CLOCK_MONOTONIC is
    // always supported on Linux, so it cannot fail with a valid pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

// ------------------------------------------------------------------------------------
// Errors

/// A history that cannot be read: I/O, a malformed line, a missing or bad field.
#[derive(Debug)]
pub struct HistoryError {
    /// The file, when reading one.
    pub file: Option<PathBuf>,
    /// The 1-based line number, when the problem is in one line.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl HistoryError {
    fn new(message: impl Into<String>) -> Self {
        HistoryError {
            file: None,
            line: None,
            message: message.into(),
        }
    }

    fn at_line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    fn in_file(mut self, file: &Path) -> Self {
        self.file = Some(file.to_path_buf());
        self
    }
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
            }
            write!(f, ": ")?;
        } else if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for HistoryError {}

// ------------------------------------------------------------------------------------
// Events and their line format

/// The key naming an event's kind; always the first pair of a line.
pub const KIND_KEY: &str = "event";

/// One recorded event: an ordered list of `key=value` pairs, the first `event=<kind>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pairs: Vec<(String, String)>,
}

impl Event {
    /// An event of `kind` with no other field yet.
    pub fn new(kind: &str) -> Self {
        Event {
            pairs: vec![(KIND_KEY.to_string(), kind.to_string())],
        }
    }

    /// Adds a field. `key` must not be empty (such a line does not parse back); a key
    /// given twice keeps both pairs and [`get`](Self::get) returns the first.
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> Self {
        self.pairs.push((key.to_string(), value.to_string()));
        self
    }

    /// The event's kind (its `event` field).
    pub fn kind(&self) -> &str {
        self.get(KIND_KEY).unwrap_or("")
    }

    /// A field's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All pairs, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// A field that must be present.
    pub fn require(&self, key: &str) -> Result<&str, HistoryError> {
        self.get(key).ok_or_else(|| {
            HistoryError::new(format!("`{}` event without field `{key}`", self.kind()))
        })
    }

    /// A field parsed as `T`.
    pub fn parse<T: FromStr>(&self, key: &str) -> Result<T, HistoryError>
    where
        T::Err: fmt::Display,
    {
        let text = self.require(key)?;
        text.parse().map_err(|e| {
            HistoryError::new(format!(
                "`{}` event: field `{key}`={text:?}: {e}",
                self.kind()
            ))
        })
    }

    /// An optional field parsed as `T` (absent: `None`).
    pub fn parse_opt<T: FromStr>(&self, key: &str) -> Result<Option<T>, HistoryError>
    where
        T::Err: fmt::Display,
    {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.parse(key).map(Some),
        }
    }

    /// The event as one line, without the trailing newline.
    pub fn to_line(&self) -> String {
        let mut line = String::new();
        for (i, (k, v)) in self.pairs.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            escape_into(&mut line, k);
            line.push('=');
            escape_into(&mut line, v);
        }
        line
    }

    /// Parses one line (surrounding whitespace ignored). The first pair must be
    /// `event=<kind>`.
    pub fn parse_line(line: &str) -> Result<Event, HistoryError> {
        let mut pairs = Vec::new();
        for token in line.split_ascii_whitespace() {
            let (k, v) = token
                .split_once('=')
                .ok_or_else(|| HistoryError::new(format!("{token:?} is not key=value")))?;
            if k.is_empty() {
                return Err(HistoryError::new(format!("{token:?} has an empty key")));
            }
            pairs.push((unescape(k)?, unescape(v)?));
        }
        match pairs.first() {
            Some((k, _)) if k == KIND_KEY => Ok(Event { pairs }),
            _ => Err(HistoryError::new(format!(
                "line does not start with {KIND_KEY}=<kind>: {line:?}"
            ))),
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line())
    }
}

impl FromStr for Event {
    type Err = HistoryError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Event::parse_line(s)
    }
}

fn escape_into(out: &mut String, text: &str) {
    for b in text.bytes() {
        if (b'!'..=b'~').contains(&b) && b != b'%' && b != b'=' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn unescape(text: &str) -> Result<String, HistoryError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| HistoryError::new(format!("bad %-escape in {text:?}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| HistoryError::new(format!("{text:?} is not UTF-8")))
}

// ------------------------------------------------------------------------------------
// Files

/// Appends events to a history file, one line each, shared safely by several processes.
///
/// The file is opened with `O_APPEND` and every event is written with one `write(2)` of
/// the whole line, so lines of concurrent writers do not interleave, and a line is in the
/// file (the page cache) once [`write`](Self::write) returns: a writer killed right after
/// loses nothing. Nothing is buffered in the process.
#[derive(Debug)]
pub struct HistoryWriter {
    file: fs::File,
    path: PathBuf,
}

impl HistoryWriter {
    /// Opens (creating if needed) `path` for appending.
    pub fn append_to(path: impl AsRef<Path>) -> io::Result<HistoryWriter> {
        let path = path.as_ref().to_path_buf();
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(HistoryWriter { file, path })
    }

    /// The file written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event.
    pub fn write(&mut self, event: &Event) -> io::Result<()> {
        let mut line = event.to_line();
        line.push('\n');
        // One write of the whole line: O_APPEND makes it atomic with respect to other
        // appenders' writes on a local file system.
        let n = self.file.write(line.as_bytes())?;
        if n != line.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short write to {} ({n} of {})",
                    self.path.display(),
                    line.len()
                ),
            ));
        }
        Ok(())
    }

    /// Appends one typed record.
    pub fn record<R: Record>(&mut self, record: &R) -> io::Result<()> {
        self.write(&record.to_event())
    }
}

/// Reads a history file. Empty lines are skipped. A last line without a newline that
/// does not parse is skipped too (a writer killed in the middle of a line); any other
/// bad line is an error naming the file and line.
pub fn read_history(path: impl AsRef<Path>) -> Result<Vec<Event>, HistoryError> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| HistoryError {
        file: Some(path.to_path_buf()),
        line: None,
        message: format!("cannot read: {e}"),
    })?;
    parse_history(&text).map_err(|e| e.in_file(path))
}

/// Reads several history files (one per process, typically) into one list, file by
/// file. Each process's events keep their order.
pub fn read_histories<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<Event>, HistoryError> {
    let mut all = Vec::new();
    for path in paths {
        all.extend(read_history(path)?);
    }
    Ok(all)
}

/// Parses history text (the content of a history file); see [`read_history`].
pub fn parse_history(text: &str) -> Result<Vec<Event>, HistoryError> {
    let mut events = Vec::new();
    let torn = !text.is_empty() && !text.ends_with('\n');
    let count = text.lines().count();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match Event::parse_line(line) {
            Ok(event) => events.push(event),
            Err(_) if torn && i + 1 == count => {}
            Err(e) => return Err(e.at_line(i + 1)),
        }
    }
    Ok(events)
}

/// A typed history record, stored as one [`Event`] of kind [`KIND`](Self::KIND).
pub trait Record: Sized {
    /// The `event=` value of this record's lines.
    const KIND: &'static str;
    /// The record as an event.
    fn to_event(&self) -> Event;
    /// The record from an event of kind [`KIND`](Self::KIND).
    fn from_event(event: &Event) -> Result<Self, HistoryError>;
}

/// Every record of type `R` among `events` (other kinds are skipped), in order.
pub fn records<R: Record>(events: &[Event]) -> Result<Vec<R>, HistoryError> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind() == R::KIND)
        .map(|(i, e)| {
            R::from_event(e).map_err(|mut err| {
                err.message = format!("event #{} ({e}): {}", i + 1, err.message);
                err
            })
        })
        .collect()
}

// ------------------------------------------------------------------------------------
// Records

/// A critical section: `owner` held the lock (leadership, a semaphore permit) with
/// fencing token `token` from `start` to `end` ([`monotonic_nanos`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CriticalSection {
    /// Who held it (process / thread / session name).
    pub owner: String,
    /// The fencing token of this hold (e.g. the lock node's sequence number or czxid).
    pub token: i64,
    /// When the hold was known to have begun (after acquire returned).
    pub start: u64,
    /// When the hold was last known to last (before release was called).
    pub end: u64,
}

impl Record for CriticalSection {
    const KIND: &'static str = "section";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("owner", &self.owner)
            .with("token", self.token)
            .with("start", self.start)
            .with("end", self.end)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(CriticalSection {
            owner: e.parse("owner")?,
            token: e.parse("token")?,
            start: e.parse("start")?,
            end: e.parse("end")?,
        })
    }
}

impl fmt::Display for CriticalSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{}..{}]",
            self.owner, self.token, self.start, self.end
        )
    }
}

/// A write to a resource guarded by fencing tokens, from `start` to `end`
/// ([`monotonic_nanos`]); `accepted` is the resource's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencedWrite {
    /// The writer.
    pub owner: String,
    /// The token the write carried.
    pub token: i64,
    /// Before the write was sent.
    pub start: u64,
    /// After the answer arrived.
    pub end: u64,
    /// Whether the resource applied it.
    pub accepted: bool,
}

impl Record for FencedWrite {
    const KIND: &'static str = "fenced_write";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("owner", &self.owner)
            .with("token", self.token)
            .with("start", self.start)
            .with("end", self.end)
            .with("accepted", self.accepted)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(FencedWrite {
            owner: e.parse("owner")?,
            token: e.parse("token")?,
            start: e.parse("start")?,
            end: e.parse("end")?,
            accepted: e.parse("accepted")?,
        })
    }
}

impl fmt::Display for FencedWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{}..{}] {}",
            self.owner,
            self.token,
            self.start,
            self.end,
            if self.accepted {
                "accepted"
            } else {
                "rejected"
            }
        )
    }
}

/// A put into a queue (or a submission to a work queue): sent at `start`,
/// acknowledged at `end`; `end: None` when the outcome is unknown (error, lost reply,
/// process killed), so the item may or may not be in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Put {
    /// The item's unique name.
    pub item: String,
    /// Who put it.
    pub producer: String,
    /// Before the put was sent.
    pub start: u64,
    /// When the put was acknowledged, if it was.
    pub end: Option<u64>,
}

impl Put {
    /// True if the put was acknowledged.
    pub fn acknowledged(&self) -> bool {
        self.end.is_some()
    }
}

impl Record for Put {
    const KIND: &'static str = "put";
    fn to_event(&self) -> Event {
        let e = Event::new(Self::KIND)
            .with("item", &self.item)
            .with("producer", &self.producer)
            .with("start", self.start);
        match self.end {
            Some(end) => e.with("end", end),
            None => e,
        }
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Put {
            item: e.parse("item")?,
            producer: e.parse("producer")?,
            start: e.parse("start")?,
            end: e.parse_opt("end")?,
        })
    }
}

/// A delivery: `consumer` took (or completed) `item`; `at` is when that returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Take {
    /// The item's unique name.
    pub item: String,
    /// Who took (completed) it.
    pub consumer: String,
    /// When the take (completion) returned.
    pub at: u64,
}

impl Record for Take {
    const KIND: &'static str = "take";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("item", &self.item)
            .with("consumer", &self.consumer)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Take {
            item: e.parse("item")?,
            consumer: e.parse("consumer")?,
            at: e.parse("at")?,
        })
    }
}

/// A work-queue item completed by `worker` (kind `done`, so one history can hold both
/// takes and completions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The item's unique name.
    pub item: String,
    /// Who completed it.
    pub worker: String,
    /// When the completion was acknowledged.
    pub at: u64,
}

impl Record for Completion {
    const KIND: &'static str = "done";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("item", &self.item)
            .with("worker", &self.worker)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Completion {
            item: e.parse("item")?,
            worker: e.parse("worker")?,
            at: e.parse("at")?,
        })
    }
}

/// An id handed out by an id generator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IssuedId {
    /// The id, as text.
    pub id: String,
    /// Who got it.
    pub owner: String,
}

impl Record for IssuedId {
    const KIND: &'static str = "id";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("id", &self.id)
            .with("owner", &self.owner)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(IssuedId {
            id: e.parse("id")?,
            owner: e.parse("owner")?,
        })
    }
}

/// A configuration value a watcher saw, with the znode's `mzxid` at that read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigSeen {
    /// Who saw it.
    pub watcher: String,
    /// The value (text; hex-encode binary data).
    pub value: String,
    /// `Stat.mzxid` of the read that returned it.
    pub mzxid: i64,
    /// When it was seen ([`monotonic_nanos`]).
    pub at: u64,
}

impl Record for ConfigSeen {
    const KIND: &'static str = "config";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("watcher", &self.watcher)
            .with("value", &self.value)
            .with("mzxid", self.mzxid)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(ConfigSeen {
            watcher: e.parse("watcher")?,
            value: e.parse("value")?,
            mzxid: e.parse("mzxid")?,
            at: e.parse("at")?,
        })
    }
}

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
    fn result(check: &'static str, list: Vec<Violation>) -> Result<(), Violations> {
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

// ------------------------------------------------------------------------------------
// Checkers

fn sorted_sections(sections: &[CriticalSection], out: &mut Vec<Violation>) -> Vec<CriticalSection> {
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
        if longest.map_or(true, |l| s.end > l.end) {
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
            if newest.map_or(true, |n| by_end[j].token > n.token) {
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
fn deliveries<'a>(
    items: impl Iterator<Item = (&'a str, &'a str, u64)>,
) -> BTreeMap<&'a str, Vec<(&'a str, u64)>> {
    let mut map: BTreeMap<&str, Vec<(&str, u64)>> = BTreeMap::new();
    for (item, by, at) in items {
        map.entry(item).or_default().push((by, at));
    }
    map
}

fn check_delivery(
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
            if latest_start.map_or(true, |(s, _)| p.start > s) {
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
        if last.map_or(true, |l| l.value != final_value) {
            out.push(Violation::ConfigNotFinal {
                watcher: watcher.to_string(),
                last: last.map(|l| (*l).clone()),
                expected: final_value.to_string(),
            });
        }
    }
    Violations::result("config watch", out)
}
