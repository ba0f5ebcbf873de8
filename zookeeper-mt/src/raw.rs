//! The way down to C, for what the safe API does not cover: the raw bindings
//! ([`ffi`](crate::ffi)) and the session's C handle.

use crate::{Result, ZooKeeper};
use std::cell::RefCell;
use zookeeper_mt_sys as sys;

thread_local! {
    /// The handles (client keys) whose `with_raw_handle` closure runs on this thread.
    static RAW_CALLS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Whether this thread runs a `with_raw_handle` closure of handle `client` (which holds
/// its read lock: a close there would wait for itself).
pub(crate) fn inside_raw_call(client: u64) -> bool {
    RAW_CALLS.with(|calls| calls.borrow().contains(&client))
}

/// Marks a `with_raw_handle` closure as running until dropped (also on a panic).
struct RawCall(u64);

impl RawCall {
    fn enter(client: u64) -> RawCall {
        RAW_CALLS.with(|calls| calls.borrow_mut().push(client));
        RawCall(client)
    }
}

impl Drop for RawCall {
    fn drop(&mut self) {
        RAW_CALLS.with(|calls| {
            let mut calls = calls.borrow_mut();
            if let Some(at) = calls.iter().rposition(|&c| c == self.0) {
                calls.remove(at);
            }
        });
    }
}

impl ZooKeeper {
    /// Runs `call` with this session's C handle (`zhandle_t *`), for a C function the safe
    /// API does not wrap. `Err(Closed)` (or `SessionExpired`, `AuthFailed`) instead, as
    /// every call, once the handle is closed or the session has ended; while `call` runs,
    /// the handle cannot be closed (a concurrent [`close`](Self::close) waits for it, so
    /// keep `call` short). A `close` of this handle (or a clone) inside `call` fails with
    /// `InvalidArgument` and closes nothing, as it would wait for `call` to return.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use zookeeper_mt::{ffi, ZooKeeper};
    ///
    /// let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
    /// // SAFETY: zoo_recv_timeout only reads the live handle; the pointer is not kept.
    /// let timeout_ms = unsafe { zk.with_raw_handle(|zh| ffi::zoo_recv_timeout(zh))? };
    /// # Ok::<(), zookeeper_mt::Error>(())
    /// ```
    ///
    /// # Safety
    ///
    /// The pointer is valid only while `call` runs: it must not be kept, and `call` must
    /// not close the handle (`zookeeper_close`). The safe layer owns the handle's watcher
    /// and context and every completion context it made: `call` must not replace the
    /// watcher or the context (`zoo_set_watcher`, `zoo_set_context`) nor pass one of the
    /// safe layer's contexts to C. Requests sent with completions of the caller's own are
    /// allowed; their completions run on the C completion thread and must not block it,
    /// and they do not count towards [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT).
    pub unsafe fn with_raw_handle<R>(
        &self,
        call: impl FnOnce(*mut sys::zhandle_t) -> R,
    ) -> Result<R> {
        let client = self.client_key();
        self.with_handle(|zh| {
            let _inside = RawCall::enter(client);
            call(zh)
        })
    }
}
