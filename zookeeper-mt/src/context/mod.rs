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
mod registry;

pub(crate) use callbacks::*;
pub(crate) use copy::copy_acl;

use crate::error::Error;
use crate::reply::Fulfiller;
use crate::types::SessionState;
use crate::watch_table::{WatchHook, WatchTable};
use parking_lot::RwLock;
use std::os::raw::{c_char, c_int, c_void};
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

/// Registers `kind` for `client`; its id (0, which no entry has, if the registry is
/// full: the request then fails as C answers an unknown context).
fn insert(client: u64, kind: Kind) -> u64 {
    registry::insert(Entry { client, kind }).unwrap_or(0)
}

/// Removes entry `id` for its completion.
fn take_request(id: u64) -> Option<Entry> {
    registry::remove(id)
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
    // Buffers C may still write into stay under the id (as `Retained`); the request is
    // answered after the registry's lock.
    let taken = registry::update(id, |entry| match entry.kind {
        Kind::Request(mut request) => {
            let kept = (rc == sys::ZMARSHALLINGERROR)
                .then(|| request.multi.take())
                .flatten()
                .map(|buffers| Entry {
                    client: entry.client,
                    kind: Kind::Retained(Some(buffers)),
                });
            (kept, Some(request))
        }
        retained => (
            Some(Entry {
                kind: retained,
                ..entry
            }),
            None,
        ),
    });
    let Some(Some(request)) = taken else { return };
    if let Some(hook) = request.watch {
        hook.on_reply(rc);
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
    let terminal = match reason {
        SweepReason::Terminal(state) => Some(state),
        SweepReason::Closed => None,
    };
    // Buffers C may still write stay until close: a terminal sweep leaves retained
    // entries, and keeps a request's multi buffers under its id (the completion may
    // still come and write into them). Everything else is answered after the locks.
    let swept = registry::update_all(
        client,
        |entry| terminal.is_none() || !matches!(entry.kind, Kind::Retained(_)),
        |entry| match (entry.kind, terminal) {
            (Kind::Request(mut request), Some(_)) => {
                let kept = request.multi.take().map(|buffers| Entry {
                    client,
                    kind: Kind::Retained(Some(buffers)),
                });
                (kept, Some(Kind::Request(request)))
            }
            (kind, _) => (None, Some(kind)),
        },
    );
    for (_, kind) in swept {
        match (kind, terminal) {
            (Some(Kind::Request(request)), Some(state)) => {
                let error = if state == SessionState::AuthFailed {
                    Error::AuthFailed
                } else {
                    Error::SessionExpired
                };
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
    let requests = registry::count(Some(client));
    let watches: usize = tables_of(client).iter().map(|t| t.live()).sum();
    requests + watches
}

/// Contexts of every client in this process.
pub(crate) fn live_contexts_total() -> usize {
    let requests = registry::count(None);
    let tables: Vec<Arc<WatchTable>> = TABLES
        .read()
        .iter()
        .flatten()
        .filter_map(|e| e.table.upgrade())
        .collect();
    requests + tables.iter().map(|t| t.live()).sum::<usize>()
}
