//! Terms of leadership and the guard that reports a term's end.

use super::*;
use crate::support::{LossSignal, LossSource, Wakes};

// ---------------------------------------------------------------------------------------
// Terms and guards.
// ---------------------------------------------------------------------------------------

/// One term of leadership, shared by its guards and the latch's task.
pub(super) struct Term {
    pub(super) number: u64,
    pub(super) token: i64,
    pub(super) node: String,
    pub(super) generation: u64,
    pub(super) inner: Mutex<TermInner>,
    /// The liveness bound of the session the term was won on (read without the handle).
    pub(super) clock: zookeeper_mt::SessionClock,
    /// Keeps the session's liveness bound fresh while the term lasts.
    pub(super) alive: Mutex<Option<crate::support::liveness::KeepAlive>>,
    /// Ends the term at its loss instant (see [`alarm`](Self::alarm)).
    pub(super) alarm: Mutex<Option<crate::support::liveness::AlarmHandle>>,
    /// Who awaits the term's end (`run_while_leader_async`), woken by [`finish`](Self::finish).
    pub(super) ended: crate::runtime::Wakers,
}

#[derive(Default)]
pub(super) struct TermInner {
    pub(super) end: Option<TermEnd>,
    pub(super) ended_at: Option<Instant>,
    /// The term's loss signals: settled when it ends (`None` for an end without a loss).
    pub(super) loss: LossSource<LeadershipLost>,
}

impl Term {
    /// Ends the term (the first end counts); settles the loss signals, woken on return.
    pub(super) fn finish(&self, end: TermEnd) -> bool {
        let mut wakes = Wakes::new();
        self.finish_with(end, &mut wakes)
    }

    /// [`finish`](Self::finish) for a caller holding a lock: the signals are woken when
    /// `wakes` is dropped.
    pub(super) fn finish_with(&self, end: TermEnd, wakes: &mut Wakes) -> bool {
        let mut inner = self.inner.lock();
        if inner.end.is_some() {
            return false;
        }
        inner.end = Some(end);
        inner.ended_at = Some(Instant::now());
        self.alive.lock().take();
        if let Some(alarm) = self.alarm.lock().take() {
            alarm.cancel();
        }
        match end {
            TermEnd::Lost(reason) => inner.loss.lose(reason, wakes),
            _ => inner.loss.end(wakes),
        }
        drop(inner);
        self.ended.wake_all();
        true
    }

    /// When the term must end unless its session is confirmed alive meanwhile (see
    /// [`liveness`](crate::support::liveness)); now if there is no bound.
    pub(super) fn loss_deadline(&self) -> Instant {
        crate::support::liveness::loss_deadline(&self.clock).unwrap_or_else(Instant::now)
    }

    /// Has the timer thread end the term at [`loss_deadline`](Self::loss_deadline) and
    /// settle its loss signals then, whatever the latch's task (on the busy driver) is
    /// doing; the task learns of it at its next look.
    pub(super) fn alarm(self: &Arc<Self>) {
        let term = Arc::downgrade(self);
        let alarm = crate::support::liveness::alarm(move |wakes| {
            let term = term.upgrade()?;
            if term.end_with(wakes).is_some() {
                return None;
            }
            Some(term.loss_deadline())
        });
        if self.end().is_none() {
            *self.alarm.lock() = Some(alarm);
        }
    }

    /// How the term ended, if it has. A term whose session may have expired by now (see
    /// [`liveness`](crate::support::liveness)) ends here, at the first look, even
    /// before the latch's task wakes for it: no answer says "leader" past that instant.
    pub(super) fn end(&self) -> Option<TermEnd> {
        let mut wakes = Wakes::new();
        self.end_with(&mut wakes)
    }

    /// [`end`](Self::end) for a caller holding a lock (see
    /// [`finish_with`](Self::finish_with)).
    pub(super) fn end_with(&self, wakes: &mut Wakes) -> Option<TermEnd> {
        if let Some(end) = self.inner.lock().end {
            return Some(end);
        }
        if crate::support::liveness::past_deadline(&self.clock, Instant::now()) {
            self.finish_with(TermEnd::Lost(LeadershipLost::Disconnected), wakes);
        }
        self.inner.lock().end
    }
}

/// Requests to the latch's task.
pub(super) enum Command {
    /// End the term numbered so (any term if `None`) and join again at the back; then
    /// answer whether a term ended.
    Relinquish {
        term: Option<u64>,
        done: Replier<bool>,
    },
}

/// The latch's commands: queued by its owner and the guards, taken by its task (which
/// polls [`poll_ready`](Self::poll_ready) among its other sources).
#[derive(Default)]
pub(super) struct Commands {
    inner: Mutex<CommandQueue>,
}

