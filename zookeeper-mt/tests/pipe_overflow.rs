//! A burst of pipelined requests never makes the C client drop its connection.
//!
//! Every `zoo_a*` call writes a byte to the C client's wake-up pipe; when the pipe is
//! full the C client closes its own socket from the submitting thread and fails every
//! request in flight. The pipe is shrunk here to the 4,096 bytes a process past its
//! pipe-buffer soft limit gets, and bursts far above that are sent from two threads:
//! the binding's bound on requests in flight must keep every request alive. (Its own
//! binary: it finds the handle's pipe among the process's descriptors.)

mod common;

use common::{hosts, WAIT};
use std::collections::HashSet;
use std::thread;
use std::time::Duration;
use zookeeper_mt::{Error, SessionState, ZooKeeper, MAX_IN_FLIGHT};

/// The process's pipe descriptors.
fn pipes() -> HashSet<i32> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            let fd = entry.file_name().to_str()?.parse().ok()?;
            target.to_str()?.starts_with("pipe:").then_some(fd)
        })
        .collect()
}

#[test]
fn a_burst_far_above_a_small_pipe_loses_no_request() {
    let hosts = hosts();
    let before = pipes();
    let zk = ZooKeeper::connect(&hosts, Duration::from_secs(10)).unwrap();
    let mut shrunk = 0;
    for fd in pipes().difference(&before) {
        // SAFETY: an open pipe descriptor of this process; F_SETPIPE_SZ takes an int.
        let size = unsafe { libc::fcntl(*fd, libc::F_SETPIPE_SZ, 4096) };
        if size >= 0 {
            assert!(size <= 4096, "the pipe kept {size} bytes");
            shrunk += 1;
        }
    }
    assert!(shrunk > 0, "the handle's wake-up pipe was not found");
    let events = zk.session_events();

    let per_thread = 20_000;
    let outcomes: Vec<Vec<Result<(), Error>>> = (0..2)
        .map(|_| {
            let zk = zk.clone();
            thread::spawn(move || {
                let pending: Vec<_> = (0..per_thread).map(|_| zk.exists_async("/")).collect();
                pending
                    .into_iter()
                    .map(|request| request.wait_timeout(WAIT).map(drop))
                    .collect()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|burst| burst.join().unwrap())
        .collect();
    let failed: Vec<&Error> = outcomes
        .iter()
        .flatten()
        .filter_map(|outcome| outcome.as_ref().err())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed, first: {:?}",
        failed.len(),
        2 * per_thread,
        failed.first()
    );
    let lost: Vec<_> = events
        .try_iter()
        .filter(|event| event.state != SessionState::Connected)
        .collect();
    assert!(lost.is_empty(), "the connection dropped: {lost:?}");
    assert!(zk.requests_in_flight() <= MAX_IN_FLIGHT);
    assert_eq!(zk.requests_in_flight(), 0);
    zk.close().unwrap();
}
