//! The one module that owns every context handed to C, and every `extern "C"` function
//! the C client calls back into.
//!
//! C never holds a pointer to Rust memory for a request or a watch: the context it gets
//! is an id (a non-zero integer cast to `void*`). A request's id is a registry key (its
//! completion removes the entry); a watch registration's id names its handle's watch
//! table, a slot there and a generation ([`watch_context`]), so a watch costs no registry
//! entry. An id that is gone (already delivered, swept at expiry or close, or a watch
//! registration released) is simply ignored. So each context is freed exactly once,
//! whatever the C client does with late or duplicate calls (session-event clones after
//! `zoo_remove_watches`, completions dropped at close, ZOOKEEPER-3868).
//!
//! The registry's shards and the table list give memory back after a peak: a map well
//! below its capacity shrinks, an empty one is freed.
//!
//! The only real pointer given to C is the session's, as the global watcher context: an
//! `Arc<Session>` leaked at init and reclaimed after `zookeeper_close` has joined the C
//! threads (see `client.rs`).
//!
//! Callbacks run on the C completion thread. They copy what C hands them, take the
//! registry lock only to remove an entry, and deliver outside it by non-blocking channel
//! sends or by filling a reply slot: no user code runs here and nothing blocks.
//!
//! Parts: the registry (here), the `extern "C"` functions C calls ([`callbacks`]) and
//! the copying of what C hands them out of C memory ([`copy`]).

mod callbacks;
mod copy;

pub(crate) use callbacks::*;
pub(crate) use copy::copy_acl;

use crate::error::Error;
use crate::reply::Fulfiller;
use crate::types::SessionState;
use crate::watch_table::{WatchHook, WatchTable};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use zookeeper_mt_sys as sys;

/// Buffers the C client writes into after submission (`zoo_amulti`): they must live
/// until the completion has run, or until close.
pub(crate) struct MultiBuffers {
    pub(crate) ops: Vec<sys::zoo_op_t>,
    pub(crate) results: Vec<sys::zoo_op_result_t>,
    pub(crate) path_buffers: Vec<Vec<c_char>>,
    pub(crate) stats: Vec<sys::Stat>,
    /// Paths, data and ACLs the ops point at (serialized at submit; kept for simplicity).
    pub(crate) _keep_alive: Vec<Box<dyn std::any::Any + Send>>,
}

// SAFETY: the raw pointers inside point into this struct's own heap buffers or into
// `_keep_alive`, which are all owned here; only the C completion thread or the closing
// thread (after the C threads are joined) touches them.
unsafe impl Send for MultiBuffers {}

pub(crate) struct RequestEntry {
    pub(crate) fulfiller: Fulfiller,
    /// What the reply does to the watch state (a watching read, a watch removal); run
    /// before the caller sees the reply.
    pub(crate) watch: Option<WatchHook>,
    pub(crate) multi: Option<Box<MultiBuffers>>,
}

enum Kind {
    Request(RequestEntry),
    /// Nobody waits any more, but C may still write into these buffers (a multi whose
    /// submission reported ZMARSHALLINGERROR after queueing, or swept at expiry): freed
    /// when its completion comes or at close.
    Retained(Option<Box<MultiBuffers>>),
}

struct Entry {
    client: u64,
    kind: Kind,
}

const SHARDS: usize = 16;

/// Hashes a registry id with one multiplication (Fibonacci hashing: the table uses the
/// top bits, which the multiplication fills from every bit of the id). Ids are ours and
/// sequential, not chosen by anyone, so the DoS resistance of the default SipHash buys
/// nothing here and it costs more than the rest of a lookup.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(FIBONACCI);
    }
}

const FIBONACCI: u64 = 0x9e37_79b9_7f4a_7c15;

type Table = HashMap<u64, Entry, BuildHasherDefault<IdHasher>>;

/// Sharded so that many clients and threads rarely contend on one lock.
static REGISTRY: [Mutex<Option<Table>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn shard(id: u64) -> &'static Mutex<Option<Table>> {
    &REGISTRY[(id as usize) % SHARDS]
}

fn insert(client: u64, kind: Kind) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    put(id, Entry { client, kind });
    id
}

/// Stores `entry` under `id` (a new one, or one taken out and put back).
fn put(id: u64, entry: Entry) {
    shard(id)
        .lock()
        .get_or_insert_with(Table::default)
        .insert(id, entry);
}

