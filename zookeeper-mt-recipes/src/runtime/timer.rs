//! Timers without a runtime: one process-wide thread wakes the futures whose deadline has
//! come. It starts with the first pending timer and ends once none has been pending for
//! a second, so an idle process has no timer thread.

use parking_lot::{Condvar, Mutex};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use zookeeper_mt::Deadline;

/// How long the timer thread stays without a pending timer.
const LINGER: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Timers {
    /// Deadlines by time; an entry whose id is no longer in `wakers` is stale (dropped or
    /// re-armed) and skipped.
    queue: BinaryHeap<Reverse<(Instant, u64)>>,
    wakers: HashMap<u64, (Instant, Waker)>,
    next_id: u64,
    thread_running: bool,
}

static TIMERS: Mutex<Option<Timers>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

/// Registers (or refreshes) timer `id` for `at`; returns its id.
fn arm(id: Option<u64>, at: Instant, waker: &Waker) -> u64 {
    let mut guard = TIMERS.lock();
    let timers = guard.get_or_insert_with(Timers::default);
    let id = id.unwrap_or_else(|| {
        timers.next_id += 1;
        timers.next_id
    });
    let fresh = match timers.wakers.get_mut(&id) {
        Some((_, known)) => {
            if !known.will_wake(waker) {
                *known = waker.clone();
            }
            false
        }
        None => {
            timers.wakers.insert(id, (at, waker.clone()));
            timers.queue.push(Reverse((at, id)));
            true
        }
    };
    // Stale entries of dropped timers are purged once they outnumber the live ones.
    if timers.queue.len() > 64 + 2 * timers.wakers.len() {
        let live = &timers.wakers;
        timers
            .queue
            .retain(|Reverse((_, id))| live.contains_key(id));
    }
    if !timers.thread_running {
        let spawned = std::thread::Builder::new()
            .name("zk-recipe-timers".into())
            .spawn(run);
        match spawned {
            Ok(_) => timers.thread_running = true,
            Err(error) => log::error!("recipes: cannot start the timer thread: {error}"),
        }
    } else if fresh {
        CHANGED.notify_one();
    }
    id
}

fn disarm(id: u64) {
    let mut guard = TIMERS.lock();
    let Some(timers) = guard.as_mut() else { return };
    if timers.wakers.remove(&id).is_some() && timers.wakers.is_empty() {
        // Nothing left to wait for: let the thread see it and end after its linger.
        timers.queue.clear();
        CHANGED.notify_one();
    }
}

/// The timer thread: wakes what is due, sleeps until the next deadline.
fn run() {
    let mut guard = TIMERS.lock();
    loop {
        let Some(timers) = guard.as_mut() else { return };
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(Reverse((at, id))) = timers.queue.peek().copied() {
            // A dropped or re-armed timer's entry goes at once: the thread must not stay
            // for a deadline nobody waits for.
            let live = timers
                .wakers
                .get(&id)
                .is_some_and(|(armed_at, _)| *armed_at == at);
            if live && at > now {
                break;
            }
            timers.queue.pop();
            if live {
                if let Some((_, waker)) = timers.wakers.remove(&id) {
                    due.push(waker);
                }
            }
        }
        if !due.is_empty() {
            // Wakers are executor code: never run them with the lock held.
            drop(guard);
            due.into_iter().for_each(Waker::wake);
            guard = TIMERS.lock();
            continue;
        }
        let next = timers.queue.peek().map(|Reverse((at, _))| *at);
        match next {
            Some(at) => {
                CHANGED.wait_until(&mut guard, at);
            }
            None => {
                if CHANGED.wait_for(&mut guard, LINGER).timed_out() {
                    let timers = guard.as_mut().expect("timers exist while the thread runs");
                    if timers.queue.is_empty() {
                        timers.thread_running = false;
                        return;
                    }
                }
            }
        }
    }
}

/// A future that completes at `at` (never, for `None`).
pub(crate) struct Sleep {
    at: Option<Instant>,
    id: Option<u64>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(at) = self.at else {
            return Poll::Pending;
        };
        if Instant::now() >= at {
            if let Some(id) = self.id.take() {
                disarm(id);
            }
            return Poll::Ready(());
        }
        self.id = Some(arm(self.id, at, cx.waker()));
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            disarm(id);
        }
    }
}

/// Completes at `deadline` (never for [`Deadline::never`]).
pub(crate) fn sleep_until(deadline: Deadline) -> Sleep {
    sleep_at(deadline.instant())
}

/// Completes at `at` (never for `None`).
pub(crate) fn sleep_at(at: Option<Instant>) -> Sleep {
    Sleep { at, id: None }
}

/// Completes after `duration`.
pub(crate) fn sleep_for(duration: Duration) -> Sleep {
    sleep_until(Deadline::after(duration))
}

/// `future`'s output, or `None` if `deadline` comes first (the future is dropped then).
pub(crate) async fn until<F: Future>(deadline: Deadline, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut timer = sleep_until(deadline);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        match Pin::new(&mut timer).poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}
