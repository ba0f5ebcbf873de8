//! Groups: a member's node and the view of every member (kazoo `Party`, Curator `GroupMember`).

use super::*;
use crate::RetryPolicy;

// ---------------------------------------------------------------------------------------
// Groups.
// ---------------------------------------------------------------------------------------

/// Whose group layout a [`Group`] or [`GroupMember`] uses (see the
/// [module docs](super#groups)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum GroupLayout {
    /// Curator 5.x `GroupMember`: a member is the child named by its id; its data is the
    /// member's payload.
    #[default]
    CuratorGroupMember,
    /// kazoo 2.x `Party`: a member is a child `<hex uuid>__party__`; its data is the
    /// member's id.
    KazooParty,
}

/// kazoo `Party`'s node name, after the hex uuid.
pub(super) const KAZOO_PARTY_NAME: &str = "__party__";

impl GroupLayout {
    /// The member a cached child stands for, if it is one.
    pub(super) fn member(self, node: &NodeData) -> Option<Member> {
        let name = node.name().to_string();
        match self {
            GroupLayout::CuratorGroupMember => Some(Member {
                id: name.clone(),
                node: name,
                data: node.data.clone(),
            }),
            GroupLayout::KazooParty => name.contains(KAZOO_PARTY_NAME).then(|| Member {
                id: String::from_utf8_lossy(&node.data).into_owned(),
                node: name,
                data: node.data.clone(),
            }),
        }
    }

    /// The group event a cache event stands for, if any.
    pub(super) fn event(self, event: CacheEvent) -> Option<GroupEvent> {
        Some(match event {
            CacheEvent::Added(node) => GroupEvent::Joined(self.member(&node)?),
            CacheEvent::Updated { new, .. } => GroupEvent::Updated(self.member(&new)?),
            CacheEvent::Removed(node) => GroupEvent::Left(self.member(&node)?),
            CacheEvent::Initialized => GroupEvent::Initialized,
            CacheEvent::Suspended => GroupEvent::Suspended,
            CacheEvent::Reconnected => GroupEvent::Reconnected,
            CacheEvent::Lost => GroupEvent::Lost,
            CacheEvent::NewSession { generation } => GroupEvent::NewSession { generation },
        })
    }
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    /// Its id (Curator: the node's name; kazoo: the node's data as UTF-8).
    pub id: String,
    /// The name of its node in the group.
    pub node: String,
    /// Its node's data (Curator: the payload; kazoo: the id's bytes).
    pub data: Vec<u8>,
}

/// What a group's event stream reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupEvent {
    /// A member is in the group now (joined, or found by the initial load or a re-read).
    Joined(Member),
    /// A member's data changed (its new state).
    Updated(Member),
    /// A member left (its last known state).
    Left(Member),
    /// The initial load is complete: every member then was reported (`Joined`) before.
    Initialized,
    /// The connection is lost; the member list holds its last state.
    Suspended,
    /// The same session is back; changes made meanwhile follow as events.
    Reconnected,
    /// The session is over (on a plain handle the group view stops after this).
    Lost,
    /// A managed client's new session; the differences follow as events.
    NewSession {
        /// The new session's generation.
        generation: u64,
    },
}

/// An observer of a group's members (see the [module docs](super#groups)): a
/// [`ChildrenCache`] of the group node read in a [`GroupLayout`]. Cheap to clone: clones
/// are one view (one cache, one event stream).
#[derive(Debug, Clone)]
pub struct Group {
    pub(super) cache: ChildrenCache,
    pub(super) layout: GroupLayout,
    /// The cache's events read as member changes.
    pub(super) events: EventStream<GroupEvent>,
}

impl Group {
    /// Starts following the members of the group at `path` (which need not exist yet).
    /// Returns at once; see [`wait_initialized`](Self::wait_initialized).
    pub fn watch(client: impl Into<Client>, path: &str, layout: GroupLayout) -> Result<Group> {
        let cache = ChildrenCache::new(client, path)?;
        let events = cache
            .events()
            .clone()
            .filter_map(move |event| layout.event(event));
        Ok(Group {
            cache,
            layout,
            events,
        })
    }

    /// The group's path.
    pub fn path(&self) -> &str {
        self.cache.path()
    }

    /// The layout.
    pub fn layout(&self) -> GroupLayout {
        self.layout
    }

    /// Waits until the first load is complete.
    pub fn wait_initialized(&self, timeout: impl Into<Timeout>) -> Result<()> {
        self.cache.wait_initialized(timeout)
    }

    /// [`wait_initialized`](Self::wait_initialized), async.
    pub async fn wait_initialized_async(&self, timeout: impl Into<Timeout>) -> Result<()> {
        self.cache.wait_initialized_async(timeout).await
    }

    /// The members now (as last read), ordered by id, then node name.
    pub fn members(&self) -> Vec<Member> {
        let mut members: Vec<Member> = self
            .cache
            .children()
            .values()
            .filter_map(|node| self.layout.member(node))
            .collect();
        members.sort_by(|a, b| (&a.id, &a.node).cmp(&(&b.id, &b.node)));
        members
    }

    /// The members' ids now, sorted (repeated if two members share an id).
    pub fn ids(&self) -> Vec<String> {
        self.members().into_iter().map(|m| m.id).collect()
    }

