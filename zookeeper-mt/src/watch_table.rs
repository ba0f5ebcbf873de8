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
//! A registration's context names this table, a slot of its `registrations` and the
//! generation it was made in (see `context::watch_context`): a late call from C for a
//! registration already released (a queued event, a session-event clone) finds nothing,
//! or a newer registration of another generation, and is ignored.
//!
//! Memory: a registration is one allocation (its state, the path, a first watch inline)
//! plus a slot here and an entry in `current`; both shrink back after a peak.

use crate::context::{self, SweepReason};
use crate::error::{Error, Result};
use crate::handle::{with_slot, HandleSlot};
use crate::session::Session;
use crate::types::{EventType, SessionState, WatcherType};
use crate::watch::{Deliveries, Outcome, RegState, Registration, Watch};
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::HashSet;
use std::ffi::CString;
use std::hash::{Hash, Hasher};
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::{Arc, Weak};
use zookeeper_mt_sys as sys;

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
const ALL_KINDS: [WatchKind; KINDS] = [
    WatchKind::Exists,
    WatchKind::Data,
    WatchKind::Children,
    WatchKind::Config,
];

impl WatchKind {
    fn index(self) -> usize {
        self as usize
    }

    /// The kind a registration context encodes (in the two low bits of its tag).
    pub(crate) fn of_context(id: u64) -> WatchKind {
        ALL_KINDS[usize::from(context::split_watch_context(id).1) % KINDS]
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
        registration: Arc<Registration>,
        watch: u32,
        /// The read's number in the registration: only this read's reply settles the slot.
        read: u32,
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
                read,
            } => {
                let registered = registration.kind().registered_on(rc);
                table.on_read_reply(&registration, watch, read, registered);
            }
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

impl Prepared {
    /// What a request that sets no watch and removes none hands C.
    pub(crate) fn none() -> Prepared {
        Prepared {
            hook: None,
            context: ptr::null_mut(),
            watch: None,
        }
    }
}

/// A current registration, found by its path (one set per kind).
struct Current(Arc<Registration>);

impl Hash for Current {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.path.hash(state);
    }
}

impl PartialEq for Current {
    fn eq(&self, other: &Current) -> bool {
        self.0.path == other.0.path
    }
}

impl Eq for Current {}

impl Borrow<str> for Current {
    fn borrow(&self) -> &str {
        &self.0.path
    }
}

// `Current` is hashed by its registration's path, which never changes: the mutex inside
// does not touch the key (clippy's `mutable_key_type` cannot see that).
#[derive(Default)]
struct Table {
    /// Every registration (current or retired) by the slot its context names.
    registrations: Vec<Option<Arc<Registration>>>,
    /// Slots to reuse (may name slots since trimmed or reused: checked when taken).
    free: Vec<u32>,
    live: usize,
    generation: u16,
    /// The current registration of each (path, kind).
    current: [HashSet<Current>; KINDS],
    /// The session ended or the handle closed: no registration will ever fire.
    ended: bool,
}

#[allow(clippy::mutable_key_type)]
impl Table {
    /// A slot for a new registration, and the generation to tag its context with.
    fn allocate(&mut self) -> (u32, u16) {
        self.generation = self.generation.wrapping_add(1);
        self.live += 1;
        while let Some(slot) = self.free.pop() {
            if self
                .registrations
                .get(slot as usize)
                .is_some_and(Option::is_none)
            {
                return (slot, self.generation);
            }
        }
        let slots = &mut self.registrations;
        if slots.len() == slots.capacity() {
            // Grow by a quarter, not double: at most 25 % stays unused at a peak.
            slots.reserve_exact((slots.len() / 4).max(16));
        }
        slots.push(None);
        (slots.len() as u32 - 1, self.generation)
    }

    fn get(&self, id: u64) -> Option<&Arc<Registration>> {
        let (_, _, slot) = context::split_watch_context(id);
        self.registrations
            .get(slot as usize)?
            .as_ref()
            .filter(|r| r.context == id)
    }

