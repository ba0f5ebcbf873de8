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
//! A request that finds no room does not wait on its caller's thread: it is queued as a
//! job (the C call and everything around it, owning its arguments) and its future is
//! returned pending. Room goes to the queue in the order the requests were made: a freed
//! place is handed straight to the first queued job (it never becomes free for a
//! newcomer to take), and a newcomer takes a free place only while nothing is queued or
//! about to run. A job given a place moves to a ready list; ready jobs are run one at a
//! time, by one thread at a time, in the order they got their places: by the thread
//! that freed the place (the C completion thread, after the completion's caller was
//! told), by the next submitter, or by a close's sweep (where they fail with `Closed`).
//! Never on the C IO thread: an auth completion frees its place there with the C
//! client's lock held, and a C call from there deadlocks (see [`io_thread`]).
//!
//! The common path (room available) is one compare-and-swap and a load, as before: no
//! allocation, no lock. Only a queued request allocates its job.

use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Requests in flight per handle at most (sent and not yet completed): below the
/// smallest wake-up pipe the C client can get (4,096 bytes), with room for the wake-ups it
/// writes for itself. A request beyond it is queued and sent as room is made, in order
/// (see [`ZooKeeper`](crate::ZooKeeper)).
pub const MAX_IN_FLIGHT: usize = 4_000;

/// A queued request: sends it with the place it was given.
pub(crate) type Job = Box<dyn FnOnce(Permit) + Send>;

pub(crate) struct InFlight {
    /// Places held, including those handed to a job that has not run yet.
    count: AtomicUsize,
    limit: usize,
    /// Jobs queued, ready or running, read without the lock by every release and submit.
    waiting: AtomicUsize,
    /// Jobs ready to run (given a place), read without the lock after every completion.
    ready_len: AtomicUsize,
    queue: Mutex<Queue>,
    /// What the server's answers tell of its session clock (see `liveness.rs`).
    pub(crate) liveness: crate::liveness::Liveness,
}

#[derive(Default)]
struct Queue {
    /// In the order the requests were made.
    waiting: VecDeque<Job>,
    /// Given a place, in the order they got it.
    ready: VecDeque<Job>,
    /// A thread is running ready jobs.
    running: bool,
}

thread_local! {
    static ON_IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a completion the C client calls on its IO thread, with its lock held)
/// where no queued job may run.
pub(crate) fn io_thread<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            ON_IO_THREAD.with(|flag| flag.set(self.0));
        }
    }
    let _reset = Reset(ON_IO_THREAD.with(|flag| flag.replace(true)));
    f()
}

/// One request's place in flight; freed when dropped.
pub(crate) struct Permit(Option<Arc<InFlight>>);

impl InFlight {
    pub(crate) fn new(limit: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            count: AtomicUsize::new(0),
            limit,
            waiting: AtomicUsize::new(0),
            ready_len: AtomicUsize::new(0),
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

    /// A place now, if one is free and no earlier request is queued for one.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        // A newcomer may not pass a queued request: free places are theirs first.
        if self.waiting.load(Ordering::SeqCst) == 0 && self.try_take() {
            return Some(Permit(Some(Arc::clone(self))));
        }
        None
    }

    /// Queues `job` to run once it gets a place (never waits), then runs what is ready.
    pub(crate) fn enqueue(self: &Arc<Self>, job: Job) {
        {
            let mut queue = self.queue.lock();
            queue.waiting.push_back(job);
            self.waiting.fetch_add(1, Ordering::SeqCst);
            // A release that saw nothing queued freed its place: hand out what is free.
            self.hand_out(&mut queue);
        }
        self.run_ready();
    }

    /// Moves queued jobs to the ready list while places are free.
    fn hand_out(&self, queue: &mut Queue) {
        while !queue.waiting.is_empty() && self.try_take() {
            if let Some(job) = queue.waiting.pop_front() {
                queue.ready.push_back(job);
            }
        }
        self.ready_len.store(queue.ready.len(), Ordering::SeqCst);
        shrink(queue);
    }

