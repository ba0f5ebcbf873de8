//! Watching a value: a thread keeps the newest one for `ValueWatch::next`.

use super::*;

// ---------------------------------------------------------------------------------------
// Watching.
// ---------------------------------------------------------------------------------------

/// The latest value seen, shared between the follower thread and the reader.
pub(super) struct Latest<T> {
    pub(super) state: Mutex<LatestState<T>>,
    pub(super) changed: Condvar,
}

pub(super) struct LatestState<T> {
    /// The newest value (or why the newest data could not be read as one).
    pub(super) value: Option<std::result::Result<Versioned<T>, RecipeError>>,
    /// Bumped on every new value.
    pub(super) serial: u64,
    /// Why the follower stopped by itself.
    pub(super) ended: Option<RecipeError>,
}

/// Follows one value node: each call to [`next`](Self::next) returns the newest value
/// not returned yet. A reader that falls behind skips the values it missed but always
/// gets the newest, so once writes stop the last value it receives is the node's final
/// value. Values come in increasing `mzxid` order, never twice.
///
/// A background thread keeps one data watch on the node, re-armed by the read that
/// fetches each new value (no change after a read goes unnoticed). It survives
/// connection loss; it stops when the session ends ([`next`](Self::next) then reports
/// why, after the last value) or when the `ValueWatch` is dropped.
pub struct ValueWatch<T> {
    pub(super) latest: Arc<Latest<T>>,
    pub(super) seen: u64,
    pub(super) stop: Option<Sender<()>>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl<T> fmt::Debug for ValueWatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueWatch")
            .field("seen", &self.seen)
            .finish()
    }
}

