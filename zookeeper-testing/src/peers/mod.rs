//! Real Apache Curator and kazoo processes working on the same paths as the code under
//! test, to prove that recipes interoperate with them (mutual exclusion, one leader at a
//! time, at most N permits, every increment counted).
//!
//! A [`Peer`] is a child process running one participant: a Curator 5.x recipe in a JVM
//! (Debian's `libcurator-recipes-java`, compiled with `javac` from
//! `default-jdk-headless`) or a kazoo 2.x recipe in Python (`python3-kazoo`). Both are
//! driven by a line protocol: the test sends a command on the child's stdin, the child
//! answers on stdout with zero or more data lines and one final `OK ...` or
//! `ERROR <message>` line. Lines starting with `EVENT` (listener callbacks) may come at
//! any time and are kept apart ([`Peer::next_event`]).
//!
//! | command | for | data lines | final line |
//! |---|---|---|---|
//! | `ACQUIRE` | lock-like | | `OK <enter_ns>` |
//! | `RELEASE` | lock-like | | `OK <exit_ns>` |
//! | `RUN <count> <hold_us>` | lock-like | `SECTION <enter_ns> <exit_ns>` per section | `OK` |
//! | `GET` | counters | | `OK <value>` |
//! | `SET <value>` | counters | | `OK` |
//! | `ADD <delta> <times>` | counters | `ADDED <pre> <post>` per change | `OK` |
//! | `WATCH` | Curator `SharedCount` | later `EVENT CHANGED <value>` | `OK` |
//! | `JOIN`, `LEAVE` | kazoo `Party`, Curator `GroupMember` | | `OK` |
//! | `MEMBERS` | kazoo `Party`, Curator `GroupMember` (joined) | | `OK <id>,<id>,...` |
//! | `QUIT` | all | | `OK`, then the child exits |
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds (Java's `System.nanoTime()` and Python's
//! `time.monotonic_ns()` read it on Linux), comparable with [`monotonic_ns`] and across
//! processes, so critical sections of every participant can be checked together with
//! [`max_overlap`]. A section's enter stamp is taken after the acquire returned and its
//! exit stamp before the release starts, so stamps understate a section, never
//! overstate it: an overlap of stamps is a real overlap.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_testing::peers::{max_overlap, Participant, Peer};
//!
//! let server = zookeeper_testing::Server::start()?;
//! let mut curator = Peer::start(Participant::CuratorMutex, &server.connect_string(), "/lock")?;
//! let mut kazoo = Peer::start(Participant::KazooLock, &server.connect_string(), "/lock")?;
//! curator.send_run(20, Duration::from_millis(1))?;
//! kazoo.send_run(20, Duration::from_millis(1))?;
//! let mut sections = curator.finish_run(Duration::from_secs(60))?;
//! sections.extend(kazoo.finish_run(Duration::from_secs(60))?);
//! // kazoo's default Lock ignores Curator's lock nodes: this finds overlaps.
//! println!("{:?}", max_overlap(&sections));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Processes
//! Children are spawned with `PR_SET_PDEATHSIG = SIGKILL` from the harness's spawner
//! thread (as the servers are), so they die with the test process; [`Peer`]'s `Drop`
//! SIGKILLs and reaps them. The Java participant is compiled once per test process into
//! a cache dir keyed by the hash of its source (`<tmp>/zk-peers-<hash>`), shared by later
//! runs; the kazoo participant script is written next to it.
//!
//! # Environment
//! - `ZK_HARNESS_JAVA`, `JAVA_HOME`: the `java` to run (as for servers).
//! - `ZK_HARNESS_JAVAC`: the `javac` to compile with (else next to `java`, else `PATH`).
//! - `ZK_HARNESS_CURATOR_CLASSPATH`: Curator's class path (else Debian's jars).
//! - `ZK_HARNESS_PYTHON`: a Python 3 that imports kazoo (else `/usr/bin/python3`).

mod build;
mod commands;
mod process;

use build::*;
pub use process::*;

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::spawner;
use crate::util;

const CURATOR_SOURCE: &str = include_str!("../../peers/CuratorPeer.java");
const CURATOR_CLASS: &str = "CuratorPeer";
const KAZOO_SOURCE: &str = include_str!("../../peers/kazoo_peer.py");
const KAZOO_SCRIPT: &str = "kazoo_peer.py";
const JAVA_DIR: &str = "/usr/share/java";
/// Lines of a child's stderr kept for error messages.
const STDERR_LINES: usize = 40;

/// How long [`Peer::start`] waits for a participant to connect and report `READY`.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything that can go wrong with a peer process.
#[derive(Debug)]
#[non_exhaustive]
pub enum PeerError {
    /// A program or library the participant needs is missing.
    NotInstalled {
        /// What is missing.
        what: String,
        /// How to get it.
        hint: String,
    },
    /// `javac` failed on the Java participant.
    Compile {
        /// The compiler's output.
        output: String,
    },
    /// An I/O operation of the harness failed (spawn, cache dir, a pipe).
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The child exited while an answer was awaited.
    Exited {
        /// Which peer.
        peer: String,
        /// Its exit status, if it could be read.
        status: Option<ExitStatus>,
        /// The last lines of its stderr.
        stderr: String,
    },
    /// No answer in time.
    Timeout {
        /// Which peer.
        peer: String,
        /// What was awaited.
        waiting_for: String,
        /// The last lines of its stderr.
        stderr: String,
    },
    /// The participant answered `ERROR <message>`.
    Command {
        /// Which peer.
        peer: String,
        /// The command.
        command: String,
        /// The participant's message (usually the library's exception).
        message: String,
    },
    /// An answer did not have the expected form.
    Protocol {
        /// Which peer.
        peer: String,
        /// What was wrong.
        detail: String,
    },
    /// A harness step failed.
    Harness(crate::HarnessError),
}

impl PeerError {
    fn io(context: impl Into<String>, source: io::Error) -> PeerError {
        PeerError::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::NotInstalled { what, hint } => write!(f, "{what} is missing; {hint}"),
            PeerError::Compile { output } => {
                write!(f, "compiling the Curator participant failed:\n{output}")
            }
            PeerError::Io { context, source } => write!(f, "{context}: {source}"),
            PeerError::Exited {
                peer,
                status,
                stderr,
            } => {
                write!(f, "peer {peer} exited")?;
                if let Some(status) = status {
                    write!(f, " ({status})")?;
                }
                write!(f, "; its stderr ends with:\n{stderr}")
            }
            PeerError::Timeout {
                peer,
                waiting_for,
                stderr,
            } => write!(
                f,
                "peer {peer}: no answer in time waiting for {waiting_for}; its stderr ends with:\n{stderr}"
            ),
            PeerError::Command {
                peer,
                command,
                message,
            } => write!(f, "peer {peer}: {command} failed: {message}"),
            PeerError::Protocol { peer, detail } => write!(f, "peer {peer}: {detail}"),
            PeerError::Harness(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for PeerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PeerError::Io { source, .. } => Some(source),
            PeerError::Harness(error) => Some(error),
            _ => None,
        }
    }
}

/// Result alias of this module.
pub type PeerResult<T> = std::result::Result<T, PeerError>;

/// The client library a participant runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Library {
    /// Apache Curator 5.x (Java).
    Curator,
    /// kazoo 2.x (Python).
    Kazoo,
}

