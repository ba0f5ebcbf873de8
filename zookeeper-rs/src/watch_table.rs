//! A handle's watch state: at most one C watch registration per (path, kind), fanned out
//! here to every [`Watch`] that wants it, and released in C when the last one goes.
//!
//! Why one registration per (path, kind): C keeps one watcher object per distinct
//! (function, context) pair on a path, and calls every one of them on every session
//! event. A context per watching read therefore made C's and this binding's state grow
//! with each read until the node changed, and made each connection change cost a call
//! per read ever made. The server itself keeps one watch per path and type per session.
//!
//! Ordering. The C client activates a registration on its IO thread when a read's reply
//! arrives, removes it when an event arrives or when a server-side removal is answered,
//! and hands replies, events and removal answers to the completion thread in that same
//! order. This table changes only in that order too: a read's watch is armed by the
//! read's completion, an event fires the watches armed before it, a server-side removal
//! ends the watches armed before its answer. So a watch whose read was answered after
//! an event waits for the next event (the read has seen the new data), exactly as a
//! separate C registration would.
//!
//! A registration's context is a registry id (see `context.rs`), never reused: a late
//! call from C for a registration already released (a queued event, a session-event
//! clone) finds nothing and is ignored.

use crate::client::{with_slot, HandleSlot};
use crate::context::{self, SweepReason};
use crate::error::{Error, Result};
use crate::session::Session;
use crate::types::{EventType, SessionState, WatchedEvent, WatcherType};
use crate::watch::{self, Sink, Watch};
use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::Arc;
use zookeeper_sys as sys;

/// Which C watch table a watching read registers in; decides when C registers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WatchKind {
    /// `exists`: registered on ZOK and ZNONODE.
    Exists,
    /// `get`: registered on ZOK only.
    Data,
    /// `get_children`: registered on ZOK only.
    Children,
    /// `getconfig`: a data watch C registers on `/zookeeper/config` without the chroot,
    /// so it is kept apart from a `get` watch on the same client path.
    Config,
}

const KINDS: usize = 4;

impl WatchKind {
    fn index(self) -> usize {
        self as usize
    }

    /// Whether C registered the watch of a read answered with `rc`.
    fn registered_on(self, rc: c_int) -> bool {
        rc == sys::ZOK || (self == WatchKind::Exists && rc == sys::ZNONODE)
    }

    /// Whether `remove_watches(.., which, ..)` removes watches of this kind.
    fn matches(self, which: WatcherType) -> bool {
        match which {
            WatcherType::Any => true,
            WatcherType::Data => self != WatchKind::Children,
            WatcherType::Children => self == WatchKind::Children,
        }
    }

    fn c_type(self) -> sys::ZooWatcherType {
        match self {
            WatchKind::Children => sys::ZWATCHTYPE_CHILD,
            WatchKind::Exists | WatchKind::Data | WatchKind::Config => sys::ZWATCHTYPE_DATA,
        }
    }
}

