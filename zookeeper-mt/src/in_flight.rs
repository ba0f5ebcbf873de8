//! The bound on requests in flight per handle.
//!
//! Every `zoo_a*` call writes one byte to the C client's wake-up pipe, which its IO thread
//! drains once per pass of its loop. When the pipe is full the C client closes its own
//! socket from the submitting thread (`nonblocking_send` → `close_zsock`), racing its IO
//! thread, and every request in flight fails. A pipe holds 65,536 bytes, but only 4,096
//! once the process is past its pipe-buffer soft limit (`/proc/sys/fs/pipe-user-pages-soft`,
//! reached with about a thousand handles). Bytes not yet drained never outnumber requests
//! not yet completed, so bounding the latter below 4,096 keeps the pipe from overflowing
//! whatever the IO thread's pace.
//!
//! A submit that finds no room queues and waits until a completion makes some, up to the
//! session timeout (past which the C client would have declared the connection lost and
//! failed its requests anyway), then fails with `TooManyInFlight`. On the C completion
//! thread it fails at once: only that thread completes requests, so it must not wait for
//! one.
//!
//! Fairness: room goes to the waiters in the order they came. A freed place is handed
//! straight to the first waiter (it never becomes free for a newcomer to take), and a
//! newcomer takes a free place only while nobody waits. Each wait is an entry keyed by
//! its own number; a waiter that gives up removes its entry, or, if a place was handed
//! to it meanwhile, takes it.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::Instant;

/// Requests in flight per handle at most (sent and not yet completed): below the
/// smallest wake-up pipe the C client can get (4,096 bytes), with room for the wake-ups it
/// writes for itself. A submit beyond it waits for room (see [`ZooKeeper`](crate::ZooKeeper)).
pub const MAX_IN_FLIGHT: usize = 4_000;

pub(crate) struct InFlight {
    /// Places held, including those handed to a waiter that has not taken them yet.
    count: AtomicUsize,
    limit: usize,
    /// Entries in `queue.waiting`, read without the lock by every release.
    waiting: AtomicUsize,
    queue: Mutex<Queue>,
    /// What the server's answers tell of its session clock (see `liveness.rs`).
    pub(crate) liveness: crate::liveness::Liveness,
}

#[derive(Default)]
struct Queue {
    next: u64,
    /// In arrival order (so sorted by number).
    waiting: VecDeque<Waiter>,
    /// Numbers of waiters a place was handed to, not taken yet (a handful at most).
    granted: Vec<u64>,
}

struct Waiter {
    number: u64,
    thread: Thread,
}

/// One request's place in flight; freed when dropped (with its registry entry).
pub(crate) struct Permit(Arc<InFlight>);

