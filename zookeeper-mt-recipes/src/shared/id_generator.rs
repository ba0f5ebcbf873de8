//! Unique integer ids from a counter znode: read the counter with its
//! version, write the incremented value back *at that version* (a compare-and-set),
//! and retry when the version moved (`BadVersion`). Batches, as a common refinement
//! proposes: one CAS reserves `N` ids, which are then served locally.
//!
//! ```no_run
//! use std::time::Duration;
//! use zookeeper_mt_recipes::shared::IdGenerator;
//! use zookeeper_mt_recipes::NodeOptions;
//! use zookeeper_mt::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! // Once, when the counter is set up (generators never create it):
//! IdGenerator::create_counter(&zk, "/app/item-ids", &NodeOptions::default())?;
//! let ids = IdGenerator::new(&zk, "/app/item-ids").and_then(|ids| ids.with_batch(50))?; // one CAS per 50 ids
//! let first = ids.next_id()?;
//! let second = ids.next_id()?; // served from the local batch
//! assert_ne!(first, second);
//! println!("{:?}", ids.stats()); // CAS attempts, conflicts, ...
//! # Ok::<(), zookeeper_mt_recipes::RecipeError>(())
//! ```
//!
//! # The counter node
//! Its data is the highest id reserved so far, as decimal text, followed by a space and
//! the *owner token* of the CAS that wrote it: `"1200 3f2a…-17"`. A node holding just a
//! number (or nothing, meaning 0) is accepted, so a counter can be seeded by hand.
//! A reservation of `n` ids moves the value from `h` to `h + n` and yields
//! `h + 1 ..= h + n`; ids start at 1 on a new counter.
//!
//! The counter is created once, by [`IdGenerator::create_counter`]; generators only open
//! it. A generator that finds it missing (never created, or deleted, by hand or with its
//! parent) fails with [`RecipeError::Lost`]: recreating it at 0 would hand out every id
//! again, and a missing node cannot tell "first use" from "deleted".
//!
//! # Connection loss during the CAS (the hard case)
//! After `ConnectionLoss` on the `set`, the write may or may not have been applied. With
//! a plain counter one cannot tell one's own write from another client's that wrote the
//! same number, so this recipe writes a token unique to each CAS attempt next to the
//! number, re-reads after reconnecting (after a `sync`, so the server it reconnected to
//! has applied the write if the old one did), and decides:
//!
//! | re-read shows | meaning | action |
//! |---|---|---|
//! | our token | our write applied | keep the range (counted as `recovered`) |
//! | the state we wrote against (version and `mzxid`) | not applied (yet) | re-send the *identical* CAS: at most one of the two can apply, both carry our token |
//! | the version our write would have made, another token | another client's write took the version: ours can never apply | conflict: retry from the new value |
//! | a later version, another token | unknown: ours may have applied and been built upon | **discard** the range (counted in `discarded_*`) and retry |
//!
//! The token turns most connection losses into either "kept" or "retry" with no gap;
//! only the last, rare case leaves a gap, and a gap is safe: ids are never handed out
//! twice, because every other writer reserves strictly above any value it read.
//!
//! # The data version's end
//! The version is a signed 32-bit number that wraps after 2^31 writes, and the server
//! takes an expected version of -1 as "any version" (ZOOKEEPER-4743): a CAS against -1
//! checks nothing, so every writer would succeed and ids would repeat. So no CAS ever
//! relies on -1:
//! - from version -2, the write is two sets in one `multi`, at -2 (the check) and at -1
//!   (which inside the multi can only follow the first): the node goes from -2 to 0 and
//!   is never seen at -1 by anyone;
//! - a node found at -1 (left there by a writer outside this protocol) is written with
//!   a `multi` that also creates the marker child `wrap-<mzxid>` of that exact state:
//!   only one writer can create it, so only one write follows the state, and every
//!   other writer's multi fails and retries from the new value. The marker stays (one
//!   per 2^32 writes), with the ACL of [`IdGenerator::with_node_options`].
//!
//! # Guarantees
//! - Unique ids across threads, processes and sessions, as long as every writer of the
//!   counter uses this CAS protocol and nobody lowers the counter, also across the
//!   data version's wrap.
//! - A deleted counter stops every generator with [`RecipeError::Lost`]; it is never
//!   recreated behind the user's back.
//! - Each generator hands out increasing ids; ids reserved by one CAS are contiguous.
//!
//! # Non-guarantees
//! - No global order between generators (a batch reserved earlier may be served later),
//!   and no density: ids of a partly used batch are lost when the generator is dropped,
//!   and an ambiguous connection loss (last table row), a timeout or a dropped async
//!   call skips a range.
//! - A timeout (`Err(Timeout)`) after a connection loss, or an async call dropped with
//!   its CAS sent, leaves the outcome of that CAS unknown; its range is never used.
//! - Ids already reserved into a generator's local batch are still handed out after the
//!   counter was deleted (they were reserved before).
//!
//! # Async
//! [`next_id_async`](IdGenerator::next_id_async),
//! [`reserve_async`](IdGenerator::reserve_async) and
//! [`current_async`](IdGenerator::current_async) are the protocol itself; the blocking
//! calls drive the same futures on the caller's thread. Callers of one generator, blocking
//! or async, share its batch: while one refills it the others wait for that refill (no
//! thread each), and a refill whose future is dropped hands the turn to the next caller.

