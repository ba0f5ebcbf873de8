//! The path oracle: what the server accepts as a path.

use zookeeper_mt::{validate_path, Error, MAX_DATA_LEN};

/// `org.apache.zookeeper.common.PathUtils.validatePath(String)` (3.8.0), over the UTF-16
/// code units of the path, exactly as the Java loop walks them.
pub fn java_validate_path(chars: &[u16]) -> bool {
    const SLASH: u16 = b'/' as u16;
    const DOT: u16 = b'.' as u16;
    if chars.is_empty() || chars[0] != SLASH {
        return false;
    }
    if chars.len() == 1 {
        return true; // the root
    }
    if chars[chars.len() - 1] == SLASH {
        return false;
    }
    let mut lastc = SLASH;
    for i in 1..chars.len() {
        let c = chars[i];
        let at_end_or_slash = i + 1 == chars.len() || chars[i + 1] == SLASH;
        if c == 0 || (c == SLASH && lastc == SLASH) {
            return false;
        } else if c == DOT && lastc == DOT {
            if chars[i - 2] == SLASH && at_end_or_slash {
                return false;
            }
        } else if c == DOT {
            if chars[i - 1] == SLASH && at_end_or_slash {
                return false;
            }
        } else if (c > 0 && c <= 0x1f)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || c >= 0xfff0
        {
            return false;
        }
        lastc = c;
    }
    true
}

/// Whether the server accepts `path` for a request (`sequential`: a create with a
/// sequence suffix, validated by the server as `path + "1"`, as `PathUtils` does).
pub fn server_accepts_path(path: &str, sequential: bool) -> bool {
    let mut units: Vec<u16> = path.encode_utf16().collect();
    if sequential {
        units.push(u16::from(b'1'));
    }
    path.len() <= MAX_DATA_LEN && java_validate_path(&units)
}

/// Property: `validate_path` agrees with the server on `path` in both modes, and a
/// rejection is `InvalidPath` naming the path.
pub fn check_path(path: &str) {
    for sequential in [false, true] {
        let ours = validate_path(path, sequential);
        let server = server_accepts_path(path, sequential);
        match &ours {
            Ok(()) => assert!(
                server,
                "validate_path({path:?}, {sequential}) accepts what the server rejects"
            ),
            Err(Error::InvalidPath { path: p, reason }) => {
                assert!(
                    !server,
                    "validate_path({path:?}, {sequential}) rejects ({reason}) what the server accepts"
                );
                assert_eq!(p, path, "InvalidPath names another path");
                assert!(!reason.is_empty());
            }
            Err(other) => panic!("validate_path({path:?}) gave {other:?}, not InvalidPath"),
        }
    }
}

/// Fuzz entry: the bytes as a path (lossy UTF-8, so every input is tried), and when
/// they are valid UTF-8 also with a `/` prepended.
pub fn path_input(data: &[u8]) {
    let path = String::from_utf8_lossy(data);
    check_path(&path);
    if !path.starts_with('/') {
        check_path(&format!("/{path}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_matches_known_server_verdicts() {
        // From the server table in integration/tests/hostile_input/paths.rs.
        for ok in [
            "/",
            "/a",
            "/a/...",
            "/.a",
            "/a.",
            "/..a",
            "/a b",
            "/\u{a0}",
            "/\u{d7ff}",
        ] {
            assert!(server_accepts_path(ok, false), "{ok:?}");
        }
        for bad in [
            "", "a", "/a/", "//", "/.", "/..", "/a/./b", "/a\0", "/\u{1f}", "/\u{7f}",
        ] {
            assert!(!server_accepts_path(bad, false), "{bad:?}");
        }
        for bad in [
            "/\u{9f}",
            "/\u{e000}",
            "/\u{f8ff}",
            "/\u{fff0}",
            "/\u{ffff}",
            "/\u{10000}",
        ] {
            assert!(!server_accepts_path(bad, false), "{bad:?}");
        }
        for ok in ["/", "/a/", "/a/.", "/a/..", "/a/-"] {
            assert!(server_accepts_path(ok, true), "{ok:?}");
        }
        assert!(!server_accepts_path("/a//", true));
        assert!(!server_accepts_path("/./", true));
    }
}
