//! What a C completion delivers, copied out of C memory on the completion thread, and
//! the one-shot slot a caller waits on (blocking, or as a `Future` on any executor).

use crate::error::{Error, Result};
use crate::in_flight::Permit;
use crate::timeout::Timeout;
use crate::types::{Acl, Stat};
use crate::watch::Watch;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The payload of a completion, already copied into Rust memory.
#[derive(Debug, Default)]
pub(crate) enum Payload {
    #[default]
    Empty,
    Stat(Option<Stat>),
    Data(Vec<u8>, Option<Stat>),
    Path(String, Option<Stat>),
    Children(Vec<String>, Option<Stat>),
    Acl(Vec<Acl>, Option<Stat>),
    Multi(Vec<MultiOutcome>),
}

/// One operation's result inside a multi.
#[derive(Debug)]
pub(crate) struct MultiOutcome {
    pub(crate) rc: i32,
    pub(crate) path: Option<String>,
    pub(crate) stat: Option<Stat>,
}

/// A completion: the C return code plus its payload.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) rc: i32,
    pub(crate) payload: Payload,
}

/// Who waits for a slot: the task that last polled it, a thread blocked on it, or both
/// (a future polled once, then waited on: the task is still told).
#[derive(Default)]
struct Waiter {
    task: Option<Waker>,
    thread: Option<std::thread::Thread>,
}

impl Waiter {
    /// Wakes them (after the slot's lock: a waker is user code).
    fn wake(self) {
        if let Some(thread) = self.thread {
            thread.unpark();
        }
        if let Some(waker) = self.task {
            waker.wake();
        }
    }
}

enum SlotState {
    Waiting(Waiter),
    Done(Result<Reply>),
    Taken,
}

/// Slots a thread keeps for its next requests (a request then allocates only what it
/// returns): as many as a burst of sync calls and a small pipeline reuse.
const SPARE_SLOTS_KEPT: usize = 32;

thread_local! {
    static SPARE_SLOTS: std::cell::RefCell<Vec<Arc<ReplySlot>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Where a completion lands; shared by the registry entry and the caller's future.
///
/// One lock per side and per wake-up: the completion stores the result and takes the
/// waiter under one lock, then wakes only the waiter there is. A blocked caller parks
/// its own thread (no condition variable: nothing to notify when nobody waits).
pub(crate) struct ReplySlot {
    state: Mutex<SlotState>,
}

impl ReplySlot {
    /// A fresh slot: one this thread's futures gave back, else a new one.
    pub(crate) fn new() -> Arc<ReplySlot> {
        SPARE_SLOTS
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                Arc::new(ReplySlot {
                    state: Mutex::new(SlotState::Waiting(Waiter::default())),
                })
            })
    }

    /// Keeps `slot` for this thread's next request if nothing else holds it (its
    /// fulfiller lets go before it wakes the caller). Its state is reset: whatever
    /// result is left there is dropped.
    fn give_back(mut slot: Arc<ReplySlot>) {
        let Some(only) = Arc::get_mut(&mut slot) else {
            return;
        };
        *only.state.get_mut() = SlotState::Waiting(Waiter::default());
        let _ = SPARE_SLOTS.try_with(|spare| {
            if let Ok(mut spare) = spare.try_borrow_mut() {
                if spare.len() < SPARE_SLOTS_KEPT {
                    spare.push(slot);
                }
            }
        });
    }

    /// [`fulfill`](Self::fulfill), letting go of `slot` before waking the caller, so
    /// that the caller finds it unshared and can use it again.
    #[inline]
    fn fulfill_last(slot: Arc<ReplySlot>, result: Result<Reply>) {
        let waiter = slot.store(result);
        drop(slot);
        waiter.wake();
    }

    /// Stores the result once; later calls are ignored. Never blocks for long (the
    /// mutex is only held to swap the state), so it is safe on the completion thread.
    pub(crate) fn fulfill(&self, result: Result<Reply>) {
        self.store(result).wake();
    }

    /// Stores the result if none is there; returns who is to be woken (after the lock).
    #[inline]
    fn store(&self, result: Result<Reply>) -> Waiter {
        let mut state = self.state.lock();
        match &mut *state {
            SlotState::Waiting(waiter) => {
                let waiter = std::mem::take(waiter);
                *state = SlotState::Done(result);
                waiter
            }
            _ => Waiter::default(),
        }
    }

    fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Result<Reply>> {
        let mut state = self.state.lock();
        match &mut *state {
            SlotState::Waiting(waiter) => {
                match &mut waiter.task {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    task => *task = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Done(_) => match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Done(result) => Poll::Ready(result),
                _ => Poll::Ready(Err(Error::Closed)),
            },
            SlotState::Taken => Poll::Ready(Err(Error::Closed)),
        }
    }

    /// The result if it is there, without waiting or registering a waker.
    fn try_take(&self) -> Option<Result<Reply>> {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, SlotState::Taken) {
            SlotState::Done(result) => Some(result),
            SlotState::Taken => Some(Err(Error::Closed)),
            waiting => {
                *state = waiting;
                None
            }
        }
    }

    /// Blocks the calling thread until the result is in (`None` once `deadline` passed;
    /// the slot then has no waiter left).
    #[inline]
    fn wait_take(&self, deadline: Option<Instant>) -> Option<Result<Reply>> {
        let mut registered = false;
        loop {
            {
                let mut state = self.state.lock();
                match &mut *state {
                    SlotState::Waiting(waiter) => {
                        if !registered {
                            waiter.thread = Some(std::thread::current());
                            registered = true;
                        }
                    }
                    SlotState::Done(_) => {
                        return match std::mem::replace(&mut *state, SlotState::Taken) {
                            SlotState::Done(result) => Some(result),
                            _ => Some(Err(Error::Closed)),
                        };
                    }
                    SlotState::Taken => return Some(Err(Error::Closed)),
                }
            }
            // A park may return early (an unpark meant for an earlier wait of this
            // thread, or spuriously): the loop looks again.
            match deadline {
                None => std::thread::park(),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        let mut state = self.state.lock();
                        return match std::mem::replace(&mut *state, SlotState::Taken) {
                            SlotState::Done(result) => Some(result),
                            SlotState::Taken => Some(Err(Error::Closed)),
                            SlotState::Waiting(mut waiter) => {
                                // Timed out: only this thread stops waiting.
                                waiter.thread = None;
                                *state = SlotState::Waiting(waiter);
                                None
                            }
                        };
                    }
                    std::thread::park_timeout(deadline - now);
                }
            }
        }
    }
}

