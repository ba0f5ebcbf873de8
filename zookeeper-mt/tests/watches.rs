//! Watches: each event type, one-shot delivery, registration rules (a failed read
//! registers nothing), removal, and context accounting.

mod common;

use common::{connect, create, create_mode, unique, WAIT};
use std::time::Duration;
use zookeeper_mt::{
    CreateMode, Error, EventType, SessionState, Watch, WatchRemoval, WatchedEvent, WatcherType,
};

fn fired(watch: &Watch) -> WatchedEvent {
    watch
        .wait_timeout(WAIT)
        .unwrap_or_else(|e| panic!("watch on {} did not fire: {e}", watch.path()))
}

fn assert_event(watch: &Watch, event_type: EventType, path: &str) {
    let event = fired(watch);
    assert_eq!(event.event_type, event_type, "{event:?}");
    assert_eq!(event.path, path);
    assert_eq!(event.state, SessionState::Connected);
    // One-shot: the channel ends after the event (once the C callback has returned).
    assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
}

#[test]
fn exists_watch_on_missing_node_fires_node_created() {
    let zk = connect();
    let path = unique("w-created");
    let (stat, watch) = zk.exists_watch(&path).unwrap();
    assert_eq!(stat, None);
    assert_eq!(watch.path(), path);
    // exists registers its watch on NoNode too.
    assert_eq!(zk.live_contexts(), 1);
    assert_eq!(watch.try_get(), Ok(None));

    let other = connect();
    create(&other, &path, b"");
    assert_event(&watch, EventType::NodeCreated, &path);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn node_data_changed_via_get_and_exists() {
    let zk = connect();
    let path = unique("w-changed");
    create(&zk, &path, b"v0");
    let (data, stat, by_get) = zk.get_watch(&path).unwrap();
    assert_eq!((data.as_slice(), stat.version), (&b"v0"[..], 0));
    let (stat, by_exists) = zk.exists_watch(&path).unwrap();
    assert!(stat.is_some());
    assert_eq!(zk.live_contexts(), 2);

    zk.set(&path, b"v1", None).unwrap();
    assert_event(&by_get, EventType::NodeDataChanged, &path);
    assert_event(&by_exists, EventType::NodeDataChanged, &path);

    // One-shot: a second change is not delivered (the watch is gone).
    zk.set(&path, b"v2", None).unwrap();
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn node_deleted_via_get_exists_and_children() {
    let zk = connect();
    let path = unique("w-deleted");
    create(&zk, &path, b"");
    let (_, _, by_get) = zk.get_watch(&path).unwrap();
    let (_, by_exists) = zk.exists_watch(&path).unwrap();
    let (_, by_children) = zk.get_children_watch(&path).unwrap();
    let other = connect();
    other.delete(&path, None).unwrap();
    assert_event(&by_get, EventType::NodeDeleted, &path);
    assert_event(&by_exists, EventType::NodeDeleted, &path);
    assert_event(&by_children, EventType::NodeDeleted, &path);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn node_children_changed_on_create_and_delete() {
    let zk = connect();
    let path = unique("w-children");
    create(&zk, &path, b"");
    let (kids, on_create) = zk.get_children_watch(&path).unwrap();
    assert!(kids.is_empty());
    let (kids, stat, on_create2) = zk.get_children2_watch(&path).unwrap();
    assert!(kids.is_empty());
    assert_eq!(stat.num_children, 0);
    let child = format!("{path}/kid");
    create_mode(&zk, &child, b"", CreateMode::Ephemeral);
    assert_event(&on_create, EventType::NodeChildrenChanged, &path);
    assert_event(&on_create2, EventType::NodeChildrenChanged, &path);

    let (kids, on_delete) = zk.get_children_watch(&path).unwrap();
    assert_eq!(kids, ["kid"]);
    // A data change of the parent or the child does not trigger a child watch.
    zk.set(&path, b"data", None).unwrap();
    zk.set(&child, b"data", None).unwrap();
    zk.sync(&path).unwrap();
    assert_eq!(
        on_delete.wait_timeout(Duration::from_millis(200)),
        Err(Error::Timeout)
    );
    zk.delete(&child, None).unwrap();
    assert_event(&on_delete, EventType::NodeChildrenChanged, &path);
}

#[test]
fn watches_on_one_path_each_fire_once() {
    let zk = connect();
    let path = unique("w-many");
    create(&zk, &path, b"");
    // One C registration serves them all; each watch still gets the event.
    let watches: Vec<Watch> = (0..10).map(|_| zk.get_watch(&path).unwrap().2).collect();
    assert_eq!(zk.live_contexts(), 1);
    zk.set(&path, b"x", None).unwrap();
    for watch in &watches {
        assert_event(watch, EventType::NodeDataChanged, &path);
    }
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn failed_watching_reads_register_nothing() {
    let zk = connect();
    let missing = unique("w-missing");
    assert_eq!(zk.live_contexts(), 0);
    for _ in 0..5 {
        assert_eq!(zk.get_watch(&missing).unwrap_err(), Error::NoNode);
        assert_eq!(zk.get_children_watch(&missing).unwrap_err(), Error::NoNode);
        assert_eq!(zk.get_children2_watch(&missing).unwrap_err(), Error::NoNode);
        assert_eq!(zk.live_contexts(), 0, "a failed read left a context behind");
    }
    // And no stray event comes when the node appears.
    let (_, created) = zk.exists_watch(&missing).unwrap();
    assert_eq!(zk.live_contexts(), 1);
    create(&zk, &missing, b"");
    assert_event(&created, EventType::NodeCreated, &missing);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn remove_watches_delivers_not_watching() {
    let zk = connect();
    let path = unique("w-remove");
    create(&zk, &path, b"");
    let (_, _, data1) = zk.get_watch(&path).unwrap();
    let (_, data2) = zk.exists_watch(&path).unwrap();
    let (_, children) = zk.get_children_watch(&path).unwrap();
    assert_eq!(zk.live_contexts(), 3);

    // Data watches only: the child watch stays.
    zk.remove_watches(&path, WatcherType::Data, WatchRemoval::Server)
        .unwrap();
    for watch in [&data1, &data2] {
        let event = fired(watch);
        assert_eq!(event.event_type, EventType::NotWatching);
        assert_eq!(event.path, path);
        assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
    }
    assert_eq!(zk.live_contexts(), 1);
    // The server forgot them: a data change is not delivered, a child change is.
    zk.set(&path, b"changed", None).unwrap();
    create(&zk, &format!("{path}/c"), b"");
    assert_event(&children, EventType::NodeChildrenChanged, &path);

    // Nothing left to remove: the server says so.
    assert_eq!(
        zk.remove_watches(&path, WatcherType::Any, WatchRemoval::Server),
        Err(Error::NoWatcher)
    );
    // Children watches, then all.
    let (_, children) = zk.get_children_watch(&path).unwrap();
    let (_, _, data) = zk.get_watch(&path).unwrap();
    zk.remove_watches(&path, WatcherType::Children, WatchRemoval::Server)
        .unwrap();
    assert_eq!(fired(&children).event_type, EventType::NotWatching);
    assert_eq!(data.try_get(), Ok(None));
    zk.remove_watches(&path, WatcherType::Any, WatchRemoval::Server)
        .unwrap();
    assert_eq!(fired(&data).event_type, EventType::NotWatching);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn remove_watches_local() {
    let zk = connect();
    let path = unique("w-remove-local");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    zk.remove_watches(&path, WatcherType::Any, WatchRemoval::Local)
        .unwrap();
    assert_eq!(fired(&watch).event_type, EventType::NotWatching);
    // The server still holds its watch; its event finds no watcher on the client.
    create(&zk, &path, b"");
    zk.sync(&path).unwrap();
    assert_eq!(watch.wait_timeout(WAIT), Err(Error::Closed));
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn remove_one_watch() {
    let zk = connect();
    let path = unique("w-remove-one");
    create(&zk, &path, b"");
    let (_, _, removed) = zk.get_watch(&path).unwrap();
    let (_, _, kept) = zk.get_watch(&path).unwrap();
    let (_, child) = zk.get_children_watch(&path).unwrap();
    zk.remove_watch(&removed).unwrap();
    let event = fired(&removed);
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NotWatching, path.as_str())
    );
    // Removing it again: it is gone.
    assert_eq!(zk.remove_watch(&removed), Err(Error::NoWatcher));
    assert_eq!(zk.remove_watch(&removed), Err(Error::NoWatcher));

    zk.set(&path, b"x", None).unwrap();
    assert_event(&kept, EventType::NodeDataChanged, &path);
    // A fired watch cannot be removed.
    assert_eq!(zk.remove_watch(&kept), Err(Error::NoWatcher));

    zk.remove_watch(&child).unwrap();
    assert_eq!(fired(&child).event_type, EventType::NotWatching);
    assert_eq!(zk.live_contexts(), 0);

    // A watch of another handle is refused.
    let other = connect();
    let (_, foreign) = other.exists_watch(&path).unwrap();
    assert!(matches!(
        zk.remove_watch(&foreign),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(foreign.try_get(), Ok(None));
}

#[test]
fn config_watch_registers_and_is_removable() {
    let zk = connect();
    let (data, _, watch) = zk.get_config_watch().unwrap();
    assert!(data.is_empty());
    assert_eq!(watch.path(), "/zookeeper/config");
    assert_eq!(zk.live_contexts(), 1);
    zk.remove_watch(&watch).unwrap();
    assert_eq!(fired(&watch).event_type, EventType::NotWatching);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn dropped_watches_are_freed_at_once() {
    let zk = connect();
    let path = unique("w-dropped");
    create(&zk, &path, b"");
    for _ in 0..20 {
        drop(zk.get_watch(&path).unwrap());
    }
    // Released on the client when the last watch on the path and kind goes.
    assert_eq!(zk.live_contexts(), 0);
    let (_, _, kept) = zk.get_watch(&path).unwrap();
    for _ in 0..20 {
        drop(zk.get_watch(&path).unwrap());
    }
    // Dropping watches that share a registration leaves it to the one still wanted.
    assert_eq!(zk.live_contexts(), 1);
    zk.set(&path, b"x", None).unwrap();
    assert_event(&kept, EventType::NodeDataChanged, &path);
    assert_eq!(zk.live_contexts(), 0);
}

#[test]
fn close_ends_pending_watches() {
    let zk = connect();
    let path = unique("w-close");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    let parent = unique("w-close-parent");
    create(&zk, &parent, b"");
    create(&zk, &format!("{parent}/kid"), b"");
    let (kids, child) = zk.get_children_watch(&parent).unwrap();
    assert_eq!(kids, ["kid"]);
    zk.close().unwrap();
    assert_eq!(watch.wait(), Err(Error::Closed));
    assert_eq!(child.wait_timeout(WAIT), Err(Error::Closed));
    assert_eq!(zk.live_contexts(), 0);
}

/// The index and event of the first of `watches` to fire (polled together, as a
/// `select!` over their futures would).
fn first_to_fire(watches: &mut [Watch]) -> Option<(usize, zookeeper_mt::Result<WatchedEvent>)> {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    common::block_on_timeout(
        std::future::poll_fn(|cx| {
            for (index, watch) in watches.iter_mut().enumerate() {
                if let Poll::Ready(event) = Pin::new(watch).poll(cx) {
                    return Poll::Ready((index, event));
                }
            }
            Poll::Pending
        }),
        WAIT,
    )
}

#[test]
fn select_over_several_watches() {
    let zk = connect();
    let base = unique("w-select");
    create(&zk, &base, b"");
    let paths: Vec<String> = (0..3).map(|i| format!("{base}/{i}")).collect();
    let mut watches: Vec<Watch> = paths
        .iter()
        .map(|p| zk.exists_watch(p).unwrap().1)
        .collect();
    create(&zk, &paths[1], b"");
    let (index, event) = first_to_fire(&mut watches).expect("one watch fires");
    let event = event.unwrap();
    assert_eq!(index, 1);
    assert_eq!(event.path, paths[1]);
    assert_eq!(event.event_type, EventType::NodeCreated);
    assert_eq!(zk.live_contexts(), 2);
}

#[test]
fn an_event_delivered_before_it_is_asked_for_is_kept() {
    let zk = connect();
    let path = unique("w-late-look");
    let (_, late) = zk.exists_watch(&path).unwrap();
    let (_, witness) = zk.exists_watch(&path).unwrap();
    create(&zk, &path, b"");
    // Both share one registration, and one event fires both at once: once the witness
    // has it, `late` has it too, before anyone looked.
    assert_eq!(fired(&witness).event_type, EventType::NodeCreated);
    let event = late.try_get().unwrap().expect("the event is there");
    assert_eq!(
        (event.event_type, event.path.as_str()),
        (EventType::NodeCreated, path.as_str())
    );
    // One-shot: the watch has ended.
    assert_eq!(late.wait_timeout(WAIT), Err(Error::Closed));
}

#[test]
fn a_select_loop_keeps_the_quiet_watch() {
    let zk = connect();
    let base = unique("w-select-loop");
    create(&zk, &base, b"");
    let (quiet, loud) = (format!("{base}/quiet"), format!("{base}/loud"));
    let (_, on_quiet) = zk.exists_watch(&quiet).unwrap();
    let (_, on_loud) = zk.exists_watch(&loud).unwrap();
    let mut watches = vec![on_quiet, on_loud];
    create(&zk, &loud, b"");
    let (index, event) = first_to_fire(&mut watches).expect("a watch fires");
    assert_eq!(index, 1, "the quiet watch fired: {event:?}");
    assert_eq!(
        (event.unwrap().event_type, watches[1].path()),
        (EventType::NodeCreated, loud.as_str())
    );
    // The quiet one, polled and left pending, still fires.
    create(&zk, &quiet, b"");
    let (index, event) = first_to_fire(&mut watches[..1]).expect("the quiet watch fires");
    assert_eq!(
        (index, event.unwrap().event_type),
        (0, EventType::NodeCreated)
    );
}

#[test]
fn one_watch_waited_on_by_several_threads_gives_its_event_once() {
    let zk = connect();
    let path = unique("w-many-waiters");
    let (_, watch) = zk.exists_watch(&path).unwrap();
    let outcomes = std::thread::scope(|scope| {
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let watch = &watch;
                scope.spawn(move || {
                    if i == 0 {
                        watch.wait()
                    } else {
                        watch.wait_timeout(WAIT)
                    }
                })
            })
            .collect();
        create(&zk, &path, b"");
        waiters
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    let events: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    assert_eq!(events.len(), 1, "{outcomes:?}");
    assert_eq!(events[0].event_type, EventType::NodeCreated);
    assert!(outcomes
        .iter()
        .all(|o| o.is_ok() || *o == Err(Error::Closed)));
}

#[test]
fn watches_are_send_and_sync() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<Watch>();
}
