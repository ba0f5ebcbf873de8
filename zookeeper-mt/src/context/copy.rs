//! Copying what C hands a callback out of C memory, before the callback returns.

use crate::types::{Acl, Perms, Stat};
use std::ffi::CStr;
use std::os::raw::c_char;
use zookeeper_mt_sys as sys;

/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
pub(super) unsafe fn copy_str(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: per the function contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    // Valid UTF-8 (every path the server sends) is copied at once, with its exact
    // length; anything else is replaced lossily.
    Some(match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// # Safety
/// `stat` is NULL or points to a valid `Stat`.
pub(super) unsafe fn copy_stat(stat: *const sys::Stat) -> Option<Stat> {
    // SAFETY: per the function contract.
    unsafe { stat.as_ref() }.map(Stat::from)
}

/// # Safety
/// `strings` is NULL or a valid `String_vector` (count entries, each a C string).
pub(super) unsafe fn copy_strings(strings: *const sys::String_vector) -> Vec<String> {
    // SAFETY: per the function contract.
    let Some(vector) = (unsafe { strings.as_ref() }) else {
        return Vec::new();
    };
    if vector.data.is_null() || vector.count <= 0 {
        return Vec::new();
    }
    // SAFETY: C guarantees `count` valid entries at `data`.
    let items = unsafe { std::slice::from_raw_parts(vector.data, vector.count as usize) };
    items
        .iter()
        // SAFETY: each entry is a NUL-terminated string owned by the vector.
        .filter_map(|&item| unsafe { copy_str(item) })
        .collect()
}

/// # Safety
/// `acl` is NULL or a valid `ACL_vector`.
pub(crate) unsafe fn copy_acl(acl: *const sys::ACL_vector) -> Vec<Acl> {
    // SAFETY: per the function contract.
    let Some(vector) = (unsafe { acl.as_ref() }) else {
        return Vec::new();
    };
    if vector.data.is_null() || vector.count <= 0 {
        return Vec::new();
    }
    // SAFETY: C guarantees `count` valid entries at `data`.
    let items = unsafe { std::slice::from_raw_parts(vector.data, vector.count as usize) };
    items
        .iter()
        .map(|entry| Acl {
            perms: Perms(entry.perms),
            // SAFETY: scheme and id are NUL-terminated strings owned by the vector.
            scheme: unsafe { copy_str(entry.id.scheme) }
                .unwrap_or_default()
                .into(),
            // SAFETY: as above.
            id: unsafe { copy_str(entry.id.id) }.unwrap_or_default().into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::copy_str;

    #[test]
    fn strings_are_copied_exactly_or_lossily() {
        // SAFETY: NUL-terminated literals.
        let (text, bad, none) = unsafe {
            (
                copy_str(c"/a/日本-0000000001".as_ptr()),
                copy_str(c"/a\xff".as_ptr()),
                copy_str(std::ptr::null()),
            )
        };
        assert_eq!(text.as_deref(), Some("/a/日本-0000000001"));
        assert_eq!(bad.as_deref(), Some("/a\u{fffd}"));
        assert_eq!(none, None);
    }
}
