//! The one module that owns every context handed to C, and every `extern "C"` function
//! the C client calls back into.
//!
//! C never holds a pointer to Rust memory for a request or a watch: the context it gets
//! is a registry id (a non-zero integer cast to `void*`). A callback looks its id up and
//! removes the entry; an id that is gone (already delivered, swept at expiry or close,
//! or removed with `remove_watches`) is simply ignored. So each context is freed exactly
//! once, whatever the C client does with late or duplicate calls (session-event clones
//! after `zoo_remove_watches`, completions dropped at close, ZOOKEEPER-3868).
//!
//! The only real pointer given to C is the session's, as the global watcher context: an
//! `Arc<Session>` leaked at init and reclaimed after `zookeeper_close` has joined the C
//! threads (see `client.rs`).
//!
//! Callbacks run on the C completion thread. They copy what C hands them, take the
//! registry lock only to remove an entry, and deliver outside it by non-blocking channel
//! sends or by filling a reply slot: no user code runs here and nothing blocks.

use crate::error::Error;
use crate::reply::{Fulfiller, MultiOutcome, Payload, Reply};
use crate::session::Session;
use crate::types::{Acl, EventType, Perms, SessionState, Stat, WatchedEvent};
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use zookeeper_sys as sys;

/// Which C watch table a watch sits in; decides when C registers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchKind {
    /// `exists`: registered on ZOK and ZNONODE.
    Exists,
    /// `get` / `getconfig`: registered on ZOK only.
    Data,
    /// `get_children`: registered on ZOK only.
    Children,
}

impl WatchKind {
    fn registered_on(self, rc: c_int) -> bool {
        rc == sys::ZOK || (self == WatchKind::Exists && rc == sys::ZNONODE)
    }

    pub(crate) fn matches(self, which: crate::types::WatcherType) -> bool {
        use crate::types::WatcherType::*;
        match which {
            Any => true,
            Data => self != WatchKind::Children,
            Children => self == WatchKind::Children,
        }
    }
}

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

pub(crate) struct WatchEntry {
    pub(crate) path: String,
    pub(crate) kind: WatchKind,
    pub(crate) sender: Sender<WatchedEvent>,
}

pub(crate) struct RequestEntry {
    pub(crate) fulfiller: Fulfiller,
    /// The watch this request may register, freed here if the reply says C did not.
    pub(crate) watch: Option<(u64, WatchKind)>,
    pub(crate) multi: Option<Box<MultiBuffers>>,
}

enum Kind {
    Request(RequestEntry),
    Watch(WatchEntry),
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

/// Sharded so that many clients and threads rarely contend on one lock.
static REGISTRY: [Mutex<Option<HashMap<u64, Entry>>>; SHARDS] =
    [const { Mutex::new(None) }; SHARDS];
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn shard(id: u64) -> &'static Mutex<Option<HashMap<u64, Entry>>> {
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
        .get_or_insert_with(HashMap::new)
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
    shard(id).lock().as_mut()?.remove(&id)
}

