//! Following one session's events where they are delivered.

use super::*;

/// Where a [`Follower`] reports the states of its session.
pub(crate) trait Target: Send + Sync + 'static {
    /// Reports `state`, translated from the session state `raw`; called in event order,
    /// under the follower's lock: it must not block or run user code (queue it in
    /// `after`). `false`: stop following.
    fn report(&self, state: ConnectionState, raw: SessionState, after: &mut After) -> bool;
}

struct Subscription {
    events: SessionEvents,
    translator: Translator,
    /// The state at subscription, reported before any event.
    initial: Option<SessionState>,
}

/// Follows one session without a thread: it is the waker of its own session-event
/// subscription, so the thread that delivers an event (the C completion thread, or the
/// closing thread for the end) translates it and reports it, under a short lock of plain
/// data, in delivery order. It ends after `Lost` or once detached.
pub(crate) struct Follower<T: Target> {
    target: T,
    subscription: Mutex<Option<Subscription>>,
}

impl<T: Target> Follower<T> {
    /// Follows `zk` from now on: its state now is reported first (through `translator`:
    /// a fresh one reports it whatever it is, one made with [`Translator::after`] only if
    /// it differs), then every change. The subscription keeps the follower alive; it does
    /// not keep the session open.
    pub(crate) fn start(zk: &ZooKeeper, translator: Translator, target: T) -> Arc<Follower<T>> {
        let (events, state) = zk.session_events_with_state();
        let follower = Arc::new(Follower {
            target,
            subscription: Mutex::new(Some(Subscription {
                events,
                translator,
                initial: Some(state),
            })),
        });
        follower.drain();
        follower
    }

    /// Reports everything delivered so far, and registers itself as the waker for more.
    fn drain(self: &Arc<Self>) {
        let mut after = After::default();
        {
            let mut guard = self.subscription.lock();
            let waker = Waker::from(Arc::clone(self));
            let mut cx = Context::from_waker(&waker);
            while let Some(sub) = guard.as_mut() {
                let raw = match sub.initial.take() {
                    Some(state) => state,
                    None => match sub.events.poll_recv(&mut cx) {
                        Poll::Ready(Some(event)) if event.event_type == EventType::Session => {
                            event.state
                        }
                        Poll::Ready(Some(_)) => continue,
                        // The handle closed.
                        Poll::Ready(None) => SessionState::Closed,
                        Poll::Pending => break,
                    },
                };
                let state = match sub.translator.last() {
                    None => Some(sub.translator.initial(raw)),
                    Some(_) => sub.translator.on_session(raw),
                };
                let go_on = state.is_none_or(|state| self.target.report(state, raw, &mut after));
                if !go_on || sub.translator.last() == Some(ConnectionState::Lost) {
                    // Unsubscribed: the session prunes the subscription at its next event.
                    *guard = None;
                }
            }
        }
        after.run();
    }

    /// Stops following (the reader is gone).
    pub(crate) fn detach(&self) {
        let ended = self.subscription.lock().take();
        drop(ended);
    }
}

impl<T: Target> Wake for Follower<T> {
    fn wake(self: Arc<Self>) {
        self.drain();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.drain();
    }
}