use crate::error::LossReason;
use crate::lifecycle::Client;
use crate::nodes::guid;
use crate::runtime::{block_on, until};
use crate::support::{
    create_if_absent, op_deadline, reconnected, retry, retry_async, Deadline, Patience,
};
use crate::NodeOptions;
use crate::{RecipeError, Result};
use batch::{Batch, Turn};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_mt::{CreateMode, Error, Op, Stat, Timeout, ZooKeeper};

/// Default time `next_id` may take (retries on conflicts and connection loss included).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Counters of a generator's work, for reporting (see [`IdGenerator::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdStats {
    /// Ids handed out (`next_id` plus the sizes of ranges from `reserve`).
    pub ids: u64,
    /// Successful reservations (CAS writes that took effect).
    pub reservations: u64,
    /// `set` calls issued (every CAS attempt, including re-sends after connection loss).
    pub cas_attempts: u64,
    /// CAS attempts that lost the race (`BadVersion`, or found superseded after a
    /// connection loss).
    pub conflicts: u64,
    /// CAS attempts whose reply was lost (outcome unknown at first).
    pub connection_losses: u64,
    /// Of those, how many turned out applied (own token found): range kept.
    pub recovered: u64,
    /// Reservations given up because their outcome could not be known (gaps).
    pub discarded_ranges: u64,
    /// Ids in those discarded ranges.
    pub discarded_ids: u64,
    /// Reads of the counter node.
    pub reads: u64,
}

impl fmt::Display for IdStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ids, {} reservations, {} CAS attempts, {} conflicts, {} connection losses \
             ({} recovered, {} ranges / {} ids discarded), {} reads",
            self.ids,
            self.reservations,
            self.cas_attempts,
            self.conflicts,
            self.connection_losses,
            self.recovered,
            self.discarded_ranges,
            self.discarded_ids,
            self.reads
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    ids: AtomicU64,
    reservations: AtomicU64,
    cas_attempts: AtomicU64,
    conflicts: AtomicU64,
    connection_losses: AtomicU64,
    recovered: AtomicU64,
    discarded_ranges: AtomicU64,
    discarded_ids: AtomicU64,
    reads: AtomicU64,
}

/// Name prefix of the marker child a write at data version -1 creates (see the module docs).
const WRAP_MARKER: &str = "wrap-";

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// An id generator over one counter znode (see the [module docs](self)). Thread-safe
/// and cheap to clone: share it (`&IdGenerator`, or a clone, which is the same
/// generator: one local batch, one set of stats) between threads and tasks; refills
/// are serialized, so callers of one generator never race each other's CAS.
#[derive(Debug, Clone)]
pub struct IdGenerator {
    client: Client,
    path: String,
    batch: u64,
    timeout: Duration,
    /// ACL of the nodes this generator creates.
    nodes: NodeOptions,
    /// Reserved ids not yet handed out, and their refill.
    local: Arc<Batch>,
    /// Unique per generator; with a per-attempt counter it makes each CAS recognizable.
    owner: String,
    attempt: Arc<AtomicU64>,
    counters: Arc<Counters>,
}

