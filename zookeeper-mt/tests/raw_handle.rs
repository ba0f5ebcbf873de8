//! The way down to C: `ffi` and `ZooKeeper::with_raw_handle` give the live handle to
//! code that calls the C client directly, and refuse once the handle is closed.

mod common;

use std::ffi::CString;
use zookeeper_mt::{ffi, CreateMode, Error};

#[test]
fn raw_handle_reaches_the_same_session_as_the_safe_calls() {
    let zk = common::connect();
    let path = common::unique("raw-handle");
    zk.create(&path, b"x", CreateMode::Persistent).unwrap();

    // SAFETY: zoo_state and zoo_recv_timeout only read the live handle.
    let (state, timeout_ms) = unsafe {
        zk.with_raw_handle(|zh| (ffi::zoo_state(zh), ffi::zoo_recv_timeout(zh)))
            .unwrap()
    };
    // SAFETY: reading a constant the C library exports.
    assert_eq!(state, unsafe { ffi::ZOO_CONNECTED_STATE });
    let negotiated = zk.session_timeout().unwrap();
    assert_eq!(timeout_ms as u128, negotiated.as_millis());

    // A synchronous C call on the same session sees the node the safe API made.
    let c_path = CString::new(path.clone()).unwrap();
    let mut stat = std::mem::MaybeUninit::<ffi::Stat>::zeroed();
    // SAFETY: a synchronous exists with no watch; path and stat outlive the call; the
    // handle is live while the closure runs and the pointer is not kept.
    let rc = unsafe {
        zk.with_raw_handle(|zh| ffi::zoo_exists(zh, c_path.as_ptr(), 0, stat.as_mut_ptr()))
            .unwrap()
    };
    assert_eq!(rc, ffi::ZOK);
    // SAFETY: zoo_exists filled the stat on ZOK.
    let stat = unsafe { stat.assume_init() };
    assert_eq!(stat.dataLength, 1);
    assert_eq!(stat.czxid, zk.exists(&path).unwrap().unwrap().czxid);

    zk.delete(&path, None).unwrap();
    zk.close().unwrap();
    // SAFETY: the closure is never run on a closed handle.
    let closed =
        unsafe { zk.with_raw_handle(|_| -> () { unreachable!("closed handle handed out") }) };
    assert!(matches!(closed, Err(Error::Closed)), "{closed:?}");
}
