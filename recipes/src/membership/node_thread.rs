//! The persistent node's thread: creates the node, watches it, re-creates it after a deletion or a new session.

use super::*;

// ---------------------------------------------------------------------------------------
// The persistent node's thread.
// ---------------------------------------------------------------------------------------

pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the one watch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchOn {
    /// Our node (a `get` watch: deletion or data change).
    Own,
    /// Another session's node at our path (an `exists` watch).
    Conflict,
}

/// A create whose reply was lost.
pub(super) enum Pending {
    /// The fixed path (look for a node owned by our session).
    Fixed,
    /// A protected sequential create with this name prefix (full path).
    Tag(String),
}

pub(super) enum Flow {
    Go,
    Stop(RecipeError),
}

pub(super) struct NodeWorker {
    pub(super) config: Arc<NodeConfig>,
    pub(super) client: Client,
    pub(super) feed: StateFeed,
    pub(super) zk: ZooKeeper,
    pub(super) generation: u64,
    pub(super) shared: Arc<NodeShared>,
    pub(super) wake: Receiver<()>,
    pub(super) stop: Receiver<()>,
    pub(super) connected: bool,
    pub(super) sync_first: bool,
    pub(super) retry_at: Option<Instant>,
    pub(super) backoff: Duration,
    pub(super) dirty: bool,
    /// Our node's path while it exists.
    pub(super) node: Option<String>,
    pub(super) conflict: bool,
    pub(super) creating: Option<Pending>,
    pub(super) watch: Option<(Watch, WatchOn)>,
    /// The data serial last written to the node (0: unknown, write again).
    pub(super) written: u64,
}

impl NodeWorker {
    pub(super) fn new(
        client: Client,
        config: Arc<NodeConfig>,
        shared: Arc<NodeShared>,
        wake: Receiver<()>,
        stop: Receiver<()>,
    ) -> NodeWorker {
        let feed = client.feed();
        let session = client.session();
        NodeWorker {
            config,
            client,
            feed,
            zk: session.zk,
            generation: session.generation,
            shared,
            wake,
            stop,
            connected: false,
            sync_first: false,
            retry_at: None,
            backoff: Duration::from_millis(10),
            dirty: true,
            node: None,
            conflict: false,
            creating: None,
            watch: None,
            written: 0,
        }
    }

    pub(super) fn run(mut self) {
        let end = self.follow();
        self.unwatch();
        self.leave();
        if let Some(reason) = &end {
            log::debug!("recipes: node {} stopped: {reason}", self.config.path);
        }
        {
            let mut state = self.shared.state.lock();
            state.status = NodeStatus::Ended;
            state.path = None;
            state.end = end;
        }
        self.shared.changed.notify_all();
    }

