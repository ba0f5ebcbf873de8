//! `lost()` as a `LossSignal` against a real server: awaited among other futures on a
//! minimal executor (no runtime), resolved to `None` by a release, a blocking wait's
//! timeout and refusal, flat costs (10,000 signals made and dropped, no waker left by a
//! polled-then-dropped signal), and a leadership term's loss on session expiry.

mod common;

use common::{connect, connect_to, unique_path, Proxy};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use zk_harness::executor::{block_on_timeout, poll_once};
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::leadership::{LeaderElection, LeaderLatch, LeadershipLost};
use zookeeper_mt_recipes::locks::{Lock, LockLost};
use zookeeper_mt_recipes::{LossSignal, RecipeError, Semaphore};

/// Generous: the machine is shared and loaded.
const T: Duration = Duration::from_secs(60);

/// Which of two futures finished first, as `select!` would tell.
#[derive(Debug, PartialEq)]
enum First<A, B> {
    Left(A),
    Right(B),
}

/// A two-armed `select!` over `&mut` futures: polls both until one is ready.
async fn select<A, B>(left: &mut A, right: &mut B) -> First<A::Output, B::Output>
where
    A: Future + Unpin,
    B: Future + Unpin,
{
    poll_fn(|cx| {
        if let Poll::Ready(output) = Pin::new(&mut *left).poll(cx) {
            return Poll::Ready(First::Left(output));
        }
        if let Poll::Ready(output) = Pin::new(&mut *right).poll(cx) {
            return Poll::Ready(First::Right(output));
        }
        Poll::Pending
    })
    .await
}

/// A waker that counts its wakes.
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// Ends the session of `zk` on the server (cut off meanwhile): another handle takes it
/// over with its id and password and closes it.
fn expire(zk: &ZooKeeper) {
    let id = zk.client_id().unwrap();
    let taken = ZooKeeper::builder(&zk_harness::shared_test_connect_string())
        .session(id)
        .connect();
    match taken {
        Ok(thief) => thief.close().unwrap(),
        // Cut off for longer than its timeout (a loaded machine), it has expired already.
        Err(zookeeper_mt::Error::SessionExpired) => {}
        Err(error) => panic!("taking the session over: {error}"),
    }
}

#[test]
fn a_lock_guards_loss_is_awaited_in_a_select() {
    let zk = connect();
    let path = unique_path("signal-select");
    let lock = Lock::new(&zk, &path).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let other = Lock::new(&zk, &unique_path("signal-select-other")).unwrap();
    let held = other.acquire(Timeout::Never).unwrap();
    let mut lost = guard.lost();
    let mut unrelated = held.lost();
    // Not lost yet: pending, as in a `select!` branch that does not fire.
    assert_eq!(poll_once(&mut lost), Poll::Pending);
    assert_eq!(lost.try_get(), None);

    connect().delete(guard.node(), None).unwrap();
    let first = block_on_timeout(select(&mut unrelated, &mut lost), T).expect("in time");
    assert_eq!(first, First::Right(Some(LockLost::NodeDeleted)));
    // Once known, every signal is ready at once, by value or by reference.
    assert_eq!(lost.try_get(), Some(Some(LockLost::NodeDeleted)));
    assert_eq!(
        block_on_timeout(guard.lost(), T),
        Some(Some(LockLost::NodeDeleted))
    );
    assert_eq!(
        guard.lost().wait(Timeout::NOW),
        Ok(Some(LockLost::NodeDeleted))
    );
    assert_eq!(unrelated.try_get(), None, "the other guard still holds");
    assert!(matches!(guard.release(), Err(RecipeError::Lost(_))));
    held.release().unwrap();
    assert_eq!(unrelated.try_get(), Some(None));
}

#[test]
fn a_released_guards_signal_resolves_to_none_and_is_woken() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("signal-release")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let mut lost = guard.lost();
    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&counting));
    assert_eq!(poll_with(&mut lost, &waker), Poll::Pending);
    guard.release().unwrap();
    assert_eq!(counting.0.load(Ordering::SeqCst), 1, "woken by the release");
    assert_eq!(poll_with(&mut lost, &waker), Poll::Ready(None));

    // The same for a permit (the guards of the shared macro) and a lease-like hold.
    let semaphore = Semaphore::new(&zk, &unique_path("signal-permit"), 1).unwrap();
    let permit = semaphore.acquire(T).unwrap();
    let lost = permit.lost();
    assert_eq!(lost.try_get(), None);
    permit.release().unwrap();
    assert_eq!(lost.wait(T), Ok(None));
}