#[derive(Default)]
struct CommandQueue {
    queue: VecDeque<Command>,
    /// The task, to wake when a command arrives.
    waker: Option<Waker>,
    /// The task has ended: nothing is taken any more.
    closed: bool,
}

impl Commands {
    /// Queues `command` for the task and wakes it; gives it back if the task has ended.
    pub(super) fn send(&self, command: Command) -> std::result::Result<(), Command> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(command);
        }
        inner.queue.push_back(command);
        let waker = inner.waker.take();
        drop(inner);
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Ready when a command is queued; else `cx` is woken by the next one.
    pub(super) fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.inner.lock();
        if !inner.queue.is_empty() {
            return Poll::Ready(());
        }
        if !inner
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            inner.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The queued commands.
    pub(super) fn take(&self) -> VecDeque<Command> {
        std::mem::take(&mut self.inner.lock().queue)
    }

    /// At the task's end: refuses further commands; those still queued are dropped
    /// unanswered (their callers hear "no term").
    pub(super) fn close(&self) {
        let (queue, waker) = {
            let mut inner = self.inner.lock();
            inner.closed = true;
            (std::mem::take(&mut inner.queue), inner.waker.take())
        };
        // Outside the lock: dropping a reply wakes its caller.
        drop(queue);
        drop(waker);
    }
}

/// A reply to a command: set once by the task ([`Replier`]), awaited by the caller.
pub(super) struct Reply<T> {
    slot: Mutex<ReplySlot<T>>,
}

struct ReplySlot<T> {
    value: Option<T>,
    /// The replier is gone: no value comes if none is there.
    done: bool,
    waker: Option<Waker>,
}

/// The task's side of a [`Reply`]; dropping it unanswered ends the wait with `None`.
pub(super) struct Replier<T>(Arc<Reply<T>>);

impl<T> Reply<T> {
    pub(super) fn new() -> (Replier<T>, Arc<Reply<T>>) {
        let reply = Arc::new(Reply {
            slot: Mutex::new(ReplySlot {
                value: None,
                done: false,
                waker: None,
            }),
        });
        (Replier(Arc::clone(&reply)), reply)
    }

