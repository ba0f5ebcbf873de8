//! The hand-written TLS/SASL declarations (`src/tls.rs`, `src/sasl.rs`,
//! `src/secure_init.rs`) must match zookeeper.h compiled with the vendored build's
//! `HAVE_OPENSSL_H` / `HAVE_CYRUS_SASL_H` (via `src/security_probe.c`), and the functions
//! must link. Features `tls` / `sasl`.
#![cfg(any(feature = "tls", feature = "sasl"))]

use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr;
use zookeeper_mt_sys as sys;
use zookeeper_mt_sys::probe;

#[cfg(feature = "sasl")]
fn c_size(which: c_int) -> usize {
    // SAFETY: the probe functions are plain C functions without preconditions.
    unsafe { probe::zookeeper_mt_sys_probe_security_size(which) }
}

fn c_long(which: c_int) -> i64 {
    // SAFETY: as above.
    unsafe { probe::zookeeper_mt_sys_probe_security_int(which) as i64 }
}

fn c_fn(which: c_int) -> usize {
    // SAFETY: as above; the result is only compared, never called.
    unsafe { probe::zookeeper_mt_sys_probe_security_fn(which) as usize }
}

#[test]
fn header_was_compiled_with_the_features_defines() {
    // SAFETY: as above.
    let features = unsafe { probe::zookeeper_mt_sys_probe_security_features() };
    assert_eq!(features & 1 != 0, cfg!(feature = "tls"), "HAVE_OPENSSL_H");
    assert_eq!(
        features & 2 != 0,
        cfg!(feature = "sasl"),
        "HAVE_CYRUS_SASL_H"
    );
    assert_eq!(c_long(10), sys::ZSSLCONNECTIONERROR as i64);
}

#[cfg(feature = "tls")]
#[test]
fn tls_declarations_name_the_library_functions() {
    let declared = sys::zookeeper_init_ssl as *const () as usize;
    assert_eq!(c_fn(0), declared, "zookeeper_init_ssl");
}

#[cfg(feature = "sasl")]
#[test]
fn sasl_struct_layouts_match_the_header() {
    use std::mem::{offset_of, size_of};
    assert_eq!(
        c_size(0),
        size_of::<sys::zoo_sasl_params_t>(),
        "zoo_sasl_params_t"
    );
    assert_eq!(c_size(1), offset_of!(sys::zoo_sasl_params_t, service));
    assert_eq!(c_size(2), offset_of!(sys::zoo_sasl_params_t, host));
    assert_eq!(c_size(3), offset_of!(sys::zoo_sasl_params_t, mechlist));
    assert_eq!(c_size(4), offset_of!(sys::zoo_sasl_params_t, callbacks));
    assert_eq!(
        c_size(5),
        size_of::<sys::sasl_callback_t>(),
        "sasl_callback_t"
    );
    assert_eq!(c_size(6), offset_of!(sys::sasl_callback_t, id));
    assert_eq!(c_size(7), offset_of!(sys::sasl_callback_t, proc_));
    assert_eq!(c_size(8), offset_of!(sys::sasl_callback_t, context));
    assert_eq!(c_size(9), size_of::<sys::sasl_secret_t>(), "sasl_secret_t");
    assert_eq!(c_size(10), offset_of!(sys::sasl_secret_t, data));
}

#[cfg(feature = "sasl")]
#[test]
fn sasl_constants_match_the_header() {
    assert_eq!(c_long(0), sys::SASL_OK as i64);
    assert_eq!(c_long(1), sys::SASL_CONTINUE as i64);
    assert_eq!(c_long(2), sys::SASL_FAIL as i64);
    assert_eq!(c_long(3), sys::SASL_NOMEM as i64);
    assert_eq!(c_long(4), sys::SASL_BADPARAM as i64);
    assert_eq!(c_long(5), sys::SASL_CB_LIST_END as i64);
    assert_eq!(c_long(6), sys::SASL_CB_GETREALM as i64);
    assert_eq!(c_long(7), sys::SASL_CB_USER as i64);
    assert_eq!(c_long(8), sys::SASL_CB_AUTHNAME as i64);
    assert_eq!(c_long(9), sys::SASL_CB_PASS as i64);
}

