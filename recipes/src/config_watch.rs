//! Config watch: follow one znode and receive its newest state (for workers that
//! reload their configuration when it changes).
//!
//! [`ConfigWatch::start`] reads the node once (its current state is the first state
//! every receiver sees), then a background thread waits on a one-shot watch and, after
//! every event, re-reads the node *with a new watch* (`get_watch`, or `exists_watch`
//! while the node is absent). Because the watch is re-armed by the same read that
//! fetches the value, no change made after a read can go unnoticed.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_recipes::config_watch::{ConfigEvent, ConfigWatch};
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let config = ConfigWatch::start(&zk, "/app/config")?;
//! for event in config.receiver() {
//!     match event {
//!         ConfigEvent::Value { data, stat } => println!("v{}: {data:?}", stat.version),
//!         ConfigEvent::Deleted => println!("config removed"),
//!     }
//! }
//! // The loop ends when the watch stops (session expired or closed).
//! # Ok::<(), zookeeper_recipes::RecipeError>(())
//! ```
//!
//! # Receivers: the newest state, for each of them
//! The watch keeps one state: the newest. Each [`ConfigReceiver`] (from
//! [`ConfigWatch::receiver`], or a clone of one) receives the newest state it has not
//! seen yet. A slow reader therefore skips intermediate states instead of queueing them
//! (memory stays one value however large and busy the node), and no receiver takes a
//! state away from another: every receiver sees the final state.
//!
//! # What is delivered, exactly (to each receiver)
//! - The first state is the newest one when it first receives (the state at `start`,
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
//! # Stopping
//! The thread stops, and receivers end (after the final state), when the `ConfigWatch`
//! is dropped or [`stop`](ConfigWatch::stop)ped, or when the session ends (expired,
//! auth failed, closed); [`ConfigWatch::end_reason`] then tells why. A connection loss
//! does not stop it: the watch survives reconnection and the thread re-reads once
//! connected again.

use crate::error::LossReason;
use crate::support::{await_reconnect, check_event, op_deadline, session_error};
use crate::{RecipeError, Result};
use crossbeam_channel::{select, Receiver, RecvError, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zookeeper::{Error, Stat, Timeout, Watch, ZooKeeper};

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

/// The latest state, shared by the background thread and every receiver.
#[derive(Debug, Default)]
struct Latest {
    /// Number of states delivered so far (0: none yet).
    count: u64,
    /// The newest one.
    event: Option<ConfigEvent>,
    /// The watch has stopped: no state will follow `event`.
    ended: bool,
}

#[derive(Debug, Default)]
struct Shared {
    latest: Mutex<Latest>,
    changed: Condvar,
}

impl Shared {
    fn publish(&self, event: ConfigEvent) {
        let mut latest = self.latest.lock();
        latest.count += 1;
        latest.event = Some(event);
        self.changed.notify_all();
    }

    fn end(&self) {
        self.latest.lock().ended = true;
        self.changed.notify_all();
    }
}

/// A receiver of a [`ConfigWatch`]'s states: each receiver gets the newest state it has
/// not seen yet, so a slow reader skips intermediate states rather than queueing them
/// (memory stays one value however busy the node is), and every receiver sees the final
/// state. A clone is an independent receiver that has seen what this one has.
///
/// Iterating blocks for each next state and ends once the watch has stopped and its
/// final state was received.
#[derive(Debug)]
pub struct ConfigReceiver {
    shared: Arc<Shared>,
    /// The count of the last state this receiver returned.
    seen: AtomicU64,
}

impl Clone for ConfigReceiver {
    fn clone(&self) -> ConfigReceiver {
        ConfigReceiver {
            shared: Arc::clone(&self.shared),
            seen: AtomicU64::new(self.seen.load(Ordering::Relaxed)),
        }
    }
}

impl ConfigReceiver {
    fn new(shared: Arc<Shared>) -> ConfigReceiver {
        ConfigReceiver {
            shared,
            seen: AtomicU64::new(0),
        }
    }

    /// Takes the newest unseen state if there is one; `Err(true)`: the watch ended
    /// (and everything was seen), `Err(false)`: nothing new yet.
    fn take(&self, latest: &Latest) -> std::result::Result<ConfigEvent, bool> {
        if latest.count > self.seen.load(Ordering::Relaxed) {
            if let Some(event) = &latest.event {
                self.seen.store(latest.count, Ordering::Relaxed);
                return Ok(event.clone());
            }
        }
        Err(latest.ended)
    }

    /// Blocks until a state this receiver has not seen arrives (the newest one), or the
    /// watch has stopped and its final state was received (`Err`).
    pub fn recv(&self) -> std::result::Result<ConfigEvent, RecvError> {
        let mut latest = self.shared.latest.lock();
        loop {
            match self.take(&latest) {
                Ok(event) => return Ok(event),
                Err(true) => return Err(RecvError),
                Err(false) => self.shared.changed.wait(&mut latest),
            }
        }
    }

    /// [`recv`](Self::recv), waiting at most `timeout`.
    pub fn recv_timeout(
        &self,
        timeout: Duration,
    ) -> std::result::Result<ConfigEvent, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut latest = self.shared.latest.lock();
        loop {
            match self.take(&latest) {
                Ok(event) => return Ok(event),
                Err(true) => return Err(RecvTimeoutError::Disconnected),
                Err(false) => match deadline {
                    None => self.shared.changed.wait(&mut latest),
                    Some(at) => {
                        if self.shared.changed.wait_until(&mut latest, at).timed_out() {
                            return self.take(&latest).map_err(|ended| {
                                if ended {
                                    RecvTimeoutError::Disconnected
                                } else {
                                    RecvTimeoutError::Timeout
                                }
                            });
                        }
                    }
                },
            }
        }
    }

    /// The newest unseen state, without blocking.
    pub fn try_recv(&self) -> std::result::Result<ConfigEvent, TryRecvError> {
        self.take(&self.shared.latest.lock()).map_err(|ended| {
            if ended {
                TryRecvError::Disconnected
            } else {
                TryRecvError::Empty
            }
        })
    }
}

