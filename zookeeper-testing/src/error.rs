//! The harness error type.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while starting, stopping or probing a test server.
///
/// Messages are meant to be printed as-is in a failing test: start failures carry the
/// server log path and its last lines.
#[derive(Debug)]
#[non_exhaustive]
pub enum HarnessError {
    /// No `java` executable was found (or it could not be executed).
    JavaNotFound {
        /// The program the harness tried to run.
        program: PathBuf,
        /// The underlying error, if the program was found but could not be run.
        source: Option<io::Error>,
    },
    /// The ZooKeeper server jar is missing.
    ZooKeeperNotInstalled {
        /// The jar the harness looked for.
        jar: PathBuf,
    },
    /// An I/O operation of the harness itself failed (temp dir, config file, spawn, ...).
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A server process did not become ready: it exited, or the deadline passed.
    StartFailed {
        /// Which server (address, ensemble member).
        server: String,
        /// Why the harness gave up.
        reason: String,
        /// The server log file (JVM stdout and stderr).
        log_path: PathBuf,
        /// The last lines of the log file.
        log_tail: String,
    },
    /// A condition (leader elected, quorum formed, ...) was not reached in time.
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the harness waited.
        waited: Duration,
        /// State observed at the deadline, with log excerpts.
        details: String,
    },
    /// The operation needs a running (or a paused, or a not paused) server.
    NotRunning {
        /// Which server and what was attempted.
        what: String,
    },
    /// A four-letter-word exchange failed.
    FourLetter {
        /// The address that was contacted.
        addr: String,
        /// The command that was sent.
        cmd: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A server refused to resume a session: it expired or was closed (a wrong password
    /// gets the same answer).
    SessionExpired {
        /// The session that was refused.
        session_id: i64,
    },
    /// An argument was out of range (empty ensemble, bad four-letter word, ...).
    InvalidArgument(String),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source,
        }
    }
}

const SETUP_HINT: &str =
    "install the Debian package `zookeeper` (`apt-get install zookeeper`: it brings a Java \
     runtime and /usr/share/java/zookeeper.jar; this project's `./setup.sh` does it), or set \
     ZOOKEEPER_HOME to an unpacked Apache ZooKeeper release";

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::JavaNotFound { program, source } => {
                write!(f, "cannot run java ({})", program.display())?;
                if let Some(e) = source {
                    write!(f, ": {e}")?;
                }
                write!(
                    f,
                    "; {SETUP_HINT} (or set ZK_HARNESS_JAVA / JAVA_HOME to a Java runtime)"
                )
            }
            HarnessError::ZooKeeperNotInstalled { jar } => write!(
                f,
                "ZooKeeper server jar {} not found; {SETUP_HINT} (or set ZK_HARNESS_CLASSPATH)",
                jar.display()
            ),
            HarnessError::Io { context, source } => write!(f, "{context}: {source}"),
            HarnessError::StartFailed {
                server,
                reason,
                log_path,
                log_tail,
            } => write!(
                f,
                "ZooKeeper {server} did not start: {reason}\nserver log {} (last lines):\n{log_tail}",
                log_path.display()
            ),
            HarnessError::Timeout {
                what,
                waited,
                details,
            } => write!(f, "timed out after {waited:?} waiting for {what}\n{details}"),
            HarnessError::NotRunning { what } => write!(f, "{what}"),
            HarnessError::FourLetter { addr, cmd, source } => {
                write!(f, "four-letter word `{cmd}` to {addr} failed: {source}")
            }
            HarnessError::SessionExpired { session_id } => {
                write!(f, "session {session_id:#x} is expired (the server refused it)")
            }
            HarnessError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HarnessError::JavaNotFound {
                source: Some(e), ..
            } => Some(e),
            HarnessError::Io { source, .. } | HarnessError::FourLetter { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

/// Result alias of the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
