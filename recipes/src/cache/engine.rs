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

    // -----------------------------------------------------------------------------------
    // Reading.
    // -----------------------------------------------------------------------------------

    fn enqueue(&mut self, path: &str) {
        if let Some(node) = self.nodes.get_mut(path) {
            if !node.queued {
                node.queued = true;
                self.work.push_back(path.to_string());
            }
        }
    }

    /// Works through the queue while connected, in batches of pipelined reads. `Some`
    /// ends the thread.
    fn process(&mut self) -> Option<End> {
        if self.sync_first {
            match self.zk.sync(&self.config.root) {
                Ok(_) => self.sync_first = false,
                Err(error) => return self.failed(error),
            }
        }
        let mut done = 0;
        while !self.work.is_empty() {
            // Submit the reads of up to BATCH nodes, then take their replies in order
            // (the server answers in order, so this costs about one round trip).
            let mut reads = Vec::new();
            let mut failure = None;
            while reads.len() < BATCH {
                let Some(path) = self.work.pop_front() else {
                    break;
                };
                if let Some(node) = self.nodes.get_mut(&path) {
                    node.queued = false;
                }
                match self.check_absent_root(&path) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) => {
                        failure = self.read_failed(&path, error);
                        break;
                    }
                }
                // Children first: a reader told that a node was added finds both its
                // watches armed.
                for read in [self.submit_children(&path), self.submit_data(&path)]
                    .into_iter()
                    .flatten()
                {
                    reads.push((path.clone(), read));
                }
            }
            done += reads.len();
            for (path, read) in reads {
                if let Err(error) = self.finish(&path, read) {
                    let error = self.read_failed(&path, error);
                    failure = failure.or(error);
                }
            }
            if let Some(error) = failure {
                return self.failed(error);
            }
            if done >= STOP_CHECK_EVERY {
                done = 0;
                if self.stop_requested() {
                    return Some(None);
                }
            }
        }
        self.backoff = Duration::from_millis(10);
        None
    }

    /// A read of `path` failed: a connection or session error is returned (the node
    /// is read again later); anything else is logged and the node skipped.
    fn read_failed(&mut self, path: &str, error: Error) -> Option<Error> {
        if error.is_retryable() || error.is_session_terminal() {
            if let Some(node) = self.nodes.get_mut(path) {
                if !node.queued {
                    node.queued = true;
                    self.work.push_front(path.to_string());
                }
            }
            return Some(error);
        }
        log::warn!("recipes: cache cannot read {path}: {error}");
        None
    }

    /// After a failed request: wait for the connection (or for the state feed to
    /// report the session's end).
    fn failed(&mut self, error: Error) -> Option<End> {
        if error.is_retryable() {
            // The state feed may not show the loss yet: retry after a pause.
            self.retry_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        } else {
            // Expired, auth failed or closed: `Lost` is on its way.
            self.connected = false;
        }
        None
    }

    /// For an absent root with its exists watch armed: whether to read it now (only
    /// a forced re-read checks again, with a plain `exists`). `true` for other nodes.
    fn check_absent_root(&mut self, path: &str) -> zookeeper::Result<bool> {
        if path != self.config.root {
            return Ok(true);
        }
        let Some(node) = self.nodes.get_mut(path) else {
            return Ok(false);
        };
        if node.present || node.data_watch.is_none() {
            return Ok(true);
        }
        if !node.dirty_data && !node.dirty_children {
            return Ok(false);
        }
        match self.zk.exists(path)? {
            None => {
                node.dirty_data = false;
                node.dirty_children = false;
                Ok(false)
            }
            // Created: its exists watch serves as its data watch from now on.
            Some(_) => {
                node.present = true;
                Ok(true)
            }
        }
    }

    /// Submits the listing of the node's children if they are dirty (with a child
    /// watch unless one is armed).
    fn submit_children(&mut self, path: &str) -> Option<Read> {
        let node = self.nodes.get_mut(path)?;
        let wanted = node.dirty_children && node.depth < self.config.max_depth;
        node.dirty_children = false;
        if !wanted {
            return None;
        }
        Some(if node.child_watch.is_none() {
            Read::ChildrenWatch(self.zk.get_children_watch_async(path))
        } else {
            Read::Children(self.zk.get_children_async(path))
        })
    }

    /// Submits the read of the node's data if it is dirty and cached (with a data
    /// watch unless one is armed).
    fn submit_data(&mut self, path: &str) -> Option<Read> {
        let is_root = path == self.config.root;
        let node = self.nodes.get_mut(path)?;
        let wanted = node.dirty_data && (!is_root || self.config.root_data);
        node.dirty_data = false;
        if !wanted {
            return None;
        }
        Some(if node.data_watch.is_none() {
            Read::DataWatch(self.zk.get_watch_async(path))
        } else {
            Read::Data(self.zk.get_async(path))
        })
    }

    /// Takes a read's reply and applies it. On an error other than "no node" the
    /// node is marked dirty again.
    fn finish(&mut self, path: &str, read: Read) -> zookeeper::Result<()> {
        let (kind, result) = match read {
            Read::ChildrenWatch(reply) => (
                Kind::Children,
                reply
                    .wait()
                    .map(|(names, watch)| Reply::Children(names, Some(watch))),
            ),
            Read::Children(reply) => (
                Kind::Children,
                reply.wait().map(|names| Reply::Children(names, None)),
            ),
            Read::DataWatch(reply) => (
                Kind::Data,
                reply
                    .wait()
                    .map(|(data, stat, watch)| Reply::Data(data, stat, Some(watch))),
            ),
            Read::Data(reply) => (
                Kind::Data,
                reply
                    .wait()
                    .map(|(data, stat)| Reply::Data(data, stat, None)),
            ),
        };
        match result {
            Ok(Reply::Children(names, watch)) => {
                if let Some(watch) = watch {
                    self.arm(path, Kind::Children, watch);
                }
                if let Some(node) = self.nodes.get_mut(path) {
                    node.present = true;
                    self.apply_children(path, names);
                }
                Ok(())
            }
            Ok(Reply::Data(data, stat, watch)) => {
                if let Some(watch) = watch {
                    self.arm(path, Kind::Data, watch);
                }
                self.apply_data(path, data, stat);
                Ok(())
            }
            Err(Error::NoNode) => self.gone(path),
            Err(error) => {
                if let Some(node) = self.nodes.get_mut(path) {
                    match kind {
                        Kind::Data => node.dirty_data = true,
                        Kind::Children => node.dirty_children = true,
                    }
                }
                Err(error)
            }
        }
    }

    /// A node's data as just read.
    fn apply_data(&mut self, path: &str, data: Vec<u8>, stat: Stat) {
        let Some(node) = self.nodes.get_mut(path) else {
            return;
        };
        node.present = true;
        let fresh = Arc::new(NodeData {
            path: path.to_string(),
            data,
            stat,
        });
        match node.data.clone() {
            None => {
                node.data = Some(Arc::clone(&fresh));
                self.changed(path, None, Some(fresh));
            }
            Some(old) if old.stat.czxid == stat.czxid && old.stat.mzxid == stat.mzxid => {
                // The same data; only child fields of the Stat may differ. No event.
                node.data = Some(Arc::clone(&fresh));
                self.shared.view.write().insert(path.to_string(), fresh);
            }
            Some(old) if newer(&stat, &old.stat) => {
                node.data = Some(Arc::clone(&fresh));
                self.changed(path, Some(old), Some(fresh));
            }
            // Older than what the cache holds (a server behind the one read before).
            Some(_) => {}
        }
    }

    /// A node's children as just listed.
    fn apply_children(&mut self, path: &str, names: Vec<String>) {
        let Some(node) = self.nodes.get_mut(path) else {
            return;
        };
        let depth = node.depth;
        let listed: BTreeSet<String> = names.into_iter().collect();
        let before = std::mem::replace(&mut node.children, listed.clone());
        for name in before.difference(&listed) {
            self.remove_subtree(&child_path(path, name));
        }
        for name in listed.difference(&before) {
            let child = child_path(path, name);
            self.nodes
                .entry(child.clone())
                .or_insert_with(|| Node::new(depth + 1));
            self.enqueue(&child);
        }
    }

    /// The node at `path` does not exist (any more).
    fn gone(&mut self, path: &str) -> zookeeper::Result<()> {
        if path != self.config.root {
            self.remove_subtree(path);
            if let Some((parent, name)) = parent_and_name(path) {
                if let Some(parent) = self.nodes.get_mut(parent) {
                    parent.children.remove(name);
                }
            }
            return Ok(());
        }
        // The root: everything below goes, and an exists watch waits for it to return.
        let Some(root) = self.nodes.get_mut(path) else {
            return Ok(());
        };
        let children: Vec<String> = std::mem::take(&mut root.children).into_iter().collect();
        for name in children {
            self.remove_subtree(&child_path(path, &name));
        }
        let root = self
            .nodes
            .get_mut(path)
            .expect("the root is always followed");
        root.present = false;
        root.dirty_data = false;
        root.dirty_children = false;
        let watches = [root.data_watch.take(), root.child_watch.take()];
        let old = root.data.take();
        for watch in watches.into_iter().flatten() {
            self.unwatch(watch);
        }
        // The exists watch first, so a reader told of the removal finds it armed.
        let result = match self.zk.exists_watch(path) {
            Ok((stat, watch)) => {
                self.arm(path, Kind::Data, watch);
                if stat.is_some() {
                    // Created again meanwhile: read it (its exists watch is its data watch).
                    let root = self
                        .nodes
                        .get_mut(path)
                        .expect("the root is always followed");
                    root.dirty_data = true;
                    root.dirty_children = true;
                    self.enqueue(path);
                }
                Ok(())
            }
            Err(error) => {
                let root = self
                    .nodes
                    .get_mut(path)
                    .expect("the root is always followed");
                root.dirty_data = true;
                root.dirty_children = true;
                Err(error)
            }
        };
        if old.is_some() {
            self.changed(path, old, None);
        }
        result
    }

    /// Stops following `path` and everything below it, reporting each removal
    /// (children first).
    fn remove_subtree(&mut self, path: &str) {
        let Some(node) = self.nodes.remove(path) else {
            return;
        };
        for name in &node.children {
            self.remove_subtree(&child_path(path, name));
        }
        for watch in [node.data_watch, node.child_watch].into_iter().flatten() {
            self.unwatch(watch);
        }
        if node.data.is_some() {
            self.changed(path, node.data, None);
        }
    }

    /// Records a change in the view and reports it.
    fn changed(&mut self, path: &str, before: Option<Arc<NodeData>>, after: Option<Arc<NodeData>>) {
        {
            let mut view = self.shared.view.write();
            match &after {
                Some(node) => view.insert(path.to_string(), Arc::clone(node)),
                None => view.remove(path),
            };
        }
        if path != self.config.root || self.config.root_data {
            self.out.update(|buffer| buffer.change(path, before, after));
        }
    }

    fn signal(&self, event: CacheEvent) {
        self.out.update(|buffer| buffer.signal(event));
    }
}

/// Whether `stat` is a later state of the node than `old` (a re-creation, or a later
/// modification). Zxids only grow; versions are not compared (they wrap).
fn newer(stat: &Stat, old: &Stat) -> bool {
    stat.czxid > old.czxid || (stat.czxid == old.czxid && stat.mzxid > old.mzxid)
}

pub(super) fn child_path(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

fn parent_and_name(path: &str) -> Option<(&str, &str)> {
    let (parent, name) = path.rsplit_once('/')?;
    Some((if parent.is_empty() { "/" } else { parent }, name))
}

#[cfg(test)]
mod tests {
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
