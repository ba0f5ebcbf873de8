//! How a guard learns of its loss: its shared state and each `Lock` value's view of its session (and the monitor thread applying session events).

use super::*;

/// A guard's loss state, shared with the [`Shared`] view of its [`Lock`] and the monitor
/// thread.
pub(super) struct GuardState {
    pub(super) node: String,
    pub(super) inner: Mutex<GuardInner>,
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
    pub(super) subscribers: Vec<Sender<LockLost>>,
}

impl GuardState {
    pub(super) fn new(node: String) -> GuardState {
        GuardState {
            node,
            inner: Mutex::default(),
        }
    }

    /// Records the first loss and tells every subscriber (nothing once released).
    pub(super) fn declare(&self, reason: LockLost) {
        let mut inner = self.inner.lock();
        if inner.released || inner.reason.is_some() {
            return;
        }
        inner.reason = Some(reason);
        for subscriber in inner.subscribers.drain(..) {
            let _ = subscriber.try_send(reason);
        }
    }

    /// A new receiver of the loss, and whether the node watch is to be asked for now
    /// (the first subscription of a guard not lost yet).
    pub(super) fn subscribe(&self) -> (Receiver<LockLost>, bool) {
        let (sender, receiver) = crossbeam_channel::bounded(1);
        let mut inner = self.inner.lock();
        if let Some(reason) = inner.reason {
            let _ = sender.try_send(reason);
            return (receiver, false);
        }
        if inner.released {
            return (receiver, false); // the sender is dropped: it never fires
        }
        inner.subscribers.push(sender);
        let first = !std::mem::replace(&mut inner.watched, true);
        (receiver, first)
    }

    pub(super) fn reason(&self) -> Option<LockLost> {
        self.inner.lock().reason
    }

    pub(super) fn is_released(&self) -> bool {
        self.inner.lock().released
    }

    /// Marks the guard released (no loss is recorded from now on; subscribers see their
    /// channel close) and returns the loss recorded before, if any.
    pub(super) fn finish(&self) -> Option<LockLost> {
        let mut inner = self.inner.lock();
        inner.released = true;
        inner.subscribers.clear();
        inner.reason
    }
}

/// What one [`Lock`] value knows of its session, for its guards: its own subscription to
/// the session events and the view they build. The events are applied by whoever looks
/// first (a guard asked whether it is lost, an acquisition registering its guard, the
/// monitor thread), always under the view's lock, so a guard is judged on every event
/// that came before the look.
pub(super) struct Shared {
    pub(super) zk: ZooKeeper,
    pub(super) grace: Duration,
    pub(super) events: Receiver<WatchedEvent>,
    pub(super) view: Mutex<SessionView>,
}

#[derive(Default)]
pub(super) struct SessionView {
    /// The guards held now (registered when acquired, removed when released).
    pub(super) guards: Vec<Arc<GuardState>>,
    /// The session is over (expired, closed): every guard is lost, now and later.
    pub(super) ended: Option<LockLost>,
    /// Disconnected since then (`None`: connected).
    pub(super) disconnected_since: Option<Instant>,
    /// The current disconnection has outlasted the grace (and was reported).
    pub(super) grace_over: bool,
    /// Guards whose node the monitor thread is to watch, not yet taken by it.
    pub(super) to_watch: Vec<Arc<GuardState>>,
    /// Whether the monitor thread serves this value now.
    pub(super) monitored: bool,
}

impl Shared {
    pub(super) fn new(zk: &ZooKeeper, grace: Duration) -> Shared {
        // Subscribe first, then read the state: no change falls between the two.
        let events = zk.session_events().into_receiver();
        let mut view = SessionView::default();
        match zk.state() {
            state if state.is_connected() => {}
            SessionState::Expired => view.ended = Some(LockLost::SessionExpired),
            state if state.is_terminal() => view.ended = Some(LockLost::Closed),
            _ => view.disconnected_since = Some(Instant::now()),
        }
        Shared {
            zk: zk.clone(),
            grace,
            events,
            view: Mutex::new(view),
        }
    }

