//! Public helpers for recipe users (and the recipes): creating a path with its parents,
//! reading sequence suffixes, making guids. The internal layer is `support`.

use crate::Result;
use zookeeper::ZooKeeper;

/// Creates `path` and any missing parents as persistent nodes with an open ACL;
/// a node that already exists is fine.
pub fn ensure_path(zk: &ZooKeeper, path: &str) -> Result<()> {
    crate::support::create_path(zk, path).map_err(Into::into)
}

/// The 10-digit sequence suffix the server appends to sequential nodes, if `name` has one.
pub fn sequence_of(name: &str) -> Option<u64> {
    let digits = name.get(name.len().checked_sub(10)?..)?;
    if digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

/// A random 128-bit id as 32 hex digits, for lost-create protection (a node named with
/// it can be found again after a create whose reply was lost).
pub fn guid() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    for salt in 0..2u64 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(salt);
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        hasher.write_u32(std::process::id());
        out.push_str(&format!("{:016x}", hasher.finish()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_suffix() {
        assert_eq!(sequence_of("item-0000000042"), Some(42));
        assert_eq!(sequence_of("lock-abc-0000000007"), Some(7));
        assert_eq!(sequence_of("short"), None);
        assert_eq!(sequence_of("item-00000000x2"), None);
    }

    #[test]
    fn guids_differ() {
        let a = guid();
        assert_eq!(a.len(), 32);
        assert_ne!(a, guid());
    }
}
