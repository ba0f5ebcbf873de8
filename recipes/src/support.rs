//! The layer every recipe is built on (crate-internal): deadlines, riding out connection
//! loss, waiting on watches, creating and deleting nodes, and reading sequential
//! children in order.
//!
//! How long a step rides out a lost connection is its [`Patience`]. The waiting recipes
//! (barrier, election, read-write lock, semaphore, config watch, id generator) wait until
//! the call's deadline and then report `Timeout`; the recipes with a reconnect timeout
//! (queue, lock, work queue) wait at most that long for each reconnection and then
//! report the `ConnectionLoss`.

use crate::util::{sequence_in_range, sequence_of};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zookeeper::{CreateMode, Error, EventType, SessionState, Stat, Watch, WatchedEvent, ZooKeeper};

// ---------------------------------------------------------------------------------------
// Time: deadlines and patience.
// ---------------------------------------------------------------------------------------

pub(crate) use zookeeper::Deadline;

/// The recipes' check of a [`Deadline`].
pub(crate) trait DeadlineExt {
    /// `Err(Timeout)` once the deadline has passed.
    fn check(self) -> Result<()>;
}

impl DeadlineExt for Deadline {
    fn check(self) -> Result<()> {
        if self.expired() {
            return Err(RecipeError::Timeout);
        }
        Ok(())
    }
}

/// How long a step that does not wait for others (create, delete, release, a read) may
/// ride out a lost connection: the negotiated session timeout (at least 1 s; 10 s while
/// unknown).
pub(crate) fn default_op_timeout(zk: &ZooKeeper) -> Duration {
    zk.session_timeout()
        .unwrap_or(Duration::from_secs(10))
        .max(Duration::from_secs(1))
}

/// A deadline [`default_op_timeout`] from now.
pub(crate) fn op_deadline(zk: &ZooKeeper) -> Deadline {
    Deadline::after(default_op_timeout(zk))
}

/// The reconnect timeout of the recipes that have one, unless told otherwise: twice the
/// session timeout (long enough to ride out a server restart that keeps the session; a
/// longer outage has probably expired it anyway).
pub(crate) fn default_reconnect_timeout(zk: &ZooKeeper) -> Duration {
    2 * default_op_timeout(zk)
}

/// How long a step rides out a lost connection, and what it reports when it gives up.
///
/// From a [`Deadline`]: until the deadline, then `Timeout`. From
/// [`reconnect`](Self::reconnect): at most that long for each reconnection (and never past
/// a deadline given with [`before`](Self::before)), then `ConnectionLoss`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Patience {
    deadline: Deadline,
    /// Longest wait for one reconnection; `None`: up to the deadline.
    reconnect: Option<Duration>,
}

impl Patience {
    /// Waits at most `timeout` for each reconnection, with no deadline.
    pub(crate) fn reconnect(timeout: Duration) -> Patience {
        Patience {
            deadline: Deadline::never(),
            reconnect: Some(timeout),
        }
    }

    /// The same patience, never waiting past `deadline`.
    pub(crate) fn before(self, deadline: Deadline) -> Patience {
        Patience { deadline, ..self }
    }

    /// How long the next reconnection may be waited for; `Err(Timeout)` once the deadline
    /// of a deadline-bound patience has passed.
    fn reconnect_wait(self) -> Result<Duration> {
        let left = self.deadline.remaining();
        match self.reconnect {
            Some(limit) => Ok(left.map_or(limit, |left| left.min(limit))),
            None => {
                self.deadline.check()?;
                Ok(left.unwrap_or(Duration::MAX))
            }
        }
    }

    /// The error for a reconnection that did not come in time.
    fn gave_up(self) -> RecipeError {
        match self.reconnect {
            Some(_) => RecipeError::ZooKeeper(Error::ConnectionLoss),
            None => RecipeError::Timeout,
        }
    }
}

