//! Deleting nodes, and nodes a process holds (lock requests, leases) until released.

use super::*;

/// Deletes `path` whatever its version; an absent node is fine.
pub(super) async fn delete_any_version_async(
    zk: &ZooKeeper,
    path: &str,
) -> zookeeper_mt::Result<()> {
    match zk.delete_async(path, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Deletes `path` (any version) within `patience`; an absent node is fine. Dropped, a
/// delete already sent may still apply.
pub(crate) async fn delete_node_async(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
) -> Result<()> {
    retry_async(zk, patience, || delete_any_version_async(zk, path)).await
}

/// [`delete_node_async`] for a node that must go although its session may well survive (a lock
/// or waiter node): if the connection does not come back in time, the delete goes on in
/// the background ([`finish_later`]). Returns `delete_node_async`'s result. Dropped
/// before the delete was answered, it hands the delete to the background.
pub(crate) async fn delete_eventually_async(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
) -> Result<()> {
    let mut pending = DeleteOnDrop::armed(zk, path);
    let result = retry_async(zk, patience, || delete_any_version_async(zk, path)).await;
    if !gave_up_for_connection(&result) {
        pending.disarm();
    }
    result
}

/// Hands the delete of `path` to the background when dropped armed.
pub(crate) struct DeleteOnDrop<'a> {
    zk: &'a ZooKeeper,
    path: &'a str,
    armed: bool,
}

impl<'a> DeleteOnDrop<'a> {
    pub(crate) fn armed(zk: &'a ZooKeeper, path: &'a str) -> Self {
        DeleteOnDrop {
            zk,
            path,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for DeleteOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            delete_in_background(self.zk, self.path);
        }
    }
}

/// Whether a failed step gave up for want of a connection (so the server may not have
/// seen it): connection loss, or a deadline that passed while waiting for one.
pub(super) fn gave_up_for_connection<T>(result: &Result<T>) -> bool {
    match result {
        Err(RecipeError::ZooKeeper(error)) => error.is_retryable(),
        Err(RecipeError::Timeout) => true,
        _ => false,
    }
}

/// Hands the delete of `path` to the background worker.
pub(crate) fn delete_in_background(zk: &ZooKeeper, path: &str) {
    let path = path.to_string();
    let what = format!("deleting {path}");
    finish_later(zk, what, move |zk| {
        let path = path.clone();
        Box::pin(async move { delete_any_version_async(&zk, &path).await })
    });
}

/// Deletes `path` for a holder being dropped, without waiting for anything: the delete
/// is sent now (so later requests of this session see it applied) and its reply is
/// settled on the driver; a delete that the connection lost is retried there
/// ([`finish_later`]) until the node is provably gone or the session is over. A drop
/// never waits for a reply, on any thread: on an executor thread the wait would be
/// refused, and a refused wait must not lose the delete.
pub(crate) fn delete_on_drop(zk: &ZooKeeper, path: &str) {
    let sent = zk.delete_async(path, None);
    let weak = zk.downgrade();
    let path = path.to_string();
    let what = format!("deleting {path}");
    crate::runtime::spawn_detached(&what, async move {
        match sent.await {
            Ok(()) | Err(Error::NoNode) => {}
            // The connection went (the delete may or may not have applied) or the handle
            // was full: delete again once connected. An absent node is fine.
            Err(error) if error.is_retryable() => {
                if let Some(zk) = weak.upgrade() {
                    delete_in_background(&zk, &path);
                }
            }
            // The session is over: the node went with it.
            Err(error) if error.is_session_terminal() => {}
            Err(error) => log::debug!("recipes: deleting {path} on drop: {error}"),
        }
    });
}

/// A node this process holds (a lock request, a lease): deleted by
/// [`release`](Self::release) or, at the latest, when dropped.
#[derive(Debug)]
pub(crate) struct OwnedNode {
    pub(super) zk: ZooKeeper,
    pub(super) name: String,
    pub(super) czxid: i64,
    /// Empty once released.
    pub(super) path: String,
    /// Handed to the caller (in a guard). Either way a drop never waits: the delete is
    /// sent and settled in the background ([`delete_on_drop`]).
    pub(super) handed_out: bool,
}

impl OwnedNode {
    /// The node `created` in `dir`.
    pub(crate) fn new(zk: &ZooKeeper, dir: &str, created: Created) -> OwnedNode {
        OwnedNode {
            zk: zk.clone(),
            path: format!("{dir}/{}", created.name),
            name: created.name,
            czxid: created.czxid,
            handed_out: false,
        }
    }

    /// The node, now the caller's (see `handed_out`).
    pub(crate) fn hand_out(mut self) -> OwnedNode {
        self.handed_out = true;
        self
    }

    /// Withdraws a request the call gives up on (a timeout, an error): the delete is
    /// awaited, so nothing is left when the call returns; a connection that does not
    /// come back in time leaves it to the background.
    pub(crate) async fn withdraw(mut self) {
        if let Err(error) = self.release().await {
            log::debug!("recipes: withdrawing {}: {error}", self.name);
        }
    }

    /// The node's name.
    /// The handle of the session the node was created on.
    pub(crate) fn client(&self) -> &ZooKeeper {
        &self.zk
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The node's path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The zxid that created the node.
    pub(crate) fn czxid(&self) -> i64 {
        self.czxid
    }

    /// Deletes the node (once); a failure is reported. If the server could not be
    /// reached, the delete goes on in the background.
    pub(crate) async fn release(&mut self) -> Result<()> {
        if self.path.is_empty() {
            return Ok(());
        }
        let path = std::mem::take(&mut self.path);
        delete_eventually_async(&self.zk, &path, op_deadline(&self.zk).into()).await
    }
}

impl Drop for OwnedNode {
    fn drop(&mut self) {
        delete_dropped(&self.zk, &mut self.path, self.handed_out);
    }
}

/// The delete of a node whose holder is dropped (once: `path` is emptied), sent now and
/// settled in the background ([`delete_on_drop`]), whether a guard held it or a call's
/// future did (`_handed_out`): no drop blocks its thread.
pub(crate) fn delete_dropped(zk: &ZooKeeper, path: &mut String, _handed_out: bool) {
    if path.is_empty() {
        return;
    }
    let path = std::mem::take(path);
    delete_on_drop(zk, &path);
}

/// The public methods of a guard type whose field `node` is its [`OwnedNode`]:
/// `release`, `is_held` and `node`; `$what` names what it holds, for the docs.
macro_rules! owned_node_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            #[doc = concat!("Releases the ", $what, ", reporting a failure to delete the node")]
            /// (if the server could not be reached, the delete goes on in the background).
            pub fn release(self) -> $crate::Result<()> {
                $crate::runtime::block_on(self.release_async())
            }

            /// [`release`](Self::release), async. Dropped before the delete was answered,
            /// it hands the delete to the background: the node goes either way.
            pub async fn release_async(mut self) -> $crate::Result<()> {
                if let Some(holding) = &self.holding {
                    holding.release();
                }
                self.node.release().await
            }

            #[doc = concat!("Whether the ", $what, " is still held as far as the client knows: no")]
            /// request, answered at once (see [`lost_reason`](Self::lost_reason)). `Ok(false)`
            /// from the instant the session may have expired.
            /// A closed handle is an error (`Closed`), as for every call on it.
            pub fn is_held(&self) -> $crate::Result<bool> {
                $crate::support::held_answer(self.lost_reason())
            }

            /// [`is_held`](Self::is_held), async (answered at once as well).
            pub async fn is_held_async(&self) -> $crate::Result<bool> {
                self.is_held()
            }

            #[doc = concat!("Whether the ", $what, " may be lost. Cheap: no request.")]
            pub fn is_lost(&self) -> bool {
                self.lost_reason().is_some()
            }

            /// Why it may be lost, if it may: the session expired or closed, the
            /// connection dropped, or the session's earliest possible expiry has come (as
            /// the server's answers tell; kept fresh by one cheap read per handle every
            /// third of the session timeout), whichever is first: never after another
            /// client can hold it. A deletion of the node by someone else is not seen.
            pub fn lost_reason(&self) -> Option<$crate::locks::LockLost> {
                self.holding.as_ref().and_then(|h| h.lost_reason())
            }

            /// The loss as a [`LossSignal`]($crate::LossSignal): `Some(reason)` at the
            /// instant the loss is known (at once if it is already), `None` after a
            /// release. Each call makes an independent signal (await it, or
            /// [`wait`]($crate::LossSignal::wait) with a timeout).
            pub fn lost(&self) -> $crate::LossSignal<$crate::locks::LockLost> {
                match &self.holding {
                    Some(holding) => holding.lost(),
                    None => $crate::LossSignal::ended(),
                }
            }

            /// How many loss signals of this guard live, and how many hold a waker.
            #[doc(hidden)]
            pub fn loss_signal_counts(&self) -> (usize, usize) {
                self.holding.as_ref().map_or((0, 0), |h| h.signal_counts())
            }

            #[doc = concat!("The ", $what, " node's name.")]
            pub fn node(&self) -> &str {
                self.node.name()
            }
        }
    };
}
pub(crate) use owned_node_guard;
