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

use super::loss_signal::{LossSignal, LossSource, Wakes};
use crate::locks::LockLost;
use crate::runtime::timer::{sleep_at, Sleep};
use crate::runtime::until;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};
use zookeeper_mt::{Deadline, SessionClock, SessionEvents, SessionState, WeakZooKeeper, ZooKeeper};

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
    loss_deadline(clock).is_none_or(|at| now >= at)
}

/// Runs `check` on the timer thread at the instant it names, again and again, until it
/// names none: a loss is pushed to its signals at its instant, whatever the driver is
/// busy with. `check` must be quick and never block (it runs among the timer's wakers);
/// it is first run here. The signals it settles are woken after the alarm's lock is
/// released (the [`Wakes`] it is given).
pub(crate) fn alarm(
    check: impl Fn(&mut Wakes) -> Option<Instant> + Send + Sync + 'static,
) -> AlarmHandle {
    alarm_with(move |_, wakes| check(wakes))
}

/// Cancels its alarm when told, or when dropped: no timer stays pending for a guard
/// that is gone (an idle process keeps no timer thread).
#[derive(Debug)]
pub(crate) struct AlarmHandle(std::sync::Weak<Alarm>);

impl AlarmHandle {
    /// Never waits: it may run inside the alarm's own check (a term ended by its
    /// alarm). A run under way sees the flag before it arms again, or its timer fires
    /// once more and finds it.
    pub(crate) fn cancel(&self) {
        if let Some(alarm) = self.0.upgrade() {
            alarm
                .cancelled
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let pending = alarm.sleep.try_lock().and_then(|mut slot| slot.take());
            drop(pending);
        }
    }
}

impl Drop for AlarmHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// [`alarm`] whose `check` also gets the alarm's context: a waker it registers (on a
/// session event stream) runs it again when woken, on the waking thread (the C
/// completion thread for session events: `check` must not block).
pub(crate) fn alarm_with(
    check: impl Fn(&mut Context<'_>, &mut Wakes) -> Option<Instant> + Send + Sync + 'static,
) -> AlarmHandle {
    let alarm = Arc::new(Alarm {
        sleep: Mutex::new(None),
        cancelled: std::sync::atomic::AtomicBool::new(false),
        check: Box::new(check),
    });
    let handle = AlarmHandle(Arc::downgrade(&alarm));
    alarm.run();
    handle
}

struct Alarm {
    /// The pending timer (keeps the alarm armed; the timer holds the alarm's waker).
    sleep: Mutex<Option<Sleep>>,
    cancelled: std::sync::atomic::AtomicBool,
    check: Box<Check>,
}

/// An alarm's check: when to run it again (`None`: the alarm is done).
type Check = dyn Fn(&mut Context<'_>, &mut Wakes) -> Option<Instant> + Send + Sync;

impl std::fmt::Debug for Alarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alarm").finish_non_exhaustive()
    }
}

