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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zookeeper::{CreateMode, Error, EventType, SessionState, Watch, WatchedEvent, ZooKeeper};

// ---------------------------------------------------------------------------------------
// Time: deadlines and patience.
// ---------------------------------------------------------------------------------------

/// Longest timeout honoured (longer ones are clamped): keeps `Instant` arithmetic inside
/// the type's range.
const MAX_TIMEOUT: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// A point in time a blocking call must not wait past, or none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(Option<Instant>);

impl Deadline {
    /// `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        let now = Instant::now();
        Deadline(Some(
            now.checked_add(timeout.min(MAX_TIMEOUT))
                .unwrap_or(now + Duration::from_secs(3600)),
        ))
    }

    /// No deadline: wait as long as it takes.
    pub(crate) fn never() -> Deadline {
        Deadline(None)
    }

    /// The deadline's instant (`None`: no deadline).
    pub(crate) fn instant(self) -> Option<Instant> {
        self.0
    }

    /// Time left: zero once passed, `None` without a deadline.
    pub(crate) fn remaining(self) -> Option<Duration> {
        self.0
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(self) -> bool {
        self.remaining().is_some_and(|left| left.is_zero())
    }

    /// `Err(Timeout)` once the deadline has passed.
    pub(crate) fn check(self) -> Result<()> {
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

/// Keeps running `request` on a background thread until it succeeds, fails for good, or
/// the session ends: for cleanups (deleting a lock node, releasing a work item) that must
/// happen even though the connection did not come back in time. `what` names the
/// cleanup in the log.
pub(crate) fn finish_in_background(
    zk: ZooKeeper,
    what: String,
    mut request: impl FnMut(&ZooKeeper) -> zookeeper::Result<()> + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("zk-recipe-cleanup".into())
        .spawn(move || loop {
            match request(&zk) {
                Ok(()) => return,
                Err(error) if error.is_connection_loss() => {
                    match zk.wait_connected(Duration::from_secs(60)) {
                        Ok(()) | Err(Error::Timeout) => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        Err(_) => return, // session over: its ephemeral nodes went with it
                    }
                }
                Err(error) => {
                    log::debug!("recipes: giving up {what}: {error}");
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        log::warn!("recipes: cannot start the cleanup thread: {error}");
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

/// Waits for `watch` to fire and returns its node event: `Err(Timeout)` once `deadline`
/// passes; the end of the session is its error.
pub(crate) fn wait_watch(watch: &Watch, deadline: Deadline) -> Result<WatchedEvent> {
    deadline.check()?;
    match wait_until(watch, deadline)? {
        None => Err(RecipeError::Timeout),
        Some(event) => check_event(event),
    }
}

/// Runs the blocking `wait` counted in `waiting` (a recipe's "threads blocked now" gauge).
pub(crate) fn counted_wait<T>(waiting: &AtomicU64, wait: impl FnOnce() -> T) -> T {
    waiting.fetch_add(1, Ordering::Relaxed);
    let result = wait();
    waiting.fetch_sub(1, Ordering::Relaxed);
    result
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

/// Blocks until the node at `path` (e.g. a predecessor in a line) changes or goes, or the
/// deadline of `patience` passes, counted in `waiting`. The watch is set with `get`, not
/// `exists`: on a node that is already gone `get` registers nothing, where `exists` would
/// leave a creation watch behind forever.
pub(crate) fn wait_for_change(
    zk: &ZooKeeper,
    path: &str,
    patience: Patience,
    waiting: &AtomicU64,
) -> Result<NodeWait> {
    let watch = match zk.get_watch(path) {
        Ok((_, _, watch)) => watch,
        Err(Error::NoNode) => return Ok(NodeWait::LookAgain),
        Err(error) if error.is_retryable() => {
            await_reconnect(zk, patience, 1)?;
            return Ok(NodeWait::LookAgain);
        }
        Err(error) => return Err(error.into()),
    };
    match counted_wait(waiting, || wait_until(&watch, patience.deadline))? {
        Some(event) => check_event(event).map(|_| NodeWait::Fired),
        None => {
            // Giving up: take the watch off rather than leave it registered until the
            // node changes.
            let _ = zk.remove_watch(&watch, false);
            Ok(NodeWait::TimedOut)
        }
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
    if path == "/" || zk.exists(path)?.is_some() {
        return Ok(());
    }
    let mut prefix = String::new();
    for component in path.trim_start_matches('/').split('/') {
        prefix.push('/');
        prefix.push_str(component);
        let mode = if prefix.len() == path.len() {
            nodes.dir_mode()
        } else {
            CreateMode::Persistent
        };
        match zk.create(&prefix, b"", nodes.acl_list(), mode) {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
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
        match zk.create(path, data, nodes.acl_list(), CreateMode::Persistent) {
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

/// Creates the ephemeral sequential child `dir/{tag}NNNNNNNNNN` holding `data` and returns
/// its name. A missing `dir` is created.
///
/// Lost-create protection: `tag` must be unique to this create (carry a
/// [`guid`](crate::util::guid)). If the reply is lost, the children are searched for the
/// tag before trying again, so a create that did apply is found, never duplicated (an
/// orphan node would block everyone behind it until the session ends).
pub(crate) fn create_sequential(
    zk: &ZooKeeper,
    dir: &str,
    tag: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: impl Into<Patience>,
) -> Result<String> {
    let patience = patience.into();
    let path = format!("{dir}/{tag}");
    let mut attempt = 0;
    loop {
        match zk.create(
            &path,
            data,
            nodes.acl_list(),
            CreateMode::EphemeralSequential,
        ) {
            Ok(created) => {
                let name = created.rsplit('/').next().unwrap_or_default();
                return Ok(name.to_string());
            }
            Err(Error::NoNode) => ensure_dir(zk, dir, nodes, patience)?,
            Err(error) if error.is_retryable() => {
                attempt += 1;
                await_reconnect(zk, patience, attempt)?;
                let children = retry(zk, patience, || zk.get_children(dir))?;
                if let Some(name) = children.into_iter().find(|c| c.starts_with(tag)) {
                    return Ok(name);
                }
            }
            Err(error) => return Err(error.into()),
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
/// the background until the node is gone or the session ends. Returns `delete_node`'s
/// result.
pub(crate) fn delete_eventually(zk: &ZooKeeper, path: &str, patience: Patience) -> Result<()> {
    let result = delete_node(zk, path, patience);
    if let Err(RecipeError::ZooKeeper(error)) = &result {
        if error.is_connection_loss() {
            let path = path.to_string();
            let what = format!("deleting {path}");
            finish_in_background(zk.clone(), what, move |zk| delete_any_version(zk, &path));
        }
    }
    result
}

/// A node this process holds (a lock request, a lease): deleted by
/// [`release`](Self::release) or, at the latest, when dropped.
#[derive(Debug)]
pub(crate) struct OwnedNode {
    zk: ZooKeeper,
    name: String,
    /// Empty once released.
    path: String,
}

impl OwnedNode {
    /// The node `name` in `dir`.
    pub(crate) fn new(zk: &ZooKeeper, dir: &str, name: String) -> OwnedNode {
        OwnedNode {
            zk: zk.clone(),
            path: format!("{dir}/{name}"),
            name,
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

    /// Deletes the node (once); a failure is reported, the node then goes with the
    /// session.
    pub(crate) fn release(&mut self) -> Result<()> {
        if self.path.is_empty() {
            return Ok(());
        }
        let result = delete_node(&self.zk, &self.path, op_deadline(&self.zk));
        self.path.clear();
        result
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
        if let Err(error) = self.release() {
            log::debug!("recipes: releasing {}: {error}", self.name);
        }
    }
}

/// The public methods of a guard type whose field `node` is its [`OwnedNode`]:
/// `release`, `is_held` and `node`; `$what` names what it holds, for the docs.
macro_rules! owned_node_guard {
    ($guard:ident, $what:literal) => {
        impl $guard {
            #[doc = concat!("Releases the ", $what, ", reporting a failure to delete the node")]
            /// (which then goes with the session).
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
