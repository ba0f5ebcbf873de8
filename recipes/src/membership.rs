//! Membership: a node that stays there while its owner runs ([`PersistentNode`], Curator's
//! `PersistentNode`), and group membership for service discovery ([`GroupMember`] and the
//! observer [`Group`]), in the layouts of Curator's `GroupMember` and kazoo's `Party`.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::lifecycle::ManagedZooKeeper;
//! use zookeeper_recipes::membership::{GroupEvent, GroupLayout, GroupMember};
//!
//! let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let me = GroupMember::builder("/services/web", "web-7")
//!     .data(b"10.0.0.7:8080")
//!     .start(&client)?; // Curator GroupMember layout: node /services/web/web-7
//! me.group().wait_initialized(Duration::from_secs(10))?;
//! for member in me.group().members() {
//!     println!("{} at {}", member.id, String::from_utf8_lossy(&member.data));
//! }
//! while let Ok(event) = me.group().events().recv() {
//!     match event {
//!         GroupEvent::Joined(m) => println!("+ {}", m.id),
//!         GroupEvent::Left(m) => println!("- {}", m.id),
//!         _ => {}
//!     }
//! }
//! # Ok::<(), zookeeper_recipes::RecipeError>(())
//! ```
//!
//! # Persistent node
//! A [`PersistentNode`] runs one thread of its own that creates an ephemeral node and
//! keeps it: when the node is deleted it is created again (with the latest data), after
//! a reconnection the thread `sync`s and checks it is still there, and with a
//! [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper) it is created again in each
//! new session. On a plain handle it ends with the session. One watch (a `get` watch on
//! the node) follows it.
//!
//! Two modes ([`NodeMode`]):
//! - [`Ephemeral`](NodeMode::Ephemeral): a fixed path. If the create's reply is lost, the
//!   thread `sync`s and finds the node by its owner: a node owned by this session is
//!   ours and is adopted. A node at the path owned by *another* session is not taken
//!   over (Curator overwrites its data): the status is [`NodeStatus::Conflict`] and the
//!   thread waits for that node to go (one `exists` watch), then creates its own.
//! - [`ProtectedSequential`](NodeMode::ProtectedSequential): an ephemeral sequential
//!   node named with Curator's protected prefix, `<parent>/_c_<uuid>-<name><seq>`, a
//!   fresh uuid per creation. If the create's reply is lost, the thread `sync`s the
//!   parent and finds the node by its uuid: a create that applied is adopted, never
//!   created a second time. The name changes with each creation
//!   ([`actual_path`](PersistentNode::actual_path)). Nothing orders these nodes by
//!   their sequence number, so the counter's end does not matter: past it the server
//!   repeats or wraps numbers, and the uuid keeps each name unique.
//!
//! # Groups
//! A group is the children of one node; each member owns one ephemeral child
//! ([`GroupMember`]: a [`PersistentNode`] plus a [`ChildrenCache`] of the group), and
//! observers ([`Group`]) cache the children. The members' list is the cache's
//! snapshot and the change stream ([`GroupEvents`]) its events, so it has the caches'
//! guarantees: the final membership is never missed across reconnections and (managed
//! client) expiry, memory is bounded, and the events of one member come in order.
//!
//! | layout | member node | id | data | same group as |
//! |---|---|---|---|---|
//! | [`CuratorGroupMember`](GroupLayout::CuratorGroupMember) | `<path>/<id>` (ephemeral) | the node's name | the member's payload | Curator 5.x `GroupMember` (its `PersistentNode` without protection) |
//! | [`KazooParty`](GroupLayout::KazooParty) | `<path>/<hex uuid>__party__` (ephemeral) | the node's data (UTF-8) | the id | kazoo 2.x `Party` |
//!
//! In the kazoo layout only children whose name contains `__party__` are members (as
//! kazoo counts them); ids need not be unique. In Curator's every child is a member and
//! its name is its id, so ids must be unique and valid node names; two members with one
//! id conflict (the second waits, see above).
//!
//! # Guarantees
//! - A persistent node exists whenever its session is connected and the node is not in
//!   conflict, except for the moments between a deletion and the re-creation; its data
//!   is the latest given to [`set_data`](PersistentNode::set_data) once the thread has
//!   written it.
//! - Never two nodes for one persistent node, also when create replies are lost
//!   (`sync`, then a search by owner or uuid, before any new create).
//! - A group's members and events end on the server's final membership (see
//!   [`crate::cache`]).
//! - Closing leaves nothing behind: the node is deleted and every watch removed.
//!
//! # Non-guarantees
//! - That a member is alive: an ephemeral node outlives a hung or partitioned process
//!   until its session expires.
//! - That the node keeps its data against other writers: data someone else writes to
//!   the node stays until the next [`set_data`](PersistentNode::set_data) or creation.
//! - Every intermediate membership (a member that joins and leaves between two reads of
//!   the cache may not be reported).

