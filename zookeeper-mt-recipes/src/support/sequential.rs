//! Sequential nodes: creating them safely across a lost reply (tagged, found again after
//! a `sync`), at the counter's end, and reading them in order.

use super::*;

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
    pub(crate) async fn create_async(&self, zk: &ZooKeeper, patience: Patience) -> Result<()> {
        retry_async(zk, patience, || {
            make_dir_async(zk, self.path, self.data, self.nodes.dir_mode(), self.nodes)
        })
        .await
    }
}

/// Creates the ephemeral sequential child `dir/{tag}NNNNNNNNNN` holding `data` and returns
/// its name. A missing `dir` is created.
///
/// Lost-create protection: `tag` must be unique to this create (carry a
/// [`guid`](crate::nodes::guid)). If the reply is lost, the children are searched for the
/// tag before trying again, so a create that did apply is found, never duplicated (an
/// orphan node would block everyone behind it until the session ends). The search syncs
/// first: after a reconnection to another member that has not applied the create yet,
/// a plain read would miss the node. If the call gives up after such a loss, a
/// background step ([`finish_later`]) removes the node should the create have
/// applied.
///
/// This does not check the sequence number: recipes that order by it use
/// [`create_member_async`].
///
/// Dropped before it returns, it withdraws a create already sent (see
/// [`create_sequential_stat`]); the caller owns the node once this returns.
pub(crate) async fn create_sequential_async(
    zk: &ZooKeeper,
    dir: &str,
    tag: &str,
    data: &[u8],
    nodes: &NodeOptions,
    patience: Patience,
) -> Result<String> {
    let dir = SeqDir {
        path: dir,
        data: b"",
        nodes,
    };
    let (name, _) = create_sequential_stat(zk, &dir, tag, data, patience).await?;
    Ok(name)
}

/// [`create_sequential_async`], also returning the new node's stat.
pub(super) async fn create_sequential_stat(
    zk: &ZooKeeper,
    dir: &SeqDir<'_>,
    tag: &str,
    data: &[u8],
    patience: Patience,
) -> Result<(String, Stat)> {
    // Dropped before it returns (a cancelled call), or failed after a lost reply: the
    // create may have applied, so the node is looked for and removed in the background.
    let mut withdraw = WithdrawTagged::armed(zk, dir.path, tag);
    let path = format!("{}/{tag}", dir.path);
    let mut uncertain = false;
    let mut attempt = 0;
    let result = loop {
        let options = zookeeper_mt::CreateOptions::new(CreateMode::EphemeralSequential)
            .with_acl(dir.nodes.acl_list());
        match zk.create2_async(&path, data, options).await {
            Ok((created, stat)) => {
                let name = created.rsplit('/').next().unwrap_or_default();
                break Ok((name.to_string(), stat));
            }
            Err(Error::NoNode) => {
                if let Err(error) = dir.create_async(zk, patience).await {
                    break Err(error);
                }
            }
            Err(error) if error.is_retryable() => {
                uncertain = true;
                attempt += 1;
                if let Err(error) = reconnected(zk, patience, attempt).await {
                    break Err(error);
                }
                match find_tagged(zk, dir.path, tag, patience).await {
                    Ok(Some(found)) => break Ok(found),
                    Ok(None) => {}
                    Err(error) => break Err(error),
                }
            }
            Err(error) => break Err(error.into()),
        }
    };
    if result.is_ok() || !uncertain {
        withdraw.disarm();
    }
    result
}

/// Withdraws a tagged create in the background when dropped armed: the create's
/// future was dropped with its request sent, or gave up after its reply was lost.
struct WithdrawTagged<'a> {
    zk: &'a ZooKeeper,
    dir: &'a str,
    tag: &'a str,
    armed: bool,
}

