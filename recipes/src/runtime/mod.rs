//! The recipes' one core (crate-internal): every recipe step is async code over the
//! client's futures and watches, and the blocking calls drive those same futures on the
//! caller's thread ([`block_on`]), parked until a reply, a watch or a timer wakes them.
//!
//! No runtime dependency: timers are served by one process-wide thread ([`timer`]), which
//! ends when no timer is pending; everything else is woken by the client's completion
//! thread. A pending recipe call therefore costs no thread of its own, whichever way it
//! is waited for.
//!
//! Cancellation: every await point is one. A step that starts something that outlives a
//! dropped future (a node, a claim) withdraws it in its `Drop` (see the recipes).

mod block;
pub(crate) mod timer;

pub(crate) use block::block_on;
pub(crate) use timer::{sleep_for, until};