#[test]
fn a_wait_times_out_while_held_and_is_refused_where_it_must_not_wait() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("signal-timeout")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let lost = guard.lost();
    let started = Instant::now();
    assert_eq!(
        lost.wait(Duration::from_millis(100)),
        Err(RecipeError::Timeout)
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    let refused = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                zookeeper_mt::refuse_waits_on_this_thread();
                let started = Instant::now();
                (lost.wait(T), started.elapsed())
            })
            .join()
            .unwrap()
    });
    assert!(
        matches!(
            refused.0,
            Err(RecipeError::ZooKeeper(
                zookeeper_mt::Error::InvalidArgument(_)
            ))
        ),
        "{refused:?}"
    );
    assert!(refused.1 < Duration::from_secs(1), "refused at once");
    assert_eq!(
        guard.loss_signal_counts(),
        (1, 0),
        "the waits left no waker"
    );
    guard.release().unwrap();
}

#[test]
fn ten_thousand_dropped_signals_leave_the_baseline() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("signal-flat")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    drop(guard.lost()); // the first call has the monitor watch the node
    let baseline = guard.loss_signal_counts();
    assert_eq!(baseline, (0, 0));
    let semaphore = Semaphore::new(&zk, &unique_path("signal-flat-permit"), 1).unwrap();
    let permit = semaphore.acquire(T).unwrap();
    let latch = LeaderLatch::builder(&unique_path("signal-flat-latch"))
        .build(&zk)
        .unwrap();
    let term = latch.await_leadership(T).unwrap();
    let waker = Waker::from(Arc::new(Counting(AtomicUsize::new(0))));
    for i in 0..10_000 {
        let mut lock_signal = guard.lost();
        let mut permit_signal = permit.lost();
        let mut term_signal = term.lost();
        if i % 2 == 0 {
            assert!(poll_with(&mut lock_signal, &waker).is_pending());
            assert!(poll_with(&mut permit_signal, &waker).is_pending());
            assert!(poll_with(&mut term_signal, &waker).is_pending());
        }
    }
    assert_eq!(guard.loss_signal_counts(), baseline);
    assert_eq!(permit.loss_signal_counts(), (0, 0));
    assert_eq!(term.loss_signal_counts(), (0, 0));
    // Still served: a live signal is counted, and settled by the release.
    let lost = guard.lost();
    assert_eq!(guard.loss_signal_counts(), (1, 0));
    guard.release().unwrap();
    assert_eq!(lost.try_get(), Some(None));
    permit.release().unwrap();
    latch.close();
}

#[test]
fn a_polled_then_dropped_signal_leaves_no_waker() {
    let zk = connect();
    let lock = Lock::new(&zk, &unique_path("signal-waker")).unwrap();
    let guard = lock.acquire(Timeout::Never).unwrap();
    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let mut signal: LossSignal<LockLost> = guard.lost();
    {
        let waker = Waker::from(Arc::clone(&counting));
        assert!(poll_with(&mut signal, &waker).is_pending());
        assert!(poll_with(&mut signal, &waker).is_pending()); // one slot, kept
    }
    assert_eq!(
        Arc::strong_count(&counting),
        2,
        "the signal holds one waker"
    );
    assert_eq!(guard.loss_signal_counts(), (1, 1));
    drop(signal);
    assert_eq!(Arc::strong_count(&counting), 1, "no waker left behind");
    assert_eq!(guard.loss_signal_counts(), (0, 0));
    guard.release().unwrap();
    assert_eq!(counting.0.load(Ordering::SeqCst), 0, "nothing to wake");
}

#[test]
fn a_leadership_guards_loss_on_session_expiry() {
    let path = unique_path("signal-expiry");
    let proxy = Proxy::start(&zk_harness::shared_test_connect_string());
    let zk = connect_to(&proxy.addr);
    // A long grace: the first news is the server's verdict, not the dropped link.
    let latch = LeaderLatch::builder(&path)
        .disconnect_grace(Duration::from_secs(600))
        .build(&zk)
        .unwrap();
    let guard = latch.await_leadership(T).unwrap();
    let mut lost = guard.lost();
    let counting = Arc::new(Counting(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&counting));
    assert!(poll_with(&mut lost, &waker).is_pending());
    proxy.cut();
    expire(&zk);
    proxy.restore();
    // A blocking wait beside the polled signal (its own slot: the poll's waker stays).
    assert_eq!(lost.wait(T), Ok(Some(LeadershipLost::SessionExpired)));
    // Woken with the wait's waker, by the thread that settled the term (maybe just after).
    common::wait_until("the poll's waker woken", || {
        counting.0.load(Ordering::SeqCst) == 1
    });
    assert_eq!(
        poll_with(&mut lost, &waker),
        Poll::Ready(Some(LeadershipLost::SessionExpired))
    );
    assert_eq!(
        guard.lost().try_get(),
        Some(Some(LeadershipLost::SessionExpired))
    );
    latch.close();

    // An election candidate never seen leading has nothing to lose: `None` at once.
    let zk = connect();
    let candidate = LeaderElection::new(&zk, &unique_path("signal-election"), b"a").unwrap();
    assert_eq!(candidate.lost().try_get(), Some(None));
    candidate.wait_until_leader(T).unwrap();
    assert_eq!(candidate.lost().try_get(), None, "leading: not lost");
    assert_eq!(
        candidate.lost().wait(Duration::from_millis(50)),
        Err(RecipeError::Timeout)
    );
}

