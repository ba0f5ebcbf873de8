//! The committed bindings must describe the header and library actually in use: sizes,
//! offsets and enum values as the C compiler sees them (via `src/layout_probe.c`), and the
//! crate version's `+3.8.0` build metadata must name the same C client version.

use std::ffi::CStr;
use std::mem::{offset_of, size_of};
use zookeeper_mt_sys as sys;
use zookeeper_mt_sys::probe;

fn c_size(which: i32) -> usize {
    // SAFETY: the probe functions are plain C functions without preconditions.
    unsafe { probe::zookeeper_mt_sys_probe_size(which) }
}

fn c_int(which: i32) -> i32 {
    // SAFETY: as above.
    unsafe { probe::zookeeper_mt_sys_probe_int(which) }
}

#[test]
fn struct_sizes_and_offsets_match_the_header() {
    assert_eq!(c_size(0), size_of::<sys::Stat>(), "Stat");
    assert_eq!(c_size(1), size_of::<sys::ACL>(), "ACL");
    assert_eq!(c_size(2), size_of::<sys::Id>(), "Id");
    assert_eq!(c_size(3), size_of::<sys::String_vector>(), "String_vector");
    assert_eq!(c_size(4), size_of::<sys::ACL_vector>(), "ACL_vector");
    assert_eq!(c_size(5), size_of::<sys::zoo_op_t>(), "zoo_op_t");
    assert_eq!(
        c_size(6),
        size_of::<sys::zoo_op_result_t>(),
        "zoo_op_result_t"
    );
    assert_eq!(c_size(7), size_of::<sys::clientid_t>(), "clientid_t");
    assert_eq!(c_size(8), offset_of!(sys::Stat, pzxid), "Stat.pzxid");
    assert_eq!(
        c_size(9),
        offset_of!(sys::zoo_op_result_t, stat),
        "zoo_op_result_t.stat"
    );
    assert_eq!(
        c_size(10),
        offset_of!(sys::zoo_op_t, __bindgen_anon_1),
        "zoo_op_t union"
    );
}

#[test]
fn constants_match_the_header_and_library() {
    // SAFETY: reading `extern const int` objects the library defines and never writes.
    let (persistent, eph_seq, ttl_seq, connected, expired, child, notwatching, perm_all) = unsafe {
        (
            sys::ZOO_PERSISTENT,
            sys::ZOO_EPHEMERAL_SEQUENTIAL,
            sys::ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL,
            sys::ZOO_CONNECTED_STATE,
            sys::ZOO_EXPIRED_SESSION_STATE,
            sys::ZOO_CHILD_EVENT,
            sys::ZOO_NOTWATCHING_EVENT,
            sys::ZOO_PERM_ALL,
        )
    };
    assert_eq!(c_int(0), persistent);
    assert_eq!(c_int(1), eph_seq);
    assert_eq!(c_int(2), ttl_seq);
    assert_eq!(c_int(3), connected);
    assert_eq!(c_int(4), expired);
    assert_eq!(c_int(5), child);
    assert_eq!(c_int(6), notwatching);
    assert_eq!(c_int(7), perm_all);
    assert_eq!(c_int(8), sys::ZNOWATCHER);
    assert_eq!(c_int(9), sys::ZNONODE);
    assert_eq!(c_int(10), sys::ZSESSIONEXPIRED);
    assert_eq!(c_int(11), sys::ZTHROTTLEDOP);
    assert_eq!(c_int(12), sys::ZOO_LOG_LEVEL_DEBUG as i32);
    assert_eq!(c_int(13), sys::ZAPIERROR);
}

#[test]
fn crate_version_names_the_header_version() {
    // SAFETY: the probe returns a pointer to a static NUL-terminated string literal.
    let header = unsafe { CStr::from_ptr(probe::zookeeper_mt_sys_probe_version()) };
    let header = header.to_str().unwrap();
    let bindings = CStr::from_bytes_with_nul(sys::ZOO_VERSION)
        .unwrap()
        .to_str()
        .unwrap();
    let crate_c_version = env!("CARGO_PKG_VERSION").split('+').nth(1).unwrap();
    assert_eq!(header, bindings, "header vs committed bindings");
    assert_eq!(header, crate_c_version, "header vs crate version metadata");
}

#[test]
fn zerror_speaks_for_the_linked_library() {
    // SAFETY: zerror returns a pointer to a static string for any code.
    let text = unsafe { CStr::from_ptr(sys::zerror(sys::ZNONODE)) };
    assert_eq!(text.to_str().unwrap(), "no node");
}
