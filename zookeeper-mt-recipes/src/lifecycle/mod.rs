//! Session lifecycle for the recipes: the client crate's connection states and managed
//! client, re-exported, and the [`Client`] every long-lived recipe follows.
//!
//! The states ([`ConnectionState`], in Apache Curator's vocabulary), their stream
//! ([`ConnectionStates`], from [`connection_states`] of a plain handle or
//! [`ManagedZooKeeper::states`]) and the client that makes a new session after expiry
//! ([`ManagedZooKeeper`]) live in the `zookeeper` crate; see their docs there. They are
//! re-exported here, so `zookeeper_mt_recipes::lifecycle::ManagedZooKeeper` is
//! `zookeeper_mt::ManagedZooKeeper`.
//!
//! # Recipes on a managed client
//! A long-lived recipe takes a [`Client`]: a plain handle (one session: its loss ends the
//! recipe) or a [`ManagedZooKeeper`] (the recipe carries on in each new session).
//! - **Long-lived state** (caches, group membership, persistent ephemeral nodes)
//!   recovers by itself on `NewSession`: re-read, re-create, re-register. The caches of
//!   [`crate::caches`] do.
//! - **Guards** (locks, leases, leadership) are tied to the session, and so to the
//!   generation, they were taken on. A guard must remember its generation and report
//!   itself lost once [`ManagedZooKeeper::generation`] differs (or `Lost` was seen); it
//!   must never re-acquire silently on the new session: another process may have held
//!   the lock in between. Re-acquiring is the application's decision.
//!
//! ```no_run
//! use zookeeper_mt_recipes::caches::NodeCache;
//! use zookeeper_mt_recipes::lifecycle::{ConnectionState, ManagedZooKeeper};
//! use std::time::Duration;
//!
//! let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let cache = NodeCache::new(&client, "/app/config")?; // follows every new session
//! let taken_on = client.generation();
//! for event in client.states().iter() {
//!     if event.state == ConnectionState::NewSession {
//!         assert_ne!(event.generation, taken_on); // guards of `taken_on` are gone
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
pub(crate) mod following;

pub use client::*;
pub use zookeeper_mt::{
    connection_states, ConnectionEvent, ConnectionState, ConnectionStates, ManagedSession,
    ManagedZooKeeper,
};

use crate::RecipeError;
use std::collections::VecDeque;
use std::task::{Context, Poll};
use std::time::Instant;
use zookeeper_mt::{SessionState, ZooKeeper};
