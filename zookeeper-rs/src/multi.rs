//! Operations of an atomic `multi` and their results.

use crate::timeout::Version;
use crate::types::{Acl, CreateMode, CreateOptions, Stat};
use std::borrow::Cow;

/// `acl`, borrowed if it is one of the constants (no allocation).
fn acl_of(acl: &[Acl]) -> Cow<'static, [Acl]> {
    [Acl::OPEN_UNSAFE, Acl::READ_UNSAFE, Acl::CREATOR_ALL]
        .into_iter()
        .find(|common| *common == acl)
        .map_or_else(|| Cow::Owned(acl.to_vec()), Cow::Borrowed)
}

/// One operation of a multi (all succeed or none is applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create a node.
    Create {
        /// Path (may end in `/` for sequential modes).
        path: String,
        /// Data.
        data: Vec<u8>,
        /// ACL (borrowed when it is one of the [`Acl`] constants).
        acl: Cow<'static, [Acl]>,
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
    /// `Create` with `options` (a [`CreateMode`] alone: the open ACL).
    pub fn create<'a>(path: &str, data: &[u8], options: impl Into<CreateOptions<'a>>) -> Op {
        let options = options.into();
        Op::Create {
            path: path.into(),
            data: data.into(),
            acl: acl_of(options.acl),
            mode: options.mode,
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
