//! ACLs in the C layout, built from `Acl`s for the duration of one call.

use crate::error::Result;
use crate::path::c_string;
use crate::types::Acl;
use std::ffi::CString;
use zookeeper_mt_sys as sys;

/// An `ACL_vector` for one call: one of the C client's static vectors for the common
/// ACLs (no allocation), or one built from the caller's entries.
pub(crate) enum CAcl {
    /// `ZOO_OPEN_ACL_UNSAFE`, `ZOO_READ_ACL_UNSAFE` or `ZOO_CREATOR_ALL_ACL`.
    Static(Common),
    /// Owns the strings and entries the vector points at.
    Built {
        _strings: Vec<CString>,
        entries: Vec<sys::ACL>,
    },
}

/// The C client's static ACL vectors.
#[derive(Clone, Copy)]
pub(crate) enum Common {
    OpenUnsafe,
    ReadUnsafe,
    CreatorAll,
}

// SAFETY: the raw pointers in `entries` point into `_strings`, owned by the same value;
// the static vectors are never written (C only reads them).
unsafe impl Send for CAcl {}

impl CAcl {
    pub(crate) fn new(acl: &[Acl]) -> Result<CAcl> {
        if acl == Acl::OPEN_UNSAFE {
            return Ok(CAcl::Static(Common::OpenUnsafe));
        }
        if acl == Acl::READ_UNSAFE {
            return Ok(CAcl::Static(Common::ReadUnsafe));
        }
        if acl == Acl::CREATOR_ALL {
            return Ok(CAcl::Static(Common::CreatorAll));
        }
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
        Ok(CAcl::Built {
            _strings: strings,
            entries,
        })
    }

    /// The C view; valid while `self` lives and is not mutated.
    pub(crate) fn as_vector(&mut self) -> sys::ACL_vector {
        match self {
            // SAFETY: the C client initialises these statics at load time and never
            // writes them; copying the two fields (count, pointer to static entries)
            // is a plain read.
            CAcl::Static(common) => unsafe {
                match common {
                    Common::OpenUnsafe => std::ptr::addr_of!(sys::ZOO_OPEN_ACL_UNSAFE).read(),
                    Common::ReadUnsafe => std::ptr::addr_of!(sys::ZOO_READ_ACL_UNSAFE).read(),
                    Common::CreatorAll => std::ptr::addr_of!(sys::ZOO_CREATOR_ALL_ACL).read(),
                }
            },
            CAcl::Built { entries, .. } => sys::ACL_vector {
                count: entries.len() as i32,
                data: entries.as_mut_ptr(),
            },
        }
    }
}
