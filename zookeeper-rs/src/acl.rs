//! ACLs in the C layout, built from `Acl`s for the duration of one call.

use crate::error::Result;
use crate::path::c_string;
use crate::types::Acl;
use std::ffi::CString;
use zookeeper_sys as sys;

/// Owns the strings and entries an `ACL_vector` points at.
pub(crate) struct CAcl {
    _strings: Vec<CString>,
    entries: Vec<sys::ACL>,
}

// SAFETY: the raw pointers in `entries` point into `_strings`, owned by the same value.
unsafe impl Send for CAcl {}

impl CAcl {
    pub(crate) fn new(acl: &[Acl]) -> Result<CAcl> {
        let mut strings = Vec::with_capacity(acl.len() * 2);
        let mut entries = Vec::with_capacity(acl.len());
        for entry in acl {
            let scheme = c_string(&entry.scheme, "ACL scheme")?;
            let id = c_string(&entry.id, "ACL id")?;
            entries.push(sys::ACL {
                perms: entry.perms.0,
                id: sys::Id {
                    // C only reads these (it serializes the request at submit time).
                    scheme: scheme.as_ptr() as *mut _,
                    id: id.as_ptr() as *mut _,
                },
            });
            // Moving a CString moves the pointer, not the heap bytes it points at.
            strings.push(scheme);
            strings.push(id);
        }
        Ok(CAcl {
            _strings: strings,
            entries,
        })
    }

    /// The C view; valid while `self` lives and is not mutated.
    pub(crate) fn as_vector(&mut self) -> sys::ACL_vector {
        sys::ACL_vector {
            count: self.entries.len() as i32,
            data: self.entries.as_mut_ptr(),
        }
    }
}
