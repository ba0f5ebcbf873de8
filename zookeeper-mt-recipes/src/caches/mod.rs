//! Caches of znodes kept up to date with one-shot watches: [`NodeCache`] (one node),
//! [`ChildrenCache`] (the children of one node with their data, Curator's
//! `PathChildrenCache`) and [`TreeCache`] (a whole subtree, optionally to a maximum
//! depth, Curator's `CuratorCache`).
//!
//! Beside them, [`ConfigWatch`] ([`config_watch`]): one node's newest state, read again
//! after every change.
//!
//! Each cache is one task on the recipes' driver thread (never work on the C client's
//! threads, no thread per cache or per node). It loads its nodes, reports
//! [`CacheEvent::Initialized`] once the first load is complete, then follows every
//! change, and offers a snapshot of what it holds at any time. It takes a plain
//! [`ZooKeeper`](zookeeper_mt::ZooKeeper) or a
//! [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper) (see [`Client`]).
//!
//! ```no_run
//! use zookeeper_mt_recipes::caches::{CacheEvent, TreeCache};
//! use std::time::Duration;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let cache = TreeCache::builder("/services").max_depth(2).build(&zk)?;
//! cache.wait_initialized(Duration::from_secs(10))?;
//! println!("{} nodes", cache.snapshot().len());
//! for event in cache.events().iter() {
//!     match event {
//!         CacheEvent::Added(node) => println!("+ {}", node.path),
//!         CacheEvent::Updated { new, .. } => println!("~ {}", new.path),
//!         CacheEvent::Removed(node) => println!("- {}", node.path),
//!         other => println!("{other:?}"),
//!     }
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # How a cache follows the tree
//! Every cached node has at most one data watch (`get_watch`) and, above the maximum
//! depth, one child watch (`get_children_watch`); an absent root has one `exists`
//! watch. When a watch fires, the cache re-reads that node with a new watch of the same
//! kind, and only then; so one cache never has two watches of a kind armed on a node
//! ([`armed_watches`](TreeCache::armed_watches) counts them). A data change is told
//! apart from a stale read by the node's `czxid` and `mzxid` (zxids only grow: a new
//! epoch starts before the counter could wrap, ZOOKEEPER-1277); data versions, which
//! wrap, are never compared.
//!
//! After a reconnection of the same session, the cache `sync`s and re-reads every node
//! (without adding watches: those still armed survive the reconnection), and reports
//! what changed while it was away. After an expiry, a cache on a plain handle reports
//! [`CacheEvent::Lost`] and stops; on a managed client it waits for the new session,
//! re-reads the whole tree with new watches, and reports the difference with what it
//! held.
//!
//! # Guarantees
//! - **Final state**: once changes stop and the client is connected, the cache's
//!   snapshot equals the server's tree (as the server the client talks to sees it), and
//!   the events a reader received, applied in order, lead to that snapshot. This holds
//!   across connection loss and, with a managed client, across expiry.
//! - **Per-path order**: a path's events follow its history: `Added`, then `Updated`s
//!   with growing `mzxid`, then `Removed`; a node deleted and re-created reads as
//!   `Removed` then `Added` (a different `czxid`).
//! - **Bounded memory**: events are coalesced per path while the reader is behind, so
//!   the queue holds at most one entry per node that changed plus a few connection
//!   signals, however many changes happen and however slow the reader is (see
//!   [below](#bounded-memory)).
//! - **Nothing left behind**: dropping a cache stops its task and removes every watch
//!   it armed (`ZooKeeper::live_contexts` is back to what it was once the task has
//!   ended on the driver, a moment later: the drop does not wait, and a read it
//!   abandoned has its watch taken off when its reply comes).
//!
//! # Not guaranteed
//! - **Every intermediate state**: watches are one-shot, so changes between an event and
//!   the re-read are seen only as their result (versions may jump); under coalescing a
//!   reader may also get one event for several changes.
//! - **Order across paths**: events of different paths come in the order of their
//!   oldest unread change, not in server order, and a node's `Updated` may come before
//!   its parent's.
//! - **Freshness**: the cache is eventually consistent with the server it reads from; it
//!   lags behind writes (and a read-only server may be behind the quorum). A parent's
//!   `Stat` child fields (`num_children`, `cversion`, `pzxid`) are as of its last data
//!   read. After the cache stops (session lost on a plain handle), the snapshot is no
//!   longer updated.
//!
//! Cost: reads are pipelined (128 nodes per round trip), so loading a tree of 2,000
//! nodes takes about a second on a loaded two-core machine. The cache task looks at all
//! its watches when it wakes up (the client offers one future per watch, nothing that
//! gathers them), so each wake-up costs time in proportion to the number of watches it
//! holds, and delays the other tasks of the driver by as much. Caches are meant for
//! trees of up to some thousands of nodes.
//!
//! # Bounded memory
//! A cache's events are an [`EventStream<CacheEvent>`](crate::events::EventStream) (see
//! the [stream contract](crate::events#the-stream-contract)). While the reader is behind,
//! the changes of one path are merged into one entry, which yields the difference
//! between what the reader last received for that path and the cache's state when it is
//! read (`Added`, `Updated`, `Removed`, or `Removed` + `Added` for a re-created node;
//! nothing for a node created and deleted meanwhile). Its position is that of the path's
//! oldest unread change. Connection signals keep their place; more than 32 unread ones
//! drop the oldest `Suspended`/`Reconnected` (never `Initialized`, `Lost`, `NewSession`).
//! So [`len`](crate::events::EventStream::len) is at most the number of nodes with unread
//! changes plus 32. The stream ends (after its queued events) when the cache stops.