    /// The answer once given; `None` if the replier was dropped without one.
    pub(super) fn poll_answer(&self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.slot.lock();
        if let Some(value) = slot.value.take() {
            return Poll::Ready(Some(value));
        }
        if slot.done {
            return Poll::Ready(None);
        }
        if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            slot.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl<T> Replier<T> {
    pub(super) fn send(self, value: T) {
        self.0.slot.lock().value = Some(value);
        // Drop wakes the caller.
    }
}

impl<T> Drop for Replier<T> {
    fn drop(&mut self) {
        let waker = {
            let mut slot = self.0.slot.lock();
            slot.done = true;
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// One term of leadership (see the [module docs](super)): a cheap handle, cloned freely.
/// Dropping it changes nothing: the latch leads until the term ends (relinquished,
/// closed or lost).
#[derive(Clone)]
pub struct LeadershipGuard {
    pub(super) term: Arc<Term>,
    pub(super) commands: Arc<Commands>,
}

impl fmt::Debug for LeadershipGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeadershipGuard")
            .field("term", &self.term.number)
            .field("token", &self.term.token)
            .field("node", &self.term.node)
            .field("end", &self.term.end())
            .finish()
    }
}

impl LeadershipGuard {
    /// The term's number within its latch (1, 2, ...).
    pub fn term(&self) -> u64 {
        self.term.number
    }

    /// The fencing token: the `czxid` of the term's node. It is larger than the token of
    /// every earlier term of any participant of the election, so a resource that
    /// remembers the largest token it has seen can refuse a stale leader.
    pub fn token(&self) -> i64 {
        self.term.token
    }

    /// The path of the term's node.
    pub fn node(&self) -> &str {
        &self.term.node
    }

    /// The generation of the session the term was won on (always 1 on a plain handle).
    pub fn generation(&self) -> u64 {
        self.term.generation
    }

    /// Whether the term still lasts (not relinquished, closed or lost). No request.
    pub fn is_leader(&self) -> bool {
        self.term.end().is_none()
    }

    /// Whether leadership is known to be lost (see [`LeadershipLost`]). No request.
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why leadership was lost, if it was.
    pub fn lost_reason(&self) -> Option<LeadershipLost> {
        match self.term.end() {
            Some(TermEnd::Lost(reason)) => Some(reason),
            _ => None,
        }
    }

    /// How the term ended, if it has.
    pub fn end(&self) -> Option<TermEnd> {
        self.term.end()
    }

    /// When the latch ended the term (learned of the loss, relinquished, or closed), if
    /// it has: the end of the critical section as the latch saw it, which a thread
    /// holding the guard may learn of a little later.
    pub fn ended_at(&self) -> Option<Instant> {
        self.term.inner.lock().ended_at
    }

    /// `Ok` while the term lasts, else `RecipeError::Lost` (for `?` before acting).
    pub fn check(&self) -> Result<()> {
        match self.term.end() {
            None => Ok(()),
            Some(TermEnd::Lost(reason)) => Err(RecipeError::Lost(LossReason::Leadership(reason))),
            Some(TermEnd::Relinquished) => Err(RecipeError::Lost(LossReason::Relinquished)),
            Some(TermEnd::LatchClosed) => Err(RecipeError::Lost(LossReason::Closed)),
        }
    }

    /// The loss as a [`LossSignal`](crate::LossSignal): `Some(reason)` once leadership is
    /// lost (at once if it already is), `None` once the term ends without a loss
    /// (relinquished, latch closed). Each call makes an independent signal: await it (in
    /// `select!` on any executor) or [`wait`](crate::LossSignal::wait) with a timeout.
    pub fn lost(&self) -> LossSignal<LeadershipLost> {
        self.term.inner.lock().loss.signal()
    }

    /// How many loss signals of this term live, and how many hold a waker.
    #[doc(hidden)]
    pub fn loss_signal_counts(&self) -> (usize, usize) {
        self.term.inner.lock().loss.counts()
    }

    /// Ends this term if it still lasts: the latch deletes the term's node (the next
    /// participant leads) and joins again at the back. Returns whether the term was
    /// still current. Waits for the latch's task to do it, so it fails with
    /// `InvalidArgument` on the recipes' driver thread (use
    /// [`relinquish_async`](Self::relinquish_async) there).
    pub fn relinquish(&self) -> Result<bool> {
        blocking_relinquish(&self.commands, Some(self.term.number))
    }

    /// Async [`relinquish`](Self::relinquish), for any executor; no thread waits for it.
    /// Once polled, the request stands: dropping the future does not take it back.
    pub async fn relinquish_async(&self) -> Result<bool> {
        relinquish(&self.commands, Some(self.term.number)).await
    }
}

/// Asks the task to end term `term` (any if `None`); whether a term ended.
pub(super) async fn relinquish(commands: &Commands, term: Option<u64>) -> Result<bool> {
    let (done, answer) = Reply::new();
    if commands.send(Command::Relinquish { term, done }).is_err() {
        return Ok(false); // the latch has stopped: no term left
    }
    Ok(poll_fn(|cx| answer.poll_answer(cx)).await.unwrap_or(false))
}

/// [`relinquish`], blocking; refused on the driver thread, where the task that answers
/// runs.
pub(super) fn blocking_relinquish(commands: &Commands, term: Option<u64>) -> Result<bool> {
    refuse_on_driver()?;
    block_on(relinquish(commands, term))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits until `commands` holds a command.
    fn queued(commands: &Commands) {
        crate::runtime::drive(poll_fn(|cx| commands.poll_ready(cx)));
    }

    #[test]
    fn a_command_is_answered_or_dropped_unanswered_at_the_tasks_end() {
        let commands = Arc::new(Commands::default());
        let caller = {
            let commands = Arc::clone(&commands);
            std::thread::spawn(move || blocking_relinquish(&commands, Some(3)))
        };
        queued(&commands);
        let mut taken = commands.take();
        let Some(Command::Relinquish { term, done }) = taken.pop_front() else {
            panic!("no command");
        };
        assert_eq!(term, Some(3));
        done.send(true);
        assert!(caller.join().unwrap().unwrap());

        // The task ends with a command still queued: its caller hears "no term".
        let caller = {
            let commands = Arc::clone(&commands);
            std::thread::spawn(move || blocking_relinquish(&commands, None))
        };
        queued(&commands);
        commands.close();
        assert!(!caller.join().unwrap().unwrap());
        // And later ones are refused at once.
        assert!(!blocking_relinquish(&commands, None).unwrap());
    }

    #[test]
    fn a_blocking_call_on_the_driver_fails_instead_of_waiting_for_itself() {
        let commands = Arc::new(Commands::default());
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let on_task = Arc::clone(&commands);
        let task = crate::runtime::spawn(
            "latch-test",
            move |_stop| async move {
                let blocking = blocking_relinquish(&on_task, None);
                // The async form awaits instead (answered here by the queue's end).
                on_task.close();
                let awaited = relinquish(&on_task, None).await;
                sender.send((blocking, awaited)).unwrap();
            },
            || {},
        )
        .unwrap();
        let (blocking, awaited) = receiver.recv().unwrap();
        assert!(matches!(blocking, Err(RecipeError::InvalidArgument(_))));
        assert!(matches!(awaited, Ok(false)));
        task.join();
    }
}
