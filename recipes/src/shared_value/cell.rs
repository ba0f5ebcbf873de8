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

/// One value node in layout `L` (the body of every type here).
pub(super) struct Cell<L: Layout> {
    pub(super) zk: ZooKeeper,
    pub(super) path: String,
    pub(super) nodes: NodeOptions,
    /// What a missing node is created with.
    pub(super) initial: Vec<u8>,
    pub(super) timeout: Duration,
    pub(super) layout: PhantomData<L>,
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
        zk: &ZooKeeper,
        path: &str,
        initial: Vec<u8>,
        nodes: NodeOptions,
    ) -> Result<Self> {
        check_base_path(path)?;
        let cell = Cell {
            zk: zk.clone(),
            path: path.to_string(),
            nodes,
            initial,
            timeout: DEFAULT_TIMEOUT,
            layout: PhantomData,
        };
        cell.create(Deadline::after(cell.timeout))?;
        Ok(cell)
    }

    pub(super) fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout)
    }

    pub(super) fn create(&self, deadline: Deadline) -> Result<()> {
        create_if_absent(&self.zk, &self.path, &self.initial, &self.nodes, deadline)
    }

    /// Reads the node (creating it if missing), riding out connection loss.
    pub(super) fn read_raw(&self, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        loop {
            deadline.check()?;
            match retry(&self.zk, deadline, || self.zk.get(&self.path)) {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(deadline)?,
                other => return other,
            }
        }
    }

    pub(super) fn read(&self, deadline: Deadline) -> Result<Versioned<L::Value>> {
        let (data, stat) = self.read_raw(deadline)?;
        Ok(Versioned {
            value: decode::<L>(&self.path, &data)?,
            version: stat.version,
            stat,
        })
    }

    /// One conditional write of `data` at `expected_version` (of the node created at
    /// zxid `created`, if known), its lost replies resolved. `Ok(None)`: the condition did
    /// not hold (another write came first, or the node is gone).
    pub(super) fn cas(
        &self,
        expected_version: i32,
        created: Option<i64>,
        data: &[u8],
        deadline: Deadline,
    ) -> Result<Option<Stat>> {
        // An earlier send of this write lost its reply: a later BadVersion may be our own.
        let mut uncertain = false;
        let mut losses = 0;
        loop {
            deadline.check()?;
            let sent = match cas_request(expected_version) {
                CasRequest::Set { version } => self.zk.set(&self.path, data, Some(version)),
                CasRequest::SetThenCheck { version_after } => self
                    .zk
                    .multi(&[
                        Op::set_data(&self.path, data, -1),
                        Op::check(&self.path, version_after),
                    ])
                    .map_err(|error| match error {
                        Error::MultiFailed { error, .. } => *error,
                        other => other,
                    })
                    .and_then(|results| match results.first() {
                        Some(OpResult::DataSet(stat)) => Ok(*stat),
                        _ => Err(Error::MarshallingError),
                    }),
            };
            match sent {
                Ok(stat) => return Ok(Some(stat)),
                Err(Error::BadVersion | Error::NoNode) if !uncertain => return Ok(None),
                Err(error)
                    if error.is_retryable()
                        || matches!(error, Error::BadVersion | Error::NoNode) =>
                {
                    if error.is_retryable() {
                        uncertain = true;
                        losses += 1;
                        await_reconnect(&self.zk, deadline, losses)?;
                    }
                    // A recovery read: first make the server catch up with the leader,
                    // so a write of ours that did apply is seen.
                    retry(&self.zk, deadline, || self.zk.sync(&self.path))?;
                    let now = match retry(&self.zk, deadline, || self.zk.get(&self.path)) {
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
    pub(super) fn update(
        &self,
        mut change: impl FnMut(L::Value) -> Result<Option<L::Value>>,
    ) -> Result<AtomicValue<L::Value>> {
        let deadline = self.deadline();
        let mut conflicts = 0u32;
        loop {
            let seen = self.read(deadline)?;
            let Some(new) = change(seen.value)? else {
                return Ok(AtomicValue {
                    succeeded: false,
                    pre: seen.value,
                    post: seen.value,
                });
            };
            let written = self.cas(
                seen.version,
                Some(seen.stat.czxid),
                &L::encode(new),
                deadline,
            )?;
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
                std::thread::sleep(Duration::from_micros(200 * u64::from(conflicts.min(64))));
            }
        }
    }

    pub(super) fn add(&self, delta: L::Value) -> Result<AtomicValue<L::Value>> {
        self.update(|value| {
            L::checked_add(value, delta)
                .map(Some)
                .ok_or(RecipeError::InvalidArgument(
                    "the change overflows the value",
                ))
        })
    }

    /// One conditional write of `new` at `expected_version`, without reading first.
    pub(super) fn try_set_at(&self, new: L::Value, expected_version: i32) -> Result<bool> {
        let written = self.cas(expected_version, None, &L::encode(new), self.deadline())?;
        Ok(written.is_some())
    }

    pub(super) fn set(&self, new: L::Value) -> Result<Stat> {
        let deadline = self.deadline();
        let data = L::encode(new);
        loop {
            match retry(&self.zk, deadline, || self.zk.set(&self.path, &data, None)) {
                Err(RecipeError::ZooKeeper(Error::NoNode)) => self.create(deadline)?,
                other => return other,
            }
        }
    }

    pub(super) fn watch(&self) -> Result<ValueWatch<L::Value>> {
        ValueWatch::start::<L>(self)
    }
}
