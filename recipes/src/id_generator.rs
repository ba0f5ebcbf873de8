//! Unique integer ids from a counter znode (seed 003): read the counter with its
//! version, write the incremented value back *at that version* (a compare-and-set),
//! and retry when the version moved (`BadVersion`). Batches, as the seed's commenter
//! proposes: one CAS reserves `N` ids, which are then served locally.
//!
//! ```no_run
//! use std::time::Duration;
//! use recipes::id_generator::IdGenerator;
//! use zookeeper::ZooKeeper;
//!
//! let zk = ZooKeeper::connect("127.0.0.1:2181", Duration::from_secs(10))?;
//! let ids = IdGenerator::with_batch(&zk, "/app/item-ids", 50)?; // one CAS per 50 ids
//! let first = ids.next_id()?;
//! let second = ids.next_id()?; // served from the local batch
//! assert_ne!(first, second);
//! println!("{:?}", ids.stats()); // CAS attempts, conflicts, ...
//! # Ok::<(), recipes::RecipeError>(())
//! ```
//!
//! # The counter node
//! Its data is the highest id reserved so far, as decimal text, followed by a space and
//! the *owner token* of the CAS that wrote it: `"1200 3f2a…-17"`. A node holding just a
//! number (or nothing, meaning 0) is accepted, so a counter can be seeded by hand.
//! A reservation of `n` ids moves the value from `h` to `h + n` and yields
//! `h + 1 ..= h + n`; ids start at 1 on a new counter.
//!
//! # Connection loss during the CAS (the hard case)
//! After `ConnectionLoss` on the `set`, the write may or may not have been applied. With
//! a plain counter one cannot tell one's own write from another client's that wrote the
//! same number, so this recipe writes a token unique to each CAS attempt next to the
//! number, re-reads after reconnecting, and decides:
//!
//! | re-read shows | meaning | action |
//! |---|---|---|
//! | our token | our write applied | keep the range (counted as `recovered`) |
//! | the version we wrote against | not applied (yet) | re-send the *identical* CAS: at most one of the two can apply, both carry our token |
//! | that version + 1, another token | another client's write took the version: ours can never apply | conflict: retry from the new value |
//! | a later version, another token | unknown: ours may have applied and been built upon | **discard** the range (counted in `discarded_*`) and retry |
//!
//! The token turns most connection losses into either "kept" or "retry" with no gap;
//! only the last, rare case leaves a gap, and a gap is safe: ids are never handed out
//! twice, because every other writer reserves strictly above any value it read.
//!
//! # Guarantees
//! - Unique ids across threads, processes and sessions, as long as every writer of the
//!   counter uses this CAS protocol and nobody lowers or deletes the counter.
//! - Each generator hands out increasing ids; ids reserved by one CAS are contiguous.
//!
//! # Non-guarantees
//! - No global order between generators (a batch reserved earlier may be served later),
//!   and no density: ids of a partly used batch are lost when the generator is dropped,
//!   and an ambiguous connection loss (last table row) or a timeout skips a range.
//! - A timeout (`Err(Timeout)`) after a connection loss leaves the outcome of the last
//!   CAS unknown; its range is never used.

use crate::support::{await_reconnect, create_if_absent, op_deadline, retry, Deadline};
use crate::util::guid;
use crate::NodeOptions;
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use zookeeper::{Error, Stat, ZooKeeper};

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

/// What a generator reports once its counter node is gone.
const COUNTER_DELETED: &str = "the id counter node was deleted";

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// An id generator over one counter znode (see the [module docs](self)). Thread-safe:
/// share it (`&IdGenerator` or `Arc<IdGenerator>`) between threads; refills are
/// serialized, so threads of one generator never race each other's CAS.
#[derive(Debug)]
pub struct IdGenerator {
    zk: ZooKeeper,
    path: String,
    batch: u64,
    timeout: Duration,
    /// Reserved ids not yet handed out.
    local: Mutex<Range<u64>>,
    /// Unique per generator; with a per-attempt counter it makes each CAS recognizable.
    owner: String,
    attempt: AtomicU64,
    counters: Counters,
}

impl IdGenerator {
    /// A generator reserving one id per CAS (the seed's behaviour). Creates the counter
    /// node (and its parents) at 0 if missing.
    pub fn new(zk: &ZooKeeper, path: &str) -> Result<IdGenerator> {
        IdGenerator::with_batch(zk, path, 1)
    }

    /// A generator reserving `batch` ids per CAS and serving them locally. `batch` must
    /// be at least 1.
    pub fn with_batch(zk: &ZooKeeper, path: &str, batch: u64) -> Result<IdGenerator> {
        if batch == 0 {
            return Err(RecipeError::InvalidArgument(
                "the batch size must be at least 1",
            ));
        }
        create_if_absent(zk, path, b"0", &NodeOptions::default(), op_deadline(zk))?;
        Ok(IdGenerator {
            zk: zk.clone(),
            path: path.to_string(),
            batch,
            timeout: DEFAULT_TIMEOUT,
            local: Mutex::new(0..0),
            owner: guid(),
            attempt: AtomicU64::new(0),
            counters: Counters::default(),
        })
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
        let local = self.local.lock();
        local.end - local.start
    }

    /// The next id: from the local batch, or from a new batch reserved by CAS.
    pub fn next_id(&self) -> Result<u64> {
        self.next_id_timeout(self.timeout)
    }

    /// [`next_id`](Self::next_id) with an explicit timeout.
    pub fn next_id_timeout(&self, timeout: Duration) -> Result<u64> {
        let deadline = Deadline::after(timeout);
        let mut local = self
            .local
            .try_lock_for(timeout)
            .ok_or(RecipeError::Timeout)?;
        if local.is_empty() {
            *local = self.reserve_range(self.batch, deadline)?;
        }
        let id = local.start;
        local.start += 1;
        bump(&self.counters.ids, 1);
        Ok(id)
    }