impl Alarm {
    fn run(self: Arc<Self>) {
        let waker = Waker::from(Arc::clone(&self));
        let mut cx = Context::from_waker(&waker);
        // Dropped (waking the settled signals) after the slot's lock, below.
        let mut wakes = Wakes::new();
        loop {
            // Checked, armed and stored under the lock: a wake that comes meanwhile
            // waits, then checks again and stores a later timer, never an earlier one.
            let mut slot = self.sleep.lock();
            if self.cancelled.load(std::sync::atomic::Ordering::SeqCst) {
                let ended = slot.take();
                drop(slot);
                drop(ended);
                return;
            }
            let at = (self.check)(&mut cx, &mut wakes);
            let Some(at) = at.filter(|_| !self.cancelled.load(std::sync::atomic::Ordering::SeqCst))
            else {
                let ended = slot.take();
                drop(slot);
                drop(ended);
                return;
            };
            let mut sleep = sleep_at(Some(at));
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
    /// The task's waker while it sleeps: the last holder's release ends the sleep.
    waker: Option<Waker>,
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
                waker: None,
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
        let waker = {
            let mut handles = HANDLES.lock();
            let Some(entry) = handles.as_mut().and_then(|h| h.get_mut(&self.key)) else {
                return;
            };
            entry.holders = entry.holders.saturating_sub(1);
            if entry.holders > 0 {
                return;
            }
            entry.waker.take()
        };
        // Woken outside the lock: the task ends at once instead of at its next probe.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// Sleeps until `at`, or until the last holder of `key` has let go.
async fn pause(key: u64, at: Instant) {
    let mut sleep = sleep_at(Some(at));
    std::future::poll_fn(|cx| {
        {
            let mut handles = HANDLES.lock();
            match handles.as_mut().and_then(|h| h.get_mut(&key)) {
                Some(entry) if entry.holders > 0 => entry.waker = Some(cx.waker().clone()),
                _ => return std::task::Poll::Ready(()),
            }
        }
        Pin::new(&mut sleep).poll(cx)
    })
    .await
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
/// dropping a clone on the driver never blocks: the driver refuses waits
/// (`refuse_waits_on_this_thread`), so its closes are handed off).
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
            pause(key, due).await;
            continue;
        }
        // Answered or not within a period, the next look decides (a stalled link gets
        // one request per period, never a pile).
        let probe = zk.exists_async("/");
        drop(zk);
        if let Some(Err(_)) = until(Deadline::after(period), probe).await {
            // Failed at once (a connection loss): pace the next try.
            pause(key, now + period.min(RETRY)).await;
        }
    }
}

fn forget(key: u64) {
    let mut handles = HANDLES.lock();
    if let Some(map) = handles.as_mut() {
        map.remove(&key);
    }
}

/// How a holding guard (a permit, a lease, a read or write lock, an election candidate)
/// learns it may have lost what it holds: the first of the session's expiry or close,
/// a disconnection (no grace), and the session's earliest possible expiry
/// ([`loss_deadline`]). Answered from what the client knows, never by a request.
/// While it lives, its handle's keep-alive runs.
#[derive(Debug)]
pub(crate) struct Holding {
    inner: Arc<HoldingInner>,
    alarm: Mutex<Option<AlarmHandle>>,
}

#[derive(Debug)]
struct HoldingInner {
    clock: SessionClock,
    /// Its loss signals (settled by the first loss, or by the release).
    loss: LossSource<LockLost>,
    state: Mutex<HoldState>,
    _alive: KeepAlive,
}

struct HoldState {
    /// This guard's subscription to its session's events (from its acquisition on).
    events: SessionEvents,
    lost: Option<LockLost>,
    released: bool,
    /// Whether an alarm pushes the loss to the signals at its instant (first `lost()`).
    alarmed: bool,
}

impl Drop for Holding {
    fn drop(&mut self) {
        // Outside the state's lock: the alarm's check takes it.
        let alarm = self.alarm.lock().take();
        drop(alarm);
    }
}

impl std::fmt::Debug for HoldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldState")
            .field("lost", &self.lost)
            .finish()
    }
}

impl Holding {
    /// A guard just granted on `zk` (its acquisition's last reply came after every
    /// session event before: those are no loss).
    pub(crate) fn new(zk: &ZooKeeper) -> Holding {
        let events = zk.session_events();
        let lost = match zk.state() {
            state if state.is_connected() => None,
            SessionState::Expired => Some(LockLost::SessionExpired),
            state if state.is_terminal() => Some(LockLost::Closed),
            _ => Some(LockLost::Disconnected),
        };
        Holding {
            inner: Arc::new(HoldingInner {
                clock: zk.session_clock(),
                loss: LossSource::default(),
                state: Mutex::new(HoldState {
                    events,
                    lost,
                    released: false,
                    alarmed: false,
                }),
                _alive: keep_alive(zk),
            }),
            alarm: Mutex::new(None),
        }
    }

    /// Why the guard may have lost its hold, if it may have. No request, no blocking.
    pub(crate) fn lost_reason(&self) -> Option<LockLost> {
        let mut wakes = Wakes::new();
        self.lost_reason_with(&mut wakes)
    }

    /// [`lost_reason`](Self::lost_reason) for a caller holding a lock: the signals it
    /// settles are woken when `wakes` is dropped.
    pub(crate) fn lost_reason_with(&self, wakes: &mut Wakes) -> Option<LockLost> {
        self.inner.judge(None, wakes).0
    }

    /// A signal of the loss, settled at the instant it is known (at once if it is
    /// known already); it resolves to `None` after a release.
    pub(crate) fn lost(&self) -> LossSignal<LockLost> {
        let mut wakes = Wakes::new();
        self.lost_with(&mut wakes)
    }

