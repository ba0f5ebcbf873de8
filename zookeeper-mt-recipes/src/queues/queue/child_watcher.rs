//! One child watch shared by every caller waiting on the same recipe value.

use super::*;
use crate::runtime::{until, Wakers};
use crate::support::{reconnected, Counted};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// The registering listing in flight: owned by the shared state, not by a caller, so
/// whichever caller polls next drives it.
type Arming = Pin<Box<dyn Future<Output = Result<(Vec<String>, Watch)>> + Send>>;

/// A listing with the epoch of the watch armed no later than it.
type Listed = Result<(Vec<String>, u64)>;

pub(super) struct WatchState {
    /// A child watch is registered and not seen fired (in `slot`, or being polled by a
    /// caller this instant).
    armed: bool,
    /// A registering listing is in flight (in `arming`, or being polled this instant).
    registering: bool,
    arming: Option<Arming>,
    /// The armed watch (out of it only for the length of one caller's poll).
    slot: Option<Watch>,
    /// Bumped each time the armed watch fires.
    epoch: u64,
    /// Bumped at every change of this state a waiter may be waiting for.
    version: u64,
    /// The session generation the armed watch belongs to (a managed client's sessions
    /// follow each other; a watch of an ended session never fires).
    generation: u64,
}

/// Wakes every waiting caller: the waker the shared registration and watch are polled
/// with, so whatever they do reaches every caller, whichever of them polled last.
struct WakeAll(Wakers);

impl Wake for WakeAll {
    fn wake(self: Arc<Self>) {
        self.0.wake_all();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wake_all();
    }
}

/// One child watch on `path` at a time, shared by every caller of this process waiting
/// on it: a caller lists with [`list_async`](Self::list_async), which guarantees a watch
/// registered no later than the listing, and then waits with
/// [`wait_change_async`](Self::wait_change_async) for any change after it.
///
/// The registering listing and the armed watch belong to the shared state, not to one
/// caller's future: every waiting caller polls them (with a waker that wakes all
/// waiters) and whoever sees one finish records it for all. So no caller depends on
/// another caller's future being polled: one left alive but unpolled (its task busy
/// elsewhere) holds up nobody. No wake-up can be lost and no watch is registered twice.
/// The lock is never held across a request, an await or a poll of the shared futures;
/// a caller waits for a registration riding out a lost connection only up to its own
/// deadline. A waiter's waker is dropped with its future. The blocking forms drive the
/// same futures.
pub(super) struct ChildWatcher {
    pub(super) path: String,
    /// For recreating the directory when it is missing.
    pub(super) nodes: NodeOptions,
    state: Mutex<WatchState>,
    /// The callers waiting for a change of `state`, one waker each (removed on drop).
    waiters: Arc<WakeAll>,
    /// Wakes every waiter: what the shared registration and watch are polled with.
    wake_all: Waker,
    pub(super) events: AtomicU64,
    pub(super) waiting: AtomicU64,
}

impl ChildWatcher {
    pub(super) fn new(path: &str) -> ChildWatcher {
        let waiters = Arc::new(WakeAll(Wakers::default()));
        ChildWatcher {
            path: path.to_string(),
            nodes: NodeOptions::default(),
            state: Mutex::new(WatchState {
                armed: false,
                registering: false,
                arming: None,
                slot: None,
                epoch: 0,
                version: 0,
                generation: 0,
            }),
            wake_all: Waker::from(Arc::clone(&waiters)),
            waiters,
            events: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
        }
    }

    /// Callers in `wait_change` now.
    pub(super) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Removes the armed watch locally (on drop of its owner), so it does not stay
    /// registered until the next change; a registration in flight goes with it (one
    /// already answered has its watch removed too).
    pub(super) fn disarm(&self, zk: &ZooKeeper) {
        let (watch, arming) = {
            let mut state = self.state.lock();
            (state.slot.take(), state.arming.take())
        };
        if let Some(watch) = watch {
            let _ = zk.remove_watch(&watch);
        }
        if let Some(mut arming) = arming {
            let mut cx = Context::from_waker(crate::runtime::noop_waker());
            if let Poll::Ready(Ok((_, watch))) = arming.as_mut().poll(&mut cx) {
                let _ = zk.remove_watch(&watch);
            }
        }
    }

    /// Watch events received so far.
    pub(super) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Records a change: every waiter is to look again once the lock is released
    /// ([`wake`](Self::wake)).
    fn changed(state: &mut WatchState) {
        state.version += 1;
    }

    /// Wakes every waiter (outside the state lock: a waker runs executor code).
    fn wake(&self) {
        self.waiters.0.wake_all();
    }

    fn fired(
        &self,
        state: &mut WatchState,
        event: zookeeper_mt::Result<WatchedEvent>,
    ) -> Result<()> {
        state.armed = false;
        state.slot = None;
        state.epoch += 1;
        Self::changed(state);
        event.map_err(RecipeError::from).and_then(|event| {
            self.events.fetch_add(1, Ordering::Relaxed);
            check_event(event).map(drop)
        })
    }

