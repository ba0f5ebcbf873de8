//! Node layouts: native, Curator's `LeaderLatch` and kazoo's `Election` naming and order.

use super::*;

// ---------------------------------------------------------------------------------------
// Layouts.
// ---------------------------------------------------------------------------------------

/// Name prefix of native nodes: the layout of [`crate::leadership::election::LeaderElection`].
pub(super) const NATIVE_PREFIX: &str = "candidate-";
/// Curator `LeaderLatch`'s node name (`LOCK_NAME`), after the protected prefix.
pub(super) const CURATOR_LATCH_NAME: &str = "latch-";
/// kazoo `Lock`'s node name (`_NODE_NAME`), after the hex uuid.
pub(super) const KAZOO_LOCK_NAME: &str = "__lock__";
/// Curator's protected-mode prefix: `_c_<uuid>-` (`ProtectedUtils`).
pub(super) const CURATOR_PROTECTED: &str = "_c_";

/// How a latch names and orders election nodes: whose participants it excludes (see the
/// [module docs](super#layouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LatchLayout {
    /// `candidate-<guid>-<seq>`, ordered by in-range sequence numbers: the nodes of
    /// [`crate::leadership::election::LeaderElection`], so latches and elections on one path exclude
    /// each other.
    #[default]
    Native,
    /// Apache Curator 5.x `LeaderLatch`: `_c_<uuid>-latch-<seq>` holding the id, every
    /// child ordered by the text after its last `latch-`.
    CuratorLeaderLatch,
    /// kazoo 2.x `Election` (a kazoo `Lock`): `<hex uuid>__lock__<seq>` holding the
    /// identifier; only names ending in `__lock__` and `-?\d{10}` count, ordered by that
    /// number's text.
    KazooElection,
}

impl LatchLayout {
    /// The name prefix of a new node, unique to it (lost-create protection).
    pub(super) fn new_tag(self) -> String {
        match self {
            LatchLayout::Native => format!("{NATIVE_PREFIX}{}-", guid()),
            LatchLayout::CuratorLeaderLatch => {
                format!("{}{CURATOR_LATCH_NAME}", curator_protected_prefix())
            }
            LatchLayout::KazooElection => format!("{}{KAZOO_LOCK_NAME}", guid()),
        }
    }

    /// The contenders among `children`, in the order this layout's peers use: the first
    /// leads (for a native latch, out-of-range nodes do not take part).
    pub(crate) fn order(self, children: Vec<String>) -> Vec<String> {
        match self {
            LatchLayout::Native => members(children, &[NATIVE_PREFIX])
                .into_iter()
                .filter(|m| m.in_range())
                .map(|m| m.name)
                .collect(),
            LatchLayout::CuratorLeaderLatch => {
                let mut all = children;
                // Curator sorts every child by `String.compareTo` of its sort key (a
                // stable sort: ties keep the listing's order; here ties go by name).
                all.sort_by(|a, b| {
                    java_compare(curator_sort_key(a), curator_sort_key(b)).then_with(|| a.cmp(b))
                });
                all
            }
            LatchLayout::KazooElection => {
                let mut contenders: Vec<(String, String)> = children
                    .into_iter()
                    .filter_map(|name| Some((kazoo_sequence(&name)?.to_string(), name)))
                    .collect();
                contenders.sort();
                contenders.into_iter().map(|(_, name)| name).collect()
            }
        }
    }
}

/// Curator's sort key (`StandardLockInternalsDriver.standardFixForSorting`): the text
/// after the last `latch-`, or the whole name.
pub(super) fn curator_sort_key(name: &str) -> &str {
    match name.rfind(CURATOR_LATCH_NAME) {
        Some(at) => &name[at + CURATOR_LATCH_NAME.len()..],
        None => name,
    }
}

/// Java's `String.compareTo`: UTF-16 code units, lexicographically.
pub(super) fn java_compare(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// What kazoo's contender pattern `(?:__lock__)(-?\d{10})$` captures in `name`, if it
/// matches.
pub(super) fn kazoo_sequence(name: &str) -> Option<&str> {
    let bytes = name.as_bytes();
    for len in [10, 11] {
        let Some(start) = bytes.len().checked_sub(len) else {
            continue;
        };
        let tail = &bytes[start..];
        let digits = if len == 11 {
            if tail[0] != b'-' {
                continue;
            }
            &tail[1..]
        } else {
            tail
        };
        if digits.iter().all(u8::is_ascii_digit) && bytes[..start].ends_with(b"__lock__") {
            // The tail is ASCII, so `start` is a character boundary.
            return Some(&name[start..]);
        }
    }
    None
}

/// A random version-4 UUID in its text form (`8-4-4-4-12` lowercase hex), as Java's
/// `UUID.randomUUID().toString()` writes it.
pub(crate) fn uuid_v4() -> String {
    let mut hex = guid().into_bytes();
    hex[12] = b'4';
    let variant = match hex[16] {
        b'0'..=b'9' => hex[16] - b'0',
        other => other - b'a' + 10,
    };
    hex[16] = b"89ab"[usize::from(variant & 3)];
    let hex = String::from_utf8(hex).unwrap_or_default();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Curator's protected prefix with a fresh uuid: `_c_<uuid>-`.
pub(crate) fn curator_protected_prefix() -> String {
    format!("{CURATOR_PROTECTED}{}-", uuid_v4())
}