/// Owned by a registry entry: delivers the reply, or `Closed` if the entry is dropped
/// without one (the C client may drop pending completions at close, ZOOKEEPER-3868), so
/// no caller ever waits forever.
///
/// It also holds the request's place in flight, freed before the caller is woken (so a
/// waker may send a request at once).
pub(crate) struct Fulfiller {
    /// Taken when the reply is delivered.
    slot: Option<Arc<ReplySlot>>,
    permit: Option<Permit>,
    /// When the request was submitted (see `liveness.rs`).
    sent: crate::liveness::Stamp,
}

impl Fulfiller {
    pub(crate) fn new(slot: Arc<ReplySlot>, permit: Permit) -> Fulfiller {
        Fulfiller {
            slot: Some(slot),
            permit: Some(permit),
            sent: crate::liveness::stamp(),
        }
    }

    /// The C client completed the request with `rc`: a server's answer confirms the
    /// session was alive when it was submitted.
    pub(crate) fn heard(&self, rc: std::os::raw::c_int) {
        if let Some(liveness) = self.permit.as_ref().and_then(Permit::liveness) {
            liveness.heard(self.sent, rc);
        }
    }

    #[inline]
    pub(crate) fn fulfill(mut self, result: Result<Reply>) {
        self.finish(result);
    }

    /// Frees the place, tells the caller, then sends the requests queued for room that
    /// the place made (see `in_flight.rs`: never on the C IO thread).
    #[inline]
    fn finish(&mut self, result: Result<Reply>) {
        let in_flight = self.permit.take().and_then(Permit::release);
        if let Some(slot) = self.slot.take() {
            ReplySlot::fulfill_last(slot, result);
        }
        if let Some(in_flight) = in_flight {
            in_flight.run_ready();
        }
    }
}

impl Drop for Fulfiller {
    fn drop(&mut self) {
        if self.permit.is_some() {
            self.finish(Err(Error::Closed));
        }
    }
}

/// Blocking on the C completion thread (reachable only from a waker) would wait for a
/// completion or event that only this thread can deliver; on the recipes' driver it
/// would stall every task the driver runs.
pub(crate) const COMPLETION_THREAD_WAIT: Error = Error::InvalidArgument(
    "blocking wait on the C completion thread or the recipes' driver would stall it",
);

/// Turns a reply (and the watch the request armed) into the call's result. Most are
/// closures without captures: boxing them allocates nothing.
type Convert<T> = Box<dyn FnOnce(Reply, Option<Watch>) -> Result<T> + Send>;

enum FutureState<T> {
    Failed(Option<Error>),
    /// The slot, the armed watch (kept out of the converter so that it stays free of
    /// captures), the converter.
    Pending(Arc<ReplySlot>, Option<Watch>, Option<Convert<T>>),
}

/// The result of an asynchronous call: a `Future` for any executor (it needs no
/// runtime; the C completion thread wakes it), or a value to block on with
/// [`wait`](ZkFuture::wait).
///
/// The request is sent (or, on a handle with [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT)
/// requests in flight, queued to be sent in turn) when the call that made this future
/// returns, not when the future is first polled, so requests keep the order of the
/// calls. Dropping the future does not cancel the request.
#[must_use = "the request is sent either way; the future carries its result"]
pub struct ZkFuture<T> {
    state: FutureState<T>,
}

impl<T> ZkFuture<T> {
    pub(crate) fn failed(error: Error) -> ZkFuture<T> {
        ZkFuture {
            state: FutureState::Failed(Some(error)),
        }
    }

