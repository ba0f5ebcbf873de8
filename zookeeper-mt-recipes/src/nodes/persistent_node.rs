//! The persistent (ephemeral) node: its builder and handle.

use super::*;
use crate::asynchronous::owner::SharedTask;
use crate::RetryPolicy;

// ---------------------------------------------------------------------------------------
// Persistent node.
// ---------------------------------------------------------------------------------------

/// How a [`PersistentNode`] is created (see the [module docs](super#persistent-node)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum NodeMode {
    /// An ephemeral node at a fixed path.
    #[default]
    Ephemeral,
    /// An ephemeral sequential node with Curator's protected prefix:
    /// `<parent>/_c_<uuid>-<name><seq>` for the path `<parent>/<name>`.
    ProtectedSequential,
}

/// What a [`PersistentNode`] is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeStatus {
    /// The node does not exist (yet, or again): it is being created, or its task waits
    /// for the connection or a new session to do so.
    Creating,
    /// The node exists ([`actual_path`](PersistentNode::actual_path)).
    Created,
    /// Another session owns a node at the path: waiting for it to go.
    Conflict,
    /// Stopped: closed, or the session of a plain handle ended.
    Ended,
}

/// How to start a [`PersistentNode`]; from [`PersistentNode::builder`].
#[derive(Debug, Clone)]
pub struct PersistentNodeBuilder {
    pub(super) path: String,
    pub(super) data: Vec<u8>,
    pub(super) mode: NodeMode,
    pub(super) nodes: NodeOptions,
    pub(super) retry: RetryPolicy,
}

impl PersistentNodeBuilder {
    /// The node's data (default empty).
    pub fn data(mut self, data: &[u8]) -> Self {
        self.data = data.to_vec();
        self
    }

    /// How the node is created (default [`NodeMode::Ephemeral`]).
    pub fn mode(mut self, mode: NodeMode) -> Self {
        self.mode = mode;
        self
    }

    /// ACL of the node and its missing parents, and whether the parent is created as a
    /// container.
    pub fn node_options(mut self, nodes: NodeOptions) -> Self {
        self.nodes = nodes;
        self
    }

    /// How the background task rides out failed requests: the pauses between tries
    /// (see [`RetryPolicy`]; its reconnect timeout is not used: a follower waits for the
    /// connection as long as it takes). Default: [`RetryPolicy::for_followers`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Starts keeping the node (returns at once; see
    /// [`wait_created`](PersistentNode::wait_created)). Fails on a bad path or data over
    /// the node data limit.
    pub fn build(self, client: impl Into<Client>) -> Result<PersistentNode> {
        PersistentNode::start_with(client.into(), self)
    }
}

pub(super) struct NodeShared {
    pub(super) state: Mutex<NodeState>,
    /// Woken at each change of `state`.
    pub(super) changed: crate::runtime::Wakers,
    pub(super) creations: AtomicU64,
    pub(super) armed: AtomicUsize,
    /// New data to write.
    pub(super) nudge: Nudge,
}

pub(super) struct NodeState {
    pub(super) status: NodeStatus,
    pub(super) path: Option<String>,
    pub(super) data: Vec<u8>,
    /// Bumped by each `set_data`: the task writes data newer than it wrote last.
    pub(super) data_serial: u64,
    pub(super) end: Option<RecipeError>,
}

pub(super) struct NodeConfig {
    pub(super) path: String,
    pub(super) parent: String,
    pub(super) name: String,
    pub(super) mode: NodeMode,
    pub(super) nodes: NodeOptions,
    pub(super) retry: RetryPolicy,
}

/// An ephemeral node kept in place by a background task (see the
/// [module docs](super#persistent-node)). Dropping it (or [`close`](Self::close)) deletes
/// the node: `close` waits for the task's end; a drop returns at once and the task
/// deletes the node on the driver. `Send + Sync` and cheap to clone: clones are one
/// node; dropping the last clone deletes it, and `close` on any clone closes it for all.
#[derive(Clone)]
pub struct PersistentNode {
    pub(super) shared: Arc<NodeShared>,
    pub(super) task: SharedTask,
    pub(super) config: Arc<NodeConfig>,
}

impl fmt::Debug for PersistentNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("PersistentNode")
            .field("path", &self.config.path)
            .field("mode", &self.config.mode)
            .field("status", &state.status)
            .field("actual", &state.path)
            .finish()
    }
}

impl PersistentNode {
    /// A builder for a node at `path` (for [`NodeMode::ProtectedSequential`], the path
    /// whose last component is the name before the sequence number).
    pub fn builder(path: &str) -> PersistentNodeBuilder {
        PersistentNodeBuilder {
            path: path.to_string(),
            data: Vec::new(),
            mode: NodeMode::Ephemeral,
            nodes: NodeOptions::default(),
            retry: RetryPolicy::for_followers(),
        }
    }

    /// Starts keeping an ephemeral node at `path` holding `data`.
    pub fn new(client: impl Into<Client>, path: &str, data: &[u8]) -> Result<PersistentNode> {
        PersistentNode::builder(path).data(data).build(client)
    }

