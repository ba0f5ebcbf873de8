//! Settling a claim whose outcome its take did not learn: after a lost reply, and when
//! the take's future was dropped with the claim in flight. An item a dropped take may
//! have taken is put back, on a new session if this one is over, so it is never lost.

use super::*;
use crate::runtime::sleep_for;

/// What became of a take (delete + marker) whose reply was lost.
pub(super) enum LostTake {
    /// The item is still there: the take did not apply.
    NotApplied,
    /// Our marker is there: the take applied, the item is ours.
    Ours,
    /// Neither: another consumer took the item.
    Others,
    /// Cannot be found out (reconnect timeout, or the session ended and the marker with
    /// it): the item may be ours and gone from the queue.
    Unknown,
}

/// Our take of `path` (delete + `marker`) was sent and its reply lost: after a `sync` (so
/// a server we reconnected to has applied everything the old connection sent), the item
/// still there means the take did not apply; our marker there means it did; neither
/// means another consumer took it. The call's deadline does not apply here (the item may
/// be ours already); the reconnect timeout does. An item whose outcome is `Ours` or
/// `Unknown` is delivered (or put back) rather than lost: at least once, in the unknown
/// case only.
pub(super) async fn lost_take(
    zk: &ZooKeeper,
    patience: Patience,
    path: &str,
    marker: &str,
) -> LostTake {
    let look = async {
        reconnected(zk, patience, 1).await?;
        retry_async(zk, patience, || zk.sync_async(path)).await?;
        if retry_async(zk, patience, || zk.exists_async(path))
            .await?
            .is_some()
        {
            return Ok(LostTake::NotApplied);
        }
        if retry_async(zk, patience, || zk.exists_async(marker))
            .await?
            .is_some()
        {
            drop(zk.delete_async(marker, Version::Any));
            return Ok(LostTake::Ours);
        }
        Ok::<_, RecipeError>(LostTake::Others)
    };
    match look.await {
        Ok(outcome) => outcome,
        Err(error) => {
            log::debug!("queue: outcome of taking {path} unknown ({error})");
            LostTake::Unknown
        }
    }
}

/// How far an unsettled claim got.
pub(super) enum ClaimStage {
    /// Sent, not answered yet.
    Sent(zookeeper_mt::ZkFuture<Vec<OpResult>>),
    /// Its reply was lost: whether it applied is being found out.
    ReplyLost,
    /// It ended with an error that does not tell whether it applied (the handle closed
    /// with it in flight, ...): settled as [`LostTake::Unknown`].
    Unknown,
}

/// Whether a claim that failed with `error` provably did not apply: the server refused
/// the multi as a whole, or the request never reached it. Anything else (a close with
/// the claim in flight, which ends it with `Closed`, an auth failure, a code this
/// binding does not know) may have applied.
///
/// `SessionExpired` proves it too: the C client sends a request only on a connected
/// socket, a dropped connection fails every request it sent with `ZCONNECTIONLOSS`, so
/// the requests an expiry fails were never sent since; and the server answers a
/// request of an expired session with `SESSIONEXPIRED` without applying it.
pub(super) fn not_applied(error: &Error) -> bool {
    matches!(
        error,
        Error::MultiFailed { .. }
            | Error::SessionExpired
            | Error::TooManyInFlight { .. }
            | Error::InvalidPath { .. }
            | Error::InteriorNul(_)
            | Error::DataTooLarge { .. }
            | Error::InvalidArgument(_)
    )
}

/// A claim (delete + marker) whose outcome the take has not settled yet. If the take's
/// future is dropped meanwhile, the claim is settled in the background: an item it took
/// is put back at the tail with its ordering tag, so a dropped take never loses an item,
/// even if its session ends meanwhile (see [`put_back_surely`]).
pub(super) struct PendingClaim<'a> {
    pub(super) queue: &'a Queue,
    /// The session the claim was sent on.
    pub(super) zk: &'a ZooKeeper,
    pub(super) stage: Option<ClaimStage>,
    pub(super) name: &'a str,
    pub(super) path: &'a str,
    pub(super) marker: &'a str,
    pub(super) data: &'a [u8],
}

/// An item a dropped take may hold: what is needed to put it back.
struct Stray {
    store: ItemStore,
    /// The guid every put-back attempt of this item carries, on whichever session: an
    /// attempt whose outcome was lost with its session is found by it before another.
    put_id: String,
    patience: Patience,
    name: String,
    path: String,
    marker: String,
    data: Vec<u8>,
}

