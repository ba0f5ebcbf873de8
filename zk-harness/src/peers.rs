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
//! use zk_harness::peers::{max_overlap, Participant, Peer};
//!
//! let server = zk_harness::Server::start()?;
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

const CURATOR_SOURCE: &str = include_str!("../peers/CuratorPeer.java");
const CURATOR_CLASS: &str = "CuratorPeer";
const KAZOO_SOURCE: &str = include_str!("../peers/kazoo_peer.py");
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

/// How to start a peer; from [`Peer::builder`].
#[derive(Debug, Clone)]
pub struct PeerBuilder {
    participant: Participant,
    connect: String,
    path: String,
    id: Option<String>,
    session_timeout: Duration,
    start_timeout: Duration,
}

impl PeerBuilder {
    /// The participant's id (lock node data, `LeaderLatch` id, party member id; the
    /// default is its label).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The session timeout it asks for (default 10 s).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`start`](Self::start) waits for `READY` (default
    /// [`DEFAULT_START_TIMEOUT`]).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Spawns the process and waits until it reports `READY` (connected, recipe built).
    pub fn start(self) -> PeerResult<Peer> {
        let timeout = self.start_timeout;
        let mut peer = self.spawn()?;
        peer.wait_ready(timeout)?;
        Ok(peer)
    }

    /// Spawns the process without waiting; call [`Peer::wait_ready`] before commands.
    /// Starting several peers this way overlaps their start-up (a JVM takes a second or
    /// more).
    pub fn spawn(self) -> PeerResult<Peer> {
        let (recipe, extra) = self.participant.program_args();
        let label = format!(
            "{recipe}@{:?}#{}",
            self.participant.library(),
            next_serial()
        );
        let mut args = vec![
            recipe.to_string(),
            format!("connect={}", self.connect),
            format!("path={}", self.path),
            format!("id={}", self.id.as_deref().unwrap_or(&label)),
            format!("session_ms={}", self.session_timeout.as_millis()),
        ];
        args.extend(extra);
        let mut cmd = match self.participant.library() {
            Library::Curator => curator_command()?,
            Library::Kazoo => kazoo_command()?,
        };
        cmd.args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = spawner::spawn(cmd)
            .map_err(|e| PeerError::io(format!("spawning {program} for {label}"), e))?;
        Ok(Peer::attach(label, self.participant, child))
    }
}

fn next_serial() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    SERIAL.fetch_add(1, Ordering::Relaxed)
}

/// What the stdout reader passes on.
enum Output {
    Line(String),
    Event(String),
}

/// A running participant process (see the [module docs](self)). Dropping it SIGKILLs
/// and reaps the process.
pub struct Peer {
    label: String,
    participant: Participant,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Output>,
    events: VecDeque<String>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The command whose answer is awaited, if any.
    pending: Option<String>,
    /// A line received ahead of time ([`Peer::answered_within`]), delivered next.
    peeked: Option<String>,
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("label", &self.label)
            .field("pid", &self.child.id())
            .field("pending", &self.pending)
            .finish()
    }
}

impl Peer {
    /// Starts `participant` on `path` of the servers in `connect` with default settings
    /// and waits until it is `READY`.
    pub fn start(participant: Participant, connect: &str, path: &str) -> PeerResult<Peer> {
        Peer::builder(participant, connect, path).start()
    }

