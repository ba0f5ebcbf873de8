//! Waiting on watches, and the background worker for cleanup.

use super::*;

// ---------------------------------------------------------------------------------------
// Watches.
// ---------------------------------------------------------------------------------------

/// The error a terminal session state stands for.
pub(crate) fn session_error(state: SessionState) -> RecipeError {
    RecipeError::ZooKeeper(match state {
        SessionState::AuthFailed => Error::AuthFailed,
        SessionState::Closed => Error::Closed,
        _ => Error::SessionExpired,
    })
}

/// Passes a watch event on, unless it reports the end of the session: then its error.
pub(crate) fn check_event(event: WatchedEvent) -> Result<WatchedEvent> {
    if event.event_type == EventType::Session && event.state.is_terminal() {
        return Err(session_error(event.state));
    }
    Ok(event)
}

/// Takes a watch nobody waits for any more off this client, so it does not stay
/// registered until its node changes. Local removal: works while disconnected too; the
/// server's copy then fires into nothing. Failing means it has fired or gone already.
pub(crate) fn withdraw_watch(zk: &ZooKeeper, watch: &Watch) {
    let _ = zk.remove_watch(watch);
}

/// How a [`wait_for_change_async`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeWait {
    /// The watch fired: a wake-up.
    Fired,
    /// Nothing was waited for: the node was gone already, or the connection dropped
    /// (and came back). Look again.
    LookAgain,
    /// The deadline came first (the watch was taken off again).
    TimedOut,
}

/// Sets a data watch on `path` with `get` and returns the node's data and stat with it;
/// `Ok(None)` if the node is gone (nothing is registered then) or the connection dropped
/// and came back within `patience` (look again). `get`, not `exists`: on a node that is
/// already gone `exists` would leave a creation watch behind forever.
pub(crate) async fn watch_node(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
) -> Result<Option<(Vec<u8>, Stat, Watch)>> {
    match zk.get_watch_async(path).await {
        Ok(found) => Ok(Some(found)),
        Err(Error::NoNode) => Ok(None),
        Err(error) if error.is_retryable() => {
            reconnected(zk, patience, 1).await?;
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

/// Counts a wait in a recipe's "waiting now" gauge while it lives (also when the
/// waiting future is dropped).
pub(crate) struct Counted<'a>(&'a AtomicU64);

impl<'a> Counted<'a> {
    pub(crate) fn new(waiting: &'a AtomicU64) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        Counted(waiting)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits until the node at `path` (e.g. a predecessor in a line) changes or goes, or the
/// deadline of `patience` passes, counted in `waiting`. A wait that times out or is
/// dropped leaves nothing registered: the watch's registration is released with it, and
/// taken off the client on a timeout.
pub(crate) async fn wait_for_change_async(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
    waiting: &AtomicU64,
) -> Result<NodeWait> {
    let Some((_, _, mut watch)) = watch_node(zk, path, patience).await? else {
        return Ok(NodeWait::LookAgain);
    };
    match await_watch_async(zk, &mut watch, patience.deadline, waiting).await? {
        Some(_) => Ok(NodeWait::Fired),
        None => Ok(NodeWait::TimedOut),
    }
}

/// Waits for `watch` until `deadline`, counted in `waiting`: `Ok(Some(event))` once it
/// fired (the end of the session is its error), `Ok(None)` when the deadline came first,
/// and then the watch has been withdrawn ([`withdraw_watch`]).
///
/// A dropped future takes the watch off the client as a timed-out wait does, so
/// nothing stays registered until the node changes.
pub(crate) async fn await_watch_async(
    zk: &ZooKeeper,
    watch: &mut Watch,
    deadline: Deadline,
    waiting: &AtomicU64,
) -> Result<Option<WatchedEvent>> {
    let counted = Counted::new(waiting);
    let mut armed = Withdraw {
        zk,
        watch: Some(watch),
    };
    let fired = match armed.watch.as_deref_mut() {
        Some(watch) => until(deadline, watch).await,
        None => unreachable!("armed above"),
    };
    let watch = armed.watch.take().expect("armed until here");
    drop(counted);
    match fired {
        Some(event) => check_event(event?).map(Some),
        None => {
            withdraw_watch(zk, watch);
            Ok(None)
        }
    }
}

/// Withdraws a watch that is being waited for when the wait is dropped.
struct Withdraw<'a> {
    zk: &'a ZooKeeper,
    /// Taken out when the wait is over (nothing to withdraw then).
    watch: Option<&'a mut Watch>,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if let Some(watch) = self.watch.take() {
            withdraw_watch(self.zk, watch);
        }
    }
}

/// The reply of a read that arms a watch, by the watch it carries.
pub(crate) trait ArmsWatch: Send + 'static {
    fn watch(&self) -> &Watch;
}

impl ArmsWatch for (Vec<String>, Watch) {
    fn watch(&self) -> &Watch {
        &self.1
    }
}

impl ArmsWatch for (Vec<u8>, Stat, Watch) {
    fn watch(&self) -> &Watch {
        &self.2
    }
}

impl ArmsWatch for (Option<Stat>, Watch) {
    fn watch(&self) -> &Watch {
        &self.1
    }
}

/// A read that arms a watch, for a task that a stop may abandon at any await: dropped
/// before its reply, it hands the reply to the driver, which takes the armed watch off
/// (else the client would keep it registered until its node changes).
pub(crate) struct WatchedRead<T: ArmsWatch> {
    zk: zookeeper_mt::WeakZooKeeper,
    read: Option<zookeeper_mt::ZkFuture<T>>,
}

/// [`WatchedRead`] of `read`, sent on `zk`.
pub(crate) fn watched<T: ArmsWatch>(
    zk: &ZooKeeper,
    read: zookeeper_mt::ZkFuture<T>,
) -> WatchedRead<T> {
    WatchedRead {
        zk: zk.downgrade(),
        read: Some(read),
    }
}

impl<T: ArmsWatch> std::future::Future for WatchedRead<T> {
    type Output = zookeeper_mt::Result<T>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(read) = self.read.as_mut() else {
            return std::task::Poll::Ready(Err(Error::Closed));
        };
        let outcome = std::task::ready!(std::pin::Pin::new(read).poll(cx));
        self.read = None;
        std::task::Poll::Ready(outcome)
    }
}

impl<T: ArmsWatch> Drop for WatchedRead<T> {
    fn drop(&mut self) {
        let Some(read) = self.read.take() else {
            return;
        };
        let zk = self.zk.clone();
        crate::runtime::spawn_detached("settling an abandoned watched read", async move {
            if let Ok(reply) = read.await {
                if let Some(zk) = zk.upgrade() {
                    withdraw_watch(&zk, reply.watch());
                }
            }
        });
    }
}
