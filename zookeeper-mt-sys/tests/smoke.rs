//! A round trip through the raw FFI only: connect to a real server started by the
//! harness, wait for ZOO_CONNECTED_STATE via the global watcher, create/get/delete, close.
//! Also checks that the *linked library* (not just the header) is the 3.8.0 client, from
//! the environment line it logs at init.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use zookeeper_mt_sys as sys;

/// Session state as last reported to the global watcher, with a condition variable to
/// wait on (the pattern of the C client's Python bindings).
struct Connection {
    state: Mutex<c_int>,
    changed: Condvar,
}

unsafe extern "C" fn global_watcher(
    _zh: *mut sys::zhandle_t,
    event_type: c_int,
    state: c_int,
    _path: *const c_char,
    context: *mut c_void,
) {
    // SAFETY: `context` is the `&Connection` passed to zookeeper_init2, which outlives
    // the handle (the test closes the handle before dropping it).
    let connection = unsafe { &*(context as *const Connection) };
    if event_type == unsafe { sys::ZOO_SESSION_EVENT } {
        *connection.state.lock().unwrap() = state;
        connection.changed.notify_all();
    }
}

static LOGGED_VERSION: Mutex<Option<String>> = Mutex::new(None);

unsafe extern "C" fn log_line(message: *const c_char) {
    // SAFETY: the C client passes a NUL-terminated message valid for this call.
    let message = unsafe { CStr::from_ptr(message) }.to_string_lossy();
    if let Some(rest) = message.split("zookeeper.version=").nth(1) {
        *LOGGED_VERSION.lock().unwrap() = Some(rest.trim().to_string());
    }
}

#[test]
fn raw_round_trip_against_a_real_server() {
    let server = zk_harness::test_hosts().expect("start a test server");
    let hosts = CString::new(server.connect_string()).unwrap();
    let connection = Box::new(Connection {
        state: Mutex::new(0),
        changed: Condvar::new(),
    });

    // SAFETY: process-wide level setter without preconditions.
    unsafe { sys::zoo_set_debug_level(sys::ZOO_LOG_LEVEL_INFO) };
    // SAFETY: `hosts` is NUL-terminated; the watcher context outlives the handle; the
    // log callback is a plain function.
    let zh = unsafe {
        sys::zookeeper_init2(
            hosts.as_ptr(),
            Some(global_watcher),
            10_000,
            ptr::null(),
            &*connection as *const Connection as *mut c_void,
            0,
            Some(log_line),
        )
    };
    assert!(!zh.is_null(), "zookeeper_init2 returned NULL");

    let connected = {
        let state = connection.state.lock().unwrap();
        // SAFETY: reading an extern const int.
        let want = unsafe { sys::ZOO_CONNECTED_STATE };
        let (state, _) = connection
            .changed
            .wait_timeout_while(state, Duration::from_secs(20), |s| *s != want)
            .unwrap();
        *state == want
    };
    assert!(connected, "no ZOO_CONNECTED_STATE within 20 s");

    let path = CString::new("/zookeeper-mt-sys-smoke").unwrap();
    let data = b"hello \x00 binary";
    let mut created = vec![0 as c_char; 256];
    // SAFETY: valid handle; path NUL-terminated; data pointer/len describe `data`; the
    // ACL is the library's static OPEN_ACL_UNSAFE; `created` has the stated capacity.
    let rc = unsafe {
        sys::zoo_create(
            zh,
            path.as_ptr(),
            data.as_ptr() as *const c_char,
            data.len() as c_int,
            ptr::addr_of_mut!(sys::ZOO_OPEN_ACL_UNSAFE),
            sys::ZOO_PERSISTENT,
            created.as_mut_ptr(),
            created.len() as c_int,
        )
    };
    assert_eq!(rc, sys::ZOK, "zoo_create");
    // SAFETY: zoo_create wrote a NUL-terminated path into `created`.
    let created = unsafe { CStr::from_ptr(created.as_ptr()) };
    assert_eq!(created.to_bytes(), b"/zookeeper-mt-sys-smoke");

    let mut buffer = vec![0u8; 64];
    let mut len = buffer.len() as c_int;
    let mut stat = sys::Stat::default();
    // SAFETY: valid handle and path; buffer/len describe a writable buffer; stat is writable.
    let rc = unsafe {
        sys::zoo_get(
            zh,
            path.as_ptr(),
            0,
            buffer.as_mut_ptr() as *mut c_char,
            &mut len,
            &mut stat,
        )
    };
    assert_eq!(rc, sys::ZOK, "zoo_get");
    assert_eq!(&buffer[..len as usize], data);
    assert_eq!(stat.dataLength as usize, data.len());

    // SAFETY: valid handle and path.
    assert_eq!(
        unsafe { sys::zoo_delete(zh, path.as_ptr(), stat.version) },
        sys::ZOK
    );
    // SAFETY: as above; the node is gone now.
    let rc = unsafe { sys::zoo_exists(zh, path.as_ptr(), 0, ptr::null_mut()) };
    assert_eq!(rc, sys::ZNONODE);

    // SAFETY: no other thread uses the handle; it is not used after this.
    assert_eq!(unsafe { sys::zookeeper_close(zh) }, sys::ZOK);
    drop(connection);

    let logged = LOGGED_VERSION.lock().unwrap().clone();
    // The vendored source (npm zookeeper@7.3.0) is the 3.8.2 release of the same 3.8
    // API; the system library is Debian's 3.8.0, the version the crate carries.
    let c_version = if cfg!(feature = "vendored") {
        "3.8.2"
    } else {
        env!("CARGO_PKG_VERSION").split('+').nth(1).unwrap()
    };
    let expected = format!("zookeeper C client {c_version}");
    assert_eq!(
        logged.as_deref(),
        Some(expected.as_str()),
        "linked library version"
    );
}