    /// A builder for `participant` on `path` of the servers in `connect`.
    pub fn builder(participant: Participant, connect: &str, path: &str) -> PeerBuilder {
        PeerBuilder {
            participant,
            connect: connect.to_string(),
            path: path.to_string(),
            id: None,
            session_timeout: Duration::from_secs(10),
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }

    fn attach(label: String, participant: Participant, mut child: Child) -> Peer {
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    let out = match line.strip_prefix("EVENT ") {
                        Some(event) => Output::Event(event.to_string()),
                        None => Output::Line(line),
                    };
                    if tx.send(out).is_err() {
                        return;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(err) = child.stderr.take() {
            let tail = Arc::clone(&stderr);
            thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { return };
                    let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
                    if tail.len() == STDERR_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        Peer {
            label,
            participant,
            stdin: child.stdin.take(),
            child,
            lines,
            events: VecDeque::new(),
            stderr,
            pending: Some("READY".to_string()),
            peeked: None,
        }
    }

    /// A label naming the participant and library, unique in this process (also the
    /// default id and the holder of its sections).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What it runs.
    pub fn participant(&self) -> Participant {
        self.participant
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the child wrote to stderr (library warnings, stack traces).
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        tail.iter()
            .map(|l| format!("  {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the child reports `READY` (after [`PeerBuilder::spawn`]).
    pub fn wait_ready(&mut self, timeout: Duration) -> PeerResult<()> {
        if self.pending.as_deref() != Some("READY") {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let line = self.next_line(deadline)?;
        self.pending = None;
        if line.trim() == "READY" {
            Ok(())
        } else {
            Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: format!("expected READY, got {line:?}"),
            })
        }
    }

    /// Sends one command line without waiting for its answer; [`finish`](Self::finish)
    /// collects it. One command at a time: send another only after `finish`.
    pub fn send(&mut self, command: &str) -> PeerResult<()> {
        if let Some(pending) = &self.pending {
            return Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: format!("{command} sent while {pending} is unanswered"),
            });
        }
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(self.exited());
        };
        if writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return Err(self.exited());
        }
        self.pending = Some(command.to_string());
        Ok(())
    }

    /// Waits for the answer to the command [`send`](Self::send) sent.
    pub fn finish(&mut self, timeout: Duration) -> PeerResult<Reply> {
        let Some(command) = self.pending.clone() else {
            return Err(PeerError::Protocol {
                peer: self.label.clone(),
                detail: "no command is awaiting an answer".to_string(),
            });
        };
        let deadline = Instant::now() + timeout;
        let mut reply = Reply::default();
        loop {
            let line = self.next_line(deadline).map_err(|e| match e {
                PeerError::Timeout {
                    peer,
                    waiting_for,
                    stderr,
                } => PeerError::Timeout {
                    peer,
                    waiting_for: format!("{waiting_for} (the answer to {command})"),
                    stderr,
                },
                other => other,
            })?;
            if line == "OK" || line.starts_with("OK ") {
                self.pending = None;
                reply.ok = line[2..].trim().to_string();
                return Ok(reply);
            }
            if let Some(message) = line.strip_prefix("ERROR") {
                self.pending = None;
                return Err(PeerError::Command {
                    peer: self.label.clone(),
                    command,
                    message: message.trim().to_string(),
                });
            }
            reply.lines.push(line);
        }
    }

    /// [`send`](Self::send) then [`finish`](Self::finish).
    pub fn call(&mut self, command: &str, timeout: Duration) -> PeerResult<Reply> {
        self.send(command)?;
        self.finish(timeout)
    }

    /// Acquires (lock, lease, leadership), waiting up to `timeout`; returns the enter
    /// stamp. A timeout leaves the acquire running in the child: drop the peer then.
    pub fn acquire(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.call("ACQUIRE", timeout)?;
        self.stamp(&reply.ok)
    }

    /// Starts an acquire without waiting (e.g. to check it stays blocked while this
    /// process holds the lock); [`finish_acquire`](Self::finish_acquire) waits for it.
    pub fn send_acquire(&mut self) -> PeerResult<()> {
        self.send("ACQUIRE")
    }

    /// Waits for the acquire [`send_acquire`](Self::send_acquire) started; returns the
    /// enter stamp.
    pub fn finish_acquire(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.finish(timeout)?;
        self.stamp(&reply.ok)
    }

    /// Whether an answer (to the pending command) has arrived, without consuming it; for
    /// "still blocked" checks.
    pub fn answered_within(&mut self, wait: Duration) -> PeerResult<bool> {
        if self.peeked.is_some() {
            return Ok(true);
        }
        let deadline = Instant::now() + wait;
        match self.next_line(deadline) {
            Ok(line) => {
                self.peeked = Some(line);
                Ok(true)
            }
            Err(PeerError::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Releases what the last acquire took; returns the exit stamp.
    pub fn release(&mut self, timeout: Duration) -> PeerResult<u64> {
        let reply = self.call("RELEASE", timeout)?;
        self.stamp(&reply.ok)
    }

    /// Starts `count` acquire / hold for `hold` / release rounds without waiting.
    pub fn send_run(&mut self, count: u32, hold: Duration) -> PeerResult<()> {
        self.send(&format!("RUN {count} {}", hold.as_micros()))
    }

    /// Waits for the rounds of [`send_run`](Self::send_run); returns their sections.
    pub fn finish_run(&mut self, timeout: Duration) -> PeerResult<Vec<Section>> {
        let reply = self.finish(timeout)?;
        reply
            .lines
            .iter()
            .map(|line| {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("SECTION"), Some(enter), Some(exit)) => Ok(Section {
                        holder: self.label.clone(),
                        enter_ns: self.stamp(enter)?,
                        exit_ns: self.stamp(exit)?,
                    }),
                    _ => Err(self.protocol(format!("expected SECTION, got {line:?}"))),
                }
            })
            .collect()
    }

    /// Runs `count` rounds (see [`send_run`](Self::send_run)) and returns the sections.
    pub fn run(
        &mut self,
        count: u32,
        hold: Duration,
        timeout: Duration,
    ) -> PeerResult<Vec<Section>> {
        self.send_run(count, hold)?;
        self.finish_run(timeout)
    }

    /// A counter's value, as the participant's library reads it.
    pub fn get(&mut self, timeout: Duration) -> PeerResult<i64> {
        let reply = self.call("GET", timeout)?;
        self.number(&reply.ok)
    }

    /// Sets a counter's value (Curator `setCount` / `forceSet`; kazoo: an unconditional
    /// write in the counter's layout).
    pub fn set(&mut self, value: i64, timeout: Duration) -> PeerResult<()> {
        self.call(&format!("SET {value}"), timeout).map(drop)
    }

    /// Starts `times` changes of a counter by `delta` without waiting.
    pub fn send_add(&mut self, delta: i64, times: u32) -> PeerResult<()> {
        self.send(&format!("ADD {delta} {times}"))
    }

    /// Waits for the changes of [`send_add`](Self::send_add); returns each change's
    /// `(pre, post)` values as the library reported them.
    pub fn finish_add(&mut self, timeout: Duration) -> PeerResult<Vec<(i64, i64)>> {
        let reply = self.finish(timeout)?;
        reply
            .lines
            .iter()
            .map(|line| {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("ADDED"), Some(pre), Some(post)) => {
                        Ok((self.number(pre)?, self.number(post)?))
                    }
                    _ => Err(self.protocol(format!("expected ADDED, got {line:?}"))),
                }
            })
            .collect()
    }

