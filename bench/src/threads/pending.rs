//! A tiny executor for `threads`: holds many futures on the calling thread, polls each
//! one again only when its waker fired, and never starts a thread (a runtime's worker
//! threads would spoil the thread count it is measuring).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// One future's wake-up: a flag, and an unpark of the thread driving the pool.
struct Flag {
    woken: AtomicBool,
    driver: Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.driver.unpark();
    }
}

struct Slot<'a, T> {
    future: Option<Pin<Box<dyn Future<Output = T> + 'a>>>,
    flag: Arc<Flag>,
    waker: Waker,
    output: Option<T>,
}

/// Futures kept pending on this thread. Outside [`drive_until`](Self::drive_until) they
/// are not polled at all: a wake-up is only recorded.
pub(crate) struct Pending<'a, T> {
    slots: Vec<Slot<'a, T>>,
}

impl<'a, T> Pending<'a, T> {
    pub(crate) fn new() -> Self {
        Pending { slots: Vec::new() }
    }

    /// Adds `future`; its first poll is at the next [`drive_until`](Self::drive_until).
    pub(crate) fn push(&mut self, future: impl Future<Output = T> + 'a) {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            driver: thread::current(),
        });
        let waker = Waker::from(Arc::clone(&flag));
        self.slots.push(Slot {
            future: Some(Box::pin(future)),
            flag,
            waker,
            output: None,
        });
    }

    /// Polls the woken futures until `done()` holds or `deadline` passes (parking in
    /// between); whether `done()` held.
    pub(crate) fn drive_until(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        loop {
            self.poll_woken();
            if done() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if !self.any_woken() {
                thread::park_timeout((deadline - now).min(Duration::from_millis(50)));
            }
        }
    }

    /// Polls each pending future whose waker fired since its last poll.
    fn poll_woken(&mut self) {
        for slot in &mut self.slots {
            let Some(future) = slot.future.as_mut() else {
                continue;
            };
            if !slot.flag.woken.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut cx = Context::from_waker(&slot.waker);
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                slot.output = Some(output);
                slot.future = None;
            }
        }
    }

    fn any_woken(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.future.is_some() && s.flag.woken.load(Ordering::Acquire))
    }

    /// The futures that completed, with their outputs (counted as they came).
    pub(crate) fn outputs(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.output.as_ref())
    }

    /// Drives every future to its end, or until `deadline`; whether all ended.
    pub(crate) fn drive_all(&mut self, deadline: Instant) -> bool {
        loop {
            self.poll_woken();
            if self.pending() == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if !self.any_woken() {
                thread::park_timeout((deadline - now).min(Duration::from_millis(50)));
            }
        }
    }

    /// The outputs of the futures that completed, in the order they were pushed.
    pub(crate) fn into_outputs(self) -> Vec<T> {
        self.slots.into_iter().filter_map(|s| s.output).collect()
    }

    /// How many futures are still pending.
    pub(crate) fn pending(&self) -> usize {
        self.slots.iter().filter(|s| s.future.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_until_pending_and_again_only_when_woken() {
        let polls = std::cell::Cell::new(0);
        let mut pool = Pending::new();
        // Ready on the third poll; wakes itself after the first two.
        pool.push(std::future::poll_fn(|cx| {
            polls.set(polls.get() + 1);
            if polls.get() < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(7)
            }
        }));
        // Pending for ever, never woken: polled once.
        pool.push(std::future::pending());
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(pool.drive_until(deadline, || polls.get() >= 3));
        assert_eq!(pool.outputs().copied().collect::<Vec<_>>(), [7]);
        assert_eq!(pool.pending(), 1);
        assert!(!pool.drive_until(Instant::now(), || false));
        assert_eq!(polls.get(), 3);
    }
}
