//! Public helpers for recipe users (and the recipes): reading sequence suffixes, making
//! guids. The internal layer is `support`.

/// The sequence number the server appended to a sequential node's name, if `name` has
/// one.
///
/// The server formats the parent's signed 32-bit child counter with `%010d`: ten digits,
/// or a minus sign and nine or ten digits once the counter has passed its end (the 3.8
/// server then hands out 2147483647 again, or -2147483648). Recipe prefixes end with a
/// separator (`lock-`, `item-<guid>-`), so a name ending in `--000000005` or
/// `--2147483647` carries a negative number, and `x-2147483648` (too large for a positive
/// i32) can only be -2147483648.
///
/// ```
/// use zookeeper_mt_recipes::nodes::sequence_of;
/// assert_eq!(sequence_of("lock-0000000042"), Some(42));
/// assert_eq!(sequence_of("lock-2147483647"), Some(2147483647));
/// assert_eq!(sequence_of("lock--2147483647"), Some(-2147483647));
/// assert_eq!(sequence_of("lock-2147483648"), Some(-2147483648));
/// assert_eq!(sequence_of("lock--000000005"), Some(-5));
/// assert_eq!(sequence_of("ready"), None);
/// ```
pub fn sequence_of(name: &str) -> Option<i32> {
    let bytes = name.as_bytes();
    let tail = bytes.get(bytes.len().checked_sub(10)?..)?;
    if tail[0] == b'-' {
        // `-` and nine digits: a negative counter above -1,000,000,000.
        if !tail[1..].iter().all(u8::is_ascii_digit) {
            return None;
        }
        return name[name.len() - 9..].parse::<i32>().ok().map(|n| -n);
    }
    if !tail.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: i64 = name[name.len() - 10..].parse().ok()?;
    let before = &bytes[..bytes.len() - 10];
    let negative = value > i64::from(i32::MAX) || before.ends_with(b"--");
    if negative {
        i32::try_from(-value).ok()
    } else {
        i32::try_from(value).ok()
    }
}

/// Sequence numbers a recipe orders by: `0..SEQUENCE_LIMIT`. A node whose number is at
/// or past the limit (or negative) was created after the parent's counter neared its
/// end, where the 3.8 server repeats or wraps numbers and order by number breaks. The
/// margin below `i32::MAX` leaves room for creates already in flight when the limit is
/// crossed. Recipes never order such a node among the others: they remove it and restart
/// the directory's counter, or fail with
/// [`RecipeError::SequenceExhausted`](crate::RecipeError::SequenceExhausted).
pub const SEQUENCE_LIMIT: i32 = i32::MAX - (1 << 20);

/// Whether `seq` is one recipes may order by (see [`SEQUENCE_LIMIT`]).
pub fn sequence_in_range(seq: i32) -> bool {
    (0..SEQUENCE_LIMIT).contains(&seq)
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
        assert_eq!(sequence_of("0000000000"), Some(0));
    }

    #[test]
    fn sequence_suffix_past_the_counters_end() {
        // What the 3.8 server hands out around the end of a parent's child counter.
        assert_eq!(sequence_of("x-2147483647"), Some(i32::MAX));
        assert_eq!(sequence_of("x-2147483648"), Some(i32::MIN));
        assert_eq!(sequence_of("x--2147483648"), Some(i32::MIN));
        assert_eq!(sequence_of("x--2147483647"), Some(-2147483647));
        assert_eq!(sequence_of("x--000000005"), Some(-5));
        assert_eq!(sequence_of("x--999999999"), Some(-999999999));
        assert_eq!(sequence_of("x-9999999999"), None);
        assert!(sequence_in_range(0));
        assert!(!sequence_in_range(-1));
        assert!(!sequence_in_range(i32::MAX));
        assert!(!sequence_in_range(SEQUENCE_LIMIT));
        assert!(sequence_in_range(SEQUENCE_LIMIT - 1));
    }

    #[test]
    fn guids_differ() {
        let a = guid();
        assert_eq!(a.len(), 32);
        assert_ne!(a, guid());
    }
}
