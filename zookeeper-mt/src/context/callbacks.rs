//! The `extern "C"` functions the C client calls: request completions, the watchers
//! and the log callback. They run on the C completion thread (the log callback on any C
//! thread), copy what C hands them, and deliver without blocking; a panic stops here.

use super::copy::{copy_stat, copy_str, copy_strings};
use super::*;
use crate::error::Error;
use crate::reply::{MultiOutcome, Payload, Reply};
use crate::session::Session;
use crate::types::{EventType, SessionState, WatchedEvent};
use std::cell::Cell;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use zookeeper_mt_sys as sys;

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
                "zookeeper-mt: panic in the {what} callback was caught"
            ));
        }));
    }
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
            request.fulfiller.heard(rc);
            let payload = payload(request.multi.as_deref());
            request.fulfiller.fulfill(Ok(Reply { rc, payload }));
            // `request.multi` is dropped here, after C is done with it.
        }
        Kind::Retained(buffers) => drop(buffers),
    }
}

pub(crate) unsafe extern "C" fn void_completion(rc: c_int, data: *const c_void) {
    guarded("completion", || complete(data, rc, |_| Payload::Empty));
}

/// `zoo_add_auth`'s completion: C calls it on its IO thread (with its lock held at a
/// connection loss), where no queued request may be sent (see `in_flight.rs`).
pub(crate) unsafe extern "C" fn auth_completion(rc: c_int, data: *const c_void) {
    crate::in_flight::io_thread(|| {
        guarded("completion", || complete(data, rc, |_| Payload::Empty))
    });
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
/// [`path_watcher`] if `watch`, else no watcher.
pub(crate) fn path_watcher_if(watch: bool) -> sys::watcher_fn {
    if watch {
        Some(path_watcher)
    } else {
        None
    }
}

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
        if event.event_type == EventType::Session && event.state.is_terminal() {
            // Pending watches and requests get their final event before subscribers
            // hear of the end.
            session.on_state(event.state);
            sweep(session.client, SweepReason::Terminal(event.state));
            session.publish(event);
        } else if event.event_type == EventType::Session {
            session.transition(event);
        } else {
            session.publish(event);
        }
    });
}

/// The C client's log callback for a handle without a log slot (past
/// `logging`'s fixed set): no context pointer, so its records name no session.
pub(crate) unsafe extern "C" fn log_callback(message: *const c_char) {
    // SAFETY: forwarded as C passed it.
    unsafe { log_callback_for(None, message) }
}

/// Forwards one C log line of the handle with log slot `slot` to the `log` crate (or
/// `tracing`). The message is only valid during the call.
///
/// # Safety
/// `message` is NULL or NUL-terminated and valid for the call.
pub(crate) unsafe fn log_callback_for(slot: Option<usize>, message: *const c_char) {
    guarded("log", || {
        // SAFETY: C passes a NUL-terminated message valid for this call.
        if let Some(message) = unsafe { copy_str(message) } {
            crate::logging::forward(slot, &message);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::{Condvar, Mutex};
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