    pub(super) fn start_with(
        client: Client,
        builder: PersistentNodeBuilder,
    ) -> Result<PersistentNode> {
        let sequential = builder.mode == NodeMode::ProtectedSequential;
        zookeeper_mt::validate_path(&builder.path, sequential)?;
        let Some((parent, name)) = builder.path.rsplit_once('/') else {
            return Err(RecipeError::InvalidArgument("the node path must not be /"));
        };
        if name.is_empty() {
            return Err(RecipeError::InvalidArgument("the node path must not be /"));
        }
        let parent = if parent.is_empty() { "/" } else { parent };
        if sequential {
            zookeeper_mt::validate_path(
                &join(parent, &format!("{}{name}", curator_protected_prefix())),
                true,
            )?;
        }
        check_data(&builder.data)?;
        let config = Arc::new(NodeConfig {
            path: builder.path.clone(),
            parent: parent.to_string(),
            name: name.to_string(),
            mode: builder.mode,
            nodes: builder.nodes,
            retry: builder.retry,
        });
        let shared = Arc::new(NodeShared {
            state: Mutex::new(NodeState {
                status: NodeStatus::Creating,
                path: None,
                data: builder.data,
                data_serial: 1,
                end: None,
            }),
            changed: crate::runtime::Wakers::default(),
            creations: AtomicU64::new(0),
            armed: AtomicUsize::new(0),
            nudge: Nudge::default(),
        });
        let worker = NodeWorker::new(client, Arc::clone(&config), Arc::clone(&shared));
        let panic_shared = Arc::clone(&shared);
        let task = crate::runtime::spawn(
            format!("zk-node {}", config.path),
            move |stop| worker.run(stop),
            move || {
                let mut state = panic_shared.state.lock();
                state.status = NodeStatus::Ended;
                state.end = Some(RecipeError::Lost(LossReason::WorkerFailed));
                drop(state);
                panic_shared.changed.wake_all();
            },
        )
        .map_err(|_| RecipeError::Lost(LossReason::WorkerFailed))?;
        Ok(PersistentNode {
            shared,
            task: SharedTask::new(task),
            config,
        })
    }

    /// The path it was started with.
    pub fn path(&self) -> &str {
        &self.config.path
    }

    /// The mode.
    pub fn mode(&self) -> NodeMode {
        self.config.mode
    }

    /// The node's actual path while it exists (with the sequence suffix for
    /// [`NodeMode::ProtectedSequential`]).
    pub fn actual_path(&self) -> Option<String> {
        self.shared.state.lock().path.clone()
    }

    /// What the node's task is doing.
    pub fn status(&self) -> NodeStatus {
        self.shared.state.lock().status
    }

    /// Waits until the node exists and returns its actual path: `Err(Timeout)`, or the
    /// reason the node stopped.
    pub fn wait_created(&self, timeout: impl Into<Timeout>) -> Result<String> {
        block_on(self.wait_created_async(timeout))
    }

    /// [`wait_created`](Self::wait_created), async.
    pub async fn wait_created_async(&self, timeout: impl Into<Timeout>) -> Result<String> {
        let created = self.shared.changed.until(|| {
            let state = self.shared.state.lock();
            match (state.status, &state.path) {
                (NodeStatus::Created, Some(path)) => Some(Ok(path.clone())),
                (NodeStatus::Ended, _) => Some(Err(state
                    .end
                    .clone()
                    .unwrap_or(RecipeError::Lost(LossReason::Closed)))),
                _ => None,
            }
        });
        until(timeout.into().deadline(), created)
            .await
            .unwrap_or(Err(RecipeError::Timeout))
    }

    /// The data the node is kept with.
    pub fn data(&self) -> Vec<u8> {
        self.shared.state.lock().data.clone()
    }

    /// Replaces the node's data: the task writes it to the node (at once when
    /// connected, else once it can) and uses it for every later creation. Returns
    /// without waiting for the write; fails at once on data over the node data limit.
    pub fn set_data(&self, data: &[u8]) -> Result<()> {
        check_data(data)?;
        {
            let mut state = self.shared.state.lock();
            state.data = data.to_vec();
            state.data_serial += 1;
        }
        self.shared.nudge.nudge();
        Ok(())
    }

    /// How many times the node was created (or a lost create adopted) so far.
    pub fn creations(&self) -> u64 {
        self.shared.creations.load(Ordering::Relaxed)
    }

    /// Watches the node's task holds armed now: at most one.
    pub fn armed_watches(&self) -> usize {
        self.shared.armed.load(Ordering::Relaxed)
    }

    /// Why the node stopped by itself (its plain handle's session ended, a request
    /// failed for good); `None` while it runs and after [`close`](Self::close).
    pub fn end_reason(&self) -> Option<RecipeError> {
        self.shared.state.lock().end.clone()
    }

    /// Stops keeping the node: deletes it (in the background if the connection does not
    /// allow it now, until the session ends) and removes the watch.
    /// Waits for the task's end (not where blocking is refused: there it returns at
    /// once and the task ends in the background).
    pub fn close(self) {
        self.task.stop_and_join();
    }
}

pub(super) fn check_data(data: &[u8]) -> Result<()> {
    if data.len() > zookeeper_mt::MAX_DATA_LEN {
        return Err(RecipeError::InvalidArgument(
            "the data is larger than a node's data may be",
        ));
    }
    Ok(())
}

/// `parent/name` (`/name` under the root).
pub(super) fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}
