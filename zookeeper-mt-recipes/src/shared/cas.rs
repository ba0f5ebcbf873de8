//! The conditional write, safe across a data version of -1 (ZOOKEEPER-4743), and resolving its lost replies.

use super::*;

// ---------------------------------------------------------------------------------------
// The conditional write (ZOOKEEPER-4743).
// ---------------------------------------------------------------------------------------

/// How to write "only if the node is still at the version read".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CasRequest {
    /// `setData` at this version.
    Set {
        /// The expected version (never -1).
        version: i32,
    },
    /// The version read is -1, where `setData(-1)` would be unconditional: one `multi`
    /// of `setData(any version)` and `check(version_after)`, which holds only if the set
    /// moved the node from -1 to `version_after` (0).
    SetThenCheck {
        /// The version the node has after a set from -1.
        version_after: i32,
    },
}

/// The write that is conditional on `read_version` (see [`CasRequest`]).
pub(crate) fn cas_request(read_version: i32) -> CasRequest {
    if read_version == -1 {
        CasRequest::SetThenCheck {
            version_after: read_version.wrapping_add(1),
        }
    } else {
        CasRequest::Set {
            version: read_version,
        }
    }
}

/// What a re-read after a lost reply says about the conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolution {
    /// Still at the version written against: not applied (yet). Send it again.
    NotYet,
    /// Another write took the version: ours can never apply. Compute again.
    Superseded,
    /// Ours may or may not have applied.
    Unknown,
}

/// `created`: the `czxid` of the node the write was computed from, if known.
pub(super) fn resolve(
    expected_version: i32,
    ours: &[u8],
    now: Option<(&[u8], &Stat)>,
    created: Option<i64>,
) -> Resolution {
    let Some((data, stat)) = now else {
        // Deleted: whether ours applied before the delete cannot be told.
        return Resolution::Unknown;
    };
    if created.is_some_and(|czxid| czxid != stat.czxid) {
        // Re-created: our write was against the old node (applied or not).
        return Resolution::Unknown;
    }
    if stat.version == expected_version {
        Resolution::NotYet
    } else if stat.version == expected_version.wrapping_add(1) && data != ours {
        Resolution::Superseded
    } else {
        Resolution::Unknown
    }
}
