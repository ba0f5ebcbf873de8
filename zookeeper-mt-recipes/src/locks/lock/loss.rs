//! How a guard learns of its loss: its shared state and each `Lock` value's view of its
//! session (and the monitor task applying session events).

use super::*;
use crate::support::{liveness, LossSignal, LossSource, Wakes};
use std::task::{Context, Poll};
use zookeeper_mt::{SessionClock, SessionEvents, WeakZooKeeper};

/// A guard's loss state, shared with the [`Shared`] view of its [`Lock`] and the monitor.
pub(super) struct GuardState {
    pub(super) node: String,
    pub(super) inner: Mutex<GuardInner>,
    /// The guard's loss signals: settled by the first loss, or by the release.
    pub(super) loss: LossSource<LockLost>,
}

#[derive(Default)]
pub(super) struct GuardInner {
    /// The first loss, if any.
    pub(super) reason: Option<LockLost>,
    /// Set by the release (before the node is deleted): no loss is recorded after it, so
    /// our own delete is never reported.
    pub(super) released: bool,
    /// Whether the monitor was asked to watch the node (first [`LockGuard::lost`]).
    pub(super) watched: bool,
}

impl GuardState {
    pub(super) fn new(node: String) -> GuardState {
        GuardState {
            node,
            inner: Mutex::default(),
            loss: LossSource::default(),
        }
    }

    /// Records the first loss and settles the signals with it (nothing once released);
    /// their wakers go to `wakes`, woken once the caller's locks are released.
    pub(super) fn declare(&self, reason: LockLost, wakes: &mut Wakes) {
        let mut inner = self.inner.lock();
        if inner.released || inner.reason.is_some() {
            return;
        }
        inner.reason = Some(reason);
        self.loss.lose(reason, wakes);
    }

    /// A new signal of the loss, and whether the node watch is to be asked for now
    /// (the first subscription of a guard not lost yet).
    pub(super) fn subscribe(&self) -> (LossSignal<LockLost>, bool) {
        let signal = self.loss.signal();
        let mut inner = self.inner.lock();
        if inner.reason.is_some() || inner.released {
            return (signal, false); // settled already
        }
        let first = !std::mem::replace(&mut inner.watched, true);
        (signal, first)
    }

    pub(super) fn reason(&self) -> Option<LockLost> {
        self.inner.lock().reason
    }

    pub(super) fn is_released(&self) -> bool {
        self.inner.lock().released
    }

    /// Marks the guard released (no loss is recorded from now on; the signals not
    /// settled by a loss resolve to `None`) and returns the loss recorded before, if any.
    pub(super) fn finish(&self, wakes: &mut Wakes) -> Option<LockLost> {
        let mut inner = self.inner.lock();
        inner.released = true;
        if inner.reason.is_none() {
            self.loss.end(wakes);
        }
        inner.reason
    }

    /// Runs `call` with the handle while the guard is held and not lost; `None`
    /// otherwise. The guard's owner keeps a clone of the handle until after its release,
    /// which waits for this lock: the clone made here is never the last one, so dropping
    /// it never closes the handle (a close blocks; the monitor runs on the driver).
    pub(super) fn while_held<R>(
        &self,
        zk: &WeakZooKeeper,
        call: impl FnOnce(&ZooKeeper) -> R,
    ) -> Option<R> {
        let inner = self.inner.lock();
        if inner.released || inner.reason.is_some() {
            return None;
        }
        let zk = zk.upgrade()?;
        let result = call(&zk);
        drop(zk);
        drop(inner);
        Some(result)
    }
}

/// What one [`Lock`] value knows of its session, for its guards: its own subscription to
/// the session events and the view they build. The events are applied by whoever looks
/// first (a guard asked whether it is lost, an acquisition registering its guard, the
/// monitor task), always under the view's lock, so a guard is judged on every event
/// that came before the look, and each event is applied once, in order.
///
/// The handle is held weakly: the monitor must never keep it open, nor drop its last
/// clone (see [`GuardState::while_held`]).
pub(super) struct Shared {
    pub(super) zk: WeakZooKeeper,
    /// The session's liveness bound (read without the handle, see [`liveness`]).
    pub(super) clock: SessionClock,
    pub(super) grace: Duration,
    pub(super) view: Mutex<SessionView>,
}

