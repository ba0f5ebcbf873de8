//! The receiving end of a one-shot watch, and the registration state it shares with the
//! watch table.
//!
//! Memory. A watch is a slot of a few bytes inside its registration (one per path and
//! kind, shared with every watch there), not a channel of its own: the outcome is packed
//! in the slot, and whatever waits for it (a task's waker, parked threads, the channel
//! behind [`Watch::receiver`]) is allocated only once somebody waits. The channel is
//! created the first time `receiver()` is asked for; an outcome that came before is put
//! into it then. The path is stored once, in the registration.

use crate::error::{Error, Result};
use crate::timeout::Timeout;
use crate::types::{EventType, SessionState, WatchedEvent};
use crate::watch_table::{WatchKind, WatchTable};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

/// One C registration (a path and kind) and the watches it serves. Shared by the table
/// (while registered) and by its watches (until each is dropped: they read their
/// outcome here).
pub(crate) struct Registration {
    /// Its C context (see `context::watch_context`); encodes its kind.
    pub(crate) context: u64,
    pub(crate) path: Box<str>,
    /// Changed only with the table lock held too (lock order: table, then this).
    pub(crate) state: Mutex<RegState>,
}

impl Registration {
    pub(crate) fn new(context: u64, path: &str) -> Registration {
        Registration {
            context,
            path: path.into(),
            state: Mutex::new(RegState {
                slots: Slots::None,
                free: NONE,
                pending: 0,
                in_flight: 0,
                current: true,
                c_holds: false,
                listed: true,
                reads: 0,
            }),
        }
    }

    pub(crate) fn kind(&self) -> WatchKind {
        WatchKind::of_context(self.context)
    }
}

const NONE: u32 = u32::MAX;

pub(crate) struct RegState {
    slots: Slots,
    /// Head of the list of vacant slots (threaded through them).
    free: u32,
    /// Slots waiting for their read's reply or armed.
    pending: u32,
    /// Reads sent with this context whose reply has not been delivered yet.
    pub(crate) in_flight: u32,
    /// Whether new reads on (path, kind) join it; false once `remove_watches` retired it
    /// (it stays only until the reads already sent with its context are answered).
    pub(crate) current: bool,
    /// Whether C holds it, as far as the completion order tells: set by a registering
    /// reply, cleared by an event or a server-side removal.
    pub(crate) c_holds: bool,
    /// Whether the table still lists it (false once released or ended).
    pub(crate) listed: bool,
    /// Numbers the reads that join it (see [`Phase::Waiting`]).
    reads: u32,
}

/// Most registrations serve one watch: it is stored inline.
enum Slots {
    None,
    One(Slot),
    Many(Vec<Slot>),
}

struct Slot {
    phase: Phase,
    /// Who waits; allocated by the first wait, poll or `receiver()` call.
    notify: Option<Box<Notify>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Vacant(u32),
    /// The read with this number is in flight. Only its reply may settle the slot: a
    /// dropped watch's slot is reused at once, and the reply of the read that made the
    /// dropped watch (still in flight) must then leave the newer watch alone. A number
    /// could repeat only after 2^32 reads joined the registration while one stayed
    /// unanswered; replies come in order and at most `MAX_IN_FLIGHT` requests are in
    /// flight, so all but a few thousand of those would have to fail at submission.
    Waiting(u32),
    /// The read registered: the next event is this watch's.
    Armed,
    /// The outcome, not yet taken (event type and state, packed).
    Fired(i16, i16),
    /// The outcome went into the channel.
    InChannel,
    /// The outcome was taken; later waits get `Closed`, as a drained channel would.
    Taken,
    /// Ended without an event (the handle closed, or its read failed).
    Closed,
}

impl Phase {
    fn pending(self) -> bool {
        matches!(self, Phase::Waiting(_) | Phase::Armed)
    }
}

#[derive(Default)]
pub(crate) struct Notify {
    task: Option<Waker>,
    threads: Vec<Thread>,
    sender: Option<Sender<WatchedEvent>>,
}

/// How a pending watch ends.
#[derive(Clone, Copy)]
pub(crate) enum Outcome {
    Event(EventType, SessionState),
    Closed,
}

