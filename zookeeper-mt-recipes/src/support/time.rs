//! Time: deadlines and how long a step rides out a lost connection (its patience).

use super::*;

// ---------------------------------------------------------------------------------------
// Time: deadlines and patience.
// ---------------------------------------------------------------------------------------

pub(crate) use zookeeper_mt::Deadline;

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

/// How a recipe rides out a lost connection: how long it waits for each reconnection,
/// and how it paces the tries of a request that failed while the session still looked
/// connected. A small `Copy` value; give it to a recipe with `with_retry_policy`
/// ([`Queue`](crate::queues::queue::Queue), [`PriorityQueue`](crate::queues::priority_queue::PriorityQueue),
/// [`DelayedQueue`](crate::queues::delayed_queue::DelayedQueue),
/// [`BoundedQueue`](crate::queues::bounded_queue::BoundedQueue), [`Lock`](crate::locks::lock::Lock),
/// [`WorkQueue`](crate::queues::work_queue::WorkQueue)).
///
/// What it controls:
///
/// 1. The **reconnect timeout**: when the connection drops, each call waits at most this
///    long for the session to reconnect and then fails with
///    `RecipeError::ZooKeeper(Error::ConnectionLoss)`; it never waits past the call's own
///    deadline (such as a `take`'s timeout). Default: twice the session timeout
///    negotiated (at least 2 s; 20 s while it is not known yet), long enough to ride out
///    a server restart that keeps the session. Zero fails at the first loss, without
///    waiting.
/// 2. The **pauses** between tries of a request that failed with a retryable error while
///    the session still said "connected" (the client learns of a loss a moment after a
///    request does): the first pause, how each next one grows ([`PauseGrowth`]), and the
///    longest. Default: 5 ms, growing by 5 ms a try, at most 100 ms.
///
/// A recipe's defaults are [`RetryPolicy::default()`], and
/// `with_reconnect_timeout(timeout)` is the shorthand for a policy with that reconnect
/// timeout. Invalid values are refused where they are given, with
/// [`RecipeError::InvalidArgument`].
///
/// ```no_run
/// use std::time::Duration;
/// use zookeeper_mt::ZooKeeper;
/// use zookeeper_mt_recipes::queues::Queue;
/// use zookeeper_mt_recipes::{PauseGrowth, RetryPolicy};
///
/// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
/// // Give up on a connection that has not come back within 3 s, and pause 10 ms, 20 ms,
/// // 40 ms, ... at most 500 ms between tries.
/// let policy = RetryPolicy::new()
///     .with_reconnect_timeout(Duration::from_secs(3))
///     .with_pauses(
///         Duration::from_millis(10),
///         PauseGrowth::Exponential(2),
///         Duration::from_millis(500),
///     )?;
/// let jobs = Queue::new(&zk, "/jobs")?.with_retry_policy(policy);
/// assert_eq!(jobs.retry_policy().reconnect_timeout(), Some(Duration::from_secs(3)));
/// # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryPolicy {
    /// `None`: twice the session timeout.
    reconnect_timeout: Option<Duration>,
    first_pause: Duration,
    pause_growth: PauseGrowth,
    max_pause: Duration,
}

/// How the pause between two tries grows from one try to the next (see
/// [`RetryPolicy::with_pauses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseGrowth {
    /// Each pause is this much longer than the one before (`Duration::ZERO`: all pauses
    /// are the first).
    Linear(Duration),
    /// Each pause is this many times the one before (at least 1; 1: all pauses are the
    /// first).
    Exponential(u32),
}

impl RetryPolicy {
    /// The default policy: a reconnect timeout of twice the session timeout; pauses of
    /// 5 ms, growing by 5 ms a try, at most 100 ms (see the [type docs](Self)).
    pub const fn new() -> RetryPolicy {
        RetryPolicy {
            reconnect_timeout: None,
            first_pause: Duration::from_millis(5),
            pause_growth: PauseGrowth::Linear(Duration::from_millis(5)),
            max_pause: Duration::from_millis(100),
        }
    }

    /// The followers' pacing (caches, leader latch, persistent node, value and config
    /// watches): 10 ms, doubling, at most 1 s. They wait for a reconnection as long as it
    /// takes, so the reconnect timeout is not used.
    pub(crate) const FOLLOWING: RetryPolicy = RetryPolicy {
        reconnect_timeout: None,
        first_pause: Duration::from_millis(10),
        pause_growth: PauseGrowth::Exponential(2),
        max_pause: Duration::from_secs(1),
    };

    /// The followers' default (caches, latches, persistent nodes, watches): a first
    /// pause of 10 ms, doubling, at most 1 s; no reconnect timeout (a follower waits for
    /// the connection as long as it takes).
    pub const fn for_followers() -> RetryPolicy {
        RetryPolicy::FOLLOWING
    }

    /// The same policy, waiting at most `timeout` for each reconnection before a call
    /// fails with `ConnectionLoss` (zero: fail at the first loss).
    #[must_use]
    pub const fn with_reconnect_timeout(self, timeout: Duration) -> RetryPolicy {
        RetryPolicy {
            reconnect_timeout: Some(timeout),
            ..self
        }
    }