/// The `void*` C gets for an id.
pub(crate) fn id_to_ptr(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

fn ptr_to_id(ptr: *const c_void) -> u64 {
    ptr as usize as u64
}

/// Registers a watch; returns its id.
pub(crate) fn register_watch(client: u64, watch: WatchEntry) -> u64 {
    insert(client, Kind::Watch(watch))
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
    if let Some((watch_id, _)) = request.watch {
        remove(watch_id);
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

/// Removes a watch the caller no longer wants (after a successful `zoo_remove_watches`),
/// telling its receiver with a `NotWatching` event.
pub(crate) fn forget_watch(id: u64, state: SessionState) -> bool {
    match remove(id) {
        Some(Entry {
            kind: Kind::Watch(watch),
            ..
        }) => {
            let _ = watch.sender.try_send(WatchedEvent {
                event_type: EventType::NotWatching,
                state,
                path: watch.path,
            });
            true
        }
        Some(other) => {
            // Not a watch: put it back untouched.
            put(id, other);
            false
        }
        None => false,
    }
}

/// Ids of this client's watches on `path` matching `which`.
pub(crate) fn watches_on(client: u64, path: &str, which: crate::types::WatcherType) -> Vec<u64> {
    let mut ids = Vec::new();
    for shard in &REGISTRY {
        if let Some(map) = shard.lock().as_ref() {
            ids.extend(map.iter().filter_map(|(id, entry)| match &entry.kind {
                Kind::Watch(w)
                    if entry.client == client && w.path == path && w.kind.matches(which) =>
                {
                    Some(*id)
                }
                _ => None,
            }));
        }
    }
    ids
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
            (Kind::Watch(watch), SweepReason::Terminal(state)) => {
                let _ = watch.sender.try_send(WatchedEvent {
                    event_type: EventType::Session,
                    state,
                    path: String::new(),
                });
            }
            // Closed: dropping fails requests with `Closed` and disconnects watches.
            (kind, _) => drop(kind),
        }
    }
}

/// Contexts of `client` still registered (pending requests, armed watches, retained
/// buffers). Reads 0 after close.
pub(crate) fn live_contexts(client: u64) -> usize {
    REGISTRY
        .iter()
        .map(|shard| {
            shard
                .lock()
                .as_ref()
                .map_or(0, |map| map.values().filter(|e| e.client == client).count())
        })
        .sum()
}

/// Contexts of every client in this process.
pub(crate) fn live_contexts_total() -> usize {
    REGISTRY
        .iter()
        .map(|shard| shard.lock().as_ref().map_or(0, HashMap::len))
        .sum()
}

thread_local! {
    static IN_C_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Whether the current thread is inside one of our C callbacks (the C completion
/// thread). Closing from there must be handed to another thread.
pub(crate) fn in_c_callback() -> bool {
    IN_C_CALLBACK.with(Cell::get)
}

/// Runs a callback body: marks the thread, and stops a panic at the FFI boundary
/// (unwinding into C is undefined behaviour).
fn guarded(what: &str, body: impl FnOnce()) {
    IN_C_CALLBACK.with(|flag| flag.set(true));
    if catch_unwind(AssertUnwindSafe(body)).is_err() {
        log::error!("zookeeper-rs: panic in the {what} callback was caught");
    }
    IN_C_CALLBACK.with(|flag| flag.set(false));
}

// ---------- copying out of C memory ----------

/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for the call.
unsafe fn copy_str(ptr: *const c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: per the function contract.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// # Safety
/// `stat` is NULL or points to a valid `Stat`.
unsafe fn copy_stat(stat: *const sys::Stat) -> Option<Stat> {
    // SAFETY: per the function contract.
    unsafe { stat.as_ref() }.map(Stat::from)
}

/// # Safety
/// `strings` is NULL or a valid `String_vector` (count entries, each a C string).
unsafe fn copy_strings(strings: *const sys::String_vector) -> Vec<String> {
    // SAFETY: per the function contract.
    let Some(vector) = (unsafe { strings.as_ref() }) else {
        return Vec::new();
    };
    if vector.data.is_null() || vector.count <= 0 {
        return Vec::new();
    }
    // SAFETY: C guarantees `count` valid entries at `data`.
    let items = unsafe { std::slice::from_raw_parts(vector.data, vector.count as usize) };
    items
        .iter()
        // SAFETY: each entry is a NUL-terminated string owned by the vector.
        .filter_map(|&item| unsafe { copy_str(item) })
        .collect()
}

/// # Safety
/// `acl` is NULL or a valid `ACL_vector`.
pub(crate) unsafe fn copy_acl(acl: *const sys::ACL_vector) -> Vec<Acl> {
    // SAFETY: per the function contract.
    let Some(vector) = (unsafe { acl.as_ref() }) else {
        return Vec::new();
    };
    if vector.data.is_null() || vector.count <= 0 {
        return Vec::new();
    }
    // SAFETY: C guarantees `count` valid entries at `data`.
    let items = unsafe { std::slice::from_raw_parts(vector.data, vector.count as usize) };
    items
        .iter()
        .map(|entry| Acl {
            perms: Perms(entry.perms),
            // SAFETY: scheme and id are NUL-terminated strings owned by the vector.
            scheme: unsafe { copy_str(entry.id.scheme) }.unwrap_or_default(),
            // SAFETY: as above.
            id: unsafe { copy_str(entry.id.id) }.unwrap_or_default(),
        })
        .collect()
}

// ---------- completions ----------

/// Delivers a completion to request `data`, freeing its watch if C did not register it.
fn complete(
    data: *const c_void,
    rc: c_int,
    payload: impl FnOnce(Option<&MultiBuffers>) -> Payload,
) {
    let id = ptr_to_id(data);
    let Some(entry) = remove(id) else { return };
    match entry.kind {
        Kind::Request(request) => {
            if let Some((watch_id, kind)) = request.watch {
                if !kind.registered_on(rc) {
                    remove(watch_id);
                }
            }
            if rc == sys::ZCLOSING {
                // A fake reply queued by `zookeeper_close`: report it like every other
                // request cut off by close (`Closed`, as documented), not as `Closing`.
                request.fulfiller.fulfill(Err(Error::Closed));
                return;
            }
            let payload = payload(request.multi.as_deref());
            request.fulfiller.fulfill(Ok(Reply { rc, payload }));
            // `request.multi` is dropped here, after C is done with it.
        }
        Kind::Retained(buffers) => drop(buffers),
        Kind::Watch(watch) => {
            // Not ours to take: a completion never carries a watch id.
            put(
                id,
                Entry {
                    client: entry.client,
                    kind: Kind::Watch(watch),
                },
            );
        }
    }
}

pub(crate) unsafe extern "C" fn void_completion(rc: c_int, data: *const c_void) {
    guarded("completion", || complete(data, rc, |_| Payload::Empty));
}

pub(crate) unsafe extern "C" fn stat_completion(
    rc: c_int,
    stat: *const sys::Stat,
    data: *const c_void,
) {
    guarded("completion", || {
        // SAFETY: C passes NULL or a Stat valid for this call.
        complete(data, rc, |_| Payload::Stat(unsafe { copy_stat(stat) }))
    });
}

pub(crate) unsafe extern "C" fn data_completion(
    rc: c_int,
    value: *const c_char,
    value_len: c_int,
    stat: *const sys::Stat,
    data: *const c_void,
) {
    guarded("completion", || {
        complete(data, rc, |_| {
            let bytes = if value.is_null() || value_len <= 0 {
                Vec::new()
            } else {
                // SAFETY: C passes `value_len` readable bytes at `value` for this call.
                unsafe { std::slice::from_raw_parts(value as *const u8, value_len as usize) }
                    .to_vec()
            };
            // SAFETY: C passes NULL or a Stat valid for this call.
            Payload::Data(bytes, unsafe { copy_stat(stat) })
        })
    });
}

pub(crate) unsafe extern "C" fn string_completion(
    rc: c_int,
    value: *const c_char,
    data: *const c_void,
) {
    guarded("completion", || {
        complete(data, rc, |_| {
            // SAFETY: C passes NULL or a NUL-terminated string valid for this call.
            Payload::Path(unsafe { copy_str(value) }.unwrap_or_default(), None)
        })
    });
}

pub(crate) unsafe extern "C" fn string_stat_completion(
    rc: c_int,
    value: *const c_char,
    stat: *const sys::Stat,
    data: *const c_void,
) {
    guarded("completion", || {
        complete(data, rc, |_| {
            // SAFETY: C passes NULL or valid pointers for this call.
            Payload::Path(unsafe { copy_str(value) }.unwrap_or_default(), unsafe {
                copy_stat(stat)
            })
        })
    });
}

pub(crate) unsafe extern "C" fn strings_stat_completion(
    rc: c_int,
    strings: *const sys::String_vector,
    stat: *const sys::Stat,
    data: *const c_void,
) {
    guarded("completion", || {
        complete(data, rc, |_| {
            // SAFETY: C passes NULL or valid pointers for this call.
            Payload::Children(unsafe { copy_strings(strings) }, unsafe { copy_stat(stat) })
        })
    });
}

pub(crate) unsafe extern "C" fn acl_completion(
    rc: c_int,
    acl: *mut sys::ACL_vector,
    stat: *mut sys::Stat,
    data: *const c_void,
) {
    guarded("completion", || {
        complete(data, rc, |_| {
            // SAFETY: C passes NULL or valid pointers for this call.
            Payload::Acl(unsafe { copy_acl(acl) }, unsafe { copy_stat(stat) })
        })
    });
}

pub(crate) unsafe extern "C" fn multi_completion(rc: c_int, data: *const c_void) {
    guarded("completion", || {
        complete(data, rc, |buffers| {
            let Some(buffers) = buffers else {
                return Payload::Multi(Vec::new());
            };
            let outcomes = buffers
                .results
                .iter()
                .zip(&buffers.ops)
                .map(|(result, op)| MultiOutcome {
                    rc: result.err,
                    path: if op.type_ == sys::ZOO_CREATE_OP as c_int && result.err == sys::ZOK {
                        // SAFETY: for a created node C wrote a NUL-terminated path into
                        // our path buffer, which `value` points at.
                        unsafe { copy_str(result.value) }
                    } else {
                        None
                    },
                    stat: if op.type_ == sys::ZOO_SETDATA_OP as c_int && result.err == sys::ZOK {
                        // SAFETY: `stat` points into our `stats` buffer, written by C.
                        unsafe { copy_stat(result.stat) }
                    } else {
                        None
                    },
                })
                .collect();
            Payload::Multi(outcomes)
        })
    });
}

// ---------- watchers ----------

/// The watcher for every path watch; its context is the watch's id.
pub(crate) unsafe extern "C" fn path_watcher(
    _zh: *mut sys::zhandle_t,
    event_type: c_int,
    state: c_int,
    path: *const c_char,
    context: *mut c_void,
) {
    guarded("watcher", || {
        let event_type = EventType::from_c(event_type);
        let state = SessionState::from_c(state);
        if event_type == EventType::Session && !state.is_terminal() {
            // Connection-loss and reconnect notices do not consume the watch: C keeps it
            // registered and it fires later (the session stream reports these).
            return;
        }
        let Some(entry) = remove(ptr_to_id(context)) else {
            return;
        };
        if let Kind::Watch(watch) = entry.kind {
            let path = if event_type == EventType::Session {
                String::new()
            } else {
                // SAFETY: C passes a NUL-terminated path (possibly empty) for this call.
                unsafe { copy_str(path) }.unwrap_or(watch.path)
            };
            let _ = watch.sender.try_send(WatchedEvent {
                event_type,
                state,
                path,
            });
        }
    });
}

/// The global watcher; its context is the session's `Arc<Session>` pointer.
pub(crate) unsafe extern "C" fn session_watcher(
    _zh: *mut sys::zhandle_t,
    event_type: c_int,
    state: c_int,
    path: *const c_char,
    context: *mut c_void,
) {
    guarded("session watcher", || {
        if context.is_null() {
            return;
        }
        // SAFETY: the context is the `Arc<Session>` leaked at init; it is reclaimed only
        // after `zookeeper_close` has joined this thread, so it is alive here.
        let session = unsafe { &*(context as *const Session) };
        let event = WatchedEvent {
            event_type: EventType::from_c(event_type),
            state: SessionState::from_c(state),
            // SAFETY: C passes NULL or a NUL-terminated string for this call.
            path: unsafe { copy_str(path) }.unwrap_or_default(),
        };
        if event.event_type == EventType::Session {
            session.on_state(event.state);
            if event.state.is_terminal() {
                sweep(session.client, SweepReason::Terminal(event.state));
            }
        }
        session.publish(event);
    });
}

/// The C client's log callback: no context pointer, so a plain function that forwards
/// to the `log` crate. The message is only valid during the call.
pub(crate) unsafe extern "C" fn log_callback(message: *const c_char) {
    guarded("log", || {
        // SAFETY: C passes a NUL-terminated message valid for this call.
        if let Some(message) = unsafe { copy_str(message) } {
            crate::logging::forward(&message);
        }
    });
}