    /// Lists the children; a child watch registered no later than this listing is armed
    /// when it returns. Returns the children and the epoch to pass to `wait_change`.
    /// `Err(Timeout)` if `deadline` passes while the watch is being registered.
    pub(super) async fn list_async(
        &self,
        session: &ManagedSession,
        patience: Patience,
        deadline: Deadline,
    ) -> Listed {
        /// What a look at the state decided, made with the lock held.
        enum Next {
            /// The watch is armed: list, at this epoch.
            List(u64),
            /// It is being registered: drive that until the state changes after this
            /// version.
            Register(u64),
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
                    // The armed watch (if any) belongs to an ended session, and so does a
                    // registration in flight: as if it fired, every waiter looks again,
                    // on its own session.
                    state.generation = session.generation;
                    state.registering = false;
                    let stale = state.arming.take();
                    let _ = self.fired(&mut state, Err(Error::SessionExpired));
                    drop(state);
                    drop(stale);
                    self.wake();
                    continue;
                }
                let looked = state.slot.as_ref().map(Watch::try_get);
                let fired = match looked {
                    Some(Ok(Some(event))) => Some(self.fired(&mut state, Ok(event))),
                    Some(Err(error)) => Some(self.fired(&mut state, Err(error))),
                    _ => None,
                };
                if let Some(outcome) = fired {
                    drop(state);
                    self.wake();
                    outcome?;
                    continue;
                }
                if state.armed {
                    // Still armed and not fired as far as anyone has seen, or being
                    // polled by a waiting caller, which bumps the epoch when it fires:
                    // either way a change after this listing is noticed.
                    Next::List(state.epoch)
                } else {
                    if !state.registering {
                        // Not this caller's: any caller polls it (its own deadline is not
                        // the registration's).
                        let patience = patience.before(Deadline::never());
                        state.arming = Some(self.arming(zk.clone(), patience));
                        state.registering = true;
                    }
                    Next::Register(state.version)
                }
            };
            match next {
                Next::List(epoch) => {
                    let children = children_or_none_async(zk, &self.path, patience).await?;
                    return Ok((children, epoch));
                }
                Next::Register(seen) => {
                    let registered = self.waiters.0.until(|| self.poll_arming(seen));
                    match until(deadline, registered).await {
                        None => return Err(RecipeError::Timeout),
                        // This caller saw the registration finish: its listing is ours.
                        Some(Some(listed)) => return listed,
                        Some(None) => {} // the state changed: look again
                    }
                }
            }
        }
    }

    /// Polls the registration in flight (`None`: nothing new yet, the caller is woken by
    /// the next change). `Some(None)`: the state changed after `seen`, look again;
    /// `Some(Some(_))`: this poll finished the registration, with its listing.
    fn poll_arming(&self, seen: u64) -> Option<Option<Listed>> {
        let (mut arming, generation) = {
            let mut state = self.state.lock();
            if state.version != seen {
                return Some(None);
            }
            // Out while another caller polls it: that caller records what it finds (and
            // the registration wakes every waiter as it progresses).
            (state.arming.take()?, state.generation)
        };
        let mut cx = Context::from_waker(&self.wake_all);
        let polled = arming.as_mut().poll(&mut cx);
        let mut state = self.state.lock();
        if state.generation != generation {
            // A newer session retired it meanwhile.
            drop(state);
            drop(arming);
            return Some(None);
        }
        let Poll::Ready(listed) = polled else {
            state.arming = Some(arming);
            return None;
        };
        state.registering = false;
        Self::changed(&mut state);
        let listed = listed.map(|(children, watch)| {
            state.slot = Some(watch);
            state.armed = true;
            (children, state.epoch)
        });
        drop(state);
        self.wake();
        Some(Some(listed))
    }

    /// A listing with a new child watch, recreating the directory if it is missing (a
    /// child watch needs the node; an empty directory costs nothing).
    fn arming(&self, zk: ZooKeeper, patience: Patience) -> Arming {
        let (path, nodes) = (self.path.clone(), self.nodes.clone());
        Box::pin(async move {
            let mut attempt = 0;
            loop {
                match zk.get_children_watch_async(&path).await {
                    Ok(listed) => return Ok(listed),
                    // Rare: never created, or an empty container the server removed.
                    Err(Error::NoNode) => ensure_dir_async(&zk, &path, &nodes, patience).await?,
                    Err(error) if error.is_retryable() => {
                        attempt += 1;
                        reconnected(&zk, patience, attempt).await?;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        })
    }

    /// Waits until the watch armed at `epoch` fires (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`). Dropping the future leaves nothing behind.
    pub(super) async fn wait_change_async(&self, epoch: u64, deadline: Deadline) -> Result<bool> {
        let _counted = Counted::new(&self.waiting);
        match until(deadline, self.waiters.0.until(|| self.poll_watch(epoch))).await {
            Some(outcome) => outcome,
            None => Ok(self.state.lock().epoch != epoch),
        }
    }

    /// Polls the watch armed at `epoch` (`None`: not fired yet, the caller is woken when
    /// it fires); `Some` once it has fired (the error this poll saw it fire with, if any).
    fn poll_watch(&self, epoch: u64) -> Option<Result<bool>> {
        let mut watch = {
            let mut state = self.state.lock();
            if state.epoch != epoch || !state.armed {
                return Some(Ok(true));
            }
            // Out while another caller polls it (that caller records a firing).
            state.slot.take()?
        };
        let mut cx = Context::from_waker(&self.wake_all);
        let polled = Pin::new(&mut watch).poll(&mut cx);
        let mut state = self.state.lock();
        if state.epoch != epoch {
            // A newer session retired this watch meanwhile.
            drop(state);
            drop(watch);
            return Some(Ok(true));
        }
        let Poll::Ready(event) = polled else {
            state.slot = Some(watch);
            return None;
        };
        let outcome = self.fired(&mut state, event);
        drop(state);
        self.wake();
        Some(outcome.map(|()| true))
    }
}