impl IdGenerator {
    /// The current session (on a managed client, the latest).
    fn zk(&self) -> ZooKeeper {
        self.client.session().zk
    }

    /// Creates the counter node `path` at 0 (and missing parents) with `nodes`' ACL, if
    /// it does not exist; an existing counter is left as it is.
    ///
    /// Call it once, when the counter is set up, not on every start: generators never
    /// create their counter, so one that vanished (deleted by hand, or with its parent)
    /// is an error ([`RecipeError::Lost`]) instead of a silent restart at 0 that would
    /// hand out every id again.
    pub fn create_counter(
        client: impl Into<Client>,
        path: &str,
        nodes: &NodeOptions,
    ) -> Result<()> {
        crate::support::check_base_path(path)?;
        let zk = &client.into().session().zk;
        create_if_absent(zk, path, b"0", nodes, op_deadline(zk))
    }

    /// A generator reserving one id per CAS, on the existing counter `path` (see
    /// [`create_counter`](Self::create_counter)). A missing counter is
    /// [`RecipeError::Lost`]: it is never created here.
    ///
    /// `client`: a plain handle or a managed client (each request then goes to the
    /// current session; a reserved batch is not tied to a session).
    pub fn new(client: impl Into<Client>, path: &str) -> Result<IdGenerator> {
        crate::support::check_base_path(path)?;
        let client = client.into();
        let zk = &client.session().zk;
        if retry(zk, op_deadline(zk), || zk.exists(path))?.is_none() {
            return Err(RecipeError::Lost(LossReason::CounterMissing));
        }
        Ok(IdGenerator {
            client,
            path: path.to_string(),
            batch: 1,
            timeout: DEFAULT_TIMEOUT,
            nodes: NodeOptions::default(),
            local: Arc::default(),
            owner: guid(),
            attempt: Arc::default(),
            counters: Arc::default(),
        })
    }

    /// Reserves `batch` ids per CAS and serves them locally (default 1). `batch` must be
    /// at least 1 ([`RecipeError::InvalidArgument`] otherwise). Ids reserved under the
    /// old size are still served first.
    pub fn with_batch(mut self, batch: u64) -> Result<IdGenerator> {
        if batch == 0 {
            return Err(RecipeError::InvalidArgument(
                "the batch size must be at least 1",
            ));
        }
        self.batch = batch;
        Ok(self)
    }

    /// The ACL of the marker child a write at data version -1 creates (see the module
    /// docs). Default: open.
    pub fn with_node_options(mut self, nodes: NodeOptions) -> IdGenerator {
        self.nodes = nodes;
        self
    }