    /// Changes a counter by `delta`, `times` times; returns the `(pre, post)` pairs.
    pub fn add(
        &mut self,
        delta: i64,
        times: u32,
        timeout: Duration,
    ) -> PeerResult<Vec<(i64, i64)>> {
        self.send_add(delta, times)?;
        self.finish_add(timeout)
    }

    /// Curator `SharedCount`: subscribe to changes; each comes as event `CHANGED <value>`
    /// (see [`next_event`](Self::next_event) and [`wait_for_value`](Self::wait_for_value)).
    pub fn watch(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("WATCH", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: join.
    pub fn join(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("JOIN", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: leave.
    pub fn leave(&mut self, timeout: Duration) -> PeerResult<()> {
        self.call("LEAVE", timeout).map(drop)
    }

    /// kazoo `Party`, Curator `GroupMember`: the members' ids, sorted.
    pub fn members(&mut self, timeout: Duration) -> PeerResult<Vec<String>> {
        let reply = self.call("MEMBERS", timeout)?;
        Ok(reply
            .ok
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// The next `EVENT` line (without the `EVENT ` prefix), waiting up to `timeout`;
    /// `Ok(None)` if none came. Events are queued while commands run.
    pub fn next_event(&mut self, timeout: Duration) -> PeerResult<Option<String>> {
        if let Some(event) = self.events.pop_front() {
            return Ok(Some(event));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Output::Event(event)) => return Ok(Some(event)),
                Ok(Output::Line(line)) => {
                    if self.peeked.is_none() {
                        self.peeked = Some(line);
                    } else {
                        return Err(self.protocol(format!("unexpected line {line:?}")));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited()),
            }
        }
    }

    /// Waits until a `CHANGED <value>` event reports `value` (the peer's library saw the
    /// node at that value); earlier events are skipped.
    pub fn wait_for_value(&mut self, value: i64, timeout: Duration) -> PeerResult<()> {
        let deadline = Instant::now() + timeout;
        let want = format!("CHANGED {value}");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left)? {
                Some(event) if event.trim() == want => return Ok(()),
                Some(_) => continue,
                None => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: format!("event {want}"),
                        stderr: self.stderr_tail(),
                    })
                }
            }
        }
    }