    /// [`lost`](Self::lost) for a caller holding a lock (see
    /// [`lost_reason_with`](Self::lost_reason_with)). The alarm's first check runs here,
    /// when no signal of this hold has a waker yet (every signal comes from a `lost()`,
    /// and the first one arms the alarm).
    pub(crate) fn lost_with(&self, wakes: &mut Wakes) -> LossSignal<LockLost> {
        let signal = self.inner.loss.signal();
        let arm = {
            let mut state = self.inner.state.lock();
            state.lost.is_none() && !state.released && !std::mem::replace(&mut state.alarmed, true)
        };
        if arm {
            let inner = Arc::downgrade(&self.inner);
            let alarm = alarm_with(move |cx, wakes| {
                let inner = inner.upgrade()?;
                inner.judge(Some(cx), wakes).1
            });
            let old = self.alarm.lock().replace(alarm);
            drop(old);
        }
        // Judged once more now: a loss known already settles the new signal.
        self.lost_reason_with(wakes);
        signal
    }

    /// Released: no loss is reported from now on; the signals resolve to `None`.
    pub(crate) fn release(&self) {
        let mut wakes = Wakes::new();
        {
            let mut state = self.inner.state.lock();
            state.released = true;
            match state.lost {
                Some(reason) => self.inner.loss.lose(reason, &mut wakes),
                None => self.inner.loss.end(&mut wakes),
            }
        }
        let alarm = self.alarm.lock().take();
        drop(alarm);
    }

    /// How many loss signals of this hold live, and how many hold a waker (tests).
    pub(crate) fn signal_counts(&self) -> (usize, usize) {
        self.inner.loss.counts()
    }
}

impl HoldingInner {
    /// Applies the session events so far (with `cx`, registering its waker for the
    /// next) and the bound, and settles the signals with a loss (their wakers go to
    /// `wakes`). Returns the loss, if any, and while there is none the instant to look
    /// again.
    fn judge(
        &self,
        mut cx: Option<&mut Context<'_>>,
        wakes: &mut Wakes,
    ) -> (Option<LockLost>, Option<Instant>) {
        let mut state = self.state.lock();
        while state.lost.is_none() && !state.released {
            let next = match cx.as_deref_mut() {
                Some(cx) => match state.events.poll_recv(cx) {
                    std::task::Poll::Ready(event) => event,
                    std::task::Poll::Pending => break,
                },
                None => match state.events.try_recv() {
                    Ok(event) => Some(event),
                    Err(zookeeper_mt::stream::TryRecvError::Empty) => break,
                    Err(zookeeper_mt::stream::TryRecvError::Disconnected) => None,
                },
            };
            state.lost = match next.map(|event| event.state) {
                None => Some(LockLost::Closed),
                Some(SessionState::Expired) => Some(LockLost::SessionExpired),
                Some(s) if s.is_terminal() => Some(LockLost::Closed),
                Some(s) if s.is_connected() => None,
                Some(_) => Some(LockLost::Disconnected),
            };
        }
        if state.lost.is_none() && !state.released && past_deadline(&self.clock, Instant::now()) {
            state.lost = Some(LockLost::Disconnected);
        }
        if let Some(reason) = state.lost {
            self.loss.lose(reason, wakes);
        }
        let again = (state.lost.is_none() && !state.released)
            .then(|| loss_deadline(&self.clock).unwrap_or_else(Instant::now));
        if again.is_none() {
            state.alarmed = false;
        }
        (state.lost, again)
    }
}

/// `is_held`'s answer from a guard's loss: held while not lost; a closed handle is an
/// error, as for every call on it.
pub(crate) fn held_answer(lost: Option<LockLost>) -> crate::Result<bool> {
    match lost {
        None => Ok(true),
        Some(LockLost::Closed) => Err(zookeeper_mt::Error::Closed.into()),
        Some(_) => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn an_alarm_runs_at_each_instant_it_names_until_none() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (sender, receiver) = crossbeam_channel::unbounded();
        let start = Instant::now();
        let counted = Arc::clone(&runs);
        let _alarm = alarm(move |_| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let _ = sender.send(Instant::now());
            (n < 2).then(|| start + Duration::from_millis(30) * (n as u32 + 1))
        });
        let first = receiver.recv_timeout(Duration::from_secs(5)).unwrap();
        let second = receiver.recv_timeout(Duration::from_secs(5)).unwrap();
        let third = receiver.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            first < start + Duration::from_millis(30),
            "first run is at once"
        );
        assert!(second >= start + Duration::from_millis(30));
        assert!(third >= start + Duration::from_millis(60));
        assert!(receiver.recv_timeout(Duration::from_millis(100)).is_err());
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_cancelled_alarm_runs_no_more() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let handle = alarm(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Some(Instant::now() + Duration::from_millis(20))
        });
        handle.cancel();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "only the first run, at arming"
        );
    }

    #[test]
    fn the_margin_grows_with_the_timeout() {
        assert_eq!(margin(Duration::from_secs(4)), Duration::from_millis(50));
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_millis(310));
    }
}