    /// Sets how long [`next_id`](Self::next_id) may take (default [`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> IdGenerator {
        self.timeout = timeout;
        self
    }

    /// The counter node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Ids reserved per CAS.
    pub fn batch_size(&self) -> u64 {
        self.batch
    }

    /// Ids reserved and not yet handed out by this generator.
    pub fn remaining_in_batch(&self) -> u64 {
        self.local.remaining()
    }

    /// The next id: from the local batch, or from a new batch reserved by CAS, within
    /// the generator's timeout ([`with_timeout`](Self::with_timeout)).
    pub fn next_id(&self) -> Result<u64> {
        // Most ids come from the local batch: taken at once, without driving a future.
        if let Some(id) = self.local.take() {
            bump(&self.counters.ids, 1);
            return Ok(id);
        }
        block_on(self.next_id_async())
    }

    /// [`next_id`](Self::next_id), async. Dropped during a refill, the range its CAS
    /// may have reserved is skipped (never handed out); the other callers go on.
    pub async fn next_id_async(&self) -> Result<u64> {
        let deadline = Deadline::after(self.timeout);
        let refilling = match until(deadline, self.local.turn()).await {
            None => return Err(RecipeError::Timeout),
            Some(Turn::Id(id)) => {
                bump(&self.counters.ids, 1);
                return Ok(id);
            }
            Some(Turn::Refill(refilling)) => refilling,
        };
        let ids = self.reserve_range(self.batch, deadline).await?;
        let id = refilling.install(ids);
        bump(&self.counters.ids, 1);
        Ok(id)
    }

    /// Reserves `n` contiguous ids with one successful CAS (bypassing the local batch)
    /// and returns them as a range.
    pub fn reserve(&self, n: u64, timeout: impl Into<Timeout>) -> Result<Range<u64>> {
        block_on(self.reserve_async(n, timeout))
    }

    /// [`reserve`](Self::reserve), async. Dropped with its CAS sent, the range it may
    /// have reserved is skipped: never handed out, a gap (counted in
    /// [`IdStats::discarded_ranges`]).
    pub async fn reserve_async(&self, n: u64, timeout: impl Into<Timeout>) -> Result<Range<u64>> {
        let timeout = timeout.into().duration().unwrap_or(Duration::MAX);
        if n == 0 {
            return Err(RecipeError::InvalidArgument("reserve at least one id"));
        }
        let range = self.reserve_range(n, Deadline::after(timeout)).await?;
        bump(&self.counters.ids, n);
        Ok(range)
    }

    /// The counter's current value: the highest id reserved by anyone so far.
    pub fn current(&self) -> Result<u64> {
        block_on(self.current_async())
    }

    /// [`current`](Self::current), async.
    pub async fn current_async(&self) -> Result<u64> {
        let (data, _) = self.read(op_deadline(&self.zk())).await?;
        parse_counter(&data).map(|(high, _)| high)
    }

    /// A snapshot of this generator's counters.
    pub fn stats(&self) -> IdStats {
        let c = &self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        IdStats {
            ids: get(&c.ids),
            reservations: get(&c.reservations),
            cas_attempts: get(&c.cas_attempts),
            conflicts: get(&c.conflicts),
            connection_losses: get(&c.connection_losses),
            recovered: get(&c.recovered),
            discarded_ranges: get(&c.discarded_ranges),
            discarded_ids: get(&c.discarded_ids),
            reads: get(&c.reads),
        }
    }

    /// Reads the counter, retrying a lost connection until `deadline`.
    async fn read(&self, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        let read = retry_async(&self.zk(), deadline.into(), || {
            bump(&self.counters.reads, 1);
            self.zk().get_async(&self.path)
        })
        .await;
        match read {
            Err(RecipeError::ZooKeeper(Error::NoNode)) => {
                Err(RecipeError::Lost(LossReason::CounterDeleted))
            }
            other => other,
        }
    }

    /// One successful CAS moving the counter up by `n`; returns the reserved ids.
    async fn reserve_range(&self, n: u64, deadline: Deadline) -> Result<Range<u64>> {
        let counters = &self.counters;
        // A read we already hold (from resolving a connection loss), reused once.
        let mut fresh: Option<(Vec<u8>, Stat)> = None;
        loop {
            let (data, stat) = match fresh.take() {
                Some(read) => read,
                None => self.read(deadline).await?,
            };
            let (high, _) = parse_counter(&data)?;
            let new_high = high
                .checked_add(n)
                .filter(|h| h.checked_add(1).is_some())
                .ok_or_else(|| RecipeError::Corrupt(format!("id space exhausted at {high}")))?;
            let token = format!(
                "{}-{}",
                self.owner,
                self.attempt.fetch_add(1, Ordering::Relaxed)
            );
            let cas = Cas {
                payload: format!("{new_high} {token}"),
                token,
                version: stat.version,
                mzxid: stat.mzxid,
            };
            let range = high + 1..new_high + 1;
            // Send the CAS; re-send the identical one while its outcome is "not yet".
            // `uncertain`: an earlier send of this payload lost its reply, so it may
            // still be the write that makes a later send fail.
            let mut uncertain = false;
            let mut losses = 0;
            // Armed while a sent CAS may have applied: given up then (an error, or the
            // future dropped), its range is skipped and counted as discarded.
            let mut unsettled = Unsettled {
                counters,
                range: range.clone(),
                armed: false,
            };
            loop {
                bump(&counters.cas_attempts, 1);
                unsettled.armed = true;
                let error = match self.send(&cas).await {
                    Sent::Applied => {
                        unsettled.armed = false;
                        bump(&counters.reservations, 1);
                        return Ok(range);
                    }
                    Sent::Refused if !uncertain => {
                        unsettled.armed = false;
                        bump(&counters.conflicts, 1);
                        break;
                    }
                    Sent::Refused => None,
                    Sent::Failed(error) if error.is_retryable() => Some(error),
                    Sent::Failed(Error::NoNode) => {
                        unsettled.armed = false;
                        return Err(RecipeError::Lost(LossReason::CounterDeleted));
                    }
                    Sent::Failed(error) => {
                        unsettled.armed = false;
                        return Err(error.into());
                    }
                };
                if error.is_some() {
                    bump(&counters.connection_losses, 1);
                    uncertain = true;
                    losses += 1;
                    reconnected(&self.zk(), deadline.into(), losses).await?;
                }
                // Synced first: the server we reconnected to may not have applied our
                // write yet. Failing (no time left), the outcome stays unknown and the
                // range is abandoned by `unsettled`.
                let (data, stat) = self.read_synced(deadline).await?;
                match resolve(&data, &stat, &cas) {
                    Resolution::Applied => {
                        unsettled.armed = false;
                        bump(&counters.recovered, 1);
                        bump(&counters.reservations, 1);
                        return Ok(range);
                    }
                    Resolution::NotYet => continue,
                    Resolution::Superseded => {
                        unsettled.armed = false;
                        bump(&counters.conflicts, 1);
                        fresh = Some((data, stat));
                        break;
                    }
                    Resolution::Unknown => {
                        log::debug!(
                            "recipes: id generator: outcome of reserving {range:?} \
                             unknown after connection loss; skipping it"
                        );
                        unsettled.discard();
                        fresh = Some((data, stat));
                        break;
                    }
                }
            }
        }
    }

    /// [`read`](Self::read) after a `sync`, for deciding whether a write applied.
    async fn read_synced(&self, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        let patience = Patience::from(deadline);
        retry_async(&self.zk(), patience, || self.zk().sync_async(&self.path)).await?;
        self.read(deadline).await
    }

    /// Sends one CAS the way its read version requires (see [`CasPlan`]).
    async fn send(&self, cas: &Cas) -> Sent {
        let data = cas.payload.as_bytes();
        let result = match CasPlan::for_version(cas.version) {
            CasPlan::Set => self
                .zk()
                .set_async(&self.path, data, Some(cas.version))
                .await
                .map(drop),
            CasPlan::SkipMinusOne => {
                let ops = skip_ops(&self.path, data, cas.version);
                self.zk().multi_async(&ops).await.map(drop)
            }
            CasPlan::Marker => {
                let acl = self.nodes.acl_list();
                let ops = marker_ops(&self.path, data, cas.mzxid, acl);
                self.zk().multi_async(&ops).await.map(drop)
            }
        };
        match result {
            Ok(()) => Sent::Applied,
            Err(Error::BadVersion) => Sent::Refused,
            Err(Error::MultiFailed { error, .. })
                if matches!(*error, Error::BadVersion | Error::NodeExists) =>
            {
                Sent::Refused
            }
            Err(Error::MultiFailed { error, .. }) => Sent::Failed(*error),
            Err(error) => Sent::Failed(error),
        }
    }
}

