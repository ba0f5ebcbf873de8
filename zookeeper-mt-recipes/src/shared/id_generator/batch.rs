//! A generator's local batch of reserved ids, and the turn to refill it: one caller at a
//! time refills (so callers of one generator never race each other's CAS), the others
//! wait for that refill without a thread, and a refill whose future is dropped hands the
//! turn on. A waiter whose future is dropped leaves no waker behind.

use crate::runtime::Wakers;
use parking_lot::Mutex;
use std::ops::Range;

/// The reserved ids a generator serves locally, and who refills them.
#[derive(Default)]
pub(super) struct Batch {
    state: Mutex<State>,
    /// The callers waiting for a refill (one entry per waiting future).
    waiting: Wakers,
}

#[derive(Debug, Default)]
struct State {
    /// Reserved ids not yet handed out.
    ids: Range<u64>,
    /// A caller is refilling the batch (its CAS may be in flight, its future pending
    /// anywhere): the others wait for it rather than race its CAS.
    refilling: bool,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("state", &*self.state.lock())
            .finish()
    }
}

impl State {
    fn take(&mut self) -> Option<u64> {
        let id = (!self.ids.is_empty()).then_some(self.ids.start)?;
        self.ids.start += 1;
        Some(id)
    }
}

impl Batch {
    /// Ids reserved and not yet handed out.
    pub(super) fn remaining(&self) -> u64 {
        let state = self.state.lock();
        state.ids.end - state.ids.start
    }

    /// The next id of the batch, if any is left (the fast path of `next_id`: no future).
    pub(super) fn take(&self) -> Option<u64> {
        self.state.lock().take()
    }

    /// Waits for an id from the batch, or for the turn to refill it while nobody else
    /// does.
    pub(super) async fn turn(&self) -> Turn<'_> {
        self.waiting
            .until(|| {
                let mut state = self.state.lock();
                if let Some(id) = state.take() {
                    return Some(Turn::Id(id));
                }
                if !state.refilling {
                    state.refilling = true;
                    return Some(Turn::Refill(Refilling(self)));
                }
                None
            })
            .await
    }

    /// How many waiting futures hold a waker (for tests).
    #[cfg(test)]
    pub(super) fn waiters(&self) -> usize {
        self.waiting.len()
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
pub(super) struct Refilling<'a>(&'a Batch);

impl Refilling<'_> {
    /// Installs the reserved `ids` and takes the first (the batch is empty: only the
    /// refilling caller fills it).
    pub(super) fn install(self, ids: Range<u64>) -> u64 {
        let id = {
            let mut state = self.0.state.lock();
            state.ids = ids;
            state.take()
        };
        // The turn ends here (with `self`), the lock released first.
        id.expect("a reservation holds at least one id")
    }
}

impl Drop for Refilling<'_> {
    fn drop(&mut self) {
        self.0.state.lock().refilling = false;
        self.0.waiting.wake_all();
    }
}
