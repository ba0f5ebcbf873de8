//! A generator's local batch of reserved ids, and the turn to refill it: one caller at a
//! time refills (so callers of one generator never race each other's CAS), the others
//! wait for that refill without a thread, and a refill whose future is dropped hands the
//! turn on.

use parking_lot::Mutex;
use std::ops::Range;
use std::task::{Poll, Waker};

/// The reserved ids a generator serves locally, and who refills them.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Reserved ids not yet handed out.
    ids: Range<u64>,
    /// A caller is refilling the batch (its CAS may be in flight, its future pending
    /// anywhere): the others wait for it rather than race its CAS.
    refilling: bool,
    /// The callers waiting for that refill.
    waiting: Vec<Waker>,
}

impl Batch {
    /// Ids reserved and not yet handed out.
    pub(super) fn remaining(&self) -> u64 {
        self.ids.end - self.ids.start
    }

    /// The next id of the batch, if any is left (the fast path of `next_id`: no future).
    pub(super) fn take(&mut self) -> Option<u64> {
        let id = (!self.ids.is_empty()).then_some(self.ids.start)?;
        self.ids.start += 1;
        Some(id)
    }
}

/// What a `next_id` caller gets its turn for.
pub(super) enum Turn<'a> {
    /// An id from the batch.
    Id(u64),
    /// The batch is empty and this caller refills it.
    Refill(Refilling<'a>),
}

/// The turn of the caller refilling a generator's batch: ends when dropped (also with
/// the caller's future: its range, if reserved, is skipped), waking the callers waiting.
pub(super) struct Refilling<'a>(&'a Mutex<Batch>);

impl Refilling<'_> {
    /// Installs the reserved `ids` and takes the first (the batch is empty: only the
    /// refilling caller fills it).
    pub(super) fn install(self, ids: Range<u64>) -> u64 {
        let id = {
            let mut batch = self.0.lock();
            batch.ids = ids;
            batch.take()
        };
        // The turn ends here (with `self`), the lock released first.
        id.expect("a reservation holds at least one id")
    }
}

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        let waiting = {
            let mut batch = self.0.lock();
            batch.refilling = false;
            std::mem::take(&mut batch.waiting)
        };
        waiting.into_iter().for_each(Waker::wake);
    }
}

/// Waits for an id from `batch`, or for the turn to refill it while nobody else does.
pub(super) async fn turn(batch: &Mutex<Batch>) -> Turn<'_> {
    std::future::poll_fn(|cx| {
        let mut state = batch.lock();
        if let Some(id) = state.take() {
            return Poll::Ready(Turn::Id(id));
        }
        if !state.refilling {
            state.refilling = true;
            return Poll::Ready(Turn::Refill(Refilling(batch)));
        }
        if !state.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            state.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    })
    .await
}