    /// Applies the session events that have arrived, in order, each followed by the
    /// grace check (so with no grace a disconnection counts even if the reconnection
    /// arrived before anyone looked).
    pub(super) fn catch_up(&self, view: &mut SessionView) {
        loop {
            match self.events.try_recv() {
                Ok(event) => match event.state {
                    SessionState::Expired => self.end(view, LockLost::SessionExpired),
                    SessionState::AuthFailed | SessionState::Closed => {
                        self.end(view, LockLost::Closed)
                    }
                    state if state.is_connected() => {
                        view.disconnected_since = None;
                        view.grace_over = false;
                    }
                    _ => {
                        view.disconnected_since.get_or_insert_with(Instant::now);
                        self.check_grace(view);
                    }
                },
                Err(TryRecvError::Empty) => break,
                // The handle was closed: the stream has ended.
                Err(TryRecvError::Disconnected) => {
                    self.end(view, LockLost::Closed);
                    break;
                }
            }
        }
        self.check_grace(view);
    }

    /// Reports a disconnection that has outlasted the grace (once).
    pub(super) fn check_grace(&self, view: &mut SessionView) {
        if let Some(since) = view.disconnected_since {
            if !view.grace_over && since.elapsed() >= self.grace {
                view.grace_over = true;
                for guard in &view.guards {
                    guard.declare(LockLost::Disconnected);
                }
            }
        }
    }

    /// The session is over: every guard, held now or later, is lost.
    pub(super) fn end(&self, view: &mut SessionView, reason: LockLost) {
        view.ended.get_or_insert(reason);
        for guard in &view.guards {
            guard.declare(reason);
        }
    }

    /// Brings the view up to date (cheap: a lock and a channel poll).
    pub(super) fn refresh(&self) {
        self.catch_up(&mut self.view.lock());
    }

    /// A new guard, just acquired: from now on it hears of every session loss. The
    /// events before are applied first: the acquisition's last reply came after them
    /// (the client delivers session events and replies in one order), so a
    /// disconnection it recovered from counts for older guards only.
    pub(super) fn register(self: &Arc<Self>, guard: &Arc<GuardState>) {
        let serve = {
            let mut view = self.view.lock();
            self.catch_up(&mut view);
            if let Some(reason) = view.ended {
                guard.declare(reason);
            } else if view.grace_over {
                guard.declare(LockLost::Disconnected);
            }
            view.guards.push(Arc::clone(guard));
            // A grace is timed by the monitor thread while guards are held.
            !self.grace.is_zero() && !std::mem::replace(&mut view.monitored, true)
        };
        if serve {
            monitor::serve(Arc::clone(self));
        }
    }

    /// A released guard. The last one tells the monitor thread (if it serves this
    /// value), which then lets go of it: it must not keep the handle open.
    pub(super) fn forget(self: &Arc<Self>, guard: &Arc<GuardState>) {
        let tell_monitor = {
            let mut view = self.view.lock();
            if let Some(index) = view.guards.iter().position(|g| Arc::ptr_eq(g, guard)) {
                view.guards.swap_remove(index);
            }
            view.monitored && view.guards.is_empty()
        };
        if tell_monitor {
            monitor::serve(Arc::clone(self));
        }
    }

    /// Has the monitor thread watch the guard's node.
    pub(super) fn watch(self: &Arc<Self>, guard: &Arc<GuardState>) {
        {
            let mut view = self.view.lock();
            view.to_watch.push(Arc::clone(guard));
            view.monitored = true;
        }
        monitor::serve(Arc::clone(self));
    }

    /// When the current disconnection outlasts the grace, unless reported already.
    pub(super) fn grace_deadline(&self) -> Option<Instant> {
        let view = self.view.lock();
        match view.disconnected_since {
            Some(since) if !view.grace_over && view.ended.is_none() => Some(since + self.grace),
            _ => None,
        }
    }
}

