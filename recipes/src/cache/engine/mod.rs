//! The cache thread: loads a subtree, follows it with one-shot watches, re-reads after
//! reconnection and new sessions, and reports the differences (see the
//! [cache docs](super)).

use super::buffer::CacheBuffer;
use super::{count_armed, CacheEvent, NodeData, Shared};
use crate::events::EventQueue;
use crate::lifecycle::{Client, ConnectionEvent, ConnectionState, StateFeed};
use crate::support::session_error;
use crate::RecipeError;
use crossbeam_channel::{Receiver, Select, TryRecvError};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper::{Error, EventType, Stat, Watch, WatchedEvent, ZkFuture, ZooKeeper};

mod reading;

pub(super) use reading::child_path;

/// What to cache.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The root path.
    pub(crate) root: String,
    /// Children are listed of nodes above this depth (the root is at depth 0).
    pub(crate) max_depth: usize,
    /// Whether the root's data is cached and reported (not for a children cache).
    pub(crate) root_data: bool,
}

/// A node the cache follows.
#[derive(Debug)]
struct Node {
    depth: usize,
    /// Its data as last read (`None`: not read yet, absent, or not cached).
    data: Option<Arc<NodeData>>,
    /// The state last reported in an event, when `data` was refreshed since without one
    /// (only child fields of its Stat changed): the next event's `old` is this, what a
    /// reader of the events knows.
    reported: Option<Arc<NodeData>>,
    /// Known to exist (for the root: decides between the exists watch and the others).
    present: bool,
    /// Names of its children as last listed.
    children: BTreeSet<String>,
    /// The data watch (`get_watch`), or for an absent root the `exists` watch.
    data_watch: Option<Watch>,
    child_watch: Option<Watch>,
    /// What must be read again.
    dirty_data: bool,
    dirty_children: bool,
    /// Whether it is in the work queue.
    queued: bool,
}

impl Node {
    fn new(depth: usize) -> Node {
        Node {
            depth,
            data: None,
            reported: None,
            present: false,
            children: BTreeSet::new(),
            data_watch: None,
            child_watch: None,
            dirty_data: true,
            dirty_children: true,
            queued: false,
        }
    }
}

/// Which of a node's watches fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Data,
    Children,
}

/// Reads between checks for a stop request during a long load.
const STOP_CHECK_EVERY: usize = 256;
/// Nodes whose reads are in flight at once.
const BATCH: usize = 128;

/// A read in flight.
enum Read {
    ChildrenWatch(ZkFuture<(Vec<String>, Watch)>),
    Children(ZkFuture<Vec<String>>),
    DataWatch(ZkFuture<(Vec<u8>, Stat, Watch)>),
    Data(ZkFuture<(Vec<u8>, Stat)>),
}

/// A read's reply.
enum Reply {
    Children(Vec<String>, Option<Watch>),
    Data(Vec<u8>, Stat, Option<Watch>),
}
/// Longest pause between retries of a read that failed with a connection loss.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub(crate) struct Worker {
    config: Config,
    client: Client,
    feed: StateFeed,
    zk: ZooKeeper,
    generation: u64,
    nodes: HashMap<String, Node>,
    work: VecDeque<String>,
    out: Arc<EventQueue<CacheBuffer>>,
    shared: Arc<Shared>,
    stop: Receiver<()>,
    /// Whether requests can be made now.
    connected: bool,
    /// `sync` before the next reads (recovery reads after a reconnection).
    sync_first: bool,
    /// Don't retry before this (after a connection loss the state did not show yet).
    retry_at: Option<Instant>,
    backoff: Duration,
    initialized: bool,
}

/// How the thread ends: `None` for a requested stop, else why it stopped by itself.
type End = Option<RecipeError>;

impl Worker {
    pub(crate) fn new(
        client: Client,
        config: Config,
        out: Arc<EventQueue<CacheBuffer>>,
        shared: Arc<Shared>,
        stop: Receiver<()>,
    ) -> Worker {
        // Subscribe before the first read, so no state change is missed.
        let feed = client.feed();
        let session = client.session();
        let mut nodes = HashMap::new();
        nodes.insert(config.root.clone(), Node::new(0));
        Worker {
            config,
            client,
            feed,
            zk: session.zk,
            generation: session.generation,
            nodes,
            work: VecDeque::new(),
            out,
            shared,
            stop,
            connected: false,
            sync_first: false,
            retry_at: None,
            backoff: Duration::from_millis(10),
            initialized: false,
        }
    }