    /// Asks the child to close its client and exit (its session ends at once), waiting
    /// up to `timeout`; it is killed if it does not exit in time.
    pub fn quit(mut self, timeout: Duration) -> PeerResult<()> {
        if self.pending.is_some() {
            return Err(self.protocol("QUIT while a command is unanswered".to_string()));
        }
        self.call("QUIT", timeout)?;
        self.stdin.take();
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: "exit after QUIT".to_string(),
                        stderr: self.stderr_tail(),
                    })
                }
            }
        }
    }

    /// SIGKILLs the child (no cleanup: its session just stops talking and expires later)
    /// and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The next non-event line, before `deadline`.
    fn next_line(&mut self, deadline: Instant) -> PeerResult<String> {
        if let Some(line) = self.peeked.take() {
            return Ok(line);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(Output::Line(line)) => return Ok(line),
                Ok(Output::Event(event)) => self.events.push_back(event),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(PeerError::Timeout {
                        peer: self.label.clone(),
                        waiting_for: self.pending.clone().unwrap_or_default(),
                        stderr: self.stderr_tail(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.exited()),
            }
        }
    }

    fn exited(&mut self) -> PeerError {
        // The stdout reader ends first; give the process a moment to be reapable and
        // the stderr reader to catch the last lines.
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        thread::sleep(Duration::from_millis(50));
        PeerError::Exited {
            peer: self.label.clone(),
            status,
            stderr: self.stderr_tail(),
        }
    }

    fn protocol(&self, detail: String) -> PeerError {
        PeerError::Protocol {
            peer: self.label.clone(),
            detail,
        }
    }

    fn stamp(&self, text: &str) -> PeerResult<u64> {
        text.trim()
            .parse()
            .map_err(|_| self.protocol(format!("expected a time stamp, got {text:?}")))
    }

    fn number(&self, text: &str) -> PeerResult<i64> {
        text.trim()
            .parse()
            .map_err(|_| self.protocol(format!("expected a number, got {text:?}")))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The child is not reaped before this, so its pid is still ours.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// Building the participant commands.
// ---------------------------------------------------------------------------------------

/// A hash of everything that makes up the participants (sources), as a cache key.
fn sources_hash() -> u64 {
    let mut h = DefaultHasher::new();
    CURATOR_SOURCE.hash(&mut h);
    KAZOO_SOURCE.hash(&mut h);
    h.finish()
}

/// The cache dir holding the compiled Java participant and the kazoo script, made once
/// per process.
fn prepared_dir() -> PeerResult<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    // A failure is kept as text (errors are not Clone) and reported to every caller.
    let result = DIR.get_or_init(|| prepare_dir().map_err(|e| e.to_string()));
    match result {
        Ok(dir) => Ok(dir.clone()),
        Err(message) => Err(PeerError::io(
            "preparing the peer participants",
            io::Error::other(message.clone()),
        )),
    }
}

fn prepare_dir() -> PeerResult<PathBuf> {
    let base = std::env::temp_dir();
    let dir = base.join(format!("zk-peers-{:016x}", sources_hash()));
    if dir.join(".complete").is_file() {
        return Ok(dir);
    }
    // Build in a private dir and rename it into place: concurrent test processes may race
    // here, and the loser just uses the winner's dir.
    let staging = base.join(format!(
        "zk-peers-{:016x}.{}-{}",
        sources_hash(),
        std::process::id(),
        next_serial()
    ));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging)
        .map_err(|e| PeerError::io(format!("creating {}", staging.display()), e))?;
    let built = build_into(&staging);
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    match fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        Err(_) if dir.join(".complete").is_file() => {
            let _ = fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(_) => {
            // A stale, incomplete dir from a killed run: replace it.
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&staging, &dir).map_err(|e| {
                let _ = fs::remove_dir_all(&staging);
                PeerError::io(format!("moving the participants to {}", dir.display()), e)
            })?;
            Ok(dir)
        }
    }
}

fn build_into(dir: &Path) -> PeerResult<()> {
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text)
            .map_err(|e| PeerError::io(format!("writing {name} into {}", dir.display()), e))
    };
    write(KAZOO_SCRIPT, KAZOO_SOURCE)?;
    let javac = find_javac();
    let compile = |class: &str, source: &str, classpath: &str| -> PeerResult<()> {
        let file = format!("{class}.java");
        write(&file, source)?;
        let javac = javac.as_ref().map_err(|_| not_installed_javac())?;
        let output = Command::new(javac)
            .arg("-nowarn")
            .arg("-d")
            .arg(dir)
            .arg("-cp")
            .arg(classpath)
            .arg(dir.join(&file))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => not_installed_javac(),
                _ => PeerError::io(format!("running {}", javac.display()), e),
            })?;
        if !output.status.success() {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            return Err(PeerError::Compile { output: text });
        }
        Ok(())
    };
    // Each is compiled only if its libraries are there (kazoo peers need neither), and
    // only if javac is.
    if javac.is_ok() {
        if let Ok(classpath) = curator_classpath() {
            compile(CURATOR_CLASS, CURATOR_SOURCE, &classpath)?;
        }
    }
    write(".complete", "")
}