pub(super) struct SessionView {
    /// This value's subscription to the session events: read only under the view's
    /// lock.
    events: SessionEvents,
    /// The guards held now (registered when acquired, removed when released).
    pub(super) guards: Vec<Arc<GuardState>>,
    /// The session is over (expired, closed): every guard is lost, now and later.
    pub(super) ended: Option<LockLost>,
    /// Disconnected since then (`None`: connected).
    pub(super) disconnected_since: Option<Instant>,
    /// The current disconnection has outlasted the grace (and was reported).
    pub(super) grace_over: bool,
    /// Guards whose node the monitor is to watch, not yet taken by it.
    pub(super) to_watch: Vec<Arc<GuardState>>,
    /// Whether the monitor serves this value now.
    pub(super) monitored: bool,
    /// The alarm pushing this value's losses at their instant while guards are held
    /// (see [`liveness::alarm`]).
    pub(super) alarm: Option<liveness::AlarmHandle>,
}

impl SessionView {
    /// Connected as far as the events applied so far tell.
    pub(super) fn connected(&self) -> bool {
        self.ended.is_none() && self.disconnected_since.is_none()
    }

    /// When the current disconnection outlasts `grace`, unless reported already.
    pub(super) fn grace_deadline(&self, grace: Duration) -> Option<Instant> {
        match self.disconnected_since {
            Some(since) if !self.grace_over && self.ended.is_none() => Some(since + grace),
            _ => None,
        }
    }
}

impl Shared {
    pub(super) fn new(zk: &ZooKeeper, grace: Duration) -> Shared {
        // Subscribe first, then read the state: no change falls between the two.
        let events = zk.session_events();
        let mut view = SessionView {
            events,
            guards: Vec::new(),
            ended: None,
            disconnected_since: None,
            grace_over: false,
            to_watch: Vec::new(),
            monitored: false,
            alarm: None,
        };
        match zk.state() {
            state if state.is_connected() => {}
            SessionState::Expired => view.ended = Some(LockLost::SessionExpired),
            state if state.is_terminal() => view.ended = Some(LockLost::Closed),
            _ => view.disconnected_since = Some(Instant::now()),
        }
        Shared {
            zk: zk.downgrade(),
            clock: zk.session_clock(),
            grace,
            view: Mutex::new(view),
        }
    }

    /// Applies the session events that have arrived, in order, each followed by the
    /// grace check (so with no grace a disconnection counts even if the reconnection
    /// arrived before anyone looked).
    pub(super) fn catch_up(&self, view: &mut SessionView, wakes: &mut Wakes) {
        self.apply_events(view, None, wakes);
    }

    /// [`catch_up`](Self::catch_up) for the monitor: also has `cx` woken by the next
    /// event. Whether any event (or the stream's end) was applied.
    pub(super) fn poll_events(
        &self,
        view: &mut SessionView,
        cx: &mut Context<'_>,
        wakes: &mut Wakes,
    ) -> bool {
        self.apply_events(view, Some(cx), wakes)
    }