/// Wake-ups collected under the locks and run once they are released: a waker is
/// executor code (and so is dropping one).
#[derive(Default)]
pub(crate) struct Deliveries(Vec<Notify>);

impl Deliveries {
    pub(crate) fn run(self) {
        for notify in self.0 {
            let Notify { task, threads, .. } = notify;
            for thread in threads {
                thread.unpark();
            }
            if let Some(task) = task {
                task.wake();
            }
        }
    }
}

impl RegState {
    /// Whether nothing waits on the registration any more.
    pub(crate) fn unwanted(&self) -> bool {
        self.in_flight == 0 && self.pending == 0
    }

    fn slot(&mut self, index: u32) -> Option<&mut Slot> {
        match &mut self.slots {
            Slots::One(slot) if index == 0 => Some(slot),
            Slots::Many(slots) => slots.get_mut(index as usize),
            _ => None,
        }
    }

    /// A new watch, waiting for its read's reply; returns its slot and the read's number
    /// (which its reply gives back to [`answered`](Self::answered)).
    pub(crate) fn add(&mut self) -> (u32, u32) {
        let read = self.reads;
        self.reads = self.reads.wrapping_add(1);
        let slot = Slot {
            phase: Phase::Waiting(read),
            notify: None,
        };
        self.pending += 1;
        if self.free != NONE {
            let index = self.free;
            let vacant = self.slot(index).expect("the free list names vacant slots");
            let Phase::Vacant(next) = vacant.phase else {
                unreachable!("the free list names vacant slots")
            };
            *vacant = slot;
            self.free = next;
            return (index, read);
        }
        match std::mem::replace(&mut self.slots, Slots::None) {
            Slots::None => {
                self.slots = Slots::One(slot);
                (0, read)
            }
            Slots::One(first) => {
                self.slots = Slots::Many(vec![first, slot]);
                (1, read)
            }
            Slots::Many(mut slots) => {
                slots.push(slot);
                let index = slots.len() as u32 - 1;
                self.slots = Slots::Many(slots);
                (index, read)
            }
        }
    }

    /// Read `read` of watch `index` was answered: the watch is armed if C registered it.
    /// Nothing happens if the slot no longer waits for that read (the watch was removed,
    /// or dropped and its slot taken by a newer read).
    pub(crate) fn answered(
        &mut self,
        index: u32,
        read: u32,
        registered: bool,
        out: &mut Deliveries,
    ) {
        let Some(slot) = self.slot(index) else { return };
        if slot.phase != Phase::Waiting(read) {
            return;
        }
        if registered {
            slot.phase = Phase::Armed;
        } else {
            // Its caller gets the read's error and never sees the `Watch`.
            self.end(index, Outcome::Closed, "", out);
        }
    }

    /// Ends pending watch `index` with `outcome`; false if it was not pending.
    pub(crate) fn end(
        &mut self,
        index: u32,
        outcome: Outcome,
        path: &str,
        out: &mut Deliveries,
    ) -> bool {
        let Some(slot) = self.slot(index) else {
            return false;
        };
        if !slot.phase.pending() {
            return false;
        }
        slot.phase = match outcome {
            Outcome::Event(event_type, state) => {
                Phase::Fired(pack_event(event_type), pack_state(state))
            }
            Outcome::Closed => Phase::Closed,
        };
        if let Some(mut notify) = slot.notify.take() {
            if let Some(sender) = notify.sender.take() {
                // Sent here, under the lock, so a receiver that finds the watch ended
                // finds the event too (a send runs no user code and never blocks: the
                // channel holds one and gets at most one). Dropping the sender ends it.
                if let Some(event) = slot.phase.event(path) {
                    let _ = sender.try_send(event);
                    slot.phase = Phase::InChannel;
                }
            }
            out.0.push(*notify);
        }
        self.pending -= 1;
        true
    }

    /// Ends every pending watch (`armed_only`: only the armed ones) with `outcome`.
    pub(crate) fn end_all(
        &mut self,
        armed_only: bool,
        outcome: Outcome,
        path: &str,
        out: &mut Deliveries,
    ) {
        let count = match &self.slots {
            Slots::None => 0,
            Slots::One(_) => 1,
            Slots::Many(slots) => slots.len() as u32,
        };
        for index in 0..count {
            let phase = self.slot(index).map(|slot| slot.phase);
            if !armed_only || phase == Some(Phase::Armed) {
                self.end(index, outcome, path, out);
            }
        }
    }

