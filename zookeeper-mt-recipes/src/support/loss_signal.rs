//! How a holder hears of its loss: [`LossSignal`], a future (and blocking wait) every
//! guard's `lost()` returns, fed by the guard's [`LossSource`].
//!
//! One source per hold; each signal is one slot in it (at most one waker), removed when
//! the signal is dropped, so signals made and dropped cost nothing afterwards. The
//! source settles once: the first outcome (a loss, or the hold's end without one)
//! counts for every signal, made before or after. Wakers are never run under a lock:
//! settling hands them back as [`Wakes`], which the caller drops once its own locks are
//! released.

use crate::runtime::{block_on, until};
use crate::{RecipeError, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use zookeeper_mt::Timeout;

/// The loss of a hold (a lock, a permit, a lease, a term of leadership), as a value:
/// what a guard's `lost()` returns. Each call makes an independent signal.
///
/// - As a [`Future`] (`Output = Option<R>`), on any executor and in `select!` (by value
///   or `&mut`; it is `Unpin`): `Some(reason)` as soon as the loss is known (at once if
///   it already is); `None` once the hold ended without a loss (released, relinquished,
///   the latch closed), or at once if there was no hold to lose.
/// - [`wait`](Self::wait) blocks for the same answer within a timeout.
/// - [`try_get`](Self::try_get) answers without waiting.
///
/// Dropping a signal unsubscribes it: no waker or slot stays behind.
///
/// ```no_run
/// # fn demo(guard: &zookeeper_mt_recipes::locks::LockGuard) -> zookeeper_mt_recipes::Result<()> {
/// use std::time::Duration;
/// match guard.lost().wait(Duration::from_secs(1)) {
///     Ok(Some(reason)) => println!("lost: {reason}"),
///     Ok(None) => println!("released"),
///     Err(_) => println!("still held after a second"),
/// }
/// # Ok(())
/// # }
/// ```
pub struct LossSignal<R> {
    /// `None`: settled at once with no loss (there is no hold).
    source: Option<Arc<Mutex<Slots<R>>>>,
    id: u64,
}

/// A source's state: its outcome once settled, and one slot per live signal.
struct Slots<R> {
    /// `Some(Some(reason))`: lost; `Some(None)`: ended without a loss.
    outcome: Option<Option<R>>,
    next_id: u64,
    /// The waker of each live signal (`None` until polled, and again after `wait`).
    wakers: HashMap<u64, Option<Waker>>,
}

impl<R: Clone> LossSignal<R> {
    /// A signal settled at once with no loss: there is no hold to lose.
    pub(crate) fn ended() -> LossSignal<R> {
        LossSignal {
            source: None,
            id: 0,
        }
    }

    /// The outcome if it is known now, without waiting: `None` while the hold lasts;
    /// `Some(Some(reason))` once it is lost; `Some(None)` once it ended without a loss.
    pub fn try_get(&self) -> Option<Option<R>> {
        match &self.source {
            Some(source) => source.lock().outcome.clone(),
            None => Some(None),
        }
    }

    /// Blocks until the outcome is known (as the future's output), at most `timeout`:
    /// `Err(RecipeError::Timeout)` if it passes first. Like every blocking recipe call it
    /// fails at once with `RecipeError::ZooKeeper(InvalidArgument)` where the thread must
    /// not wait (the C completion thread, the recipes' driver, a close's sweep): await
    /// the signal there. Several threads may wait on one signal.
    pub fn wait(&self, timeout: impl Into<Timeout>) -> Result<Option<R>> {
        let deadline = timeout.into().deadline();
        block_on(async {
            // An own slot: concurrent waits each keep their waker, and none stays after.
            let mut own = self.clone();
            until(deadline, &mut own).await.ok_or(RecipeError::Timeout)
        })
    }
}

fn counts<R>(slots: &Slots<R>) -> (usize, usize) {
    let wakers = slots.wakers.values().filter(|w| w.is_some()).count();
    (slots.wakers.len(), wakers)
}

impl<R: Clone> Clone for LossSignal<R> {
    /// Another independent signal of the same hold.
    fn clone(&self) -> Self {
        match &self.source {
            Some(source) => subscribe(source),
            None => LossSignal::ended(),
        }
    }
}

impl<R: Clone> Future for LossSignal<R> {
    type Output = Option<R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<R>> {
        let this = self.get_mut();
        let Some(source) = &this.source else {
            return Poll::Ready(None);
        };
        let replaced = {
            let mut slots = source.lock();
            if let Some(outcome) = &slots.outcome {
                return Poll::Ready(outcome.clone());
            }
            let slot = slots.wakers.entry(this.id).or_default();
            match slot {
                Some(waker) if waker.will_wake(cx.waker()) => None,
                _ => slot.replace(cx.waker().clone()),
            }
        };
        // A waker's drop may run code of its executor: never under the lock.
        drop(replaced);
        Poll::Pending
    }
}

impl<R> Drop for LossSignal<R> {
    fn drop(&mut self) {
        if let Some(source) = &self.source {
            let slot = source.lock().wakers.remove(&self.id);
            drop(slot);
        }
    }
}

impl<R: fmt::Debug + Clone> fmt::Debug for LossSignal<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("outcome", &self.try_get())
            .finish()
    }
}

fn subscribe<R>(source: &Arc<Mutex<Slots<R>>>) -> LossSignal<R> {
    let mut slots = source.lock();
    let id = slots.next_id;
    slots.next_id += 1;
    slots.wakers.insert(id, None);
    drop(slots);
    LossSignal {
        source: Some(Arc::clone(source)),
        id,
    }
}

/// The feeding side of a hold's signals (one per guard or term). Settles once.
pub(crate) struct LossSource<R> {
    slots: Arc<Mutex<Slots<R>>>,
}