    /// A place is given back: to the first queued job if there is one, else freed.
    fn release(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let mut queue = self.queue.lock();
            if let Some(job) = queue.waiting.pop_front() {
                // Handed over as it is: the count stays.
                queue.ready.push_back(job);
                self.ready_len.store(queue.ready.len(), Ordering::SeqCst);
                return;
            }
        }
        self.count.fetch_sub(1, Ordering::SeqCst);
        // A job queued after the look above, having seen no room, gets it. (It counts
        // itself in `waiting` before it looks at `count`, this thread the other way
        // round, all `SeqCst`: one of the two sees the other.)
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let mut queue = self.queue.lock();
            self.hand_out(&mut queue);
        }
    }

    /// Runs the ready jobs, in order, unless another thread is running them (it runs
    /// these too) or this is the C IO thread. One load when none is ready.
    pub(crate) fn run_ready(self: &Arc<Self>) {
        if self.ready_len.load(Ordering::SeqCst) == 0 || ON_IO_THREAD.with(Cell::get) {
            return;
        }
        loop {
            let job = {
                let mut queue = self.queue.lock();
                if queue.running {
                    return;
                }
                let Some(job) = queue.ready.pop_front() else {
                    return;
                };
                self.ready_len.store(queue.ready.len(), Ordering::SeqCst);
                queue.running = true;
                job
            };
            // Reset even if the job unwinds, so the queue is never stuck.
            let _running = Running(self);
            job(Permit(Some(Arc::clone(self))));
        }
    }

    /// Requests in flight now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Requests queued for a place now (including those about to run).
    pub(crate) fn queued(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// A job has run (sent its request, or failed it): it no longer holds newcomers back.
struct Running<'a>(&'a InFlight);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.queue.lock().running = false;
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Gives the queue's memory back once a burst of queued requests is gone.
fn shrink(queue: &mut Queue) {
    if queue.waiting.is_empty() && queue.waiting.capacity() > 64 {
        queue.waiting = VecDeque::new();
    }
    if queue.ready.is_empty() && queue.ready.capacity() > 64 {
        queue.ready = VecDeque::new();
    }
}

impl Permit {
    /// Frees the place and returns the bound it belonged to (to run what is ready once
    /// the caller was told).
    pub(crate) fn release(mut self) -> Option<Arc<InFlight>> {
        let in_flight = self.0.take()?;
        in_flight.release();
        Some(in_flight)
    }
}

impl Permit {
    /// The liveness record of the handle this place belongs to (`None` once released).
    pub(crate) fn liveness(&self) -> Option<&crate::liveness::Liveness> {
        self.0.as_ref().map(|in_flight| &in_flight.liveness)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(in_flight) = self.0.take() {
            in_flight.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_freed_place_goes_to_the_queued_job_not_to_a_newcomer() {
        let in_flight = InFlight::new(1);
        let held = in_flight.try_acquire().unwrap();
        let (ran, got) = mpsc::channel();
        in_flight.enqueue(Box::new(move |permit| ran.send(permit).unwrap()));
        assert!(got.try_recv().is_err(), "ran without a place");
        drop(held);
        // The place was handed to the job: a newcomer finds none until it has run.
        assert!(in_flight.try_acquire().is_none());
        in_flight.run_ready();
        let permit = got.try_recv().expect("the job ran");
        assert!(in_flight.try_acquire().is_none());
        drop(permit);
        assert_eq!(in_flight.count(), 0);
        assert!(in_flight.try_acquire().is_some());
    }

    #[test]
    fn queued_jobs_get_places_in_the_order_they_came() {
        let in_flight = InFlight::new(2);
        let held = [
            in_flight.try_acquire().unwrap(),
            in_flight.try_acquire().unwrap(),
        ];
        let (order, got) = mpsc::channel();
        for i in 0..8 {
            let order = order.clone();
            in_flight.enqueue(Box::new(move |permit| {
                order.send(i).unwrap();
                drop(permit); // completes at once: frees the place for the next
            }));
        }
        assert_eq!(in_flight.queued(), 8);
        drop(held);
        in_flight.run_ready();
        let order: Vec<usize> = got.try_iter().collect();
        assert_eq!(order, (0..8).collect::<Vec<_>>());
        assert_eq!(in_flight.count(), 0);
        assert_eq!(in_flight.queued(), 0);
    }

    #[test]
    fn no_job_runs_on_the_io_thread() {
        let in_flight = InFlight::new(1);
        let held = in_flight.try_acquire().unwrap();
        let (ran, got) = mpsc::channel();
        in_flight.enqueue(Box::new(move |permit| ran.send(permit).unwrap()));
        io_thread(|| {
            let in_flight = held.release().unwrap();
            in_flight.run_ready();
        });
        assert!(got.try_recv().is_err(), "ran on the IO thread");
        in_flight.run_ready();
        assert!(got.try_recv().is_ok());
    }
}