/// A sent CAS whose outcome is not known yet: given up while armed (an error, or its
/// future dropped), its range is counted as discarded. It is never handed out: every
/// other writer reserves strictly above any value it reads.
struct Unsettled<'a> {
    counters: &'a Counters,
    range: Range<u64>,
    armed: bool,
}

impl Unsettled<'_> {
    /// Gives the range up now (the outcome cannot be known).
    fn discard(&mut self) {
        self.armed = false;
        bump(&self.counters.discarded_ranges, 1);
        bump(
            &self.counters.discarded_ids,
            self.range.end - self.range.start,
        );
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed {
            log::debug!(
                "recipes: id generator: gave up reserving {:?} with its CAS unanswered; \
                 skipping it",
                self.range
            );
            self.discard();
        }
    }
}

/// How a CAS from a counter read at a given data version is sent. The data version is
/// a signed 32-bit number that wraps, and the server reads an expected version of -1 as
/// "any version" (ZOOKEEPER-4743), so a plain CAS against -1 would check nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CasPlan {
    /// `set` at the read version (the next version is one higher).
    Set,
    /// The read version is -2: a plain CAS would leave the node at -1, where the next
    /// writer's CAS could not be checked. The write is two sets in one multi, at -2 (the
    /// check) and at -1 (inside the multi it can only follow the first), so the node
    /// goes from -2 to 0 and is never seen at -1.
    SkipMinusOne,
    /// The read version is -1 (left there by a writer not using this protocol): no
    /// expected version can check it. The write goes with the creation of the marker
    /// child `wrap-<mzxid of that state>` in one multi: only one writer can create it,
    /// so at most one write follows that state, and every other writer's multi fails.
    Marker,
}

