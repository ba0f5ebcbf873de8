//! The cache task: loads a subtree, follows it with one-shot watches, re-reads after
//! reconnection and new sessions, and reports the differences (see the
//! [cache docs](super)). It runs on the recipes' driver and never blocks: it awaits its
//! reads, its watches and the connection states.

use super::buffer::CacheBuffer;
use super::{count_armed, CacheEvent, NodeData, Shared};
use crate::events::EventQueue;
use crate::lifecycle::following::{Change, Following};
use crate::lifecycle::Client;
use crate::runtime::StopSignal;
use crate::support::{watched, WatchedRead};
use crate::{RecipeError, RetryPolicy};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;
use zookeeper_mt::{Error, EventType, Stat, Watch, WatchedEvent, ZkFuture};

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
    /// The pauses between tries of a failed request.
    pub(crate) retry: RetryPolicy,
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
const BATCH: usize = 1_000;

/// A read in flight.
enum Read {
    ChildrenWatch(WatchedRead<(Vec<String>, Watch)>),
    Children(ZkFuture<Vec<String>>),
    DataWatch(WatchedRead<(Vec<u8>, Stat, Watch)>),
    Data(ZkFuture<(Vec<u8>, Stat)>),
}

/// A read's reply.
enum Reply {
    Children(Vec<String>, Option<Watch>),
    Data(Vec<u8>, Stat, Option<Watch>),
}

pub(crate) struct Worker {
    config: Config,
    /// The session followed, whether reads can be made now, and the retry pause.
    following: Following,
    nodes: HashMap<String, Node>,
    work: VecDeque<String>,
    /// Watches that fired (taken out of their node, no longer counted as armed), for
    /// [`collect_fired`](Self::collect_fired).
    fired: Vec<(String, Kind, zookeeper_mt::Result<WatchedEvent>)>,
    out: Arc<EventQueue<CacheBuffer>>,
    shared: Arc<Shared>,
    initialized: bool,
}

/// How the task ends: `None` for a requested stop, else why it stopped by itself.
type End = Option<RecipeError>;

impl Worker {
    /// Called on the starting thread: subscribes to the connection states before the
    /// first read, so no change is missed.
    pub(crate) fn new(
        client: Client,
        config: Config,
        out: Arc<EventQueue<CacheBuffer>>,
        shared: Arc<Shared>,
    ) -> Worker {
        // A cache only reads: a read-only server serves it.
        let following = Following::new(client, true, config.retry);
        let mut nodes = HashMap::new();
        nodes.insert(config.root.clone(), Node::new(0));
        Worker {
            config,
            following,
            nodes,
            work: VecDeque::new(),
            fired: Vec::new(),
            out,
            shared,
            initialized: false,
        }
    }

    pub(crate) async fn run(mut self, stop: StopSignal) {
        let root = self.config.root.clone();
        self.enqueue(&root);
        // A stop abandons whatever the loop awaits (a read, a sync: a dropped reply
        // future leaves nothing registered), so the owner's drop never waits for a reply.
        let end = stop.unless_cancelled(self.follow(&stop)).await.flatten();
        self.remove_all_watches();
        if let Some(reason) = &end {
            log::debug!("recipes: cache on {root} stopped: {reason}");
        }
        // The reason first: a reader that sees the stream end can ask for it.
        self.shared.set_ended(end);
        self.out.close();
    }

    /// The main loop; returns when stopped or the session of a plain handle is over.
    async fn follow(&mut self, stop: &StopSignal) -> End {
        loop {
            if stop.is_stopped() {
                return None;
            }
            if let Some(end) = self.on_changes() {
                return end;
            }
            self.collect_fired();
            if self.following.due() && self.process(stop).await {
                return None;
            }
            let idle = self.work.is_empty() && !self.following.sync_first;
            if self.following.connected
                && idle
                && !self.following.retry_pending()
                && !self.initialized
            {
                self.initialized = true;
                // The flag first: a reader of the event finds it set.
                self.shared.set_initialized();
                self.signal(CacheEvent::Initialized);
            }
            // Work left means a retry pause (or no connection): wait for its end.
            let deadline = if idle {
                None
            } else {
                self.following.work_deadline()
            };
            self.wait(stop, deadline).await;
        }
    }

