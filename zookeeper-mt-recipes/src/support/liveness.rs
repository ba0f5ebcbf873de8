//! When a holder must count itself as possibly lost, from what the client knows of the
//! server's session clock: every holding guard (lock, latch, permit, lease, candidate)
//! judges itself by [`loss_deadline`], kept fresh by one keep-alive per handle.
//!
//! A server expires a session no earlier than a session timeout after the last request
//! it received (rounded up to its tick), and a request the server answered was received
//! after we submitted it: so [`ZooKeeper::earliest_expiry`] (the submit instant of the
//! latest answered request plus the session timeout) is a lower bound of any expiry, and
//! another client can take over no earlier. The C client's read timeout is no such bound:
//! it runs from the last receipt (a watch notification counts), two thirds of the
//! timeout, while the server's clock runs from the client's last send, and the C
//! client's own pings are invisible here. So while anything is held on a handle, one
//! task sends a cheap read (`exists("/")`) whenever nothing was answered for a third of
//! the session timeout: one request per handle, however many guards it holds.

use crate::runtime::timer::{sleep_at, Sleep};
use crate::runtime::until;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};
use zookeeper_mt::{Deadline, SessionClock, WeakZooKeeper, ZooKeeper};

/// What the two clocks (the server's and ours) may disagree on over a session timeout:
/// a fixed 10 ms plus 1% of the timeout (real clock rates differ by well under 0.1%).
pub(crate) fn margin(session_timeout: Duration) -> Duration {
    Duration::from_millis(10) + session_timeout / 100
}

/// The instant from which a holder on this session may have lost what it holds: the
/// earliest instant the server can expire the session, less the clock [`margin`].
/// `None` if the client has no such bound (nothing answered yet): then it is lost now.
pub(crate) fn loss_deadline(clock: &SessionClock) -> Option<Instant> {
    let timeout = clock.session_timeout()?;
    let expiry = clock.earliest_expiry()?;
    Some(expiry.checked_sub(margin(timeout)).unwrap_or(expiry))
}

/// Whether the bound has passed (or there is none).
pub(crate) fn past_deadline(clock: &SessionClock, now: Instant) -> bool {
    loss_deadline(clock).map_or(true, |at| now >= at)
}

/// Runs `check` on the timer thread at the instant it names, again and again, until it
/// names none: a loss is pushed to its receivers at its instant, whatever the driver is
/// busy with. `check` must be quick and never block (it runs among the timer's wakers);
/// it is first run here.
pub(crate) fn alarm(check: impl Fn() -> Option<Instant> + Send + Sync + 'static) {
    Arc::new(Alarm {
        sleep: Mutex::new(None),
        check: Box::new(check),
    })
    .run();
}

struct Alarm {
    /// The pending timer (keeps the alarm armed; the timer holds the alarm's waker).
    sleep: Mutex<Option<Sleep>>,
    check: Box<dyn Fn() -> Option<Instant> + Send + Sync>,
}

impl Alarm {
    fn run(self: Arc<Self>) {
        loop {
            let Some(at) = (self.check)() else {
                self.sleep.lock().take();
                return;
            };
            // Armed and stored under the lock: a wake that comes meanwhile (on the
            // timer thread) waits, then stores a later timer, never an earlier one.
            let mut slot = self.sleep.lock();
            let mut sleep = sleep_at(Some(at));
            let waker = Waker::from(Arc::clone(&self));
            let mut cx = Context::from_waker(&waker);
            if Pin::new(&mut sleep).poll(&mut cx).is_pending() {
                *slot = Some(sleep);
                return;
            }
        }
    }
}

impl Wake for Alarm {
    fn wake(self: Arc<Self>) {
        self.run();
    }
}

/// The pause after a probe that failed (connection loss) before the next.
const RETRY: Duration = Duration::from_millis(100);

/// One handle's keep-alive: how many holds it serves and whether its task runs.
struct Entry {
    holders: usize,
    running: bool,
}

static HANDLES: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

/// While alive, keeps [`loss_deadline`] of its handle fresh (see the module's doc).
/// `Send + Sync`; dropping it never blocks.
#[derive(Debug)]
pub(crate) struct KeepAlive {
    key: u64,
}

/// Has `zk`'s keep-alive serve one more holder (starting its task if none runs).
pub(crate) fn keep_alive(zk: &ZooKeeper) -> KeepAlive {
    let key = zk.handle_key();
    let start = {
        let mut handles = HANDLES.lock();
        let entry = handles
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert(Entry {
                holders: 0,
                running: false,
            });
        entry.holders += 1;
        !std::mem::replace(&mut entry.running, true)
    };
    if start {
        crate::runtime::spawn_detached("zk-keep-alive", run(key, zk.downgrade()));
    }
    KeepAlive { key }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        let mut handles = HANDLES.lock();
        if let Some(entry) = handles.as_mut().and_then(|h| h.get_mut(&self.key)) {
            entry.holders = entry.holders.saturating_sub(1);
        }
    }
}

/// Whether the task for `key` is to go on (it has holders); if not, it is marked as
/// stopped under the same lock, so a new holder starts a new task.
fn still_needed(key: u64) -> bool {
    let mut handles = HANDLES.lock();
    let Some(map) = handles.as_mut() else {
        return false;
    };
    match map.get(&key) {
        Some(entry) if entry.holders > 0 => true,
        _ => {
            map.remove(&key);
            false
        }
    }
}

/// The keep-alive task of one handle. Holds the handle weakly (never keeps it open;
/// dropping a clone on the driver never blocks: the driver is marked as an executor
/// thread, whose closes are handed off).
async fn run(key: u64, weak: WeakZooKeeper) {
    loop {
        if !still_needed(key) {
            return;
        }
        let Some(zk) = weak.upgrade() else {
            forget(key);
            return;
        };
        let state = zk.state();
        if state.is_terminal() {
            drop(zk);
            forget(key);
            return;
        }
        let Ok(timeout) = zk.session_timeout() else {
            drop(zk);
            forget(key);
            return;
        };
        let period = timeout / 3;
        let now = Instant::now();
        let due = zk.confirmed_alive_since().map_or(now, |at| at + period);
        if due > now {
            drop(zk);
            // Requests of others may have refreshed the bound meanwhile: look again then.
            sleep_at(Some(due)).await;
            continue;
        }
        // Answered or not within a period, the next look decides (a stalled link gets
        // one request per period, never a pile).
        let probe = zk.exists_async("/");
        drop(zk);
        if let Some(Err(_)) = until(Deadline::after(period), probe).await {
            // Failed at once (a connection loss): pace the next try.
            sleep_at(Some(now + period.min(RETRY))).await;
        }
    }
}

fn forget(key: u64) {
    let mut handles = HANDLES.lock();
    if let Some(map) = handles.as_mut() {
        map.remove(&key);
    }
}
