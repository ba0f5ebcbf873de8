//! One child watch shared by every caller waiting on the same recipe value.

use super::*;
use crate::runtime::until;
use crate::support::{reconnected, Counted};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

pub(super) struct WatchState {
    /// A child watch is registered (possibly being waited on by a caller: `slot` empty).
    pub(super) armed: bool,
    /// A caller is registering one (outside the lock: that can take a reconnection).
    pub(super) arming: bool,
    /// The armed watch, when no caller is waiting on it.
    pub(super) slot: Option<Watch>,
    /// Bumped each time the armed watch fires.
    pub(super) epoch: u64,
    /// Bumped at every change of this state a waiter may be waiting for.
    version: u64,
    /// The session generation the armed watch belongs to (a managed client's sessions
    /// follow each other; a watch of an ended session never fires).
    generation: u64,
    /// Callers waiting for the next change.
    wakers: Vec<Waker>,
}

/// One child watch on `path` at a time, shared by every caller of this process waiting
/// on it: a caller lists with [`list_async`](Self::list_async), which guarantees a watch
/// registered no later than the listing, and then waits with
/// [`wait_change_async`](Self::wait_change_async) for any change after it. One waiting
/// caller receives from the watch; the others wait for the state to change; whoever
/// leaves (timed out or dropped) hands the watch to the next. No wake-up can be lost and
/// no watch is registered twice. The lock is never held across a request or an await,
/// so a caller riding out a lost connection blocks nobody past their own deadline. The
/// blocking forms drive the same futures.
pub(super) struct ChildWatcher {
    pub(super) path: String,
    /// For recreating the directory when it is missing.
    pub(super) nodes: NodeOptions,
    pub(super) state: Mutex<WatchState>,
    pub(super) events: AtomicU64,
    pub(super) waiting: AtomicU64,
}

/// Wakers to call once the state lock is released (they are executor code).
type ToWake = Vec<Waker>;