    /// The one place events are applied: with `cx`, the events' waker is left
    /// registered (only the monitor gives one: the stream wakes one waker, the last
    /// given).
    fn apply_events(
        &self,
        view: &mut SessionView,
        mut cx: Option<&mut Context<'_>>,
        wakes: &mut Wakes,
    ) -> bool {
        let mut applied = false;
        loop {
            let next = match cx.as_deref_mut() {
                Some(cx) => view.events.poll_recv(cx),
                None => match view.events.try_recv() {
                    Ok(event) => Poll::Ready(Some(event)),
                    Err(zookeeper_mt::stream::TryRecvError::Empty) => Poll::Pending,
                    Err(zookeeper_mt::stream::TryRecvError::Disconnected) => Poll::Ready(None),
                },
            };
            match next {
                Poll::Ready(Some(event)) => {
                    applied = true;
                    match event.state {
                        SessionState::Expired => self.end(view, LockLost::SessionExpired, wakes),
                        SessionState::AuthFailed | SessionState::Closed => {
                            self.end(view, LockLost::Closed, wakes)
                        }
                        state if state.is_connected() => {
                            view.disconnected_since = None;
                            view.grace_over = false;
                        }
                        _ => {
                            view.disconnected_since.get_or_insert_with(Instant::now);
                            self.check_grace(view, wakes);
                        }
                    }
                }
                // The handle was closed: the stream has ended.
                Poll::Ready(None) => {
                    applied = true;
                    self.end(view, LockLost::Closed, wakes);
                    break;
                }
                Poll::Pending => break,
            }
        }
        self.check_grace(view, wakes);
        applied
    }

    /// Reports a disconnection that has outlasted the grace (once), and every guard held
    /// once the session may have expired (see [`liveness`]): whichever comes first.
    pub(super) fn check_grace(&self, view: &mut SessionView, wakes: &mut Wakes) {
        let now = Instant::now();
        if let Some(since) = view.disconnected_since {
            if !view.grace_over && now >= since + self.grace {
                view.grace_over = true;
                for guard in &view.guards {
                    guard.declare(LockLost::Disconnected, wakes);
                }
            }
        }
        if view.ended.is_some() || view.guards.is_empty() {
            return;
        }
        if liveness::past_deadline(&self.clock, now) {
            for guard in &view.guards {
                guard.declare(LockLost::Disconnected, wakes);
            }
        }
    }