impl<R> Default for LossSource<R> {
    fn default() -> Self {
        LossSource {
            slots: Arc::new(Mutex::new(Slots {
                outcome: None,
                next_id: 0,
                wakers: HashMap::new(),
            })),
        }
    }
}

impl<R> fmt::Debug for LossSource<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (signals, wakers) = counts(&self.slots.lock());
        f.debug_struct("LossSource")
            .field("signals", &signals)
            .field("wakers", &wakers)
            .finish()
    }
}

impl<R: Clone> LossSource<R> {
    /// A new signal of this hold (settled at once if the hold is).
    pub(crate) fn signal(&self) -> LossSignal<R> {
        subscribe(&self.slots)
    }

    /// The hold is lost for `reason` (unless it was settled before). The signals'
    /// wakers are handed back, to be woken once the caller's locks are released.
    pub(crate) fn lose(&self, reason: R, wakes: &mut Wakes) {
        self.settle(Some(reason), wakes);
    }

    /// The hold ended without a loss (unless it was settled before): the signals
    /// resolve to `None`.
    pub(crate) fn end(&self, wakes: &mut Wakes) {
        self.settle(None, wakes);
    }

    fn settle(&self, outcome: Option<R>, wakes: &mut Wakes) {
        let mut slots = self.slots.lock();
        if slots.outcome.is_some() {
            return;
        }
        slots.outcome = Some(outcome);
        wakes
            .0
            .extend(slots.wakers.values_mut().filter_map(Option::take));
    }

    /// How many signals of this hold live, and how many of them hold a waker.
    pub(crate) fn counts(&self) -> (usize, usize) {
        counts(&self.slots.lock())
    }
}

impl<R> Drop for LossSource<R> {
    /// A hold dropped unsettled ended without a loss (as a dropped sender disconnected
    /// its receivers): its signals resolve to `None`.
    fn drop(&mut self) {
        let wakers: Vec<Waker> = {
            let mut slots = self.slots.lock();
            if slots.outcome.is_some() {
                return;
            }
            slots.outcome = Some(None);
            slots.wakers.values_mut().filter_map(Option::take).collect()
        };
        drop(Wakes(wakers));
    }
}

/// Wakers of settled signals, woken when this is dropped: declare it before taking the
/// locks under which a source is settled, so it drops (and wakes) after they are
/// released.
#[derive(Default)]
#[must_use = "dropping it wakes at once: keep it until the locks are released"]
pub(crate) struct Wakes(Vec<Waker>);

impl Wakes {
    pub(crate) fn new() -> Wakes {
        Wakes(Vec::new())
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        for waker in self.0.drain(..) {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::{Duration, Instant};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll<R: Clone>(signal: &mut LossSignal<R>, waker: &Waker) -> Poll<Option<R>> {
        Pin::new(signal).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn settles_once_for_every_signal_and_wakes_outside() {
        let source = LossSource::<u8>::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut a = source.signal();
        let b = source.signal();
        assert_eq!(poll(&mut a, &waker), Poll::Pending);
        assert_eq!(source.counts(), (2, 1));
        assert_eq!(b.try_get(), None);
        {
            let mut wakes = Wakes::new();
            source.lose(7, &mut wakes);
            source.end(&mut wakes); // too late: the loss counts
            assert_eq!(count.0.load(Ordering::SeqCst), 0, "not woken yet");
        }
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(poll(&mut a, &waker), Poll::Ready(Some(7)));
        assert_eq!(b.try_get(), Some(Some(7)));
        assert_eq!(source.signal().wait(Timeout::NOW), Ok(Some(7)));
        drop((a, b));
        assert_eq!(source.counts(), (0, 0));
    }

    #[test]
    fn a_dropped_or_waited_signal_leaves_nothing() {
        let source = LossSource::<u8>::default();
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        for _ in 0..10_000 {
            let mut signal = source.signal();
            assert_eq!(poll(&mut signal, &waker), Poll::Pending);
        }
        assert_eq!(source.counts(), (0, 0));
        let signal = source.signal();
        let started = Instant::now();
        assert_eq!(
            signal.wait(Duration::from_millis(30)),
            Err(RecipeError::Timeout)
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(source.counts(), (1, 0));
        let mut wakes = Wakes::new();
        source.end(&mut wakes);
        drop(wakes);
        assert_eq!(signal.wait(Timeout::Never), Ok(None));
        assert_eq!(LossSignal::<u8>::ended().try_get(), Some(None));
    }

    #[test]
    fn a_wait_is_woken_from_another_thread() {
        let source = Arc::new(LossSource::<u8>::default());
        let signal = source.signal();
        let settler = {
            let source = Arc::clone(&source);
            std::thread::spawn(move || {
                let mut wakes = Wakes::new();
                source.lose(3, &mut wakes);
            })
        };
        assert_eq!(signal.wait(Duration::from_secs(10)), Ok(Some(3)));
        settler.join().unwrap();
    }

    #[test]
    fn a_wait_is_refused_where_the_thread_must_not_wait() {
        let refused = std::thread::spawn(|| {
            zookeeper_mt::refuse_waits_on_this_thread();
            LossSource::<u8>::default()
                .signal()
                .wait(Duration::from_secs(5))
        })
        .join()
        .unwrap();
        assert_eq!(
            refused,
            Err(RecipeError::ZooKeeper(crate::runtime::REFUSED))
        );
    }

    fn assert_traits<T: Send + Sync + Unpin + 'static + fmt::Debug>() {}

    #[test]
    fn is_send_sync_unpin_debug() {
        assert_traits::<LossSignal<crate::locks::LockLost>>();
        assert_traits::<LossSignal<crate::leadership::LeadershipLost>>();
    }
}
