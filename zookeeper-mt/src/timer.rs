//! One process-wide timer thread that wakes futures at their deadline (a connect's
//! timeout), so that a bounded async wait blocks no thread of its caller.
//!
//! Entries are keyed by a number unique to one registration: a future re-registers
//! (replacing its waker) on each poll and cancels its entry when dropped, so no waker
//! is left behind. Wakers are woken outside the lock (a waker may run executor code).

use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::task::Waker;
use std::time::Instant;

struct Timer {
    entries: Mutex<Entries>,
    changed: Condvar,
}

#[derive(Default)]
struct Entries {
    next: u64,
    by_deadline: BTreeMap<(Instant, u64), Waker>,
}

static TIMER: OnceLock<Timer> = OnceLock::new();
static STARTED: OnceLock<bool> = OnceLock::new();

/// Starts the timer thread if it is not running yet (before a handle exists, so a failed
/// spawn fails the connect, never a later wait).
pub(crate) fn start() -> Result<()> {
    let started = STARTED.get_or_init(|| {
        let timer = TIMER.get_or_init(|| Timer {
            entries: Mutex::new(Entries::default()),
            changed: Condvar::new(),
        });
        std::thread::Builder::new()
            .name("zookeeper-timer".into())
            .spawn(move || run(timer))
            .is_ok()
    });
    if *started {
        Ok(())
    } else {
        Err(Error::SystemError)
    }
}

fn run(timer: &'static Timer) {
    let mut entries = timer.entries.lock();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(entry) = entries.by_deadline.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        if !due.is_empty() {
            drop(entries);
            // A waker is user code: a panic must not end the thread.
            for waker in due {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
            }
            entries = timer.entries.lock();
            continue;
        }
        match entries.by_deadline.keys().next().map(|key| key.0) {
            Some(next) => {
                let _ = timer.changed.wait_until(&mut entries, next);
            }
            None => timer.changed.wait(&mut entries),
        }
    }
}

/// One registration: wakes its waker at `deadline`; cancelled when dropped.
pub(crate) struct Alarm {
    deadline: Instant,
    key: Option<u64>,
}

impl Alarm {
    pub(crate) fn new(deadline: Instant) -> Alarm {
        Alarm {
            deadline,
            key: None,
        }
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Arms (or re-arms) the alarm with `waker`, replacing the one given before.
    pub(crate) fn arm(&mut self, waker: &Waker) {
        let Some(timer) = TIMER.get() else {
            return; // unreachable: a handle exists only after `start` succeeded
        };
        let mut entries = timer.entries.lock();
        if let Some(key) = self.key {
            if let Some(armed) = entries.by_deadline.get_mut(&(self.deadline, key)) {
                if !armed.will_wake(waker) {
                    armed.clone_from(waker);
                }
                return;
            }
        }
        let key = entries.next;
        entries.next += 1;
        self.key = Some(key);
        let first = entries
            .by_deadline
            .keys()
            .next()
            .is_none_or(|first| self.deadline < first.0);
        entries
            .by_deadline
            .insert((self.deadline, key), waker.clone());
        drop(entries);
        if first {
            timer.changed.notify_one();
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let (Some(key), Some(timer)) = (self.key, TIMER.get()) {
            timer
                .entries
                .lock()
                .by_deadline
                .remove(&(self.deadline, key));
        }
    }
}