    /// Reserves `n` contiguous ids with one successful CAS (bypassing the local batch)
    /// and returns them as a range.
    pub fn reserve(&self, n: u64, timeout: Duration) -> Result<Range<u64>> {
        if n == 0 {
            return Err(RecipeError::InvalidArgument("reserve at least one id"));
        }
        let range = self.reserve_range(n, Deadline::after(timeout))?;
        bump(&self.counters.ids, n);
        Ok(range)
    }

    /// The counter's current value: the highest id reserved by anyone so far.
    pub fn current(&self) -> Result<u64> {
        let (data, _) = self.read(op_deadline(&self.zk))?;
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
    fn read(&self, deadline: Deadline) -> Result<(Vec<u8>, Stat)> {
        let read = retry(&self.zk, deadline, || {
            bump(&self.counters.reads, 1);
            self.zk.get(&self.path)
        });
        match read {
            Err(RecipeError::ZooKeeper(Error::NoNode)) => Err(RecipeError::Lost(COUNTER_DELETED)),
            other => other,
        }
    }

    /// One successful CAS moving the counter up by `n`; returns the reserved ids.
    fn reserve_range(&self, n: u64, deadline: Deadline) -> Result<Range<u64>> {
        let counters = &self.counters;
        // A read we already hold (from resolving a connection loss), reused once.
        let mut fresh: Option<(Vec<u8>, Stat)> = None;
        loop {
            let (data, stat) = match fresh.take() {
                Some(read) => read,
                None => self.read(deadline)?,
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
            let payload = format!("{new_high} {token}");
            let version = stat.version;
            let range = high + 1..new_high + 1;
            // Send the CAS; re-send the identical one while its outcome is "not yet".
            // `uncertain`: an earlier send of this payload lost its reply, so it may
            // still be the write that makes a later send fail.
            let mut uncertain = false;
            let mut losses = 0;
            loop {
                bump(&counters.cas_attempts, 1);
                match self.zk.set(&self.path, payload.as_bytes(), Some(version)) {
                    Ok(_) => {
                        bump(&counters.reservations, 1);
                        return Ok(range);
                    }
                    Err(Error::BadVersion) if !uncertain => {
                        bump(&counters.conflicts, 1);
                        break;
                    }
                    Err(Error::NoNode) => return Err(RecipeError::Lost(COUNTER_DELETED)),
                    Err(error) if error.is_retryable() || error == Error::BadVersion => {
                        let outcome = if error.is_retryable() {
                            bump(&counters.connection_losses, 1);
                            uncertain = true;
                            losses += 1;
                            await_reconnect(&self.zk, deadline, losses)
                                .and_then(|()| self.read(deadline))
                        } else {
                            self.read(deadline)
                        };
                        let (data, stat) = match outcome {
                            Ok(read) => read,
                            Err(error) => {
                                // Unknown outcome and no time left: the range is abandoned.
                                bump(&counters.discarded_ranges, 1);
                                bump(&counters.discarded_ids, n);
                                return Err(error);
                            }
                        };
                        match resolve(&data, &stat, &token, version) {
                            Resolution::Applied => {
                                bump(&counters.recovered, 1);
                                bump(&counters.reservations, 1);
                                return Ok(range);
                            }
                            Resolution::NotYet => continue,
                            Resolution::Superseded => {
                                bump(&counters.conflicts, 1);
                                fresh = Some((data, stat));
                                break;
                            }
                            Resolution::Unknown => {
                                log::debug!(
                                    "recipes: id generator: outcome of reserving {range:?} \
                                     unknown after connection loss; skipping it"
                                );
                                bump(&counters.discarded_ranges, 1);
                                bump(&counters.discarded_ids, n);
                                fresh = Some((data, stat));
                                break;
                            }
                        }
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        }
    }
}

/// What a re-read after a lost CAS reply says about that CAS.
#[derive(Debug, PartialEq, Eq)]
enum Resolution {
    /// The node carries our token: our write is the current value.
    Applied,
    /// Still at the version we wrote against: not applied (yet); re-send it.
    NotYet,
    /// Another write took the version after ours: ours can never apply.
    Superseded,
    /// Later writes hide whether ours applied.
    Unknown,
}

fn resolve(data: &[u8], stat: &Stat, token: &str, version: i32) -> Resolution {
    let current_token = parse_counter(data).ok().and_then(|(_, t)| t);
    if current_token.as_deref() == Some(token) {
        Resolution::Applied
    } else if stat.version == version {
        Resolution::NotYet
    } else if stat.version == version.wrapping_add(1) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_formats() {
        assert_eq!(parse_counter(b"").unwrap(), (0, None));
        assert_eq!(parse_counter(b"42").unwrap(), (42, None));
        assert_eq!(
            parse_counter(b"42 abc-1").unwrap(),
            (42, Some("abc-1".to_string()))
        );
        assert!(parse_counter(b"x1").is_err());
        assert!(parse_counter(&[0, 0, 0, 0, 0, 0, 0, 1]).is_err());
    }

    #[test]
    fn resolutions() {
        let stat = |version| Stat {
            version,
            ..Stat::default()
        };
        assert_eq!(
            resolve(b"10 me-1", &stat(4), "me-1", 3),
            Resolution::Applied
        );
        assert_eq!(
            resolve(b"5 other-1", &stat(3), "me-1", 3),
            Resolution::NotYet
        );
        assert_eq!(
            resolve(b"10 other-1", &stat(4), "me-1", 3),
            Resolution::Superseded
        );
        assert_eq!(
            resolve(b"20 other-2", &stat(5), "me-1", 3),
            Resolution::Unknown
        );
    }
}