    pub(crate) fn pending(
        slot: Arc<ReplySlot>,
        watch: Option<Watch>,
        convert: impl FnOnce(Reply, Option<Watch>) -> Result<T> + Send + 'static,
    ) -> ZkFuture<T> {
        ZkFuture {
            state: FutureState::Pending(slot, watch, Some(Box::new(convert))),
        }
    }

    #[inline]
    fn finish(&mut self, result: Result<Reply>) -> Result<T> {
        match &mut self.state {
            FutureState::Failed(error) => Err(error.take().unwrap_or(Error::Closed)),
            FutureState::Pending(_, watch, convert) => match (result, convert.take()) {
                (Ok(reply), Some(convert)) => convert(reply, watch.take()),
                (Err(error), _) => Err(error),
                (Ok(_), None) => Err(Error::Closed),
            },
        }
    }

    /// The result if it has arrived, without waiting (never blocks, so any thread may
    /// ask); `None` while pending. Once it returned a result the future is spent.
    pub(crate) fn try_now(&mut self) -> Option<Result<T>> {
        let result = match &self.state {
            FutureState::Failed(_) => Err(Error::Closed),
            FutureState::Pending(slot, ..) => slot.try_take()?,
        };
        Some(self.finish(result))
    }

    /// Blocks the calling thread until the reply arrives.
    pub fn wait(mut self) -> Result<T> {
        if crate::no_wait::here() {
            return self.try_now().unwrap_or(Err(COMPLETION_THREAD_WAIT));
        }
        let result = match &self.state {
            FutureState::Failed(_) => Err(Error::Closed),
            FutureState::Pending(slot, ..) => or_timeout(slot.wait_take(None)),
        };
        self.finish(result)
    }

    /// Blocks until the reply arrives or `timeout` passes (`Err(Timeout)`; the request
    /// itself still completes, unobserved).
    pub fn wait_timeout(mut self, timeout: impl Into<Timeout>) -> Result<T> {
        let deadline = timeout.into().deadline().instant();
        if crate::no_wait::here() {
            return self.try_now().unwrap_or(Err(COMPLETION_THREAD_WAIT));
        }
        let result = match &self.state {
            FutureState::Failed(_) => Err(Error::Closed),
            FutureState::Pending(slot, ..) => or_timeout(slot.wait_take(deadline)),
        };
        self.finish(result)
    }
}

/// A wait's result, `Timeout` if it had none (a match: `unwrap_or` would build and drop
/// an `Error` on every wait).
fn or_timeout(result: Option<Result<Reply>>) -> Result<Reply> {
    match result {
        Some(result) => result,
        None => Err(Error::Timeout),
    }
}

impl<T> Drop for ZkFuture<T> {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.state, FutureState::Failed(None));
        if let FutureState::Pending(slot, ..) = state {
            ReplySlot::give_back(slot);
        }
    }
}

impl<T> Unpin for ZkFuture<T> {}

impl<T> Future for ZkFuture<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        let result = match &this.state {
            FutureState::Failed(_) => Err(Error::Closed),
            FutureState::Pending(slot, ..) => match slot.poll_take(cx) {
                Poll::Ready(result) => result,
                Poll::Pending => return Poll::Pending,
            },
        };
        Poll::Ready(this.finish(result))
    }
}

impl<T> std::fmt::Debug for ZkFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZkFuture")
    }
}

/// `now + timeout`, saturating: a huge timeout (e.g. `Duration::MAX`) means "a very long
/// time", not a panic.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A fresh slot a task has polled once, and the count of that task's wake-ups.
    fn polled_slot() -> (Arc<ReplySlot>, Arc<Count>) {
        let slot = ReplySlot::new();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        assert!(slot
            .poll_take(&mut Context::from_waker(&waker))
            .is_pending());
        (slot, count)
    }

    #[test]
    fn a_future_polled_then_waited_on_still_wakes_its_task() {
        let (slot, count) = polled_slot();
        let waiting = Arc::clone(&slot);
        let waiter = std::thread::spawn(move || {
            waiting.wait_take(Some(Instant::now() + Duration::from_secs(20)))
        });
        // Fulfilled once the thread is registered (parked or about to park).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(&*slot.state.lock(), SlotState::Waiting(w) if w.thread.is_some()) {
            assert!(
                Instant::now() < deadline,
                "the waiting thread never registered"
            );
            std::thread::yield_now();
        }
        slot.fulfill(Ok(Reply {
            rc: 0,
            payload: Payload::Empty,
        }));
        let got = waiter.join().unwrap();
        assert!(matches!(got, Some(Ok(Reply { rc: 0, .. }))));
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task was not woken");
    }

    #[test]
    fn a_timed_out_wait_leaves_the_task_registered() {
        let (slot, count) = polled_slot();
        assert!(slot.wait_take(Some(Instant::now())).is_none());
        slot.fulfill(Err(Error::Closed));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(matches!(slot.try_take(), Some(Err(Error::Closed))));
    }
}