impl Iterator for ConfigReceiver {
    type Item = ConfigEvent;

    fn next(&mut self) -> Option<ConfigEvent> {
        self.recv().ok()
    }
}

/// A running watch on one znode (see the [module docs](self)). Dropping it stops the
/// background thread and waits for it to finish.
#[derive(Debug)]
pub struct ConfigWatch {
    path: String,
    shared: Arc<Shared>,
    /// The watch's own receiver, behind `next` and `latest`.
    own: ConfigReceiver,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    end: Arc<Mutex<Option<RecipeError>>>,
}

impl ConfigWatch {
    /// Starts watching `path`. The node's current state is read before this returns
    /// (errors such as an invalid path or a closed session are reported here) and is the
    /// first state every receiver sees.
    pub fn start(zk: &ZooKeeper, path: &str) -> Result<ConfigWatch> {
        let shared = Arc::new(Shared::default());
        let (stop, stop_rx) = crossbeam_channel::bounded(0);
        let mut follower = Follower {
            zk: zk.clone(),
            path: path.to_string(),
            shared: Arc::clone(&shared),
            stop: stop_rx,
            session: zk.session_events().into_receiver(),
            last: Last::Nothing,
        };
        let deadline = op_deadline(zk);
        let mut attempt = 0;
        let watch = loop {
            match follower.read() {
                Ok(Some(watch)) => break watch,
                Ok(None) => continue,
                Err(error) if error.is_retryable() => {
                    attempt += 1;
                    await_reconnect(zk, deadline, attempt)?;
                }
                Err(error) => return Err(error.into()),
            }
        };
        let end = Arc::new(Mutex::new(None));
        let end_slot = Arc::clone(&end);
        let thread = std::thread::Builder::new()
            .name(format!("config-watch {path}"))
            .spawn(move || {
                if let Some(reason) = follower.run(watch) {
                    log::debug!("recipes: config watch on {}: {reason}", follower.path);
                    *end_slot.lock() = Some(reason);
                }
                // `follower` drops here: receivers learn that the watch has ended.
            })
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ConfigWatch {
            path: path.to_string(),
            own: ConfigReceiver::new(Arc::clone(&shared)),
            shared,
            stop: Some(stop),
            thread: Some(thread),
            end,
        })
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A new receiver of the node's states, independent of every other: it first gets
    /// the current state, then each newer one it is there to take (a slow receiver skips
    /// to the newest), and always the final one. It ends once the watch has stopped and
    /// that final state was received.
    pub fn receiver(&self) -> ConfigReceiver {
        ConfigReceiver::new(Arc::clone(&self.shared))
    }