    /// Watch `index` was dropped: its slot is free again. Returns what waited on it, to
    /// be dropped once the locks are released.
    pub(crate) fn vacate(&mut self, index: u32) -> Option<Box<Notify>> {
        let free = self.free;
        let slot = self.slot(index)?;
        let was_pending = slot.phase.pending();
        slot.phase = Phase::Vacant(free);
        let notify = slot.notify.take();
        self.free = index;
        if was_pending {
            self.pending -= 1;
        }
        notify
    }
}

impl Phase {
    /// The event of a fired watch on `path`.
    fn event(self, path: &str) -> Option<WatchedEvent> {
        let Phase::Fired(event_type, state) = self else {
            return None;
        };
        let event_type = unpack_event(event_type);
        Some(WatchedEvent {
            // A session's end reaches every watch with no path, as C sends it.
            path: if event_type == EventType::Session {
                String::new()
            } else {
                path.to_string()
            },
            event_type,
            state: unpack_state(state),
        })
    }
}

// The outcome is packed in 2 × 16 bits to keep a slot at 16 bytes: the known variants get
// codes at the bottom of the range; an unknown code outside the rest saturates.
const KNOWN: i16 = i16::MIN + 16;

fn unknown(code: i32) -> i16 {
    code.clamp(i32::from(KNOWN), i32::from(i16::MAX)) as i16
}

fn pack_event(event_type: EventType) -> i16 {
    match event_type {
        EventType::NodeCreated => i16::MIN,
        EventType::NodeDeleted => i16::MIN + 1,
        EventType::NodeDataChanged => i16::MIN + 2,
        EventType::NodeChildrenChanged => i16::MIN + 3,
        EventType::Session => i16::MIN + 4,
        EventType::NotWatching => i16::MIN + 5,
        EventType::Unknown(code) => unknown(code),
    }
}

fn unpack_event(code: i16) -> EventType {
    match i32::from(code) - i32::from(i16::MIN) {
        0 => EventType::NodeCreated,
        1 => EventType::NodeDeleted,
        2 => EventType::NodeDataChanged,
        3 => EventType::NodeChildrenChanged,
        4 => EventType::Session,
        5 => EventType::NotWatching,
        _ => EventType::Unknown(i32::from(code)),
    }
}

fn pack_state(state: SessionState) -> i16 {
    match state {
        SessionState::Connecting => i16::MIN,
        SessionState::Associating => i16::MIN + 1,
        SessionState::Connected => i16::MIN + 2,
        SessionState::ConnectedReadOnly => i16::MIN + 3,
        SessionState::Expired => i16::MIN + 4,
        SessionState::AuthFailed => i16::MIN + 5,
        SessionState::NotConnected => i16::MIN + 6,
        SessionState::Closed => i16::MIN + 7,
        SessionState::Unknown(code) => unknown(code),
    }
}

fn unpack_state(code: i16) -> SessionState {
    match i32::from(code) - i32::from(i16::MIN) {
        0 => SessionState::Connecting,
        1 => SessionState::Associating,
        2 => SessionState::Connected,
        3 => SessionState::ConnectedReadOnly,
        4 => SessionState::Expired,
        5 => SessionState::AuthFailed,
        6 => SessionState::NotConnected,
        7 => SessionState::Closed,
        _ => SessionState::Unknown(i32::from(code)),
    }
}

