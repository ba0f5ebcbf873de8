//! Plain data types mirroring the C client's: node metadata, ACLs, create modes,
//! events and session state, converted by value (nothing here borrows C memory).

use std::borrow::Cow;
use std::time::Duration;
use zookeeper_mt_sys as sys;

/// Node metadata (the C `struct Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stat {
    /// Zxid of the change that created the node.
    pub czxid: i64,
    /// Zxid of the last change to the node's data.
    pub mzxid: i64,
    /// Creation time, ms since the epoch.
    pub ctime: i64,
    /// Last modification time, ms since the epoch.
    pub mtime: i64,
    /// Number of changes to the data.
    pub version: i32,
    /// Number of changes to the children.
    pub cversion: i32,
    /// Number of changes to the ACL.
    pub aversion: i32,
    /// Session id of the owner if ephemeral, else 0.
    pub ephemeral_owner: i64,
    /// Length of the data.
    pub data_length: i32,
    /// Number of children.
    pub num_children: i32,
    /// Zxid of the last change to the children.
    pub pzxid: i64,
}

impl From<&sys::Stat> for Stat {
    fn from(s: &sys::Stat) -> Self {
        Stat {
            czxid: s.czxid,
            mzxid: s.mzxid,
            ctime: s.ctime,
            mtime: s.mtime,
            version: s.version,
            cversion: s.cversion,
            aversion: s.aversion,
            ephemeral_owner: s.ephemeralOwner,
            data_length: s.dataLength,
            num_children: s.numChildren,
            pzxid: s.pzxid,
        }
    }
}

/// Permission bits of an ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perms(pub i32);

impl Perms {
    /// Read data and list children.
    pub const READ: Perms = Perms(1);
    /// Set data.
    pub const WRITE: Perms = Perms(2);
    /// Create children.
    pub const CREATE: Perms = Perms(4);
    /// Delete children.
    pub const DELETE: Perms = Perms(8);
    /// Set the ACL.
    pub const ADMIN: Perms = Perms(16);
    /// Everything.
    pub const ALL: Perms = Perms(31);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

/// One ACL entry: who (`scheme:id`) may do what.
///
/// The common ACLs are constants ([`Acl::OPEN_UNSAFE`], [`Acl::READ_UNSAFE`],
/// [`Acl::CREATOR_ALL`]): passing one allocates nothing (the binding hands C its own
/// static copy).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    /// Permission bits.
    pub perms: Perms,
    /// Scheme: `world`, `auth`, `digest`, `ip`, ...
    pub scheme: Cow<'static, str>,
    /// Id within the scheme (`anyone`, `user:base64(sha1)`, an address, ...).
    pub id: Cow<'static, str>,
}

impl Acl {
    /// `world:anyone` with every permission (the C client's `ZOO_OPEN_ACL_UNSAFE`).
    pub const OPEN_UNSAFE: &'static [Acl] = &[Acl::fixed(Perms::ALL, "world", "anyone")];

    /// `world:anyone` read-only (`ZOO_READ_ACL_UNSAFE`).
    pub const READ_UNSAFE: &'static [Acl] = &[Acl::fixed(Perms::READ, "world", "anyone")];

    /// Everything for the authenticated creator (`ZOO_CREATOR_ALL_ACL`); needs `add_auth`
    /// first.
    pub const CREATOR_ALL: &'static [Acl] = &[Acl::fixed(Perms::ALL, "auth", "")];

    /// An entry from its parts (copied).
    pub fn new(perms: Perms, scheme: &str, id: &str) -> Acl {
        Acl {
            perms,
            scheme: Cow::Owned(scheme.to_string()),
            id: Cow::Owned(id.to_string()),
        }
    }

    /// An entry from static parts, usable in constants.
    pub const fn fixed(perms: Perms, scheme: &'static str, id: &'static str) -> Acl {
        Acl {
            perms,
            scheme: Cow::Borrowed(scheme),
            id: Cow::Borrowed(id),
        }
    }
}

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CreateMode {
    /// Stays until deleted.
    #[default]
    Persistent,
    /// Deleted when the creating session ends.
    Ephemeral,
    /// Persistent, with a monotonically increasing 10-digit suffix.
    PersistentSequential,
    /// Ephemeral, with a sequence suffix.
    EphemeralSequential,
    /// Deleted by the server once its last child is gone.
    Container,
    /// Persistent, deleted by the server if unmodified for the TTL and childless
    /// (needs a server with `zookeeper.extendedTypesEnabled=true`).
    PersistentWithTtl(Duration),
    /// As `PersistentWithTtl`, with a sequence suffix.
    PersistentSequentialWithTtl(Duration),
}

