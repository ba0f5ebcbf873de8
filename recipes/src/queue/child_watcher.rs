//! One child watch shared by every thread blocked on the same recipe value.

use super::*;

// ---------------------------------------------------------------------------------------
// One child watch shared by every thread blocked on the same recipe value.
// ---------------------------------------------------------------------------------------

pub(super) struct WatchState {
    /// A child watch is registered (possibly being waited on by a thread: `slot` empty).
    pub(super) armed: bool,
    /// A thread is registering one (outside the lock: that can take a reconnection).
    pub(super) arming: bool,
    /// The armed watch, when no thread is waiting on it.
    pub(super) slot: Option<Watch>,
    /// Bumped each time the armed watch fires.
    pub(super) epoch: u64,
}

/// One child watch on `path` at a time, shared by every thread of this process waiting
/// on it: a thread lists with [`list`](Self::list), which guarantees a watch registered no
/// later than the listing, and then waits with [`wait_change`](Self::wait_change) for any
/// change after it. One waiting thread receives from the watch; the others sleep on a
/// condition variable; whoever leaves hands the watch to the next. No wake-up can be lost
/// and no watch is registered twice. The lock is never held across a request, so a
/// thread riding out a lost connection blocks nobody past their own deadline.
pub(super) struct ChildWatcher {
    pub(super) path: String,
    /// For recreating the directory when it is missing.
    pub(super) nodes: NodeOptions,
    pub(super) state: Mutex<WatchState>,
    pub(super) changed: Condvar,
    pub(super) events: AtomicU64,
    pub(super) waiting: AtomicU64,
}

impl ChildWatcher {
    pub(super) fn new(path: &str) -> ChildWatcher {
        ChildWatcher {
            path: path.to_string(),
            nodes: NodeOptions::default(),
            state: Mutex::new(WatchState {
                armed: false,
                arming: false,
                slot: None,
                epoch: 0,
            }),
            changed: Condvar::new(),
            events: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    /// Threads in `wait_change` now.
    pub(super) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Removes the armed watch locally (on drop of its owner), so it does not stay
    /// registered until the next change.
    pub(super) fn disarm(&self, zk: &ZooKeeper) {
        if let Some(watch) = self.state.lock().slot.take() {
            let _ = zk.remove_watch(&watch);
        }
    }

    /// Watch events received so far.
    pub(super) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    pub(super) fn fired(
        &self,
        state: &mut WatchState,
        event: zookeeper::Result<WatchedEvent>,
    ) -> Result<()> {
        state.armed = false;
        state.slot = None;
        state.epoch += 1;
        self.changed.notify_all();
        let event = event?;
        self.events.fetch_add(1, Ordering::Relaxed);
        check_event(event).map(drop)
    }

    /// Lists the children; a child watch registered no later than this listing is armed
    /// when it returns. Returns the children and the epoch to pass to `wait_change`.
    /// `Err(Timeout)` if `deadline` passes while another thread is registering the watch.
    pub(super) fn list(
        &self,
        zk: &ZooKeeper,
        patience: Patience,
        deadline: Deadline,
    ) -> Result<(Vec<String>, u64)> {
        let mut state = self.state.lock();
        loop {
            if let Some(watch) = &state.slot {
                match watch.try_get() {
                    Ok(Some(event)) => self.fired(&mut state, Ok(event))?,
                    Ok(None) => {}
                    Err(error) => self.fired(&mut state, Err(error))?,
                }
            }
            if state.armed {
                // Still armed and not fired as far as anyone has seen, or being received
                // by a waiting thread, which bumps the epoch when it fires: either way a
                // change after this listing is noticed.
                let epoch = state.epoch;
                drop(state);
                let children = children_or_none(zk, &self.path, patience)?;
                return Ok((children, epoch));
            }
            if !state.arming {
                break;
            }
            // Another thread is registering the watch: wait for it (without the lock
            // held across its request), then look again.
            match deadline.instant() {
                None => self.changed.wait(&mut state),
                Some(at) => {
                    if self.changed.wait_until(&mut state, at).timed_out() {
                        return Err(RecipeError::Timeout);
                    }
                }
            }
        }
        // Register it ourselves; `arming` keeps a second registration out meanwhile.
        state.arming = true;
        drop(state);
        let listed = self.arm(zk, patience);
        let mut state = self.state.lock();
        state.arming = false;
        self.changed.notify_all();
        let (children, watch) = listed?;
        state.slot = Some(watch);
        state.armed = true;
        Ok((children, state.epoch))
    }

    /// Lists with a new child watch, recreating the directory if it is missing (a child
    /// watch needs the node; an empty directory costs nothing).
    pub(super) fn arm(&self, zk: &ZooKeeper, patience: Patience) -> Result<(Vec<String>, Watch)> {
        loop {
            match retry(zk, patience, || zk.get_children_watch(&self.path)) {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => {
                    ensure_dir(zk, &self.path, &self.nodes, patience)?
                }
                other => return other,
            }
        }
    }

    /// Waits until the watch armed at `epoch` fires (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`).
    pub(super) fn wait_change(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        counted_wait(&self.waiting, || self.wait_change_inner(epoch, deadline))
    }

    pub(super) fn wait_change_inner(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        let mut state = self.state.lock();
        loop {
            if state.epoch != epoch || !state.armed {
                return Ok(true);
            }
            if let Some(watch) = state.slot.take() {
                let result = MutexGuard::unlocked(&mut state, || wait_until(&watch, deadline));
                return match result {
                    Ok(Some(event)) => self.fired(&mut state, Ok(event)).map(|()| true),
                    Ok(None) => {
                        // Timed out: hand the still-armed watch to the next waiter.
                        state.slot = Some(watch);
                        self.changed.notify_all();
                        Ok(false)
                    }
                    Err(error) => self.fired(&mut state, Err(error)).map(|()| true),
                };
            }
            match deadline.instant() {
                None => self.changed.wait(&mut state),
                Some(deadline) => {
                    if self.changed.wait_until(&mut state, deadline).timed_out() {
                        return Ok(state.epoch != epoch);
                    }
                }
            }
        }
    }
}
