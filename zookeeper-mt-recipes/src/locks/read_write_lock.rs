//! Read-write lock (ZooKeeper recipe). Every request is an ephemeral sequential node
//! under the lock directory, `read-…` or `write-…`; sequence numbers order all requests.
//!
//! - A reader holds the lock once no *write* request precedes it; it watches only the
//!   last writer before it (readers queued behind one writer all wake when it leaves,
//!   which is what they should do: they may all read).
//! - A writer holds the lock once no request at all precedes it; it watches only its
//!   immediate predecessor.
//!
//! Guards are RAII: dropping a [`ReadGuard`] / [`WriteGuard`] releases the lock.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::locks::ReadWriteLock;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let lock = ReadWriteLock::new(&zk, "/app/catalog-lock")?;
//! {
//!     let _read = lock.read(Duration::from_secs(10))?;   // shared with other readers
//!     // ... read ...
//! }
//! let write = lock.write(Duration::from_secs(10))?;      // exclusive
//! // ... write, passing write.fencing_token() to the store ...
//! write.release()?;
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Guarantees
//! - While a write guard is held (and its session lives) no other read or write guard
//!   on the same directory is granted; read guards may be held concurrently. This holds
//!   across the end of the sequence counter too (below).
//! - FIFO: requests are granted in sequence order (a reader queued behind a writer does
//!   not overtake it, so writers are not starved).
//! - A request that times out withdraws its node, so it blocks nobody afterwards, and
//!   leaves no watch registered.
//! - Fencing: [`WriteGuard::fencing_token`] / [`ReadGuard::fencing_token`] (the node's
//!   `czxid`) of a guard granted after a conflicting one is greater, across counter
//!   restarts and re-created directories.
//! - With [`NodeOptions::acl`] ([`ReadWriteLock::with_node_options`]) the directory and
//!   request nodes get that ACL: a client without the rights cannot delete a holder's
//!   node.
//!
//! # The end of the sequence counter
//! Request numbers come from the directory's 32-bit child counter, which a 3.8 server
//! does not wrap cleanly (past 2147483647 it repeats numbers or goes negative). A request
//! numbered at or past [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT) (or
//! [`NodeOptions::sequence_limit`]) is deleted at once and ignored by everyone; the
//! requester restarts the counter by deleting the directory, which the server allows only
//! once it is empty, so no guard can be held meanwhile. Until the directory has drained,
//! the request waits, within its timeout, and then fails with `Timeout` as a busy lock
//! does (`try_read` / `try_write`: `None`).
//!
//! # Layouts
//! [`ReadWriteLock::with_layout`] makes the lock share its directory with Curator 5.x
//! `InterProcessReadWriteLock` ([`LockLayout::Curator`]: `__READ__` / `__WRIT__` nodes)
//! or kazoo 2.x `ReadLock` / `WriteLock` ([`LockLayout::Kazoo`]: `__rlock__` /
//! `__lock__` nodes); writers stay exclusive across libraries (tested against real
//! processes). kazoo 2.8's own `ReadLock` waits for the last `__lock__` node of the
//! whole directory, also one queued after it, so a kazoo reader and a writer queued
//! behind it (kazoo's or ours) wait for each other forever: on a kazoo path, take reads
//! with this lock (or avoid writers queueing behind kazoo readers).
//!
//! # Fenced writes
//! [`WriteGuard::fenced_multi`] runs writes that the server applies only while the
//! write lock is held (see [`fenced`](crate::locks::fenced)).
//!
//! # Non-guarantees
//! - The lock is tied to the ZooKeeper session: if the session expires, the node goes
//!   and another process may acquire while this process still holds a guard.
//!   [`ReadGuard::is_held`] / [`WriteGuard::is_held`] (no request) and their `lost()`
//!   report it no later than the earliest instant the server can expire the session (and
//!   at once on a disconnection); use the fencing token to protect the resource against
//!   a paused holder; the lock does not revoke.
//! - Not reentrant: a process holding a read guard that asks for a write guard on the
//!   same lock waits for itself (until its timeout).
//! - Requests arriving at the counter's end are not ordered among themselves across the
//!   restart.

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::locks::lock::{kazoo_marker, uuid_text, LockLayout};
use crate::nodes::guid;
use crate::runtime::block_on;
use crate::support::liveness::Holding;
use crate::support::{
    check_base_path, create_member_async, default_op_timeout, ordered_members, owned_node_guard,
    retry_async, wait_for_change_async, Deadline, DeadlineExt, Member, NodeWait, OwnedNode,
    Patience, SeqDir, ANY_NAME,
};
use crate::NodeOptions;
use crate::{OptionalExtension, RecipeError, Result};
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use zookeeper_mt::{Error, Timeout, ZooKeeper};

