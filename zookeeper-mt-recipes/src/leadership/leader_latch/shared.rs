//! What the latch's task shares with the latch's owner, and waiting for it to change
//! without a thread.

use super::*;

/// What the latch's task shares with the latch's owner.
pub(super) struct Shared {
    pub(super) state: Mutex<SharedState>,
    pub(super) wakeups: AtomicU64,
    pub(super) armed: AtomicUsize,
    /// Ids of [`StateWaiter`]s.
    pub(super) next_waiter: AtomicU64,
}

pub(super) struct SharedState {
    pub(super) status: LatchStatus,
    pub(super) term: Option<Arc<Term>>,
    pub(super) node: Option<String>,
    pub(super) end: Option<RecipeError>,
    /// Who waits for a change of the above (by [`StateWaiter`] id).
    pub(super) waiters: HashMap<u64, Waker>,
}

impl Shared {
    pub(super) fn new() -> Shared {
        Shared {
            state: Mutex::new(SharedState {
                status: LatchStatus::Joining,
                term: None,
                node: None,
                end: None,
                waiters: HashMap::new(),
            }),
            wakeups: AtomicU64::new(0),
            armed: AtomicUsize::new(0),
            next_waiter: AtomicU64::new(0),
        }
    }

    /// After a change of the state: wakes who waits for one.
    pub(super) fn notify(&self) {
        let waiters = std::mem::take(&mut self.state.lock().waiters);
        waiters.into_values().for_each(Waker::wake);
    }
}

/// A wait for a change of the latch's state; its registration goes with it.
pub(super) struct StateWaiter<'a> {
    shared: &'a Shared,
    id: u64,
}

impl<'a> StateWaiter<'a> {
    pub(super) fn new(shared: &'a Shared) -> Self {
        let id = shared.next_waiter.fetch_add(1, Ordering::Relaxed);
        StateWaiter { shared, id }
    }

    /// Registers `cx` for the next change; `state` is the locked state just looked at,
    /// so no change can fall between the look and the registration.
    pub(super) fn register(&self, state: &mut SharedState, cx: &mut Context<'_>) {
        match state.waiters.get_mut(&self.id) {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                state.waiters.insert(self.id, cx.waker().clone());
            }
        }
    }
}

impl Drop for StateWaiter<'_> {
    fn drop(&mut self) {
        self.shared.state.lock().waiters.remove(&self.id);
    }
}

/// Blocking calls wait for the latch's task, which runs on the driver thread: there
/// they would wait forever (or stall every task), so they fail instead.
pub(super) fn refuse_on_driver() -> Result<()> {
    if on_driver_thread() {
        return Err(RecipeError::InvalidArgument(
            "a blocking latch call cannot run on the recipes' driver thread; use its async form",
        ));
    }
    Ok(())
}
