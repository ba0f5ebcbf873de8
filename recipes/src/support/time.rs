//! Time: deadlines and how long a step rides out a lost connection (its patience).

use super::*;

// ---------------------------------------------------------------------------------------
// Time: deadlines and patience.
// ---------------------------------------------------------------------------------------

pub(crate) use zookeeper::Deadline;

/// The recipes' check of a [`Deadline`].
pub(crate) trait DeadlineExt {
    /// `Err(Timeout)` once the deadline has passed.
    fn check(self) -> Result<()>;
}

impl DeadlineExt for Deadline {
    fn check(self) -> Result<()> {
        if self.expired() {
            return Err(RecipeError::Timeout);
        }
        Ok(())
    }
}

/// How long a step that does not wait for others (create, delete, release, a read) may
/// ride out a lost connection: the negotiated session timeout (at least 1 s; 10 s while
/// unknown).
pub(crate) fn default_op_timeout(zk: &ZooKeeper) -> Duration {
    zk.session_timeout()
        .unwrap_or(Duration::from_secs(10))
        .max(Duration::from_secs(1))
}

/// A deadline [`default_op_timeout`] from now.
pub(crate) fn op_deadline(zk: &ZooKeeper) -> Deadline {
    Deadline::after(default_op_timeout(zk))
}

/// The reconnect timeout of the recipes that have one, unless told otherwise: twice the
/// session timeout (long enough to ride out a server restart that keeps the session; a
/// longer outage has probably expired it anyway).
pub(crate) fn default_reconnect_timeout(zk: &ZooKeeper) -> Duration {
    2 * default_op_timeout(zk)
}

/// How long a step rides out a lost connection, and what it reports when it gives up.
///
/// From a [`Deadline`]: until the deadline, then `Timeout`. From
/// [`reconnect`](Self::reconnect): at most that long for each reconnection (and never past
/// a deadline given with [`before`](Self::before)), then `ConnectionLoss`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub(super) deadline: Deadline,
    /// Longest wait for one reconnection; `None`: up to the deadline.
    pub(super) reconnect: Option<Duration>,
}

impl Patience {
    /// Waits at most `timeout` for each reconnection, with no deadline.
    pub(crate) fn reconnect(timeout: Duration) -> Patience {
        Patience {
            deadline: Deadline::never(),
            reconnect: Some(timeout),
        }
    }

    /// The same patience, never waiting past `deadline`.
    pub(crate) fn before(self, deadline: Deadline) -> Patience {
        Patience { deadline, ..self }
    }

    /// How long the next reconnection may be waited for; `Err(Timeout)` once the deadline
    /// of a deadline-bound patience has passed.
    pub(super) fn reconnect_wait(self) -> Result<Duration> {
        let left = self.deadline.remaining();
        match self.reconnect {
            Some(limit) => Ok(left.map_or(limit, |left| left.min(limit))),
            None => {
                self.deadline.check()?;
                Ok(left.unwrap_or(Duration::MAX))
            }
        }
    }

    /// The error for a reconnection that did not come in time.
    pub(super) fn gave_up(self) -> RecipeError {
        match self.reconnect {
            Some(_) => RecipeError::ZooKeeper(Error::ConnectionLoss),
            None => RecipeError::Timeout,
        }
    }
}

impl From<Deadline> for Patience {
    fn from(deadline: Deadline) -> Patience {
        Patience {
            deadline,
            reconnect: None,
        }
    }
}