/// Keeps multi buffers C may still write into under their request's id, until that
/// completion arrives or the handle closes.
fn retain(id: u64, client: u64, buffers: Box<MultiBuffers>) {
    put(
        id,
        Entry {
            client,
            kind: Kind::Retained(Some(buffers)),
        },
    );
}

fn remove(id: u64) -> Option<Entry> {
    let mut guard = shard(id).lock();
    let entry = guard.as_mut()?.remove(&id);
    shrink(&mut guard);
    entry
}

/// Entries a shard always keeps room for: the few requests usually in flight then cost
/// no allocation and free per request.
const KEEP: usize = 32;

/// Gives a shard's memory back after a peak: freed when empty, halved (with room to
/// grow again) when under a quarter full, so a burst of requests in flight does not
/// keep its table for the life of the process.
fn shrink(map: &mut Option<Table>) {
    let Some(table) = map else { return };
    if table.capacity() <= KEEP {
        return;
    }
    if table.is_empty() {
        *map = None;
    } else if table.len() < table.capacity() / 4 {
        table.shrink_to(table.len() * 2);
    }
}

/// Removes entry `id` for its completion.
fn take_request(id: u64) -> Option<Entry> {
    remove(id)
}

/// The `void*` C gets for an id.
pub(crate) fn id_to_ptr(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

fn ptr_to_id(ptr: *const c_void) -> u64 {
    ptr as usize as u64
}

// A watch registration's context: [table number | tag | slot], the tag being the
// registration's generation (shifted) and kind (two low bits). Pointer-sized, non-zero
// (table numbers start at 1). A stale context (a late call for a released registration)
// could only name a newer registration if its slot were reused by one 2^14 generations
// later (2^6 on 32-bit targets) before that call is delivered; a slot is freed only once
// its reads are answered (or failed to submit), and answers queue behind the late call.
const TABLE_BITS: u32 = if usize::BITS >= 64 { 16 } else { 6 };
const TAG_BITS: u32 = if usize::BITS >= 64 { 16 } else { 8 };
const SLOT_BITS: u32 = usize::BITS - TABLE_BITS - TAG_BITS;

/// The context of a watch registration in slot `slot` of table `table`; `None` past the
/// bits the pointer has room for.
pub(crate) fn watch_context(table: u32, generation: u16, kind: usize, slot: u32) -> Option<u64> {
    if table == 0 || u64::from(table) >> TABLE_BITS != 0 || u64::from(slot) >> SLOT_BITS != 0 {
        return None;
    }
    let tag = ((u64::from(generation) << 2) | kind as u64) & ((1 << TAG_BITS) - 1);
    Some((u64::from(table) << (TAG_BITS + SLOT_BITS)) | (tag << SLOT_BITS) | u64::from(slot))
}

/// A watch context's (table number, tag, slot).
pub(crate) fn split_watch_context(id: u64) -> (u32, u16, u32) {
    (
        (id >> (TAG_BITS + SLOT_BITS)) as u32,
        ((id >> SLOT_BITS) & ((1 << TAG_BITS) - 1)) as u16,
        (id & ((1 << SLOT_BITS) - 1)) as u32,
    )
}

struct TableEntry {
    client: u64,
    table: Weak<WatchTable>,
}

/// The watch table of every open handle, by table number (0 unused). A number is
/// reused only after its handle's close has joined the C threads (see `sweep`), so no
/// late call can reach the next table with it.
static TABLES: RwLock<Vec<Option<TableEntry>>> = RwLock::new(Vec::new());

/// Numbers the watch table of `client` for its contexts; 0 if every number is taken
/// (its watching reads then fail).
pub(crate) fn register_table(client: u64, table: Weak<WatchTable>) -> u32 {
    let mut tables = TABLES.write();
    if tables.is_empty() {
        tables.push(None);
    }
    let number = match tables.iter().skip(1).position(Option::is_none) {
        Some(free) => free + 1,
        None => {
            tables.push(None);
            tables.len() - 1
        }
    };
    if (number as u64) >> TABLE_BITS != 0 {
        tables.truncate(number);
        return 0;
    }
    tables[number] = Some(TableEntry { client, table });
    number as u32
}

/// The watch table whose registration context is `id`, if its handle is open.
fn watch_table(id: u64) -> Option<Arc<WatchTable>> {
    let (number, _, _) = split_watch_context(id);
    TABLES
        .read()
        .get(number as usize)?
        .as_ref()?
        .table
        .upgrade()
}

/// The watch tables of `client`.
fn tables_of(client: u64) -> Vec<Arc<WatchTable>> {
    TABLES
        .read()
        .iter()
        .flatten()
        .filter(|e| e.client == client)
        .filter_map(|e| e.table.upgrade())
        .collect()
}

/// Drops the table numbers of `client` (at close, once the C threads are joined).
fn forget_tables(client: u64) {
    let mut tables = TABLES.write();
    for entry in tables.iter_mut() {
        if entry.as_ref().is_some_and(|e| e.client == client) {
            *entry = None;
        }
    }
    while matches!(tables.last(), Some(None)) {
        tables.pop();
    }
    if tables.len() < tables.capacity() / 4 {
        let len = tables.len();
        tables.shrink_to(len * 2);
    }
}

/// Registers a pending request; returns its id.
pub(crate) fn register_request(client: u64, request: RequestEntry) -> u64 {
    insert(client, Kind::Request(request))
}

/// The submission of request `id` failed with `rc`. Normally C will never call its
/// completion, so it (and its watch) are freed now; after ZMARSHALLINGERROR the
/// completion may still be queued (out of memory after queueing), so buffers C may write
/// are retained until that completion or close.
pub(crate) fn submission_failed(id: u64, rc: c_int) {
    let Some(entry) = remove(id) else { return };
    let Kind::Request(request) = entry.kind else {
        return;
    };
    if let Some(hook) = request.watch {
        hook.on_reply(rc);
    }
    if rc == sys::ZMARSHALLINGERROR {
        if let Some(buffers) = request.multi {
            retain(id, entry.client, buffers);
        }
    }
    request
        .fulfiller
        .fulfill(Err(Error::from_code(rc).unwrap_or(Error::SystemError)));
}

/// Why a sweep happens: decides what waiters and watchers are told.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SweepReason {
    /// The session expired or failed authentication: C will never call back again.
    Terminal(SessionState),
    /// `zookeeper_close` returned: the C threads are joined, nothing can call back.
    Closed,
}