impl InFlight {
    pub(crate) fn new(limit: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            count: AtomicUsize::new(0),
            limit,
            waiting: AtomicUsize::new(0),
            queue: Mutex::new(Queue::default()),
            liveness: Default::default(),
        })
    }

    /// Takes a free place (count below the limit).
    fn try_take(&self) -> bool {
        let mut count = self.count.load(Ordering::SeqCst);
        while count < self.limit {
            match self.count.compare_exchange_weak(
                count,
                count + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => count = now,
            }
        }
        false
    }

    /// A place in flight, waiting for one until `deadline` (`None`: never wait).
    pub(crate) fn acquire(self: &Arc<Self>, deadline: Option<Instant>) -> Result<Permit> {
        // A newcomer may not pass a waiter: free places are theirs first.
        if self.waiting.load(Ordering::SeqCst) == 0 && self.try_take() {
            return Ok(Permit(Arc::clone(self)));
        }
        let full = Error::TooManyInFlight { limit: self.limit };
        let Some(deadline) = deadline else {
            return Err(full);
        };
        let mut queue = self.queue.lock();
        let number = queue.next;
        queue.next += 1;
        queue.waiting.push_back(Waiter {
            number,
            thread: thread::current(),
        });
        self.waiting.store(queue.waiting.len(), Ordering::SeqCst);
        // A release that saw no waiter freed its place: hand out what is free now.
        self.hand_out(&mut queue);
        loop {
            if let Some(at) = queue.granted.iter().position(|&n| n == number) {
                queue.granted.swap_remove(at);
                return Ok(Permit(Arc::clone(self)));
            }
            let now = Instant::now();
            if now >= deadline {
                if let Ok(at) = queue.waiting.binary_search_by_key(&number, |w| w.number) {
                    queue.waiting.remove(at);
                }
                self.waiting.store(queue.waiting.len(), Ordering::SeqCst);
                shrink(&mut queue);
                return Err(full);
            }
            drop(queue);
            // Unparked when a place is handed to it (a stray unpark only loops).
            thread::park_timeout(deadline - now);
            queue = self.queue.lock();
        }
    }

    /// Hands free places to the first waiters.
    fn hand_out(&self, queue: &mut Queue) {
        while !queue.waiting.is_empty() && self.try_take() {
            if let Some(waiter) = queue.waiting.pop_front() {
                queue.granted.push(waiter.number);
                waiter.thread.unpark();
            }
        }
        self.waiting.store(queue.waiting.len(), Ordering::SeqCst);
        shrink(queue);
    }

    /// A place is given back: to the first waiter if there is one, else freed.
    fn release(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let mut queue = self.queue.lock();
            if let Some(waiter) = queue.waiting.pop_front() {
                // Handed over as it is: the count stays.
                queue.granted.push(waiter.number);
                self.waiting.store(queue.waiting.len(), Ordering::SeqCst);
                waiter.thread.unpark();
                return;
            }
        }
        self.count.fetch_sub(1, Ordering::SeqCst);
        // A waiter that queued after the look above, having seen no room, gets it. (It
        // counts itself in `waiting` before it looks at `count`, this thread the other
        // way round, all `SeqCst`: one of the two sees the other.)
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let mut queue = self.queue.lock();
            self.hand_out(&mut queue);
        }
    }

    /// Requests in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Submitters waiting for room now.
    #[cfg(test)]
    fn waiters(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// Gives the queue's memory back once a burst of waiters is gone.
fn shrink(queue: &mut Queue) {
    if queue.waiting.is_empty() && queue.waiting.capacity() > 64 {
        queue.waiting = VecDeque::new();
    }
}

impl Permit {
    pub(crate) fn liveness(&self) -> &crate::liveness::Liveness {
        &self.0.liveness
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const BOUND: Duration = Duration::from_secs(20);

    fn wait_for_waiters(in_flight: &InFlight, n: usize) {
        let deadline = Instant::now() + BOUND;
        while in_flight.waiters() != n {
            assert!(Instant::now() < deadline, "waiters never reached {n}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_freed_place_goes_to_the_waiter_not_to_a_newcomer() {
        let in_flight = InFlight::new(1);
        let held = in_flight.acquire(None).unwrap();
        let waiter = {
            let in_flight = Arc::clone(&in_flight);
            thread::spawn(move || in_flight.acquire(Some(Instant::now() + BOUND)).map(drop))
        };
        wait_for_waiters(&in_flight, 1);
        drop(held);
        // The place was handed to the waiter: a newcomer finds none.
        assert!(matches!(
            in_flight.acquire(None),
            Err(Error::TooManyInFlight { limit: 1 })
        ));
        assert_eq!(waiter.join().unwrap().ok(), Some(()));
        assert_eq!(in_flight.count(), 0);
        assert!(in_flight.acquire(None).is_ok());
    }

    #[test]
    fn waiters_get_places_in_the_order_they_came() {
        let in_flight = InFlight::new(1);
        let held = in_flight.acquire(None).unwrap();
        let (order, got) = mpsc::channel();
        let mut threads = Vec::new();
        for i in 0..8 {
            let shared = Arc::clone(&in_flight);
            let order = order.clone();
            threads.push(thread::spawn(move || {
                let permit = shared.acquire(Some(Instant::now() + BOUND)).unwrap();
                order.send(i).unwrap();
                drop(permit);
            }));
            wait_for_waiters(&in_flight, i + 1);
        }
        drop(held);
        for thread in threads {
            thread.join().unwrap();
        }
        let order: Vec<usize> = got.try_iter().collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>());
        assert_eq!(in_flight.count(), 0);
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_no_entry() {
        let in_flight = InFlight::new(1);
        let held = in_flight.acquire(None).unwrap();
        let gave_up = in_flight.acquire(Some(Instant::now() + Duration::from_millis(20)));
        assert!(matches!(gave_up, Err(Error::TooManyInFlight { .. })));
        assert_eq!(in_flight.waiters(), 0);
        assert!(in_flight.queue.lock().granted.is_empty());
        // The release is not handed to the one that left: the place is free again.
        drop(held);
        assert_eq!(in_flight.count(), 0);
        assert!(in_flight.acquire(None).is_ok());
    }
}