    /// The member changes, an [`EventStream`] (see the
    /// [stream contract](crate::events#the-stream-contract)) read from the group's
    /// cache: coalesced per member as a cache's events are (see
    /// [bounded memory](crate::caches#bounded-memory)); children that are not members in
    /// the layout are skipped. Clones read the same stream.
    pub fn events(&self) -> &EventStream<GroupEvent> {
        &self.events
    }

    /// Watches armed by the underlying cache (one on the group, one per child).
    pub fn armed_watches(&self) -> usize {
        self.cache.armed_watches()
    }

    /// Why the view stopped by itself, if it did.
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.cache.end_reason()
    }

    /// Stops following the group (every watch is removed).
    pub fn close(self) {
        self.cache.close();
    }
}

/// How to join a group; from [`GroupMember::builder`].
#[derive(Debug, Clone)]
pub struct GroupMemberBuilder {
    pub(super) path: String,
    pub(super) id: String,
    pub(super) data: Option<Vec<u8>>,
    pub(super) layout: GroupLayout,
    pub(super) nodes: NodeOptions,
    pub(super) retry: RetryPolicy,
}

impl GroupMemberBuilder {
    /// The member's payload ([`GroupLayout::CuratorGroupMember`] only: in kazoo's layout
    /// the node's data is the id).
    pub fn data(mut self, data: &[u8]) -> Self {
        self.data = Some(data.to_vec());
        self
    }

    /// The layout (default [`GroupLayout::CuratorGroupMember`]).
    pub fn layout(mut self, layout: GroupLayout) -> Self {
        self.layout = layout;
        self
    }

    /// ACL of the member node and missing parents; whether the group node is a container.
    pub fn node_options(mut self, nodes: NodeOptions) -> Self {
        self.nodes = nodes;
        self
    }

    /// How the member's node rides out failed requests: the pauses between tries
    /// (see [`RetryPolicy`]; its reconnect timeout is not used: a follower waits for the
    /// connection as long as it takes). Default: [`RetryPolicy::for_followers`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Joins: starts the member's [`PersistentNode`] and a [`Group`] view. Fails at once
    /// on a bad path or id, or data in kazoo's layout.
    pub fn build(self, client: impl Into<Client>) -> Result<GroupMember> {
        let client = client.into();
        crate::support::check_base_path(&self.path)?;
        let (node_path, data) = match self.layout {
            GroupLayout::CuratorGroupMember => {
                if self.id.is_empty() || self.id.contains('/') {
                    return Err(RecipeError::InvalidArgument(
                        "a Curator group member id is a node name: not empty, no '/'",
                    ));
                }
                (
                    format!("{}/{}", self.path, self.id),
                    self.data.unwrap_or_default(),
                )
            }
            GroupLayout::KazooParty => {
                if self.data.is_some() {
                    return Err(RecipeError::InvalidArgument(
                        "a kazoo party member's data is its id: no other data",
                    ));
                }
                (
                    format!("{}/{}{KAZOO_PARTY_NAME}", self.path, guid()),
                    self.id.clone().into_bytes(),
                )
            }
        };
        let node = PersistentNode::builder(&node_path)
            .data(&data)
            .node_options(self.nodes)
            .retry_policy(self.retry)
            .build(client.clone())?;
        let group = Group::watch(client, &self.path, self.layout)?;
        Ok(GroupMember {
            group,
            node,
            id: self.id,
        })
    }
}

/// A member of a group (see the [module docs](super#groups)): its own node, kept by a
/// [`PersistentNode`], and a [`Group`] view of all members. Dropping it (or
/// [`leave`](Self::leave)) leaves the group. Cheap to clone: clones are one member;
/// dropping the last clone leaves, and `leave` on any clone leaves for all.
#[derive(Debug, Clone)]
pub struct GroupMember {
    pub(super) group: Group,
    pub(super) node: PersistentNode,
    pub(super) id: String,
}

impl GroupMember {
    /// A builder for a member `id` of the group at `path`.
    pub fn builder(path: &str, id: &str) -> GroupMemberBuilder {
        GroupMemberBuilder {
            path: path.to_string(),
            id: id.to_string(),
            data: None,
            layout: GroupLayout::CuratorGroupMember,
            nodes: NodeOptions::default(),
            retry: RetryPolicy::for_followers(),
        }
    }

    /// Joins the group at `path` as `id` with `payload`, in Curator's `GroupMember`
    /// layout: starts the member's node and its group view at once (see
    /// [`GroupMemberBuilder::build`]).
    pub fn new(
        client: impl Into<Client>,
        path: &str,
        id: &str,
        payload: &[u8],
    ) -> Result<GroupMember> {
        GroupMember::builder(path, id).data(payload).build(client)
    }

    /// This member's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The view of all members (including this one once its node is read back).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// This member's node.
    pub fn node(&self) -> &PersistentNode {
        &self.node
    }

    /// Replaces this member's payload ([`GroupLayout::CuratorGroupMember`] only);
    /// written in the background (see [`PersistentNode::set_data`]).
    pub fn set_data(&self, payload: &[u8]) -> Result<()> {
        match self.group.layout {
            GroupLayout::CuratorGroupMember => self.node.set_data(payload),
            GroupLayout::KazooParty => Err(RecipeError::InvalidArgument(
                "a kazoo party member's data is its id",
            )),
        }
    }

    /// Leaves the group: deletes the member's node and stops the view.
    pub fn leave(self) {
        let GroupMember { group, node, .. } = self;
        node.close();
        group.close();
    }
}
