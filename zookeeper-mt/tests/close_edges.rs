//! Close at its edges: a close handed to the closer thread (from a thread where the
//! client never waits) is decided when it returns, and a close inside `with_raw_handle`
//! on the same handle is refused instead of waiting for itself. Every wait is bounded.

mod common;

use zk_harness::testing::within;

use common::{connect, wait_for_stream_end, WAIT};
use std::sync::mpsc;
use std::thread;
use zookeeper_mt::{Error, ZooKeeper};

#[test]
fn calls_after_a_handed_off_close_fail_with_closed_at_once() {
    // The closer thread (one per process) is kept busy with handle `a`: a raw call on
    // another thread holds `a` open, so its close waits there. The close of `b`, handed
    // off after it, then returns long before the closer thread gets to it.
    let a = connect();
    let b = connect();
    let a_events = a.session_events();
    let b_events = b.session_events();
    let (entered, inside) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let holder = {
        let a = a.clone();
        thread::spawn(move || {
            // SAFETY: the closure does not use the pointer; it only waits on a channel.
            unsafe {
                a.with_raw_handle(|_| {
                    entered.send(()).unwrap();
                    let _ = released.recv_timeout(WAIT);
                })
            }
        })
    };
    inside.recv_timeout(WAIT).expect("the raw call started");
    let (a2, b2) = (a.clone(), b.clone());
    let closed = within("closes on a marked thread", WAIT, move || {
        zookeeper_mt::refuse_waits_on_this_thread();
        (a2.close(), b2.close())
    });
    assert_eq!(closed, (Ok(()), Ok(())));
    // The closes have returned: every later call, on any clone and thread, fails.
    for zk in [&a, &b] {
        assert_eq!(zk.exists("/"), Err(Error::Closed));
        assert_eq!(zk.clone().client_id(), Err(Error::Closed));
        // SAFETY: the closure is never run on a closing handle.
        let raw = unsafe { zk.with_raw_handle(|_| ()) };
        assert_eq!(raw, Err(Error::Closed));
    }

    release.send(()).unwrap();
    assert_eq!(holder.join().unwrap(), Ok(()));
    // The closer thread finishes both closes once the raw call has left.
    wait_for_stream_end(&a_events, WAIT);
    wait_for_stream_end(&b_events, WAIT);
    for zk in [&a, &b] {
        assert!(zk.state().is_terminal());
        assert_eq!(zk.live_contexts(), 0);
        assert_eq!(zk.close(), Ok(()));
    }
}

#[test]
fn close_inside_with_raw_handle_is_refused_not_deadlocked() {
    let zk = connect();
    let inner = zk.clone();
    let outcome = within("close inside with_raw_handle", WAIT, move || {
        let clone = inner.clone();
        // SAFETY: the closure does not use the pointer.
        let refused = unsafe { inner.with_raw_handle(|_| (inner.close(), clone.close())) };
        // The handle is still open afterwards, and closes normally.
        let open = inner.exists("/").map(|stat| stat.is_some());
        (refused, open, inner.close())
    });
    let (refused, open, closed) = outcome;
    let (own, clone) = refused.expect("the raw call ran");
    assert!(matches!(own, Err(Error::InvalidArgument(_))), "{own:?}");
    assert!(matches!(clone, Err(Error::InvalidArgument(_))), "{clone:?}");
    assert_eq!(open, Ok(true));
    assert_eq!(closed, Ok(()));
    assert_eq!(zk.exists("/"), Err(Error::Closed));
}

#[test]
fn close_of_another_handle_inside_with_raw_handle_still_closes_it() {
    let zk = connect();
    let other: ZooKeeper = connect();
    let probe = other.clone();
    let closed = within("closing another handle", WAIT, move || {
        // SAFETY: the closure does not use the pointer.
        unsafe { zk.with_raw_handle(|_| other.close()) }
    });
    assert_eq!(closed, Ok(Ok(())));
    assert_eq!(probe.exists("/"), Err(Error::Closed));
}