/// How to create a node: its [`CreateMode`] (TTL included) and its ACL, by reference.
///
/// A `CreateMode` converts into options with the open ACL ([`Acl::OPEN_UNSAFE`], as the
/// C client's and other clients' default), so the common call allocates nothing:
/// ```no_run
/// # fn f(zk: &zookeeper_mt::ZooKeeper) -> zookeeper_mt::Result<()> {
/// use zookeeper_mt::{Acl, CreateMode, CreateOptions};
/// zk.create("/app", b"", CreateMode::Persistent)?;
/// let ours = CreateOptions::new(CreateMode::Ephemeral).with_acl(Acl::CREATOR_ALL);
/// zk.create("/app/session", b"", ours)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CreateOptions<'a> {
    /// The mode (persistent, ephemeral, sequential, container, with a TTL).
    pub mode: CreateMode,
    /// The node's ACL.
    pub acl: &'a [Acl],
}

impl CreateOptions<'static> {
    /// `mode` with the open ACL.
    pub const fn new(mode: CreateMode) -> Self {
        CreateOptions {
            mode,
            acl: Acl::OPEN_UNSAFE,
        }
    }
}

impl<'a> CreateOptions<'a> {
    /// The same options with `acl`.
    pub const fn with_acl<'b>(self, acl: &'b [Acl]) -> CreateOptions<'b> {
        CreateOptions {
            mode: self.mode,
            acl,
        }
    }

    /// The same options with `mode`.
    pub const fn with_mode(self, mode: CreateMode) -> Self {
        CreateOptions { mode, ..self }
    }
}

impl Default for CreateOptions<'static> {
    /// Persistent, open ACL.
    fn default() -> Self {
        CreateOptions::new(CreateMode::Persistent)
    }
}

impl From<CreateMode> for CreateOptions<'static> {
    fn from(mode: CreateMode) -> Self {
        CreateOptions::new(mode)
    }
}

/// Largest TTL the server accepts (its TTL encoding keeps 40 bits of milliseconds).
pub const MAX_TTL: Duration = Duration::from_millis((1 << 40) - 1);

impl CreateMode {
    /// Whether the server appends a sequence number.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl(_)
        )
    }

    /// Whether the node goes away with its session.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    /// The C mode flag and the TTL in ms (-1 when there is none).
    pub(crate) fn to_c(self) -> crate::Result<(i32, i64)> {
        // SAFETY: reading `extern const int`s the C library defines and never writes.
        unsafe {
            Ok(match self {
                CreateMode::Persistent => (sys::ZOO_PERSISTENT, -1),
                CreateMode::Ephemeral => (sys::ZOO_EPHEMERAL, -1),
                CreateMode::PersistentSequential => (sys::ZOO_PERSISTENT_SEQUENTIAL, -1),
                CreateMode::EphemeralSequential => (sys::ZOO_EPHEMERAL_SEQUENTIAL, -1),
                CreateMode::Container => (sys::ZOO_CONTAINER, -1),
                CreateMode::PersistentWithTtl(ttl) => (sys::ZOO_PERSISTENT_WITH_TTL, ttl_ms(ttl)?),
                CreateMode::PersistentSequentialWithTtl(ttl) => {
                    (sys::ZOO_PERSISTENT_SEQUENTIAL_WITH_TTL, ttl_ms(ttl)?)
                }
            })
        }
    }
}

fn ttl_ms(ttl: Duration) -> crate::Result<i64> {
    let ms = ttl.as_millis();
    if ms == 0 || ttl > MAX_TTL {
        return Err(crate::Error::InvalidArgument(
            "TTL must be between 1 ms and 2^40-1 ms",
        ));
    }
    Ok(ms as i64)
}

/// Connection state of a session (the C `ZOO_*_STATE` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// Not yet connected, or between servers.
    Connecting,
    /// Connection open, session being established.
    Associating,
    /// Connected to a server, session live.
    Connected,
    /// Connected to a read-only server (only with `read_only(true)`).
    ConnectedReadOnly,
    /// The server expired the session. Terminal.
    Expired,
    /// Authentication failed. Terminal.
    AuthFailed,
    /// Not connected (state 0: e.g. every server refused the connection so far).
    NotConnected,
    /// Closed by this process. Terminal.
    Closed,
    /// A state this binding does not know.
    Unknown(i32),
}

