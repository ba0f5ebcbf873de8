//! Config watch: follow one znode and receive its newest state (for workers that
//! reload their configuration when it changes).
//!
//! It is what kazoo's `DataWatch` is (the node's data and stat after each change, read
//! with a new watch), delivered as a stream of the newest state per receiver. It is not
//! a cache with change events: for that, [`NodeCache`](crate::caches::NodeCache)
//! (Curator's `NodeCache`).
//!
//! [`ConfigWatch::new`] reads the node once (its current state is the first state
//! every receiver sees), then a background task waits on a one-shot watch and, after
//! every event, re-reads the node *with a new watch* (`get_watch`, or `exists_watch`
//! while the node is absent). Because the watch is re-armed by the same read that
//! fetches the value, no change made after a read can go unnoticed. The task runs on the
//! recipes' one background thread, with every other recipe's: a watch costs no thread of
//! its own.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::caches::{ConfigEvent, ConfigWatch};
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let config = ConfigWatch::new(&zk, "/app/config")?;
//! for event in config.receiver() {
//!     match event {
//!         ConfigEvent::Value { data, stat } => println!("v{}: {data:?}", stat.version),
//!         ConfigEvent::Deleted => println!("config removed"),
//!     }
//! }
//! // The loop ends when the watch stops (session expired or closed).
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Receivers: the newest state, for each of them
//! Each receiver ([`ConfigWatch::receiver`], or a clone of one) is an
//! [`EventStream`] of its own (see the
//! [stream contract](crate::events#the-stream-contract)) whose buffer keeps one state:
//! the newest it has not received. The watch pushes each new state to every live
//! receiver. A slow reader therefore skips intermediate states instead of queueing them
//! (memory stays one value per receiver however large and busy the node), and no
//! receiver takes a state away from another: every receiver sees the final state.
//!
//! # What is delivered, exactly (to each receiver)
//! - The first state is the newest one when it first receives (the state at `new`,
//!   for a receiver that starts reading at once): `Value`, or `Deleted` if absent.
//! - Values arrive in strictly increasing modification order (`stat.mzxid`, which also
//!   orders a node's re-creation after its deletion); a value is never delivered twice
//!   (duplicates are skipped by `mzxid`), and `Deleted` is never sent twice in a row.
//! - The latest value is always delivered: once updates stop, the last state every
//!   receiver gets is the node's final state.
//! - Intermediate values may be **coalesced**: ZooKeeper watches are one-shot, and a
//!   value written and overwritten between an event and the re-read is never seen
//!   (`stat.version` may jump); a receiver that reads slower than the node changes sees
//!   fewer still. A deletion followed quickly by a re-creation may arrive as just the new
//!   `Value` (its `stat.czxid` differs from the previous value's).
//!
//! # Sessions
//! A watch started on a plain handle follows its one session. Started on a
//! [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper), it carries on in each new
//! session after an expiry: it reads the node again with a fresh watch and delivers its
//! state if it changed meanwhile (the rules above hold across sessions).
//!
//! # Stopping
//! The task stops, and receivers end (after the final state), when the `ConfigWatch`
//! is dropped or [`stop`](ConfigWatch::stop)ped, or when the session of a plain handle
//! ends (expired, auth failed, closed), or the managed client is closed;
//! [`ConfigWatch::end_reason`] then tells why. A connection loss does not stop it: the
//! watch survives reconnection and the task re-reads once connected again.

mod follow;
mod receiver;

pub(crate) use follow::{first_read, follow, NodeReader, ReadFuture};

use crate::error::LossReason;
use crate::events::{EventStream, RecvTimeoutError, TryRecvError};
use crate::lifecycle::following::Following;
use crate::lifecycle::Client;
use crate::runtime::{block_on, spawn, Task};
use crate::support::op_deadline;
use crate::{RecipeError, Result, RetryPolicy};
use parking_lot::Mutex;
use receiver::Hub;
use std::sync::Arc;
use zookeeper_mt::{Error, Stat, Timeout, Watch, ZooKeeper};

/// One state of the watched node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigEvent {
    /// The node exists with this data.
    Value {
        /// The node's data.
        data: Vec<u8>,
        /// Its `Stat` (`version`, `mzxid`, `czxid`, ...).
        stat: Stat,
    },
    /// The node does not exist (at start, or it was deleted).
    Deleted,
}

