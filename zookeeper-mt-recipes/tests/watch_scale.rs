//! Config and value watches are tasks on the recipes' driver, not threads: 200 of each on
//! one session add at most a few threads, each delivers its first value and a change, and
//! dropping them leaves no task, thread or armed watch behind.
//!
//! Alone in its binary: it counts the process's threads and tasks.

mod common;

use common::{connect, unique_path, wait_until};
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::CreateMode;
use zookeeper_mt_recipes::caches::{ConfigEvent, ConfigWatch};
use zookeeper_mt_recipes::live_background_tasks;
use zookeeper_mt_recipes::shared::{SharedCount, ValueWatch};

/// How long a value may take to arrive. Short: the timer thread stays until the last
/// deadline of a timed wait has passed (even one that was answered), and the test waits
/// (10 s at most) for it to end.
const WAIT: Duration = Duration::from_secs(5);
const EACH: i32 = 200;

fn data_of(event: ConfigEvent) -> Vec<u8> {
    event.data().expect("a value").to_vec()
}

#[test]
fn config_and_value_watches_add_no_threads() {
    let zk = connect();
    let base = unique_path("watches");
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &base).unwrap();
    let config = |i: i32| format!("{base}/config-{i}");
    let counters: Vec<SharedCount> = (0..EACH)
        .map(|i| SharedCount::new(&zk, &format!("{base}/count-{i}"), i).unwrap())
        .collect();
    for i in 0..EACH {
        zk.create(
            &config(i),
            format!("c{i}").as_bytes(),
            CreateMode::Persistent,
        )
        .unwrap();
    }
    zk.exists("/").unwrap();
    let (tasks, threads_before, contexts) =
        (live_background_tasks(), threads(), zk.live_contexts());

    let configs: Vec<ConfigWatch> = (0..EACH)
        .map(|i| ConfigWatch::new(&zk, &config(i)).unwrap())
        .collect();
    let mut values: Vec<ValueWatch<i32>> = counters
        .iter()
        .map(|count| count.watch().unwrap())
        .collect();
    let added = threads() - threads_before;
    assert!(added <= 4, "{added} threads for {} watches", 2 * EACH);
    assert_eq!(live_background_tasks(), tasks + 2 * EACH as usize);
    zk.exists("/").unwrap();
    assert_eq!(
        zk.live_contexts() - contexts,
        2 * EACH as usize,
        "one armed watch each"
    );

    for (i, watch) in (0..EACH).zip(&configs) {
        assert_eq!(
            data_of(watch.next(WAIT).unwrap()),
            format!("c{i}").as_bytes()
        );
    }
    for (i, watch) in (0..EACH).zip(&mut values) {
        assert_eq!(watch.next(WAIT).unwrap().value, i);
    }
    for i in 0..EACH {
        zk.set(&config(i), format!("d{i}").as_bytes(), None)
            .unwrap();
    }
    for (i, count) in (0..EACH).zip(&counters) {
        count.add(1000).unwrap();
        assert_eq!(values[i as usize].next(WAIT).unwrap().value, i + 1000);
    }
    for (i, watch) in (0..EACH).zip(&configs) {
        assert_eq!(
            data_of(watch.next(WAIT).unwrap()),
            format!("d{i}").as_bytes()
        );
    }
    let added = threads() - threads_before;
    assert!(added <= 4, "{added} threads for {} watches", 2 * EACH);

    // Dropped, the watches' tasks end on the driver (a drop does not wait for them),
    // and take their watches off there.
    drop(configs);
    drop(values);
    wait_until("the watches' tasks to end", || {
        live_background_tasks() == tasks
    });
    wait_until("every watch taken off", || {
        zk.exists("/").is_ok() && zk.live_contexts() == contexts
    });
    // The driver and timer threads end a second after their last task or deadline.
    wait_until("the threads to end", || threads() <= threads_before);
    drop(counters);
    for name in zk.get_children(&base).unwrap() {
        zk.delete(&format!("{base}/{name}"), None).unwrap();
    }
    zk.delete(&base, None).unwrap();
}
