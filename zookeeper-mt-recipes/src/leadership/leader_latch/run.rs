//! Running a job while leader: blocking (a closure) and async (a future the runner races
//! against the end of the term).

use super::*;

impl LatchBuilder {
    /// Joins, waits up to `timeout` for leadership, runs `work` as leader, then leaves
    /// the election (the next participant leads), like kazoo's `Election.run`. On a
    /// timeout the latch leaves too (`Err(Timeout)`): nothing stays registered.
    /// `client`: any client handle, as for [`build`](Self::build).
    pub fn run_once<T>(
        self,
        client: impl Into<Client>,
        timeout: impl Into<Timeout>,
        work: impl FnOnce(&LeadershipGuard) -> T,
    ) -> Result<T> {
        let latch = self.build(client)?;
        let guard = latch.await_leadership(timeout);
        let result = guard.map(|guard| work(&guard));
        latch.close();
        result
    }

    /// [`run_once`](Self::run_once), async: joins, awaits leadership for up to `timeout`,
    /// then runs the future `work(guard)` as leader, racing it against the end of the
    /// term (see [`LeaderLatch::run_while_leader_async`]), and leaves the election.
    ///
    /// Dropping the returned future at any point leaves the election: the job's future
    /// is dropped, the term (if any) ends and the candidate's node is withdrawn in the
    /// background (the drop waits for nothing).
    pub async fn run_once_async<T, F, Fut>(
        self,
        client: impl Into<Client>,
        timeout: impl Into<Timeout>,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeadershipGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let timeout = timeout.into();
        // Dropped with this future (the only handle), the latch leaves the election.
        let latch = self.build(client)?;
        // No relinquish after the job: the latch's drop ends the term and deletes the
        // node (in the background), rather than a new node joining only to be deleted.
        let result = latch.run_leading(timeout, work, false).await;
        drop(latch);
        result
    }
}

impl LeaderLatch {
    /// Waits up to `timeout` for leadership, runs `work` with the term's guard, then
    /// relinquishes the term (if it still lasts): the next participant leads and this
    /// latch joins again at the back. `work` should watch the guard
    /// ([`is_lost`](LeadershipGuard::is_lost), [`check`](LeadershipGuard::check)) and
    /// stop acting once leadership is lost; it is not interrupted (the async form,
    /// [`run_while_leader_async`](Self::run_while_leader_async), is).
    pub fn run_while_leader<T>(
        &self,
        timeout: impl Into<Timeout>,
        work: impl FnOnce(&LeadershipGuard) -> T,
    ) -> Result<T> {
        let guard = self.await_leadership(timeout)?;
        let result = work(&guard);
        guard.relinquish()?;
        Ok(result)
    }

    /// [`run_while_leader`](Self::run_while_leader), async: awaits leadership for up to
    /// `timeout`, then runs the job `work(guard)` (it owns a clone of the term's guard,
    /// so it may await the guard itself) as leader, raced against the end of the term:
    ///
    /// - the job completes first: the term is relinquished (the next participant
    ///   leads, this latch joins again at the back) and its output returned;
    /// - the term ends first (lost: session expired, node deleted, disconnected past
    ///   the grace; or the latch closed): the job's future is dropped at its current
    ///   await point and the call fails with the end ([`LeadershipGuard::check`]'s
    ///   error, e.g. `Lost(Leadership(SessionExpired))`). A job never runs on past its
    ///   term, as far as this process can tell (use the [token](LeadershipGuard::token)
    ///   against a leader paused past its session).
    ///
    /// Dropping the returned future drops the job and relinquishes the term if it was
    /// leading (sent to the latch's task, waited for by no one); the latch stays in the
    /// election (use [`LatchBuilder::run_once_async`] to leave it too, or drop the latch).
    /// The job's future need not be `Send`; the returned future is `Send` when it is.
    pub async fn run_while_leader_async<T, F, Fut>(
        &self,
        timeout: impl Into<Timeout>,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LeadershipGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_leading(timeout.into(), work, true).await
    }

    /// Awaits leadership, runs the job against the term's end, then relinquishes the
    /// term if `relinquish` (else the caller leaves the election).
    async fn run_leading<T, F, Fut>(&self, timeout: Timeout, work: F, relinquish: bool) -> Result<T>
    where
        F: FnOnce(LeadershipGuard) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.await_leadership_async(timeout).await?;
        // From here until it is disarmed, a drop of this future ends the term.
        let relinquish_on_drop = RelinquishOnDrop {
            commands: &self.commands,
            term: Some(guard.term.number),
        };
        let job = std::pin::pin!(work(guard.clone()));
        let outcome = Race {
            job,
            ended: guard.term.ended.until(|| guard.term.end()),
        }
        .await;
        let mut relinquish_on_drop = relinquish_on_drop;
        relinquish_on_drop.term = None;
        match outcome {
            Some(value) => {
                if relinquish {
                    guard.relinquish_async().await?;
                }
                Ok(value)
            }
            None => guard
                .check()
                .and(Err(RecipeError::Lost(LossReason::Closed))),
        }
    }
}

/// The job against the end of its term: `Some(output)` if the job completes first,
/// `None` once the term has ended (the job is then dropped with the race).
struct Race<J, E> {
    job: J,
    ended: E,
}

impl<J, E, T> Future for Race<Pin<&mut J>, E>
where
    J: Future<Output = T>,
    E: Future + Unpin,
{
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        // The end first: a job is not polled again once its term is over.
        if Pin::new(&mut self.ended).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        self.job.as_mut().poll(cx).map(Some)
    }
}

/// Ends the term a dropped run was leading in: the command is queued for the latch's
/// task and waited for by no one (a drop never waits).
struct RelinquishOnDrop<'a> {
    commands: &'a Commands,
    term: Option<u64>,
}

impl Drop for RelinquishOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(term) = self.term {
            let (done, _answer) = Reply::new();
            // A latch that has stopped has no term left to end.
            let _ = self.commands.send(Command::Relinquish {
                term: Some(term),
                done,
            });
        }
    }
}
