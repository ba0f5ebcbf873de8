//! Closing a C handle, and the one thread that closes handles for callers that must not.
//!
//! `zookeeper_close` joins the C client's IO and completion threads. So it must not run
//! on the completion thread (where a waker may drop the last clone of a handle or close
//! one), and nothing it waits for may wait for it: its final sweep runs wakers, and a
//! waker may close another clone on the same thread. Such closes are handed to the
//! closer thread, one per process, started with the first handle (so that a close never
//! depends on a thread spawn that could fail at that moment).

use crate::context::{self, SweepReason};
use crate::error::{Error, Result};
use crate::handle::{HandleSlot, RawHandle};
use crate::reply::{Reply, ReplySlot};
use crate::security::Keepalive;
use crate::session::Session;
use crossbeam_channel::Sender;
use std::cell::Cell;
use std::sync::{Arc, OnceLock};
use zookeeper_mt_sys as sys;

/// A close handed to the closer thread: what `close_inner` would have used.
pub(crate) struct Job {
    pub(crate) slot: HandleSlot,
    pub(crate) session: Arc<Session>,
    /// The `Arc<Session>` leaked to C at init, as an address (`*const` is not `Send`).
    pub(crate) session_context: usize,
    pub(crate) client: u64,
    /// What C references for TLS/SASL: dropped only once the handle is closed.
    pub(crate) keepalive: Arc<Keepalive>,
    /// Told the outcome once the close has finished (`close_async`).
    pub(crate) done: Option<Arc<ReplySlot>>,
}

static CLOSER: OnceLock<Sender<Job>> = OnceLock::new();

thread_local! {
    static CLOSING_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Starts the closer thread if it is not running yet. Called before a handle exists, so
/// a failed spawn fails `connect`, never a later close.
pub(crate) fn start() -> Result<()> {
    if CLOSER.get().is_some() {
        return Ok(());
    }
    let (sender, receiver) = crossbeam_channel::unbounded::<Job>();
    let spawned = std::thread::Builder::new()
        .name("zookeeper-closer".into())
        .spawn(move || {
            for job in receiver {
                // A waker run by the final sweep is user code: a panic there must not
                // end the thread every later handed-off close depends on.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(job)));
            }
        });
    match spawned {
        // Two first connects may race here: the loser's thread ends when its sender drops.
        Ok(_) => {
            let _ = CLOSER.set(sender);
            Ok(())
        }
        Err(_) => Err(Error::SystemError),
    }
}

/// Hands a close to the closer thread; never blocks.
pub(crate) fn hand_off(job: Job) {
    match CLOSER.get() {
        Some(closer) => {
            // The thread never ends while the process runs (the sender lives in a static).
            let _ = closer.send(job);
        }
        // Unreachable: a handle exists only after `start` succeeded.
        None => log::error!("zookeeper-mt: no closer thread; handle left open"),
    }
}

fn run(job: Job) {
    let taken = job.slot.take();
    let rc = match taken {
        Some(handle) => {
            let result = finish_close(
                handle,
                &job.session,
                job.session_context as *const Session,
                job.client,
            );
            if let Err(error) = &result {
                log::debug!("zookeeper-mt: close on the closer thread: {error}");
            }
            result
                .err()
                .and_then(|error| error.code())
                .unwrap_or(sys::ZOK)
        }
        None => {
            // Closed or being closed elsewhere (a blocking close on another thread, which
            // waits on nothing of this thread): report once that close is done.
            if job.done.is_some() {
                job.session.wait_closed();
            }
            sys::ZOK
        }
    };
    // What C referenced for TLS/SASL goes only once the handle is closed.
    drop(job.keepalive);
    if let Some(done) = job.done {
        done.fulfill(Ok(Reply {
            rc,
            payload: Default::default(),
        }));
    }
}

/// Whether this thread is inside [`finish_close`] (its final sweep runs wakers).
pub(crate) fn is_closing_here() -> bool {
    CLOSING_HERE.with(Cell::get)
}

/// Closes `handle`, already taken out of its slot, then frees what is left of it.
/// Runs on neither C thread and with no lock held.
pub(crate) fn finish_close(
    handle: RawHandle,
    session: &Session,
    session_context: *const Session,
    client: u64,
) -> Result<()> {
    let _closing = ClosingHere::enter();
    // SAFETY: the handle was taken out of its slot, so no other call can use it; this is
    // not a C thread (callers on one hand the close off), so close joins both C threads.
    let rc = unsafe { sys::zookeeper_close(handle.0.as_ptr()) };
    // The C threads are joined: nothing can call back any more. Free what is left.
    context::sweep(client, SweepReason::Closed);
    session.on_state(crate::types::SessionState::Closed);
    session.close_subscribers();
    session.mark_closed();
    // SAFETY: the Arc leaked at init; C will never read it again; reclaimed exactly once
    // (the handle it belongs to was taken out of its slot once).
    drop(unsafe { Arc::from_raw(session_context) });
    Error::check(rc)
}

/// Marks this thread as closing until dropped (also when a waker panics).
struct ClosingHere {
    outer: bool,
}

impl ClosingHere {
    fn enter() -> ClosingHere {
        ClosingHere {
            outer: CLOSING_HERE.with(|flag| flag.replace(true)),
        }
    }
}

impl Drop for ClosingHere {
    fn drop(&mut self) {
        CLOSING_HERE.with(|flag| flag.set(self.outer));
    }
}