    pub(crate) fn run(mut self) {
        let root = self.config.root.clone();
        self.enqueue(&root);
        let end = self.follow();
        self.remove_all_watches();
        if let Some(reason) = &end {
            log::debug!("recipes: cache on {root} stopped: {reason}");
        }
        // The reason first: a reader that sees the stream end can ask for it.
        self.shared.set_ended(end);
        self.out.close();
    }

    fn stop_requested(&self) -> bool {
        matches!(self.stop.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// The main loop; returns when stopped or the session of a plain handle is over.
    fn follow(&mut self) -> End {
        loop {
            if self.stop_requested() {
                return None;
            }
            let (states, ended) = self.feed.drain();
            for event in states {
                if let Some(end) = self.on_state(event) {
                    return end;
                }
            }
            if ended {
                // A managed client closed (it reported `Lost` first, unless between
                // sessions, when that was reported already).
                return Some(RecipeError::ZooKeeper(Error::Closed));
            }
            self.collect_fired();
            if self.connected && self.retry_at.map_or(true, |at| Instant::now() >= at) {
                self.retry_at = None;
                if let Some(end) = self.process() {
                    return end;
                }
            }
            if self.connected
                && self.work.is_empty()
                && !self.sync_first
                && self.retry_at.is_none()
                && !self.initialized
            {
                self.initialized = true;
                // The flag first: a reader of the event finds it set.
                self.shared.set_initialized();
                self.signal(CacheEvent::Initialized);
            }
            if !self.work.is_empty() && self.connected && self.retry_at.is_none() {
                continue; // a stop request interrupted a long load: checked at the top
            }
            self.wait();
        }
    }

    /// Blocks until a watch fires, the connection state changes, a stop is requested,
    /// or a retry is due.
    fn wait(&self) {
        let mut select = Select::new();
        select.recv(&self.stop);
        self.feed.add_to(&mut select);
        for node in self.nodes.values() {
            for watch in [&node.data_watch, &node.child_watch].into_iter().flatten() {
                select.recv(watch.receiver());
            }
        }
        match self.retry_at.filter(|_| self.connected) {
            Some(at) => {
                let _ = select.ready_deadline(at);
            }
            None => {
                select.ready();
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Connection states.
    // -----------------------------------------------------------------------------------

    fn on_state(&mut self, event: ConnectionEvent) -> Option<End> {
        if event.generation < self.generation {
            return None; // about a session already replaced
        }
        match event.state {
            ConnectionState::Connected => self.connected = true,
            ConnectionState::Suspended => {
                self.connected = false;
                self.signal(CacheEvent::Suspended);
            }
            ConnectionState::Reconnected | ConnectionState::ReadOnly => {
                let was_connected = self.connected;
                self.connected = true;
                if event.state == ConnectionState::Reconnected {
                    self.signal(CacheEvent::Reconnected);
                }
                if !was_connected || event.state == ConnectionState::Reconnected {
                    // Watches survived; re-read everything to catch what changed.
                    self.resync();
                }
            }
            ConnectionState::Lost => {
                self.connected = false;
                self.signal(CacheEvent::Lost);
                // The client swept every watch of the ended session.
                self.forget_all_watches();
                if !self.client.renews_sessions() {
                    let state = self.zk.state();
                    return Some(Some(if state.is_terminal() {
                        session_error(state)
                    } else {
                        RecipeError::ZooKeeper(Error::Closed)
                    }));
                }
            }
            ConnectionState::NewSession => {
                let session = self.client.session();
                if session.generation <= self.generation {
                    return None;
                }
                self.forget_all_watches();
                self.zk = session.zk;
                self.generation = session.generation;
                self.connected = true;
                self.signal(CacheEvent::NewSession {
                    generation: session.generation,
                });
                self.resync();
            }
        }
        None
    }

    /// Marks every node for a re-read, root first. Nodes whose watches are still armed
    /// are read without a new watch.
    fn resync(&mut self) {
        let mut paths: Vec<(usize, String)> = self
            .nodes
            .iter()
            .map(|(path, node)| (node.depth, path.clone()))
            .collect();
        paths.sort();
        for (_, path) in paths {
            if let Some(node) = self.nodes.get_mut(&path) {
                node.dirty_data = true;
                node.dirty_children = true;
            }
            self.enqueue(&path);
        }
        self.sync_first = true;
        self.retry_at = None;
        self.backoff = Duration::from_millis(10);
    }

    // -----------------------------------------------------------------------------------
    // Watches.
    // -----------------------------------------------------------------------------------

    /// Takes every fired watch and marks what must be re-read.
    fn collect_fired(&mut self) {
        let mut fired: Vec<(String, Kind, WatchedEvent)> = Vec::new();
        let mut gone = 0isize;
        for (path, node) in self.nodes.iter_mut() {
            for (slot, kind) in [
                (&mut node.data_watch, Kind::Data),
                (&mut node.child_watch, Kind::Children),
            ] {
                let Some(watch) = slot else { continue };
                match watch.try_get() {
                    Ok(None) => {}
                    Ok(Some(event)) => {
                        *slot = None;
                        gone += 1;
                        fired.push((path.clone(), kind, event));
                    }
                    // The handle closed: the state feed reports it.
                    Err(_) => {
                        *slot = None;
                        gone += 1;
                    }
                }
            }
        }
        count_armed(&self.shared, -gone);
        for (path, kind, event) in fired {
            if !matches!(
                event.event_type,
                EventType::NodeCreated
                    | EventType::NodeDeleted
                    | EventType::NodeDataChanged
                    | EventType::NodeChildrenChanged
            ) {
                continue; // session end (the state feed reports it) or removed by us
            }
            let Some(node) = self.nodes.get_mut(&path) else {
                continue;
            };
            match kind {
                Kind::Data => {
                    node.dirty_data = true;
                    if !node.present {
                        node.dirty_children = true; // an absent root's exists watch
                    }
                }
                Kind::Children => node.dirty_children = true,
            }
            self.enqueue(&path);
        }
    }

    /// Removes a watch this cache no longer wants (locally: the server's copy fires
    /// into nothing).
    fn unwatch(&self, watch: Watch) {
        let _ = self.zk.remove_watch(&watch);
        count_armed(&self.shared, -1);
    }

    fn arm(&mut self, path: &str, kind: Kind, watch: Watch) {
        let Some(node) = self.nodes.get_mut(path) else {
            // Not followed any more: take it off again.
            let _ = self.zk.remove_watch(&watch);
            return;
        };
        let slot = match kind {
            Kind::Data => &mut node.data_watch,
            Kind::Children => &mut node.child_watch,
        };
        // A slot is normally empty here; it is not when the root came back between two
        // reads of one batch (an exists watch armed by the first). Keep one watch.
        if let Some(old) = slot.replace(watch) {
            let _ = self.zk.remove_watch(&old);
        } else {
            count_armed(&self.shared, 1);
        }
    }

    fn remove_all_watches(&mut self) {
        let watches: Vec<Watch> = self
            .nodes
            .values_mut()
            .flat_map(|node| [node.data_watch.take(), node.child_watch.take()])
            .flatten()
            .collect();
        for watch in watches {
            self.unwatch(watch);
        }
    }

    /// Drops the watches of a session that ended (the client has freed them already).
    fn forget_all_watches(&mut self) {
        let mut count = 0;
        for node in self.nodes.values_mut() {
            count += node.data_watch.take().is_some() as isize;
            count += node.child_watch.take().is_some() as isize;
        }
        count_armed(&self.shared, -count);
    }
}

#[cfg(test)]
mod tests {
    use super::reading::{newer, parent_and_name};
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(child_path("/", "a"), "/a");
        assert_eq!(child_path("/a", "b"), "/a/b");
        assert_eq!(parent_and_name("/a"), Some(("/", "a")));
        assert_eq!(parent_and_name("/a/b"), Some(("/a", "b")));
    }

    #[test]
    fn newer_by_zxid_not_version() {
        let at = |czxid, mzxid, version| Stat {
            czxid,
            mzxid,
            version,
            ..Stat::default()
        };
        // A version that wrapped says nothing: the zxids decide.
        assert!(newer(&at(5, 9, i32::MIN), &at(5, 8, i32::MAX)));
        assert!(!newer(&at(5, 7, 3), &at(5, 8, 2)));
        assert!(newer(&at(6, 6, 0), &at(5, 8, 9)));
        assert!(!newer(&at(4, 9, 0), &at(5, 8, 0)));
    }
}
