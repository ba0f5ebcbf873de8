//! A safe Rust client for Apache ZooKeeper over the official multi-threaded C client
//! (`libzookeeper_mt`), so Rust programs get exactly the C client's behaviour.
//!
//! - Every C API call is reachable: create (all modes, TTL, containers), delete, exists,
//!   get, set, children, ACLs, auth, sync, config/reconfig, multi, watch removal.
//! - Each request has a blocking form and an `_async` form returning a [`ZkFuture`] that
//!   works on any executor (it is completed from the C completion thread).
//! - Watches are channels: a watching read returns a one-shot [`Watch`]; session events
//!   stream to any number of receivers ([`ZooKeeper::session_events`]).
//! - No user code ever runs on the C threads, and every context handed to C is freed
//!   exactly once ([`ZooKeeper::live_contexts`] reads 0 after close).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper::{Acl, CreateMode, EventType, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let (_, watch) = zk.exists_watch("/config")?;
//! zk.create("/config", b"v1", CreateMode::Persistent)?;
//! assert_eq!(watch.wait()?.event_type, EventType::NodeCreated);
//! # Ok::<(), zookeeper::Error>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod acl;
mod client;
mod closer;
mod context;
mod error;
mod logging;
mod multi;
mod ops;
mod path;
mod reply;
mod request;
mod security;
mod session;
mod timeout;
mod types;
mod watch;
mod watch_table;

pub use client::{WeakZooKeeper, ZooKeeper, ZooKeeperBuilder};
pub use error::{Error, Result};
pub use logging::set_c_log_level;
pub use multi::{Op, OpResult};
pub use path::{validate_path, MAX_DATA_LEN};
pub use reply::ZkFuture;
#[cfg(feature = "sasl")]
#[cfg_attr(docsrs, doc(cfg(feature = "sasl")))]
pub use security::SaslConfig;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use security::TlsConfig;
pub use session::{NextSessionEvent, SessionEvents};
pub use timeout::{Deadline, Timeout, Version};
pub use types::{
    Acl, ClientId, CreateMode, CreateOptions, EventType, Perms, Reconfig, SessionState, Stat,
    WatchRemoval, WatchedEvent, WatcherType, MAX_TTL,
};
pub use watch::Watch;

/// Re-exported for `select!` over watches and session events.
pub use crossbeam_channel;
