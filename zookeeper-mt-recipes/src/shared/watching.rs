//! Watching a value: a task on the driver keeps the newest one for `ValueWatch::next`
//! and its stream.

use super::*;
use crate::events::{EventQueue, EventStream, Newest, Source};

// ---------------------------------------------------------------------------------------
// Watching.
// ---------------------------------------------------------------------------------------

/// What a value stream carries: a value, or why the newest data is not one (`Corrupt`),
/// or (last) why the watch stopped by itself.
type Item<T> = Result<Versioned<T>>;

/// What the follower task shares with the watch.
pub(super) struct Latest<T> {
    /// The newest value not received yet, then the end reason: see [`ValueWatch`].
    queue: Arc<EventQueue<Newest<Item<T>>>>,
    /// The newest value seen (what [`ValueWatch::latest`] returns).
    newest: Mutex<Option<Versioned<T>>>,
    /// Why the follower stopped by itself.
    end: Mutex<Option<RecipeError>>,
}

impl<T: Clone + Send + 'static> Latest<T> {
    fn new() -> Self {
        Latest {
            queue: EventQueue::new(Newest::default()),
            newest: Mutex::new(None),
            end: Mutex::new(None),
        }
    }

    fn publish(&self, value: Item<T>) {
        *self.newest.lock() = value.as_ref().ok().cloned();
        self.queue.update(|b| b.set(value));
    }

    /// Ends the stream: after the newest value, the reason (if the watch stopped by
    /// itself), then the end.
    fn end(&self, reason: Option<RecipeError>) {
        if let Some(reason) = reason {
            *self.end.lock() = Some(reason.clone());
            self.queue.update(|b| b.set_final(Err(reason)));
        }
        self.queue.close();
    }
}

/// Follows one value node: each call to [`next`](Self::next) returns the newest value
/// not returned yet. A reader that falls behind skips the values it missed but always
/// gets the newest, so once writes stop the last value it receives is the node's final
/// value. Values come in increasing `mzxid` order, never twice.
///
/// A background task keeps one data watch on the node, re-armed by the read that fetches
/// each new value (no change after a read goes unnoticed). It survives connection loss;
/// on a managed client it carries on in each new session after an expiry (reading the
/// value again). It stops when the session of a plain handle ends, or the managed client
/// is closed ([`next`](Self::next) then reports why, after the last value), or when the
/// `ValueWatch` is dropped.
///
/// As an [`EventStream`] ([`into_stream`](Self::into_stream)), the values are items
/// `Ok(value)` or `Err(Corrupt)`, the stream keeps only the newest one not received,
/// and a watch that stopped by itself ends with an `Err` item saying why (see the
/// [stream contract](crate::events#the-stream-contract)). `next` is the same stream
/// read with a timeout, plus the end reason on every call after the end.
pub struct ValueWatch<T> {
    latest: Arc<Latest<T>>,
    stream: EventStream<Item<T>>,
    task: Option<Task>,
}

impl<T> fmt::Debug for ValueWatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueWatch")
            .field("queued", &self.stream.len())
            .field("ended", &self.stream.is_ended())
            .finish()
    }
}