    /// When the monitor must look again to report a loss in time: the end of the grace
    /// or the session's earliest possible expiry, whichever is first.
    pub(super) fn loss_at(&self, view: &SessionView) -> Option<Instant> {
        let grace = view.grace_deadline(self.grace);
        if view.ended.is_some() || view.guards.is_empty() {
            return grace;
        }
        // No bound (nothing answered): at once.
        let bound = Some(liveness::loss_deadline(&self.clock).unwrap_or_else(Instant::now));
        match (grace, bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The session is over: every guard, held now or later, is lost.
    pub(super) fn end(&self, view: &mut SessionView, reason: LockLost, wakes: &mut Wakes) {
        view.ended.get_or_insert(reason);
        for guard in &view.guards {
            guard.declare(reason, wakes);
        }
    }

    /// Brings the view up to date (cheap: a lock and a channel poll). The signals it
    /// settles are woken after the view's lock.
    pub(super) fn refresh(&self) {
        let mut wakes = Wakes::new();
        self.catch_up(&mut self.view.lock(), &mut wakes);
    }

    /// A new guard, just acquired: from now on it hears of every session loss. The
    /// events before are applied first: the acquisition's last reply came after them
    /// (the client delivers session events and replies in one order), so a
    /// disconnection it recovered from counts for older guards only.
    pub(super) fn register(self: &Arc<Self>, guard: &Arc<GuardState>) {
        let mut wakes = Wakes::new();
        let serve = {
            let mut view = self.view.lock();
            self.catch_up(&mut view, &mut wakes);
            if let Some(reason) = view.ended {
                guard.declare(reason, &mut wakes);
            } else if view.grace_over {
                guard.declare(LockLost::Disconnected, &mut wakes);
            }
            view.guards.push(Arc::clone(guard));
            // A grace is timed by the monitor while guards are held.
            !self.grace.is_zero() && !std::mem::replace(&mut view.monitored, true)
        };
        if serve {
            monitor::serve(Arc::clone(self));
        }
    }

    /// A released guard. The last one tells the monitor (if it serves this value),
    /// which then lets go of it.
    pub(super) fn forget(self: &Arc<Self>, guard: &Arc<GuardState>) {
        let tell_monitor = {
            let mut view = self.view.lock();
            if let Some(index) = view.guards.iter().position(|g| Arc::ptr_eq(g, guard)) {
                view.guards.swap_remove(index);
            }
            if view.guards.is_empty() {
                if let Some(alarm) = view.alarm.take() {
                    alarm.cancel();
                }
            }
            view.monitored && view.guards.is_empty()
        };
        if tell_monitor {
            monitor::serve(Arc::clone(self));
        }
    }

    /// Has the monitor watch the guard's node, and an alarm push this value's losses at
    /// their instant (a grace's end, the session's earliest expiry) to the guards'
    /// signals, on the timer thread: never later for a busy driver.
    pub(super) fn watch(self: &Arc<Self>, guard: &Arc<GuardState>) {
        let arm = {
            let mut view = self.view.lock();
            view.to_watch.push(Arc::clone(guard));
            view.monitored = true;
            view.alarm.is_none()
        };
        monitor::serve(Arc::clone(self));
        if arm {
            let shared = Arc::downgrade(self);
            let alarm = liveness::alarm(move |wakes| {
                let shared = shared.upgrade()?;
                let mut view = shared.view.lock();
                shared.catch_up(&mut view, wakes);
                let pending =
                    view.ended.is_none() && view.guards.iter().any(|g| g.reason().is_none());
                if !pending {
                    // The next `watch` arms a new one.
                    if let Some(alarm) = view.alarm.take() {
                        alarm.cancel();
                    }
                    return None;
                }
                shared.loss_at(&view)
            });
            let mut view = self.view.lock();
            if view.alarm.is_none() && !view.guards.is_empty() {
                view.alarm = Some(alarm);
            }
        }
    }
}

/// The one task of the process that serves what needs someone awake: the node watches
/// of guards asked for [`LockGuard::lost`] and the grace timers of locks with a
/// disconnect grace. It runs on the recipes' driver while it has something to serve; a
/// later request starts a new one.
///
/// Each time it is woken it looks at everything: its inbox, every served value's
/// session events (applied under the view's lock, as any look does), every watch and
/// `get` in flight, and its timer (a grace running out, a watch to arm again).
pub(super) mod monitor {
    use super::{GuardState, LockLost, Shared, Wakes};
    use crate::runtime::timer::{sleep_at, Sleep};
    use parking_lot::Mutex;
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use std::time::{Duration, Instant};
    use zookeeper_mt::{Error, EventType, SessionState, Stat, Watch, ZkFuture};

    /// The task's inbox: values to serve (again), and whether a task runs.
    struct Inbox {
        pending: Vec<Arc<Shared>>,
        running: bool,
        /// The running task's waker, taken by the next request.
        waker: Option<Waker>,
    }

    static INBOX: Mutex<Inbox> = Mutex::new(Inbox {
        pending: Vec::new(),
        running: false,
        waker: None,
    });

    /// How soon an own-node watch that could not be set for a connection loss is tried
    /// again while the session says it is connected (it may have reconnected meanwhile).
    const REARM_RETRY: Duration = Duration::from_millis(100);

    /// Has the task look at `shared` (new guards to watch, a grace to time), starting
    /// it if none runs.
    pub(super) fn serve(shared: Arc<Shared>) {
        let mut inbox = INBOX.lock();
        inbox.pending.push(shared);
        if inbox.running {
            let waker = inbox.waker.take();
            drop(inbox);
            if let Some(waker) = waker {
                waker.wake();
            }
            return;
        }
        let spawned = crate::runtime::spawn(
            "zk-lock-monitor",
            |_stop| Monitor::default().run(),
            || {
                log::error!("lock: the loss monitor failed; the next request starts another");
                let mut inbox = INBOX.lock();
                inbox.running = false;
                inbox.waker = None;
            },
        );
        match spawned {
            // Never stopped: it ends when it has nothing to serve.
            Ok(task) => {
                task.detach();
                inbox.running = true;
            }
            // Guards still learn of session losses when asked (`is_lost`); only the
            // pushes to `lost()` signals and node deletions are missing.
            Err(error) => {
                inbox.pending.clear();
                log::warn!("lock: cannot start the loss monitor: {error}");
            }
        }
    }

    /// Where the watch on a guard's node stands.
    enum Arming {
        /// To be set once connected, at `.0` at the latest (at once after a session
        /// event).
        Idle(Instant),
        /// The `get` that sets it is in flight.
        Asking(ZkFuture<(Vec<u8>, Stat, Watch)>),
        Armed(Watch),
    }

    /// A guard whose node the task watches.
    struct Watched {
        guard: Arc<GuardState>,
        arming: Arming,
    }

    /// A [`Shared`] the task serves, with the watches of its guards.
    struct Source {
        shared: Arc<Shared>,
        watched: Vec<Watched>,
    }

    #[derive(Default)]
    struct Monitor {
        sources: Vec<Source>,
        /// The pending timer and its deadline.
        timer: Option<(Instant, Sleep)>,
    }

    impl Monitor {
        async fn run(mut self) {
            std::future::poll_fn(|cx| self.poll_round(cx)).await
        }

        /// Serves everything that is ready; `Ready` once nothing is left to serve (and
        /// the inbox is empty, checked under its lock, so no request is missed).
        fn poll_round(&mut self, cx: &mut Context<'_>) -> Poll<()> {
            loop {
                let requests = {
                    let mut inbox = INBOX.lock();
                    inbox.waker = Some(cx.waker().clone());
                    std::mem::take(&mut inbox.pending)
                };
                for shared in requests {
                    self.add(shared);
                }
                let now = Instant::now();
                let mut deadline: Option<Instant> = None;
                for source in &mut self.sources {
                    if let Some(at) = serve_source(source, cx, now) {
                        deadline = Some(deadline.map_or(at, |d| d.min(at)));
                    }
                }
                self.tidy();
                if self.sources.is_empty() {
                    let mut inbox = INBOX.lock();
                    if inbox.pending.is_empty() {
                        inbox.running = false;
                        inbox.waker = None;
                        return Poll::Ready(());
                    }
                    continue;
                }
                if self.timer.as_ref().map(|(at, _)| *at) != deadline {
                    self.timer = deadline.map(|at| (at, sleep_at(Some(at))));
                }
                let due = match &mut self.timer {
                    Some((_, sleep)) => Pin::new(sleep).poll(cx).is_ready(),
                    None => false,
                };
                if !due {
                    return Poll::Pending;
                }
                self.timer = None; // due: look at everything again
            }
        }

        /// Starts serving `shared` (once) and takes its guards to watch.
        fn add(&mut self, shared: Arc<Shared>) {
            let position = self
                .sources
                .iter()
                .position(|s| Arc::ptr_eq(&s.shared, &shared));
            let index = position.unwrap_or_else(|| {
                self.sources.push(Source {
                    shared,
                    watched: Vec::new(),
                });
                self.sources.len() - 1
            });
            let source = &mut self.sources[index];
            let to_watch = std::mem::take(&mut source.shared.view.lock().to_watch);
            let now = Instant::now();
            source.watched.extend(
                to_watch
                    .into_iter()
                    .filter(|guard| !guard.is_released())
                    .map(|guard| Watched {
                        guard,
                        arming: Arming::Idle(now),
                    }),
            );
        }

        /// Drops the watches of released guards and the sources with nothing left to
        /// serve (under their view's lock, so a new request re-adds them). A dropped
        /// watch or `get` in flight leaves nothing registered.
        fn tidy(&mut self) {
            self.sources.retain_mut(|source| {
                source.watched.retain(|w| !w.guard.is_released());
                let mut view = source.shared.view.lock();
                let needed = view.ended.is_none()
                    && !view.guards.is_empty()
                    && (!source.shared.grace.is_zero()
                        || !source.watched.is_empty()
                        || !view.to_watch.is_empty());
                if !needed {
                    view.monitored = false;
                }
                needed
            });
        }
    }

    /// Applies the source's session events (and its grace), then moves each of its
    /// watches on. Returns when it wants to be looked at again.
    fn serve_source(source: &mut Source, cx: &mut Context<'_>, now: Instant) -> Option<Instant> {
        // The signals settled here are woken on return, after the view's lock.
        let mut wakes = Wakes::new();
        let shared = &source.shared;
        let (event, connected, grace_at) = {
            let mut view = shared.view.lock();
            let event = shared.poll_events(&mut view, cx, &mut wakes);
            (event, view.connected(), shared.loss_at(&view))
        };
        let mut deadline = grace_at;
        source.watched.retain_mut(|watched| {
            let step = advance(shared, watched, cx, now, connected, event, &mut wakes);
            if let Some(at) = step.again_at {
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
            step.keep
        });
        deadline
    }

    /// What [`advance`] left: whether the watch stays, and a time to look again.
    struct Step {
        keep: bool,
        again_at: Option<Instant>,
    }

    /// Moves one guard's watch on as far as it goes now: arms it (when connected), polls
    /// the `get` in flight and the armed watch, and reports what they tell.
    fn advance(
        shared: &Shared,
        watched: &mut Watched,
        cx: &mut Context<'_>,
        now: Instant,
        connected: bool,
        event: bool,
        wakes: &mut Wakes,
    ) -> Step {
        let done = Step {
            keep: false,
            again_at: None,
        };
        loop {
            match &mut watched.arming {
                Arming::Idle(at) => {
                    if !connected {
                        // A session event wakes the task once connected again.
                        return Step {
                            keep: true,
                            again_at: None,
                        };
                    }
                    if *at > now && !event {
                        return Step {
                            keep: true,
                            again_at: Some(*at),
                        };
                    }
                    let guard = &watched.guard;
                    match guard.while_held(&shared.zk, |zk| zk.get_watch_async(&guard.node)) {
                        Some(request) => watched.arming = Arming::Asking(request),
                        None => return done, // released or lost meanwhile
                    }
                }
                Arming::Asking(request) => match Pin::new(request).poll(cx) {
                    Poll::Pending => {
                        return Step {
                            keep: true,
                            again_at: None,
                        }
                    }
                    Poll::Ready(Ok((_, _, watch))) => watched.arming = Arming::Armed(watch),
                    Poll::Ready(Err(error)) if error.is_retryable() => {
                        // Armed again on reconnect (or after a pause if connected).
                        let at = now + REARM_RETRY;
                        watched.arming = Arming::Idle(at);
                        return Step {
                            keep: true,
                            again_at: connected.then_some(at),
                        };
                    }
                    Poll::Ready(Err(error)) => {
                        let reason = match error {
                            Error::NoNode => LockLost::NodeDeleted,
                            Error::SessionExpired => LockLost::SessionExpired,
                            _ => LockLost::Closed,
                        };
                        watched.guard.declare(reason, wakes);
                        return done;
                    }
                },
                Arming::Armed(watch) => match Pin::new(watch).poll(cx) {
                    Poll::Pending => {
                        return Step {
                            keep: true,
                            again_at: None,
                        }
                    }
                    Poll::Ready(Ok(fired)) => match fired.event_type {
                        EventType::NodeDeleted => {
                            watched.guard.declare(LockLost::NodeDeleted, wakes);
                            return done;
                        }
                        EventType::Session => {
                            let reason = match fired.state {
                                SessionState::Expired => LockLost::SessionExpired,
                                _ => LockLost::Closed,
                            };
                            watched.guard.declare(reason, wakes);
                            return done;
                        }
                        // Data changed or the watch was removed: watch again.
                        _ => watched.arming = Arming::Idle(now),
                    },
                    // The watch ended without an event: the handle is closed.
                    Poll::Ready(Err(_)) => {
                        watched.guard.declare(LockLost::Closed, wakes);
                        return done;
                    }
                },
            }
        }
    }
}