fn wake_all(wakers: ToWake) {
    wakers.into_iter().for_each(Waker::wake);
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
                version: 0,
                generation: 0,
                wakers: Vec::new(),
            }),
            events: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    /// Callers in `wait_change` now.
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

    /// Records a change: every waiter is to look again.
    fn changed(state: &mut WatchState) -> ToWake {
        state.version += 1;
        std::mem::take(&mut state.wakers)
    }

    fn fired(
        &self,
        state: &mut WatchState,
        event: zookeeper_mt::Result<WatchedEvent>,
    ) -> (Result<()>, ToWake) {
        state.armed = false;
        state.slot = None;
        state.epoch += 1;
        let to_wake = Self::changed(state);
        let outcome = event.map_err(RecipeError::from).and_then(|event| {
            self.events.fetch_add(1, Ordering::Relaxed);
            check_event(event).map(drop)
        });
        (outcome, to_wake)
    }

    /// Completes at the next change of the state after `seen`.
    fn next_change(&self, seen: u64) -> NextChange<'_> {
        NextChange {
            watcher: self,
            seen,
        }
    }

    /// Lists the children; a child watch registered no later than this listing is armed
    /// when it returns. Returns the children and the epoch to pass to `wait_change`.
    /// `Err(Timeout)` if `deadline` passes while another caller is registering the watch.
    pub(super) async fn list_async(
        &self,
        session: &ManagedSession,
        patience: Patience,
        deadline: Deadline,
    ) -> Result<(Vec<String>, u64)> {
        /// What a look at the state decided, made with the lock held.
        enum Next {
            /// The watch is armed: list, at this epoch.
            List(u64),
            /// Nobody registers it: we do.
            Arm,
            /// Another caller is registering it: wait for the state to change.
            Wait(u64),
        }
        let zk = &session.zk;
        loop {
            let next = {
                let mut state = self.state.lock();
                if session.generation < state.generation {
                    // A later session has replaced this caller's: it has ended.
                    return Err(RecipeError::ZooKeeper(Error::SessionExpired));
                }
                if session.generation > state.generation {
                    // The armed watch (if any) belongs to an ended session: as if it
                    // fired, every waiter looks again, on its own session.
                    state.generation = session.generation;
                    let (_, to_wake) = self.fired(&mut state, Err(Error::SessionExpired));
                    drop(state);
                    wake_all(to_wake);
                    continue;
                }
                let looked = state.slot.as_ref().map(Watch::try_get);
                let fired = match looked {
                    Some(Ok(Some(event))) => Some(self.fired(&mut state, Ok(event))),
                    Some(Err(error)) => Some(self.fired(&mut state, Err(error))),
                    _ => None,
                };
                if let Some((outcome, to_wake)) = fired {
                    drop(state);
                    wake_all(to_wake);
                    outcome?;
                    continue;
                }
                if state.armed {
                    // Still armed and not fired as far as anyone has seen, or being
                    // received by a waiting caller, which bumps the epoch when it fires:
                    // either way a change after this listing is noticed.
                    Next::List(state.epoch)
                } else if !state.arming {
                    // `arming` keeps a second registration out meanwhile.
                    state.arming = true;
                    Next::Arm
                } else {
                    Next::Wait(state.version)
                }
            };
            match next {
                Next::List(epoch) => {
                    let children = children_or_none_async(zk, &self.path, patience).await?;
                    return Ok((children, epoch));
                }
                Next::Arm => break,
                Next::Wait(seen) => {
                    if until(deadline, self.next_change(seen)).await.is_none() {
                        return Err(RecipeError::Timeout);
                    }
                }
            }
        }
        let mut arming = Arming {
            watcher: self,
            registering: true,
        };
        let listed = self.arm(zk, patience).await;
        arming.registering = false;
        let mut state = self.state.lock();
        state.arming = false;
        let to_wake = Self::changed(&mut state);
        let outcome = listed.map(|(children, watch)| {
            state.slot = Some(watch);
            state.armed = true;
            (children, state.epoch)
        });
        drop(state);
        wake_all(to_wake);
        outcome
    }

    /// Lists with a new child watch, recreating the directory if it is missing (a child
    /// watch needs the node; an empty directory costs nothing).
    async fn arm(&self, zk: &ZooKeeper, patience: Patience) -> Result<(Vec<String>, Watch)> {
        let mut attempt = 0;
        loop {
            match zk.get_children_watch_async(&self.path).await {
                Ok(listed) => return Ok(listed),
                // Rare: never created, or an empty container the server removed.
                Err(Error::NoNode) => {
                    ensure_dir_async(zk, &self.path, &self.nodes, patience).await?
                }
                Err(error) if error.is_retryable() => {
                    attempt += 1;
                    reconnected(zk, patience, attempt).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Waits until the watch armed at `epoch` fires (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`). Dropping the future hands the watch to the next waiter.
    pub(super) async fn wait_change_async(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        let _counted = Counted::new(&self.waiting);
        loop {
            let (watch, seen) = {
                let mut state = self.state.lock();
                if state.epoch != epoch || !state.armed {
                    return Ok(true);
                }
                (state.slot.take(), state.version)
            };
            if let Some(watch) = watch {
                return self.receive(watch, epoch, deadline).await;
            }
            if until(deadline, self.next_change(seen)).await.is_none() {
                return Ok(self.state.lock().epoch != epoch);
            }
        }
    }

    /// Waits on the armed watch (taken out of the slot) until it fires or `deadline`.
    async fn receive(&self, watch: Watch, epoch: u64, deadline: Deadline) -> Result<bool> {
        let mut holder = Holding {
            watcher: self,
            watch: Some(watch),
            epoch,
        };
        let fired = until(deadline, holder.watch.as_mut().expect("held")).await;
        let mut state = self.state.lock();
        match fired {
            Some(_) if state.epoch != epoch => {
                // A newer session retired this watch (its expiry is what fired): the
                // state is that session's now, and may hold its armed watch. Look again.
                holder.watch = None;
                Ok(true)
            }
            Some(event) => {
                holder.watch = None;
                let (outcome, to_wake) = self.fired(&mut state, event);
                drop(state);
                wake_all(to_wake);
                outcome.map(|()| true)
            }
            None => {
                // Timed out: the still-armed watch goes back for the next waiter (unless
                // a new session replaced it meanwhile).
                let watch = holder.watch.take();
                if state.epoch == epoch {
                    state.slot = watch;
                }
                let to_wake = Self::changed(&mut state);
                drop(state);
                wake_all(to_wake);
                Ok(false)
            }
        }
    }
}

/// Clears `arming` if the registering future is dropped, so other callers register.
struct Arming<'a> {
    watcher: &'a ChildWatcher,
    registering: bool,
}

impl Drop for Arming<'_> {
    fn drop(&mut self) {
        if !self.registering {
            return;
        }
        let mut state = self.watcher.state.lock();
        state.arming = false;
        let to_wake = ChildWatcher::changed(&mut state);
        drop(state);
        wake_all(to_wake);
    }
}

/// The armed watch while one caller waits on it: put back for the next waiter if that
/// caller's future is dropped.
struct Holding<'a> {
    watcher: &'a ChildWatcher,
    watch: Option<Watch>,
    /// The epoch the watch was armed at.
    epoch: u64,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            let mut state = self.watcher.state.lock();
            if state.epoch == self.epoch {
                state.slot = Some(watch);
            }
            let to_wake = ChildWatcher::changed(&mut state);
            drop(state);
            wake_all(to_wake);
        }
    }
}

/// The future of [`ChildWatcher::next_change`].
struct NextChange<'a> {
    watcher: &'a ChildWatcher,
    seen: u64,
}

impl Future for NextChange<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.watcher.state.lock();
        if state.version != self.seen {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