/// The one thread of the process that serves what needs someone awake: the node watches
/// of guards asked for [`LockGuard::lost`] and the grace timers of locks with a
/// disconnect grace. It runs while it has something to serve (and a second longer).
pub(super) mod monitor {
    use super::{GuardState, LockLost, Shared};
    use crate::support::withdraw_watch;
    use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};
    use parking_lot::Mutex;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use zookeeper::{Error, EventType, SessionState, Watch};

    /// The thread's inbox: values to serve (again); `None` while no thread runs.
    static INBOX: Mutex<Option<Sender<Arc<Shared>>>> = Mutex::new(None);

    /// How long the thread stays with nothing to serve, for the next request.
    const LINGER: Duration = Duration::from_secs(1);

    /// How soon an own-node watch that could not be set for a connection loss is tried
    /// again while the session says it is connected (it may have reconnected meanwhile).
    const REARM_RETRY: Duration = Duration::from_millis(100);

    /// Has the thread look at `shared` (new guards to watch, a grace to time), starting
    /// the thread if none runs.
    pub(super) fn serve(shared: Arc<Shared>) {
        let mut inbox = INBOX.lock();
        if let Some(sender) = inbox.as_ref() {
            // The thread drops its receiver only after taking the sender out under this
            // lock: the send cannot fail here.
            let _ = sender.send(shared);
            return;
        }
        let (sender, receiver) = crossbeam_channel::unbounded();
        let spawned = std::thread::Builder::new()
            .name("zk-lock-monitor".into())
            .spawn(move || Monitor::default().run(receiver));
        match spawned {
            Ok(_) => {
                let _ = sender.send(shared);
                *inbox = Some(sender);
            }
            // Guards still learn of session losses when asked (`is_lost`); only the
            // pushes to `lost()` receivers and node deletions are missing.
            Err(error) => log::warn!("lock: cannot start the loss monitor: {error}"),
        }
    }

    /// A guard whose node the thread watches.
    struct Watched {
        guard: Arc<GuardState>,
        /// `None`: to be (re)armed once connected.
        watch: Option<Watch>,
    }

    /// A [`Shared`] the thread serves, with the watches of its guards.
    struct Source {
        shared: Arc<Shared>,
        watched: Vec<Watched>,
    }

    #[derive(Default)]
    struct Monitor {
        sources: Vec<Source>,
    }

    /// What woke the thread.
    enum Wake {
        Inbox,
        Events(usize),
        Watch(usize, usize),
        Timer,
    }

    impl Monitor {
        fn run(mut self, inbox: Receiver<Arc<Shared>>) {
            loop {
                while let Ok(shared) = inbox.try_recv() {
                    self.add(shared);
                }
                self.tidy();
                if self.sources.is_empty() {
                    match inbox.recv_timeout(LINGER) {
                        Ok(shared) => self.add(shared),
                        Err(_) => {
                            let mut slot = INBOX.lock();
                            match inbox.try_recv() {
                                Ok(shared) => self.add(shared),
                                Err(_) => {
                                    *slot = None;
                                    return;
                                }
                            }
                        }
                    }
                    continue;
                }
                match self.next_wake(&inbox) {
                    Wake::Inbox | Wake::Timer => self.refresh_all(),
                    Wake::Events(source) => {
                        let source = &mut self.sources[source];
                        source.shared.refresh();
                        if source.shared.zk.state().is_connected() {
                            rearm(source);
                        }
                    }
                    Wake::Watch(source, index) => self.fired(source, index),
                }
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
            for guard in to_watch {
                watch(source, guard);
            }
        }

        /// Drops the watches of released guards and the sources with nothing left to
        /// serve (under their view's lock, so a new request re-adds them).
        fn tidy(&mut self) {
            let mut withdrawn = Vec::new();
            self.sources.retain_mut(|source| {
                let (released, kept): (Vec<_>, Vec<_>) = source
                    .watched
                    .drain(..)
                    .partition(|w| w.guard.is_released());
                source.watched = kept;
                let zk = &source.shared.zk;
                withdrawn.extend(released.into_iter().map(|w| (zk.clone(), w.watch)));
                let needed = {
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
                };
                if !needed {
                    withdrawn.extend(source.watched.drain(..).map(|w| (zk.clone(), w.watch)));
                }
                needed
            });
            // Outside every view lock: a removal may wait for the client's handle lock.
            for (zk, watch) in withdrawn {
                if let Some(watch) = watch {
                    withdraw_watch(&zk, &watch);
                }
            }
        }

        /// Applies every source's events and timers, and re-arms the watches a
        /// connection loss kept from being set.
        fn refresh_all(&mut self) {
            for source in &mut self.sources {
                source.shared.refresh();
                if source.shared.zk.state().is_connected() {
                    rearm(source);
                }
            }
        }

        /// Waits for the inbox, a source's session events, an armed watch, or the next
        /// timer (a grace running out, a watch to re-arm).
        fn next_wake(&self, inbox: &Receiver<Arc<Shared>>) -> Wake {
            let mut deadline: Option<Instant> = None;
            let mut earliest = |at: Instant| {
                deadline = Some(deadline.map_or(at, |d: Instant| d.min(at)));
            };
            let mut select = Select::new();
            select.recv(inbox);
            let mut operations = vec![Wake::Inbox];
            for (s, source) in self.sources.iter().enumerate() {
                select.recv(&source.shared.events);
                operations.push(Wake::Events(s));
                if let Some(at) = source.shared.grace_deadline() {
                    earliest(at);
                }
                for (w, watched) in source.watched.iter().enumerate() {
                    match &watched.watch {
                        Some(watch) => {
                            select.recv(watch.receiver());
                            operations.push(Wake::Watch(s, w));
                        }
                        None => earliest(Instant::now() + REARM_RETRY),
                    }
                }
            }
            let ready = match deadline {
                Some(at) => select.ready_deadline(at),
                None => Ok(select.ready()),
            };
            match ready {
                Ok(index) => operations.swap_remove(index),
                Err(_) => Wake::Timer,
            }
        }

        /// A watch (may have) fired.
        fn fired(&mut self, s: usize, w: usize) {
            let source = &mut self.sources[s];
            let outcome = match &source.watched[w].watch {
                Some(watch) => watch.receiver().try_recv(),
                None => return,
            };
            let event = match outcome {
                Ok(event) => event,
                Err(TryRecvError::Empty) => return, // not ready after all
                Err(TryRecvError::Disconnected) => {
                    source
                        .watched
                        .swap_remove(w)
                        .guard
                        .declare(LockLost::Closed);
                    return;
                }
            };
            let guard = source.watched.swap_remove(w).guard;
            match event.event_type {
                EventType::NodeDeleted => guard.declare(LockLost::NodeDeleted),
                EventType::Session => guard.declare(match event.state {
                    SessionState::Expired => LockLost::SessionExpired,
                    _ => LockLost::Closed,
                }),
                // Data changed or the watch was removed: watch again.
                _ => watch(source, guard),
            }
        }
    }

    /// Starts watching the guard's node.
    fn watch(source: &mut Source, guard: Arc<GuardState>) {
        if guard.is_released() {
            return;
        }
        match arm(source, &guard.node) {
            Ok(watch) => source.watched.push(Watched { guard, watch }),
            Err(reason) => guard.declare(reason),
        }
    }

    /// Arms again the watches that a connection loss kept from being set.
    fn rearm(source: &mut Source) {
        let mut index = 0;
        while index < source.watched.len() {
            if source.watched[index].watch.is_none() {
                let node = source.watched[index].guard.node.clone();
                match arm(source, &node) {
                    Ok(watch) => source.watched[index].watch = watch,
                    Err(reason) => {
                        source.watched.swap_remove(index).guard.declare(reason);
                        continue;
                    }
                }
            }
            index += 1;
        }
    }

    /// Sets the watch on a lock node: `Ok(None)` if the connection is down (armed again
    /// on reconnect), `Err(reason)` if the node or the session is gone.
    fn arm(source: &Source, node: &str) -> Result<Option<Watch>, LockLost> {
        match source.shared.zk.get_watch(node) {
            Ok((_, _, watch)) => Ok(Some(watch)),
            Err(Error::NoNode) => Err(LockLost::NodeDeleted),
            Err(error) if error.is_retryable() => Ok(None),
            Err(Error::SessionExpired) => Err(LockLost::SessionExpired),
            Err(_) => Err(LockLost::Closed),
        }
    }
}