    /// Waits at most `timeout` ([`Timeout::Never`]: as long as it takes) for a state
    /// newer than the last one this method (or [`latest`](Self::latest)) returned:
    /// `Err(Timeout)` if none came, `Err(Lost)` (or the session error) if the watch has
    /// stopped and its final state was returned.
    pub fn next(&self, timeout: impl Into<Timeout>) -> Result<ConfigEvent> {
        let received = match timeout.into().duration() {
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

    /// The newest state not yet returned by [`next`](Self::next) or
    /// this method, if any (without blocking).
    pub fn latest(&self) -> Option<ConfigEvent> {
        self.own.try_recv().ok()
    }

    /// Whether the watch still runs: false from the moment its end is published, so
    /// once a receive has reported the end this reads false too.
    pub fn is_running(&self) -> bool {
        !self.shared.latest.lock().ended && self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Why the watch stopped by itself (session expired, closed, ...); `None` while it
    /// runs or after a requested stop.
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.end.lock().clone()
    }

    /// Stops the watch and waits for its thread. The final state stays readable
    /// through receivers obtained earlier.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        // Dropping the sender wakes the thread's `select!`.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.end();
    }
}

impl Drop for ConfigWatch {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What was last delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    Value { mzxid: i64 },
    Deleted,
}

/// The background side: reads, delivers, waits.
struct Follower {
    zk: ZooKeeper,
    path: String,
    shared: Arc<Shared>,
    stop: Receiver<()>,
    session: Receiver<zookeeper::WatchedEvent>,
    last: Last,
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.shared.end();
    }
}

/// Why `run` returns: `None` for a requested stop.
type EndReason = Option<RecipeError>;

impl Follower {
    /// Reads the node with a new watch and delivers its state if it is new.
    /// `Ok(None)`: the node changed kind between the two reads; read again.
    fn read(&mut self) -> zookeeper::Result<Option<Watch>> {
        match self.zk.get_watch(&self.path) {
            Ok((data, stat, watch)) => {
                self.deliver(ConfigEvent::Value { data, stat });
                Ok(Some(watch))
            }
            Err(Error::NoNode) => match self.zk.exists_watch(&self.path)? {
                (None, watch) => {
                    self.deliver(ConfigEvent::Deleted);
                    Ok(Some(watch))
                }
                // Created in between: the exists watch will fire on the next change
                // and be discarded; read the value with a data watch instead.
                (Some(_), _) => Ok(None),
            },
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
        self.shared.publish(event);
    }

    fn run(&mut self, mut watch: Watch) -> EndReason {
        loop {
            // Wait for the watch, a stop request, or (only to end) the session.
            select! {
                recv(watch.receiver()) -> event => match event.map(check_event) {
                    Ok(Ok(_)) => {}
                    Ok(Err(session_ended)) => return Some(session_ended),
                    Err(_) => return Some(RecipeError::ZooKeeper(Error::Closed)),
                },
                recv(self.stop) -> _ => return None,
            }
            watch = loop {
                match self.read() {
                    Ok(Some(watch)) => break watch,
                    Ok(None) => continue,
                    Err(error) if error.is_retryable() => {
                        if let Some(reason) = self.wait_connected() {
                            return reason;
                        }
                    }
                    Err(error) => return Some(error.into()),
                }
            };
        }
    }

    /// Waits for reconnection, a stop request or the session's end. `None`: connected.
    fn wait_connected(&mut self) -> Option<EndReason> {
        // Back off briefly if the state has not caught up with the loss yet.
        let mut first = true;
        loop {
            let state = self.zk.state();
            if state.is_terminal() {
                return Some(Some(session_error(state)));
            }
            if state.is_connected() && !first {
                return None;
            }
            let pause = if first {
                std::time::Duration::from_millis(20)
            } else {
                std::time::Duration::from_secs(1)
            };
            first = false;
            select! {
                recv(self.session) -> event => {
                    if event.is_err() {
                        return Some(Some(RecipeError::ZooKeeper(Error::Closed)));
                    }
                }
                recv(self.stop) -> _ => return Some(None),
                default(pause) => {}
            }
        }
    }
}
