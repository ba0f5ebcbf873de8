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

/// The error of a blocking recipe call made where it must not wait: the client's own
/// refusal (`InvalidArgument`, as its refused blocking waits report).
pub(crate) const REFUSED: zookeeper_mt::Error = zookeeper_mt::Error::InvalidArgument(
    "blocking recipe call on the C completion thread, the recipes' driver or inside a \
     close's sweep would stall it",
);

/// Whether a blocking call must fail at once here: on the C completion thread (only it
/// delivers the replies the call would wait for), inside a close's sweep, and on the
/// recipes' driver (its tasks would stall, and the task the call waits for may be one of
/// them).
pub(crate) fn refused_here() -> bool {
    zookeeper_mt::waiting_refused_here() || super::driver::on_driver_thread()
}

/// What a blocking call returns when refused.
pub(crate) trait Refusable {
    fn refused() -> Self;
}

impl<T> Refusable for crate::Result<T> {
    fn refused() -> Self {
        Err(crate::RecipeError::ZooKeeper(REFUSED))
    }
}

impl<T> Refusable for zookeeper_mt::Result<T> {
    fn refused() -> Self {
        Err(REFUSED)
    }
}

/// Runs `future` to completion on this thread, parked between polls until a reply, a
/// watch event or a timer wakes them; refused at once (the future is not polled) where
/// the thread must not wait ([`refused_here`]). The blocking face of every recipe call.
pub(crate) fn block_on<F>(future: F) -> F::Output
where
    F: Future,
    F::Output: Refusable,
{
    if refused_here() {
        return F::Output::refused();
    }
    drive(future)
}

/// Runs `future` to completion on this thread whatever the thread (for work that has
/// no other place to run, such as a cleanup whose driver cannot start).
pub(crate) fn drive<F: Future>(future: F) -> F::Output {
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
        drive(crate::runtime::sleep_for(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(block_on(async { Ok::<_, crate::RecipeError>(7) }), Ok(7));
    }

    #[test]
    fn refuses_inside_a_driver_task() {
        let (sender, received) = crossbeam_channel::bounded(1);
        let task = crate::runtime::spawn(
            "blocks",
            move |_stop| async move {
                let started = Instant::now();
                let result: crate::Result<()> = block_on(async {
                    crate::runtime::sleep_for(Duration::from_secs(5)).await;
                    Ok(())
                });
                sender.send((result, started.elapsed())).unwrap();
            },
            || {},
        )
        .unwrap();
        let (result, took) = received.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(result, Err(crate::RecipeError::ZooKeeper(REFUSED)));
        assert!(took < Duration::from_millis(500), "refused after {took:?}");
        task.join();
        // The driver runs on.
        let (done, finished) = crossbeam_channel::bounded(1);
        crate::runtime::spawn_detached("after", async move { done.send(()).unwrap() });
        finished.recv_timeout(Duration::from_secs(10)).unwrap();
    }

    #[test]
    fn refuses_on_a_marked_thread() {
        let refused = std::thread::spawn(|| {
            zookeeper_mt::refuse_waits_on_this_thread();
            let result: crate::Result<()> = block_on(std::future::pending());
            let counted: zookeeper_mt::Result<u8> = block_on(async { Ok(1) });
            (result, counted)
        })
        .join()
        .unwrap();
        assert_eq!(refused.0, Err(crate::RecipeError::ZooKeeper(REFUSED)));
        assert_eq!(refused.1, Err(REFUSED));
    }
}