    /// Forgets registration `reg` (released or ended), and gives memory back after a
    /// peak.
    fn unlist(&mut self, reg: &Arc<Registration>, state: &mut RegState) {
        state.listed = false;
        let (_, _, slot) = context::split_watch_context(reg.context);
        if let Some(entry) = self.registrations.get_mut(slot as usize) {
            if entry.as_ref().is_some_and(|r| Arc::ptr_eq(r, reg)) {
                *entry = None;
                self.live -= 1;
                self.free.push(slot);
            }
        }
        if state.current {
            let set = &mut self.current[reg.kind().index()];
            if set.get(&*reg.path).is_some_and(|c| Arc::ptr_eq(&c.0, reg)) {
                set.remove(&*reg.path);
                shrink_set(set);
            }
        }
        self.trim();
    }

    fn trim(&mut self) {
        let slots = &mut self.registrations;
        while matches!(slots.last(), Some(None)) {
            slots.pop();
        }
        if slots.capacity() > KEEP && slots.len() < slots.capacity() / 4 {
            slots.shrink_to(slots.len() * 2);
        }
        // Rebuilt when mostly stale, so the work is paid for by the frees it drops.
        let vacant = slots.len() - self.live;
        if self.free.len() > 2 * vacant + 16 {
            self.free
                .retain(|&slot| slots.get(slot as usize).is_some_and(Option::is_none));
            // Lowest last: reused first, so the slab's tail empties and can be trimmed.
            self.free.sort_unstable_by(|a, b| b.cmp(a));
            self.free.dedup();
            self.free.shrink_to(self.free.len() * 2);
        }
    }
}

/// Room the slab and each set keep however empty they get: a handle that arms and drops
/// a watch at a time then allocates nothing per watch for them.
const KEEP: usize = 32;

#[allow(clippy::mutable_key_type)]
fn shrink_set(set: &mut HashSet<Current>) {
    if set.capacity() > KEEP && set.len() < set.capacity() / 4 {
        set.shrink_to(set.len() * 2);
    }
}

/// The watch state of one handle.
pub(crate) struct WatchTable {
    client: u64,
    /// This table's number in C contexts (see `context::watch_context`).
    number: u32,
    session: Arc<Session>,
    /// For releasing registrations in C; never keeps the session open.
    handle: HandleSlot,
    table: Mutex<Table>,
}

impl WatchTable {
    pub(crate) fn new(client: u64, session: Arc<Session>, handle: HandleSlot) -> Arc<WatchTable> {
        Arc::new_cyclic(|me: &Weak<WatchTable>| WatchTable {
            client,
            number: context::register_table(client, me.clone()),
            session,
            handle,
            table: Mutex::new(Table::default()),
        })
    }

    /// Registry key of the handle this table belongs to.
    pub(crate) fn client(&self) -> u64 {
        self.client
    }

    /// Registrations held (each is one live context).
    pub(crate) fn live(&self) -> usize {
        self.table.lock().live
    }

