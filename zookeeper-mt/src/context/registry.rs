//! The registry of pending requests: what a request's C context (an id, never a
//! pointer) names until its completion or the handle's close.
//!
//! Sharded slabs: an id carries its shard, its slot and the generation the slot had
//! when the entry went in, so a lookup is an index and a compare (no hashing), and an
//! id whose entry is gone (answered, swept) never reaches the entry that reused its
//! slot: every insert into a shard takes a new generation.

use super::Entry;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const SHARD_BITS: u32 = 4;
const SHARDS: usize = 1 << SHARD_BITS;
/// Slots per shard: 2^28 on 64-bit targets (2^20 on 32-bit ones).
const SLOT_BITS: u32 = if usize::BITS >= 64 { 28 } else { 20 };
/// What is left of a pointer-sized id for the generation (32 bits; 8 on 32-bit).
const GENERATION_BITS: u32 = usize::BITS - SHARD_BITS - SLOT_BITS;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;

/// Slots a shard always keeps: the few requests usually in flight then cost no
/// allocation and free per request.
const KEEP: usize = 32;

struct Slot {
    generation: u64,
    entry: Option<Entry>,
}

#[derive(Default)]
struct Shard {
    slots: Vec<Slot>,
    /// Free slot numbers (some may be past `slots.len()` after a shrink: skipped).
    free: Vec<u32>,
    used: usize,
    /// The generation of the shard's latest insert (0 is never used: ids are non-zero).
    generation: u64,
}

/// Sharded so that many clients and threads rarely contend on one lock.
static SHARDS_: [Mutex<Shard>; SHARDS] = [const {
    Mutex::new(Shard {
        slots: Vec::new(),
        free: Vec::new(),
        used: 0,
        generation: 0,
    })
}; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

fn split(id: u64) -> (usize, usize, u64) {
    let shard = (id & (SHARDS as u64 - 1)) as usize;
    let slot = ((id >> SHARD_BITS) & ((1 << SLOT_BITS) - 1)) as usize;
    (shard, slot, id >> (SHARD_BITS + SLOT_BITS))
}

impl Shard {
    fn insert(&mut self, number: usize, entry: Entry) -> Option<u64> {
        self.generation = (self.generation % GENERATION_MASK) + 1;
        let generation = self.generation;
        let slot = loop {
            match self.free.pop() {
                Some(slot) if (slot as usize) < self.slots.len() => break slot as usize,
                Some(_) => continue,
                None => {
                    if (self.slots.len() as u64) >> SLOT_BITS != 0 {
                        return None;
                    }
                    self.slots.push(Slot {
                        generation: 0,
                        entry: None,
                    });
                    break self.slots.len() - 1;
                }
            }
        };
        self.slots[slot] = Slot {
            generation,
            entry: Some(entry),
        };
        self.used += 1;
        Some(
            (generation << (SHARD_BITS + SLOT_BITS))
                | ((slot as u64) << SHARD_BITS)
                | number as u64,
        )
    }

    fn get_mut(&mut self, slot: usize, generation: u64) -> Option<&mut Option<Entry>> {
        let found = self.slots.get_mut(slot)?;
        (found.generation == generation && found.entry.is_some()).then_some(&mut found.entry)
    }

    /// Frees `slot` (its entry already taken) and gives memory back after a peak.
    fn release(&mut self, slot: usize) {
        self.used -= 1;
        self.free.push(slot as u32);
        if self.slots.capacity() <= KEEP {
            return; // the slots a shard always keeps: nothing to give back
        }
        // Trailing free slots go; the table is halved (with room to grow again) when
        // under a quarter full, so a burst of requests does not keep its memory.
        while self.slots.last().is_some_and(|s| s.entry.is_none()) {
            self.slots.pop();
        }
        if self.slots.capacity() > KEEP && self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to((self.slots.len() * 2).max(KEEP));
            self.free.retain(|slot| (*slot as usize) < self.slots.len());
            self.free.shrink_to((self.free.len() * 2).max(KEEP));
        }
    }
}

/// Stores `entry`; its id (`None` if the shard has no slot left, 2^28 entries).
pub(super) fn insert(entry: Entry) -> Option<u64> {
    let number = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
    SHARDS_[number].lock().insert(number, entry)
}

/// Takes entry `id` out.
pub(super) fn remove(id: u64) -> Option<Entry> {
    let (number, slot, generation) = split(id);
    let mut shard = SHARDS_[number].lock();
    let entry = shard.get_mut(slot, generation)?.take()?;
    shard.release(slot);
    Some(entry)
}

