//! How a value is stored in a node's data: Curator's 4- and 8-byte big-endian integers, kazoo's decimal text.

use super::*;

// ---------------------------------------------------------------------------------------
// Layouts.
// ---------------------------------------------------------------------------------------

/// How a value is stored in a node's data.
pub(crate) trait Layout: Send + Sync + 'static {
    type Value: Copy + Eq + fmt::Debug + fmt::Display + Send + Sync + 'static;
    /// Names the layout in `Corrupt` errors.
    const NAME: &'static str;
    fn encode(value: Self::Value) -> Vec<u8>;
    /// `None`: the data is not this layout.
    fn decode(data: &[u8]) -> Option<Self::Value>;
    fn checked_add(value: Self::Value, delta: Self::Value) -> Option<Self::Value>;
}

/// Curator `SharedCount`: `ByteBuffer.putInt`, 4 bytes big-endian.
pub(crate) struct Int32Be;

impl Layout for Int32Be {
    type Value = i32;
    const NAME: &'static str = "a 4-byte big-endian int (Curator SharedCount)";
    fn encode(value: i32) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }
    fn decode(data: &[u8]) -> Option<i32> {
        match data.len() {
            0 => Some(0),
            _ => data.try_into().ok().map(i32::from_be_bytes),
        }
    }
    fn checked_add(value: i32, delta: i32) -> Option<i32> {
        value.checked_add(delta)
    }
}

/// Curator `DistributedAtomicLong`: `ByteBuffer.putLong`, 8 bytes big-endian.
pub(crate) struct Int64Be;

impl Layout for Int64Be {
    type Value = i64;
    const NAME: &'static str = "an 8-byte big-endian long (Curator DistributedAtomicLong)";
    fn encode(value: i64) -> Vec<u8> {
        value.to_be_bytes().to_vec()
    }
    fn decode(data: &[u8]) -> Option<i64> {
        match data.len() {
            0 => Some(0),
            _ => data.try_into().ok().map(i64::from_be_bytes),
        }
    }
    fn checked_add(value: i64, delta: i64) -> Option<i64> {
        value.checked_add(delta)
    }
}

/// kazoo `Counter`: `repr(value).encode('ascii')`, read back with `int(data)`.
pub(crate) struct DecimalText;

impl Layout for DecimalText {
    type Value = i64;
    const NAME: &'static str = "an integer as decimal text (kazoo Counter)";
    fn encode(value: i64) -> Vec<u8> {
        value.to_string().into_bytes()
    }
    fn decode(data: &[u8]) -> Option<i64> {
        // What Python's int() accepts of what a writer may have put there: surrounding
        // whitespace and a sign. (int() also takes `_` separators; kazoo never writes
        // them, and a float's text is another layout.)
        let text = std::str::from_utf8(data)
            .ok()?
            .trim_matches(|c: char| c.is_ascii_whitespace());
        if text.is_empty() {
            return if data.is_empty() { Some(0) } else { None };
        }
        let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }
    fn checked_add(value: i64, delta: i64) -> Option<i64> {
        value.checked_add(delta)
    }
}