impl ConfigEvent {
    /// The data, if this is a value.
    pub fn data(&self) -> Option<&[u8]> {
        match self {
            ConfigEvent::Value { data, .. } => Some(data),
            ConfigEvent::Deleted => None,
        }
    }

    /// The stat, if this is a value.
    pub fn stat(&self) -> Option<&Stat> {
        match self {
            ConfigEvent::Value { stat, .. } => Some(stat),
            ConfigEvent::Deleted => None,
        }
    }
}

/// A running watch on one znode (see the [module docs](self)). Dropping it stops the
/// background task without waiting for it ([`stop`](Self::stop) waits). Cheap to clone:
/// clones are one watch (one task, one own receiver); dropping the last clone stops it,
/// and `stop` on any clone stops it for all.
#[derive(Debug, Clone)]
pub struct ConfigWatch {
    path: String,
    hub: Arc<Hub>,
    /// The watch's own receiver, behind `next` and `latest`: one for all clones (a
    /// config receiver's clone would be a receiver of its own).
    own: Arc<EventStream<ConfigEvent>>,
    task: Arc<Running>,
    end: Arc<Mutex<Option<RecipeError>>>,
}

/// The watch's task, shared by its clones: the last one's drop asks it to stop and
/// returns; the task abandons a read in flight and takes its watch off on the driver.
#[derive(Debug)]
struct Running {
    task: Task,
    hub: Arc<Hub>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.cancel();
        self.hub.end();
    }
}

impl ConfigWatch {
    /// Starts watching `path` with a plain handle or a managed client (`&zk`,
    /// `&managed`; see the [module docs](self) on sessions). The node's current state is
    /// read before this returns (errors such as an invalid path or a closed session are
    /// reported here) and is the first state every receiver sees.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<ConfigWatch> {
        block_on(Self::new_async(client, path))
    }

    /// [`new`](Self::new), async: the first read is awaited, not waited for.
    pub async fn new_async(client: impl Into<Client>, path: &str) -> Result<ConfigWatch> {
        // Subscribed to the client's states before the first read: nothing is missed.
        let following = Following::new(client.into(), true, RetryPolicy::FOLLOWING);
        let hub = Arc::new(Hub::default());
        let mut reader = ConfigReader {
            path: path.to_string(),
            hub: Arc::clone(&hub),
            last: Last::Nothing,
        };
        let zk = following.zk.clone();
        let watch = first_read(&mut reader, &zk, op_deadline(&zk).into()).await?;
        let end = Arc::new(Mutex::new(None));
        let end_slot = Arc::clone(&end);
        let (panic_end, panic_hub) = (Arc::clone(&end), Arc::clone(&hub));
        let task = spawn(
            format!("config-watch {path}"),
            move |stop| async move {
                if let Some(reason) = follow(&mut reader, following, stop, Some(watch)).await {
                    log::debug!("recipes: config watch on {}: {reason}", reader.path);
                    *end_slot.lock() = Some(reason);
                }
                // Receivers learn that the watch has ended (after its reason is set).
                reader.hub.end();
            },
            move || {
                *panic_end.lock() = Some(RecipeError::Lost(LossReason::WorkerFailed));
                panic_hub.end();
            },
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ConfigWatch {
            path: path.to_string(),
            own: Arc::new(hub.subscribe()),
            task: Arc::new(Running {
                task,
                hub: Arc::clone(&hub),
            }),
            hub,
            end,
        })
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A new receiver of the node's states, an [`EventStream`] (see the
    /// [stream contract](crate::events#the-stream-contract)) independent of every other:
    /// its buffer holds only the newest state it has not received, so it first gets the
    /// current state, then each newer one it is there to take (a slow receiver skips to
    /// the newest), and always the final one. It ends once the watch has stopped and that
    /// final state was received. A clone is a receiver of its own that has seen what the
    /// original has; dropping a receiver unregisters it.
    pub fn receiver(&self) -> EventStream<ConfigEvent> {
        self.hub.subscribe()
    }

    /// Waits at most `timeout` ([`Timeout::Never`]: as long as it takes) for a state
    /// newer than the last one this method (or [`latest`](Self::latest)) returned:
    /// `Err(Timeout)` if none came, `Err(Lost)` (or the session error) if the watch has
    /// stopped and its final state was returned. Where a blocking wait is refused (the
    /// C completion thread, the driver, an executor thread) it does not wait: a state
    /// there already, else `InvalidArgument` at once.
    pub fn next(&self, timeout: impl Into<Timeout>) -> Result<ConfigEvent> {
        let refused = crate::runtime::refused_here();
        let received = match timeout.into().duration() {
            _ if refused => match self.own.try_recv() {
                Ok(event) => Ok(event),
                Err(TryRecvError::Empty) => {
                    return Err(RecipeError::ZooKeeper(crate::runtime::REFUSED))
                }
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
            },
            Some(timeout) => self.own.recv_timeout(timeout),
            None => self.own.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(event) => Ok(event),
            Err(RecvTimeoutError::Timeout) => Err(RecipeError::Timeout),
            Err(RecvTimeoutError::Disconnected) => Err(self
                .end_reason()
                .unwrap_or(RecipeError::Lost(LossReason::Closed))),
        }
    }

    /// [`next`](Self::next), async: no thread waits for it, on any thread; dropped, it
    /// takes no state (the next call gets it).
    pub async fn next_async(&self, timeout: impl Into<Timeout>) -> Result<ConfigEvent> {
        let deadline = timeout.into().deadline();
        match crate::runtime::until(deadline, self.own.next()).await {
            Some(Some(event)) => Ok(event),
            Some(None) => Err(self
                .end_reason()
                .unwrap_or(RecipeError::Lost(LossReason::Closed))),
            None => Err(RecipeError::Timeout),
        }
    }

    /// The newest state not yet returned by [`next`](Self::next) or
    /// this method, if any (without blocking).
    pub fn latest(&self) -> Option<ConfigEvent> {
        self.own.try_recv().ok()
    }

    /// Whether the watch still runs: false from the moment its end is published, so
    /// once a receive has reported the end this reads false too.
    pub fn is_running(&self) -> bool {
        !self.hub.is_ended() && !self.task.task.is_finished()
    }

    /// Why the watch stopped by itself (session expired, closed, ...); `None` while it
    /// runs or after a requested stop.
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.end.lock().clone()
    }

    /// Stops the watch and waits for its task (not where blocking is refused: there it
    /// returns at once and the task ends in the background). The final state stays
    /// readable through receivers obtained earlier.
    pub fn stop(self) {
        self.task.task.stop_and_join();
        self.hub.end();
    }
}