use crate::cache::{CacheEvent, CacheEvents, ChildrenCache, NodeData};
use crate::error::LossReason;
use crate::events::Next;
use crate::leader_latch::curator_protected_prefix;
use crate::lifecycle::{Client, ConnectionEvent, ConnectionState, StateFeed};
use crate::support::{create_dir, finish_in_background, session_error};
use crate::util::guid;
use crate::{NodeOptions, RecipeError, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError, Select, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zookeeper::{CreateMode, Error, EventType, Timeout, Watch, ZooKeeper};

// ---------------------------------------------------------------------------------------
// Persistent node.
// ---------------------------------------------------------------------------------------

/// How a [`PersistentNode`] is created (see the [module docs](self#persistent-node)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum NodeMode {
    /// An ephemeral node at a fixed path.
    #[default]
    Ephemeral,
    /// An ephemeral sequential node with Curator's protected prefix:
    /// `<parent>/_c_<uuid>-<name><seq>` for the path `<parent>/<name>`.
    ProtectedSequential,
}

/// What a [`PersistentNode`] is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeStatus {
    /// The node does not exist (yet, or again): it is being created, or the thread waits
    /// for the connection or a new session to do so.
    Creating,
    /// The node exists ([`actual_path`](PersistentNode::actual_path)).
    Created,
    /// Another session owns a node at the path: waiting for it to go.
    Conflict,
    /// Stopped: closed, or the session of a plain handle ended.
    Ended,
}

/// How to start a [`PersistentNode`]; from [`PersistentNode::builder`].
#[derive(Debug, Clone)]
pub struct PersistentNodeBuilder {
    path: String,
    data: Vec<u8>,
    mode: NodeMode,
    nodes: NodeOptions,
}

impl PersistentNodeBuilder {
    /// The node's data (default empty).
    pub fn data(mut self, data: &[u8]) -> Self {
        self.data = data.to_vec();
        self
    }

    /// How the node is created (default [`NodeMode::Ephemeral`]).
    pub fn mode(mut self, mode: NodeMode) -> Self {
        self.mode = mode;
        self
    }

    /// ACL of the node and its missing parents, and whether the parent is created as a
    /// container.
    pub fn node_options(mut self, nodes: NodeOptions) -> Self {
        self.nodes = nodes;
        self
    }

    /// Starts keeping the node (returns at once; see
    /// [`wait_created`](PersistentNode::wait_created)). Fails on a bad path or data over
    /// the node data limit.
    pub fn start(self, client: impl Into<Client>) -> Result<PersistentNode> {
        PersistentNode::start_with(client.into(), self)
    }
}

struct NodeShared {
    state: Mutex<NodeState>,
    changed: Condvar,
    creations: AtomicU64,
    armed: AtomicUsize,
}

struct NodeState {
    status: NodeStatus,
    path: Option<String>,
    data: Vec<u8>,
    /// Bumped by each `set_data`: the thread writes data newer than it wrote last.
    data_serial: u64,
    end: Option<RecipeError>,
}

struct NodeConfig {
    path: String,
    parent: String,
    name: String,
    mode: NodeMode,
    nodes: NodeOptions,
}

/// An ephemeral node kept in place by a thread of its own (see the
/// [module docs](self#persistent-node)). Dropping it (or [`close`](Self::close)) deletes
/// the node. `Send + Sync`.
pub struct PersistentNode {
    shared: Arc<NodeShared>,
    wake: Sender<()>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    config: Arc<NodeConfig>,
}

impl fmt::Debug for PersistentNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("PersistentNode")
            .field("path", &self.config.path)
            .field("mode", &self.config.mode)
            .field("status", &state.status)
            .field("actual", &state.path)
            .finish()
    }
}

