//! The recipes' one core (crate-internal): every recipe step is async code over the
//! client's futures and watches, and the blocking calls drive those same futures on the
//! caller's thread ([`block_on`]), parked until a reply, a watch or a timer wakes them.
//!
//! No runtime dependency: timers are served by one process-wide thread ([`timer`]), which
//! ends when no timer is pending; everything else is woken by the client's completion
//! thread. A pending recipe call therefore costs no thread of its own, whichever way it
//! is waited for. Background work (followers, settling what a dropped future left in
//! flight) runs as tasks on one process-wide thread, the [`driver`].
//!
//! Cancellation: every await point is one. A step that starts something that outlives a
//! dropped future (a node, a claim) withdraws it in its `Drop` (see the recipes).

mod block;
pub(crate) mod driver;
pub(crate) mod timer;
mod wakers;

pub(crate) use block::{block_on, drive, refused_here, REFUSED};
pub(crate) use driver::{spawn, spawn_detached, StopSignal, Task};
pub(crate) use timer::{sleep_for, until};
pub(crate) use wakers::Wakers;

/// A waker that does nothing, for looking at a pollable source without waiting on it
/// (`Waker::noop` needs a newer Rust than the crate's minimum).
pub(crate) fn noop_waker() -> &'static std::task::Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    // The `Arc` is kept beside its waker so that the allocation stays visibly reachable
    // (a zero-sized value's waker points at its end, which leak checkers do not count).
    static NOOP: std::sync::OnceLock<(std::sync::Arc<Noop>, std::task::Waker)> =
        std::sync::OnceLock::new();
    &NOOP
        .get_or_init(|| {
            let noop = std::sync::Arc::new(Noop);
            (std::sync::Arc::clone(&noop), std::task::Waker::from(noop))
        })
        .1
}