impl From<Deadline> for Patience {
    fn from(deadline: Deadline) -> Patience {
        Patience {
            deadline,
            reconnect: None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Riding out connection loss.
// ---------------------------------------------------------------------------------------

/// After a retryable failure (connection loss, throttling): waits until the session is
/// connected again, within `patience`; a terminal session reports its error. `attempt`
/// counts consecutive failures: the session state is updated on the completion thread
/// and may still say "connected" just after a loss, so tries back off (5 ms longer each
/// time, up to 100 ms) instead of spinning.
pub(crate) fn await_reconnect(
    zk: &ZooKeeper,
    patience: impl Into<Patience>,
    attempt: u32,
) -> Result<()> {
    let patience = patience.into();
    if zk.state().is_connected() {
        let pause = Duration::from_millis(5 * u64::from(attempt.clamp(1, 20)));
        std::thread::sleep(pause.min(patience.reconnect_wait()?));
    }
    match zk.wait_connected(patience.reconnect_wait()?) {
        Ok(()) => Ok(()),
        Err(Error::Timeout) => Err(patience.gave_up()),
        Err(error) => Err(error.into()),
    }
}

/// Runs an idempotent request (a read, or a write whose repetition is harmless),
/// retrying it after retryable failures within `patience` (see [`await_reconnect`]).
pub(crate) fn retry<T>(
    zk: &ZooKeeper,
    patience: impl Into<Patience>,
    mut request: impl FnMut() -> zookeeper::Result<T>,
) -> Result<T> {
    let patience = patience.into();
    let mut attempt = 0;
    loop {
        match request() {
            Err(error) if error.is_retryable() => {
                attempt += 1;
                await_reconnect(zk, patience, attempt)?;
            }
            other => return other.map_err(RecipeError::from),
        }
    }
}

/// The request of a background cleanup: run again until it succeeds.
type CleanupRequest = Box<dyn FnMut(&ZooKeeper) -> zookeeper::Result<()> + Send>;

/// A cleanup handed to the background worker by [`finish_in_background`].
struct Cleanup {
    zk: ZooKeeper,
    what: String,
    request: CleanupRequest,
    /// When the worker gives up and lets go of its handle clone.
    give_up_at: Instant,
    /// Not tried again before then.
    next_try: Instant,
}

/// The cleanup worker's queue; `None` while no worker runs.
static CLEANUPS: Mutex<Option<Sender<Cleanup>>> = Mutex::new(None);

/// How long the cleanup worker stays after its last cleanup, for the next one.
const CLEANUP_LINGER: Duration = Duration::from_secs(1);

/// How often a cleanup whose client is disconnected checks for the connection.
const CLEANUP_POLL: Duration = Duration::from_millis(100);

/// Runs `request` in the background until it succeeds or fails for good: for cleanups
/// (deleting a lock node, releasing a work item) that must happen even though the
/// connection did not come back in time. `what` names the cleanup in the log.
///
/// Bounded: a cleanup is dropped once the session is over (expired, closed: its
/// ephemeral nodes went with it) or after twice the session timeout. By then either the
/// connection came back and the request ran, or the client was cut off for longer than
/// the session timeout and the server has expired the session. So the worker never
/// keeps a handle (and a session the user has let go of) open for longer than that, and
/// never loops forever when the ensemble is gone. One worker thread serves the whole
/// process and ends when it has had nothing to do for a second.
pub(crate) fn finish_in_background(
    zk: ZooKeeper,
    what: String,
    request: impl FnMut(&ZooKeeper) -> zookeeper::Result<()> + Send + 'static,
) {
    let now = Instant::now();
    let cleanup = Cleanup {
        give_up_at: now + 2 * default_op_timeout(&zk),
        next_try: now,
        zk,
        what,
        request: Box::new(request),
    };
    let mut queue = CLEANUPS.lock();
    if let Some(sender) = queue.as_ref() {
        // The worker drops its receiver only after taking the sender out under this
        // lock, so the send cannot fail here.
        let _ = sender.send(cleanup);
        return;
    }
    let (sender, receiver) = crossbeam_channel::unbounded();
    let spawned = std::thread::Builder::new()
        .name("zk-recipe-cleanup".into())
        .spawn(move || cleanup_worker(receiver));
    match spawned {
        Ok(_) => {
            let _ = sender.send(cleanup);
            *queue = Some(sender);
        }
        Err(error) => log::warn!("recipes: cannot start the cleanup thread: {error}"),
    }
}

/// The body of the cleanup thread: tries each cleanup when due, drops it when done, when
/// its session is over, or when its time is up; ends when idle.
fn cleanup_worker(receiver: Receiver<Cleanup>) {
    let mut pending: Vec<Cleanup> = Vec::new();
    loop {
        let wait = match pending.iter().map(|c| c.next_try).min() {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => CLEANUP_LINGER,
        };
        match receiver.recv_timeout(wait) {
            Ok(cleanup) => {
                pending.push(cleanup);
                pending.extend(receiver.try_iter());
            }
            Err(_) if pending.is_empty() => {
                let mut queue = CLEANUPS.lock();
                match receiver.try_recv() {
                    Ok(cleanup) => pending.push(cleanup),
                    Err(_) => {
                        *queue = None;
                        return;
                    }
                }
            }
            Err(_) => {}
        }
        let now = Instant::now();
        pending.retain_mut(|cleanup| {
            if cleanup.next_try > now {
                return true;
            }
            let state = cleanup.zk.state();
            if state.is_terminal() {
                log::debug!("recipes: {} dropped: the session is over", cleanup.what);
                return false;
            }
            if now >= cleanup.give_up_at {
                log::warn!(
                    "recipes: giving up {}: the server was unreachable too long",
                    cleanup.what
                );
                return false;
            }
            if !state.is_connected() {
                cleanup.next_try = now + CLEANUP_POLL;
                return true;
            }
            match (cleanup.request)(&cleanup.zk) {
                Ok(()) => false,
                Err(error) if error.is_retryable() => {
                    cleanup.next_try = Instant::now() + CLEANUP_POLL;
                    true
                }
                Err(error) => {
                    log::debug!("recipes: giving up {}: {error}", cleanup.what);
                    false
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// Watches.
// ---------------------------------------------------------------------------------------

/// The error a terminal session state stands for.
pub(crate) fn session_error(state: SessionState) -> RecipeError {
    RecipeError::ZooKeeper(match state {
        SessionState::AuthFailed => Error::AuthFailed,
        SessionState::Closed => Error::Closed,
        _ => Error::SessionExpired,
    })
}

/// Passes a watch event on, unless it reports the end of the session: then its error.
pub(crate) fn check_event(event: WatchedEvent) -> Result<WatchedEvent> {
    if event.event_type == EventType::Session && event.state.is_terminal() {
        return Err(session_error(event.state));
    }
    Ok(event)
}

/// Waits for `watch` to fire until `deadline` (`Ok(None)`: the deadline came first).
pub(crate) fn wait_until(
    watch: &Watch,
    deadline: Deadline,
) -> zookeeper::Result<Option<WatchedEvent>> {
    match deadline.remaining() {
        None => watch.wait().map(Some),
        Some(left) => watch.wait_timeout(left),
    }
}

/// Runs the blocking `wait` counted in `waiting` (a recipe's "threads blocked now" gauge).
pub(crate) fn counted_wait<T>(waiting: &AtomicU64, wait: impl FnOnce() -> T) -> T {
    waiting.fetch_add(1, Ordering::Relaxed);
    let result = wait();
    waiting.fetch_sub(1, Ordering::Relaxed);
    result
}

/// Takes a watch nobody waits for any more off this client, so it does not stay
/// registered until its node changes. Local removal: works while disconnected too; the
/// server's copy then fires into nothing. Failing means it has fired or gone already.
pub(crate) fn withdraw_watch(zk: &ZooKeeper, watch: &Watch) {
    let _ = zk.remove_watch(watch);
}

/// Waits for `watch` until `deadline`, counted in `waiting`: `Ok(Some(event))` once it
/// fired (the end of the session is its error), `Ok(None)` when the deadline came first,
/// and then the watch has been withdrawn ([`withdraw_watch`]).
pub(crate) fn await_watch(
    zk: &ZooKeeper,
    watch: &Watch,
    deadline: Deadline,
    waiting: &AtomicU64,
) -> Result<Option<WatchedEvent>> {
    match counted_wait(waiting, || wait_until(watch, deadline))? {
        Some(event) => check_event(event).map(Some),
        None => {
            withdraw_watch(zk, watch);
            Ok(None)
        }
    }
}

/// How a [`wait_for_change`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeWait {
    /// The watch fired: a wake-up.
    Fired,
    /// Nothing was waited for: the node was gone already, or the connection dropped
    /// (and came back). Look again.
    LookAgain,
    /// The deadline came first (the watch was taken off again).
    TimedOut,
}

/// Sets a data watch on `path` with `get` and returns the node's data and stat with it;
/// `Ok(None)` if the node is gone (nothing is registered then) or the connection dropped
/// and came back within `patience` (look again). `get`, not `exists`: on a node that is
/// already gone `exists` would leave a creation watch behind forever.
pub(crate) fn watch_node(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
) -> Result<Option<(Vec<u8>, Stat, Watch)>> {
    match zk.get_watch(path) {
        Ok(found) => Ok(Some(found)),
        Err(Error::NoNode) => Ok(None),
        Err(error) if error.is_retryable() => {
            await_reconnect(zk, patience, 1)?;
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

/// Blocks until the node at `path` (e.g. a predecessor in a line) changes or goes, or the
/// deadline of `patience` passes, counted in `waiting`. A wait that times out withdraws
/// its watch: nothing stays registered.
pub(crate) fn wait_for_change(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
    waiting: &AtomicU64,
) -> Result<NodeWait> {
    let Some((_, _, watch)) = watch_node(zk, path, patience)? else {
        return Ok(NodeWait::LookAgain);
    };
    match await_watch(zk, &watch, patience.deadline, waiting)? {
        Some(_) => Ok(NodeWait::Fired),
        None => Ok(NodeWait::TimedOut),
    }
}

// ---------------------------------------------------------------------------------------
// Nodes.
// ---------------------------------------------------------------------------------------

/// Validates a recipe's base path: a valid node path other than `/`.
pub(crate) fn check_base_path(path: &str) -> Result<()> {
    zookeeper::validate_path(path, false)?;
    if path == "/" {
        return Err(RecipeError::InvalidArgument(
            "the recipe path must not be /",
        ));
    }
    Ok(())
}

/// Creates `path` and any missing parents as empty persistent nodes with an open ACL; a
/// node that already exists is fine (the body of [`crate::util::ensure_path`]).
pub(crate) fn create_path(zk: &ZooKeeper, path: &str) -> zookeeper::Result<()> {
    create_dir(zk, path, &NodeOptions::default())
}

/// Creates the recipe directory `path` (with `nodes`' ACL, as a container if asked) and
/// any missing parents (persistent, same ACL); an existing node is fine.
pub(crate) fn create_dir(zk: &ZooKeeper, path: &str, nodes: &NodeOptions) -> zookeeper::Result<()> {
    // `exists` first: creating a node that exists under a parent we may not create in
    // would fail with NoAuth rather than NodeExists.
    if path == "/" || zk.exists(path)?.is_some() {
        return Ok(());
    }
    make_dir(zk, path, b"", nodes.dir_mode(), nodes)
}

/// Creates `path` holding `data` with `mode`; on NoNode its parents first (persistent,
/// empty). One request when the parent exists.
fn make_dir(
    zk: &ZooKeeper,
    path: &str,
    data: &[u8],
    mode: CreateMode,
    nodes: &NodeOptions,
) -> zookeeper::Result<()> {
    match zk.create(
        path,
        data,
        zookeeper::CreateOptions::new(mode).with_acl(nodes.acl_list()),
    ) {
        Ok(_) | Err(Error::NodeExists) => Ok(()),
        Err(Error::NoNode) => {
            match path.rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => {
                    make_dir(zk, parent, b"", CreateMode::Persistent, nodes)?
                }
                _ => return Err(Error::NoNode),
            }
            match zk.create(
                path,
                data,
                zookeeper::CreateOptions::new(mode).with_acl(nodes.acl_list()),
            ) {
                Ok(_) | Err(Error::NodeExists) => Ok(()),
                Err(error) => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// [`create_dir`] within `patience`.
pub(crate) fn ensure_dir(
    zk: &ZooKeeper,
    dir: &str,
    nodes: &NodeOptions,
    patience: impl Into<Patience>,
) -> Result<()> {
    retry(zk, patience, || create_dir(zk, dir, nodes))
}

/// Creates the persistent node `path` holding `data` unless it exists (then it is left as
/// it is), and any missing parents (empty), within `patience`.
pub(crate) fn create_if_absent(
    zk: &ZooKeeper,
    path: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: impl Into<Patience>,
) -> Result<()> {
    let patience = patience.into();
    let mut attempt = 0;
    loop {
        match zk.create(
            path,
            data,
            zookeeper::CreateOptions::new(CreateMode::Persistent).with_acl(nodes.acl_list()),
        ) {
            Ok(_) | Err(Error::NodeExists) => return Ok(()),
            Err(Error::NoNode) => match path.rsplit_once('/') {
                Some((parent, _)) if !parent.is_empty() => ensure_dir(zk, parent, nodes, patience)?,
                _ => return Err(Error::NoNode.into()),
            },
            Err(error) if error.is_retryable() => {
                attempt += 1;
                await_reconnect(zk, patience, attempt)?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// The directory a recipe keeps its sequential nodes in: where, how its nodes are made,
/// and what a (re)created directory holds (a semaphore's permit count, say).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeqDir<'a> {
    pub(crate) path: &'a str,
    pub(crate) data: &'a [u8],
    pub(crate) nodes: &'a NodeOptions,
}

impl SeqDir<'_> {
    /// Creates the directory (as `nodes` say, holding `data`) and missing parents; an
    /// existing one is fine.
    pub(crate) fn create(&self, zk: &ZooKeeper, patience: Patience) -> Result<()> {
        retry(zk, patience, || {
            make_dir(zk, self.path, self.data, self.nodes.dir_mode(), self.nodes)
        })
    }
}

/// Creates the ephemeral sequential child `dir/{tag}NNNNNNNNNN` holding `data` and returns
/// its name. A missing `dir` is created.
///
/// Lost-create protection: `tag` must be unique to this create (carry a
/// [`guid`](crate::util::guid)). If the reply is lost, the children are searched for the
/// tag before trying again, so a create that did apply is found, never duplicated (an
/// orphan node would block everyone behind it until the session ends). The search syncs
/// first: after a reconnection to another member that has not applied the create yet,
/// a plain read would miss the node. If the call gives up after such a loss, a
/// background step ([`finish_in_background`]) removes the node should the create have
/// applied.
///
/// This does not check the sequence number: recipes that order by it use
/// [`create_member`].
pub(crate) fn create_sequential(
    zk: &ZooKeeper,
    dir: &str,
    tag: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: impl Into<Patience>,
) -> Result<String> {
    let dir = SeqDir {
        path: dir,
        data: b"",
        nodes,
    };
    create_sequential_stat(zk, &dir, tag, data, patience.into()).map(|(name, _)| name)
}

/// [`create_sequential`], also returning the new node's stat.
fn create_sequential_stat(
    zk: &ZooKeeper,
    dir: &SeqDir,
    tag: &str,
    data: &[u8],
    patience: Patience,
) -> Result<(String, Stat)> {
    let path = format!("{}/{tag}", dir.path);
    let mut uncertain = false;
    let mut attempt = 0;
    let result = loop {
        match zk.create2(
            &path,
            data,
            zookeeper::CreateOptions::new(CreateMode::EphemeralSequential)
                .with_acl(dir.nodes.acl_list()),
        ) {
            Ok((created, stat)) => {
                let name = created.rsplit('/').next().unwrap_or_default();
                break Ok((name.to_string(), stat));
            }
            Err(Error::NoNode) => {
                if let Err(error) = dir.create(zk, patience) {
                    break Err(error);
                }
            }
            Err(error) if error.is_retryable() => {
                uncertain = true;
                attempt += 1;
                if let Err(error) = await_reconnect(zk, patience, attempt) {
                    break Err(error);
                }
                match find_tagged(zk, dir.path, tag, patience) {
                    Ok(Some(found)) => break Ok(found),
                    Ok(None) => {}
                    Err(error) => break Err(error),
                }
            }
            Err(error) => break Err(error.into()),
        }
    };
    if result.is_err() && uncertain {
        withdraw_tagged_in_background(zk, dir.path, tag);
    }
    result
}

/// The child of `dir` named with `tag` and its stat, read after a `sync` (a recovery
/// read: it decides whether a create whose reply was lost applied).
fn find_tagged(
    zk: &ZooKeeper,
    dir: &str,
    tag: &str,
    patience: Patience,
) -> Result<Option<(String, Stat)>> {
    retry(zk, patience, || zk.sync(dir))?;
    let children = match retry(zk, patience, || zk.get_children(dir)) {
        Ok(children) => children,
        Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(None),
        Err(error) => return Err(error),
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(tag)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    Ok(retry(zk, patience, || zk.exists(&path))?.map(|stat| (name, stat)))
}

/// After giving up on a create whose reply was lost: removes the node should it exist
/// (found by its tag, after a sync), in the background.
fn withdraw_tagged_in_background(zk: &ZooKeeper, dir: &str, tag: &str) {
    let (dir, tag) = (dir.to_string(), tag.to_string());
    let what = format!("withdrawing {dir}/{tag}*");
    finish_in_background(zk.clone(), what, move |zk| {
        zk.sync(&dir)?;
        let children = match zk.get_children(&dir) {
            Err(Error::NoNode) => return Ok(()),
            other => other?,
        };
        for name in children.iter().filter(|c| c.starts_with(&tag)) {
            delete_any_version(zk, &format!("{dir}/{name}"))?;
        }
        Ok(())
    });
}

/// A node made by [`create_member`]: its name, its sequence number (in range) and the
/// zxid that created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Created {
    pub(crate) name: String,
    pub(crate) seq: i32,
    pub(crate) czxid: i64,
}

/// Creates an ephemeral sequential member `dir/{tag}NNNNNNNNNN` as [`create_sequential`]
/// does, making sure its number is one the recipe may order by: below the directory's
/// limit ([`NodeOptions::sequence_limit`], by default
/// [`SEQUENCE_LIMIT`](crate::util::SEQUENCE_LIMIT)) and not negative. The step every
/// ordered recipe (lock, election, read-write lock, semaphore, the work queue's line of
/// waiters, barriers) takes at the end of a directory's sequence counter.
///
/// A node that comes back out of range is deleted at once (it must not take part; peers
/// skip such nodes meanwhile), then the directory's counter is restarted: the directory
/// is deleted, which the server allows only while it has no children, so nobody can hold
/// a node in it, and the next create makes it afresh (a creator that meets the gap gets
/// NoNode and creates the directory itself). While the directory is not empty this
/// waits, until `drain`, for its children to go (or for someone else's restart: a
/// directory created after our node is a new one) and fails with
/// [`RecipeError::SequenceExhausted`] when `drain` passes; `Deadline::after(ZERO)` fails
/// at once. Requests ride out connection loss within `patience`.
pub(crate) fn create_member(
    zk: &ZooKeeper,
    dir: &SeqDir,
    tag: &str,
    data: &[u8],
    patience: Patience,
    drain: Deadline,
) -> Result<Created> {
    let limit = dir.nodes.limit();
    loop {
        let (name, stat) = create_sequential_stat(zk, dir, tag, data, patience)?;
        match sequence_of(&name) {
            Some(seq) if (0..limit).contains(&seq) => {
                return Ok(Created {
                    name,
                    seq,
                    czxid: stat.czxid,
                })
            }
            _ => {}
        }
        // Past the counter's end: this node must not take part.
        log::debug!("recipes: {}/{name} is past the counter's end", dir.path);
        delete_eventually(zk, &format!("{}/{name}", dir.path), patience)?;
        restart_counter(zk, dir, stat.czxid, patience, drain)?;
    }
}

/// The counter restart of [`create_member`]: returns once a create is worth trying again
/// (the directory was deleted, by us or someone else), `SequenceExhausted` if `drain`
/// passes while it still has children. `node_czxid` is the zxid of the out-of-range node
/// just made in it: a directory created later is a restarted one.
fn restart_counter(
    zk: &ZooKeeper,
    dir: &SeqDir,
    node_czxid: i64,
    patience: Patience,
    drain: Deadline,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        // Atomic on the server: succeeds only while nobody has a node in it.
        let deleted = retry(zk, patience, || match zk.delete(dir.path, None) {
            Ok(()) | Err(Error::NoNode) => Ok(true),
            Err(Error::NotEmpty) => Ok(false),
            Err(error) => Err(error),
        })?;
        if deleted {
            log::info!("recipes: restarted the sequence counter of {}", dir.path);
            return Ok(());
        }
        let (children, stat, watch) = match zk.get_children2_watch(dir.path) {
            Ok(found) => found,
            Err(Error::NoNode) => return Ok(()),
            Err(error) if error.is_retryable() => {
                attempt += 1;
                await_reconnect(zk, patience, attempt)?;
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        if stat.czxid > node_czxid || children.is_empty() {
            // Restarted meanwhile (create again), or just emptied (delete again).
            withdraw_watch(zk, &watch);
            if stat.czxid > node_czxid {
                return Ok(());
            }
            continue;
        }
        match wait_until(&watch, drain)? {
            Some(event) => {
                check_event(event)?;
            }
            None => {
                withdraw_watch(zk, &watch);
                return Err(RecipeError::SequenceExhausted {
                    dir: dir.path.to_string(),
                });
            }
        }
    }
}

/// One delete of `path` (any version); an absent node counts as deleted.
fn delete_any_version(zk: &ZooKeeper, path: &str) -> zookeeper::Result<()> {
    match zk.delete(path, None) {
        Ok(()) | Err(Error::NoNode) => Ok(()),
        Err(error) => Err(error),
    }
}

/// Deletes `path` (any version) within `patience`; an absent node is fine.
pub(crate) fn delete_node(zk: &ZooKeeper, path: &str, patience: impl Into<Patience>) -> Result<()> {
    retry(zk, patience, || delete_any_version(zk, path))
}

/// [`delete_node`] for a node that must go although its session may well survive (a lock
/// or waiter node): if the connection does not come back in time, the delete goes on in
/// the background ([`finish_in_background`]). Returns `delete_node`'s result.
pub(crate) fn delete_eventually(zk: &ZooKeeper, path: &str, patience: Patience) -> Result<()> {
    let result = delete_node(zk, path, patience);
    if gave_up_for_connection(&result) {
        delete_in_background(zk, path);
    }
    result
}

/// Whether a failed step gave up for want of a connection (so the server may not have
/// seen it): connection loss, or a deadline that passed while waiting for one.
fn gave_up_for_connection<T>(result: &Result<T>) -> bool {
    match result {
        Err(RecipeError::ZooKeeper(error)) => error.is_retryable(),
        Err(RecipeError::Timeout) => true,
        _ => false,
    }
}

/// Hands the delete of `path` to the background worker.
fn delete_in_background(zk: &ZooKeeper, path: &str) {
    let path = path.to_string();
    let what = format!("deleting {path}");
    finish_in_background(zk.clone(), what, move |zk| delete_any_version(zk, &path));
}

/// How long dropping a guard waits for its node's delete to be answered before handing
/// it to the background: the drop of a guard must not block for the reconnect timeout.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// Deletes `path` for a guard being dropped: sends the delete and waits at most
/// [`DROP_WAIT`] for the answer (enough for a connected client, so the node is gone when
/// the drop returns); an unanswered or lost delete goes on in the background.
pub(crate) fn delete_on_drop(zk: &ZooKeeper, path: &str) {
    match zk.delete_async(path, None).wait_timeout(DROP_WAIT) {
        Ok(()) | Err(Error::NoNode) => {}
        Err(error) if error.is_retryable() || error == Error::Timeout => {
            delete_in_background(zk, path)
        }
        // The session is over: the node went with it.
        Err(error) if error.is_session_terminal() => {}
        Err(error) => log::debug!("recipes: deleting {path} on drop: {error}"),
    }
}

/// A node this process holds (a lock request, a lease): deleted by
/// [`release`](Self::release) or, at the latest, when dropped.
#[derive(Debug)]
pub(crate) struct OwnedNode {
    zk: ZooKeeper,
    name: String,
    czxid: i64,
    /// Empty once released.
    path: String,
}

impl OwnedNode {
    /// The node `created` in `dir`.
    pub(crate) fn new(zk: &ZooKeeper, dir: &str, created: Created) -> OwnedNode {
        OwnedNode {
            zk: zk.clone(),
            path: format!("{dir}/{}", created.name),
            name: created.name,
            czxid: created.czxid,
        }
    }

    /// The node's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The node's path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The zxid that created the node.
    pub(crate) fn czxid(&self) -> i64 {
        self.czxid
    }

    /// Deletes the node (once); a failure is reported. If the server could not be
    /// reached, the delete goes on in the background.
    pub(crate) fn release(&mut self) -> Result<()> {
        if self.path.is_empty() {
            return Ok(());
        }
        let path = std::mem::take(&mut self.path);
        delete_eventually(&self.zk, &path, op_deadline(&self.zk).into())
    }

    /// Whether the node still exists (false after session expiry).
    pub(crate) fn exists(&self) -> Result<bool> {
        Ok(retry(&self.zk, op_deadline(&self.zk), || {
            self.zk.exists(&self.path)
        })?
        .is_some())
    }
}

impl Drop for OwnedNode {
    fn drop(&mut self) {
        if !self.path.is_empty() {
            delete_on_drop(&self.zk, &std::mem::take(&mut self.path));
        }
    }
}

/// The public methods of a guard type whose field `node` is its [`OwnedNode`]:
/// `release`, `is_held` and `node`; `$what` names what it holds, for the docs.
macro_rules! owned_node_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            #[doc = concat!("Releases the ", $what, ", reporting a failure to delete the node")]
            /// (if the server could not be reached, the delete goes on in the background).
            pub fn release(mut self) -> $crate::Result<()> {
                self.node.release()
            }

            #[doc = concat!("Whether the ", $what, " node still exists (false after session")]
            /// expiry).
            pub fn is_held(&self) -> $crate::Result<bool> {
                self.node.exists()
            }

            #[doc = concat!("The ", $what, " node's name.")]
            pub fn node(&self) -> &str {
                self.node.name()
            }
        }
    };
}
pub(crate) use owned_node_guard;

// ---------------------------------------------------------------------------------------
// Sequential children.
// ---------------------------------------------------------------------------------------

/// One sequential child: its name and sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) seq: i32,
}

impl Member {
    /// Whether the name starts with `prefix`.
    pub(crate) fn is(&self, prefix: &str) -> bool {
        self.name.starts_with(prefix)
    }

    /// Whether its number may be ordered by (see [`crate::util::SEQUENCE_LIMIT`]).
    pub(crate) fn in_range(&self) -> bool {
        sequence_in_range(self.seq)
    }
}

/// For [`members`]: every name starts with it, so every sequential child is kept (names
/// that start with a guid).
pub(crate) const ANY_NAME: &[&str] = &[""];

/// The children named with one of `prefixes` and a sequence suffix, in sequence order
/// (ties by name; a guid in the names makes name order meaningless otherwise). Members
/// whose number is out of range (past the counter's end) come last: their order among
/// the others is unknown.
pub(crate) fn members(children: Vec<String>, prefixes: &[&str]) -> Vec<Member> {
    let mut list: Vec<Member> = children
        .into_iter()
        .filter(|name| prefixes.iter().any(|p| name.starts_with(p)))
        .filter_map(|name| sequence_of(&name).map(|seq| Member { name, seq }))
        .collect();
    list.sort_by(|a, b| (!a.in_range(), a.seq, &a.name).cmp(&(!b.in_range(), b.seq, &b.name)));
    list
}

/// The members of a recipe that orders by sequence number: the children named with one
/// of `prefixes` whose number is below `limit` and not negative, in sequence order (ties
/// by name). Members out of that range (past the counter's end) are left out: they take
/// no part, and their owners remove them ([`create_member`]).
pub(crate) fn ordered_members(children: Vec<String>, prefixes: &[&str], limit: i32) -> Vec<Member> {
    let mut list: Vec<Member> = members(children, prefixes);
    list.retain(|m| (0..limit).contains(&m.seq));
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_sort_by_sequence_across_prefixes() {
        let children = vec![
            "write-b-0000000003".to_string(),
            "read-a-0000000001".to_string(),
            "ready".to_string(),
            "read-c-0000000002".to_string(),
            "other-0000000000".to_string(),
        ];
        let list = members(children.clone(), &["read-", "write-"]);
        let names: Vec<_> = list.iter().map(|m| m.seq).collect();
        assert_eq!(names, vec![1, 2, 3]);
        assert!(list[2].is("write-"));
        let all: Vec<_> = members(children, ANY_NAME).iter().map(|m| m.seq).collect();
        assert_eq!(all, vec![0, 1, 2, 3]);
        let wrapped = vec![
            "a-lock--2147483648".to_string(),
            "b-lock-2147483647".to_string(),
            "c-lock-0000000009".to_string(),
        ];
        let order: Vec<_> = members(wrapped, ANY_NAME)
            .into_iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(order, vec![9, i32::MIN, i32::MAX]);
        let kept: Vec<_> = ordered_members(
            vec![
                "a-lock--2147483648".to_string(),
                "b-lock-2147483647".to_string(),
                "c-lock-0000000009".to_string(),
                "d-lock-0000000003".to_string(),
                "e-lock--000000005".to_string(),
            ],
            ANY_NAME,
            9,
        )
        .into_iter()
        .map(|m| m.name)
        .collect();
        assert_eq!(kept, vec!["d-lock-0000000003"]);
    }

    #[test]
    fn deadlines() {
        assert!(Deadline::after(Duration::ZERO).check().is_err());
        assert!(Deadline::after(Duration::MAX).check().is_ok());
        assert!(
            Deadline::after(Duration::from_secs(5)).remaining().unwrap() > Duration::from_secs(4)
        );
        assert!(Deadline::never().check().is_ok());
        assert_eq!(Deadline::never().remaining(), None);
    }

    #[test]
    fn patience_bounds_each_reconnection() {
        let within = Patience::reconnect(Duration::from_secs(3));
        assert_eq!(within.reconnect_wait().unwrap(), Duration::from_secs(3));
        let soon = within.before(Deadline::after(Duration::from_secs(1)));
        assert!(soon.reconnect_wait().unwrap() <= Duration::from_secs(1));
        assert_eq!(
            within.gave_up(),
            RecipeError::ZooKeeper(Error::ConnectionLoss)
        );
        let until = Patience::from(Deadline::after(Duration::ZERO));
        assert_eq!(until.reconnect_wait(), Err(RecipeError::Timeout));
        assert_eq!(until.gave_up(), RecipeError::Timeout);
    }

    #[test]
    fn base_path_rules() {
        assert!(check_base_path("/q").is_ok());
        assert!(check_base_path("/").is_err());
        assert!(check_base_path("q").is_err());
    }
}