impl PersistentNode {
    /// A builder for a node at `path` (for [`NodeMode::ProtectedSequential`], the path
    /// whose last component is the name before the sequence number).
    pub fn builder(path: &str) -> PersistentNodeBuilder {
        PersistentNodeBuilder {
            path: path.to_string(),
            data: Vec::new(),
            mode: NodeMode::Ephemeral,
            nodes: NodeOptions::default(),
        }
    }

    /// Starts keeping an ephemeral node at `path` holding `data`.
    pub fn start(client: impl Into<Client>, path: &str, data: &[u8]) -> Result<PersistentNode> {
        PersistentNode::builder(path).data(data).start(client)
    }

    fn start_with(client: Client, builder: PersistentNodeBuilder) -> Result<PersistentNode> {
        let sequential = builder.mode == NodeMode::ProtectedSequential;
        zookeeper::validate_path(&builder.path, sequential)?;
        let Some((parent, name)) = builder.path.rsplit_once('/') else {
            return Err(RecipeError::InvalidArgument("the node path must not be /"));
        };
        if name.is_empty() {
            return Err(RecipeError::InvalidArgument("the node path must not be /"));
        }
        let parent = if parent.is_empty() { "/" } else { parent };
        if sequential {
            zookeeper::validate_path(
                &join(parent, &format!("{}{name}", curator_protected_prefix())),
                true,
            )?;
        }
        check_data(&builder.data)?;
        let config = Arc::new(NodeConfig {
            path: builder.path.clone(),
            parent: parent.to_string(),
            name: name.to_string(),
            mode: builder.mode,
            nodes: builder.nodes,
        });
        let shared = Arc::new(NodeShared {
            state: Mutex::new(NodeState {
                status: NodeStatus::Creating,
                path: None,
                data: builder.data,
                data_serial: 1,
                end: None,
            }),
            changed: Condvar::new(),
            creations: AtomicU64::new(0),
            armed: AtomicUsize::new(0),
        });
        let (wake, wake_rx) = crossbeam_channel::bounded(1);
        let (stop, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let worker = NodeWorker::new(
            client,
            Arc::clone(&config),
            Arc::clone(&shared),
            wake_rx,
            stop_rx,
        );
        let panic_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("zk-node {}", config.path))
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(move || worker.run());
                if std::panic::catch_unwind(run).is_err() {
                    let mut state = panic_shared.state.lock();
                    state.status = NodeStatus::Ended;
                    state.end = Some(RecipeError::Lost(LossReason::WorkerFailed));
                    drop(state);
                    panic_shared.changed.notify_all();
                }
            })
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(PersistentNode {
            shared,
            wake,
            stop: Some(stop),
            thread: Some(thread),
            config,
        })
    }

    /// The path it was started with.
    pub fn path(&self) -> &str {
        &self.config.path
    }

    /// The mode.
    pub fn mode(&self) -> NodeMode {
        self.config.mode
    }

    /// The node's actual path while it exists (with the sequence suffix for
    /// [`NodeMode::ProtectedSequential`]).
    pub fn actual_path(&self) -> Option<String> {
        self.shared.state.lock().path.clone()
    }

    /// What the node's thread is doing.
    pub fn status(&self) -> NodeStatus {
        self.shared.state.lock().status
    }

    /// Waits until the node exists and returns its actual path: `Err(Timeout)`, or the
    /// reason the node stopped.
    pub fn wait_created(&self, timeout: impl Into<Timeout>) -> Result<String> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let deadline = crate::events::deadline_after(timeout);
        let mut state = self.shared.state.lock();
        loop {
            if state.status == NodeStatus::Created {
                if let Some(path) = &state.path {
                    return Ok(path.clone());
                }
            }
            if state.status == NodeStatus::Ended {
                return Err(state
                    .end
                    .clone()
                    .unwrap_or(RecipeError::Lost(LossReason::Closed)));
            }
            if self
                .shared
                .changed
                .wait_until(&mut state, deadline)
                .timed_out()
                && state.status != NodeStatus::Created
            {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// The data the node is kept with.
    pub fn data(&self) -> Vec<u8> {
        self.shared.state.lock().data.clone()
    }

    /// Replaces the node's data: the thread writes it to the node (at once when
    /// connected, else once it can) and uses it for every later creation. Returns
    /// without waiting for the write; fails at once on data over the node data limit.
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        check_data(data)?;
        {
            let mut state = self.shared.state.lock();
            state.data = data.to_vec();
            state.data_serial += 1;
        }
        let _ = self.wake.try_send(());
        Ok(())
    }

    /// How many times the node was created (or a lost create adopted) so far.
    pub fn creations(&self) -> u64 {
        self.shared.creations.load(Ordering::Relaxed)
    }

    /// Watches the node's thread holds armed now: at most one.
    pub fn armed_watches(&self) -> usize {
        self.shared.armed.load(Ordering::Relaxed)
    }

    /// Why the node stopped by itself (its plain handle's session ended, a request
    /// failed for good); `None` while it runs and after [`close`](Self::close).
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.shared.state.lock().end.clone()
    }

    /// Stops keeping the node: deletes it (in the background if the connection does not
    /// allow it now, until the session ends) and removes the watch.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for PersistentNode {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > zookeeper::MAX_DATA_LEN {
        return Err(RecipeError::InvalidArgument(
            "the data is larger than a node's data may be",
        ));
    }
    Ok(())
}

