//! Following one node with one-shot watches, each re-armed by the read that fetches the
//! node's state: the task a config watch and a value watch share.
//!
//! The follower keeps one watch armed. When it fires, the node is read again with a new
//! watch, so no change made after a read can go unnoticed. A failed read is tried again
//! once connected (after a short back-off); the end of the session ends the follower of
//! a plain handle, while a managed client's follower reads again, with a fresh watch, in
//! each new session.

use crate::lifecycle::following::{Change, Following};
use crate::runtime::StopSignal;
use crate::support::{check_event, reconnected, withdraw_watch, Patience};
use crate::{RecipeError, Result};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use zookeeper_mt::{Watch, WatchedEvent, ZooKeeper};

/// The future of one [`NodeReader::read`].
pub(crate) type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = zookeeper_mt::Result<Option<Watch>>> + Send + 'a>>;

/// How a follower reads its node and publishes what it finds.
pub(crate) trait NodeReader: Send + 'static {
    /// Reads the node on `zk` with a new watch and publishes its state if it is new.
    /// `Ok(None)`: the node changed between two reads; read again at once.
    fn read<'a>(&'a mut self, zk: &'a ZooKeeper) -> ReadFuture<'a>;
}

/// The first read, made before the follower starts so that its errors (an invalid
/// path, a closed session) are the caller's; rides out a connection loss within
/// `patience`.
pub(crate) async fn first_read(
    reader: &mut impl NodeReader,
    zk: &ZooKeeper,
    patience: Patience,
) -> Result<Watch> {
    let mut attempt = 0;
    loop {
        match reader.read(zk).await {
            Ok(Some(watch)) => return Ok(watch),
            Ok(None) => {}
            Err(error) if error.is_retryable() => {
                attempt += 1;
                reconnected(zk, patience, attempt).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Follows the node until stopped (`None`) or until it cannot go on (why). `armed`: the
/// watch of the read made before, on `following`'s session.
pub(crate) async fn follow(
    reader: &mut impl NodeReader,
    mut following: Following,
    stop: StopSignal,
    mut armed: Option<Watch>,
) -> Option<RecipeError> {
    // The node must be read again (with a new watch) before anything else can be seen.
    let mut stale = armed.is_none();
    let mut fired: Option<zookeeper_mt::Result<WatchedEvent>> = None;
    loop {
        if stop.is_stopped() {
            // Taken off rather than left registered until the node changes.
            if let Some(watch) = armed.take() {
                withdraw_watch(&following.zk, &watch);
            }
            return None;
        }
        match following.changes() {
            Err(end) => return Some(end),
            Ok(changes) => {
                for change in changes {
                    match change {
                        Change::Lost { end: Some(end) } => return Some(end),
                        // The session's watches went with it; a new session follows.
                        Change::Lost { end: None } => armed = None,
                        Change::NewSession => {
                            armed = None;
                            stale = true;
                        }
                        _ => {}
                    }
                }
            }
        }
        if let Some(event) = fired.take() {
            match event.map_err(RecipeError::from).and_then(check_event) {
                // A plain handle's session is over: so is the follower.
                Err(end) if !following.client.renews_sessions() => return Some(end),
                // A change, or (on a managed client) the old session's end: read again,
                // which waits for the new session if this one is over.
                _ => stale = true,
            }
        }
        if stale && following.due() {
            // A stop abandons the read (the loop's top then ends the follower).
            let Some(read) = stop.unless_cancelled(reader.read(&following.zk)).await else {
                continue;
            };
            match read {
                Ok(Some(watch)) => {
                    armed = Some(watch);
                    stale = false;
                    following.succeeded();
                }
                Ok(None) => {}
                // A terminal error stops requests until `Lost` (and `NewSession`) come.
                Err(error) if error.is_retryable() || error.is_session_terminal() => {
                    following.failed(&error)
                }
                Err(error) => return Some(error.into()),
            }
            continue;
        }
        let deadline = if stale {
            following.work_deadline()
        } else {
            None
        };
        following
            .wait(&stop, deadline, |cx| {
                let Some(watch) = armed.as_mut() else {
                    return Poll::Pending;
                };
                let Poll::Ready(event) = Pin::new(watch).poll(cx) else {
                    return Poll::Pending;
                };
                // Taken: a fired watch is not polled again.
                fired = Some(event);
                armed = None;
                Poll::Ready(())
            })
            .await;
    }
}