/// What a peer process runs. Lock-like participants answer `ACQUIRE`, `RELEASE` and
/// `RUN`; counters `GET`, `SET` and `ADD`; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Participant {
    /// Curator `InterProcessMutex` (reentrant; nodes `_c_<uuid>-lock-<seq>`).
    CuratorMutex,
    /// The read lock of a Curator `InterProcessReadWriteLock` (`__READ__` nodes).
    CuratorReadLock,
    /// The write lock of a Curator `InterProcessReadWriteLock` (`__WRIT__` nodes).
    CuratorWriteLock,
    /// Curator `LeaderLatch`: `ACQUIRE` starts a latch and awaits leadership, `RELEASE`
    /// closes it.
    CuratorLeaderLatch,
    /// Curator `InterProcessSemaphoreV2` with this many leases; each `ACQUIRE` takes one.
    CuratorSemaphore {
        /// The semaphore's maximum number of leases.
        permits: u32,
    },
    /// Curator `SharedCount` (a 4-byte big-endian int), created with `seed` if absent.
    /// `ADD` is a `trySetCount` loop. `GET` is `getCount`, which answers from a cache
    /// that Curator's watch updates: it may lag a moment behind other clients' writes.
    CuratorSharedCount {
        /// The value the node is created with.
        seed: i32,
    },
    /// Curator `DistributedAtomicLong` in optimistic mode (an 8-byte big-endian long).
    /// `SET` is `forceSet`.
    CuratorAtomicLong,
    /// kazoo `Lock` (nodes `<uuid>__lock__<seq>`).
    KazooLock,
    /// kazoo `ReadLock` (`__rlock__` nodes).
    KazooReadLock,
    /// kazoo `WriteLock` (`__lock__` nodes).
    KazooWriteLock,
    /// kazoo `Semaphore` with this many leases.
    KazooSemaphore {
        /// The semaphore's maximum number of leases.
        permits: u32,
    },
    /// kazoo `Election` (a kazoo `Lock` underneath): `ACQUIRE` returns once elected.
    KazooElection,
    /// kazoo `Counter` in its default layout (the value as decimal text). `SET` is an
    /// unconditional write of that text.
    KazooCounter,
    /// kazoo `Counter` with `support_curator=True` (Curator `SharedCount`'s 4-byte
    /// big-endian int).
    KazooCuratorCounter,
    /// kazoo `Party` (membership): `JOIN`, `LEAVE`, `MEMBERS`.
    KazooParty,
    /// Curator `GroupMember` (its payload is the id): `JOIN`, `LEAVE`, and `MEMBERS`
    /// while joined (from its cache, which may lag a moment behind the group).
    CuratorGroupMember,
}

