//! The recipes' error type: the client's errors plus what a recipe itself can report.

use crate::leadership::leader_latch::LeadershipLost;
use crate::locks::lock::LockLost;
use std::fmt;

/// Shorthand for recipe results.
pub type Result<T, E = RecipeError> = std::result::Result<T, E>;

/// An error from a recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecipeError {
    /// The client (or server) reported an error.
    ZooKeeper(zookeeper_mt::Error),
    /// A blocking call's deadline passed.
    Timeout,
    /// The recipe's own state no longer holds, e.g. a lock lost with its session.
    Lost(LossReason),
    /// Bad input to the recipe (an empty name, a zero batch size, ...).
    InvalidArgument(&'static str),
    /// Data found in ZooKeeper that the recipe did not write (e.g. a counter that is not a number).
    Corrupt(String),
    /// The directory's sequence counter is at its end (see
    /// [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) and
    /// [`NodeOptions::sequence_limit`](crate::NodeOptions::sequence_limit)) and the
    /// directory could not be restarted in time because it is not empty. Nothing was left
    /// behind by the failed call; the next call after the directory has drained restarts
    /// it (a container directory the server removed once empty is created afresh too).
    SequenceExhausted {
        /// The recipe directory.
        dir: String,
    },
    /// A batched put (such as [`Queue::put_all`](crate::queues::queue::Queue::put_all)) enqueued
    /// only the first `enqueued` items of its batch, in order, each exactly once; then
    /// `error` stopped it. The item at index `enqueued` may or may not be enqueued if
    /// `error` is a session error (as for a single put); the items after it are not.
    /// Only happens when the batch crossed its directory's sequence counter limit in a
    /// race with other producers (see the queue docs).
    PartlyEnqueued {
        /// How many items, from the start of the batch, are in the queue.
        enqueued: usize,
        /// Why the rest is not.
        error: Box<RecipeError>,
    },
}

impl From<zookeeper_mt::Error> for RecipeError {
    fn from(error: zookeeper_mt::Error) -> Self {
        match error {
            zookeeper_mt::Error::Timeout => RecipeError::Timeout,
            other => RecipeError::ZooKeeper(other),
        }
    }
}

impl RecipeError {
    /// The same call may succeed if made again as it is, on the same handle: the
    /// connection dropped or the handle was full ([`zookeeper_mt::Error::is_retryable`]),
    /// or the call's deadline passed ([`RecipeError::Timeout`]). A lost lock, bad input,
    /// corrupt data, a partly applied batch or a session that ended are not.
    ///
    /// On a `ManagedZooKeeper`, a call whose session ended can be made again too (it runs
    /// on the new session): that is [`is_retryable_on`](Self::is_retryable_on).
    pub fn is_retryable(&self) -> bool {
        match self {
            RecipeError::ZooKeeper(error) => error.is_retryable(),
            RecipeError::Timeout => true,
            _ => false,
        }
    }

    /// The session the call ran on is over (expired, authentication failed, or the
    /// handle closed), whether the client reported it or a recipe found its node gone
    /// with the session. A plain handle is then of no more use; a `ManagedZooKeeper`
    /// carries on with a new session (see [`is_retryable_on`](Self::is_retryable_on)).
    pub fn is_session_terminal(&self) -> bool {
        match self {
            RecipeError::ZooKeeper(error) => error.is_session_terminal(),
            RecipeError::Lost(LossReason::Lock(lost)) => {
                matches!(lost, LockLost::SessionExpired | LockLost::Closed)
            }
            RecipeError::Lost(LossReason::Leadership(lost)) => {
                matches!(
                    lost,
                    LeadershipLost::SessionExpired | LeadershipLost::Closed
                )
            }
            RecipeError::PartlyEnqueued { error, .. } => error.is_session_terminal(),
            _ => false,
        }
    }

    /// Whether the call that failed may be made again on `client`: [`is_retryable`]
    /// errors on any client, and on a client that renews its sessions
    /// (`ManagedZooKeeper`) an expired session too, since the next call runs on the new
    /// session. A closed handle is final on both.
    ///
    /// [`is_retryable`]: Self::is_retryable
    ///
    /// ```no_run
    /// # fn demo(client: &zookeeper_mt_recipes::Client, jobs: &zookeeper_mt_recipes::Queue)
    /// # -> zookeeper_mt_recipes::Result<()> {
    /// use zookeeper_mt::Timeout;
    /// let job = loop {
    ///     match jobs.take(Timeout::Never) {
    ///         Err(error) if error.is_retryable_on(client) => continue,
    ///         other => break other?,
    ///     }
    /// };
    /// # drop(job); Ok(()) }
    /// ```
    pub fn is_retryable_on(&self, client: &crate::Client) -> bool {
        if self.is_retryable() {
            return true;
        }
        client.renews_sessions() && self.is_session_terminal() && !self.is_closed()
    }

