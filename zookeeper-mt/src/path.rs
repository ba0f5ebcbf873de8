//! Path and data checks, by the server's rules (`PathUtils.validatePath`), so bad input
//! gets a typed error here instead of a server round trip or a dropped connection.

use crate::error::{Error, Result};
use std::ffi::CString;

/// Largest node data accepted: the server's default `jute.maxbuffer` (1 MiB) bounds
/// the whole request, and a request over it makes the server drop the connection.
pub const MAX_DATA_LEN: usize = 1024 * 1024 - 1024;

fn invalid(path: &str, reason: &'static str) -> Error {
    Error::InvalidPath {
        path: path.to_string(),
        reason,
    }
}

/// Checks a node path by the server's rules (`PathUtils.validatePath`). `sequential`
/// allows a trailing `/`, `.` or `..` in the last name: the server validates the path
/// with the sequence number appended (`/q/` becomes `/q/0000000001`).
///
/// Besides the structural rules (absolute, no empty, `.` or `..` names, no trailing
/// `/`), the server rejects NUL, U+0001..U+001F, U+007F..U+009F, U+E000..U+F8FF,
/// U+FFF0..U+FFFF and every character outside the Basic Multilingual Plane (Java sees
/// those as UTF-16 surrogates, which it rejects). A path longer than [`MAX_DATA_LEN`]
/// bytes is refused too: a request that large makes the server drop the connection.
pub fn validate_path(path: &str, sequential: bool) -> Result<()> {
    check_path(path, sequential).map_err(|reason| invalid(path, reason))
}

fn check_path(path: &str, sequential: bool) -> std::result::Result<(), &'static str> {
    if path.is_empty() {
        return Err("path is empty");
    }
    if !path.starts_with('/') {
        return Err("path must start with /");
    }
    if path.len() > MAX_DATA_LEN {
        return Err("path is longer than the server accepts in a request");
    }
    if path.len() == 1 {
        return Ok(()); // "/" itself; with `sequential` the server names "/0000000001"
    }
    if path.ends_with('/') && !sequential {
        return Err("path must not end with /");
    }
    let bytes = path.as_bytes();
    // One pass over every byte without early exit (the compiler vectorizes it): NUL, an
    // ASCII control, non-ASCII (decoded and checked below, rarely needed), and a `/`
    // followed by `/` or `.`, without which no name is empty, `.` or `..`.
    let (mut nul, mut control, mut non_ascii, mut suspect) = (false, false, false, false);
    for (&before, &b) in bytes.iter().zip(&bytes[1..]) {
        nul |= b == 0;
        control |= b < 0x20 || b == 0x7f;
        non_ascii |= b >= 0x80;
        suspect |= before == b'/' && (b == b'/' || b == b'.');
    }
    if nul {
        return Err("path contains a NUL character");
    }
    if suspect {
        if let Some(fault) = first_name_fault(bytes, sequential) {
            return Err(fault);
        }
    }
    if control || (non_ascii && path.chars().any(is_forbidden_char)) {
        return Err("path contains a character the server rejects");
    }
    Ok(())
}

/// The first name that is empty, `.` or `..` (the last one exempt for a sequential
/// create: the server appends the sequence number to it).
fn first_name_fault(bytes: &[u8], sequential: bool) -> Option<&'static str> {
    let mut names = bytes[1..].split(|b| *b == b'/').peekable();
    while let Some(name) = names.next() {
        if sequential && names.peek().is_none() {
            return None;
        }
        if let Some(fault) = name_fault(name) {
            return Some(fault);
        }
    }
    None
}

/// What is wrong with one node name, if anything.
fn name_fault(name: &[u8]) -> Option<&'static str> {
    match name {
        b"" => Some("empty node name (//)"),
        b"." | b".." => Some("relative paths (. or ..) are not allowed"),
        _ => None,
    }
}

/// The server's forbidden ranges: control characters, the C1 block, the private-use
/// block, the specials block, and everything outside the BMP (encoded as surrogates,
/// U+D800..U+DFFF, in the server's UTF-16 strings; those cannot occur in a `str`).
fn is_forbidden_char(c: char) -> bool {
    matches!(c,
        '\u{1}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{fff0}'..='\u{ffff}'
        | '\u{10000}'..)
}