    /// Sets up the watch state for a request about to be sent (called with the handle's
    /// read lock held, so close cannot come in between).
    pub(crate) fn prepare(self: &Arc<Self>, request: Option<WatchRequest<'_>>) -> Result<Prepared> {
        let (kind, path) = match request {
            None => return Ok(Prepared::none()),
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
        let existing = table.current[kind.index()]
            .get(path)
            .map(|c| Arc::clone(&c.0));
        let registration = match existing {
            Some(registration) => registration,
            None => {
                let (slot, generation) = table.allocate();
                let Some(id) = context::watch_context(self.number, generation, kind.index(), slot)
                else {
                    table.live -= 1;
                    table.free.push(slot);
                    return Err(Error::SystemError);
                };
                let registration = Arc::new(Registration::new(id, path));
                table.registrations[slot as usize] = Some(Arc::clone(&registration));
                table.current[kind.index()].insert(Current(Arc::clone(&registration)));
                registration
            }
        };
        let (watch, read) = {
            let mut state = registration.state.lock();
            state.in_flight += 1;
            state.add()
        };
        drop(table);
        Ok(Prepared {
            hook: Some(WatchHook::Read {
                table: Arc::clone(self),
                registration: Arc::clone(&registration),
                watch,
                read,
            }),
            context: context::id_to_ptr(registration.context),
            watch: Some(Watch::new(Arc::clone(self), registration, watch)),
        })
    }

    fn ended_error(&self) -> Error {
        match self.session.state() {
            SessionState::Expired => Error::SessionExpired,
            SessionState::AuthFailed => Error::AuthFailed,
            _ => Error::Closed,
        }
    }

    /// Watching read `read`'s reply was delivered; `registered`: C registered its watch.
    /// A registration made for a read whose watch was dropped is kept as C's (`c_holds`)
    /// and fires no watch armed later; it is released once nothing waits on it.
    fn on_read_reply(&self, reg: &Arc<Registration>, watch: u32, read: u32, registered: bool) {
        let mut deliveries = Deliveries::default();
        {
            let mut table = self.table.lock();
            let mut state = reg.state.lock();
            if !state.listed {
                return; // ended
            }
            state.in_flight = state.in_flight.saturating_sub(1);
            if registered {
                state.c_holds = true;
            }
            state.answered(watch, read, registered, &mut deliveries);
            self.settle(&mut table, reg, &mut state);
        }
        deliveries.run();
    }

    /// C called registration `id` with a node event: every armed watch gets it.
    pub(crate) fn on_event(&self, id: u64, event_type: EventType, state: SessionState) {
        let mut deliveries = Deliveries::default();
        {
            let mut table = self.table.lock();
            let Some(reg) = table.get(id).cloned() else {
                return;
            };
            let mut reg_state = reg.state.lock();
            // C removed it before queueing the event.
            reg_state.c_holds = false;
            let outcome = Outcome::Event(event_type, state);
            reg_state.end_all(true, outcome, &reg.path, &mut deliveries);
            self.settle(&mut table, &reg, &mut reg_state);
        }
        deliveries.run();
    }

    /// A path watcher saw the session end. C calls path watchers before the global
    /// watcher: record the state first, so that a caller woken by a watch already reads
    /// it from `state()`, then end everything as the global watcher would.
    pub(crate) fn session_ended(&self, state: SessionState) {
        self.session.on_state(state);
        context::sweep(self.client, SweepReason::Terminal(state));
    }

    /// A `Watch` was dropped.
    pub(crate) fn drop_watch(&self, reg: &Arc<Registration>, watch: u32) {
        let waiters = {
            let mut table = self.table.lock();
            let mut state = reg.state.lock();
            let waiters = state.vacate(watch);
            if state.listed {
                self.settle(&mut table, reg, &mut state);
            }
            waiters
        };
        // Dropped outside the locks: it may hold a waker.
        drop(waiters);
    }

    /// `remove_watch`: ends one watch with `NotWatching`; `NoWatcher` if it already fired
    /// or was removed.
    pub(crate) fn remove_one(&self, registration: u64, watch: u32) -> Result<()> {
        let outcome = Outcome::Event(EventType::NotWatching, self.session.state());
        let mut deliveries = Deliveries::default();
        {
            let mut table = self.table.lock();
            let reg = table.get(registration).cloned().ok_or(Error::NoWatcher)?;
            let mut state = reg.state.lock();
            if !state.end(watch, outcome, &reg.path, &mut deliveries) {
                return Err(Error::NoWatcher);
            }
            self.settle(&mut table, &reg, &mut state);
        }
        deliveries.run();
        Ok(())
    }

    /// `remove_watches(.., local = true)` has removed every C registration on `path`
    /// matching `which`: every watch there ends with `NotWatching`, also those whose read
    /// is still in flight (C may already have registered and removed theirs).
    #[allow(clippy::mutable_key_type)]
    pub(crate) fn retire(&self, path: &str, which: WatcherType) {
        let outcome = Outcome::Event(EventType::NotWatching, self.session.state());
        let mut deliveries = Deliveries::default();
        {
            let mut table = self.table.lock();
            for kind in ALL_KINDS.into_iter().filter(|k| k.matches(which)) {
                let set = &mut table.current[kind.index()];
                let Some(Current(reg)) = set.take(path) else {
                    continue;
                };
                shrink_set(set);
                let mut state = reg.state.lock();
                state.current = false;
                state.end_all(false, outcome, &reg.path, &mut deliveries);
                // A reply activated between that removal and now registered it again.
                self.remove_in_c(&reg);
                state.c_holds = false;
                // Reads still in flight may register it again: it stays until answered.
                self.settle(&mut table, &reg, &mut state);
            }
        }
        deliveries.run();
    }

    /// A `remove_watches(.., local = false)` on `path` was answered with success: C
    /// removed every registration there that was active when the answer arrived, i.e.
    /// those whose watches were armed before this completion.
    fn removed_by_server(&self, path: &str, which: WatcherType) {
        let outcome = Outcome::Event(EventType::NotWatching, self.session.state());
        let mut deliveries = Deliveries::default();
        {
            let mut table = self.table.lock();
            for kind in ALL_KINDS.into_iter().filter(|k| k.matches(which)) {
                let Some(reg) = table.current[kind.index()]
                    .get(path)
                    .map(|c| Arc::clone(&c.0))
                else {
                    continue;
                };
                let mut state = reg.state.lock();
                state.c_holds = false;
                state.end_all(true, outcome, &reg.path, &mut deliveries);
                self.settle(&mut table, &reg, &mut state);
            }
        }
        deliveries.run();
    }

    /// The session ended (`Terminal`) or the handle closed: every watch gets its final
    /// event (or, at close, ends: waiting on it returns `Closed`) and no registration
    /// remains.
    pub(crate) fn end(&self, reason: SweepReason) {
        let outcome = match reason {
            SweepReason::Terminal(state) => Outcome::Event(EventType::Session, state),
            SweepReason::Closed => Outcome::Closed,
        };
        let mut deliveries = Deliveries::default();
        let registrations = {
            let mut table = self.table.lock();
            if table.ended {
                return;
            }
            table.ended = true;
            let registrations = std::mem::take(&mut table.registrations);
            *table = Table {
                ended: true,
                ..Table::default()
            };
            for reg in registrations.iter().flatten() {
                let mut state = reg.state.lock();
                state.listed = false;
                state.end_all(false, outcome, &reg.path, &mut deliveries);
            }
            registrations
        };
        deliveries.run();
        drop(registrations);
    }

    /// Frees registration `reg` once nothing wants it: releases it in C if C holds it.
    /// A current registration C will not release (see below) stays, idle, and serves
    /// the next read on its path and kind: so there is never more than one per key.
    fn settle(&self, table: &mut Table, reg: &Arc<Registration>, state: &mut RegState) {
        if !state.listed || !state.unwanted() {
            return;
        }
        if state.c_holds {
            let removed = self.remove_in_c(reg) == Some(sys::ZOK);
            // Not removed: an event for it is already on its way (it frees it), or the
            // handle is closing (close frees it), or C keeps it under another path (the
            // config node under a chroot). Retired ones go: nothing can reuse them.
            if !removed && state.current {
                return;
            }
            state.c_holds = false;
        }
        table.unlist(reg, state);
    }

    /// Removes registration `reg` from C's tables (`zoo_remove_watches` with `local = 1`,
    /// purely local: C takes its watcher lock, unlinks the matching watcher object and
    /// signals its own completion before waiting on it, so it never blocks). `None` if
    /// the handle is closing or closed.
    ///
    /// Called with the table lock held, so no read can join or re-create the
    /// registration in between; C never calls back into this table while it holds its
    /// watcher lock, so the lock order (table, then C) cannot invert.
    fn remove_in_c(&self, reg: &Registration) -> Option<c_int> {
        let kind = reg.kind();
        let path = match kind {
            WatchKind::Config => CString::new("/zookeeper/config"),
            _ => CString::new(&*reg.path),
        }
        .ok()?;
        with_slot(&self.handle, |zh| {
            // SAFETY: `with_slot` holds the handle's read lock, so `zh` is live and close
            // waits; the path is NUL-terminated and valid for the call; the watcher and
            // context identify exactly this registration (its generation is in the context).
            unsafe {
                sys::zoo_remove_watches(
                    zh,
                    path.as_ptr(),
                    kind.c_type(),
                    Some(context::path_watcher),
                    context::id_to_ptr(reg.context),
                    1,
                )
            }
        })
    }
}
