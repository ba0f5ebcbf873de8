//! Operations of an atomic `multi` and their results.

use crate::timeout::Version;
use crate::types::{Acl, CreateMode, Stat};

/// One operation of a multi (all succeed or none is applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a node.
    Create {
        /// Path (may end in `/` for sequential modes).
        path: String,
        /// Data.
        data: Vec<u8>,
        /// ACL.
        acl: Vec<Acl>,
        /// Mode (TTL and container modes are not supported inside a multi by the C client).
        mode: CreateMode,
    },
    /// Delete a node at `version`.
    Delete {
        /// Path.
        path: String,
        /// Expected version.
        version: Version,
    },
    /// Set a node's data at `version`.
    SetData {
        /// Path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version.
        version: Version,
    },
    /// Fail the multi unless the node is at `version` ([`Version::Any`]: unless it exists).
    Check {
        /// Path.
        path: String,
        /// Expected version.
        version: Version,
    },
}

impl Op {
    /// `Create` with an open ACL.
    pub fn create(path: &str, data: &[u8], mode: CreateMode) -> Op {
        Op::create_with_acl(path, data, Acl::OPEN_UNSAFE, mode)
    }

    /// `Create` with the given ACL.
    pub fn create_with_acl(path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) -> Op {
        Op::Create {
            path: path.into(),
            data: data.into(),
            acl: acl.to_vec(),
            mode,
        }
    }

    /// `Delete`.
    pub fn delete(path: &str, version: impl Into<Version>) -> Op {
        Op::Delete {
            path: path.into(),
            version: version.into(),
        }
    }

    /// `SetData`.
    pub fn set_data(path: &str, data: &[u8], version: impl Into<Version>) -> Op {
        Op::SetData {
            path: path.into(),
            data: data.into(),
            version: version.into(),
        }
    }

    /// `Check`.
    pub fn check(path: &str, version: impl Into<Version>) -> Op {
        Op::Check {
            path: path.into(),
            version: version.into(),
        }
    }
}

/// What one successful operation of a multi produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The created node's path (with its sequence suffix, if any).
    Created(String),
    /// Deleted.
    Deleted,
    /// The node's new `Stat`.
    DataSet(Stat),
    /// The check held.
    Checked,
}
