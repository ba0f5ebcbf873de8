//! The node holding a value: reads, conditional writes with retries, creation.

use super::*;

// ---------------------------------------------------------------------------------------
// The node.
// ---------------------------------------------------------------------------------------

/// `data` as a value of layout `L`, or `Corrupt`.
pub(super) fn decode<L: Layout>(path: &str, data: &[u8]) -> Result<L::Value> {
    L::decode(data).ok_or_else(|| {
        RecipeError::Corrupt(format!(
            "{path} holds {:?} ({} bytes), not {}",
            String::from_utf8_lossy(data),
            data.len(),
            L::NAME
        ))
    })
}

/// One value node in layout `L` (the body of every type here). Each call runs on one
/// session: the client's session of the moment when it starts.
pub(super) struct Cell<L: Layout> {
    pub(super) client: Client,
    pub(super) path: String,
    pub(super) nodes: NodeOptions,
    /// What a missing node is created with.
    pub(super) initial: Vec<u8>,
    pub(super) timeout: Duration,
    pub(super) layout: PhantomData<L>,
}

impl<L: Layout> Clone for Cell<L> {
    fn clone(&self) -> Self {
        Cell {
            client: self.client.clone(),
            path: self.path.clone(),
            nodes: self.nodes.clone(),
            initial: self.initial.clone(),
            timeout: self.timeout,
            layout: PhantomData,
        }
    }
}

impl<L: Layout> fmt::Debug for Cell<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cell")
            .field("path", &self.path)
            .field("layout", &L::NAME)
            .finish()
    }
}

impl<L: Layout> Cell<L> {
    pub(super) fn new(
        client: Client,
        path: &str,
        initial: Vec<u8>,
        nodes: NodeOptions,
    ) -> Result<Self> {
        check_base_path(path)?;
        let cell = Cell {
            client,
            path: path.to_string(),
            nodes,
            initial,
            timeout: DEFAULT_TIMEOUT,
            layout: PhantomData,
        };
        block_on(cell.create(&cell.zk(), cell.deadline()))?;
        Ok(cell)
    }