fn not_installed_javac() -> PeerError {
    PeerError::NotInstalled {
        what: "javac".to_string(),
        hint: "run ./setup.sh (Debian package default-jdk-headless), or set ZK_HARNESS_JAVAC"
            .to_string(),
    }
}

/// `$ZK_HARNESS_JAVAC`, else `javac` next to the `java` the harness runs (symlinks
/// followed), else `javac` on `PATH`.
fn find_javac() -> PeerResult<PathBuf> {
    if let Some(p) = std::env::var_os("ZK_HARNESS_JAVAC").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Ok(java) = util::find_java() {
        if let Ok(real) = fs::canonicalize(&java) {
            if let Some(bin) = real.parent() {
                let javac = bin.join("javac");
                if javac.is_file() {
                    return Ok(javac);
                }
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let javac = dir.join("javac");
            if javac.is_file() {
                return Ok(javac);
            }
        }
    }
    Err(not_installed_javac())
}

/// Curator's class path: `$ZK_HARNESS_CURATOR_CLASSPATH`, else Debian's
/// `curator-recipes.jar` (its manifest names curator-framework, curator-client, guava,
/// slf4j-api and the ZooKeeper client jars).
fn curator_classpath() -> PeerResult<String> {
    if let Some(cp) = std::env::var("ZK_HARNESS_CURATOR_CLASSPATH")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Ok(cp);
    }
    let jar = Path::new(JAVA_DIR).join("curator-recipes.jar");
    if !jar.is_file() {
        return Err(PeerError::NotInstalled {
            what: jar.display().to_string(),
            hint: "run ./setup.sh (Debian package libcurator-recipes-java), or set \
                   ZK_HARNESS_CURATOR_CLASSPATH"
                .to_string(),
        });
    }
    Ok(jar.display().to_string())
}

/// The prepared dir, checked to hold `class` (compiled).
fn compiled(class: &str) -> PeerResult<PathBuf> {
    let dir = prepared_dir()?;
    if !dir.join(format!("{class}.class")).is_file() {
        // The cache was built while javac or a library was missing; it is keyed by the
        // sources only.
        find_javac()?;
        return Err(PeerError::NotInstalled {
            what: format!("{class}.class in {}", dir.display()),
            hint: format!(
                "a library was missing when the participants were compiled; remove {} and retry",
                dir.display()
            ),
        });
    }
    Ok(dir)
}

fn java() -> PeerResult<PathBuf> {
    util::find_java().map_err(|e| PeerError::NotInstalled {
        what: "java".to_string(),
        hint: e.to_string(),
    })
}

fn curator_command() -> PeerResult<Command> {
    let classpath = curator_classpath()?;
    let dir = compiled(CURATOR_CLASS)?;
    let java = java()?;
    let mut full = format!("{}:{classpath}", dir.display());
    // Warnings (connection trouble) to stderr, which the peer keeps for error messages;
    // without a binding SLF4J would log nothing at all.
    let simple = Path::new(JAVA_DIR).join("slf4j-simple.jar");
    if simple.is_file() {
        full.push(':');
        full.push_str(&simple.display().to_string());
    }
    let mut cmd = Command::new(java);
    cmd.args([
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-XX:-UsePerfData",
        "-Djava.net.preferIPv4Stack=true",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        &full,
        CURATOR_CLASS,
    ]);
    Ok(cmd)
}

/// The Python that runs kazoo participants: `$ZK_HARNESS_PYTHON`, else
/// `/usr/bin/python3` (Debian's `python3-kazoo` is installed for it; a `python3` earlier
/// on `PATH`, e.g. from pyenv, may not have kazoo).
fn python() -> PathBuf {
    std::env::var_os("ZK_HARNESS_PYTHON")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from)
}

fn kazoo_command() -> PeerResult<Command> {
    static KAZOO: OnceLock<Result<(), String>> = OnceLock::new();
    let python = python();
    let check = KAZOO.get_or_init(|| {
        match Command::new(&python)
            .args(["-c", "import kazoo"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
    if let Err(message) = check {
        return Err(PeerError::NotInstalled {
            what: format!("kazoo for {} ({message})", python.display()),
            hint: "run ./setup.sh (Debian package python3-kazoo), or set ZK_HARNESS_PYTHON"
                .to_string(),
        });
    }
    let dir = prepared_dir()?;
    let mut cmd = Command::new(python);
    // -u: unbuffered, so every answer line reaches the pipe at once.
    cmd.arg("-u").arg(dir.join(KAZOO_SCRIPT));
    Ok(cmd)
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