impl Drop for PendingClaim<'_> {
    fn drop(&mut self) {
        let Some(stage) = self.stage.take() else {
            return;
        };
        let zk = self.zk.clone();
        let stray = Stray {
            store: self.queue.store.clone(),
            put_id: crate::nodes::guid(),
            patience: self.queue.patience,
            name: self.name.to_string(),
            path: self.path.to_string(),
            marker: self.marker.to_string(),
            data: self.data.to_vec(),
        };
        // Detached: the settling runs to its end on the driver, whatever happens to
        // this future.
        let what = format!("settling the take of {}", stray.path);
        crate::runtime::spawn_detached(&what, async move {
            let outcome = match stage {
                ClaimStage::Sent(claim) => match claim.await {
                    Ok(_) => LostTake::Ours,
                    Err(error) if error.is_connection_loss() => {
                        lost_take(&zk, stray.patience, &stray.path, &stray.marker).await
                    }
                    Err(error) if not_applied(&error) => LostTake::NotApplied,
                    // It may have applied (e.g. `Closed`: the handle was closed with the
                    // claim in flight): put back, on a new session, if it is gone.
                    Err(error) => {
                        log::debug!("queue: claim of {} ended with {error}", stray.path);
                        LostTake::Unknown
                    }
                },
                ClaimStage::ReplyLost => {
                    lost_take(&zk, stray.patience, &stray.path, &stray.marker).await
                }
                ClaimStage::Unknown => LostTake::Unknown,
            };
            match outcome {
                LostTake::NotApplied | LostTake::Others => {}
                LostTake::Ours => put_back_surely(&zk, &stray, false).await,
                LostTake::Unknown => put_back_surely(&zk, &stray, true).await,
            }
        });
    }
}

/// Puts a stray item back at the tail (with its ordering tag), trying until it is done:
/// on this session while it lives (first finding out, if `unknown`, whether the take
/// applied at all), then on a new session made like it ([`ZooKeeper::new_session`]),
/// where the item's absence is checked again first. Every attempt carries the stray's
/// one put guid, so an attempt whose outcome went with its session is found (still
/// queued) before another is sent. Only an `unknown` outcome, or a put-back consumed
/// between a lost attempt and the retry, can deliver an item twice: at least once,
/// never lost.
async fn put_back_surely(zk: &ZooKeeper, stray: &Stray, unknown: bool) {
    let mut pause = Duration::from_millis(100);
    let mut ours = if unknown { Ours::Unknown } else { Ours::Yes };
    let mut fresh: Option<ZooKeeper> = None;
    // Whether a put-back may have been sent (then a retry first looks for its item).
    let mut sent = false;
    loop {
        // A new session that ended too (expired, or closed) is replaced like the first.
        if fresh.as_ref().is_some_and(|new| new.state().is_terminal()) {
            if let Some(ended) = fresh.take() {
                drop(ended.close_async());
            }
        }
        if fresh.is_none() && zk.state().is_terminal() {
            // Connecting waits for the new session: on a worker thread, not the driver.
            let like = zk.clone();
            match crate::asynchronous::unblock(move || like.new_session()).await {
                Ok(new) => {
                    log::warn!(
                        "queue: putting back {} on a new session (the taking one is over)",
                        stray.path
                    );
                    fresh = Some(new);
                    // The marker went with the old session: only the item's own
                    // presence can tell now.
                    if ours == Ours::Unknown {
                        ours = Ours::UnknownMarkerGone;
                    }
                }
                Err(error) => log::warn!("queue: no session to put back {}: {error}", stray.path),
            }
        }
        let session = match &fresh {
            Some(new) => Some(new),
            None if !zk.state().is_terminal() => Some(zk),
            None => None,
        };
        if let Some(session) = session {
            match put_back_once(session, stray, &mut ours, &mut sent).await {
                Ok(()) => break,
                Err(error) => {
                    log::warn!(
                        "queue: putting back {} failed, trying again: {error}",
                        stray.path
                    )
                }
            }
        }
        sleep_for(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
    if let Some(session) = fresh {
        // The close goes on without its future: nothing waits for the server's answer.
        drop(session.close_async());
    }
}

/// Whether a stray item is ours to put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ours {
    Yes,
    /// Not known yet; the take marker can tell.
    Unknown,
    /// Not known, and the marker is gone with its session: the item's absence decides.
    UnknownMarkerGone,
}

/// One try of [`put_back_surely`] on `zk` (the taking session, or a new one).
async fn put_back_once(
    zk: &ZooKeeper,
    stray: &Stray,
    ours: &mut Ours,
    sent: &mut bool,
) -> Result<()> {
    match *ours {
        Ours::Yes => {}
        Ours::Unknown => match lost_take(zk, stray.patience, &stray.path, &stray.marker).await {
            LostTake::NotApplied | LostTake::Others => return Ok(()),
            LostTake::Ours => *ours = Ours::Yes,
            LostTake::Unknown => return Err(RecipeError::ZooKeeper(Error::ConnectionLoss)),
        },
        Ours::UnknownMarkerGone => {
            retry_async(zk, stray.patience, || zk.sync_async(&stray.path)).await?;
            let exists = retry_async(zk, stray.patience, || zk.exists_async(&stray.path)).await?;
            if exists.is_some() {
                return Ok(()); // the take never applied
            }
            *ours = Ours::Yes;
        }
    }
    drop(zk.delete_async(&stray.marker, Version::Any));
    if *sent {
        // An earlier attempt's outcome was lost (its session may have ended with it in
        // flight): its item, if it applied and is still queued, carries our guid.
        retry_async(zk, stray.patience, || zk.sync_async(&stray.path)).await?;
        if stray
            .store
            .find_async(zk, &stray.put_id, stray.patience)
            .await?
            .is_some()
        {
            return Ok(());
        }
    }
    *sent = true;
    let tag = tag_of(&stray.name).unwrap_or("");
    stray
        .store
        .put_with_id_async(zk, &stray.put_id, &stray.data, tag, &[], stray.patience)
        .await
        .map(drop)
}
