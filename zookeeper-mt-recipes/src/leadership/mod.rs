//! Leadership: [`LeaderElection`], a candidate that waits until it leads, and
//! [`LeaderLatch`], a long-lived participant that knows at every moment whether it
//! leads, with a guard per term and a stream of leadership events.
//!
//! The main types are re-exported here; each sub-module documents its recipe's
//! protocol, layouts and failure handling.

pub mod election;
pub mod leader_latch;

pub use crate::support::LossSignal;
pub use election::LeaderElection;
pub use leader_latch::{
    LatchBuilder, LatchLayout, LatchStatus, LeaderLatch, LeadershipEvent, LeadershipGuard,
    LeadershipLost, Participant, TermEnd,
};