    pub(super) fn follow(&mut self) -> Option<RecipeError> {
        loop {
            if matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected)) {
                return None;
            }
            let (states, ended) = self.feed.drain();
            for event in states {
                if let Flow::Stop(error) = self.on_state(event) {
                    return Some(error);
                }
            }
            if ended {
                return Some(RecipeError::ZooKeeper(Error::Closed));
            }
            while self.wake.try_recv().is_ok() {
                self.dirty = true;
            }
            self.collect_fired();
            if self.connected && self.dirty && self.retry_at.map_or(true, |at| Instant::now() >= at)
            {
                self.retry_at = None;
                if let Flow::Stop(error) = self.step() {
                    return Some(error);
                }
                self.publish();
                if self.dirty && self.retry_at.is_none() {
                    continue;
                }
            }
            self.publish();
            self.wait();
        }
    }

    pub(super) fn wait(&self) {
        let mut select = Select::new();
        select.recv(&self.stop);
        self.feed.add_to(&mut select);
        select.recv(&self.wake);
        if let Some((watch, _)) = &self.watch {
            select.recv(watch.receiver());
        }
        match (self.connected && self.dirty, self.retry_at) {
            (true, Some(at)) => {
                let _ = select.ready_deadline(at);
            }
            (true, None) => {}
            _ => {
                select.ready();
            }
        }
    }

    pub(super) fn publish(&self) {
        let status = match (&self.node, self.conflict) {
            (Some(_), _) => NodeStatus::Created,
            (None, true) => NodeStatus::Conflict,
            (None, false) => NodeStatus::Creating,
        };
        let mut state = self.shared.state.lock();
        if state.status != status || state.path != self.node {
            state.status = status;
            state.path = self.node.clone();
            drop(state);
            self.shared.changed.notify_all();
        }
    }

    pub(super) fn on_state(&mut self, event: ConnectionEvent) -> Flow {
        if event.generation < self.generation {
            return Flow::Go;
        }
        match event.state {
            ConnectionState::Connected => self.connected = true,
            ConnectionState::Suspended | ConnectionState::ReadOnly => self.connected = false,
            ConnectionState::Reconnected => {
                self.connected = true;
                self.sync_first = true;
                self.dirty = true;
                self.retry_at = None;
            }
            ConnectionState::Lost => {
                self.connected = false;
                self.forget_watch();
                self.node = None;
                self.conflict = false;
                self.creating = None;
                if !self.client.renews_sessions() {
                    let state = self.zk.state();
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
                // Normally done on `Lost` already: the old session's node is gone.
                self.node = None;
                self.conflict = false;
                self.creating = None;
                self.forget_watch();
                self.zk = session.zk;
                self.generation = session.generation;
                self.connected = true;
                self.sync_first = false;
                self.dirty = true;
                self.retry_at = None;
            }
        }
        Flow::Go
    }

    pub(super) fn collect_fired(&mut self) {
        let Some((watch, on)) = &self.watch else {
            return;
        };
        let on = *on;
        let event = match watch.try_get() {
            Ok(None) => return,
            Ok(Some(event)) => Some(event),
            Err(_) => None,
        };
        self.watch = None;
        self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        let Some(event) = event else {
            return;
        };
        match (on, event.event_type) {
            (_, EventType::Session) => {}
            (WatchOn::Own, EventType::NodeDeleted) => {
                self.node = None;
                self.dirty = true;
            }
            _ => self.dirty = true, // data changed (watch again), or the conflict moved
        }
    }

    pub(super) fn set_watch(&mut self, watch: Watch, on: WatchOn) {
        self.unwatch();
        self.watch = Some((watch, on));
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn unwatch(&mut self) {
        if let Some((watch, _)) = self.watch.take() {
            let _ = self.zk.remove_watch(&watch);
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(super) fn forget_watch(&mut self) {
        if self.watch.take().is_some() {
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(super) fn failed(&mut self, error: Error) -> Flow {
        self.dirty = true;
        if error.is_retryable() {
            self.retry_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            Flow::Go
        } else if error.is_session_terminal() {
            self.connected = false;
            Flow::Go
        } else {
            Flow::Stop(error.into())
        }
    }

    /// The data to write now and its serial.
    pub(super) fn data(&self) -> (Vec<u8>, u64) {
        let state = self.shared.state.lock();
        (state.data.clone(), state.data_serial)
    }

    pub(super) fn step(&mut self) -> Flow {
        self.dirty = false;
        if self.sync_first {
            if let Err(error) = self.zk.sync(&self.config.parent) {
                return self.failed(error);
            }
            self.sync_first = false;
            // After a reconnection: is our node still there?
            if let Some(path) = self.node.clone() {
                match self.zk.exists(&path) {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        self.unwatch();
                        self.node = None;
                    }
                    Err(error) => return self.failed(error),
                }
            }
        }
        if self.node.is_none() {
            match self.create() {
                Flow::Go => {}
                stop => return stop,
            }
        }
        let Some(path) = self.node.clone() else {
            return Flow::Go;
        };
        let (data, serial) = self.data();
        if serial != self.written {
            match self.zk.set(&path, &data, None) {
                Ok(_) => self.written = serial,
                Err(Error::NoNode) => {
                    self.unwatch();
                    self.node = None;
                    self.dirty = true;
                    return Flow::Go;
                }
                Err(error) => return self.failed(error),
            }
        }
        if !matches!(self.watch, Some((_, WatchOn::Own))) {
            match self.zk.get_watch(&path) {
                Ok((_, _, watch)) => self.set_watch(watch, WatchOn::Own),
                Err(Error::NoNode) => {
                    self.node = None;
                    self.dirty = true;
                }
                Err(error) => return self.failed(error),
            }
        }
        self.backoff = Duration::from_millis(10);
        Flow::Go
    }

    pub(super) fn adopt(&mut self, path: String, written: u64) {
        self.node = Some(path);
        self.conflict = false;
        self.written = written;
        self.shared.creations.fetch_add(1, Ordering::Relaxed);
        // A watch on the conflicting node is not needed any more.
        if matches!(self.watch, Some((_, WatchOn::Conflict))) {
            self.unwatch();
        }
    }

    pub(super) fn create(&mut self) -> Flow {
        match self.config.mode {
            NodeMode::Ephemeral => self.create_fixed(),
            NodeMode::ProtectedSequential => self.create_sequential(),
        }
    }

    pub(super) fn create_fixed(&mut self) -> Flow {
        let path = self.config.path.clone();
        if matches!(self.creating, Some(Pending::Fixed)) {
            // A create whose reply was lost: catch up before looking (the create below
            // then finds the node by its owner).
            if let Err(error) = self.zk.sync(&self.config.parent) {
                return self.failed(error);
            }
        }
        let (data, serial) = self.data();
        match self.zk.create(
            &path,
            &data,
            zookeeper::CreateOptions::new(CreateMode::Ephemeral)
                .with_acl(self.config.nodes.acl_list()),
        ) {
            Ok(_) => {
                self.creating = None;
                self.adopt(path, serial);
                Flow::Go
            }
            Err(Error::NodeExists) => {
                self.creating = None;
                let session = match self.zk.client_id() {
                    Ok(id) => id.session_id,
                    Err(error) => return self.failed(error),
                };
                match self.zk.exists(&path) {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => {
                        // Ours: a create whose reply was lost. Its data may be older.
                        self.adopt(path, 0);
                        Flow::Go
                    }
                    Ok(Some(_)) => self.wait_for_conflict(&path),
                    Ok(None) => {
                        self.dirty = true; // gone meanwhile: create again
                        Flow::Go
                    }
                    Err(error) => self.failed(error),
                }
            }
            Err(Error::NoNode) => self.make_parent(),
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(Pending::Fixed);
                }
                self.failed(error)
            }
        }
    }

    /// Another session holds our path: watch that node and wait for it to go.
    pub(super) fn wait_for_conflict(&mut self, path: &str) -> Flow {
        if !self.conflict {
            log::warn!("recipes: node {path} is owned by another session; waiting for it to go");
        }
        self.conflict = true;
        if matches!(self.watch, Some((_, WatchOn::Conflict))) {
            return Flow::Go;
        }
        match self.zk.exists_watch(path) {
            Ok((Some(_), watch)) => {
                self.set_watch(watch, WatchOn::Conflict);
                Flow::Go
            }
            Ok((None, watch)) => {
                // Gone meanwhile; an `exists` watch on an absent node stays registered
                // until the node is created: take it off.
                let _ = self.zk.remove_watch(&watch);
                self.dirty = true;
                Flow::Go
            }
            Err(error) => self.failed(error),
        }
    }

    pub(super) fn create_sequential(&mut self) -> Flow {
        let parent = self.config.parent.clone();
        if let Some(Pending::Tag(tag)) = self.creating.take() {
            // The last create's outcome is unknown: catch up with the leader, then look
            // for its uuid. Found: it applied (adopt it); not found: it did not.
            if let Err(error) = self.zk.sync(&parent) {
                self.creating = Some(Pending::Tag(tag));
                return self.failed(error);
            }
            let prefix = tag.rsplit('/').next().unwrap_or_default().to_string();
            match self.zk.get_children(&parent) {
                Ok(children) => {
                    if let Some(name) = children.into_iter().find(|c| c.starts_with(&prefix)) {
                        self.adopt(join(&parent, &name), 0);
                        return Flow::Go;
                    }
                }
                Err(Error::NoNode) => {}
                Err(error) => {
                    self.creating = Some(Pending::Tag(tag));
                    return self.failed(error);
                }
            }
        }
        let tag = join(
            &parent,
            &format!("{}{}", curator_protected_prefix(), self.config.name),
        );
        let (data, serial) = self.data();
        match self.zk.create(
            &tag,
            &data,
            zookeeper::CreateOptions::new(CreateMode::EphemeralSequential)
                .with_acl(self.config.nodes.acl_list()),
        ) {
            Ok(path) => {
                self.adopt(path, serial);
                Flow::Go
            }
            Err(Error::NoNode) => self.make_parent(),
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(Pending::Tag(tag));
                }
                self.failed(error)
            }
        }
    }

    pub(super) fn make_parent(&mut self) -> Flow {
        if let Err(error) = create_dir(&self.zk, &self.config.parent, &self.config.nodes) {
            return self.failed(error);
        }
        self.dirty = true;
        Flow::Go
    }

    /// At the end: deletes the node (in the background if the connection is down now).
    pub(super) fn leave(&mut self) {
        if self.zk.state().is_terminal() {
            return; // the session's nodes are gone with it
        }
        let node = self.node.take();
        let pending = self.creating.take();
        let parent = self.config.parent.clone();
        let fixed = self.config.path.clone();
        let session = self.zk.client_id().map(|id| id.session_id).ok();
        let remove = move |zk: &ZooKeeper| -> zookeeper::Result<()> {
            if let Some(path) = &node {
                match zk.delete(path, None) {
                    Ok(()) | Err(Error::NoNode) => {}
                    Err(error) => return Err(error),
                }
            }
            match &pending {
                None => {}
                Some(Pending::Fixed) => {
                    zk.sync(&parent)?;
                    if let Some(stat) = zk.exists(&fixed)? {
                        if Some(stat.ephemeral_owner) == session {
                            match zk.delete(&fixed, None) {
                                Ok(()) | Err(Error::NoNode) => {}
                                Err(error) => return Err(error),
                            }
                        }
                    }
                }
                Some(Pending::Tag(tag)) => {
                    zk.sync(&parent)?;
                    let prefix = tag.rsplit('/').next().unwrap_or_default();
                    let children = match zk.get_children(&parent) {
                        Ok(children) => children,
                        Err(Error::NoNode) => return Ok(()),
                        Err(error) => return Err(error),
                    };
                    for name in children.into_iter().filter(|c| c.starts_with(prefix)) {
                        match zk.delete(&join(&parent, &name), None) {
                            Ok(()) | Err(Error::NoNode) => {}
                            Err(error) => return Err(error),
                        }
                    }
                }
            }
            Ok(())
        };
        match remove(&self.zk) {
            Ok(()) => {}
            Err(error) if error.is_retryable() => finish_in_background(
                self.zk.clone(),
                format!("deleting {}", self.config.path),
                remove,
            ),
            Err(error) => log::debug!("recipes: deleting {}: {error}", self.config.path),
        }
    }
}