/// A one-shot watch set by a watching read (`exists_watch`, `get_watch`,
/// `get_children_watch`, ...). It delivers exactly one [`WatchedEvent`]:
///
/// - the node event (created, deleted, data or children changed), or
/// - `EventType::NotWatching` if the watch was removed with `remove_watches` or
///   `remove_watch`, or
/// - `EventType::Session` with state `Expired`/`AuthFailed` when the session ends for
///   good (the watch can never fire then; `state()` already says so when it arrives).
///
/// Connection loss does not consume a watch: the C client re-registers it on reconnect
/// and it fires later (watch the session stream for connection changes). If the handle
/// is closed first, waiting returns `Error::Closed`.
///
/// All the watches of a handle on one path and kind share one registration in the C
/// client (and the server keeps one watch per path and type anyway). A watch set by a
/// read whose reply came after a change waits for the next change, as the read has
/// already seen the new data. Dropping a `Watch` withdraws its interest; when the last
/// one on a path and kind goes, the C registration is released on the client (the
/// server's watch stays until it fires or `remove_watches` removes it).
///
/// A `Watch` is also a `Future` of the same outcome (`Err(Closed)` if the handle closes
/// first) for any executor: it is woken from the C completion thread.
pub struct Watch {
    pub(crate) table: Arc<WatchTable>,
    reg: Arc<Registration>,
    /// The registration's context, for `remove_watch`.
    pub(crate) registration: u64,
    /// This watch's slot in the registration.
    pub(crate) id: u32,
    receiver: OnceLock<Receiver<WatchedEvent>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("path", &self.path())
            .field("kind", &self.reg.kind())
            .field("id", &self.id)
            .finish()
    }
}

/// What a look at the slot found.
enum Look {
    Done(Result<WatchedEvent>),
    /// The outcome is in the channel.
    InChannel,
    Pending,
}

impl Watch {
    pub(crate) fn new(table: Arc<WatchTable>, reg: Arc<Registration>, id: u32) -> Watch {
        Watch {
            table,
            registration: reg.context,
            reg,
            id,
            receiver: OnceLock::new(),
        }
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.reg.path
    }

    /// Blocks until the event arrives. On the C completion thread (a waker running its
    /// task inline), which is the thread that delivers the event, it does not block: it
    /// returns the event if it is there, else fails at once.
    pub fn wait(&self) -> Result<WatchedEvent> {
        self.wait_until(None)
    }

    /// Blocks until the event arrives or `timeout` passes (`Err(Timeout)`, like every
    /// wait; the watch stays armed and can be waited for again).
    pub fn wait_timeout(&self, timeout: impl Into<Timeout>) -> Result<WatchedEvent> {
        match timeout.into().duration() {
            None => self.wait(),
            Some(timeout) => self.wait_until(Some(Instant::now() + timeout)),
        }
    }

    /// The event if it has arrived.
    pub fn try_get(&self) -> Result<Option<WatchedEvent>> {
        loop {
            if let Some(receiver) = self.receiver.get() {
                return from_channel(receiver.try_recv());
            }
            match self.look(|_| ()) {
                Look::Done(outcome) => return outcome.map(Some),
                Look::Pending => return Ok(None),
                Look::InChannel => {
                    self.receiver();
                }
            }
        }
    }

    /// The channel a blocking wait reads once the outcome is in it. Created by the first
    /// call (an outcome that came before is in it).
    fn receiver(&self) -> &Receiver<WatchedEvent> {
        self.receiver.get_or_init(|| {
            let (sender, receiver) = crossbeam_channel::bounded(1);
            let mut state = self.reg.state.lock();
            if let Some(slot) = state.slot(self.id) {
                match slot.phase {
                    phase if phase.pending() => {
                        slot.notify.get_or_insert_with(Default::default).sender = Some(sender);
                    }
                    Phase::Fired(..) => {
                        if let Some(event) = slot.phase.event(&self.reg.path) {
                            let _ = sender.try_send(event);
                        }
                        slot.phase = Phase::InChannel;
                    }
                    // Taken or closed: the channel starts ended.
                    _ => {}
                }
            }
            receiver
        })
    }

    /// Looks at the slot: takes a fired outcome; `register` is called with the slot's
    /// waiters while it is pending (under the lock, so a delivery cannot slip between).
    fn look(&self, register: impl FnOnce(&mut Notify)) -> Look {
        let mut state = self.reg.state.lock();
        let Some(slot) = state.slot(self.id) else {
            return Look::Done(Err(Error::Closed));
        };
        match slot.phase {
            Phase::Fired(..) => {
                let event = slot.phase.event(&self.reg.path);
                slot.phase = Phase::Taken;
                Look::Done(event.ok_or(Error::Closed))
            }
            Phase::InChannel => Look::InChannel,
            phase if phase.pending() => {
                register(slot.notify.get_or_insert_with(Default::default));
                Look::Pending
            }
            _ => Look::Done(Err(Error::Closed)),
        }
    }