    pub(super) fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout)
    }

    /// The handle of the client's current session.
    pub(super) fn zk(&self) -> ZooKeeper {
        self.client.session().zk
    }

    /// Creates the node holding the initial value (and its missing parents) unless it
    /// exists.
    async fn create(&self, zk: &ZooKeeper, deadline: Deadline) -> Result<()> {
        let patience = Patience::from(deadline);
        let mut attempt = 0;
        loop {
            let options = zookeeper_mt::CreateOptions::new(CreateMode::Persistent)
                .with_acl(self.nodes.acl_list());
            match zk.create_async(&self.path, &self.initial, options).await {
                Ok(_) | Err(Error::NodeExists) => return Ok(()),
                Err(Error::NoNode) => match self.path.rsplit_once('/') {
                    Some((parent, _)) if !parent.is_empty() => {
                        self.create_parent(zk, parent, patience).await?
                    }
                    _ => return Err(Error::NoNode.into()),
                },
                Err(error) if error.is_retryable() => {
                    attempt += 1;
                    reconnected(zk, patience, attempt).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Creates the directory `dir` (as the node options say) and its missing parents.
    async fn create_parent(&self, zk: &ZooKeeper, dir: &str, patience: Patience) -> Result<()> {
        // `exists` first: creating a node that exists under a parent we may not create
        // in would fail with NoAuth rather than NodeExists.
        if retry_async(zk, patience, || zk.exists_async(dir))
            .await?
            .is_some()
        {
            return Ok(());
        }
        let dir = SeqDir {
            path: dir,
            data: b"",
            nodes: &self.nodes,
        };
        dir.create_async(zk, patience).await
    }

    /// Reads the node (creating it if missing), riding out connection loss.
    async fn read_raw(&self, zk: &ZooKeeper, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        loop {
            deadline.check()?;
            match retry_async(zk, deadline.into(), || zk.get_async(&self.path)).await {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(zk, deadline).await?,
                other => return other,
            }
        }
    }

    pub(super) async fn read(&self, deadline: Deadline) -> Result<Versioned<L::Value>> {
        self.read_on(&self.zk(), deadline).await
    }

    async fn read_on(&self, zk: &ZooKeeper, deadline: Deadline) -> Result<Versioned<L::Value>> {
        let (data, stat) = self.read_raw(zk, deadline).await?;
        Ok(Versioned {
            value: decode::<L>(&self.path, &data)?,
            version: stat.version,
            stat,
        })
    }

    /// Sends the conditional write of `data` at `expected_version` once.
    async fn send_cas(
        &self,
        zk: &ZooKeeper,
        expected_version: i32,
        data: &[u8],
    ) -> zookeeper_mt::Result<Stat> {
        match cas_request(expected_version) {
            CasRequest::Set { version } => zk.set_async(&self.path, data, Some(version)).await,
            CasRequest::SetThenCheck { version_after } => {
                let request = zk.multi_async(&[
                    Op::set_data(&self.path, data, -1),
                    Op::check(&self.path, version_after),
                ]);
                match request.await {
                    Ok(results) => match results.first() {
                        Some(OpResult::DataSet(stat)) => Ok(*stat),
                        _ => Err(Error::MarshallingError),
                    },
                    Err(Error::MultiFailed { error, .. }) => Err(*error),
                    Err(other) => Err(other),
                }
            }
        }
    }

    /// One conditional write of `data` at `expected_version` (of the node created at
    /// zxid `created`, if known), its lost replies resolved. `Ok(None)`: the condition did
    /// not hold (another write came first, or the node is gone).
    async fn cas(
        &self,
        zk: &ZooKeeper,
        expected_version: i32,
        created: Option<i64>,
        data: &[u8],
        deadline: Deadline,
    ) -> Result<Option<Stat>> {
        let patience = Patience::from(deadline);
        // An earlier send of this write lost its reply: a later BadVersion may be our own.
        let mut uncertain = false;
        let mut losses = 0;
        loop {
            deadline.check()?;
            match self.send_cas(zk, expected_version, data).await {
                Ok(stat) => return Ok(Some(stat)),
                Err(Error::BadVersion | Error::NoNode) if !uncertain => return Ok(None),
                Err(error)
                    if error.is_retryable()
                        || matches!(error, Error::BadVersion | Error::NoNode) =>
                {
                    if error.is_retryable() {
                        uncertain = true;
                        losses += 1;
                        reconnected(zk, patience, losses).await?;
                    }
                    // A recovery read: first make the server catch up with the leader,
                    // so a write of ours that did apply is seen.
                    retry_async(zk, patience, || zk.sync_async(&self.path)).await?;
                    let now = match retry_async(zk, patience, || zk.get_async(&self.path)).await {
                        Ok(read) => Some(read),
                        Err(RecipeError::ZooKeeper(Error::NoNode)) => None,
                        Err(error) => return Err(error),
                    };
                    let now_ref = now.as_ref().map(|(d, s)| (d.as_slice(), s));
                    match resolve(expected_version, data, now_ref, created) {
                        Resolution::NotYet => continue,
                        Resolution::Superseded => return Ok(None),
                        Resolution::Unknown => {
                            log::debug!(
                                "recipes: {}: outcome of a conditional write unknown after a lost reply",
                                self.path
                            );
                            return Err(RecipeError::ZooKeeper(Error::ConnectionLoss));
                        }
                    }
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Reads, computes the new value with `change` (`None`: do not write), writes it
    /// conditionally; again on conflict, until the deadline.
    pub(super) async fn update(
        &self,
        mut change: impl FnMut(L::Value) -> Result<Option<L::Value>>,
    ) -> Result<AtomicValue<L::Value>> {
        let (zk, deadline) = (self.zk(), self.deadline());
        let mut conflicts = 0u32;
        loop {
            let seen = self.read_on(&zk, deadline).await?;
            let Some(new) = change(seen.value)? else {
                return Ok(AtomicValue {
                    succeeded: false,
                    pre: seen.value,
                    post: seen.value,
                });
            };
            let written = self
                .cas(
                    &zk,
                    seen.version,
                    Some(seen.stat.czxid),
                    &L::encode(new),
                    deadline,
                )
                .await?;
            if written.is_some() {
                return Ok(AtomicValue {
                    succeeded: true,
                    pre: seen.value,
                    post: new,
                });
            }
            conflicts += 1;
            if conflicts % 8 == 0 {
                // Long losing streak: step back a little so the winners drain.
                sleep_for(Duration::from_micros(200 * u64::from(conflicts.min(64)))).await;
            }
        }
    }

    pub(super) async fn add(&self, delta: L::Value) -> Result<AtomicValue<L::Value>> {
        self.update(|value| {
            L::checked_add(value, delta)
                .map(Some)
                .ok_or(RecipeError::InvalidArgument(
                    "the change overflows the value",
                ))
        })
        .await
    }

    /// One conditional write of `new` at `expected_version`, without reading first.
    pub(super) async fn try_set_at(&self, new: L::Value, expected_version: i32) -> Result<bool> {
        let written = self
            .cas(
                &self.zk(),
                expected_version,
                None,
                &L::encode(new),
                self.deadline(),
            )
            .await?;
        Ok(written.is_some())
    }

    /// One attempt to write `new` over the value just read: `succeeded` false if another
    /// write came in between.
    pub(super) async fn try_set(&self, new: L::Value) -> Result<AtomicValue<L::Value>> {
        let (zk, deadline) = (self.zk(), self.deadline());
        let seen = self.read_on(&zk, deadline).await?;
        let written = self
            .cas(
                &zk,
                seen.version,
                Some(seen.stat.czxid),
                &L::encode(new),
                deadline,
            )
            .await?
            .is_some();
        Ok(AtomicValue {
            succeeded: written,
            pre: seen.value,
            post: if written { new } else { seen.value },
        })
    }

    /// Writes `new` whatever the value is.
    pub(super) async fn set(&self, new: L::Value) -> Result<Stat> {
        let (zk, deadline) = (self.zk(), self.deadline());
        let data = L::encode(new);
        loop {
            let written = retry_async(&zk, deadline.into(), || {
                zk.set_async(&self.path, &data, None)
            })
            .await;
            match written {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(&zk, deadline).await?,
                other => return other,
            }
        }
    }

    pub(super) async fn watch(&self) -> Result<ValueWatch<L::Value>> {
        ValueWatch::start::<L>(self).await
    }
}
