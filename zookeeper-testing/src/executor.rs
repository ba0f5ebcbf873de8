//! A minimal executor for tests of async code: drive a future on the test's thread with
//! a thread-parking waker (no runtime), or poll it once.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long [`block_on`] waits before it fails the test.
pub const BLOCK_ON_LIMIT: Duration = Duration::from_secs(120);

struct ThreadWaker {
    thread: Thread,
    woken: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Drives `future` to completion on this thread; panics if it takes longer than
/// [`BLOCK_ON_LIMIT`] (a test that hangs fails instead).
pub fn block_on<F: Future>(future: F) -> F::Output {
    block_on_timeout(future, BLOCK_ON_LIMIT).expect("the future did not complete in time")
}

/// Like [`block_on`]; `None` if `timeout` passes first.
pub fn block_on_timeout<F: Future>(future: F, timeout: Duration) -> Option<F::Output> {
    let deadline = Instant::now() + timeout;
    let mut future = pin!(future);
    let state = Arc::new(ThreadWaker {
        thread: thread::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(Arc::clone(&state));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return Some(value);
        }
        // Park until woken (a spurious unpark just polls again).
        while !state.woken.swap(false, Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            thread::park_timeout(deadline - now);
        }
    }
}

/// Polls `future` once with a waker that does nothing.
pub fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    std::pin::Pin::new(future).poll(&mut Context::from_waker(&waker))
}