    fn wait_until(&self, deadline: Option<Instant>) -> Result<WatchedEvent> {
        if crate::no_wait::here() {
            // The completion thread (or a closing thread) delivers the event: blocking it would wait forever.
            return match self.try_get()? {
                Some(event) => Ok(event),
                None => Err(crate::reply::COMPLETION_THREAD_WAIT),
            };
        }
        let me = thread::current();
        loop {
            if let Some(receiver) = self.receiver.get() {
                return match deadline {
                    None => receiver.recv().map_err(|_| Error::Closed),
                    Some(deadline) => match receiver.recv_deadline(deadline) {
                        Ok(event) => Ok(event),
                        Err(RecvTimeoutError::Timeout) => Err(Error::Timeout),
                        Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
                    },
                };
            }
            let look = self.look(|notify| {
                if !notify.threads.iter().any(|t| t.id() == me.id()) {
                    notify.threads.push(me.clone());
                }
            });
            match look {
                Look::Done(outcome) => return outcome,
                Look::InChannel => {
                    self.receiver();
                    continue;
                }
                Look::Pending => {}
            }
            match deadline {
                None => thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        // No longer waiting: leave the list, unless the outcome came.
                        let look = self.look(|notify| notify.threads.retain(|t| t.id() != me.id()));
                        return match look {
                            Look::Done(outcome) => outcome,
                            Look::InChannel => {
                                self.receiver().try_recv().map_err(|_| Error::Closed)
                            }
                            Look::Pending => Err(Error::Timeout),
                        };
                    }
                    thread::park_timeout(deadline - now);
                }
            }
        }
    }
}

fn from_channel(
    result: std::result::Result<WatchedEvent, TryRecvError>,
) -> Result<Option<WatchedEvent>> {
    match result {
        Ok(event) => Ok(Some(event)),
        Err(TryRecvError::Empty) => Ok(None),
        Err(TryRecvError::Disconnected) => Err(Error::Closed),
    }
}

impl Future for Watch {
    type Output = Result<WatchedEvent>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut replaced = None;
        let mut register = |notify: &mut Notify| {
            if !notify
                .task
                .as_ref()
                .is_some_and(|t| t.will_wake(cx.waker()))
            {
                // The old waker is dropped below, outside the lock.
                replaced = notify.task.replace(cx.waker().clone());
            }
        };
        let ready = loop {
            if let Some(receiver) = self.receiver.get() {
                if let Some(outcome) = from_channel(receiver.try_recv()).transpose() {
                    break Some(outcome);
                }
                // Registered under the lock while the watch is pending; a delivery sends
                // under that lock, so a second look cannot miss it.
                let look = self.look(&mut register);
                break from_channel(receiver.try_recv())
                    .transpose()
                    .or(match look {
                        Look::Pending => None,
                        _ => Some(Err(Error::Closed)),
                    });
            }
            match self.look(&mut register) {
                Look::Done(outcome) => break Some(outcome),
                Look::Pending => break None,
                Look::InChannel => {
                    self.receiver();
                }
            }
        };
        drop(replaced);
        match ready {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.table.drop_watch(&self.reg, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_survive_packing() {
        let events = [
            EventType::NodeCreated,
            EventType::NodeDeleted,
            EventType::NodeDataChanged,
            EventType::NodeChildrenChanged,
            EventType::Session,
            EventType::NotWatching,
            EventType::Unknown(999),
            EventType::Unknown(-7),
        ];
        for event in events {
            assert_eq!(unpack_event(pack_event(event)), event);
        }
        let states = [
            SessionState::Connecting,
            SessionState::Associating,
            SessionState::Connected,
            SessionState::ConnectedReadOnly,
            SessionState::Expired,
            SessionState::AuthFailed,
            SessionState::NotConnected,
            SessionState::Closed,
            SessionState::Unknown(999),
            SessionState::Unknown(i16::MAX.into()),
        ];
        for state in states {
            assert_eq!(unpack_state(pack_state(state)), state);
        }
        // Beyond 16 bits an unknown code saturates, but stays unknown.
        assert!(matches!(
            unpack_state(pack_state(SessionState::Unknown(i32::MIN))),
            SessionState::Unknown(_)
        ));
    }

    #[test]
    fn a_watch_slot_stays_small() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }
}
