//! Work-queue attempt counts and dead letters against a real server: released items,
//! and items of a consumer killed mid-item, count attempts; an item out of attempts is
//! moved to the dead-letter directory in one multi, exactly once even when the reply of
//! that multi is lost; a held item is never moved.

mod common;

use common::{
    child_session, connect, connect_to, opcode, report_and_hang, unique_path, Child, FaultProxy,
};
use std::time::Duration;
use zookeeper_mt::Timeout;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::OptionalExtension;

const CHILD_ENV: &str = "RECIPES_DEAD_LETTER_TEST_CHILD";
const CHILD_SESSION: Duration = Duration::from_secs(4);

#[test]
fn released_items_go_to_the_dead_letters_after_their_attempts() {
    let zk = connect();
    let path = unique_path("released");
    let queue = WorkQueue::new(&zk, &path).unwrap().with_dead_letter(2);
    assert_eq!(queue.dead_letter_path(), Some(&*format!("{path}/dead")));
    queue.put(b"flaky job").unwrap();

    let first = queue.try_take().unwrap().expect("claimed");
    assert_eq!((first.data(), first.attempt()), (&b"flaky job"[..], 1));
    first.release().unwrap();
    let second = queue.try_take().unwrap().expect("claimed again");
    assert_eq!((second.data(), second.attempt()), (&b"flaky job"[..], 2));
    // Held on its last attempt: another consumer neither claims nor moves it.
    let other = WorkQueue::new(connect(), &path)
        .unwrap()
        .with_dead_letter(2);
    other.put(b"good job").unwrap();
    let good = other.try_take().unwrap().expect("the other item");
    assert_eq!(good.data(), b"good job");
    assert!(other.try_take().unwrap().is_none());
    assert!(
        other.dead_letters().unwrap().is_empty(),
        "a held item was moved"
    );
    second.release().unwrap();

    // Out of attempts: moved, not handed out.
    assert!(queue.try_take().unwrap().is_none());
    let dead = queue.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    let (data, _) = zk.get(&format!("{path}/dead/{}", dead[0])).unwrap();
    assert_eq!(data, b"flaky job");
    assert_eq!(queue.stats().dead_lettered, 1);
    assert_eq!(queue.len().unwrap(), 1, "only the held good job is left");
    good.complete().unwrap();
    assert!(queue.is_empty().unwrap());
    assert_eq!(queue.in_progress().unwrap(), 0, "no lock left by the move");
}

/// A consumer killed mid-item used one attempt: once its session has ended the item
/// comes back as attempt 2 and, released again, goes to the dead letters.
#[test]
fn a_killed_consumers_claim_counts_an_attempt() {
    let zk = connect();
    let path = unique_path("killed");
    let queue = WorkQueue::new(&zk, &path).unwrap().with_dead_letter(2);
    queue.put(b"poison").unwrap();
    let mut child = Child::start("child_consumer", CHILD_ENV, &path);
    assert_eq!(child.wait_for_marker("TOOK "), "poison 1");
    child.kill();
    let item = queue
        .take(Duration::from_secs(30))
        .optional()
        .unwrap()
        .expect("the item came back after the child's session ended");
    assert_eq!(item.attempt(), 2);
    drop(item); // abandoned again (released in the background)
    let other = WorkQueue::new(connect(), &path)
        .unwrap()
        .with_dead_letter(2);
    // The background release lands soon; a take that finds the item then moves it.
    common::wait_until("the item is dead-lettered", || {
        let taken = other.try_take().unwrap();
        assert!(taken.is_none(), "handed out a third time");
        other.dead_letters().unwrap().len() == 1
    });
    assert!(queue.is_empty().unwrap());
}

/// Not a test of its own: the child process of `a_killed_consumers_claim_counts_an_attempt`.
#[test]
fn child_consumer() {
    let Some((zk, path)) = child_session(CHILD_ENV, CHILD_SESSION) else {
        return;
    };
    let queue = WorkQueue::new(&zk, &path).unwrap().with_dead_letter(2);
    let item = queue.take(Timeout::Never).unwrap();
    report_and_hang(&format!(
        "TOOK {} {}",
        String::from_utf8_lossy(item.data()),
        item.attempt()
    ));
}

/// The move's multi is applied but its reply lost: the item is a dead letter exactly
/// once, and no lock is left behind.
#[test]
fn a_move_whose_reply_is_lost_happens_once() {
    let path = unique_path("lost-move");
    let producer = WorkQueue::new(connect(), &path)
        .unwrap()
        .with_dead_letter(1);
    producer.put(b"bad").unwrap();
    producer
        .try_take()
        .unwrap()
        .expect("claimed")
        .release()
        .unwrap();
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer = WorkQueue::new(connect_to(&proxy.addr), &path)
        .unwrap()
        .with_dead_letter(1);
    proxy.cut_after(opcode::MULTI);
    assert!(consumer.try_take().unwrap().is_none());
    assert!(proxy.has_cut(), "the move's reply was not cut");
    assert!(consumer.try_take().unwrap().is_none());
    assert_eq!(consumer.dead_letters().unwrap().len(), 1);
    assert!(producer.is_empty().unwrap());
    assert_eq!(producer.in_progress().unwrap(), 0, "a lock was left behind");
}

/// A claim whose reply is lost is one attempt, not two. Here the first claim fails
/// (the lock directory does not exist yet) and its reply is lost: the consumer learns
/// after a `sync` that it did not apply and sends it again, instead of giving up on a
/// free item.
#[test]
fn a_claim_whose_reply_is_lost_counts_one_attempt() {
    let path = unique_path("lost-claim");
    let proxy = FaultProxy::start(&zk_harness::shared_test_connect_string());
    let consumer = WorkQueue::new(connect_to(&proxy.addr), &path)
        .unwrap()
        .with_dead_letter(2);
    consumer.put(b"job").unwrap();
    proxy.cut_after(opcode::MULTI);
    let item = consumer.try_take().unwrap().expect("claimed");
    assert!(proxy.has_cut(), "the claim's reply was not cut");
    assert_eq!(item.attempt(), 1);
    item.release().unwrap();
    let item = consumer.try_take().unwrap().expect("claimed again");
    assert_eq!(item.attempt(), 2);
    item.release().unwrap();
    assert!(consumer.try_take().unwrap().is_none());
    assert_eq!(consumer.dead_letters().unwrap().len(), 1);

    // Now the lock directory exists: the claim applies and its reply is lost; the
    // consumer finds its own lock again and it is still attempt 1.
    consumer.put(b"next").unwrap();
    proxy.cut_after(opcode::MULTI);
    let item = consumer.try_take().unwrap().expect("claimed");
    assert!(proxy.has_cut(), "the claim's reply was not cut");
    assert_eq!((item.data(), item.attempt()), (&b"next"[..], 1));
    item.complete().unwrap();
}
