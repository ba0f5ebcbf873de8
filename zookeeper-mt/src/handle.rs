//! The C handle behind its close lock, shared by the handle's clones, its watch table
//! and the closer thread: calls hold the read lock while in C, close takes the write
//! lock, and a close decided on a thread that may not wait shuts calls out at once.

use parking_lot::{RwLock, RwLockReadGuard};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use zookeeper_mt_sys as sys;

/// The C handle. `zhandle_t` is thread-safe in the multi-threaded C client; what is not
/// safe is closing it while another call runs, which the `RwLock` in [`HandleCell`] prevents.
#[derive(Clone, Copy)]
pub(crate) struct RawHandle(pub(crate) NonNull<sys::zhandle_t>);

// SAFETY: the mt C client serializes access to its handle internally; the only unsafe
// concurrency (close vs. any call) is excluded by the RwLock that holds this value.
unsafe impl Send for RawHandle {}
// SAFETY: as above.
unsafe impl Sync for RawHandle {}

/// The C handle behind its close lock: `None` once closed. Calls hold the read lock for
/// the duration of their C call; close takes the write lock, so close never races a
/// call. Shared with the watch table, which releases C watch registrations without
/// keeping the session open.
pub(crate) type HandleSlot = Arc<HandleCell>;

pub(crate) struct HandleCell {
    handle: RwLock<Option<RawHandle>>,
    /// Set when a close is decided, before the handle leaves its slot: a close handed to
    /// the closer thread returns at once, and calls made after it must fail already.
    closing: AtomicBool,
}

impl HandleCell {
    pub(crate) fn new(handle: RawHandle) -> HandleSlot {
        Arc::new(HandleCell {
            handle: RwLock::new(Some(handle)),
            closing: AtomicBool::new(false),
        })
    }

    /// The live handle, read-locked, unless a close has started (never waits: the only
    /// writer is close).
    pub(crate) fn try_read(&self) -> Option<RwLockReadGuard<'_, Option<RawHandle>>> {
        if self.closing.load(Ordering::SeqCst) {
            return None;
        }
        self.handle.try_read()
    }

    /// Whether a close has been decided.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Decides the close: from now on no call gets the handle.
    pub(crate) fn start_closing(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Takes the handle out of its slot once the calls in C have left (close only).
    pub(crate) fn take(&self) -> Option<RawHandle> {
        self.start_closing();
        self.handle.write().take()
    }
}

/// Runs `call` with the live handle if the close lock can be had right now (never
/// waits: the only writer is close); `None` while closing or once closed.
pub(crate) fn with_slot<R>(
    slot: &HandleSlot,
    call: impl FnOnce(*mut sys::zhandle_t) -> R,
) -> Option<R> {
    let guard = slot.try_read()?;
    let handle = (*guard)?;
    Some(call(handle.0.as_ptr()))
}
