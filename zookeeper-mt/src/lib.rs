//! A safe Rust client for Apache ZooKeeper over the official multi-threaded C client
//! (`libzookeeper_mt`), so Rust programs get exactly the C client's behaviour.
//!
//! - Every C API call is reachable: create (all modes, TTL, containers), delete, exists,
//!   get, set, children, ACLs, auth, sync, config/reconfig, multi, watch removal.
//! - Each request has a blocking form and an `_async` form returning a [`ZkFuture`] that
//!   works on any executor (it is completed from the C completion thread).
//! - Watches are channels: a watching read returns a one-shot [`Watch`]; session events
//!   stream to any number of receivers ([`ZooKeeper::session_events`]).
//! - Every context handed to C is freed exactly once ([`ZooKeeper::live_contexts`]
//!   reads 0 after close).
//! - Session lifecycle: [`connection_states`] reports a handle's session events as
//!   Apache Curator's connection states ([`ConnectionState`]), and a
//!   [`ManagedZooKeeper`] makes a new session after the server expired the old one.
//!
//! Coordination recipes (locks, queues, leader latch, caches, ...) are in the
//! `zookeeper-mt-recipes` crate.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt::{CreateMode, EventType, ZooKeeper};
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let (_, watch) = zk.exists_watch("/config")?;
//! zk.create("/config", b"v1", CreateMode::Persistent)?;
//! assert_eq!(watch.wait()?.event_type, EventType::NodeCreated);
//! # Ok::<(), zookeeper_mt::Error>(())
//! ```
//!
//! # Which thread runs what
//!
//! The C client runs two threads per handle: an IO thread and a completion thread.
//!
//! - **Every user-visible completion and waker runs on the completion thread, in one
//!   order, with no C-client lock held**: replies, watch events and session events are
//!   delivered in the order the server sent them (an `add_auth` outcome too: the C client
//!   reports it on its IO thread, where the binding only records it). A blocking caller
//!   is woken from there; an async caller's waker is called there.
//! - The exceptions are wakers of what a close ends (pending requests, watches, session
//!   streams): they run on the thread that closes, after the C threads are joined.
//! - A waker may run its task inline: such a task may send requests and close the handle
//!   (the close is then finished by the binding's closer thread, one per process). It must
//!   not block waiting for something only the completion thread can deliver: there,
//!   [`ZkFuture::wait`], [`Watch::wait`], [`SessionEvents::recv`],
//!   [`ZooKeeper::wait_connected`], [`ConnectionStates::recv`] and
//!   [`ManagedZooKeeper::wait_connected`] fail at once instead of blocking.
//! - Connection-state streams and the [`ManagedZooKeeper`] have no thread or task: the
//!   session event is translated and recorded where it is delivered (the completion
//!   thread, or the closing thread for the end), without blocking. The managed client
//!   starts a thread only after an expiry, to connect the new session (its connector may
//!   block) and close the old handle.
//! - Sync calls are the async calls waited on: they return in the same order.
//! - The C client's log callback runs on whichever C thread logs; it only forwards the
//!   message to the `log` crate (or, with the `tracing` feature, to `tracing`) from a
//!   thread of its own.
//!
//! # Logging
//!
//! The C client's records (and the binding's own) go to the `log` crate, target
//! `zookeeper_mt::c`; a `tracing` subscriber sees them through `tracing-log`'s
//! `LogTracer`. With the `tracing` feature they are `tracing` events instead, with the
//! fields `c_function`, `c_line` and `session_id` (the handle's session, once the C
//! client announced it). Either way the C log level follows the most verbose level
//! listened at (`log::max_level()`, the subscriber's level), at each connect and once a
//! second while a handle is open, unless [`set_c_log_level`] fixed it; routine
//! connection trouble that the C client logs at ERROR (a lost connection, a time-out,
//! an expired session) is reported at WARN.
//!
//! # Backpressure
//!
//! A handle keeps at most [`MAX_IN_FLIGHT`] requests in flight. Every request writes a
//! byte to the C client's wake-up pipe, and a full pipe makes the C client drop its own
//! connection and fail every request in flight; the bound keeps the pipe from filling
//! whatever the number of handles. A request made when the handle is full is queued, not
//! waited for: its call returns at once (an async call's future is pending; a blocking
//! call waits for its reply as always), on any thread, and the request is sent as
//! completions make room, in the order the requests were made (async and blocking
//! alike). A queued request whose future is dropped is still sent. Close and session
//! expiry fail the queued requests as they fail those in flight.
//!
//! # Fork
//!
//! A child process must not use or close a handle its parent opened: the C client's
//! threads do not exist in the child, and `zookeeper_close` there waits forever for
//! them. Open new handles in the child (or exec first).
//!
//! # Feature flags
//!
//! By default the system `libzookeeper_mt` is linked (Debian: `libzookeeper-mt-dev`).
//! These features are forwarded to `zookeeper-mt-sys`:
//!
//! - `vendored`: build the pinned C client from source and link it statically.
//! - `tls`: TLS connections (`ZooKeeperBuilder::tls`, `TlsConfig`); implies `vendored`
//!   and links the system OpenSSL (Debian's library is built without it).
//! - `sasl`: SASL authentication, e.g. DIGEST-MD5 (`ZooKeeperBuilder::sasl`,
//!   `SaslConfig`); implies `vendored` and links Cyrus SASL.
//! - `tracing`: the C client's log as structured `tracing` events (see
//!   [Logging](#logging)).
//!
//! Digest ACLs and [`ZooKeeper::add_auth`] work with every build.
//!
//! MSRV: Rust 1.82 or newer; it is raised only in a new minor release (see `docs/msrv.md`
//! in the repository).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod acl;
mod client;
mod closer;
mod connect;
mod context;
mod error;
mod handle;
mod in_flight;
mod liveness;
mod logging;
mod managed;
mod multi;
mod no_wait;
mod ops;
mod path;
mod peer;
mod raw;
mod reply;
mod request;
mod security;
mod servers;
mod session;
mod states;
pub mod stream;
mod timeout;
mod timer;
mod types;
mod watch;
mod watch_table;

/// The raw C bindings (`zookeeper-mt-sys`), for [`ZooKeeper::with_raw_handle`].
pub use zookeeper_mt_sys as ffi;

pub use client::{WeakZooKeeper, ZooKeeper, ZooKeeperBuilder};
pub use connect::ConnectFuture;
pub use error::{Error, Result};
pub use in_flight::MAX_IN_FLIGHT;
pub use liveness::SessionClock;
pub use logging::set_c_log_level;
pub use managed::{ManagedSession, ManagedZooKeeper};
pub use multi::{Op, OpResult};
#[allow(deprecated)]
pub use no_wait::mark_executor_thread;
pub use no_wait::{refuse_waits_on_this_thread, waiting_refused_here};
pub use path::{validate_path, MAX_DATA_LEN};
pub use reply::ZkFuture;
#[cfg(feature = "sasl")]
#[cfg_attr(docsrs, doc(cfg(feature = "sasl")))]
pub use security::SaslConfig;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use security::TlsConfig;
pub use session::{NextSessionEvent, SessionEvents};
pub use states::{
    connection_states, ConnectionEvent, ConnectionState, ConnectionStates,
    ConnectionStatesIntoIter, ConnectionStatesIter, NextConnectionEvent,
};
pub use timeout::{Deadline, Timeout, Version};
pub use types::{
    Acl, ClientId, CreateMode, CreateOptions, EventType, Perms, Reconfig, SessionState, Stat,
    WatchRemoval, WatchedEvent, WatcherType, MAX_TTL,
};
pub use watch::Watch;

/// The README's examples, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