impl<T: Clone + Send + 'static> ValueWatch<T> {
    /// Reads the value with a watch (errors such as a closed session are reported here,
    /// and the current value is there at once), then follows it on the driver.
    pub(super) async fn start<L: Layout<Value = T>>(cell: &Cell<L>) -> Result<ValueWatch<T>> {
        // Subscribed to the client's states before the first read: nothing is missed.
        let following = Following::new(cell.client.clone(), true, RetryPolicy::FOLLOWING);
        let zk = following.zk.clone();
        let latest = Arc::new(Latest::new());
        let mut reader = ValueReader::<L> {
            path: cell.path.clone(),
            latest: Arc::clone(&latest),
            last_mzxid: i64::MIN,
            layout: PhantomData,
        };
        let watch = first_read(&mut reader, &zk, cell.deadline().into()).await?;
        let on_panic = Arc::clone(&latest);
        let task = spawn(
            format!("value-watch {}", cell.path),
            move |stop| async move {
                let reason = follow(&mut reader, following, stop, Some(watch)).await;
                reader.latest.end(reason);
            },
            move || on_panic.end(Some(RecipeError::Lost(LossReason::WorkerFailed))),
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(ValueWatch {
            stream: EventStream::new(Arc::clone(&latest.queue) as Arc<dyn Source<Item<T>>>),
            latest,
            task: Some(task),
        })
    }

    /// Waits at most `timeout` ([`Timeout::Never`]: as long as it takes) for a value
    /// newer than the last one returned (the first call returns the current one at
    /// once). `Err(Timeout)`: nothing new in time. `Err(Corrupt)`: the newest data is
    /// not a value of this layout. Once the watch has stopped by itself and its last
    /// value was returned, the reason it stopped.
    pub fn next(&mut self, timeout: impl Into<Timeout>) -> Result<Versioned<T>> {
        block_on(self.next_async(timeout))
    }

    /// Async [`next`](Self::next), for any executor; no thread waits for it. Dropping
    /// the future loses nothing: the value stays for the next call.
    pub async fn next_async(&mut self, timeout: impl Into<Timeout>) -> Result<Versioned<T>> {
        let deadline = timeout.into().deadline();
        match until(deadline, self.stream.next()).await {
            Some(Some(item)) => item,
            Some(None) => Err(self.ended()),
            None => Err(RecipeError::Timeout),
        }
    }

    /// Why the stream has ended (what `next` reports after the end).
    fn ended(&self) -> RecipeError {
        self.latest
            .end
            .lock()
            .clone()
            .unwrap_or(RecipeError::Lost(LossReason::Closed))
    }

    /// The newest value seen so far, without waiting (and without marking it returned).
    pub fn latest(&self) -> Option<Versioned<T>> {
        self.latest.newest.lock().clone()
    }

    /// Whether the background task still runs.
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Why the watch stopped by itself (session ended, client closed, ...); `None`
    /// while it runs.
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.latest.end.lock().clone()
    }

    /// The values as an [`EventStream`] (see the type's docs): `Ok(value)` or
    /// `Err(Corrupt)` items, the newest one only; a watch that stops by itself ends with
    /// an `Err` item saying why. The watch's task runs while the stream (or a clone of
    /// it) lives; dropping the last one stops it, as dropping the `ValueWatch` does.
    pub fn into_stream(mut self) -> EventStream<Result<Versioned<T>>> {
        let stopper = StopOnDrop(self.task.take());
        self.stream.clone().keeping(stopper)
    }
}

/// Stops a watch's task (without waiting for it) when the stream that owns it goes.
struct StopOnDrop(Option<Task>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.cancel();
        }
    }
}

impl<T> Drop for ValueWatch<T> {
    /// Asks the task to stop and returns (it ends on the driver, abandoning a read).
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.cancel();
        }
    }
}

/// The follower's reads: each publishes the node's value if it is new.
struct ValueReader<L: Layout> {
    path: String,
    latest: Arc<Latest<L::Value>>,
    /// `mzxid` of the last value published: only newer ones are.
    last_mzxid: i64,
    layout: PhantomData<L>,
}

impl<L: Layout> NodeReader for ValueReader<L> {
    fn read<'a>(&'a mut self, zk: &'a ZooKeeper) -> ReadFuture<'a> {
        Box::pin(self.read_async(zk))
    }
}

impl<L: Layout> ValueReader<L> {
    /// Reads the node with a new watch and publishes its value if it is new.
    async fn read_async(&mut self, zk: &ZooKeeper) -> zookeeper_mt::Result<Option<Watch>> {
        match crate::support::watched(zk, zk.get_watch_async(&self.path)).await {
            Ok((data, stat, watch)) => {
                self.publish(&data, stat);
                Ok(Some(watch))
            }
            // Deleted: wait for the re-creation (not reported as a value).
            Err(Error::NoNode) => {
                match crate::support::watched(zk, zk.exists_watch_async(&self.path)).await? {
                    (None, watch) => Ok(Some(watch)),
                    // Created in between. An exists watch on a node fires on its next change
                    // or deletion, like a data watch: keep it (a dropped one would stay
                    // registered until that change) and read the value it guards.
                    (Some(_), watch) => match zk.get_async(&self.path).await {
                        Ok((data, stat)) => {
                            self.publish(&data, stat);
                            Ok(Some(watch))
                        }
                        // Deleted again: the watch has fired or will; the next read sees it.
                        Err(Error::NoNode) => Ok(Some(watch)),
                        Err(error) => {
                            // The value it guards is unknown: take it off and read afresh.
                            if zk.remove_watch(&watch).is_err() {
                                let _ = zk.remove_watch(&watch);
                            }
                            Err(error)
                        }
                    },
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Makes `data` the latest value if it is newer than the last one.
    fn publish(&mut self, data: &[u8], stat: Stat) {
        if stat.mzxid <= self.last_mzxid {
            return;
        }
        self.last_mzxid = stat.mzxid;
        let value = decode::<L>(&self.path, data).map(|value| Versioned {
            value,
            version: stat.version,
            stat,
        });
        self.latest.publish(value);
    }
}
