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
use zookeeper_mt::{Error, ZooKeeper};

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
    let result = zk_harness::testing::within("close", WAIT, move || closer.close());
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
    assert_eq!(
        zk_harness::testing::within("close", WAIT, move || closer.close()),
        Ok(())
    );
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
    assert_eq!(
        zk_harness::testing::within("second close", WAIT, move || second.close()),
        Ok(())
    );
    assert!(zk.state().is_terminal());
    assert_eq!(zk.live_contexts(), 0);
    for request in pending {
        assert_eq!(request.wait_timeout(Duration::ZERO), Err(Error::Closed));
    }
    assert_eq!(closing.join().unwrap(), Ok(()));
    drop(proxy);
}

/// A waker that reports its name and the thread it ran on.
struct Recorder {
    name: &'static str,
    log: mpsc::Sender<(&'static str, thread::ThreadId)>,
}

impl Wake for Recorder {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.log.send((self.name, thread::current().id()));
    }
}

#[test]
fn an_add_auth_outcome_comes_on_the_completion_thread_after_earlier_replies() {
    let zk = connect_to(&hosts());
    let mut checked = 0;
    for round in 0..20 {
        let (log, logged) = mpsc::channel();
        let waker = |name| {
            Waker::from(Arc::new(Recorder {
                name,
                log: log.clone(),
            }))
        };
        let mut earlier = zk.get_children_async("/");
        let mut auth = zk.add_auth_async("digest", format!("user{round}:pw").as_bytes());
        let (earlier_waker, auth_waker) = (waker("earlier"), waker("auth"));
        // A future that is ready at its first poll is spent: keep its outcome (under
        // valgrind a reply can arrive before the first poll).
        let earlier_first =
            std::pin::Pin::new(&mut earlier).poll(&mut Context::from_waker(&earlier_waker));
        let auth_first = std::pin::Pin::new(&mut auth).poll(&mut Context::from_waker(&auth_waker));
        if earlier_first.is_pending() && auth_first.is_pending() {
            // Both wakers must run; then their order and thread are checked.
            let seen: Vec<_> = (0..2)
                .map(|_| logged.recv_timeout(WAIT).expect("a waker ran"))
                .collect();
            assert_eq!(
                seen.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
                ["earlier", "auth"],
                "round {round}: the auth's outcome overtook an earlier reply"
            );
            assert_eq!(
                seen[0].1, seen[1].1,
                "round {round}: the auth's waker ran on another thread than the replies'"
            );
            checked += 1;
        }
        let earlier = match earlier_first {
            std::task::Poll::Ready(outcome) => outcome,
            std::task::Poll::Pending => common::block_on(earlier),
        };
        let auth = match auth_first {
            std::task::Poll::Ready(outcome) => outcome,
            std::task::Poll::Pending => common::block_on(auth),
        };
        if let (Ok(_), Ok(())) = (&earlier, &auth) {
            continue;
        }
        // A connection loss in the round (seen once under AddressSanitizer) fails both,
        // in order; anything else is a failure.
        let lost = |error: &Error| error.is_connection_loss();
        assert!(
            earlier.as_ref().err().is_none_or(lost) && auth.as_ref().err().is_none_or(lost),
            "round {round}: earlier {earlier:?}, auth {auth:?}"
        );
        println!("round {round}: connection lost (earlier {earlier:?}, auth {auth:?})");
        zk.wait_connected(WAIT).unwrap();
    }
    assert!(
        checked > 0,
        "no round had both requests pending at their first poll"
    );
    zk.close().unwrap();
}

#[test]
fn a_waker_of_an_add_auth_cut_off_by_a_connection_loss_may_send_requests() {
    // At a connection loss the C client reports pending auths with its own lock held:
    // a waker that sends a request from there deadlocked the IO thread.
    let (proxy, zk) = stalled_session();
    let sender = zk.clone();
    let sent = Arc::new(Mutex::new(None));
    let sent_by_waker = Arc::clone(&sent);
    let task = InlineTask::new(move || {
        *sent_by_waker.lock().unwrap() = Some(sender.exists_async("/"));
    });
    let mut auth = zk.add_auth_async("digest", b"user:pw");
    poll_pending(&mut auth, &task);
    proxy.cut_all();
    proxy.resume();
    let outcome = zk_harness::testing::within("the auth's outcome", WAIT, move || auth.wait());
    assert_eq!(outcome, Err(Error::ConnectionLoss));
    let after = zk.clone();
    zk_harness::testing::within("a request after the reconnect", WAIT, move || {
        after.wait_connected(WAIT).unwrap();
        after.exists("/").unwrap();
    });
    let request = sent
        .lock()
        .unwrap()
        .take()
        .expect("the waker sent a request");
    let _ = request.wait_timeout(WAIT);
    zk.close().unwrap();
}