    /// The same policy, pausing `first` before the second try of a request, then growing
    /// each pause by `growth`, never above `max`.
    ///
    /// Fails with [`RecipeError::InvalidArgument`] if `first` is zero (tries would spin),
    /// `max` is below `first`, or `growth` is `Exponential(0)`.
    pub fn with_pauses(
        self,
        first: Duration,
        growth: PauseGrowth,
        max: Duration,
    ) -> Result<RetryPolicy> {
        if first.is_zero() {
            return Err(RecipeError::InvalidArgument(
                "the first pause between tries must be above zero",
            ));
        }
        if max < first {
            return Err(RecipeError::InvalidArgument(
                "the longest pause between tries must be at least the first",
            ));
        }
        if growth == PauseGrowth::Exponential(0) {
            return Err(RecipeError::InvalidArgument(
                "pauses cannot grow by a factor of zero",
            ));
        }
        Ok(RetryPolicy {
            first_pause: first,
            pause_growth: growth,
            max_pause: max,
            ..self
        })
    }

    /// The reconnect timeout given with
    /// [`with_reconnect_timeout`](Self::with_reconnect_timeout); `None`: the default,
    /// twice the session timeout (see [`reconnect_timeout_for`](Self::reconnect_timeout_for)).
    pub const fn reconnect_timeout(&self) -> Option<Duration> {
        self.reconnect_timeout
    }

    /// The reconnect timeout on `zk`'s session now: the one given, or twice the session
    /// timeout negotiated (at least 2 s; 20 s while it is not known yet).
    pub fn reconnect_timeout_for(&self, zk: &ZooKeeper) -> Duration {
        self.reconnect_timeout
            .unwrap_or_else(|| default_reconnect_timeout(zk))
    }

    /// The pause before the second try of a request.
    pub const fn first_pause(&self) -> Duration {
        self.first_pause
    }

    /// How the pauses grow.
    pub const fn pause_growth(&self) -> PauseGrowth {
        self.pause_growth
    }

    /// The longest pause.
    pub const fn max_pause(&self) -> Duration {
        self.max_pause
    }

    /// The pause after `failures` consecutive failed tries (1 for the first; 0 counts as
    /// 1): the first pause grown `failures - 1` times, at most the longest pause.
    ///
    /// ```
    /// use std::time::Duration;
    /// use zookeeper_mt_recipes::RetryPolicy;
    ///
    /// let ms = Duration::from_millis;
    /// let policy = RetryPolicy::default();
    /// assert_eq!(policy.pause(1), ms(5));
    /// assert_eq!(policy.pause(2), ms(10));
    /// assert_eq!(policy.pause(1000), ms(100));
    /// ```
    pub fn pause(&self, failures: u32) -> Duration {
        let grown = failures.max(1) - 1;
        let pause = match self.pause_growth {
            PauseGrowth::Linear(step) => step
                .checked_mul(grown)
                .and_then(|growth| growth.checked_add(self.first_pause)),
            PauseGrowth::Exponential(factor) => factor
                .checked_pow(grown)
                .and_then(|factor| self.first_pause.checked_mul(factor)),
        };
        pause.map_or(self.max_pause, |pause| pause.min(self.max_pause))
    }
}

impl Default for RetryPolicy {
    /// [`RetryPolicy::new`].
    fn default() -> RetryPolicy {
        RetryPolicy::new()
    }
}

/// How long a step rides out a lost connection, what it reports when it gives up, and
/// how it paces its tries (the [`RetryPolicy`]'s pauses).
///
/// From a [`Deadline`]: until the deadline, then `Timeout`, with the default pauses.
/// From a [`RetryPolicy`] ([`of`](Self::of)) or [`reconnect`](Self::reconnect): at most
/// the reconnect timeout for each reconnection (and never past a deadline given with
/// [`before`](Self::before)), then `ConnectionLoss`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    pub(super) deadline: Deadline,
    /// Longest wait for one reconnection; `None`: up to the deadline.
    pub(super) reconnect: Option<Duration>,
    /// The pauses between tries; also what [`policy`](Self::policy) reports.
    policy: RetryPolicy,
}

impl Patience {
    /// Waits at most `timeout` for each reconnection, with no deadline (the default
    /// pauses).
    #[cfg(test)]
    pub(crate) fn reconnect(timeout: Duration) -> Patience {
        Patience::of_resolved(RetryPolicy::new().with_reconnect_timeout(timeout), timeout)
    }

    /// `policy` on `zk`'s session: its reconnect timeout (the default resolved now), its
    /// pauses, no deadline.
    pub(crate) fn of(zk: &ZooKeeper, policy: RetryPolicy) -> Patience {
        Patience::of_resolved(policy, policy.reconnect_timeout_for(zk))
    }

    pub(super) fn of_resolved(policy: RetryPolicy, reconnect: Duration) -> Patience {
        Patience {
            deadline: Deadline::never(),
            reconnect: Some(reconnect),
            policy,
        }
    }

    /// The policy this patience was made from (the default for a deadline's).
    pub(crate) fn policy(self) -> RetryPolicy {
        self.policy
    }

    /// The same patience, never waiting past `deadline`.
    pub(crate) fn before(self, deadline: Deadline) -> Patience {
        Patience { deadline, ..self }
    }

    /// The pause after `failures` consecutive failed tries (see [`RetryPolicy::pause`]).
    pub(super) fn pause(self, failures: u32) -> Duration {
        self.policy.pause(failures)
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
            policy: RetryPolicy::new(),
        }
    }
}
