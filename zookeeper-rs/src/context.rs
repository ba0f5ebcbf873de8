//! The one module that owns every context handed to C, and every `extern "C"` function
//! the C client calls back into.
//!
//! C never holds a pointer to Rust memory for a request or a watch: the context it gets
//! is a registry id (a non-zero integer cast to `void*`). A callback looks its id up (a
//! completion removes its entry); an id that is gone (already delivered, swept at expiry
//! or close, or a watch registration released) is simply ignored. So each context is freed exactly
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
use crate::watch_table::{WatchHook, WatchTable};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zookeeper_sys as sys;

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
    /// A watch registration of the handle's watch table (one per path and kind).
    Watch(Arc<WatchTable>),
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

/// Removes entry `id` for its completion, unless it is a watch registration (which a
/// completion never names; left in place).
fn take_request(id: u64) -> Option<Entry> {
    let mut guard = shard(id).lock();
    let map = guard.as_mut()?;
    if matches!(map.get(&id)?.kind, Kind::Watch(_)) {
        return None;
    }
    map.remove(&id)
}

/// The `void*` C gets for an id.
pub(crate) fn id_to_ptr(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

fn ptr_to_id(ptr: *const c_void) -> u64 {
    ptr as usize as u64
}

/// Registers a watch registration of `table`; returns its id (its C context).
pub(crate) fn register_watch(client: u64, table: Arc<WatchTable>) -> u64 {
    insert(client, Kind::Watch(table))
}

/// Frees a released watch registration's id.
pub(crate) fn forget(id: u64) {
    remove(id);
}

/// The watch table registration `id` belongs to, if it is still registered.
fn watch_table(id: u64) -> Option<Arc<WatchTable>> {
    match &shard(id).lock().as_ref()?.get(&id)?.kind {
        Kind::Watch(table) => Some(Arc::clone(table)),
        _ => None,
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
    }
    // Deliver outside the registry locks.
    let mut tables: Vec<Arc<WatchTable>> = Vec::new();
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
            (Kind::Watch(table), _) => {
                if !tables.iter().any(|t| Arc::ptr_eq(t, &table)) {
                    tables.push(table);
                }
            }
            // Closed: dropping fails requests with `Closed`.
            (kind, _) => drop(kind),
        }
    }
    // Watches get their final session event (terminal) or end (closed).
    for table in tables {
        table.end(reason);
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
///
/// The mark is restored, not cleared, on exit: callbacks nest (a C call made from a
/// completion can log, which runs the log callback inside it), and the outer one must
/// still see the mark afterwards.
fn guarded(what: &'static str, body: impl FnOnce()) {
    let outer = IN_C_CALLBACK.with(|flag| flag.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(body));
    IN_C_CALLBACK.with(|flag| flag.set(outer));
    if let Err(payload) = outcome {
        // Neither the report nor dropping the payload (its destructor is arbitrary code)
        // may unwind into C either. The installed logger is user code: it runs on the
        // log thread, not here.
        let _ = catch_unwind(AssertUnwindSafe(move || {
            drop(payload);
            crate::logging::error_off_thread(format!(
                "zookeeper-rs: panic in the {what} callback was caught"
            ));
        }));
    }
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
            scheme: unsafe { copy_str(entry.id.scheme) }
                .unwrap_or_default()
                .into(),
            // SAFETY: as above.
            id: unsafe { copy_str(entry.id.id) }.unwrap_or_default().into(),
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
    let Some(entry) = take_request(id) else {
        return;
    };
    match entry.kind {
        Kind::Request(request) => {
            if let Some(hook) = request.watch {
                hook.on_reply(rc);
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
        // Never taken (see `take_request`).
        Kind::Watch(_) => {}
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

/// The watcher for every path watch; its context is the id of a watch registration
/// (one per handle, path and kind; see `watch_table.rs`).
pub(crate) unsafe extern "C" fn path_watcher(
    _zh: *mut sys::zhandle_t,
    event_type: c_int,
    state: c_int,
    _path: *const c_char,
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
        let id = ptr_to_id(context);
        let Some(table) = watch_table(id) else {
            return; // released, ended, or closed: nothing waits for it
        };
        if event_type == EventType::Session {
            table.session_ended(state);
        } else {
            table.on_event(id, event_type, state);
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

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Condvar;
    use std::time::{Duration, Instant};

    #[test]
    fn a_nested_callback_restores_the_mark() {
        assert!(!in_c_callback());
        let mut after_inner = false;
        let mut after_inner_panic = false;
        guarded("outer", || {
            // A log callback nested in a completion (C logs from a call made there).
            guarded("inner", || {});
            after_inner = in_c_callback();
            guarded("inner", || panic!("inner callback panics"));
            after_inner_panic = in_c_callback();
        });
        assert!(
            after_inner,
            "the inner callback cleared the outer one's mark"
        );
        assert!(
            after_inner_panic,
            "a caught panic cleared the outer one's mark"
        );
        assert!(!in_c_callback());
    }

    /// Records the thread each log record was emitted on.
    struct Recorder {
        records: Mutex<Vec<(Option<String>, String)>>,
        added: Condvar,
    }

    impl log::Log for Recorder {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, record: &log::Record<'_>) {
            let thread = std::thread::current().name().map(str::to_string);
            self.records
                .lock()
                .push((thread, record.args().to_string()));
            self.added.notify_all();
        }
        fn flush(&self) {}
    }

    static RECORDER: Recorder = Recorder {
        records: Mutex::new(Vec::new()),
        added: Condvar::new(),
    };

    #[test]
    fn a_caught_panic_is_logged_off_the_callback_thread() {
        log::set_logger(&RECORDER).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Error);
        let mark_after = std::thread::Builder::new()
            .name("c-callback-thread".into())
            .spawn(|| {
                guarded("watcher", || panic!("a bug in a callback"));
                in_c_callback()
            })
            .unwrap()
            .join()
            .expect("the panic did not escape the callback");
        assert!(!mark_after);

        let deadline = Instant::now() + Duration::from_secs(20);
        let mut records = RECORDER.records.lock();
        let found = loop {
            let found = records
                .iter()
                .find(|(_, message)| message.contains("panic in the watcher callback"))
                .cloned();
            if let Some(found) = found {
                break found;
            }
            assert!(
                !RECORDER
                    .added
                    .wait_until(&mut records, deadline)
                    .timed_out(),
                "the panic was never reported"
            );
        };
        assert_ne!(
            found.0.as_deref(),
            Some("c-callback-thread"),
            "the installed logger ran on the callback's thread"
        );
    }
}
