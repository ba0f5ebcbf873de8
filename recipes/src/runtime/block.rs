//! Driving a future on the caller's thread: the blocking face of every recipe call.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Wakes the thread that drives a future: a flag and a condition variable (the classic
/// queue recipe's condition-variable pattern, with the future as the loop's body).
#[derive(Default)]
struct Parker {
    woken: Mutex<bool>,
    wake: Condvar,
}

impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *self.woken.lock() = true;
        self.wake.notify_one();
    }
}

thread_local! {
    // One per thread, reused: a blocking call costs no allocation for its parker. A
    // wake-up meant for an earlier call only makes a later one poll once more.
    static PARKER: Arc<Parker> = Arc::new(Parker::default());
    static IN_USE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the thread's shared parker free again when the outermost call ends.
struct ReleaseParker(bool);

impl Drop for ReleaseParker {
    fn drop(&mut self) {
        if !self.0 {
            IN_USE.with(|in_use| in_use.set(false));
        }
    }
}

/// Runs `future` to completion on this thread, parked between polls until a reply, a
/// watch event or a timer wakes it.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    // A call nested in another's poll (never one of ours) gets a parker of its own: it
    // must not take the outer call's wake-ups.
    let nested = IN_USE.with(|in_use| in_use.replace(true));
    let _release = ReleaseParker(nested);
    let parker = if nested {
        Arc::new(Parker::default())
    } else {
        PARKER.with(Arc::clone)
    };
    let waker = Waker::from(Arc::clone(&parker));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        let mut woken = parker.woken.lock();
        while !*woken {
            parker.wake.wait(&mut woken);
        }
        *woken = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn drives_a_future_woken_from_another_thread() {
        let started = Instant::now();
        block_on(crate::runtime::sleep_for(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(block_on(async { 7 }), 7);
    }
}