#[cfg(feature = "sasl")]
#[test]
fn sasl_declarations_name_the_library_functions() {
    assert_eq!(
        c_fn(1),
        sys::zookeeper_init_sasl as *const () as usize,
        "zookeeper_init_sasl"
    );
    assert_eq!(
        c_fn(2),
        sys::zoo_sasl_make_basic_callbacks as *const () as usize,
        "zoo_sasl_make_basic_callbacks"
    );
    assert_eq!(
        c_fn(3),
        sys::sasl_client_init as *const () as usize,
        "sasl_client_init"
    );
}

/// `zookeeper_mt_sys_init_secure` rejects what it cannot do before starting any thread.
#[test]
fn secure_init_rejects_bad_requests_with_errno() {
    let host = CString::new("127.0.0.1:1").unwrap();
    let init = |cert: Option<&CString>| {
        // SAFETY: valid NUL-terminated strings (or NULL) and no callbacks; on the paths
        // tested the call returns NULL before creating a handle.
        let zh = unsafe {
            sys::zookeeper_mt_sys_init_secure(
                host.as_ptr(),
                cert.map_or(ptr::null(), |c| c.as_ptr()),
                None,
                10_000,
                ptr::null(),
                ptr::null_mut(),
                0,
                None,
                ptr::null_mut(),
            )
        };
        (zh.is_null(), std::io::Error::last_os_error().raw_os_error())
    };
    let two_fields = CString::new("/ca.pem,/cert.pem").unwrap();
    if cfg!(feature = "tls") {
        assert_eq!(init(Some(&two_fields)), (true, Some(libc::EINVAL)));
    } else {
        assert_eq!(init(Some(&two_fields)), (true, Some(libc::ENOTSUP)));
    }
}

/// A plaintext handle through the secure entry point, closed at once: the replacement
/// translation unit (`build/secure_init.c` including `zookeeper.c`) is the whole client.
#[test]
fn secure_init_without_tls_or_sasl_is_a_plain_handle() {
    let host = CString::new("127.0.0.1:1").unwrap();
    // SAFETY: valid host string, no callbacks, no context; the handle is closed below
    // from this (non-callback) thread and not used after.
    unsafe {
        let zh = sys::zookeeper_mt_sys_init_secure(
            host.as_ptr(),
            ptr::null(),
            None,
            10_000,
            ptr::null(),
            ptr::null_mut(),
            sys::ZOO_NO_LOG_CLIENTENV as c_int,
            None,
            ptr::null_mut(),
        );
        assert!(!zh.is_null());
        assert_eq!(sys::zookeeper_close(zh), sys::ZOK);
    }
}

/// `zookeeper_mt_sys_check_tls` reports the first step that fails, without prompting.
#[cfg(feature = "tls")]
#[test]
fn tls_check_reports_the_failing_step() {
    let check = |cert: &str| {
        let cert = CString::new(cert).unwrap();
        let mut reason = [0 as std::os::raw::c_char; 128];
        // SAFETY: NUL-terminated input; a writable buffer of the given length.
        unsafe { sys::zookeeper_mt_sys_check_tls(cert.as_ptr(), reason.as_mut_ptr(), reason.len()) }
    };
    assert_eq!(check("only-two,fields"), 5);
    assert_eq!(
        check("/nonexistent/ca.pem,/nonexistent/cert.pem,/nonexistent/key.pem"),
        1
    );
    // SAFETY: NULL is allowed for both the string and the error buffer.
    assert_eq!(
        unsafe { sys::zookeeper_mt_sys_check_tls(ptr::null(), ptr::null_mut(), 0) },
        5
    );
}
