//! The latch's task: joins, watches its predecessor, leads, rejoins after a loss.

use super::*;

mod protocol;

// ---------------------------------------------------------------------------------------
// The latch's task.
// ---------------------------------------------------------------------------------------

/// What the latch's one watch is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// The node before ours (a name in the directory).
    Predecessor(String),
    /// The directory's children (the leader's watch, or waiting for it to drain).
    Children,
}

pub(super) struct Armed {
    pub(super) watch: Watch,
    pub(super) target: Target,
    /// What polling the watch returned (it is taken by that poll).
    pub(super) fired: Option<zookeeper_mt::Result<zookeeper_mt::WatchedEvent>>,
}

/// Our node in the directory.
pub(super) struct OwnNode {
    pub(super) name: String,
    pub(super) token: i64,
}

/// Whether the task goes on, or stops for good with an error.
pub(super) enum Flow {
    Go,
    Stop(RecipeError),
}

pub(super) struct Worker {
    pub(super) config: Arc<Config>,
    /// The session worked on, and the retry pause.
    pub(super) following: Following,
    pub(super) shared: Arc<Shared>,
    pub(super) out: Arc<EventQueue<LeadershipBuffer>>,
    pub(super) commands: Arc<Commands>,
    /// Since when the connection is down (for the grace).
    pub(super) disconnected_since: Option<Instant>,
    /// Work to do once connected.
    pub(super) dirty: bool,
    pub(super) node: Option<OwnNode>,
    /// The tag of a create whose reply was lost: its node may exist.
    pub(super) creating: Option<String>,
    /// Our nodes of ended terms, to delete (full paths).
    pub(super) stale: Vec<String>,
    /// The counter is at its end: wait for the directory to drain.
    pub(super) exhausted: bool,
    pub(super) watch: Option<Armed>,
    pub(super) term: Option<Arc<Term>>,
    pub(super) terms: u64,
}

impl Drop for Worker {
    /// However the task ends (a panic included), no command waits for it any more.
    fn drop(&mut self) {
        self.commands.close();
    }
}

impl Worker {
    pub(super) fn new(
        client: Client,
        config: Arc<Config>,
        shared: Arc<Shared>,
        out: Arc<EventQueue<LeadershipBuffer>>,
        commands: Arc<Commands>,
    ) -> Worker {
        Worker {
            // Subscribes before the first request, so no state change is missed. A
            // read-only server cannot take the latch's writes.
            following: Following::new(client, false, config.retry),
            config,
            shared,
            out,
            commands,
            disconnected_since: None,
            dirty: true,
            node: None,
            creating: None,
            stale: Vec::new(),
            exhausted: false,
            watch: None,
            term: None,
            terms: 0,
        }
    }

    /// The session's handle.
    pub(super) fn zk(&self) -> &ZooKeeper {
        &self.following.zk
    }

    pub(super) async fn run(mut self, stop: StopSignal) {
        // A stop abandons what the loop awaits; a create in flight is in `creating`,
        // and our node in `node` or `stale`, so `leave` withdraws them.
        let end = stop.unless_cancelled(self.follow(&stop)).await.flatten();
        // Leave: end the term, take the watch off, delete our nodes.
        let term_end = match &end {
            None => TermEnd::LatchClosed,
            Some(_) => TermEnd::Lost(LeadershipLost::Closed),
        };
        self.end_term(term_end, true);
        self.unwatch();
        self.leave().await;
        if let Some(reason) = &end {
            log::debug!("recipes: latch on {} stopped: {reason}", self.config.dir);
        }
        {
            let mut state = self.shared.state.lock();
            state.status = LatchStatus::Ended;
            state.node = None;
            state.end = end;
        }
        self.shared.notify();
        self.out.close();
    }

    /// The main loop: `None` when asked to stop, else why the latch stopped by itself.
    pub(super) async fn follow(&mut self, stop: &StopSignal) -> Option<RecipeError> {
        loop {
            if stop.is_stopped() {
                return None;
            }
            match self.following.changes() {
                Ok(changes) => {
                    for change in changes {
                        if let Flow::Stop(error) = self.on_change(change) {
                            return Some(error);
                        }
                    }
                }
                Err(error) => {
                    // The client was closed.
                    self.lose(LeadershipLost::Closed, false);
                    return Some(error);
                }
            }
            self.collect_fired();
            self.check_grace();
            for command in self.commands.take() {
                self.on_command(command).await;
            }
            if self.dirty && self.following.due() {
                if let Flow::Stop(error) = self.step().await {
                    return Some(error);
                }
                self.publish_status();
                // (A pause that has passed counts as pending until a step succeeds: the
                // wait below then returns at once.)
                if self.dirty && !self.following.retry_pending() {
                    continue; // more to do at once (a stop request is checked first)
                }
            }
            self.publish_status();
            self.wait(stop).await;
        }
    }