/// A waker that runs `then` when woken (as an executor's waker may run any code).
struct Runs<F: Fn() + Send + Sync + 'static>(F);

impl<F: Fn() + Send + Sync + 'static> Wake for Runs<F> {
    fn wake(self: Arc<Self>) {
        (self.0)()
    }
}

/// The first server of the shared ensemble, for a proxy in front of it.
fn first_server() -> String {
    let hosts = zk_harness::shared_test_connect_string();
    let server = hosts.split(',').next().unwrap();
    server.split('/').next().unwrap().to_string()
}

/// A waker woken by a loss asks the guard again at once (`is_lost`, `lost_reason`, a
/// new `lost()`): it runs after the state's locks are released, or it would deadlock
/// (the lock's session view on a disconnection, a permit's hold state, a term's state).
#[test]
fn a_woken_waker_may_ask_the_guard_again() {
    const BOUND: Duration = Duration::from_secs(20);
    let proxy = Proxy::start(&first_server());
    let zk = connect_to(&proxy.addr);
    let lock = Lock::new(&zk, &unique_path("reentrant-lock")).unwrap();
    let guard = Arc::new(lock.acquire(Timeout::Never).unwrap());
    let semaphore = Semaphore::new(&zk, &unique_path("reentrant-permit"), 1).unwrap();
    let permit = Arc::new(semaphore.acquire(T).unwrap());
    let latch = LeaderLatch::builder(&unique_path("reentrant-latch"))
        .build(&zk)
        .unwrap();
    let term = Arc::new(latch.await_leadership(T).unwrap());
    let (told, heard) = std::sync::mpsc::channel();

    let mut lock_signal = guard.lost();
    let lock_waker = {
        let (guard, told) = (Arc::clone(&guard), told.clone());
        Waker::from(Arc::new(Runs(move || {
            let lost = guard.is_lost();
            let again = guard.lost().try_get();
            told.send((
                "lock",
                lost,
                guard.lost_reason().is_some() && again.is_some(),
            ))
            .unwrap();
        })))
    };
    let mut permit_signal = permit.lost();
    let permit_waker = {
        let (permit, told) = (Arc::clone(&permit), told.clone());
        Waker::from(Arc::new(Runs(move || {
            let lost = permit.is_lost();
            let again = permit.lost().try_get();
            told.send(("permit", lost, again.is_some())).unwrap();
        })))
    };
    let mut term_signal = term.lost();
    let term_waker = {
        let (term, told) = (Arc::clone(&term), told.clone());
        Waker::from(Arc::new(Runs(move || {
            let lost = term.is_lost();
            let again = term.lost().try_get();
            told.send(("term", lost, again.is_some())).unwrap();
        })))
    };
    assert!(poll_with(&mut lock_signal, &lock_waker).is_pending());
    assert!(poll_with(&mut permit_signal, &permit_waker).is_pending());
    assert!(poll_with(&mut term_signal, &term_waker).is_pending());
    drop((lock_waker, permit_waker, term_waker));

    // Strict defaults: the dropped connection is the loss of all three.
    proxy.cut();
    let mut seen: Vec<_> = (0..3)
        .map(|_| {
            // A waker run under a state's lock deadlocks that lock (and every later
            // look at it, a guard's drop included): abort rather than hang.
            heard.recv_timeout(BOUND).unwrap_or_else(|_| {
                eprintln!("a woken waker could not ask its guard again: deadlocked");
                std::process::abort()
            })
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("lock", true, true),
            ("permit", true, true),
            ("term", true, true)
        ]
    );
    assert_eq!(lock_signal.try_get(), Some(Some(LockLost::Disconnected)));
    assert_eq!(permit_signal.try_get(), Some(Some(LockLost::Disconnected)));
    assert_eq!(
        term_signal.try_get(),
        Some(Some(LeadershipLost::Disconnected))
    );
    proxy.restore();
    latch.close();
}
