//! A single-threaded hand-rolled executor for one future: it polls, then sleeps on a
//! condition variable until the future's waker fires (never busy-waits), and measures
//! every poll, so a test can assert that no poll blocks its thread.
#![allow(dead_code)]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

struct Signal {
    woken: Mutex<bool>,
    changed: Condvar,
    wakes: AtomicUsize,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        *self.woken.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

/// What driving a future measured.
#[derive(Debug)]
pub struct Driven<T> {
    pub output: T,
    pub polls: usize,
    pub wakes: usize,
    pub longest_poll: Duration,
    pub elapsed: Duration,
}

/// Polls `future` on this thread until it is ready; panics if that takes longer than
/// `bound` (the future was never woken, or is stuck).
pub fn drive<F: Future>(future: F, bound: Duration) -> Driven<F::Output> {
    let signal = Arc::new(Signal {
        woken: Mutex::new(false),
        changed: Condvar::new(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(Arc::clone(&signal));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    let started = Instant::now();
    let deadline = started + bound;
    let (mut polls, mut longest_poll) = (0, Duration::ZERO);
    loop {
        *signal.woken.lock().unwrap() = false;
        let poll_started = Instant::now();
        let outcome = future.as_mut().poll(&mut cx);
        longest_poll = longest_poll.max(poll_started.elapsed());
        polls += 1;
        if let Poll::Ready(output) = outcome {
            return Driven {
                output,
                polls,
                wakes: signal.wakes.load(Ordering::SeqCst),
                longest_poll,
                elapsed: started.elapsed(),
            };
        }
        let mut woken = signal.woken.lock().unwrap();
        while !*woken {
            let now = Instant::now();
            assert!(now < deadline, "the future was not woken within {bound:?}");
            woken = signal
                .changed
                .wait_timeout(woken, deadline - now)
                .unwrap()
                .0;
        }
    }
}

/// Polls `future` once with a waker that only counts (the first poll of a drop test).
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let signal = Arc::new(Signal {
        woken: Mutex::new(false),
        changed: Condvar::new(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(signal);
    std::pin::Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// Threads of this process now (from `/proc/self/status`).
pub fn thread_count() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// A connect string whose port refuses connections (bound, then released).
pub fn refused_hosts() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("127.0.0.1:{port}")
}

/// A waker that counts its wakes, and the count.
pub fn counting_waker() -> (Waker, Arc<AtomicUsize>) {
    let signal = Arc::new(Signal {
        woken: Mutex::new(false),
        changed: Condvar::new(),
        wakes: AtomicUsize::new(0),
    });
    let count = Arc::new(AtomicUsize::new(0));
    struct Counting(Arc<AtomicUsize>, Arc<Signal>);
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.wake_by_ref();
        }
    }
    (
        Waker::from(Arc::new(Counting(Arc::clone(&count), signal))),
        count,
    )
}
