//! `RecipeError`'s own answers: retryable, session-terminal, and retryable on a given
//! client (a managed client renews the session a call lost).

mod common;

use zookeeper_mt::{Error, ManagedZooKeeper};
use zookeeper_mt_recipes::locks::lock::LockLost;
use zookeeper_mt_recipes::{Client, LossReason, RecipeError};

#[test]
fn an_expired_session_is_retryable_on_a_managed_client_only() {
    let plain = Client::from(common::connect());
    let managed = ManagedZooKeeper::connect(
        &zk_harness::shared_test_connect_string(),
        common::SESSION_TIMEOUT,
    )
    .unwrap();
    let managed = Client::from(managed);
    let expired = RecipeError::from(Error::SessionExpired);
    assert!(expired.is_session_terminal());
    assert!(!expired.is_retryable());
    assert!(!expired.is_retryable_on(&plain));
    assert!(expired.is_retryable_on(&managed));
    let lost = RecipeError::Lost(LossReason::Lock(LockLost::SessionExpired));
    assert!(lost.is_retryable_on(&managed) && !lost.is_retryable_on(&plain));
    // Closed is final on both; connection loss retryable on both.
    let closed = RecipeError::from(Error::Closed);
    assert!(!closed.is_retryable_on(&plain) && !closed.is_retryable_on(&managed));
    let loss = RecipeError::from(Error::ConnectionLoss);
    assert!(loss.is_retryable_on(&plain) && loss.is_retryable_on(&managed));
    if let Client::Managed(managed) = managed {
        managed.close();
    }
}
