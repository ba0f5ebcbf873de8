//! The bound on requests in flight per handle.
//!
//! Every `zoo_a*` call writes one byte to the C client's wake-up pipe, which its IO thread
//! drains once per pass of its loop. When the pipe is full the C client closes its own
//! socket from the submitting thread (`nonblocking_send` → `close_zsock`), racing its IO
//! thread, and every request in flight fails. A pipe holds 65,536 bytes, but only 4,096
//! once the process is past its pipe-buffer soft limit (`/proc/sys/fs/pipe-user-pages-soft`,
//! reached with about a thousand handles). Bytes not yet drained never outnumber requests
//! not yet completed, so bounding the latter below 4,096 keeps the pipe from overflowing
//! whatever the IO thread's pace.
//!
//! A submit that finds no room waits until a completion makes some, up to the session
//! timeout (past which the C client would have declared the connection lost and failed
//! its requests anyway), then fails with `TooManyInFlight`. On the C completion thread it
//! fails at once: only that thread completes requests, so it must not wait for one.

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Requests in flight per handle at most (sent and not yet completed): below the
/// smallest wake-up pipe the C client can get (4,096 bytes), with room for the wake-ups it
/// writes for itself. A submit beyond it waits for room (see [`ZooKeeper`](crate::ZooKeeper)).
pub const MAX_IN_FLIGHT: usize = 4_000;

pub(crate) struct InFlight {
    count: AtomicUsize,
    limit: usize,
    /// Submitters waiting for room; a completion takes the lock only when there are some.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    room: Condvar,
    /// What the server's answers tell of its session clock (see `liveness.rs`).
    pub(crate) liveness: crate::liveness::Liveness,
}

/// One request's place in flight; freed when dropped (with its registry entry).
pub(crate) struct Permit(Arc<InFlight>);

impl InFlight {
    pub(crate) fn new(limit: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            count: AtomicUsize::new(0),
            limit,
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            room: Condvar::new(),
            liveness: Default::default(),
        })
    }

    fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut count = self.count.load(Ordering::SeqCst);
        while count < self.limit {
            match self.count.compare_exchange_weak(
                count,
                count + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Some(Permit(Arc::clone(self))),
                Err(now) => count = now,
            }
        }
        None
    }

    /// A place in flight, waiting for one until `deadline` (`None`: never wait).
    pub(crate) fn acquire(self: &Arc<Self>, deadline: Option<Instant>) -> Result<Permit> {
        if let Some(permit) = self.try_acquire() {
            return Ok(permit);
        }
        let full = Error::TooManyInFlight { limit: self.limit };
        let Some(deadline) = deadline else {
            return Err(full);
        };
        let mut guard = self.lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let acquired = loop {
            if let Some(permit) = self.try_acquire() {
                break Ok(permit);
            }
            if self.room.wait_until(&mut guard, deadline).timed_out() {
                break self.try_acquire().ok_or(full);
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        acquired
    }

    /// Requests in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

impl Permit {
    pub(crate) fn liveness(&self) -> &crate::liveness::Liveness {
        &self.0.liveness
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let in_flight = &self.0;
        in_flight.count.fetch_sub(1, Ordering::SeqCst);
        // A waiter registers under the lock before its last look at the count: either it
        // sees this release, or it is counted here and gets the notification.
        if in_flight.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = in_flight.lock.lock();
            in_flight.room.notify_one();
        }
    }
}