/// Validates and converts a path for C.
pub(crate) fn c_path(path: &str, sequential: bool) -> Result<CString> {
    validate_path(path, sequential)?;
    // Cannot fail: validate_path rejected NUL.
    CString::new(path).map_err(|_| invalid(path, "path contains a NUL character"))
}

/// Checks node data against [`MAX_DATA_LEN`].
pub(crate) fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > MAX_DATA_LEN {
        return Err(Error::DataTooLarge {
            len: data.len(),
            max: MAX_DATA_LEN,
        });
    }
    Ok(())
}

/// Converts a non-path string argument (hosts, scheme, id) for C.
pub(crate) fn c_string(value: &str, what: &'static str) -> Result<CString> {
    CString::new(value).map_err(|_| Error::InteriorNul(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The straightforward form of the rules (one pass per rule), kept to check the
    /// single-pass `check_path` against.
    fn reference(path: &str, sequential: bool) -> std::result::Result<(), &'static str> {
        if path.is_empty() {
            return Err("path is empty");
        }
        if !path.starts_with('/') {
            return Err("path must start with /");
        }
        if path.len() == 1 {
            return Ok(());
        }
        if path.ends_with('/') && !sequential {
            return Err("path must not end with /");
        }
        if path.contains('\0') {
            return Err("path contains a NUL character");
        }
        let mut names = path[1..].split('/').peekable();
        while let Some(name) = names.next() {
            if sequential && names.peek().is_none() {
                break;
            }
            match name {
                "" => return Err("empty node name (//)"),
                "." | ".." => return Err("relative paths (. or ..) are not allowed"),
                _ => {}
            }
        }
        if path.chars().any(is_forbidden_char) {
            return Err("path contains a character the server rejects");
        }
        Ok(())
    }

    #[test]
    fn the_single_pass_check_agrees_with_the_rules() {
        let alphabet = [
            '/',
            '/',
            '.',
            'a',
            'b',
            '\u{1}',
            '\u{7f}',
            '\u{e9}',
            '\u{e000}',
            '\u{10400}',
            '\0',
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..200_000 {
            let len = (next() % 21) as usize;
            let mut path = String::from(if next() % 8 == 0 { "" } else { "/" });
            for _ in 0..len {
                path.push(alphabet[(next() % alphabet.len() as u64) as usize]);
            }
            for sequential in [false, true] {
                assert_eq!(
                    check_path(&path, sequential),
                    reference(&path, sequential),
                    "{path:?} sequential={sequential}"
                );
            }
        }
    }

    #[test]
    fn accepts_what_the_server_accepts() {
        for ok in [
            "/",
            "/a",
            "/a/b",
            "/zookeeper",
            "/a.b",
            "/a/..b",
            "/ü/日本",
            "/a b",
        ] {
            assert!(validate_path(ok, false).is_ok(), "{ok}");
        }
        assert!(validate_path("/queue/item-", true).is_ok());
        assert!(validate_path("/queue/", true).is_ok());
        // The server validates "/q/." + "0000000001": a valid name.
        assert!(validate_path("/q/.", true).is_ok());
        assert!(validate_path("/q/..", true).is_ok());
        assert!(validate_path("/", true).is_ok());
        assert!(validate_path(&format!("/{}", "a".repeat(100_000)), false).is_ok());
    }

    #[test]
    fn rejects_what_the_server_rejects() {
        for bad in [
            "",
            "a",
            "a/b",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/..",
            "/a/./b",
            "/a/../b",
            "/a\0b",
            "/a\u{1}",
            "/\u{7f}",
            "/\u{e000}",
            "/\u{fff5}",
            "/\u{10000}",
            "/emoji\u{1f600}",
            "/\u{10ffff}",
        ] {
            assert!(
                matches!(validate_path(bad, false), Err(Error::InvalidPath { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_path("/a//", true).is_err());
        assert!(validate_path("/./", true).is_err());
        assert!(validate_path("/a/./", true).is_err());
        assert!(validate_path("/a\u{1}/", true).is_err());
        let huge = format!("/{}", "a".repeat(MAX_DATA_LEN));
        assert!(matches!(
            validate_path(&huge, false),
            Err(Error::InvalidPath { .. })
        ));
    }

    #[test]
    fn data_limit() {
        assert!(check_data(&vec![0; MAX_DATA_LEN]).is_ok());
        assert!(matches!(
            check_data(&vec![0; MAX_DATA_LEN + 1]),
            Err(Error::DataTooLarge { .. })
        ));
    }
}