/// What was last delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    Value { mzxid: i64 },
    Deleted,
}

/// The follower's reads: each delivers the node's state if it is new.
struct ConfigReader {
    path: String,
    hub: Arc<Hub>,
    last: Last,
}

impl NodeReader for ConfigReader {
    fn read<'a>(&'a mut self, zk: &'a ZooKeeper) -> ReadFuture<'a> {
        Box::pin(self.read_async(zk))
    }
}

impl ConfigReader {
    /// Reads the node with a new watch and delivers its state if it is new.
    /// `Ok(None)`: the node changed kind between the two reads; read again.
    async fn read_async(&mut self, zk: &ZooKeeper) -> zookeeper_mt::Result<Option<Watch>> {
        match crate::support::watched(zk, zk.get_watch_async(&self.path)).await {
            Ok((data, stat, watch)) => {
                self.deliver(ConfigEvent::Value { data, stat });
                Ok(Some(watch))
            }
            Err(Error::NoNode) => {
                match crate::support::watched(zk, zk.exists_watch_async(&self.path)).await? {
                    (None, watch) => {
                        self.deliver(ConfigEvent::Deleted);
                        Ok(Some(watch))
                    }
                    // Created in between: the exists watch will fire on the next change
                    // and be discarded; read the value with a data watch instead.
                    (Some(_), _) => Ok(None),
                }
            }
            Err(error) => Err(error),
        }
    }

    fn deliver(&mut self, event: ConfigEvent) {
        let next = match &event {
            ConfigEvent::Value { stat, .. } => match self.last {
                Last::Value { mzxid } if stat.mzxid <= mzxid => return,
                _ => Last::Value { mzxid: stat.mzxid },
            },
            ConfigEvent::Deleted => match self.last {
                Last::Deleted => return,
                _ => Last::Deleted,
            },
        };
        self.last = next;
        self.hub.publish(event);
    }
}
