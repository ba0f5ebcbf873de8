//! Threads on which the client never waits: the C completion thread (only it completes
//! requests and delivers events), the final sweep of a close, and the threads an
//! application marks as executor threads ([`mark_executor_thread`]), whose stall would
//! stall every task they run.

use std::cell::Cell;

thread_local! {
    static EXECUTOR: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as an async executor's thread: from now on the client never
/// waits on it. (A request made on a full handle needs no mark: on every thread it is
/// queued, not waited for, see the crate docs' "Backpressure".) A blocking wait (`ZkFuture::wait`, `Watch::wait`,
/// `SessionEvents::recv`, `wait_connected`) fails at once with `InvalidArgument` unless
/// its result is there; closing a handle there hands the close to the client's closer
/// thread. Await the futures instead. For a runtime's worker threads (tokio's
/// `on_thread_start`, for instance); the recipes mark their own driver thread.
pub fn mark_executor_thread() {
    EXECUTOR.with(|mark| mark.set(true));
}

/// Whether the client must not wait on this thread.
pub(crate) fn here() -> bool {
    crate::context::in_c_callback() || crate::closer::is_closing_here() || EXECUTOR.with(Cell::get)
}

/// Whether the client refuses to wait on this thread (the C completion thread, inside
/// a close's final sweep, a thread marked with [`mark_executor_thread`]): its blocking
/// waits fail there at once with `InvalidArgument`. For layers above the client (the
/// recipes) whose own blocking calls must refuse in the same places.
pub fn waiting_refused_here() -> bool {
    here()
}