impl CasPlan {
    fn for_version(version: i32) -> CasPlan {
        match version {
            -2 => CasPlan::SkipMinusOne,
            -1 => CasPlan::Marker,
            _ => CasPlan::Set,
        }
    }

    /// The data version a write of this plan from `version` leaves the node at.
    fn version_after(version: i32) -> i32 {
        match CasPlan::for_version(version) {
            CasPlan::Set => version.wrapping_add(1),
            CasPlan::SkipMinusOne | CasPlan::Marker => 0,
        }
    }
}

/// The multi of [`CasPlan::SkipMinusOne`]: set at `version` (the check), then again at
/// -1 (no check: it follows the first inside the multi). The version moves by two.
fn skip_ops(path: &str, data: &[u8], version: i32) -> Vec<Op> {
    vec![
        Op::set_data(path, data, version),
        Op::set_data(path, data, -1),
    ]
}

/// The multi of [`CasPlan::Marker`]: create the marker of the state last modified at
/// `mzxid` with the write; only the first such multi applies.
fn marker_ops(path: &str, data: &[u8], mzxid: i64, acl: &[zookeeper_mt::Acl]) -> Vec<Op> {
    vec![
        Op::create(
            &format!("{path}/{WRAP_MARKER}{mzxid}"),
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
        ),
        Op::set_data(path, data, -1),
    ]
}

/// One CAS: what it writes and the state it was read from.
#[derive(Debug)]
struct Cas {
    payload: String,
    token: String,
    version: i32,
    mzxid: i64,
}

/// How a CAS send ended.
#[derive(Debug)]
enum Sent {
    Applied,
    /// The version moved on (or another writer took the -1 state's marker).
    Refused,
    Failed(Error),
}

/// What a re-read after a lost CAS reply says about that CAS.
#[derive(Debug, PartialEq, Eq)]
enum Resolution {
    /// The node carries our token: our write is the current value.
    Applied,
    /// Still in the state we wrote against: not applied (yet); re-send it.
    NotYet,
    /// Another write took the state after ours: ours can never apply.
    Superseded,
    /// Later writes hide whether ours applied.
    Unknown,
}

fn resolve(data: &[u8], stat: &Stat, cas: &Cas) -> Resolution {
    let current_token = parse_counter(data).ok().and_then(|(_, t)| t);
    if current_token.as_deref() == Some(cas.token.as_str()) {
        Resolution::Applied
    } else if stat.version == cas.version && stat.mzxid == cas.mzxid {
        Resolution::NotYet
    } else if stat.version == CasPlan::version_after(cas.version) {
        Resolution::Superseded
    } else {
        Resolution::Unknown
    }
}

/// `"<high>[ <token>]"` (empty data is 0).
fn parse_counter(data: &[u8]) -> Result<(u64, Option<String>)> {
    let corrupt = || {
        RecipeError::Corrupt(format!(
            "id counter holds {:?}",
            String::from_utf8_lossy(data)
        ))
    };
    let text = std::str::from_utf8(data).map_err(|_| corrupt())?.trim();
    if text.is_empty() {
        return Ok((0, None));
    }
    let mut parts = text.splitn(2, ' ');
    let high = parts
        .next()
        .and_then(|number| number.parse::<u64>().ok())
        .ok_or_else(corrupt)?;
    Ok((high, parts.next().map(|t| t.trim().to_string())))
}

mod batch;
#[cfg(test)]
mod tests;
