//! Driving a future on the caller's thread: the blocking face of every recipe call.

use parking_lot::{Condvar, Mutex};
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Wakes the thread that drives a future: a flag and a condition variable (the classic
/// queue recipe's condition-variable pattern, with the future as the loop's body).
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

/// Runs `future` to completion on this thread, parked between polls until a reply, a
/// watch event or a timer wakes it.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let parker = Arc::new(Parker {
        woken: Mutex::new(false),
        wake: Condvar::new(),
    });
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