/// What a request does to the watch state.
pub(crate) enum WatchRequest<'a> {
    /// A watching read of this kind on this path.
    Read(WatchKind, &'a str),
    /// `remove_watches` on the server (`local = false`).
    Remove(&'a str, WatcherType),
}

/// Run with a request's completion, before its caller sees the reply, or when its
/// submission fails.
pub(crate) enum WatchHook {
    /// Arms the read's watch if C registered it.
    Read {
        table: Arc<WatchTable>,
        registration: u64,
        watch: u64,
        kind: WatchKind,
    },
    /// On success, ends the watches the removal removed.
    Remove {
        table: Arc<WatchTable>,
        path: String,
        which: WatcherType,
    },
}

impl WatchHook {
    /// The request was answered (or its submission failed) with `rc`.
    pub(crate) fn on_reply(self, rc: c_int) {
        match self {
            WatchHook::Read {
                table,
                registration,
                watch,
                kind,
            } => table.on_read_reply(registration, watch, kind.registered_on(rc)),
            WatchHook::Remove { table, path, which } => {
                if rc == sys::ZOK {
                    table.removed_by_server(&path, which);
                }
            }
        }
    }
}

/// What `submit` hands to C and to its caller for one request.
pub(crate) struct Prepared {
    pub(crate) hook: Option<WatchHook>,
    /// The watcher context (NULL for a request that sets no watch).
    pub(crate) context: *mut c_void,
    pub(crate) watch: Option<Watch>,
}

/// One C registration and the watches it serves.
struct Registration {
    path: String,
    kind: WatchKind,
    /// Whether new reads on (path, kind) join it; false once `remove_watches` retired it
    /// (it stays only until the reads already sent with its context are answered).
    current: bool,
    /// Reads sent with this context whose reply has not been delivered yet.
    in_flight: usize,
    /// Whether C holds it, as far as the completion order tells: set by a registering
    /// reply, cleared by an event or a server-side removal.
    c_holds: bool,
    /// Watches whose read has not been answered yet.
    waiting: HashMap<u64, Sink>,
    /// Watches whose read registered: the next event is theirs.
    armed: HashMap<u64, Sink>,
}

impl Registration {
    fn unwanted(&self) -> bool {
        self.in_flight == 0 && self.waiting.is_empty() && self.armed.is_empty()
    }
}

#[derive(Default)]
struct Table {
    /// The current registration of each (path, kind).
    current: HashMap<String, [Option<u64>; KINDS]>,
    /// Every registration (current or retired) by its context id.
    registrations: HashMap<u64, Registration>,
    next_watch: u64,
    /// The session ended or the handle closed: no registration will ever fire.
    ended: bool,
}

/// The watch state of one handle.
pub(crate) struct WatchTable {
    client: u64,
    session: Arc<Session>,
    /// For releasing registrations in C; never keeps the session open.
    handle: HandleSlot,
    table: Mutex<Table>,
}

/// Events to send once the table lock is released (sending runs wakers).
type Deliveries = Vec<(Sink, WatchedEvent)>;

fn deliver(deliveries: Deliveries) {
    for (sink, event) in deliveries {
        sink.send(event);
    }
}

impl WatchTable {
    pub(crate) fn new(client: u64, session: Arc<Session>, handle: HandleSlot) -> Arc<WatchTable> {
        Arc::new(WatchTable {
            client,
            session,
            handle,
            table: Mutex::new(Table::default()),
        })
    }

    /// Registry key of the handle this table belongs to.
    pub(crate) fn client(&self) -> u64 {
        self.client
    }

    /// Sets up the watch state for a request about to be sent (called with the handle's
    /// read lock held, so close cannot come in between).
    pub(crate) fn prepare(self: &Arc<Self>, request: Option<WatchRequest<'_>>) -> Result<Prepared> {
        let (kind, path) = match request {
            None => {
                return Ok(Prepared {
                    hook: None,
                    context: ptr::null_mut(),
                    watch: None,
                })
            }
            Some(WatchRequest::Remove(path, which)) => {
                return Ok(Prepared {
                    hook: Some(WatchHook::Remove {
                        table: Arc::clone(self),
                        path: path.to_string(),
                        which,
                    }),
                    context: ptr::null_mut(),
                    watch: None,
                })
            }
            Some(WatchRequest::Read(kind, path)) => (kind, path),
        };
        let mut table = self.table.lock();
        if table.ended {
            return Err(self.ended_error());
        }
        let existing = table.current.get(path).and_then(|ids| ids[kind.index()]);
        let registration = match existing {
            Some(id) => id,
            None => {
                let id = context::register_watch(self.client, Arc::clone(self));
                table.current.entry(path.to_string()).or_default()[kind.index()] = Some(id);
                table.registrations.insert(
                    id,
                    Registration {
                        path: path.to_string(),
                        kind,
                        current: true,
                        in_flight: 0,
                        c_holds: false,
                        waiting: HashMap::new(),
                        armed: HashMap::new(),
                    },
                );
                id
            }
        };
        table.next_watch += 1;
        let watch = table.next_watch;
        let (sink, receiver, waker) = watch::channel();
        let entry = table
            .registrations
            .get_mut(&registration)
            .ok_or(Error::SystemError)?;
        entry.in_flight += 1;
        entry.waiting.insert(watch, sink);
        Ok(Prepared {
            hook: Some(WatchHook::Read {
                table: Arc::clone(self),
                registration,
                watch,
                kind,
            }),
            context: context::id_to_ptr(registration),
            watch: Some(Watch::new(
                receiver,
                waker,
                Arc::clone(self),
                registration,
                watch,
                path,
                kind,
            )),
        })
    }

    fn ended_error(&self) -> Error {
        match self.session.state() {
            SessionState::Expired => Error::SessionExpired,
            SessionState::AuthFailed => Error::AuthFailed,
            _ => Error::Closed,
        }
    }

    /// A watching read's reply was delivered; `registered`: C registered its watch.
    fn on_read_reply(&self, registration: u64, watch: u64, registered: bool) {
        let mut table = self.table.lock();
        let Some(entry) = table.registrations.get_mut(&registration) else {
            return; // ended
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        // Not registered: the read failed and its caller gets the error, never the
        // `Watch` (dropped unseen), so the sink can go without a wake.
        let sink = entry.waiting.remove(&watch);
        if registered {
            entry.c_holds = true;
            if let Some(sink) = sink {
                entry.armed.insert(watch, sink);
            }
        }
        self.settle(&mut table, registration);
    }

    /// C called registration `id` with a node event: every armed watch gets it.
    pub(crate) fn on_event(&self, id: u64, event_type: EventType, state: SessionState) {
        let mut deliveries = Deliveries::new();
        {
            let mut table = self.table.lock();
            let Some(entry) = table.registrations.get_mut(&id) else {
                return;
            };
            // C removed it before queueing the event.
            entry.c_holds = false;
            let event = WatchedEvent {
                event_type,
                state,
                path: entry.path.clone(),
            };
            deliveries.extend(entry.armed.drain().map(|(_, s)| (s, event.clone())));
            self.settle(&mut table, id);
        }
        deliver(deliveries);
    }

    /// A path watcher saw the session end. C calls path watchers before the global
    /// watcher: record the state first, so that a caller woken by a watch already reads
    /// it from `state()`, then end everything as the global watcher would.
    pub(crate) fn session_ended(&self, state: SessionState) {
        self.session.on_state(state);
        context::sweep(self.client, SweepReason::Terminal(state));
    }

    /// A `Watch` was dropped.
    pub(crate) fn drop_watch(&self, registration: u64, watch: u64) {
        let mut table = self.table.lock();
        let Some(entry) = table.registrations.get_mut(&registration) else {
            return;
        };
        // The watch's own sink: nobody else waits on it.
        if entry.armed.remove(&watch).is_none() && entry.waiting.remove(&watch).is_none() {
            return;
        }
        self.settle(&mut table, registration);
    }

    /// `remove_watch`: ends one watch with `NotWatching`; `NoWatcher` if it already fired
    /// or was removed.
    pub(crate) fn remove_one(&self, registration: u64, watch: u64) -> Result<()> {
        let state = self.session.state();
        let delivery = {
            let mut table = self.table.lock();
            let entry = table
                .registrations
                .get_mut(&registration)
                .ok_or(Error::NoWatcher)?;
            let sink = entry
                .armed
                .remove(&watch)
                .or_else(|| entry.waiting.remove(&watch))
                .ok_or(Error::NoWatcher)?;
            let event = not_watching(state, &entry.path);
            self.settle(&mut table, registration);
            (sink, event)
        };
        deliver(vec![delivery]);
        Ok(())
    }

    /// `remove_watches(.., local = true)` has removed every C registration on `path`
    /// matching `which`: every watch there ends with `NotWatching`, also those whose read
    /// is still in flight (C may already have registered and removed theirs).
    pub(crate) fn retire(&self, path: &str, which: WatcherType) {
        let state = self.session.state();
        let mut deliveries = Deliveries::new();
        {
            let mut table = self.table.lock();
            let mut ids = Vec::new();
            if let Some(slots) = table.current.get_mut(path) {
                for kind in [
                    WatchKind::Exists,
                    WatchKind::Data,
                    WatchKind::Children,
                    WatchKind::Config,
                ] {
                    if kind.matches(which) {
                        ids.extend(slots[kind.index()].take());
                    }
                }
                if slots.iter().all(Option::is_none) {
                    table.current.remove(path);
                }
            }
            for id in ids {
                let Some(entry) = table.registrations.get_mut(&id) else {
                    continue;
                };
                entry.current = false;
                let event = not_watching(state, &entry.path);
                let ended = entry.armed.drain().chain(entry.waiting.drain());
                deliveries.extend(ended.map(|(_, s)| (s, event.clone())));
                // A reply activated between that removal and now registered it again.
                self.remove_in_c(id, entry);
                entry.c_holds = false;
                // Reads still in flight may register it again: it stays until answered.
                self.settle(&mut table, id);
            }
        }
        deliver(deliveries);
    }

    /// A `remove_watches(.., local = false)` on `path` was answered with success: C
    /// removed every registration there that was active when the answer arrived, i.e.
    /// those whose watches were armed before this completion.
    fn removed_by_server(&self, path: &str, which: WatcherType) {
        let state = self.session.state();
        let mut deliveries = Deliveries::new();
        {
            let mut table = self.table.lock();
            let ids: Vec<u64> = match table.current.get(path) {
                Some(slots) => slots.iter().flatten().copied().collect(),
                None => Vec::new(),
            };
            for id in ids {
                let Some(entry) = table.registrations.get_mut(&id) else {
                    continue;
                };
                if !entry.kind.matches(which) {
                    continue;
                }
                entry.c_holds = false;
                let event = not_watching(state, &entry.path);
                deliveries.extend(entry.armed.drain().map(|(_, s)| (s, event.clone())));
                self.settle(&mut table, id);
            }
        }
        deliver(deliveries);
    }

    /// The session ended (`Terminal`) or the handle closed: every watch gets its final
    /// event (or, at close, its channel ends) and no registration remains.
    pub(crate) fn end(&self, reason: SweepReason) {
        let registrations = {
            let mut table = self.table.lock();
            if table.ended {
                return;
            }
            table.ended = true;
            table.current.clear();
            let registrations: Vec<Registration> = table
                .registrations
                .drain()
                .map(|(id, r)| {
                    context::forget(id);
                    r
                })
                .collect();
            registrations
        };
        let sinks = registrations
            .into_iter()
            .flat_map(|entry| entry.armed.into_values().chain(entry.waiting.into_values()));
        match reason {
            SweepReason::Terminal(state) => {
                let event = WatchedEvent {
                    event_type: EventType::Session,
                    state,
                    path: String::new(),
                };
                for sink in sinks {
                    sink.send(event.clone());
                }
            }
            // At close: waiting on them returns `Closed`.
            SweepReason::Closed => sinks.for_each(Sink::close),
        }
    }

    /// Frees registration `id` once nothing wants it: releases it in C if C holds it.
    /// A current registration C will not release (see below) stays, idle, and serves
    /// the next read on its path and kind: so there is never more than one per key.
    fn settle(&self, table: &mut MutexGuard<'_, Table>, id: u64) {
        let Some(entry) = table.registrations.get_mut(&id) else {
            return;
        };
        if !entry.unwanted() {
            return;
        }
        if entry.c_holds {
            let removed = self.remove_in_c(id, entry) == Some(sys::ZOK);
            // Not removed: an event for it is already on its way (it frees it), or the
            // handle is closing (close frees it), or C keeps it under another path (the
            // config node under a chroot). Retired ones go: nothing can reuse them.
            if !removed && entry.current {
                return;
            }
            entry.c_holds = false;
        }
        let entry = table.registrations.remove(&id);
        if let Some(entry) = entry {
            if entry.current {
                if let Some(slots) = table.current.get_mut(&entry.path) {
                    if slots[entry.kind.index()] == Some(id) {
                        slots[entry.kind.index()] = None;
                    }
                    if slots.iter().all(Option::is_none) {
                        table.current.remove(&entry.path);
                    }
                }
            }
        }
        context::forget(id);
    }

    /// Removes registration `id` from C's tables (`zoo_remove_watches` with `local = 1`,
    /// purely local: C takes its watcher lock, unlinks the matching watcher object and
    /// signals its own completion before waiting on it, so it never blocks). `None` if
    /// the handle is closing or closed.
    ///
    /// Called with the table lock held, so no read can join or re-create the
    /// registration in between; C never calls back into this table while it holds its
    /// watcher lock, so the lock order (table, then C) cannot invert.
    fn remove_in_c(&self, id: u64, entry: &Registration) -> Option<c_int> {
        let path = match entry.kind {
            WatchKind::Config => CString::new("/zookeeper/config"),
            _ => CString::new(entry.path.as_str()),
        }
        .ok()?;
        with_slot(&self.handle, |zh| {
            // SAFETY: `with_slot` holds the handle's read lock, so `zh` is live and close
            // waits; the path is NUL-terminated and valid for the call; the watcher and
            // context identify exactly this registration (contexts are never reused).
            unsafe {
                sys::zoo_remove_watches(
                    zh,
                    path.as_ptr(),
                    entry.kind.c_type(),
                    Some(context::path_watcher),
                    context::id_to_ptr(id),
                    1,
                )
            }
        })
    }
}

fn not_watching(state: SessionState, path: &str) -> WatchedEvent {
    WatchedEvent {
        event_type: EventType::NotWatching,
        state,
        path: path.to_string(),
    }
}
