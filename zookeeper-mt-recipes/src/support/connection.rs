//! Riding out connection loss: retries, waiting for a reconnection, session errors.

use super::*;

// ---------------------------------------------------------------------------------------
// Riding out connection loss.
// ---------------------------------------------------------------------------------------

/// After a retryable failure (connection loss, throttling): waits until the session is
/// connected again, within `patience`; a terminal session reports its error. `attempt`
/// counts consecutive failures: the session state is updated on the completion thread
/// and may still say "connected" just after a loss, so tries back off by the patience's
/// [`RetryPolicy`] pauses (by default 5 ms longer each time, up to 100 ms) instead of
/// spinning.
pub(crate) async fn reconnected(zk: &ZooKeeper, patience: Patience, attempt: u32) -> Result<()> {
    if zk.state().is_connected() {
        let pause = patience.pause(attempt);
        sleep_for(pause.min(patience.reconnect_wait()?)).await;
    }
    let deadline = Deadline::after(patience.reconnect_wait()?);
    match zk.state() {
        state if state.is_connected() => return Ok(()),
        state if state.is_terminal() => return Err(session_error(state)),
        _ => {}
    }
    // Subscribed before the state is read again: no change can fall between the two.
    let mut events = zk.session_events();
    loop {
        match zk.state() {
            state if state.is_connected() => return Ok(()),
            state if state.is_terminal() => return Err(session_error(state)),
            _ => {}
        }
        match until(deadline, events.next_event()).await {
            None => return Err(patience.gave_up()),
            Some(None) => return Err(Error::Closed.into()),
            Some(Some(_)) => {}
        }
    }
}

/// Runs an idempotent request (a read, or a write whose repetition is harmless),
/// retrying it after retryable failures within `patience`, paced by its pauses (see
/// [`reconnected`]).
pub(crate) async fn retry_async<T, F>(
    zk: &ZooKeeper,
    patience: Patience,
    mut request: impl FnMut() -> F,
) -> Result<T>
where
    F: std::future::Future<Output = zookeeper_mt::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(error) if error.is_retryable() => {
                attempt += 1;
                reconnected(zk, patience, attempt).await?;
            }
            other => return other.map_err(RecipeError::from),
        }
    }
}

/// [`retry_async`] of a blocking request.
pub(crate) fn retry<T>(
    zk: &ZooKeeper,
    patience: impl Into<Patience>,
    mut request: impl FnMut() -> zookeeper_mt::Result<T>,
) -> Result<T> {
    block_on(retry_async(zk, patience.into(), || {
        std::future::ready(request())
    }))
}

/// How often a cleanup whose client is disconnected checks for the connection.
pub(super) const CLEANUP_POLL: Duration = Duration::from_millis(100);

/// A request of [`finish_later`], made afresh for each try.
pub(crate) type CleanupFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = zookeeper_mt::Result<()>> + Send>>;

/// Runs `request` (made afresh for each try) in the background until it succeeds or fails for good: for cleanups
/// (deleting a lock node, releasing a work item) that must happen even though the
/// connection did not come back in time. `what` names the cleanup in the log.
///
/// A cleanup is dropped only once its session is over (expired or closed: its ephemeral
/// nodes went with it) or once the user has let go of every clone of the handle (which
/// closes it, ending the session). It is never dropped for a long outage alone: an
/// ensemble without a quorum expires no session, so a client cut off for longer than
/// its session timeout can come back with the same session and its nodes, and a lock
/// node left behind then would block every later acquirer while that session lives. The
/// worker holds the handle weakly, so it never keeps a session open that the user is
/// done with, and never loops on after that. Each cleanup is a task on the recipes' driver.
pub(crate) fn finish_later(
    zk: &ZooKeeper,
    what: String,
    mut request: impl FnMut(ZooKeeper) -> CleanupFuture + Send + 'static,
) {
    let weak = zk.downgrade();
    let name = what.clone();
    crate::runtime::spawn_detached(&name, async move {
        loop {
            let Some(zk) = weak.upgrade() else {
                log::debug!("recipes: {what} dropped: the handle was let go");
                return;
            };
            let state = zk.state();
            if state.is_terminal() {
                log::debug!("recipes: {what} dropped: the session is over");
                return;
            }
            if state.is_connected() {
                match request(zk).await {
                    Ok(()) => return,
                    Err(error) if error.is_retryable() => {}
                    Err(error) => {
                        log::debug!("recipes: giving up {what}: {error}");
                        return;
                    }
                }
            } else {
                drop(zk);
            }
            sleep_for(CLEANUP_POLL).await;
        }
    });
}
