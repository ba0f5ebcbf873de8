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

mod checkers;
mod files;
mod records;
mod violations;

pub use checkers::*;
pub use files::*;
pub use records::*;
pub use violations::*;

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