/// `parent/name` (`/name` under the root).
fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

// ---------------------------------------------------------------------------------------
// The persistent node's thread.
// ---------------------------------------------------------------------------------------

const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the one watch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchOn {
    /// Our node (a `get` watch: deletion or data change).
    Own,
    /// Another session's node at our path (an `exists` watch).
    Conflict,
}

/// A create whose reply was lost.
enum Pending {
    /// The fixed path (look for a node owned by our session).
    Fixed,
    /// A protected sequential create with this name prefix (full path).
    Tag(String),
}

enum Flow {
    Go,
    Stop(RecipeError),
}

struct NodeWorker {
    config: Arc<NodeConfig>,
    client: Client,
    feed: StateFeed,
    zk: ZooKeeper,
    generation: u64,
    shared: Arc<NodeShared>,
    wake: Receiver<()>,
    stop: Receiver<()>,
    connected: bool,
    sync_first: bool,
    retry_at: Option<Instant>,
    backoff: Duration,
    dirty: bool,
    /// Our node's path while it exists.
    node: Option<String>,
    conflict: bool,
    creating: Option<Pending>,
    watch: Option<(Watch, WatchOn)>,
    /// The data serial last written to the node (0: unknown, write again).
    written: u64,
}

impl NodeWorker {
    fn new(
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

    fn run(mut self) {
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

    fn follow(&mut self) -> Option<RecipeError> {
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

    fn wait(&self) {
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

    fn publish(&self) {
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

    fn on_state(&mut self, event: ConnectionEvent) -> Flow {
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

    fn collect_fired(&mut self) {
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

    fn set_watch(&mut self, watch: Watch, on: WatchOn) {
        self.unwatch();
        self.watch = Some((watch, on));
        self.shared.armed.fetch_add(1, Ordering::Relaxed);
    }

    fn unwatch(&mut self) {
        if let Some((watch, _)) = self.watch.take() {
            let _ = self.zk.remove_watch(&watch);
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn forget_watch(&mut self) {
        if self.watch.take().is_some() {
            self.shared.armed.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn failed(&mut self, error: Error) -> Flow {
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
    fn data(&self) -> (Vec<u8>, u64) {
        let state = self.shared.state.lock();
        (state.data.clone(), state.data_serial)
    }

    fn step(&mut self) -> Flow {
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

    fn adopt(&mut self, path: String, written: u64) {
        self.node = Some(path);
        self.conflict = false;
        self.written = written;
        self.shared.creations.fetch_add(1, Ordering::Relaxed);
        // A watch on the conflicting node is not needed any more.
        if matches!(self.watch, Some((_, WatchOn::Conflict))) {
            self.unwatch();
        }
    }

    fn create(&mut self) -> Flow {
        match self.config.mode {
            NodeMode::Ephemeral => self.create_fixed(),
            NodeMode::ProtectedSequential => self.create_sequential(),
        }
    }

    fn create_fixed(&mut self) -> Flow {
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
    fn wait_for_conflict(&mut self, path: &str) -> Flow {
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

    fn create_sequential(&mut self) -> Flow {
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

    fn make_parent(&mut self) -> Flow {
        if let Err(error) = create_dir(&self.zk, &self.config.parent, &self.config.nodes) {
            return self.failed(error);
        }
        self.dirty = true;
        Flow::Go
    }

    /// At the end: deletes the node (in the background if the connection is down now).
    fn leave(&mut self) {
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

// ---------------------------------------------------------------------------------------
// Groups.
// ---------------------------------------------------------------------------------------

/// Whose group layout a [`Group`] or [`GroupMember`] uses (see the
/// [module docs](self#groups)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum GroupLayout {
    /// Curator 5.x `GroupMember`: a member is the child named by its id; its data is the
    /// member's payload.
    #[default]
    CuratorGroupMember,
    /// kazoo 2.x `Party`: a member is a child `<hex uuid>__party__`; its data is the
    /// member's id.
    KazooParty,
}

/// kazoo `Party`'s node name, after the hex uuid.
const KAZOO_PARTY_NAME: &str = "__party__";

impl GroupLayout {
    /// The member a cached child stands for, if it is one.
    fn member(self, node: &NodeData) -> Option<Member> {
        let name = node.name().to_string();
        match self {
            GroupLayout::CuratorGroupMember => Some(Member {
                id: name.clone(),
                node: name,
                data: node.data.clone(),
            }),
            GroupLayout::KazooParty => name.contains(KAZOO_PARTY_NAME).then(|| Member {
                id: String::from_utf8_lossy(&node.data).into_owned(),
                node: name,
                data: node.data.clone(),
            }),
        }
    }

    /// The group event a cache event stands for, if any.
    fn event(self, event: CacheEvent) -> Option<GroupEvent> {
        Some(match event {
            CacheEvent::Added(node) => GroupEvent::Joined(self.member(&node)?),
            CacheEvent::Updated { new, .. } => GroupEvent::Updated(self.member(&new)?),
            CacheEvent::Removed(node) => GroupEvent::Left(self.member(&node)?),
            CacheEvent::Initialized => GroupEvent::Initialized,
            CacheEvent::Suspended => GroupEvent::Suspended,
            CacheEvent::Reconnected => GroupEvent::Reconnected,
            CacheEvent::Lost => GroupEvent::Lost,
            CacheEvent::NewSession { generation } => GroupEvent::NewSession { generation },
        })
    }
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its id (Curator: the node's name; kazoo: the node's data as UTF-8).
    pub id: String,
    /// The name of its node in the group.
    pub node: String,
    /// Its node's data (Curator: the payload; kazoo: the id's bytes).
    pub data: Vec<u8>,
}

/// What a group's event stream reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupEvent {
    /// A member is in the group now (joined, or found by the initial load or a re-read).
    Joined(Member),
    /// A member's data changed (its new state).
    Updated(Member),
    /// A member left (its last known state).
    Left(Member),
    /// The initial load is complete: every member then was reported (`Joined`) before.
    Initialized,
    /// The connection is lost; the member list holds its last state.
    Suspended,
    /// The same session is back; changes made meanwhile follow as events.
    Reconnected,
    /// The session is over (on a plain handle the group view stops after this).
    Lost,
    /// A managed client's new session; the differences follow as events.
    NewSession {
        /// The new session's generation.
        generation: u64,
    },
}

/// An observer of a group's members (see the [module docs](self#groups)): a
/// [`ChildrenCache`] of the group node read in a [`GroupLayout`].
#[derive(Debug)]
pub struct Group {
    cache: ChildrenCache,
    layout: GroupLayout,
}

impl Group {
    /// Starts following the members of the group at `path` (which need not exist yet).
    /// Returns at once; see [`wait_initialized`](Self::wait_initialized).
    pub fn watch(client: impl Into<Client>, path: &str, layout: GroupLayout) -> Result<Group> {
        Ok(Group {
            cache: ChildrenCache::start(client, path)?,
            layout,
        })
    }

    /// The group's path.
    pub fn path(&self) -> &str {
        self.cache.path()
    }

    /// The layout.
    pub fn layout(&self) -> GroupLayout {
        self.layout
    }

    /// Waits until the first load is complete.
    pub fn wait_initialized(&self, timeout: impl Into<Timeout>) -> Result<()> {
        self.cache.wait_initialized(timeout)
    }

    /// The members now (as last read), ordered by id, then node name.
    pub fn members(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .cache
            .children()
            .values()
            .filter_map(|node| self.layout.member(node))
            .collect();
        members.sort_by(|a, b| (&a.id, &a.node).cmp(&(&b.id, &b.node)));
        members
    }

    /// The members' ids now, sorted (repeated if two members share an id).
    pub fn ids(&self) -> Vec<String> {
        self.members().into_iter().map(|m| m.id).collect()
    }

    /// The member change stream.
    pub fn events(&self) -> GroupEvents<'_> {
        GroupEvents {
            events: self.cache.events(),
            layout: self.layout,
        }
    }

    /// Watches armed by the underlying cache (one on the group, one per child).
    pub fn armed_watches(&self) -> usize {
        self.cache.armed_watches()
    }

    /// Why the view stopped by itself, if it did.
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.cache.end_reason()
    }

    /// Stops following the group (every watch is removed).
    pub fn close(self) {
        self.cache.close();
    }
}

/// A group's member changes, read from its cache's events (see [`CacheEvents`] for the
/// bounds and the coalescing): blocking, with a timeout, without waiting, or with the
/// async [`next`](Self::next). Children that are not members in the layout are skipped.
pub struct GroupEvents<'a> {
    events: &'a CacheEvents,
    layout: GroupLayout,
}

impl fmt::Debug for GroupEvents<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupEvents")
            .field("layout", &self.layout)
            .finish()
    }
}

impl<'a> GroupEvents<'a> {
    /// Blocks until the next event; `Err` once the stream has ended.
    pub fn recv(&self) -> std::result::Result<GroupEvent, crossbeam_channel::RecvError> {
        loop {
            if let Some(event) = self.layout.event(self.events.recv()?) {
                return Ok(event);
            }
        }
    }

    /// Blocks until the next event or until `timeout` passes.
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> std::result::Result<GroupEvent, RecvTimeoutError> {
        let deadline = crate::events::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(event) = self.layout.event(self.events.recv_timeout(left)?) {
                return Ok(event);
            }
        }
    }

    /// The next event if one is queued.
    pub fn try_recv(&self) -> std::result::Result<GroupEvent, TryRecvError> {
        loop {
            if let Some(event) = self.layout.event(self.events.try_recv()?) {
                return Ok(event);
            }
        }
    }

    /// The next event as a future (`None` once the stream has ended), for any executor.
    pub fn next(&self) -> GroupNext<'a> {
        GroupNext {
            events: self.events,
            layout: self.layout,
            inner: self.events.next(),
        }
    }

    /// A blocking iterator over the events; it ends with the stream.
    pub fn iter(&self) -> impl Iterator<Item = GroupEvent> + '_ {
        std::iter::from_fn(move || self.recv().ok())
    }
}

/// The future of [`GroupEvents::next`]. Dropping it before it completes loses nothing.
#[must_use = "a future does nothing unless polled"]
pub struct GroupNext<'a> {
    events: &'a CacheEvents,
    layout: GroupLayout,
    inner: Next<'a, CacheEvent>,
}

impl fmt::Debug for GroupNext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GroupNext")
    }
}

impl Future for GroupNext<'_> {
    type Output = Option<GroupEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<GroupEvent>> {
        let this = self.get_mut();
        loop {
            match Pin::new(&mut this.inner).poll(cx) {
                Poll::Ready(Some(event)) => {
                    if let Some(event) = this.layout.event(event) {
                        return Poll::Ready(Some(event));
                    }
                    // Not a member change: wait for the next one.
                    this.inner = this.events.next();
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// How to join a group; from [`GroupMember::builder`].
#[derive(Debug, Clone)]
pub struct GroupMemberBuilder {
    path: String,
    id: String,
    data: Option<Vec<u8>>,
    layout: GroupLayout,
    nodes: NodeOptions,
}

impl GroupMemberBuilder {
    /// The member's payload ([`GroupLayout::CuratorGroupMember`] only: in kazoo's layout
    /// the node's data is the id).
    pub fn data(mut self, data: &[u8]) -> Self {
        self.data = Some(data.to_vec());
        self
    }

    /// The layout (default [`GroupLayout::CuratorGroupMember`]).
    pub fn layout(mut self, layout: GroupLayout) -> Self {
        self.layout = layout;
        self
    }

    /// ACL of the member node and missing parents; whether the group node is a container.
    pub fn node_options(mut self, nodes: NodeOptions) -> Self {
        self.nodes = nodes;
        self
    }

    /// Joins: starts the member's [`PersistentNode`] and a [`Group`] view. Fails at once
    /// on a bad path or id, or data in kazoo's layout.
    pub fn start(self, client: impl Into<Client>) -> Result<GroupMember> {
        let client = client.into();
        crate::support::check_base_path(&self.path)?;
        let (node_path, data) = match self.layout {
            GroupLayout::CuratorGroupMember => {
                if self.id.is_empty() || self.id.contains('/') {
                    return Err(RecipeError::InvalidArgument(
                        "a Curator group member id is a node name: not empty, no '/'",
                    ));
                }
                (
                    format!("{}/{}", self.path, self.id),
                    self.data.unwrap_or_default(),
                )
            }
            GroupLayout::KazooParty => {
                if self.data.is_some() {
                    return Err(RecipeError::InvalidArgument(
                        "a kazoo party member's data is its id: no other data",
                    ));
                }
                (
                    format!("{}/{}{KAZOO_PARTY_NAME}", self.path, guid()),
                    self.id.clone().into_bytes(),
                )
            }
        };
        let node = PersistentNode::builder(&node_path)
            .data(&data)
            .node_options(self.nodes)
            .start(client.clone())?;
        let group = Group::watch(client, &self.path, self.layout)?;
        Ok(GroupMember {
            group,
            node,
            id: self.id,
        })
    }
}

/// A member of a group (see the [module docs](self#groups)): its own node, kept by a
/// [`PersistentNode`], and a [`Group`] view of all members. Dropping it (or
/// [`leave`](Self::leave)) leaves the group.
#[derive(Debug)]
pub struct GroupMember {
    group: Group,
    node: PersistentNode,
    id: String,
}

impl GroupMember {
    /// A builder for a member `id` of the group at `path`.
    pub fn builder(path: &str, id: &str) -> GroupMemberBuilder {
        GroupMemberBuilder {
            path: path.to_string(),
            id: id.to_string(),
            data: None,
            layout: GroupLayout::CuratorGroupMember,
            nodes: NodeOptions::default(),
        }
    }

    /// Joins the group at `path` as `id` with `payload`, in Curator's `GroupMember`
    /// layout.
    pub fn join(
        client: impl Into<Client>,
        path: &str,
        id: &str,
        payload: &[u8],
    ) -> Result<GroupMember> {
        GroupMember::builder(path, id).data(payload).start(client)
    }

    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The view of all members (including this one once its node is read back).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// This member's node.
    pub fn node(&self) -> &PersistentNode {
        &self.node
    }

    /// Replaces this member's payload ([`GroupLayout::CuratorGroupMember`] only);
    /// written in the background (see [`PersistentNode::set_data`]).
    pub fn set_data(&self, payload: &[u8]) -> Result<()> {
        match self.group.layout {
            GroupLayout::CuratorGroupMember => self.node.set_data(payload),
            GroupLayout::KazooParty => Err(RecipeError::InvalidArgument(
                "a kazoo party member's data is its id",
            )),
        }
    }

    /// Leaves the group: deletes the member's node and stops the view.
    pub fn leave(self) {
        let GroupMember { group, node, .. } = self;
        node.close();
        group.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper::Stat;

    fn node(name: &str, data: &[u8]) -> Arc<NodeData> {
        Arc::new(NodeData {
            path: format!("/g/{name}"),
            data: data.to_vec(),
            stat: Stat::default(),
        })
    }

    #[test]
    fn members_in_each_layout() {
        let curator = GroupLayout::CuratorGroupMember.member(&node("web-1", b"10.0.0.1"));
        assert_eq!(
            curator,
            Some(Member {
                id: "web-1".into(),
                node: "web-1".into(),
                data: b"10.0.0.1".to_vec()
            })
        );
        let party = GroupLayout::KazooParty.member(&node("abc__party__", b"worker"));
        assert_eq!(party.unwrap().id, "worker");
        assert_eq!(GroupLayout::KazooParty.member(&node("other", b"x")), None);
        assert_eq!(
            GroupLayout::KazooParty.event(CacheEvent::Added(node("lock", b""))),
            None
        );
        assert_eq!(
            GroupLayout::KazooParty.event(CacheEvent::Initialized),
            Some(GroupEvent::Initialized)
        );
    }

    #[test]
    fn paths_join_under_the_root() {
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/x", "a"), "/x/a");
    }
}