    /// Waits until a watch fires, the connection state changes, a stop is requested,
    /// or `deadline` (a retry) is due. Fired watches are taken out of their nodes and
    /// kept in `fired`.
    async fn wait(&mut self, stop: &StopSignal, deadline: Option<Instant>) {
        let Worker {
            following,
            nodes,
            fired,
            shared,
            ..
        } = self;
        following
            .wait(stop, deadline, |cx| {
                let before = fired.len();
                for (path, node) in nodes.iter_mut() {
                    for (slot, kind) in [
                        (&mut node.data_watch, Kind::Data),
                        (&mut node.child_watch, Kind::Children),
                    ] {
                        let Some(watch) = slot else { continue };
                        if let Poll::Ready(outcome) = Pin::new(watch).poll(cx) {
                            *slot = None;
                            fired.push((path.clone(), kind, outcome));
                        }
                    }
                }
                let taken = fired.len() - before;
                if taken == 0 {
                    return Poll::Pending;
                }
                count_armed(shared, -(taken as isize));
                Poll::Ready(())
            })
            .await
    }

    // -----------------------------------------------------------------------------------
    // Connection states.
    // -----------------------------------------------------------------------------------

    /// Reacts to the connection changes since the last call; `Some` ends the task.
    fn on_changes(&mut self) -> Option<End> {
        // Whether reads could be made before each change (a read-only server after a
        // lost connection calls for a re-read; one the cache was reading from already
        // does not).
        let mut connected = self.following.connected;
        let changes = match self.following.changes() {
            Ok(changes) => changes,
            // A managed client closed between sessions (its `Lost` was reported).
            Err(end) => return Some(Some(end)),
        };
        for change in changes {
            let was_connected = std::mem::replace(
                &mut connected,
                !matches!(
                    change,
                    Change::Suspended { read_only: false } | Change::Lost { .. }
                ),
            );
            match change {
                Change::Connected => {}
                Change::Suspended { read_only: false } => self.signal(CacheEvent::Suspended),
                Change::Suspended { read_only: true } => {
                    if !was_connected {
                        // Watches survived; re-read everything to catch what changed.
                        self.resync();
                    }
                }
                Change::Reconnected => {
                    self.signal(CacheEvent::Reconnected);
                    self.resync();
                }
                // A managed client closed right after reporting its `Lost`.
                Change::Lost { end: Some(end) } if self.following.client.renews_sessions() => {
                    return Some(Some(end));
                }
                Change::Lost { end } => {
                    self.signal(CacheEvent::Lost);
                    // The client swept every watch of the ended session.
                    self.forget_all_watches();
                    if end.is_some() {
                        return Some(end);
                    }
                }
                Change::NewSession => {
                    self.forget_all_watches();
                    self.signal(CacheEvent::NewSession {
                        generation: self.following.generation,
                    });
                    self.resync();
                }
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
        self.following.sync_first = true;
        self.following.retry_now();
    }

    // -----------------------------------------------------------------------------------
    // Watches.
    // -----------------------------------------------------------------------------------

    /// Marks what the fired watches (taken by [`wait`](Self::wait)) ask to re-read.
    fn collect_fired(&mut self) {
        for (path, kind, outcome) in std::mem::take(&mut self.fired) {
            // An error: the handle closed (the state feed reports it).
            let Ok(event) = outcome else { continue };
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
        let _ = self.following.zk.remove_watch(&watch);
        count_armed(&self.shared, -1);
    }

    fn arm(&mut self, path: &str, kind: Kind, watch: Watch) {
        let Some(node) = self.nodes.get_mut(path) else {
            // Not followed any more: take it off again.
            let _ = self.following.zk.remove_watch(&watch);
            return;
        };
        let slot = match kind {
            Kind::Data => &mut node.data_watch,
            Kind::Children => &mut node.child_watch,
        };
        // A slot is normally empty here; it is not when the root came back between two
        // reads of one batch (an exists watch armed by the first). Keep one watch.
        if let Some(old) = slot.replace(watch) {
            let _ = self.following.zk.remove_watch(&old);
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