impl<'a> WithdrawTagged<'a> {
    fn armed(zk: &'a ZooKeeper, dir: &'a str, tag: &'a str) -> Self {
        WithdrawTagged {
            zk,
            dir,
            tag,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for WithdrawTagged<'_> {
    fn drop(&mut self) {
        if self.armed {
            withdraw_tagged_in_background(self.zk, self.dir, self.tag);
        }
    }
}

/// The child of `dir` named with `tag` and its stat, read after a `sync` (a recovery
/// read: it decides whether a create whose reply was lost applied).
pub(super) async fn find_tagged(
    zk: &ZooKeeper,
    dir: &str,
    tag: &str,
    patience: Patience,
) -> Result<Option<(String, Stat)>> {
    retry_async(zk, patience, || zk.sync_async(dir)).await?;
    let children = match retry_async(zk, patience, || zk.get_children_async(dir)).await {
        Ok(children) => children,
        Err(RecipeError::ZooKeeper(Error::NoNode)) => return Ok(None),
        Err(error) => return Err(error),
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(tag)) else {
        return Ok(None);
    };
    let path = format!("{dir}/{name}");
    Ok(retry_async(zk, patience, || zk.exists_async(&path))
        .await?
        .map(|stat| (name, stat)))
}

/// After giving up on a create whose reply was lost: removes the node should it exist
/// (found by its tag, after a sync), in the background.
pub(crate) fn withdraw_tagged_in_background(zk: &ZooKeeper, dir: &str, tag: &str) {
    let (dir, tag) = (dir.to_string(), tag.to_string());
    let what = format!("withdrawing {dir}/{tag}*");
    finish_later(zk, what, move |zk| {
        let (dir, tag) = (dir.clone(), tag.clone());
        Box::pin(async move {
            zk.sync_async(&dir).await?;
            let children = match zk.get_children_async(&dir).await {
                Err(Error::NoNode) => return Ok(()),
                other => other?,
            };
            for name in children.iter().filter(|c| c.starts_with(&tag)) {
                delete_any_version_async(&zk, &format!("{dir}/{name}")).await?;
            }
            Ok(())
        })
    });
}

/// A node made by [`create_member_async`]: its name, its sequence number (in range) and the
/// zxid that created it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Created {
    pub(crate) name: String,
    pub(crate) seq: i32,
    pub(crate) czxid: i64,
}

/// Creates an ephemeral sequential member `dir/{tag}NNNNNNNNNN` as [`create_sequential_async`]
/// does, making sure its number is one the recipe may order by: below the directory's
/// limit ([`NodeOptions::sequence_limit`], by default
/// [`SEQUENCE_LIMIT`](crate::nodes::SEQUENCE_LIMIT)) and not negative. The step every
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
///
/// Dropping the future withdraws a create already sent (see
/// [`create_sequential_stat`]); the caller owns the node once this returns.
pub(crate) async fn create_member_async(
    zk: &ZooKeeper,
    dir: &SeqDir<'_>,
    tag: &str,
    data: &[u8],
    patience: Patience,
    drain: Deadline,
) -> Result<Created> {
    let limit = dir.nodes.limit();
    loop {
        let (name, stat) = create_sequential_stat(zk, dir, tag, data, patience).await?;
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
        delete_eventually_async(zk, &format!("{}/{name}", dir.path), patience).await?;
        restart_counter(zk, dir, stat.czxid, patience, drain).await?;
    }
}

/// The counter restart of [`create_member_async`]: returns once a create is worth trying again
/// (the directory was deleted, by us or someone else), `SequenceExhausted` if `drain`
/// passes while it still has children. `node_czxid` is the zxid of the out-of-range node
/// just made in it: a directory created later is a restarted one.
pub(super) async fn restart_counter(
    zk: &ZooKeeper,
    dir: &SeqDir<'_>,
    node_czxid: i64,
    patience: Patience,
    drain: Deadline,
) -> Result<()> {
    let mut attempt = 0;
    loop {
        // Atomic on the server: succeeds only while nobody has a node in it.
        let deleted = retry_async(zk, patience, || async {
            match zk.delete_async(dir.path, None).await {
                Ok(()) | Err(Error::NoNode) => Ok(true),
                Err(Error::NotEmpty) => Ok(false),
                Err(error) => Err(error),
            }
        })
        .await?;
        if deleted {
            log::info!("recipes: restarted the sequence counter of {}", dir.path);
            return Ok(());
        }
        let (children, stat, mut watch) = match zk.get_children2_watch_async(dir.path).await {
            Ok(found) => found,
            Err(Error::NoNode) => return Ok(()),
            Err(error) if error.is_retryable() => {
                attempt += 1;
                reconnected(zk, patience, attempt).await?;
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
        match until(drain, &mut watch).await.transpose()? {
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

    /// Whether its number may be ordered by (see [`crate::nodes::SEQUENCE_LIMIT`]).
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
/// no part, and their owners remove them ([`create_member_async`]).
pub(crate) fn ordered_members(children: Vec<String>, prefixes: &[&str], limit: i32) -> Vec<Member> {
    let mut list: Vec<Member> = members(children, prefixes);
    list.retain(|m| (0..limit).contains(&m.seq));
    list
}