impl<T: Clone + Send + 'static> ValueWatch<T> {
    pub(super) fn start<L: Layout<Value = T>>(cell: &Cell<L>) -> Result<ValueWatch<T>> {
        let latest = Arc::new(Latest {
            state: Mutex::new(LatestState {
                value: None,
                serial: 0,
                ended: None,
            }),
            changed: Condvar::new(),
        });
        let (stop, stop_rx) = crossbeam_channel::bounded(0);
        let mut follower = Follower::<L> {
            zk: cell.zk.clone(),
            path: cell.path.clone(),
            latest: Arc::clone(&latest),
            stop: stop_rx,
            last_mzxid: i64::MIN,
            layout: PhantomData,
        };
        // The first read happens here, so errors (a closed session) are reported now and
        // the current value is there at once.
        let deadline = Deadline::after(cell.timeout);
        let mut attempt = 0;
        let watch = loop {
            match follower.read() {
                Ok(watch) => break watch,
                Err(error) if error.is_retryable() => {
                    attempt += 1;
                    await_reconnect(&cell.zk, deadline, attempt)?;
                }
                Err(error) => return Err(error.into()),
            }
        };
        let thread = std::thread::Builder::new()
            .name(format!("value-watch {}", cell.path))
            .spawn(move || {
                let reason = follower.run(watch);
                let mut state = follower.latest.state.lock();
                state.ended = reason;
                drop(state);
                follower.latest.changed.notify_all();
            })
            .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ValueWatch {
            latest,
            seen: 0,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Waits at most `timeout` ([`Timeout::Never`]: as long as it takes) for a value
    /// newer than the last one returned (the first call returns the current one at
    /// once). `Err(Timeout)`: nothing new in time. `Err(Corrupt)`: the newest data is not a value of this layout. Once
    /// the watch has stopped by itself and its last value was returned, the reason it
    /// stopped.
    pub fn next(&mut self, timeout: impl Into<Timeout>) -> Result<Versioned<T>> {
        let deadline = timeout.into().deadline();
        let mut state = self.latest.state.lock();
        loop {
            if state.serial > self.seen {
                self.seen = state.serial;
                if let Some(value) = &state.value {
                    return value.clone();
                }
            }
            if let Some(reason) = &state.ended {
                return Err(reason.clone());
            }
            let Some(at) = deadline.instant() else {
                self.latest.changed.wait(&mut state);
                continue;
            };
            if self.latest.changed.wait_until(&mut state, at).timed_out()
                && state.serial == self.seen
                && state.ended.is_none()
            {
                return Err(RecipeError::Timeout);
            }
        }
    }

    /// The newest value seen so far, without waiting (and without marking it returned).
    pub fn latest(&self) -> Option<Versioned<T>> {
        match &self.latest.state.lock().value {
            Some(Ok(value)) => Some(value.clone()),
            _ => None,
        }
    }

    /// Whether the background thread still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl<T> Drop for ValueWatch<T> {
    fn drop(&mut self) {
        // Dropping the sender wakes the thread's select.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watch's background side.
pub(super) struct Follower<L: Layout> {
    pub(super) zk: ZooKeeper,
    pub(super) path: String,
    pub(super) latest: Arc<Latest<L::Value>>,
    pub(super) stop: Receiver<()>,
    /// `mzxid` of the last value published: only newer ones are.
    pub(super) last_mzxid: i64,
    pub(super) layout: PhantomData<L>,
}

impl<L: Layout> Follower<L> {
    /// Reads the node with a new watch and publishes its value if it is new.
    pub(super) fn read(&mut self) -> zookeeper::Result<Watch> {
        match self.zk.get_watch(&self.path) {
            Ok((data, stat, watch)) => {
                self.publish(&data, stat);
                Ok(watch)
            }
            // Deleted: wait for the re-creation (not reported as a value).
            Err(Error::NoNode) => match self.zk.exists_watch(&self.path)? {
                (None, watch) => Ok(watch),
                // Created in between. An exists watch on a node fires on its next change
                // or deletion, like a data watch: keep it (a dropped one would stay
                // registered until that change) and read the value it guards.
                (Some(_), watch) => match self.zk.get(&self.path) {
                    Ok((data, stat)) => {
                        self.publish(&data, stat);
                        Ok(watch)
                    }
                    // Deleted again: the watch has fired or will; the next read sees it.
                    Err(Error::NoNode) => Ok(watch),
                    Err(error) => {
                        // The value it guards is unknown: take it off and read afresh.
                        if self.zk.remove_watch(&watch).is_err() {
                            let _ = self.zk.remove_watch(&watch);
                        }
                        Err(error)
                    }
                },
            },
            Err(error) => Err(error),
        }
    }

    /// Makes `data` the latest value if it is newer than the last one.
    pub(super) fn publish(&mut self, data: &[u8], stat: Stat) {
        if stat.mzxid <= self.last_mzxid {
            return;
        }
        self.last_mzxid = stat.mzxid;
        let value = decode::<L>(&self.path, data).map(|value| Versioned {
            value,
            version: stat.version,
            stat,
        });
        let mut state = self.latest.state.lock();
        state.value = Some(value);
        state.serial += 1;
        drop(state);
        self.latest.changed.notify_all();
    }

    /// Waits for changes until stopped (`None`) or the session ends (its error).
    pub(super) fn run(&mut self, mut watch: Watch) -> Option<RecipeError> {
        loop {
            select! {
                recv(watch.receiver()) -> event => match event.map(check_event) {
                    Ok(Ok(_)) => {}
                    Ok(Err(ended)) => return Some(ended),
                    Err(_) => return Some(RecipeError::ZooKeeper(Error::Closed)),
                },
                recv(self.stop) -> _ => {
                    // Take the watch off, server side too (locally while disconnected),
                    // rather than leave it registered until the node changes.
                    if self.zk.remove_watch(&watch).is_err() {
                        let _ = self.zk.remove_watch(&watch);
                    }
                    return None;
                }
            }
            watch = loop {
                match self.read() {
                    Ok(watch) => break watch,
                    Err(error) if error.is_retryable() => {
                        // Wait for the connection, still obeying a stop request.
                        loop {
                            let state = self.zk.state();
                            if state.is_terminal() {
                                return Some(session_error(state));
                            }
                            if state.is_connected() {
                                break;
                            }
                            select! {
                                recv(self.stop) -> _ => return None,
                                default(Duration::from_millis(50)) => {}
                            }
                        }
                    }
                    Err(error) => return Some(error.into()),
                }
            };
        }
    }
}
