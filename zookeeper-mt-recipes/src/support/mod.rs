//! The layer every recipe is built on (crate-internal): deadlines, riding out connection
//! loss, waiting on watches, creating and deleting nodes, and reading sequential
//! children in order.
//!
//! How long a step rides out a lost connection is its [`Patience`]. The waiting recipes
//! (barrier, election, read-write lock, semaphore, config watch, id generator) wait until
//! the call's deadline and then report `Timeout`; the recipes with a reconnect timeout
//! (queue, lock, work queue) wait at most that long for each reconnection and then
//! report the `ConnectionLoss`; their [`RetryPolicy`] (public) sets it and the pauses
//! between tries.

mod connection;
mod dirs;
pub(crate) mod liveness;
pub(crate) mod loss_signal;
mod owned;
mod sequential;
mod time;
mod watches;

pub(crate) use connection::*;
pub(crate) use dirs::*;
pub(crate) use liveness::held_answer;
pub use loss_signal::LossSignal;
pub(crate) use loss_signal::{LossSource, Wakes};
pub(crate) use owned::*;
pub(crate) use sequential::*;
pub(crate) use time::*;
pub use time::{PauseGrowth, RetryPolicy};
pub(crate) use watches::*;

use crate::nodes::{sequence_in_range, sequence_of};
use crate::runtime::{block_on, sleep_for, until};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use zookeeper_mt::{
    CreateMode, Error, EventType, SessionState, Stat, Watch, WatchedEvent, ZooKeeper,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_by_sequence_across_prefixes() {
        let children = vec![
            "write-b-0000000003".to_string(),
            "read-a-0000000001".to_string(),
            "ready".to_string(),
            "read-c-0000000002".to_string(),
            "other-0000000000".to_string(),
        ];
        let list = members(children.clone(), &["read-", "write-"]);
        let names: Vec<_> = list.iter().map(|m| m.seq).collect();
        assert_eq!(names, vec![1, 2, 3]);
        assert!(list[2].is("write-"));
        let all: Vec<_> = members(children, ANY_NAME).iter().map(|m| m.seq).collect();
        assert_eq!(all, vec![0, 1, 2, 3]);
        let wrapped = vec![
            "a-lock--2147483648".to_string(),
            "b-lock-2147483647".to_string(),
            "c-lock-0000000009".to_string(),
        ];
        let order: Vec<_> = members(wrapped, ANY_NAME)
            .into_iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(order, vec![9, i32::MIN, i32::MAX]);
        let kept: Vec<_> = ordered_members(
            vec![
                "a-lock--2147483648".to_string(),
                "b-lock-2147483647".to_string(),
                "c-lock-0000000009".to_string(),
                "d-lock-0000000003".to_string(),
                "e-lock--000000005".to_string(),
            ],
            ANY_NAME,
            9,
        )
        .into_iter()
        .map(|m| m.name)
        .collect();
        assert_eq!(kept, vec!["d-lock-0000000003"]);
    }

    #[test]
    fn deadlines() {
        assert!(Deadline::after(Duration::ZERO).check().is_err());
        assert!(Deadline::after(Duration::MAX).check().is_ok());
        assert!(
            Deadline::after(Duration::from_secs(5)).remaining().unwrap() > Duration::from_secs(4)
        );
        assert!(Deadline::never().check().is_ok());
        assert_eq!(Deadline::never().remaining(), None);
    }

    #[test]
    fn patience_bounds_each_reconnection() {
        let within = Patience::reconnect(Duration::from_secs(3));
        assert_eq!(within.reconnect_wait().unwrap(), Duration::from_secs(3));
        let soon = within.before(Deadline::after(Duration::from_secs(1)));
        assert!(soon.reconnect_wait().unwrap() <= Duration::from_secs(1));
        assert_eq!(
            within.gave_up(),
            RecipeError::ZooKeeper(Error::ConnectionLoss)
        );
        let until = Patience::from(Deadline::after(Duration::ZERO));
        assert_eq!(until.reconnect_wait(), Err(RecipeError::Timeout));
        assert_eq!(until.gave_up(), RecipeError::Timeout);
    }

    #[test]
    fn default_retry_pauses_are_the_old_rules() {
        // `reconnected` paused 5 ms x the attempt, clamped to 1..=20.
        let recipes = RetryPolicy::default();
        for attempt in 0..=100 {
            let old = Duration::from_millis(5 * u64::from(attempt.clamp(1, 20)));
            assert_eq!(recipes.pause(attempt), old, "attempt {attempt}");
            assert_eq!(Patience::from(Deadline::never()).pause(attempt), old);
        }
        assert_eq!(recipes.pause(u32::MAX), Duration::from_millis(100));
        // A follower's pause started at 10 ms and doubled after each failure, up to 1 s.
        let mut backoff = Duration::from_millis(10);
        for failures in 1..=100 {
            assert_eq!(RetryPolicy::FOLLOWING.pause(failures), backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
        assert_eq!(
            RetryPolicy::FOLLOWING.pause(u32::MAX),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn patience_carries_its_policy() {
        let policy = RetryPolicy::new()
            .with_pauses(
                Duration::from_millis(1),
                PauseGrowth::Exponential(3),
                Duration::from_millis(50),
            )
            .unwrap()
            .with_reconnect_timeout(Duration::from_millis(300));
        let patience = Patience::of_resolved(policy, Duration::from_millis(300));
        assert_eq!(patience.policy(), policy);
        assert_eq!(patience.pause(3), Duration::from_millis(9));
        assert_eq!(patience.pause(5), Duration::from_millis(50));
        assert_eq!(
            patience.reconnect_wait().unwrap(),
            Duration::from_millis(300)
        );
        assert_eq!(
            patience.gave_up(),
            RecipeError::ZooKeeper(Error::ConnectionLoss)
        );
        let reconnect = Patience::reconnect(Duration::from_secs(3));
        assert_eq!(
            reconnect.policy(),
            RetryPolicy::new().with_reconnect_timeout(Duration::from_secs(3))
        );
    }

    #[test]
    fn base_path_rules() {
        assert!(check_base_path("/q").is_ok());
        assert!(check_base_path("/").is_err());
        assert!(check_base_path("q").is_err());
    }
}
