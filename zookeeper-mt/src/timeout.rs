//! How long a waiting call may wait ([`Timeout`]) and the instant it must give up
//! ([`Deadline`]): one definition shared by the client and the recipes.

use std::time::{Duration, Instant};

/// How long a waiting call may wait: a bounded time, or until the awaited thing happens.
///
/// Every call that waits takes `impl Into<Timeout>`, so a plain [`Duration`] works:
///
/// ```
/// use std::time::Duration;
/// use zookeeper_mt::Timeout;
///
/// assert_eq!(Timeout::from(Duration::from_secs(2)), Timeout::After(Duration::from_secs(2)));
/// assert_eq!(Timeout::from(None::<Duration>), Timeout::Never);
/// assert!(Timeout::Never.deadline().remaining().is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timeout {
    /// Give up once this much time has passed (zero: do not wait at all).
    After(Duration),
    /// Wait as long as it takes.
    Never,
}

impl Timeout {
    /// Do not wait: try once and report at once.
    pub const NOW: Timeout = Timeout::After(Duration::ZERO);

    /// The deadline this timeout sets when the wait starts now.
    pub fn deadline(self) -> Deadline {
        match self {
            Timeout::After(timeout) => Deadline::after(timeout),
            Timeout::Never => Deadline::never(),
        }
    }

    /// The bound, or `None` for [`Timeout::Never`].
    pub fn duration(self) -> Option<Duration> {
        match self {
            Timeout::After(timeout) => Some(timeout),
            Timeout::Never => None,
        }
    }
}

impl From<Duration> for Timeout {
    fn from(timeout: Duration) -> Timeout {
        Timeout::After(timeout)
    }
}

impl From<Option<Duration>> for Timeout {
    /// `None` waits forever.
    fn from(timeout: Option<Duration>) -> Timeout {
        timeout.map_or(Timeout::Never, Timeout::After)
    }
}

/// A point in time a waiting call must not wait past, or none ([`Timeout::deadline`]).
///
/// A huge timeout (e.g. `Duration::MAX`) saturates to "a very long time" instead of
/// overflowing `Instant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// `timeout` from now.
    pub fn after(timeout: Duration) -> Deadline {
        let now = Instant::now();
        Deadline(Some(now.checked_add(timeout).unwrap_or_else(|| {
            now + Duration::from_secs(100 * 365 * 24 * 3600)
        })))
    }

    /// No deadline.
    pub const fn never() -> Deadline {
        Deadline(None)
    }

    /// The instant, or `None` without a deadline.
    pub fn instant(self) -> Option<Instant> {
        self.0
    }

    /// Time left (zero once passed), or `None` without a deadline.
    pub fn remaining(self) -> Option<Duration> {
        self.0
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether the deadline has passed.
    pub fn expired(self) -> bool {
        self.remaining().is_some_and(|left| left.is_zero())
    }

    /// The earlier of the two.
    pub fn min(self, other: Deadline) -> Deadline {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Deadline(Some(a.min(b))),
            (Some(_), None) => self,
            (None, _) => other,
        }
    }
}

impl From<Timeout> for Deadline {
    fn from(timeout: Timeout) -> Deadline {
        timeout.deadline()
    }
}

/// The version a conditional write or delete expects the node to have.
///
/// ```
/// use zookeeper_mt::Version;
///
/// assert_eq!(Version::from(3), Version::Exact(3));
/// assert_eq!(Version::Any.as_raw(), -1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Version {
    /// Whatever the node's version is (unconditional).
    #[default]
    Any,
    /// Only if the node's version is exactly this. Data versions wrap from
    /// `i32::MAX` to `i32::MIN` and pass through -1, which the server reads as "any"
    /// (so a compare-and-set at -1 is not conditional; recipes avoid it).
    Exact(i32),
}

impl Version {
    /// The wire value: -1 for [`Version::Any`].
    pub fn as_raw(self) -> i32 {
        match self {
            Version::Any => -1,
            Version::Exact(version) => version,
        }
    }
}

impl From<i32> for Version {
    fn from(version: i32) -> Version {
        Version::Exact(version)
    }
}

impl From<Option<i32>> for Version {
    /// `None` is [`Version::Any`].
    fn from(version: Option<i32>) -> Version {
        version.map_or(Version::Any, Version::Exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_timeouts_saturate() {
        let deadline = Timeout::from(Duration::MAX).deadline();
        assert!(!deadline.expired());
        assert!(deadline.remaining().unwrap() > Duration::from_secs(3600));
    }

    #[test]
    fn zero_timeout_is_expired_at_once() {
        assert!(Timeout::NOW.deadline().expired());
    }

    #[test]
    fn min_prefers_the_earlier_deadline() {
        let soon = Deadline::after(Duration::from_secs(1));
        assert_eq!(soon.min(Deadline::never()), soon);
        assert_eq!(Deadline::never().min(soon), soon);
        let later = Deadline::after(Duration::from_secs(100));
        assert_eq!(soon.min(later), soon);
    }
}
