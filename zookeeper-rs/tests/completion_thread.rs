//! What user code may do from a waker: wakers run on the C completion thread (or, for
//! what close itself ends, on the closing thread), and a waker that runs its task inline
//! may close the handle or wait there. None of it may hang: each case runs with a bound
//! and fails instead.

mod common;

use common::{connect_to, hosts, WAIT};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::Duration;
use zk_harness::FaultProxy;
use zookeeper::{Error, ZooKeeper};

/// Runs `body` on its own thread and fails the test if it does not return within
/// `WAIT` (a deadlock), instead of hanging the test binary.
fn within_bound<T: Send + 'static>(what: &str, body: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(body());
    });
    finished
        .recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("{what} did not return within {WAIT:?}: deadlock"))
}

/// A waker that, when woken, runs `action` once, inline, on whichever thread wakes it.
struct InlineTask {
    action: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    woken: AtomicBool,
}

impl InlineTask {
    fn new(action: impl FnOnce() + Send + 'static) -> Arc<InlineTask> {
        Arc::new(InlineTask {
            action: Mutex::new(Some(Box::new(action))),
            woken: AtomicBool::new(false),
        })
    }
}

impl Wake for InlineTask {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let action = self.action.lock().unwrap().take();
        if let Some(action) = action {
            action();
        }
    }
}

/// Polls `future` once with `task`'s waker; asserts it is pending.
fn poll_pending<F: Future + Unpin>(future: &mut F, task: &Arc<InlineTask>) {
    let waker = Waker::from(Arc::clone(task));
    let pending = std::pin::Pin::new(future)
        .poll(&mut Context::from_waker(&waker))
        .is_pending();
    assert!(pending, "the first poll should be pending");
}

/// A session whose server never answers: every request stays pending until close.
fn stalled_session() -> (FaultProxy, ZooKeeper) {
    let proxy = FaultProxy::start(hosts()).expect("proxy");
    let zk = connect_to(&proxy.connect_string());
    proxy.stall();
    (proxy, zk)
}

#[test]
fn a_waker_closing_a_clone_while_another_thread_closes_does_not_deadlock() {
    // The close on the main thread makes C deliver the pending request's ZCLOSING
    // completion on the completion thread; its waker closes another clone there, while
    // the main thread waits in `zookeeper_close` to join that thread.
    let (proxy, zk) = stalled_session();
    let clone = zk.clone();
    let task = InlineTask::new(move || {
        let _ = clone.close();
    });
    let mut pending = zk.exists_async("/");
    poll_pending(&mut pending, &task);
    let closer = zk.clone();
    let result = within_bound("close", move || closer.close());
    assert_eq!(result, Ok(()));
    assert!(task.woken.load(Ordering::SeqCst));
    assert_eq!(common::block_on(pending), Err(Error::Closed));
    assert_eq!(zk.live_contexts(), 0);
    drop(proxy);
}

#[test]
fn a_waker_run_by_the_final_sweep_may_close_again() {
    // A watch ends when the handle closes: its waker runs on the closing thread, inside
    // the close, and closes a clone again.
    let zk = connect_to(&hosts());
    let (_, mut watch) = zk.exists_watch("/zkrs-never-created-by-any-test").unwrap();
    let clone = zk.clone();
    let closed_again = Arc::new(Mutex::new(None));
    let outcome = Arc::clone(&closed_again);
    let task = InlineTask::new(move || {
        *outcome.lock().unwrap() = Some(clone.close());
    });
    poll_pending(&mut watch, &task);
    let closer = zk.clone();
    assert_eq!(within_bound("close", move || closer.close()), Ok(()));
    assert!(task.woken.load(Ordering::SeqCst));
    assert_eq!(*closed_again.lock().unwrap(), Some(Ok(())));
    assert_eq!(common::block_on(watch), Err(Error::Closed));
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn a_second_close_returns_once_the_first_has_finished() {
    let (proxy, zk) = stalled_session();
    let pending: Vec<_> = (0..100).map(|_| zk.exists_async("/")).collect();
    let first = zk.clone();
    let closing = thread::spawn(move || first.close());
    // Whichever close takes the handle, both return only once it is closed.
    let second = zk.clone();
    assert_eq!(within_bound("second close", move || second.close()), Ok(()));
    assert!(zk.state().is_terminal());
    assert_eq!(zk.live_contexts(), 0);
    for request in pending {
        assert_eq!(request.wait_timeout(Duration::ZERO), Err(Error::Closed));
    }
    assert_eq!(closing.join().unwrap(), Ok(()));
    drop(proxy);
}