    /// Waits for something to handle: a stop, a state change, a command, the watch, the
    /// grace deadline or a retry.
    pub(super) async fn wait(&mut self, stop: &StopSignal) {
        let grace = match (&self.term, self.disconnected_since) {
            (Some(_), Some(since)) => Some(since + self.config.grace),
            _ => None,
        };
        // The session's earliest possible expiry ends a term too (see `liveness`).
        let bound = self.term.as_ref().map(|term| term.loss_deadline());
        let grace = match (grace, bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let retry = if self.dirty {
            self.following.work_deadline()
        } else {
            None
        };
        let deadline = match (grace, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let (commands, watch) = (&self.commands, &mut self.watch);
        self.following
            .wait(stop, deadline, |cx| {
                let mut ready = commands.poll_ready(cx).is_ready();
                if let Some(armed) = watch {
                    if armed.fired.is_none() {
                        if let Poll::Ready(outcome) = Pin::new(&mut armed.watch).poll(cx) {
                            armed.fired = Some(outcome);
                        }
                    }
                    ready |= armed.fired.is_some();
                }
                if ready {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await
    }

    // -----------------------------------------------------------------------------------
    // Connection states, commands, the watch.
    // -----------------------------------------------------------------------------------

    /// Acts on a connection change (the common rules were applied by `following`).
    pub(super) fn on_change(&mut self, change: Change) -> Flow {
        match change {
            Change::Connected => {
                self.disconnected_since = None;
            }
            Change::Suspended { .. } => {
                // Read-only counts as disconnected: a read-only server cannot take our
                // writes.
                self.disconnected_since.get_or_insert_with(Instant::now);
                self.check_grace();
            }
            Change::Reconnected => {
                self.disconnected_since = None;
                // Watches survived; look again (after catching up: `sync_first`) at
                // what changed.
                self.dirty = true;
            }
            Change::Lost { end } => {
                self.disconnected_since = None;
                let reason = match self.following.lost_state {
                    Some(SessionState::Expired) => LeadershipLost::SessionExpired,
                    _ => LeadershipLost::Closed,
                };
                // The session's nodes and watches went with it.
                self.lose(reason, false);
                self.forget_session();
                if let Some(end) = end {
                    return Flow::Stop(end);
                }
            }
            Change::NewSession => {
                // Normally done on `Lost` already: the old session's nodes are gone.
                self.lose(LeadershipLost::SessionExpired, false);
                self.forget_session();
                self.disconnected_since = None;
                self.dirty = true;
            }
        }
        Flow::Go
    }

    /// Forgets what the ended session held: its nodes and watch went with it.
    fn forget_session(&mut self) {
        self.forget_watch();
        self.node = None;
        self.creating = None;
        self.stale.clear();
    }

    /// Reports a disconnection that outlasted the grace, or a term whose session may
    /// have expired (see `liveness`), whichever comes first.
    pub(super) fn check_grace(&mut self) {
        if let (Some(_), Some(since)) = (&self.term, self.disconnected_since) {
            if since.elapsed() >= self.config.grace {
                self.lose(LeadershipLost::Disconnected, true);
            }
        }
        // `end()` applies the bound.
        if self.term.as_ref().is_some_and(|term| term.end().is_some()) {
            self.lose(LeadershipLost::Disconnected, true);
        }
    }

    pub(super) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Relinquish { term, done } => {
                let current = self.term.as_ref().map(|t| t.number);
                let ended = current.is_some() && (term.is_none() || term == current);
                if ended {
                    self.end_term(TermEnd::Relinquished, true);
                    if self.following.connected {
                        // Hand over now; the next step joins again at the back.
                        self.delete_stale().await;
                    }
                    self.dirty = true;
                    self.publish_status();
                }
                done.send(ended);
            }
        }
    }

    /// Takes the watch's event if it fired.
    pub(super) fn collect_fired(&mut self) {
        let Some(armed) = &mut self.watch else {
            return;
        };
        let outcome = match armed.fired.take() {
            Some(outcome) => outcome,
            None => match armed.watch.try_get() {
                Ok(None) => return,
                Ok(Some(event)) => Ok(event),
                Err(error) => Err(error),
            },
        };
        let armed = self.watch.take();
        self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        let Ok(event) = outcome else {
            return; // the handle closed: the state feed reports it
        };
        if event.event_type == EventType::Session {
            return; // the session ended: the state feed reports it
        }
        if matches!(
            armed,
            Some(Armed {
                target: Target::Predecessor(_),
                ..
            })
        ) {
            self.shared.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        self.dirty = true;
    }

    /// Replaces the watch (the old one is taken off).
    pub(super) fn set_watch(&mut self, watch: Watch, target: Target) {
        self.unwatch();
        self.watch = Some(Armed {
            watch,
            target,
            fired: None,
        });
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the watch off (locally: the server's copy fires into nothing).
    pub(super) fn unwatch(&mut self) {
        if let Some(armed) = self.watch.take() {
            let _ = self.zk().remove_watch(&armed.watch);
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Drops the watch of a session that ended (the client freed it already).
    pub(super) fn forget_watch(&mut self) {
        if self.watch.take().is_some() {
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    // -----------------------------------------------------------------------------------
    // Terms.
    // -----------------------------------------------------------------------------------

    pub(super) fn elect(&mut self, token: i64, node: String) {
        self.terms += 1;
        let term = Arc::new(Term {
            number: self.terms,
            token,
            node,
            generation: self.following.generation,
            inner: Mutex::default(),
            clock: self.zk().session_clock(),
            alive: Mutex::new(Some(crate::support::liveness::keep_alive(self.zk()))),
            alarm: Mutex::new(None),
            ended: Default::default(),
        });
        term.alarm();
        self.term = Some(Arc::clone(&term));
        self.shared.state.lock().term = Some(term);
        self.out.update(|b| {
            b.push(LeadershipEvent::BecameLeader {
                term: self.terms,
                token,
                generation: self.following.generation,
            })
        });
        self.publish_status();
    }

    /// Ends the current term, if any. Its node is never reused: if the session may still
    /// hold it (`node_may_live`), it is deleted once connected; else it went with the
    /// session (or someone deleted it).
    pub(super) fn end_term(&mut self, end: TermEnd, node_may_live: bool) {
        let Some(term) = self.term.take() else {
            return;
        };
        self.shared.state.lock().term = None;
        term.finish(end);
        self.out.update(|b| {
            b.push(LeadershipEvent::LostLeadership {
                term: term.number,
                end,
            })
        });
        if let Some(node) = self.node.take() {
            if node_may_live {
                self.stale
                    .push(format!("{}/{}", self.config.dir, node.name));
            }
        }
        if matches!(
            self.watch,
            Some(Armed {
                target: Target::Children,
                ..
            })
        ) {
            self.unwatch();
        }
        self.shared.notify();
    }

    /// Reports a loss of leadership (if leading). `node_may_live`: the session may still
    /// hold our node (it is deleted once connected); else it is gone with the session.
    pub(super) fn lose(&mut self, reason: LeadershipLost, node_may_live: bool) {
        if self.term.is_none() {
            return;
        }
        log::info!("recipes: latch on {}: {reason}", self.config.dir);
        self.end_term(TermEnd::Lost(reason), node_may_live);
        self.dirty = true;
    }

    pub(super) fn publish_status(&self) {
        let status = if self.term.is_some() {
            LatchStatus::Leading
        } else if self.exhausted {
            LatchStatus::Exhausted
        } else if self.node.is_some() {
            LatchStatus::Waiting
        } else {
            LatchStatus::Joining
        };
        let node = self
            .node
            .as_ref()
            .map(|n| format!("{}/{}", self.config.dir, n.name));
        let mut state = self.shared.state.lock();
        if state.status != status || state.node != node {
            state.status = status;
            state.node = node;
            drop(state);
            self.shared.notify();
        }
    }

    // -----------------------------------------------------------------------------------
    // The steps.
    // -----------------------------------------------------------------------------------

    /// After a failed request: retry later, or stop for an error that retrying cannot
    /// cure.
    pub(super) fn failed(&mut self, error: Error) -> Flow {
        self.dirty = true;
        if error.is_retryable() || error.is_session_terminal() {
            // Retryable: the state feed may not show the loss yet, retry after a pause.
            // Terminal: `Lost` is on its way through the state feed.
            self.following.failed(&error);
            Flow::Go
        } else {
            Flow::Stop(error.into())
        }
    }
}
