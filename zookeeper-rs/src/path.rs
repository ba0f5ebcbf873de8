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

/// Checks a node path. `sequential` allows a trailing `/` (the server appends the
/// sequence number to it).
pub fn validate_path(path: &str, sequential: bool) -> Result<()> {
    if path.is_empty() {
        return Err(invalid(path, "path is empty"));
    }
    if !path.starts_with('/') {
        return Err(invalid(path, "path must start with /"));
    }
    if path.len() == 1 {
        return Ok(()); // "/" itself; with `sequential` the server names "/0000000001"
    }
    if path.ends_with('/') && !sequential {
        return Err(invalid(path, "path must not end with /"));
    }
    if path.contains('\0') {
        return Err(invalid(path, "path contains a NUL character"));
    }
    let body = path.strip_suffix('/').unwrap_or(path);
    for component in body[1..].split('/') {
        match component {
            "" => return Err(invalid(path, "empty node name (//)")),
            "." | ".." => return Err(invalid(path, "relative paths (. or ..) are not allowed")),
            _ => {}
        }
    }
    if path.chars().any(is_forbidden_char) {
        return Err(invalid(
            path,
            "path contains a character the server rejects",
        ));
    }
    Ok(())
}

/// The server's forbidden ranges: control characters, the C1 block, the private-use
/// block and the specials block (surrogates cannot occur in a Rust `str`).
fn is_forbidden_char(c: char) -> bool {
    matches!(c,
        '\u{1}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
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
        ] {
            assert!(
                matches!(validate_path(bad, false), Err(Error::InvalidPath { .. })),
                "{bad:?}"
            );
        }
        assert!(validate_path("/a//", true).is_err());
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
