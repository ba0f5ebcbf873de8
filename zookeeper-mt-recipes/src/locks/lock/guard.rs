//! The guard of a held lock: loss reports, fencing, release.

use super::*;

/// A held lock. Dropping it releases the lock; [`release`](Self::release) does the same
/// and reports errors. `Send + Sync`.
pub struct LockGuard {
    pub(super) shared: Arc<Shared>,
    pub(super) zk: ZooKeeper,
    pub(super) node: String,
    pub(super) sequence: i32,
    pub(super) czxid: i64,
    pub(super) state: Arc<GuardState>,
    pub(super) patience: Patience,
    pub(super) released: bool,
    /// Keeps the session's liveness bound fresh while held (one probe per handle).
    pub(super) _alive: crate::support::liveness::KeepAlive,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.node)
            .field("lost", &self.state.reason())
            .finish()
    }
}

impl LockGuard {
    /// The guard of the lock node `node` just acquired.
    pub(super) fn new(
        zk: ZooKeeper,
        node: String,
        sequence: i32,
        czxid: i64,
        shared: Arc<Shared>,
        patience: Patience,
    ) -> LockGuard {
        let state = Arc::new(GuardState::new(node.clone()));
        let alive = crate::support::liveness::keep_alive(&zk);
        shared.register(&state);
        LockGuard {
            shared,
            zk,
            node,
            sequence,
            czxid,
            state,
            patience,
            released: false,
            _alive: alive,
        }
    }

    /// The lock node's path.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The client the lock node belongs to.
    pub(crate) fn client(&self) -> &ZooKeeper {
        &self.zk
    }

    /// The lock node's sequence number. It orders the requests of one incarnation of the
    /// lock directory, and starts again from 0 when the directory is re-created (a
    /// counter restart, a container directory removed while idle): not a fencing token,
    /// use [`fencing_token`](Self::fencing_token) for that.
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// A fencing token for resources the lock protects: the zxid of the transaction
    /// that created the lock node (its `czxid`). A later holder's node was created
    /// later (holders are served in creation order, and a restarted directory is newer
    /// than every node of the old one), so every later holder has a greater token, across
    /// counter restarts and re-created directories. A resource that remembers the
    /// greatest token it has seen can reject a paused former holder's writes.
    pub fn fencing_token(&self) -> i64 {
        self.czxid
    }

    /// Whether the lock is known to be lost (see [`LockLost`]). Cheap: no request, no
    /// blocking.
    ///
    /// Session expiry, a closed handle and a disconnection past the grace are known as
    /// soon as the client hears of them. That someone else deleted the lock node is known
    /// only once [`lost`](Self::lost) has been called on this guard (which sets the watch
    /// on the node; a deletion before that call is found too).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lock was lost, if it was (known as for [`is_lost`](Self::is_lost)).
    pub fn lost_reason(&self) -> Option<LockLost> {
        self.shared.refresh();
        self.state.reason()
    }

    /// The loss as a [`LossSignal`](crate::LossSignal): `Some(reason)` once the lock is
    /// lost (at once if it already is known to be), `None` once the guard is released
    /// without a loss. Each call makes an independent signal: await it (in `select!` on
    /// any executor) or [`wait`](crate::LossSignal::wait) with a timeout.
    ///
    /// The first call also has the process's lock monitor (a task on the recipes'
    /// driver) watch the lock node (one `get` with a watch), so that its deletion by
    /// someone else is reported as [`LockLost::NodeDeleted`], including a deletion that
    /// happened before the call.
    /// Acquisitions whose guard is never asked cost no such request.
    pub fn lost(&self) -> LossSignal<LockLost> {
        self.shared.refresh();
        let (signal, first) = self.state.subscribe();
        if first {
            self.shared.watch(&self.state);
        }
        signal
    }

    /// How many loss signals of this guard live, and how many hold a waker.
    #[doc(hidden)]
    pub fn loss_signal_counts(&self) -> (usize, usize) {
        self.state.loss.counts()
    }

    /// Runs `ops` as one `multi` that the server applies only while this guard's lock
    /// node still exists unchanged, i.e. only while this guard holds the lock (see
    /// [`fenced`](crate::locks::fenced)). Fails with [`RecipeError::Lost`] if the lock is gone,
    /// without sending anything if the guard already knows it. Returns the results of
    /// `ops`.
    pub fn fenced_multi(&self, ops: &[zookeeper_mt::Op]) -> Result<Vec<zookeeper_mt::OpResult>> {
        if let Some(reason) = self.lost_reason() {
            return Err(RecipeError::Lost(LossReason::Lock(reason)));
        }
        crate::locks::fenced::fenced_multi(&self.zk, &[&self.node], ops)
    }

    /// Releases the lock (deletes the node). Fails with `RecipeError::Lost` if the lock
    /// had been lost before (the critical section was not protected to the end). If the
    /// server cannot be reached within the reconnect timeout, the error is reported and
    /// the delete goes on in the background.
    pub fn release(self) -> Result<()> {
        block_on(self.release_async())
    }

    /// [`release`](Self::release), async. Dropped before the delete was answered, it
    /// hands the delete to the background: the lock is released either way.
    pub async fn release_async(mut self) -> Result<()> {
        let Some(lost) = self.begin_release() else {
            return Ok(());
        };
        match delete_eventually_async(&self.zk, &self.node, self.patience).await {
            Ok(()) => {}
            // Left to the background: report that the release is not done yet.
            Err(RecipeError::ZooKeeper(e)) if e.is_retryable() => {
                return Err(RecipeError::ZooKeeper(e))
            }
            Err(_) if lost.is_some() => {}
            Err(e) => return Err(e),
        }
        match lost {
            Some(reason) => Err(RecipeError::Lost(LossReason::Lock(reason))),
            None => Ok(()),
        }
    }

    /// Marks the guard released and returns the loss recorded before, if any; `None`
    /// if it was released already. Every event so far judges the guard first; from then
    /// on no loss is recorded, so our own delete is not reported.
    fn begin_release(&mut self) -> Option<Option<LockLost>> {
        if std::mem::replace(&mut self.released, true) {
            return None;
        }
        self.shared.refresh();
        // The signals settled here are woken on return, after every lock.
        let mut wakes = crate::support::Wakes::new();
        let lost = self.state.finish(&mut wakes);
        self.shared.forget(&self.state);
        Some(lost)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // Must not block long and reports nothing.
        if self.begin_release().is_some() {
            delete_on_drop(&self.zk, &self.node);
        }
    }
}