/// Frees every context of `client`. Requests fail (`SessionExpired`/`AuthFailed`, or
/// `Closed`); watches get a final session event (terminal case) and end.
pub(crate) fn sweep(client: u64, reason: SweepReason) {
    let mut swept = Vec::new();
    for shard in &REGISTRY {
        let mut guard = shard.lock();
        if let Some(map) = guard.as_mut() {
            let ids: Vec<u64> = map
                .iter()
                .filter(|(_, e)| e.client == client)
                .filter(|(_, e)| {
                    // Buffers C may still write stay until close.
                    matches!(reason, SweepReason::Closed) || !matches!(e.kind, Kind::Retained(_))
                })
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                if let Some(entry) = map.remove(&id) {
                    swept.push((id, entry));
                }
            }
        }
        shrink(&mut guard);
    }
    // Deliver outside the registry locks.
    for (id, entry) in swept {
        match (entry.kind, reason) {
            (Kind::Request(request), SweepReason::Terminal(state)) => {
                let error = if state == SessionState::AuthFailed {
                    Error::AuthFailed
                } else {
                    Error::SessionExpired
                };
                if let Some(buffers) = request.multi {
                    // The completion may still come and write into these.
                    retain(id, client, buffers);
                }
                request.fulfiller.fulfill(Err(error));
            }
            // Closed: dropping fails requests with `Closed`.
            (kind, _) => drop(kind),
        }
    }
    // Watches get their final session event (terminal) or end (closed). At close the C
    // threads are joined: the table's number can go.
    for table in tables_of(client) {
        table.end(reason);
    }
    if matches!(reason, SweepReason::Closed) {
        forget_tables(client);
    }
}

/// Contexts of `client` still registered (pending requests, armed watches, retained
/// buffers). Reads 0 after close.
pub(crate) fn live_contexts(client: u64) -> usize {
    let requests: usize = REGISTRY
        .iter()
        .map(|shard| {
            shard
                .lock()
                .as_ref()
                .map_or(0, |map| map.values().filter(|e| e.client == client).count())
        })
        .sum();
    let watches: usize = tables_of(client).iter().map(|t| t.live()).sum();
    requests + watches
}

/// Contexts of every client in this process.
pub(crate) fn live_contexts_total() -> usize {
    let requests: usize = REGISTRY
        .iter()
        .map(|shard| shard.lock().as_ref().map_or(0, HashMap::len))
        .sum();
    let tables: Vec<Arc<WatchTable>> = TABLES
        .read()
        .iter()
        .flatten()
        .filter_map(|e| e.table.upgrade())
        .collect();
    requests + tables.iter().map(|t| t.live()).sum::<usize>()
}
