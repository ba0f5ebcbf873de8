//! The latch thread: joins, watches its predecessor, leads, rejoins after a loss.

use super::*;

mod protocol;

// ---------------------------------------------------------------------------------------
// The latch thread.
// ---------------------------------------------------------------------------------------

/// The longest pause between retries after a failed request.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(1);

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
}

/// Our node in the directory.
pub(super) struct OwnNode {
    pub(super) name: String,
    pub(super) token: i64,
}

/// Whether the thread goes on, or stops for good with an error.
pub(super) enum Flow {
    Go,
    Stop(RecipeError),
}

pub(super) struct Worker {
    pub(super) config: Arc<Config>,
    pub(super) client: Client,
    pub(super) feed: StateFeed,
    pub(super) zk: ZooKeeper,
    pub(super) generation: u64,
    pub(super) shared: Arc<Shared>,
    pub(super) out: Arc<EventQueue<LeadershipBuffer>>,
    pub(super) commands: Receiver<Command>,
    pub(super) stop: Receiver<()>,
    /// Whether requests can be made now.
    pub(super) connected: bool,
    /// Since when the connection is down (for the grace).
    pub(super) disconnected_since: Option<Instant>,
    /// `sync` before the next listing (a recovery read after a reconnection).
    pub(super) sync_first: bool,
    pub(super) retry_at: Option<Instant>,
    pub(super) backoff: Duration,
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

impl Worker {
    pub(super) fn new(
        client: Client,
        config: Arc<Config>,
        shared: Arc<Shared>,
        out: Arc<EventQueue<LeadershipBuffer>>,
        commands: Receiver<Command>,
        stop: Receiver<()>,
    ) -> Worker {
        // Subscribe before the first request, so no state change is missed.
        let feed = client.feed();
        let session = client.session();
        Worker {
            config,
            client,
            feed,
            zk: session.zk,
            generation: session.generation,
            shared,
            out,
            commands,
            stop,
            connected: false,
            disconnected_since: None,
            sync_first: false,
            retry_at: None,
            backoff: Duration::from_millis(10),
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

    pub(super) fn run(mut self) {
        let end = self.follow();
        // Leave: end the term, take the watch off, delete our nodes.
        let term_end = match &end {
            None => TermEnd::LatchClosed,
            Some(_) => TermEnd::Lost(LeadershipLost::Closed),
        };
        self.end_term(term_end, true);
        self.unwatch();
        self.leave();
        if let Some(reason) = &end {
            log::debug!("recipes: latch on {} stopped: {reason}", self.config.dir);
        }
        {
            let mut state = self.shared.state.lock();
            state.status = LatchStatus::Ended;
            state.node = None;
            state.end = end;
        }
        self.shared.changed.notify_all();
        self.out.close();
    }

    pub(super) fn stop_requested(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// The main loop: `None` when asked to stop, else why the latch stopped by itself.
    pub(super) fn follow(&mut self) -> Option<RecipeError> {
        loop {
            if self.stop_requested() {
                return None;
            }
            let (states, ended) = self.feed.drain();
            for event in states {
                if let Flow::Stop(error) = self.on_state(event) {
                    return Some(error);
                }
            }
            if ended {
                self.lose(LeadershipLost::Closed, false);
                return Some(RecipeError::ZooKeeper(Error::Closed));
            }
            self.collect_fired();
            self.check_grace();
            while let Ok(command) = self.commands.try_recv() {
                self.on_command(command);
            }
            if self.connected && self.dirty && self.retry_at.map_or(true, |at| Instant::now() >= at)
            {
                self.retry_at = None;
                if let Flow::Stop(error) = self.step() {
                    return Some(error);
                }
                self.publish_status();
                if self.dirty && self.retry_at.is_none() {
                    continue; // more to do at once (a stop request is checked first)
                }
            }
            self.publish_status();
            self.wait();
        }
    }

    /// Blocks until something to handle: a stop, a state change, a command, the watch,
    /// the grace deadline or a retry.
    pub(super) fn wait(&self) {
        let mut select = Select::new();
        select.recv(&self.stop);
        self.feed.add_to(&mut select);
        select.recv(&self.commands);
        if let Some(armed) = &self.watch {
            select.recv(armed.watch.receiver());
        }
        let grace = match (&self.term, self.disconnected_since) {
            (Some(_), Some(since)) => Some(since + self.config.grace),
            _ => None,
        };
        let retry = match (self.connected && self.dirty, self.retry_at) {
            (true, Some(at)) => Some(at),
            (true, None) => Some(Instant::now()),
            _ => None,
        };
        let deadline = match (grace, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match deadline {
            Some(at) => {
                let _ = select.ready_deadline(at);
            }
            None => {
                select.ready();
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Connection states, commands, the watch.
    // -----------------------------------------------------------------------------------

    pub(super) fn on_state(&mut self, event: ConnectionEvent) -> Flow {
        if event.generation < self.generation {
            return Flow::Go; // about a session already replaced
        }
        match event.state {
            ConnectionState::Connected => {
                self.connected = true;
                self.disconnected_since = None;
            }
            ConnectionState::Suspended | ConnectionState::ReadOnly => {
                // A read-only server cannot take our writes: as good as disconnected.
                self.connected = false;
                self.disconnected_since.get_or_insert_with(Instant::now);
                self.check_grace();
            }
            ConnectionState::Reconnected => {
                self.connected = true;
                self.disconnected_since = None;
                // Watches survived; look again (after catching up) at what changed.
                self.sync_first = true;
                self.dirty = true;
                self.retry_at = None;
            }
            ConnectionState::Lost => {
                self.connected = false;
                self.disconnected_since = None;
                let state = self.zk.state();
                let reason = match state {
                    SessionState::Expired => LeadershipLost::SessionExpired,
                    _ => LeadershipLost::Closed,
                };
                // The session's nodes and watches went with it.
                self.lose(reason, false);
                self.forget_watch();
                self.node = None;
                self.creating = None;
                self.stale.clear();
                if !self.client.renews_sessions() {
                    return Flow::Stop(if state.is_terminal() {
                        session_error(state)
                    } else {
                        RecipeError::ZooKeeper(Error::Closed)
                    });
                }
            }
            ConnectionState::NewSession => {
                let session = self.client.session();
                if session.generation <= self.generation {
                    return Flow::Go;
                }
                // Normally done on `Lost` already: the old session's nodes are gone.
                self.lose(LeadershipLost::SessionExpired, false);
                self.node = None;
                self.creating = None;
                self.stale.clear();
                self.forget_watch();
                self.zk = session.zk;
                self.generation = session.generation;
                self.connected = true;
                self.disconnected_since = None;
                self.sync_first = false;
                self.dirty = true;
                self.retry_at = None;
            }
        }
        Flow::Go
    }

    /// Reports a disconnection that outlasted the grace.
    pub(super) fn check_grace(&mut self) {
        if let (Some(_), Some(since)) = (&self.term, self.disconnected_since) {
            if since.elapsed() >= self.config.grace {
                self.lose(LeadershipLost::Disconnected, true);
            }
        }
    }

    pub(super) fn on_command(&mut self, command: Command) {
        match command {
            Command::Relinquish { term, done } => {
                let current = self.term.as_ref().map(|t| t.number);
                let ended = current.is_some() && (term.is_none() || term == current);
                if ended {
                    self.end_term(TermEnd::Relinquished, true);
                    if self.connected {
                        // Hand over now; the next step joins again at the back.
                        self.delete_stale();
                    }
                    self.dirty = true;
                    self.publish_status();
                }
                let _ = done.send(ended);
            }
        }
    }

    /// Takes the watch's event if it fired.
    pub(super) fn collect_fired(&mut self) {
        let Some(armed) = &self.watch else {
            return;
        };
        let event = match armed.watch.try_get() {
            Ok(None) => return,
            Ok(Some(event)) => Some(event),
            Err(_) => None, // the handle closed: the state feed reports it
        };
        let armed = self.watch.take();
        self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        let Some(event) = event else {
            return;
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
        self.watch = Some(Armed { watch, target });
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the watch off (locally: the server's copy fires into nothing).
    pub(super) fn unwatch(&mut self) {
        if let Some(armed) = self.watch.take() {
            let _ = self.zk.remove_watch(&armed.watch);
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
            generation: self.generation,
            inner: Mutex::default(),
        });
        self.term = Some(Arc::clone(&term));
        self.shared.state.lock().term = Some(term);
        self.out.update(|b| {
            b.push(LeadershipEvent::BecameLeader {
                term: self.terms,
                token,
                generation: self.generation,
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
        self.shared.changed.notify_all();
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
            self.shared.changed.notify_all();
        }
    }

    // -----------------------------------------------------------------------------------
    // The steps.
    // -----------------------------------------------------------------------------------

    /// After a failed request: retry later, or stop for an error that retrying cannot
    /// cure.
    pub(super) fn failed(&mut self, error: Error) -> Flow {
        self.dirty = true;
        if error.is_retryable() {
            // The state feed may not show the loss yet: retry after a pause.
            self.retry_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            Flow::Go
        } else if error.is_session_terminal() {
            // `Lost` is on its way through the state feed.
            self.connected = false;
            Flow::Go
        } else {
            Flow::Stop(error.into())
        }
    }
}