    /// The handle (or recipe value) was closed.
    fn is_closed(&self) -> bool {
        matches!(
            self,
            RecipeError::ZooKeeper(zookeeper_mt::Error::Closed | zookeeper_mt::Error::Closing)
                | RecipeError::Lost(
                    LossReason::Closed
                        | LossReason::Lock(LockLost::Closed)
                        | LossReason::Leadership(LeadershipLost::Closed)
                )
        )
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecipeError::ZooKeeper(error) => write!(f, "zookeeper: {error}"),
            RecipeError::Timeout => f.write_str("timed out"),
            RecipeError::Lost(reason) => write!(f, "lost: {reason}"),
            RecipeError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            RecipeError::Corrupt(what) => write!(f, "unexpected data: {what}"),
            RecipeError::SequenceExhausted { dir } => {
                write!(f, "the sequence counter of {dir} is at its end")
            }
            RecipeError::PartlyEnqueued { enqueued, error } => {
                write!(
                    f,
                    "only the first {enqueued} items of the batch were enqueued: {error}"
                )
            }
        }
    }
}

impl std::error::Error for RecipeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecipeError::ZooKeeper(error) => Some(error),
            RecipeError::PartlyEnqueued { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// Why a recipe's state no longer holds ([`RecipeError::Lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// A held lock (or lease, or leadership guarded the same way) was lost.
    Lock(LockLost),
    /// Leadership held through a latch was lost.
    Leadership(LeadershipLost),
    /// This participant's own node vanished while it waited: its session expired or
    /// someone deleted the node.
    NodeGone,
    /// A work item is no longer held by this claim (its session ended or another
    /// consumer re-claimed it).
    NotHeld,
    /// A fenced write was refused: the guard's lock node is gone or changed.
    FenceRefused,
    /// The id counter node was deleted; restarting it at 0 would hand out ids again.
    CounterDeleted,
    /// The id counter node does not exist (never created with
    /// [`IdGenerator::create_counter`](crate::shared::id_generator::IdGenerator::create_counter),
    /// or deleted).
    CounterMissing,
    /// This candidate resigned.
    Resigned,
    /// Leadership was relinquished.
    Relinquished,
    /// The recipe object was closed.
    Closed,
    /// The recipe's background task could not start or stopped abnormally.
    WorkerFailed,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Lock(lost) => lost.fmt(f),
            LossReason::Leadership(lost) => lost.fmt(f),
            LossReason::NodeGone => {
                f.write_str("our node vanished (session expired or node deleted)")
            }
            LossReason::NotHeld => f.write_str("the work item is no longer held by this claim"),
            LossReason::FenceRefused => {
                f.write_str("fenced write refused: the lock node is gone or changed")
            }
            LossReason::CounterDeleted => f.write_str("the id counter node was deleted"),
            LossReason::CounterMissing => f.write_str("the id counter node does not exist"),
            LossReason::Resigned => f.write_str("this candidate has resigned"),
            LossReason::Relinquished => f.write_str("leadership relinquished"),
            LossReason::Closed => f.write_str("closed"),
            LossReason::WorkerFailed => f.write_str("the background task failed"),
        }
    }
}

/// Turns a wait that timed out into `Ok(None)`, for callers that treat "not in time" as
/// an ordinary outcome rather than an error (the way rusqlite's `OptionalExtension` treats
/// "no rows").
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt_recipes::{locks::Lock, OptionalExtension};
/// # fn demo(lock: &Lock) -> zookeeper_mt_recipes::Result<()> {
/// match lock.acquire(Duration::from_secs(1)).optional()? {
///     Some(guard) => { /* hold it */ drop(guard) }
///     None => { /* busy: try later */ }
/// }
/// # Ok(()) }
/// ```
pub trait OptionalExtension<T> {
    /// `Ok(Some(value))`, `Ok(None)` for [`RecipeError::Timeout`], other errors as they are.
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(value) => Ok(Some(value)),
            Err(RecipeError::Timeout) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_mt::Error;

    #[test]
    fn retryable_and_session_terminal_answer_one_level_up() {
        assert!(RecipeError::from(Error::ConnectionLoss).is_retryable());
        assert!(RecipeError::Timeout.is_retryable());
        assert!(RecipeError::from(Error::Timeout).is_retryable());
        assert!(!RecipeError::from(Error::SessionExpired).is_retryable());
        assert!(RecipeError::from(Error::SessionExpired).is_session_terminal());
        assert!(
            RecipeError::Lost(LossReason::Lock(LockLost::SessionExpired)).is_session_terminal()
        );
        assert!(!RecipeError::Lost(LossReason::Lock(LockLost::NodeDeleted)).is_session_terminal());
        assert!(!RecipeError::InvalidArgument("x").is_retryable());
        assert!(!RecipeError::from(Error::NoNode).is_session_terminal());
    }
}