const READ: &str = "read-";
const WRITE: &str = "write-";
/// Curator `InterProcessReadWriteLock`'s markers.
const CURATOR_READ: &str = "__READ__";
const CURATOR_WRITE: &str = "__WRIT__";

/// The name prefix of a new request of `kind` (`READ` or `WRITE`) in `layout`.
fn request_tag(layout: LockLayout, kind: &str) -> String {
    let write = kind == WRITE;
    match layout {
        LockLayout::Curator if write => format!("_c_{}-{CURATOR_WRITE}", uuid_text()),
        LockLayout::Curator => format!("_c_{}-{CURATOR_READ}", uuid_text()),
        LockLayout::Kazoo if write => format!("{}__lock__", guid()),
        LockLayout::Kazoo => format!("{}__rlock__", guid()),
        _ => format!("{kind}{}-", guid()),
    }
}

/// The requests among `children` in `layout`, in order, out-of-range numbers left out.
fn requests(layout: LockLayout, children: Vec<String>, limit: i32) -> Vec<Member> {
    match layout {
        // Curator's writers count every child; its readers wait for `__WRIT__` ones.
        LockLayout::Curator => ordered_members(children, ANY_NAME, limit),
        LockLayout::Kazoo => {
            let kazoo = children
                .into_iter()
                .filter(|name| kazoo_marker(name).is_some())
                .collect();
            ordered_members(kazoo, ANY_NAME, limit)
        }
        _ => ordered_members(children, &[READ, WRITE], limit),
    }
}

/// Whether a request is a write request (one that readers behind it wait for).
fn is_write(layout: LockLayout, member: &Member) -> bool {
    match layout {
        LockLayout::Curator => member.name.contains(CURATOR_WRITE),
        LockLayout::Kazoo => kazoo_marker(&member.name) == Some("__lock__"),
        _ => member.is(WRITE),
    }
}

/// A distributed read-write lock on a directory (see the [module docs](self)).
/// Cheap to clone; usable from any thread.
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    client: Client,
    dir: String,
    nodes: NodeOptions,
    layout: LockLayout,
}

impl ReadWriteLock {
    /// The lock at `path`. The directory (and its parents) is created by the first
    /// request if missing, with the node options then set
    /// ([`with_node_options`](Self::with_node_options)). No request is sent here.
    ///
    /// `client`: a plain handle or a managed client. On a managed client each request
    /// runs on the session current when it starts, and its guard belongs to that session.
    pub fn new(client: impl Into<Client>, path: &str) -> Result<ReadWriteLock> {
        check_base_path(path)?;
        Ok(ReadWriteLock {
            client: client.into(),
            dir: path.to_string(),
            nodes: NodeOptions::default(),
            layout: LockLayout::Native,
        })
    }

