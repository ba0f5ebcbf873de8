//! Operations of an atomic `multi` and their results.

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
    /// Delete a node at `version` (-1: any).
    Delete {
        /// Path.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Set a node's data at `version` (-1: any).
    SetData {
        /// Path.
        path: String,
        /// New data.
        data: Vec<u8>,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Fail the multi unless the node is at `version` (-1: exists).
    Check {
        /// Path.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    },
}

impl Op {
    /// `Create` with an open ACL.
    pub fn create(path: &str, data: &[u8], mode: CreateMode) -> Op {
        Op::Create {
            path: path.into(),
            data: data.into(),
            acl: Acl::open_unsafe(),
            mode,
        }
    }

    /// `Delete`.
    pub fn delete(path: &str, version: i32) -> Op {
        Op::Delete {
            path: path.into(),
            version,
        }
    }

    /// `SetData`.
    pub fn set_data(path: &str, data: &[u8], version: i32) -> Op {
        Op::SetData {
            path: path.into(),
            data: data.into(),
            version,
        }
    }

    /// `Check`.
    pub fn check(path: &str, version: i32) -> Op {
        Op::Check {
            path: path.into(),
            version,
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
