//! The project's own test support: the published [`zookeeper_testing`] crate with its
//! `peers` feature (Curator and kazoo peer processes), re-exported so every
//! `zk_harness::X` path used by the project's tests keeps resolving.

pub use zookeeper_testing::*;