impl Participant {
    /// The library it runs on.
    pub fn library(self) -> Library {
        use Participant::*;
        match self {
            CuratorMutex
            | CuratorReadLock
            | CuratorWriteLock
            | CuratorLeaderLatch
            | CuratorSemaphore { .. }
            | CuratorSharedCount { .. }
            | CuratorAtomicLong
            | CuratorGroupMember => Library::Curator,
            KazooLock
            | KazooReadLock
            | KazooWriteLock
            | KazooSemaphore { .. }
            | KazooElection
            | KazooCounter
            | KazooCuratorCounter
            | KazooParty => Library::Kazoo,
        }
    }

    /// Whether it answers `ACQUIRE`, `RELEASE` and `RUN`.
    pub fn is_lock_like(self) -> bool {
        use Participant::*;
        !matches!(
            self,
            CuratorSharedCount { .. }
                | CuratorAtomicLong
                | KazooCounter
                | KazooCuratorCounter
                | KazooParty
                | CuratorGroupMember
        )
    }

    /// The participant programs' recipe argument and extra arguments.
    fn program_args(self) -> (&'static str, Vec<String>) {
        use Participant::*;
        match self {
            CuratorMutex => ("mutex", vec![]),
            CuratorReadLock => ("read-lock", vec![]),
            CuratorWriteLock => ("write-lock", vec![]),
            CuratorLeaderLatch => ("leader-latch", vec![]),
            CuratorSemaphore { permits } => ("semaphore", vec![format!("permits={permits}")]),
            CuratorSharedCount { seed } => ("shared-count", vec![format!("seed={seed}")]),
            CuratorAtomicLong => ("atomic-long", vec![]),
            KazooLock => ("lock", vec![]),
            KazooReadLock => ("read-lock", vec![]),
            KazooWriteLock => ("write-lock", vec![]),
            KazooSemaphore { permits } => ("semaphore", vec![format!("permits={permits}")]),
            KazooElection => ("election", vec![]),
            KazooCounter => ("counter", vec![]),
            KazooCuratorCounter => ("counter", vec!["curator=1".to_string()]),
            KazooParty => ("party", vec![]),
            CuratorGroupMember => ("group-member", vec![]),
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the participants' stamps.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0, "CLOCK_MONOTONIC is always available on Linux");
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// One critical section (a lock held, a lease, a term of leadership) as stamped by its
/// holder, in [`monotonic_ns`] time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Who held it (a peer's label, or any name the test gives its own sections).
    pub holder: String,
    /// Stamp taken after the acquire returned.
    pub enter_ns: u64,
    /// Stamp taken before the release started.
    pub exit_ns: u64,
}

/// The largest number of sections that overlap at one instant, and one instant where
/// that many overlap (`None` for no sections). A lock must give 1, a semaphore at most
/// its permits. Sections that merely touch (one's exit equals the next one's enter) do
/// not overlap.
pub fn max_overlap(sections: &[Section]) -> (usize, Option<u64>) {
    // Exits sort before enters at the same instant: touching is not overlapping.
    let mut points: Vec<(u64, i8)> = Vec::with_capacity(sections.len() * 2);
    for s in sections {
        points.push((s.enter_ns, 1));
        points.push((s.exit_ns.max(s.enter_ns), -1));
    }
    points.sort_unstable();
    let (mut now, mut best, mut at) = (0i64, 0usize, None);
    for (t, step) in points {
        now += i64::from(step);
        if now > best as i64 {
            best = now as usize;
            at = Some(t);
        }
    }
    (best, at)
}

/// The sections open at instant `t`, for a failure message after [`max_overlap`].
pub fn sections_at(sections: &[Section], t: u64) -> Vec<&Section> {
    sections
        .iter()
        .filter(|s| s.enter_ns <= t && t < s.exit_ns)
        .collect()
}

/// The answer to one command: its data lines and the text after the final `OK`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Data lines before the final line.
    pub lines: Vec<String>,
    /// The text after `OK` (trimmed; empty for a bare `OK`).
    pub ok: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(enter: u64, exit: u64) -> Section {
        Section {
            holder: format!("{enter}"),
            enter_ns: enter,
            exit_ns: exit,
        }
    }

    #[test]
    fn overlap_counts_concurrent_sections() {
        assert_eq!(max_overlap(&[]), (0, None));
        assert_eq!(max_overlap(&[s(1, 2), s(2, 3), s(3, 4)]).0, 1);
        assert_eq!(max_overlap(&[s(1, 5), s(2, 3), s(4, 6)]), (2, Some(2)));
        assert_eq!(max_overlap(&[s(1, 10), s(2, 9), s(3, 8), s(9, 12)]).0, 3);
        let all = [s(1, 10), s(2, 3)];
        assert_eq!(sections_at(&all, 2).len(), 2);
        assert_eq!(sections_at(&all, 3).len(), 1);
    }

    #[test]
    fn participants_name_their_library() {
        assert_eq!(Participant::CuratorMutex.library(), Library::Curator);
        assert_eq!(Participant::KazooParty.library(), Library::Kazoo);
        assert!(Participant::KazooElection.is_lock_like());
        assert!(!Participant::CuratorAtomicLong.is_lock_like());
        let (recipe, extra) = Participant::KazooSemaphore { permits: 3 }.program_args();
        assert_eq!(
            (recipe, extra),
            ("semaphore", vec!["permits=3".to_string()])
        );
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