impl SessionState {
    pub(crate) fn from_c(state: i32) -> SessionState {
        // SAFETY: reading `extern const int`s the C library defines and never writes.
        unsafe {
            match state {
                s if s == sys::ZOO_CONNECTING_STATE => SessionState::Connecting,
                s if s == sys::ZOO_ASSOCIATING_STATE => SessionState::Associating,
                s if s == sys::ZOO_CONNECTED_STATE => SessionState::Connected,
                s if s == sys::ZOO_READONLY_STATE => SessionState::ConnectedReadOnly,
                s if s == sys::ZOO_EXPIRED_SESSION_STATE => SessionState::Expired,
                s if s == sys::ZOO_AUTH_FAILED_STATE => SessionState::AuthFailed,
                s if s == sys::ZOO_NOTCONNECTED_STATE || s == 0 => SessionState::NotConnected,
                other => SessionState::Unknown(other),
            }
        }
    }

    /// Whether requests can be served (read-only servers serve reads only).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            SessionState::Connected | SessionState::ConnectedReadOnly
        )
    }

    /// Expired, auth failed or closed: the session will never come back.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed
        )
    }
}

/// What happened to a watched node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// The node was created (exists watch).
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data changed.
    NodeDataChanged,
    /// The node's children changed.
    NodeChildrenChanged,
    /// A session state change (see the event's `state`).
    Session,
    /// The watch was removed (`remove_watches`) and will not fire.
    NotWatching,
    /// A type this binding does not know.
    Unknown(i32),
}

impl EventType {
    pub(crate) fn from_c(event_type: i32) -> EventType {
        // SAFETY: reading `extern const int`s the C library defines and never writes.
        unsafe {
            match event_type {
                t if t == sys::ZOO_CREATED_EVENT => EventType::NodeCreated,
                t if t == sys::ZOO_DELETED_EVENT => EventType::NodeDeleted,
                t if t == sys::ZOO_CHANGED_EVENT => EventType::NodeDataChanged,
                t if t == sys::ZOO_CHILD_EVENT => EventType::NodeChildrenChanged,
                t if t == sys::ZOO_SESSION_EVENT => EventType::Session,
                t if t == sys::ZOO_NOTWATCHING_EVENT => EventType::NotWatching,
                other => EventType::Unknown(other),
            }
        }
    }
}

/// A watch notification or session event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    /// What happened.
    pub event_type: EventType,
    /// The session state when it happened.
    pub state: SessionState,
    /// The node's path (relative to the chroot); empty for session events.
    pub path: String,
}

/// A session's id and password, enough to resume it from another handle or process.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientId {
    /// Session id.
    pub session_id: i64,
    /// Session password (opaque).
    pub password: [u8; 16],
}

impl std::fmt::Debug for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password is a credential: keep it out of logs.
        write!(f, "ClientId({:#x}, <password>)", self.session_id)
    }
}

/// Which watches `remove_watches` removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatcherType {
    /// Child watches (`get_children`).
    Children,
    /// Data watches (`exists`, `get`).
    Data,
    /// Both.
    Any,
}

impl WatcherType {
    pub(crate) fn to_c(self) -> sys::ZooWatcherType {
        match self {
            WatcherType::Children => sys::ZWATCHTYPE_CHILD,
            WatcherType::Data => sys::ZWATCHTYPE_DATA,
            WatcherType::Any => sys::ZWATCHTYPE_ANY,
        }
    }
}

/// Where [`ZooKeeper::remove_watches`](crate::ZooKeeper::remove_watches) removes watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchRemoval {
    /// The server removes them too (a request; `NoWatcher` if it had none).
    Server,
    /// Only this client forgets them; no request, so it works while disconnected.
    Local,
}

/// A membership change for [`ZooKeeper::reconfig`](crate::ZooKeeper::reconfig).
///
/// Server specs are the server's own syntax, comma-separated:
/// `server.<id>=<host>:<quorum port>:<election port>[:participant|observer];[<client host>:]<client port>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reconfig<'a> {
    /// Add the servers `joining` and remove the server ids `leaving` (comma-separated;
    /// either may be empty).
    Incremental {
        /// Server specs to add.
        joining: &'a str,
        /// Server ids to remove.
        leaving: &'a str,
    },
    /// Replace the whole membership with `members` (server specs).
    Bulk {
        /// The new membership.
        members: &'a str,
    },
}

impl<'a> Reconfig<'a> {
    /// Add the servers `joining` (specs, comma-separated).
    pub const fn add(joining: &'a str) -> Self {
        Reconfig::Incremental {
            joining,
            leaving: "",
        }
    }

    /// Remove the server ids `leaving` (comma-separated).
    pub const fn remove(leaving: &'a str) -> Self {
        Reconfig::Incremental {
            joining: "",
            leaving,
        }
    }

    /// Replace the membership with `members`.
    pub const fn bulk(members: &'a str) -> Self {
        Reconfig::Bulk { members }
    }
}
