//! Membership: a node that stays there while its owner runs ([`PersistentNode`], Curator's
//! `PersistentNode`), and group membership for service discovery ([`GroupMember`] and the
//! observer [`Group`]), in the layouts of Curator's `GroupMember` and kazoo's `Party`.
//!
//! Also here, for every recipe: how its nodes are made ([`NodeOptions`]), and helpers for
//! whole paths ([`ensure_path`], [`delete_recursive`], each with an async form) and node
//! names ([`sequence_of`], [`guid`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;
//! use zookeeper_mt_recipes::nodes::{GroupEvent, GroupLayout, GroupMember};
//!
//! let client = ManagedZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let me = GroupMember::builder("/services/web", "web-7")
//!     .data(b"10.0.0.7:8080")
//!     .build(&client)?; // Curator GroupMember layout: node /services/web/web-7
//! me.group().wait_initialized(Duration::from_secs(10))?;
//! for member in me.group().members() {
//!     println!("{} at {}", member.id, String::from_utf8_lossy(&member.data));
//! }
//! while let Ok(event) = me.group().events().recv() {
//!     match event {
//!         GroupEvent::Joined(m) => println!("+ {}", m.id),
//!         GroupEvent::Left(m) => println!("- {}", m.id),
//!         _ => {}
//!     }
//! }
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # Persistent node
//! A [`PersistentNode`] runs a background task (on the recipes' one driver thread, so a
//! node costs no thread of its own) that creates an ephemeral node and keeps it: when
//! the node is deleted it is created again (with the latest data), after a reconnection
//! the task `sync`s and checks it is still there, and with a
//! [`ManagedZooKeeper`](crate::lifecycle::ManagedZooKeeper) it is created again in each
//! new session. On a plain handle it ends with the session. One watch (a `get` watch on
//! the node) follows it.
//!
//! Two modes ([`NodeMode`]):
//! - [`Ephemeral`](NodeMode::Ephemeral): a fixed path. If the create's reply is lost, the
//!   task `sync`s and finds the node by its owner: a node owned by this session is
//!   ours and is adopted. A node at the path owned by *another* session is not taken
//!   over (Curator overwrites its data): the status is [`NodeStatus::Conflict`] and the
//!   task waits for that node to go (one `exists` watch), then creates its own.
//! - [`ProtectedSequential`](NodeMode::ProtectedSequential): an ephemeral sequential
//!   node named with Curator's protected prefix, `<parent>/_c_<uuid>-<name><seq>`, a
//!   fresh uuid per creation. If the create's reply is lost, the task `sync`s the
//!   parent and finds the node by its uuid: a create that applied is adopted, never
//!   created a second time. The name changes with each creation
//!   ([`actual_path`](PersistentNode::actual_path)). Nothing orders these nodes by
//!   their sequence number, so the counter's end does not matter: past it the server
//!   repeats or wraps numbers, and the uuid keeps each name unique.
//!
//! # Groups
//! A group is the children of one node; each member owns one ephemeral child
//! ([`GroupMember`]: a [`PersistentNode`] plus a [`ChildrenCache`] of the group), and
//! observers ([`Group`]) cache the children. The members' list is the cache's
//! snapshot and the change stream ([`Group::events`]) its events, so it has the caches'
//! guarantees: the final membership is never missed across reconnections and (managed
//! client) expiry, memory is bounded, and the events of one member come in order.
//!
//! | layout | member node | id | data | same group as |
//! |---|---|---|---|---|
//! | [`CuratorGroupMember`](GroupLayout::CuratorGroupMember) | `<path>/<id>` (ephemeral) | the node's name | the member's payload | Curator 5.x `GroupMember` (its `PersistentNode` without protection) |
//! | [`KazooParty`](GroupLayout::KazooParty) | `<path>/<hex uuid>__party__` (ephemeral) | the node's data (UTF-8) | the id | kazoo 2.x `Party` |
//!
//! In the kazoo layout only children whose name contains `__party__` are members (as
//! kazoo counts them); ids need not be unique. In Curator's every child is a member and
//! its name is its id, so ids must be unique and valid node names; two members with one
//! id conflict (the second waits, see above).
//!
//! # Guarantees
//! - A persistent node exists whenever its session is connected and the node is not in
//!   conflict, except for the moments between a deletion and the re-creation; its data
//!   is the latest given to [`set_data`](PersistentNode::set_data) once the task has
//!   written it.
//! - Never two nodes for one persistent node, also when create replies are lost
//!   (`sync`, then a search by owner or uuid, before any new create).
//! - A group's members and events end on the server's final membership (see
//!   [`crate::caches`]).
//! - Closing leaves nothing behind: the node is deleted and every watch removed.
//!
//! # Non-guarantees
//! - That a member is alive: an ephemeral node outlives a hung or partitioned process
//!   until its session expires.
//! - That the node keeps its data against other writers: data someone else writes to
//!   the node stays until the next [`set_data`](PersistentNode::set_data) or creation.
//! - Every intermediate membership (a member that joins and leaves between two reads of
//!   the cache may not be reported).

mod group;
mod names;
mod node_task;
mod options;
mod paths;
mod persistent_node;

pub use group::*;
pub use names::*;
use node_task::*;
pub use options::NodeOptions;
pub use paths::*;
pub use persistent_node::*;

use crate::caches::{CacheEvent, ChildrenCache, NodeData};
use crate::error::LossReason;
use crate::events::EventStream;
use crate::leadership::leader_latch::curator_protected_prefix;
use crate::lifecycle::following::{Change, Following};
use crate::lifecycle::Client;
use crate::runtime::{block_on, until, StopSignal};
use crate::support::{create_dir_async, finish_later};
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use zookeeper_mt::{CreateMode, Error, EventType, Timeout, Watch, WatchedEvent, ZooKeeper};

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_mt::Stat;

    fn node(name: &str, data: &[u8]) -> Arc<NodeData> {
        Arc::new(NodeData {
            path: format!("/g/{name}"),
            data: data.to_vec(),
            stat: Stat::default(),
        })
    }

    #[test]
    fn members_in_each_layout() {
        let curator = GroupLayout::CuratorGroupMember.member(&node("web-1", b"10.0.0.1"));
        assert_eq!(
            curator,
            Some(Member {
                id: "web-1".into(),
                node: "web-1".into(),
                data: b"10.0.0.1".to_vec()
            })
        );
        let party = GroupLayout::KazooParty.member(&node("abc__party__", b"worker"));
        assert_eq!(party.unwrap().id, "worker");
        assert_eq!(GroupLayout::KazooParty.member(&node("other", b"x")), None);
        assert_eq!(
            GroupLayout::KazooParty.event(CacheEvent::Added(node("lock", b""))),
            None
        );
        assert_eq!(
            GroupLayout::KazooParty.event(CacheEvent::Initialized),
            Some(GroupEvent::Initialized)
        );
    }

    #[test]
    fn paths_join_under_the_root() {
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/x", "a"), "/x/a");
    }
}