mod buffer;
mod children;
pub mod config_watch;
mod engine;
mod node;
mod tree;

pub use crate::lifecycle::Client;
pub use children::ChildrenCache;
pub use config_watch::{ConfigEvent, ConfigWatch};
pub use node::NodeCache;
pub use tree::{TreeCache, TreeCacheBuilder};

use crate::asynchronous::owner::SharedTask;
use crate::error::LossReason;
use crate::events::{EventQueue, EventStream};
use crate::{RecipeError, Result};
use buffer::CacheBuffer;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use zookeeper_mt::Stat;

/// A cached node: its path, data and `Stat` as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeData {
    /// The node's full path.
    pub path: String,
    /// Its data.
    pub data: Vec<u8>,
    /// Its `Stat` as read with the data.
    pub stat: Stat,
}

impl NodeData {
    /// The last component of the path (the child's name).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or_default()
    }
}

/// What a cache reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheEvent {
    /// A node is in the cache now (created, or found by the initial load or a re-read).
    Added(Arc<NodeData>),
    /// A node's data changed (same `czxid`, newer `mzxid`).
    Updated {
        /// The state the reader knew.
        old: Arc<NodeData>,
        /// The state now.
        new: Arc<NodeData>,
    },
    /// A node is no longer in the cache (deleted); carries its last known state.
    Removed(Arc<NodeData>),
    /// The initial load is complete: every node that existed then was reported
    /// (`Added`) before this. Sent once.
    Initialized,
    /// The connection is lost; the cache holds its last state and waits.
    Suspended,
    /// The same session is back; the cache re-reads everything, changes made meanwhile
    /// follow as events.
    Reconnected,
    /// The session is over. On a plain handle the cache stops after this; on a managed
    /// client it waits for the new session.
    Lost,
    /// A managed client's new session: the cache re-reads the whole tree with new
    /// watches; the differences with what it held follow as events.
    NewSession {
        /// The new session's generation.
        generation: u64,
    },
}

impl CacheEvent {
    /// The node a change event concerns (the new state for `Updated`).
    pub fn node(&self) -> Option<&Arc<NodeData>> {
        match self {
            CacheEvent::Added(node) | CacheEvent::Removed(node) => Some(node),
            CacheEvent::Updated { new, .. } => Some(new),
            _ => None,
        }
    }

    /// The path a change event concerns.
    pub fn path(&self) -> Option<&str> {
        self.node().map(|node| node.path.as_str())
    }
}

/// What the cache task shares with the cache's owner.
#[derive(Default)]
struct Shared {
    /// Every cached node by full path.
    view: RwLock<BTreeMap<String, Arc<NodeData>>>,
    status: Mutex<Status>,
    /// Woken at each change of `status`.
    changed: crate::runtime::Wakers,
    /// Watches the cache holds armed now.
    armed: AtomicUsize,
}

#[derive(Default)]
struct Status {
    initialized: bool,
    running: bool,
    end: Option<RecipeError>,
}

impl Shared {
    fn set_initialized(&self) {
        self.status.lock().initialized = true;
        self.changed.wake_all();
    }

    fn set_ended(&self, reason: Option<RecipeError>) {
        {
            let mut status = self.status.lock();
            status.running = false;
            status.end = reason;
        }
        self.changed.wake_all();
    }
}

/// What every cache is: its task, its view and its events. Clones share all three (the
/// last one's drop cancels the task).
#[derive(Clone)]
struct Core {
    shared: Arc<Shared>,
    events: EventStream<CacheEvent>,
    task: SharedTask,
    root: String,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("root", &self.root)
            .field("nodes", &self.shared.view.read().len())
            .field("queued", &self.events.len())
            .finish()
    }
}