/// Takes entry `id` out and lets `f` decide, under the shard's lock, what stays in its
/// place under the same id (`Some`) and what is returned. `f` must run no user code
/// (no waker, no drop of a fulfiller): return those to run after the lock.
pub(super) fn update<R>(id: u64, f: impl FnOnce(Entry) -> (Option<Entry>, R)) -> Option<R> {
    let (number, slot, generation) = split(id);
    let mut shard = SHARDS_[number].lock();
    let place = shard.get_mut(slot, generation)?;
    let entry = place.take()?;
    let (kept, out) = f(entry);
    match kept {
        Some(kept) => *place = Some(kept),
        None => shard.release(slot),
    }
    Some(out)
}

/// Runs `f` on every entry of `client` that `select` picks, taking each out and keeping
/// what `f` returns in its place (as [`update`]); returns what `f` gave, with the ids.
pub(super) fn update_all<R>(
    client: u64,
    select: impl Fn(&Entry) -> bool,
    mut f: impl FnMut(Entry) -> (Option<Entry>, R),
) -> Vec<(u64, R)> {
    let mut out = Vec::new();
    for (number, shard) in SHARDS_.iter().enumerate() {
        let mut shard = shard.lock();
        for slot in 0..shard.slots.len() {
            let place = &mut shard.slots[slot];
            let picked = place
                .entry
                .as_ref()
                .is_some_and(|e| e.client == client && select(e));
            if !picked {
                continue;
            }
            let generation = place.generation;
            let Some(entry) = place.entry.take() else {
                continue;
            };
            let (kept, result) = f(entry);
            let id = (generation << (SHARD_BITS + SLOT_BITS))
                | ((slot as u64) << SHARD_BITS)
                | number as u64;
            out.push((id, result));
            match kept {
                Some(kept) => shard.slots[slot].entry = Some(kept),
                None => {
                    // Freed without shrinking mid-scan: the slot numbers stay put.
                    shard.used -= 1;
                    shard.free.push(slot as u32);
                }
            }
        }
        // Now give memory back, as a release would.
        while shard.slots.last().is_some_and(|s| s.entry.is_none()) {
            shard.slots.pop();
        }
        let len = shard.slots.len();
        shard.free.retain(|slot| (*slot as usize) < len);
        if shard.used == 0 && shard.slots.capacity() > KEEP {
            shard.slots = Vec::new();
            shard.free = Vec::new();
        }
    }
    out
}

/// Entries of `client` (`None`: of every client).
pub(super) fn count(client: Option<u64>) -> usize {
    SHARDS_
        .iter()
        .map(|shard| {
            let shard = shard.lock();
            match client {
                None => shard.used,
                Some(client) => shard
                    .slots
                    .iter()
                    .filter_map(|s| s.entry.as_ref())
                    .filter(|e| e.client == client)
                    .count(),
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Kind;

    /// These tests share the process's registry: one at a time, so that one's entries
    /// never sit in the slots another one counts on being freed.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn retained(client: u64) -> Entry {
        Entry {
            client,
            kind: Kind::Retained(None),
        }
    }

    #[test]
    fn an_id_reaches_only_its_own_entry() {
        let _alone = ONE_AT_A_TIME.lock();
        let client = 0xfeed_0001;
        let first = insert(retained(client)).unwrap();
        assert_ne!(first, 0);
        assert!(remove(first).is_some());
        assert!(remove(first).is_none(), "taken once");
        // Slots are reused; a stale id never reaches the new entry.
        let ids: Vec<u64> = (0..64).map(|_| insert(retained(client)).unwrap()).collect();
        assert!(!ids.contains(&first));
        assert!(remove(first).is_none());
        for id in &ids {
            assert!(remove(*id).is_some());
        }
        assert_eq!(count(Some(client)), 0);
    }

    #[test]
    fn kept_entries_stay_under_their_id() {
        let _alone = ONE_AT_A_TIME.lock();
        let client = 0xfeed_0002;
        let id = insert(retained(client)).unwrap();
        let kept = update(id, |entry| (Some(entry), 7));
        assert_eq!(kept, Some(7));
        assert_eq!(count(Some(client)), 1);
        let swept = update_all(client, |_| true, |entry| (None, entry.client));
        assert_eq!(swept, vec![(id, client)]);
        assert_eq!(count(Some(client)), 0);
        assert!(remove(id).is_none());
    }

    #[test]
    fn a_peak_gives_its_memory_back() {
        let _alone = ONE_AT_A_TIME.lock();
        let client = 0xfeed_0003;
        let ids: Vec<u64> = (0..20_000)
            .map(|_| insert(retained(client)).unwrap())
            .collect();
        for id in ids {
            remove(id).unwrap();
        }
        for shard in &SHARDS_ {
            assert!(shard.lock().slots.capacity() < 2_000);
        }
    }
}
