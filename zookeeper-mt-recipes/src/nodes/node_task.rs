//! The persistent node's task on the driver: creates the node, watches it, re-creates it
//! after a deletion or a new session.

use super::*;

// ---------------------------------------------------------------------------------------
// The persistent node's task.
// ---------------------------------------------------------------------------------------

/// What the one watch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WatchOn {
    /// Our node (a `get` watch: deletion or data change).
    Own,
    /// Another session's node at our path (an `exists` watch).
    Conflict,
}

/// The armed watch, and its outcome once it fired (a `Watch` yields it once).
pub(super) struct Armed {
    watch: Watch,
    on: WatchOn,
    fired: Option<zookeeper_mt::Result<WatchedEvent>>,
}

impl Armed {
    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.is_none() {
            match Pin::new(&mut self.watch).poll(cx) {
                Poll::Ready(outcome) => self.fired = Some(outcome),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(())
    }
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

/// `set_data`'s nudge to the task: a flag and the task's waker.
#[derive(Default)]
pub(super) struct Nudge {
    pending: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Nudge {
    pub(super) fn nudge(&self) {
        self.pending.store(true, Ordering::Release);
        let waker = self.waker.lock().take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Whether a nudge came since the last call.
    fn take(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.pending.load(Ordering::Acquire) {
            let mut slot = self.waker.lock();
            if !slot
                .as_ref()
                .is_some_and(|known| known.will_wake(cx.waker()))
            {
                *slot = Some(cx.waker().clone());
            }
            drop(slot);
            // Looked at again: a nudge between the first look and the registration
            // found no waker to wake.
            if !self.pending.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        Poll::Ready(())
    }
}

pub(super) struct NodeWorker {
    pub(super) config: Arc<NodeConfig>,
    pub(super) following: Following,
    pub(super) shared: Arc<NodeShared>,
    pub(super) dirty: bool,
    /// Our node's path while it exists.
    pub(super) node: Option<String>,
    pub(super) conflict: bool,
    pub(super) creating: Option<Pending>,
    pub(super) watch: Option<Armed>,
    /// The data serial last written to the node (0: unknown, write again).
    pub(super) written: u64,
}

impl NodeWorker {
    pub(super) fn new(client: Client, config: Arc<NodeConfig>, shared: Arc<NodeShared>) -> Self {
        NodeWorker {
            following: Following::new(client, false, config.retry),
            config,
            shared,
            dirty: true,
            node: None,
            conflict: false,
            creating: None,
            watch: None,
            written: 0,
        }
    }

    pub(super) async fn run(mut self, stop: StopSignal) {
        // A stop abandons what the loop awaits; a create in flight is in `creating`,
        // so `leave` finds its node.
        let end = stop.unless_cancelled(self.follow(&stop)).await.flatten();
        self.unwatch();
        self.leave().await;
        if let Some(reason) = &end {
            log::debug!("recipes: node {} stopped: {reason}", self.config.path);
        }
        {
            let mut state = self.shared.state.lock();
            state.status = NodeStatus::Ended;
            state.path = None;
            state.end = end;
        }
        self.shared.changed.wake_all();
    }

    async fn follow(&mut self, stop: &StopSignal) -> Option<RecipeError> {
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
                Err(end) => return Some(end),
            }
            if self.shared.nudge.take() {
                self.dirty = true;
            }
            self.collect_fired();
            if self.dirty && self.following.due() {
                if let Flow::Stop(error) = self.step().await {
                    return Some(error);
                }
                self.publish();
                if self.dirty && self.following.due() {
                    continue;
                }
            }
            self.publish();
            let deadline = if self.dirty {
                self.following.work_deadline()
            } else {
                None
            };
            let (shared, watch) = (&self.shared, &mut self.watch);
            self.following
                .wait(stop, deadline, |cx| {
                    let fired = watch.as_mut().map_or(Poll::Pending, |w| w.poll_fired(cx));
                    if shared.nudge.poll(cx).is_ready() || fired.is_ready() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
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
            self.shared.changed.wake_all();
        }
    }

    /// The node's part of a connection change (`Following` has applied the common
    /// part: connected, `sync_first`, the new session's handle).
    fn on_change(&mut self, change: Change) -> Flow {
        match change {
            Change::Connected | Change::Suspended { .. } => {}
            Change::Reconnected => self.dirty = true,
            Change::Lost { end } => {
                self.forget_watch();
                self.node = None;
                self.conflict = false;
                self.creating = None;
                if let Some(end) = end {
                    return Flow::Stop(end);
                }
            }
            Change::NewSession => {
                // Normally done on `Lost` already: the old session's node is gone.
                self.node = None;
                self.conflict = false;
                self.creating = None;
                self.forget_watch();
                self.dirty = true;
            }
        }
        Flow::Go
    }

    /// Takes in the watch's event if it fired.
    pub(super) fn collect_fired(&mut self) {
        let Some(armed) = &mut self.watch else {
            return;
        };
        let mut cx = Context::from_waker(crate::runtime::noop_waker());
        if armed.poll_fired(&mut cx).is_pending() {
            return;
        }
        let on = armed.on;
        let event = armed.fired.take().and_then(|outcome| outcome.ok());
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
        self.watch = Some(Armed {
            watch,
            on,
            fired: None,
        });
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn unwatch(&mut self) {
        if let Some(armed) = self.watch.take() {
            let _ = self.following.zk.remove_watch(&armed.watch);
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub(super) fn forget_watch(&mut self) {
        if self.watch.take().is_some() {
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn watching(&self, on: WatchOn) -> bool {
        self.watch.as_ref().is_some_and(|armed| armed.on == on)
    }

    pub(super) fn failed(&mut self, error: Error) -> Flow {
        self.dirty = true;
        if error.is_retryable() || error.is_session_terminal() {
            // Retryable: again after a pause; terminal: disconnected until `Lost`.
            self.following.failed(&error);
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

    pub(super) async fn step(&mut self) -> Flow {
        self.dirty = false;
        let zk = self.following.zk.clone();
        if self.following.sync_first {
            if let Err(error) = zk.sync_async(&self.config.parent).await {
                return self.failed(error);
            }
            self.following.sync_first = false;
            // After a reconnection: is our node still there?
            if let Some(path) = self.node.clone() {
                match zk.exists_async(&path).await {
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
            match self.create(&zk).await {
                Flow::Go => {}
                stop => return stop,
            }
        }
        let Some(path) = self.node.clone() else {
            return Flow::Go;
        };
        let (data, serial) = self.data();
        if serial != self.written {
            match zk.set_async(&path, &data, None).await {
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
        if !self.watching(WatchOn::Own) {
            match crate::support::watched(&zk, zk.get_watch_async(&path)).await {
                Ok((_, _, watch)) => self.set_watch(watch, WatchOn::Own),
                Err(Error::NoNode) => {
                    self.node = None;
                    self.dirty = true;
                }
                Err(error) => return self.failed(error),
            }
        }
        self.following.succeeded();
        Flow::Go
    }

    pub(super) fn adopt(&mut self, path: String, written: u64) {
        self.node = Some(path);
        self.conflict = false;
        self.written = written;
        self.shared.creations.fetch_add(1, Ordering::Relaxed);
        // A watch on the conflicting node is not needed any more.
        if self.watching(WatchOn::Conflict) {
            self.unwatch();
        }
    }

    async fn create(&mut self, zk: &ZooKeeper) -> Flow {
        match self.config.mode {
            NodeMode::Ephemeral => self.create_fixed(zk).await,
            NodeMode::ProtectedSequential => self.create_sequential(zk).await,
        }
    }

    async fn create_fixed(&mut self, zk: &ZooKeeper) -> Flow {
        let path = self.config.path.clone();
        if matches!(self.creating, Some(Pending::Fixed)) {
            // A create whose reply was lost: catch up before looking (the create below
            // then finds the node by its owner).
            if let Err(error) = zk.sync_async(&self.config.parent).await {
                return self.failed(error);
            }
        }
        let (data, serial) = self.data();
        let options = zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral)
            .with_acl(self.config.nodes.acl_list());
        // Recorded while in flight: a stop that abandons the reply leaves it to `leave`.
        self.creating = Some(Pending::Fixed);
        let created = zk.create_async(&path, &data, options).await;
        self.creating = None;
        match created {
            Ok(_) => {
                self.adopt(path, serial);
                Flow::Go
            }
            Err(Error::NodeExists) => {
                self.creating = None;
                let session = match zk.client_id() {
                    Ok(id) => id.session_id,
                    Err(error) => return self.failed(error),
                };
                match zk.exists_async(&path).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => {
                        // Ours: a create whose reply was lost. Its data may be older.
                        self.adopt(path, 0);
                        Flow::Go
                    }
                    Ok(Some(_)) => self.wait_for_conflict(zk, &path).await,
                    Ok(None) => {
                        self.dirty = true; // gone meanwhile: create again
                        Flow::Go
                    }
                    Err(error) => self.failed(error),
                }
            }
            Err(Error::NoNode) => self.make_parent(zk).await,
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(Pending::Fixed);
                }
                self.failed(error)
            }
        }
    }

    /// Another session holds our path: watch that node and wait for it to go.
    async fn wait_for_conflict(&mut self, zk: &ZooKeeper, path: &str) -> Flow {
        if !self.conflict {
            log::warn!("recipes: node {path} is owned by another session; waiting for it to go");
        }
        self.conflict = true;
        if self.watching(WatchOn::Conflict) {
            return Flow::Go;
        }
        match crate::support::watched(zk, zk.exists_watch_async(path)).await {
            Ok((Some(_), watch)) => {
                self.set_watch(watch, WatchOn::Conflict);
                Flow::Go
            }
            Ok((None, watch)) => {
                // Gone meanwhile; an `exists` watch on an absent node stays registered
                // until the node is created: take it off.
                let _ = zk.remove_watch(&watch);
                self.dirty = true;
                Flow::Go
            }
            Err(error) => self.failed(error),
        }
    }

    async fn create_sequential(&mut self, zk: &ZooKeeper) -> Flow {
        let parent = self.config.parent.clone();
        if let Some(Pending::Tag(tag)) = self.creating.take() {
            // The last create's outcome is unknown: catch up with the leader, then look
            // for its uuid. Found: it applied (adopt it); not found: it did not.
            if let Err(error) = zk.sync_async(&parent).await {
                self.creating = Some(Pending::Tag(tag));
                return self.failed(error);
            }
            let prefix = tag.rsplit('/').next().unwrap_or_default().to_string();
            match zk.get_children_async(&parent).await {
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
        let options = zookeeper_mt::CreateOptions::new(CreateMode::EphemeralSequential)
            .with_acl(self.config.nodes.acl_list());
        // Recorded while in flight: a stop that abandons the reply leaves it to `leave`.
        self.creating = Some(Pending::Tag(tag.clone()));
        let created = zk.create_async(&tag, &data, options).await;
        self.creating = None;
        match created {
            Ok(path) => {
                self.adopt(path, serial);
                Flow::Go
            }
            Err(Error::NoNode) => self.make_parent(zk).await,
            Err(error) => {
                if error.is_connection_loss() {
                    self.creating = Some(Pending::Tag(tag));
                }
                self.failed(error)
            }
        }
    }

    async fn make_parent(&mut self, zk: &ZooKeeper) -> Flow {
        if let Err(error) = create_dir_async(zk, &self.config.parent, &self.config.nodes).await {
            return self.failed(error);
        }
        self.dirty = true;
        Flow::Go
    }

    /// At the end: deletes the node (in the background if the connection is down now).
    async fn leave(&mut self) {
        let zk = self.following.zk.clone();
        if zk.state().is_terminal() {
            return; // the session's nodes are gone with it
        }
        let leftovers = Arc::new(Leftovers {
            node: self.node.take(),
            pending: self.creating.take(),
            parent: self.config.parent.clone(),
            fixed: self.config.path.clone(),
            session: zk.client_id().map(|id| id.session_id).ok(),
        });
        match leftovers.remove(&zk).await {
            Ok(()) => {}
            Err(error) if error.is_retryable() => {
                finish_later(&zk, format!("deleting {}", self.config.path), move |zk| {
                    let leftovers = Arc::clone(&leftovers);
                    Box::pin(async move { leftovers.remove(&zk).await })
                })
            }
            Err(error) => log::debug!("recipes: deleting {}: {error}", self.config.path),
        }
    }
}

/// What a stopped node leaves to delete: its node, and a create whose reply was lost.
struct Leftovers {
    node: Option<String>,
    pending: Option<Pending>,
    parent: String,
    fixed: String,
    session: Option<i64>,
}

impl Leftovers {
    async fn remove(&self, zk: &ZooKeeper) -> zookeeper_mt::Result<()> {
        if let Some(path) = &self.node {
            delete(zk, path).await?;
        }
        match &self.pending {
            None => {}
            Some(Pending::Fixed) => {
                zk.sync_async(&self.parent).await?;
                if let Some(stat) = zk.exists_async(&self.fixed).await? {
                    if Some(stat.ephemeral_owner) == self.session {
                        delete(zk, &self.fixed).await?;
                    }
                }
            }
            Some(Pending::Tag(tag)) => {
                zk.sync_async(&self.parent).await?;
                let prefix = tag.rsplit('/').next().unwrap_or_default();
                let children = match zk.get_children_async(&self.parent).await {
                    Ok(children) => children,
                    Err(Error::NoNode) => return Ok(()),
                    Err(error) => return Err(error),
                };
                for name in children.into_iter().filter(|c| c.starts_with(prefix)) {
                    delete(zk, &join(&self.parent, &name)).await?;
                }
            }
        }
        Ok(())
    }
}

/// Deletes `path` (any version); a node already gone is fine.
async fn delete(zk: &ZooKeeper, path: &str) -> zookeeper_mt::Result<()> {
    match zk.delete_async(path, None).await {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(error) => Err(error),
    }
}
