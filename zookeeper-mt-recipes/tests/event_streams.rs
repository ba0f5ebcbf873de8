//! The recipes' streams are one type, `EventStream`, that owns what feeds it (connection
//! states are the client crate's `ConnectionStates`: no task, fed while any clone
//! lives): a value stream stops its watch when dropped and ends with why the watch
//! stopped, a group's stream is owned and read as a `futures_core::Stream`.
//!
//! Alone in its binary: it counts the process's threads and tasks.

mod common;

use common::{connect, unique_path, wait_until};
use futures_core::Stream;
use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;
use zk_harness::executor::block_on;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt_recipes::events::RecvTimeoutError;
use zookeeper_mt_recipes::lifecycle::{connection_states, ConnectionState, ConnectionStates};
use zookeeper_mt_recipes::live_background_tasks;
use zookeeper_mt_recipes::nodes::{Group, GroupEvent, GroupLayout, GroupMember};
use zookeeper_mt_recipes::shared::SharedCount;
use zookeeper_mt_recipes::RecipeError;

const WAIT: Duration = Duration::from_secs(10);
const STREAMS: usize = 200;

/// The next item through the `Stream` impl.
async fn poll_next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}

#[test]
fn streams_own_their_producers_and_end_after_the_final_item() {
    let zk = connect();
    let doomed = connect();
    zk.exists("/").unwrap();
    let (tasks, threads_before, contexts) =
        (live_background_tasks(), threads(), zk.live_contexts());

    // Connection states: the client crate's stream, fed where the C client delivers
    // session events (no task, no thread), kept by its clones.
    let streams: Vec<ConnectionStates> = (0..STREAMS)
        .map(|i| connection_states(if i % 2 == 0 { &zk } else { &doomed }))
        .collect();
    let added = threads() - threads_before;
    assert!(added <= 4, "{added} threads for {STREAMS} streams");
    assert_eq!(
        live_background_tasks(),
        tasks,
        "no task for a connection stream"
    );
    let clones: Vec<_> = streams.iter().map(ConnectionStates::clone).collect();
    for stream in &streams {
        assert_eq!(
            stream.recv_timeout(WAIT).unwrap().state,
            ConnectionState::Connected
        );
    }
    drop(streams);
    doomed.close().unwrap();
    for clone in clones.iter().skip(1).step_by(2) {
        // Still fed after the original was dropped: the close is reported, then the end.
        assert_eq!(
            clone.recv_timeout(WAIT).unwrap().state,
            ConnectionState::Lost
        );
        assert_eq!(
            clone.recv_timeout(WAIT),
            Err(RecvTimeoutError::Disconnected)
        );
        assert!(clone.is_ended());
    }
    drop(clones);
    assert_eq!(live_background_tasks(), tasks);

    // A value watch as a stream: read through the `Stream` impl; dropping it stops the
    // watch; a watch that stops by itself ends with why.
    let base = unique_path("streams");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &base).unwrap();
    let count = SharedCount::new(&zk, &format!("{base}/count"), 1).unwrap();
    let mut values = count.watch().unwrap().into_stream();
    assert_eq!(live_background_tasks(), tasks + 1);
    block_on(async {
        assert_eq!(poll_next(&mut values).await.unwrap().unwrap().value, 1);
        count.set(2).unwrap();
        count.set(3).unwrap();
        let mut last = 1;
        while last != 3 {
            let value = values.next().await.unwrap().unwrap().value;
            assert!(value > last, "values in order, none twice");
            last = value;
        }
    });
    drop(values);
    // Dropping the last clone stops the watch without waiting for its task, which ends
    // on the driver a moment later.
    wait_until("dropping the stream stops it", || {
        live_background_tasks() == tasks
    });
    wait_until("its watch was removed", || {
        zk.exists("/").unwrap();
        zk.live_contexts() == contexts
    });

    let own = connect();
    let values = SharedCount::new(&own, &format!("{base}/count"), 0)
        .unwrap()
        .watch()
        .unwrap()
        .into_stream();
    own.set(&format!("{base}/count"), &7i32.to_be_bytes(), None)
        .unwrap();
    own.close().unwrap();
    let items: Vec<_> = values.iter().collect();
    let (end, before) = items.split_last().expect("items before the end");
    assert!(
        matches!(end, Err(e) if !matches!(e, RecipeError::Corrupt(_))),
        "the end's reason last: {items:?}"
    );
    assert!(before.iter().all(Result::is_ok), "values first: {items:?}");
    assert!(values.is_ended() && values.is_empty());

    // A group's stream is owned: it outlives the borrow, and the group's end.
    let group = Group::watch(&zk, &format!("{base}/group"), GroupLayout::default()).unwrap();
    let mut events = group.events().clone();
    group.wait_initialized(WAIT).unwrap();
    let member = GroupMember::new(&zk, &format!("{base}/group"), "m1", b"").unwrap();
    block_on(async {
        loop {
            match poll_next(&mut events).await.unwrap() {
                GroupEvent::Joined(joined) => break assert_eq!(joined.id, "m1"),
                GroupEvent::Initialized => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    });
    member.leave();
    group.close();
    let rest: Vec<_> = block_on(async {
        let mut rest = Vec::new();
        while let Some(event) = events.next().await {
            rest.push(event);
        }
        rest
    });
    assert!(
        rest.iter().all(|e| matches!(e, GroupEvent::Left(_))),
        "{rest:?}"
    );
    wait_until("every task to end", || live_background_tasks() == tasks);
    zk.exists("/").unwrap();
    assert_eq!(zk.live_contexts(), contexts, "a watch was left armed");
}