impl Core {
    fn start(client: Client, config: engine::Config) -> Result<Core> {
        zookeeper_mt::validate_path(&config.root, false)?;
        let shared = Arc::new(Shared::default());
        shared.status.lock().running = true;
        let queue = EventQueue::new(CacheBuffer::default());
        let root = config.root.clone();
        let worker = engine::Worker::new(client, config, Arc::clone(&queue), Arc::clone(&shared));
        let (guard_shared, guard_queue) = (Arc::clone(&shared), Arc::clone(&queue));
        let task = crate::runtime::spawn(
            format!("zk-cache {root}"),
            move |stop| worker.run(stop),
            // A bug must not leave the cache looking alive: report it as the end.
            move || {
                guard_shared.set_ended(Some(RecipeError::Lost(LossReason::WorkerFailed)));
                guard_queue.close();
            },
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(Core {
            shared,
            events: EventStream::new(queue),
            task: SharedTask::new(task),
            root,
        })
    }

    async fn wait_initialized(&self, timeout: zookeeper_mt::Timeout) -> Result<()> {
        let initialized = self.shared.changed.until(|| {
            let status = self.shared.status.lock();
            if status.initialized {
                Some(Ok(()))
            } else if !status.running {
                Some(Err(status
                    .end
                    .clone()
                    .unwrap_or(RecipeError::Lost(LossReason::Closed))))
            } else {
                None
            }
        });
        crate::runtime::until(timeout.deadline(), initialized)
            .await
            .unwrap_or(Err(RecipeError::Timeout))
    }

    /// For `close`: the task removes its watches and ends; waited for (not where
    /// blocking is refused: there it ends in the background).
    fn shutdown(&self) {
        self.task.stop_and_join();
    }
}

/// The methods every cache type has, over its field `core`.
macro_rules! cache_methods {
    () => {
        /// The cache's events, an [`EventStream`](crate::events::EventStream) (see the
        /// [stream contract](crate::events#the-stream-contract)), coalesced per node:
        /// see [bounded memory](crate::caches#bounded-memory). Clones read the same
        /// stream.
        pub fn events(&self) -> &crate::events::EventStream<crate::caches::CacheEvent> {
            &self.core.events
        }

        /// Waits until the initial load is complete; `Timeout`, or the reason the cache
        /// stopped.
        pub fn wait_initialized(
            &self,
            timeout: impl Into<zookeeper_mt::Timeout>,
        ) -> crate::Result<()> {
            crate::runtime::block_on(self.core.wait_initialized(timeout.into()))
        }

        /// [`wait_initialized`](Self::wait_initialized), async.
        pub async fn wait_initialized_async(
            &self,
            timeout: impl Into<zookeeper_mt::Timeout>,
        ) -> crate::Result<()> {
            self.core.wait_initialized(timeout.into()).await
        }

        /// Whether the initial load is complete.
        pub fn is_initialized(&self) -> bool {
            self.core.shared.status.lock().initialized
        }

        /// Whether the cache task still runs (it stops when closed, or when the session
        /// of a plain handle ends).
        pub fn is_running(&self) -> bool {
            self.core.shared.status.lock().running
        }

        /// Why the cache stopped by itself (session expired, handle closed, ...); `None`
        /// while it runs or after [`close`](Self::close).
        pub fn end_reason(&self) -> Option<crate::RecipeError> {
            self.core.shared.status.lock().end.clone()
        }

        /// Watches the cache holds armed now: at most one data and one child watch per
        /// cached node (an absent root: one `exists` watch).
        pub fn armed_watches(&self) -> usize {
            self.core
                .shared
                .armed
                .load(std::sync::atomic::Ordering::Relaxed)
        }

        /// The watched path.
        pub fn path(&self) -> &str {
            &self.core.root
        }

        /// Stops the cache: its task ends and every watch it armed is removed. Events
        /// already queued stay readable; the stream then ends. `close` waits for the
        /// task's end; dropping the cache's last clone does the same without waiting.
        /// Closing any clone closes the cache for all of them.
        pub fn close(self) {
            self.core.shutdown();
        }
    };
}
use cache_methods;

/// Counts an armed watch in and out of the shared gauge.
fn count_armed(shared: &Shared, delta: isize) {
    if delta >= 0 {
        shared.armed.fetch_add(delta as usize, Ordering::Relaxed);
    } else {
        shared
            .armed
            .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
    }
}
