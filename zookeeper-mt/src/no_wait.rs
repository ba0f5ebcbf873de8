//! Threads on which the client never waits: the C completion thread (only it completes
//! requests and delivers events), the final sweep of a close, and the threads a layer
//! above marks with [`refuse_waits_on_this_thread`] (the recipes' driver), whose stall
//! would stall every task they run.

use std::cell::Cell;

thread_local! {
    static EXECUTOR: Cell<bool> = const { Cell::new(false) };
}

/// Formerly marked the calling thread as an async executor's thread; now does nothing.
///
/// No thread needs marking: on every thread a request made on a full handle is queued,
/// not waited for (see the crate docs' "Backpressure"), the drops of futures, watches,
/// followers and guards hand unfinished work to the background and return, and
/// [`ZooKeeper::close_async`](crate::ZooKeeper::close_async) closes without waiting.
/// Blocking calls (`wait`, `recv`, `close`) block the calling thread on every thread the
/// application owns, as blocking calls do; in async code, await the futures instead.
#[deprecated(
    since = "0.1.0",
    note = "no longer needed: async paths never block on any thread; await the futures"
)]
pub fn mark_executor_thread() {}

/// Makes the client refuse to wait on the calling thread, for good: a blocking wait
/// whose result is not there fails at once with `InvalidArgument`, and a close there is
/// handed to the closer thread. For threads that run other work's progress (the recipes'
/// driver thread), where a wait would stall everything they run; not for applications.
#[doc(hidden)]
pub fn refuse_waits_on_this_thread() {
    EXECUTOR.with(|mark| mark.set(true));
}

/// Whether the client must not wait on this thread.
pub(crate) fn here() -> bool {
    crate::context::in_c_callback() || crate::closer::is_closing_here() || EXECUTOR.with(Cell::get)
}

/// Whether the client refuses to wait on this thread (the C completion thread, inside
/// a close's final sweep, the recipes' driver thread): its blocking
/// waits fail there at once with `InvalidArgument`. For layers above the client (the
/// recipes) whose own blocking calls must refuse in the same places.
pub fn waiting_refused_here() -> bool {
    here()
}