#[test]
fn add_auth_between_connections_is_a_connection_loss() {
    let proxy = FaultProxy::start(hosts()).expect("proxy");
    let zk = connect_to(&proxy.connect_string());
    proxy.isolate();
    let mut seen = Vec::new();
    for _ in 0..200 {
        match zk.add_auth_async("digest", b"user:pw").wait_timeout(WAIT) {
            Ok(()) => {}
            Err(error) => seen.push(error),
        }
    }
    assert!(
        seen.iter().all(|error| *error == Error::ConnectionLoss),
        "add_auth while disconnected: {seen:?}"
    );
    proxy.unblock();
    zk.close().unwrap();
}

#[test]
fn a_waker_waiting_for_a_session_event_fails_at_once() {
    // The waker of a request cut off by close waits for a session event on the completion
    // thread, which is the thread that would deliver it: it must not block there.
    let (proxy, zk) = stalled_session();
    let events = zk.session_events();
    let outcome = Arc::new(Mutex::new(None));
    let recorded = Arc::clone(&outcome);
    let task = InlineTask::new(move || {
        *recorded.lock().unwrap() = Some(events.recv_timeout(zookeeper_mt::Timeout::Never));
    });
    let mut pending = zk.exists_async("/");
    poll_pending(&mut pending, &task);
    let closer = zk.clone();
    assert_eq!(
        zk_harness::testing::within("close", WAIT, move || closer.close()),
        Ok(())
    );
    let outcome = outcome.lock().unwrap().take().expect("the waker ran");
    assert!(
        matches!(outcome, Err(Error::InvalidArgument(_)) | Err(Error::Closed)),
        "{outcome:?}"
    );
    drop(proxy);
}

#[test]
fn a_waker_waiting_for_the_connection_fails_at_once() {
    // Requests cut off by a connection loss complete on the completion thread; a waker
    // that waits there for the reconnection would keep the CONNECTED event from ever
    // being delivered.
    let (proxy, zk) = stalled_session();
    let waiter = zk.clone();
    let (report, reported) = mpsc::channel();
    let task = InlineTask::new(move || {
        let _ = report.send(waiter.wait_connected(zookeeper_mt::Timeout::Never));
    });
    let mut pending = zk.exists_async("/");
    poll_pending(&mut pending, &task);
    proxy.cut_all();
    proxy.resume();
    let outcome = reported
        .recv_timeout(WAIT)
        .expect("the waker of the cut-off request ran and returned");
    assert!(
        matches!(outcome, Err(Error::InvalidArgument(_))),
        "{outcome:?}"
    );
    assert_eq!(common::block_on(pending), Err(Error::ConnectionLoss));
    let reconnecting = zk.clone();
    let reconnected = zk_harness::testing::within("reconnecting", WAIT, move || {
        reconnecting.wait_connected(WAIT)
    });
    assert_eq!(reconnected, Ok(()));
    zk.close().unwrap();
}

#[test]
fn a_waker_waiting_on_a_watch_fails_at_once() {
    // The waker of a request cut off by close waits on a watch of the same handle, on
    // the thread that would deliver the watch's outcome.
    let proxy = FaultProxy::start(hosts()).expect("proxy");
    let zk = connect_to(&proxy.connect_string());
    let (_, watch) = zk.exists_watch("/zkrs-never-created-by-any-test").unwrap();
    proxy.stall();
    let (report, reported) = mpsc::channel();
    let task = InlineTask::new(move || {
        let _ = report.send(watch.wait());
    });
    let mut pending = zk.exists_async("/");
    poll_pending(&mut pending, &task);
    let closer = zk.clone();
    assert_eq!(
        zk_harness::testing::within("close", WAIT, move || closer.close()),
        Ok(())
    );
    let outcome = reported
        .recv_timeout(WAIT)
        .expect("the waker ran and returned");
    assert!(
        matches!(outcome, Err(Error::InvalidArgument(_)) | Err(Error::Closed)),
        "{outcome:?}"
    );
    drop(proxy);
}
