//! Waiting for a change of shared state without a thread: the async twin of a condition
//! variable. The side that changes the state calls [`Wakers::wake_all`] after the change;
//! a waiter registers before it looks, so no change can fall between the two.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// The tasks waiting for a change of some state.
#[derive(Default)]
pub(crate) struct Wakers {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    waiting: HashMap<u64, Waker>,
}

impl Wakers {
    /// Wakes every waiter (call after changing the state, outside its lock or not).
    pub(crate) fn wake_all(&self) {
        let woken: Vec<Waker> = self.inner.lock().waiting.drain().map(|(_, w)| w).collect();
        woken.into_iter().for_each(Waker::wake);
    }

    /// Waiters registered now (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().waiting.len()
    }

    /// Completes with `ready()`'s value once it has one, looking again after each
    /// [`wake_all`](Self::wake_all). Dropped, it leaves nothing registered.
    pub(crate) fn until<T, F: FnMut() -> Option<T>>(&self, ready: F) -> Until<'_, F> {
        Until {
            wakers: self,
            id: None,
            ready,
        }
    }
}

/// The future of [`Wakers::until`].
pub(crate) struct Until<'a, F> {
    wakers: &'a Wakers,
    id: Option<u64>,
    ready: F,
}

impl<T, F: FnMut() -> Option<T> + Unpin> Future for Until<'_, F> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        {
            let mut registry = this.wakers.inner.lock();
            let id = *this.id.get_or_insert_with(|| {
                registry.next_id += 1;
                registry.next_id
            });
            match registry.waiting.get_mut(&id) {
                Some(known) if known.will_wake(cx.waker()) => {}
                Some(known) => known.clone_from(cx.waker()),
                None => {
                    registry.waiting.insert(id, cx.waker().clone());
                }
            }
        }
        // Registered first: a change after this look wakes us.
        match (this.ready)() {
            Some(value) => {
                if let Some(id) = this.id.take() {
                    this.wakers.inner.lock().waiting.remove(&id);
                }
                Poll::Ready(value)
            }
            None => Poll::Pending,
        }
    }
}

impl<F> Drop for Until<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.wakers.inner.lock().waiting.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn wakes_on_change_and_leaves_nothing_when_dropped() {
        let wakers = Arc::new(Wakers::default());
        let value = Arc::new(AtomicU32::new(0));
        let (w, v) = (Arc::clone(&wakers), Arc::clone(&value));
        let setter = std::thread::spawn(move || {
            for n in 1..=3 {
                v.store(n, Ordering::SeqCst);
                w.wake_all();
            }
        });
        let seen = crate::runtime::drive(wakers.until(|| {
            let n = value.load(Ordering::SeqCst);
            (n == 3).then_some(n)
        }));
        assert_eq!(seen, 3);
        setter.join().unwrap();
        let mut pending = Box::pin(wakers.until(|| None::<()>));
        let mut cx = Context::from_waker(crate::runtime::noop_waker());
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakers.inner.lock().waiting.len(), 1);
        drop(pending);
        assert!(wakers.inner.lock().waiting.is_empty());
    }
}