    /// The ACL, directory kind and sequence limit of the nodes this lock creates
    /// (default: open ACL, persistent directory). With a container directory the server
    /// removes the directory once the lock is idle; the next request creates it again.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> ReadWriteLock {
        self.nodes = nodes;
        self
    }

    /// The request names and which children count (default [`LockLayout::Native`]:
    /// `read-<guid>-<seq>` / `write-<guid>-<seq>`). [`LockLayout::Curator`] interoperates
    /// with Curator 5.x `InterProcessReadWriteLock` (`_c_<uuid>-__READ__<seq>` /
    /// `__WRIT__`; every sequential child counts for a writer, `__WRIT__` ones for a
    /// reader, as in Curator); [`LockLayout::Kazoo`] with kazoo 2.x `ReadLock` /
    /// `WriteLock` (`<guid>__rlock__<seq>` / `<guid>__lock__<seq>`; only those count).
    /// One layout per directory.
    pub fn with_layout(mut self, layout: LockLayout) -> ReadWriteLock {
        self.layout = layout;
        self
    }

    /// The lock directory (its path).
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// Acquires a shared (read) lock, waiting up to `timeout` for preceding writers.
    pub fn read(&self, timeout: impl Into<Timeout>) -> Result<ReadGuard> {
        block_on(self.read_async(timeout))
    }

    /// Async [`read`](Self::read): no thread waits for it; dropping it withdraws the
    /// request (its node is deleted, its watch released).
    pub async fn read_async(&self, timeout: impl Into<Timeout>) -> Result<ReadGuard> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let node = self.acquire(READ, timeout).await?;
        let holding = Some(Holding::new(node.client()));
        Ok(ReadGuard { node, holding })
    }

    /// Acquires an exclusive (write) lock, waiting up to `timeout` for every preceding
    /// request.
    pub fn write(&self, timeout: impl Into<Timeout>) -> Result<WriteGuard> {
        block_on(self.write_async(timeout))
    }

    /// Async [`write`](Self::write): no thread waits for it; dropping it withdraws the
    /// request.
    pub async fn write_async(&self, timeout: impl Into<Timeout>) -> Result<WriteGuard> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        let node = self.acquire(WRITE, timeout).await?;
        let zk = node.client().clone();
        let holding = Some(Holding::new(&zk));
        Ok(WriteGuard { node, zk, holding })
    }

    /// A read lock if it can be had without waiting, else `None`.
    pub fn try_read(&self) -> Result<Option<ReadGuard>> {
        self.read(Duration::ZERO).optional()
    }

    /// A write lock if it can be had without waiting, else `None`.
    pub fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.write(Duration::ZERO).optional()
    }

    /// Async [`try_read`](Self::try_read).
    pub async fn try_read_async(&self) -> Result<Option<ReadGuard>> {
        self.read_async(Duration::ZERO).await.optional()
    }

    /// Async [`try_write`](Self::try_write).
    pub async fn try_write_async(&self) -> Result<Option<WriteGuard>> {
        self.write_async(Duration::ZERO).await.optional()
    }

    async fn acquire(&self, kind: &'static str, timeout: Duration) -> Result<OwnedNode> {
        let deadline = Deadline::after(timeout);
        let zk = &self.client.session().zk;
        // Creating the request is not bounded by a zero timeout: `try_*` must try once.
        let create_deadline = Deadline::after(timeout.max(default_op_timeout(zk)));
        let dir = SeqDir {
            path: &self.dir,
            data: b"",
            nodes: &self.nodes,
        };
        let tag = request_tag(self.layout, kind);
        let created = create_member_async(zk, &dir, &tag, b"", create_deadline.into(), deadline)
            .await
            .map_err(|error| match error {
                // At the counter's end the directory is busy: as a busy lock, a timeout.
                RecipeError::SequenceExhausted { .. } => RecipeError::Timeout,
                other => other,
            })?;
        let node = OwnedNode::new(zk, &self.dir, created);
        // A dropped future drops `node`, which withdraws the request in the background.
        match self
            .wait_granted(&node, kind, deadline, create_deadline)
            .await
        {
            Ok(()) => Ok(node.hand_out()),
            Err(error) => {
                node.withdraw().await;
                Err(error)
            }
        }
    }

    async fn wait_granted(
        &self,
        node: &OwnedNode,
        kind: &str,
        deadline: Deadline,
        read_deadline: Deadline,
    ) -> Result<()> {
        let waiting = AtomicU64::new(0);
        loop {
            let zk = node.client();
            let listing = retry_async(zk, read_deadline.into(), || {
                zk.get_children_async(&self.dir)
            });
            let children = match listing.await {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => Vec::new(),
                other => other?,
            };
            let list = requests(self.layout, children, self.nodes.limit());
            let index = list
                .iter()
                .position(|m| m.name == node.name())
                .ok_or(RecipeError::Lost(LossReason::NodeGone))?;
            let blocker: Option<&Member> = if kind == READ {
                list[..index]
                    .iter()
                    .rev()
                    .find(|m| is_write(self.layout, m))
            } else {
                index.checked_sub(1).map(|i| &list[i])
            };
            let Some(blocker) = blocker else {
                return Ok(());
            };
            deadline.check()?;
            let path = format!("{}/{}", self.dir, blocker.name);
            match wait_for_change_async(node.client(), &path, Patience::from(deadline), &waiting)
                .await?
            {
                NodeWait::Fired | NodeWait::LookAgain => {}
                NodeWait::TimedOut => return Err(RecipeError::Timeout),
            }
        }
    }
}

/// A held read lock; dropping it releases the lock.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct ReadGuard {
    node: OwnedNode,
    /// How it learns of its loss.
    holding: Option<Holding>,
}

/// A held write lock; dropping it releases the lock.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct WriteGuard {
    node: OwnedNode,
    zk: ZooKeeper,
    /// How it learns of its loss.
    holding: Option<Holding>,
}

owned_node_guard!(ReadGuard, "lock");
owned_node_guard!(WriteGuard, "lock");

impl ReadGuard {
    /// A fencing token: the zxid that created this request's node (`czxid`). A write
    /// guard granted after this one has a greater token (it queued behind this
    /// request), across counter restarts and re-created directories.
    pub fn fencing_token(&self) -> i64 {
        self.node.czxid()
    }
}

impl WriteGuard {
    /// A fencing token: the zxid that created this request's node (`czxid`). Any guard
    /// granted after this one has a greater token, across counter restarts and
    /// re-created directories, so a store that keeps the greatest token it has seen can
    /// reject a paused former writer.
    pub fn fencing_token(&self) -> i64 {
        self.node.czxid()
    }

    /// Runs `ops` as one multi applied only while this write lock is held (its request
    /// node still exists unchanged; see [`fenced`](crate::locks::fenced)).
    pub fn fenced_multi(&self, ops: &[zookeeper_mt::Op]) -> Result<Vec<zookeeper_mt::OpResult>> {
        crate::locks::fenced::fenced_multi(&self.zk, &[self.node.path()], ops)
    }
}
