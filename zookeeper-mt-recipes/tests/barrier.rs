//! Barrier and double barrier against a real server, blocking and async (pending async
//! calls cost no thread; dropped ones leave nothing behind).

mod common;

use common::{assert_no_leftover_contexts, connect, unique_path, wait_until};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::thread;
use std::time::Duration;
use zk_harness::testing::process_threads as threads;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::barriers::{Barrier, DoubleBarrier};
use zookeeper_mt_recipes::RecipeError;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn barrier_blocks_until_removed() {
    let zk = connect();
    let path = unique_path("gate");
    let barrier = Barrier::new(&zk, &path);
    // An absent barrier does not block.
    barrier.wait(Duration::from_millis(1)).unwrap();
    barrier.set().unwrap();
    barrier.set().unwrap(); // idempotent
    assert!(barrier.is_set().unwrap());
    assert_eq!(
        barrier.wait(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    );

    let (released, done) = crossbeam_channel::unbounded();
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let path = path.clone();
            let released = released.clone();
            thread::spawn(move || {
                let zk = connect();
                Barrier::new(&zk, &path).wait(WAIT).unwrap();
                released.send(i).unwrap();
            })
        })
        .collect();
    // Nobody passes while the barrier is up.
    assert!(done.recv_timeout(Duration::from_millis(300)).is_err());
    barrier.remove().unwrap();
    let mut who: Vec<i32> = (0..3).map(|_| done.recv_timeout(WAIT).unwrap()).collect();
    who.sort();
    assert_eq!(who, vec![0, 1, 2]);
    for waiter in waiters {
        waiter.join().unwrap();
    }
    barrier.remove().unwrap(); // removing an absent barrier is fine
    assert!(!barrier.is_set().unwrap());
}

#[test]
fn double_barrier_enter_and_leave_with_n_threads() {
    let dir = unique_path("double");
    let n = 5;
    let entering = Arc::new(AtomicUsize::new(0));
    let leaving = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (dir, entering, leaving) =
                (dir.clone(), Arc::clone(&entering), Arc::clone(&leaving));
            thread::spawn(move || {
                let zk = connect();
                let barrier = DoubleBarrier::new(&zk, &dir, n).unwrap();
                for round in 0..3 {
                    entering.fetch_add(1, Ordering::SeqCst);
                    barrier.enter(WAIT).unwrap();
                    // Everyone of this round has arrived.
                    assert!(entering.load(Ordering::SeqCst) >= n * (round + 1));
                    leaving.fetch_add(1, Ordering::SeqCst);
                    barrier.leave(WAIT).unwrap();
                    // Everyone of this round has started to leave.
                    assert!(leaving.load(Ordering::SeqCst) >= n * (round + 1));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let zk = connect();
    assert!(
        zk.get_children(&dir).unwrap().is_empty(),
        "nothing left behind"
    );
}

#[test]
fn double_barrier_enter_times_out_and_withdraws() {
    let zk = connect();
    let dir = unique_path("short");
    let barrier = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    assert_eq!(
        barrier.enter(Duration::from_millis(200)),
        Err(RecipeError::Timeout)
    );
    assert!(zk.get_children(&dir).unwrap().is_empty(), "withdrawn");
    assert!(matches!(
        barrier.leave(WAIT),
        Err(RecipeError::InvalidArgument(_))
    ));
    assert!(matches!(
        DoubleBarrier::new(&zk, &dir, 0),
        Err(RecipeError::InvalidArgument(_))
    ));
}

/// A participant whose session dies counts as having left.
#[test]
fn double_barrier_leave_survives_a_dead_participant() {
    let dir = unique_path("dead");
    let alive_zk = connect();
    let dead_zk = connect();
    let alive = DoubleBarrier::new(&alive_zk, &dir, 2).unwrap();
    let dead = DoubleBarrier::new(&dead_zk, &dir, 2).unwrap();
    let entering = thread::spawn(move || {
        dead.enter(WAIT).unwrap();
        dead
    });
    alive.enter(WAIT).unwrap();
    let dead = entering.join().unwrap();
    dead_zk.close().unwrap();
    alive.leave(WAIT).unwrap();
    drop(dead);
}

/// Timed-out waits leave no watch registered: the barrier's wait, the double barrier's
/// enter and its leave (each used to leave one behind per timeout).
#[test]
fn timed_out_waits_leave_nothing_registered() {
    let zk = connect();
    let barrier = Barrier::new(&zk, &unique_path("gate-timeouts"));
    barrier.set().unwrap();
    for _ in 0..30 {
        assert_eq!(
            barrier.wait(Duration::from_millis(10)),
            Err(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);

    let dir = unique_path("double-timeouts");
    let lone = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    for _ in 0..10 {
        assert_eq!(
            lone.enter(Duration::from_millis(20)),
            Err(RecipeError::Timeout)
        );
    }
    assert_no_leftover_contexts(&zk);

    // Two enter; one leaves only after the other has timed out leaving several times.
    let other_zk = connect();
    let other = DoubleBarrier::new(&other_zk, &dir, 2).unwrap();
    let entering = thread::spawn(move || {
        other.enter(WAIT).unwrap();
        other
    });
    lone.enter(WAIT).unwrap();
    let other = entering.join().unwrap();
    let seq = |b: &DoubleBarrier| zookeeper_mt_recipes::nodes::sequence_of(&b.node().unwrap());
    // The lowest leaves last: it waits on the other, which stays in the round meanwhile.
    let (waiter, holder) = if seq(&lone) < seq(&other) {
        (lone, other)
    } else {
        (other, lone)
    };
    for _ in 0..10 {
        assert_eq!(
            waiter.leave(Duration::from_millis(20)),
            Err(RecipeError::Timeout)
        );
    }
    let holder = thread::spawn(move || {
        holder.leave(WAIT).unwrap();
        holder
    });
    waiter.leave(WAIT).unwrap();
    let holder = holder.join().unwrap();
    let (lone, other) = (waiter, holder);
    drop((lone, other));
    assert_no_leftover_contexts(&zk);
    assert_no_leftover_contexts(&other_zk);
}

/// The lowest participant dies while the others wait in `leave`: they return, and the
/// next round still waits for its own participants (the round's `ready` node used to
/// stay, letting every later `enter` pass at once).
#[test]
fn a_dead_lowest_participant_does_not_open_the_next_round() {
    let dir = unique_path("dead-lowest");
    let sessions: Vec<_> = (0..3).map(|_| connect()).collect();
    let barriers: Vec<_> = sessions
        .iter()
        .map(|zk| Arc::new(DoubleBarrier::new(zk, &dir, 3).unwrap()))
        .collect();
    let entering: Vec<_> = barriers
        .iter()
        .map(|b| {
            let b = Arc::clone(b);
            thread::spawn(move || b.enter(WAIT).unwrap())
        })
        .collect();
    for e in entering {
        e.join().unwrap();
    }
    let lowest = (0..3)
        .min_by_key(|i| zookeeper_mt_recipes::nodes::sequence_of(&barriers[*i].node().unwrap()))
        .unwrap();
    let leaving: Vec<_> = (0..3)
        .filter(|i| *i != lowest)
        .map(|i| {
            let b = Arc::clone(&barriers[i]);
            thread::spawn(move || b.leave(WAIT))
        })
        .collect();
    // The others have deleted their own nodes and wait on the lowest.
    let zk = connect();
    common::wait_until("the others left their nodes", || {
        zk.get_children(&dir)
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("p-"))
            .count()
            == 1
    });
    sessions[lowest].close().unwrap();
    for l in leaving {
        l.join().unwrap().unwrap();
    }
    let next = DoubleBarrier::new(&zk, &dir, 3).unwrap();
    assert_eq!(
        next.enter(Duration::from_millis(500)),
        Err(RecipeError::Timeout),
        "a later round passed without its participants"
    );
}

/// Participants numbered past the directory counter's end take no part: a crafted
/// `p-…-2147483647` does not make up the count (it used to be counted, releasing the
/// round early).
#[test]
fn participants_past_the_counters_end_are_not_counted() {
    let zk = connect();
    let dir = unique_path("counter-end");
    let barrier = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &dir).unwrap();
    let peer = connect();
    peer.create(
        &format!("{dir}/p-{}-2147483647", zookeeper_mt_recipes::nodes::guid()),
        b"",
        zookeeper_mt::CreateMode::Ephemeral,
    )
    .unwrap();
    assert_eq!(
        barrier.enter(Duration::from_millis(500)),
        Err(RecipeError::Timeout),
        "released by a participant past the counter's end"
    );
}

// ---------------------------------------------------------------- async forms

use common::{alone, join_all, Boxed};

/// Compile-time check: every async call's future is `Send` (usable on any executor).
#[allow(dead_code)]
fn async_futures_are_send(barrier: &Barrier, double: &DoubleBarrier) {
    fn send<T: Send>(_: T) {}
    send(barrier.set_async());
    send(barrier.remove_async());
    send(barrier.is_set_async());
    send(barrier.wait_async(WAIT));
    send(double.enter_async(WAIT));
    send(double.leave_async(WAIT));
}

/// How far [`advance`] took a future.
enum Advanced<T> {
    /// It completed.
    Done(T),
    /// It was polled as often as asked, and is pending.
    Polled,
    /// It stopped being woken before that (it waits for something nobody does).
    Parked,
}

/// How long [`advance`] waits for a wake-up before it calls a future parked.
const PARKED: Duration = Duration::from_secs(1);

/// Polls `future` `polls` times, each (after the first) once the previous poll's waker
/// fired: it moves on by one await point per poll (a reply, a watch, a timer).
fn advance<F: Future + Unpin>(future: &mut F, polls: usize) -> Advanced<F::Output> {
    if polls == 0 {
        return Advanced::Polled;
    }
    let mut left = polls;
    let mut done = None;
    let finished = zk_harness::executor::block_on_timeout(
        std::future::poll_fn(|cx| match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => {
                done = Some(output);
                Poll::Ready(())
            }
            Poll::Pending => {
                left -= 1;
                if left == 0 {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
        }),
        PARKED,
    );
    match (done, finished) {
        (Some(output), _) => Advanced::Done(output),
        (None, Some(())) => Advanced::Polled,
        (None, None) => Advanced::Parked,
    }
}

/// Waits until every reply to `zk` sent so far has come back and no watch or request
/// context beyond `baseline` is left.
fn settle(zk: &ZooKeeper, baseline: usize) {
    zk.exists("/").unwrap();
    wait_until("the dropped calls' contexts released", || {
        zk.live_contexts() == baseline
    });
}

/// The participant nodes in `dir`.
fn participants(zk: &ZooKeeper, dir: &str) -> usize {
    zk.get_children(dir)
        .map(|c| c.iter().filter(|c| c.starts_with("p-")).count())
        .unwrap_or(0)
}

/// Many pending async waits (barrier waits, double-barrier enters) on one session add no
/// thread; removing a barrier completes its waits; dropping the others leaves no watch,
/// no participant node and no task behind.
#[test]
fn pending_async_waits_add_no_thread() {
    alone("pending_async_waits_add_no_thread", || {
        const GATES: usize = 200;
        const ENTERS: usize = 100;
        let zk = connect();
        let base = unique_path("async-many");
        let gates: Vec<Barrier> = (0..GATES)
            .map(|i| Barrier::new(&zk, &format!("{base}/gate-{i}")))
            .collect();
        for gate in &gates {
            gate.set().unwrap();
        }
        let doubles: Vec<DoubleBarrier> = (0..ENTERS)
            .map(|i| DoubleBarrier::new(&zk, &format!("{base}/double-{i}"), 2).unwrap())
            .collect();
        zk.exists("/").unwrap();
        let contexts = zk.live_contexts();
        let tasks = zookeeper_mt_recipes::live_background_tasks();
        let before = threads();
        let mut waits: Vec<Option<Boxed<'_, zookeeper_mt_recipes::Result<()>>>> = gates
            .iter()
            .map(|g| Box::pin(g.wait_async(Timeout::Never)) as Boxed<'_, _>)
            .chain(
                doubles
                    .iter()
                    .map(|d| Box::pin(d.enter_async(Timeout::Never)) as Boxed<'_, _>),
            )
            .map(Some)
            .collect();
        // Poll them all until each waits on its watch (one each: all on other nodes).
        let armed = zk_harness::executor::block_on_timeout(
            std::future::poll_fn(|cx| {
                for wait in waits.iter_mut().flatten() {
                    assert!(wait.as_mut().poll(cx).is_pending(), "nothing may pass yet");
                }
                if zk.live_contexts() >= contexts + GATES + ENTERS {
                    return Poll::Ready(());
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            }),
            WAIT,
        );
        assert!(armed.is_some(), "the waits did not all set their watch");
        let added = threads().saturating_sub(before);
        println!(
            "{} pending async waits added {added} threads",
            GATES + ENTERS
        );
        assert!(added <= 2, "pending async waits added {added} threads");

        // Opening half the gates releases exactly their waits.
        for gate in &gates[..GATES / 2] {
            gate.remove().unwrap();
        }
        let released = zk_harness::executor::block_on_timeout(
            std::future::poll_fn(|cx| {
                for (i, slot) in waits.iter_mut().enumerate() {
                    let Some(wait) = slot else { continue };
                    if let Poll::Ready(outcome) = wait.as_mut().poll(cx) {
                        assert!(i < GATES / 2, "wait {i} passed a closed gate");
                        outcome.unwrap();
                        *slot = None;
                    }
                }
                if waits[..GATES / 2].iter().all(Option::is_none) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }),
            WAIT,
        );
        assert!(
            released.is_some(),
            "an opened gate did not release its wait"
        );

        drop(waits);
        settle(&zk, contexts);
        for double in &doubles {
            assert_eq!(double.node(), None, "a dropped enter counts as entered");
        }
        wait_until("the dropped enters' nodes withdrawn", || {
            (0..ENTERS).all(|i| participants(&zk, &format!("{base}/double-{i}")) == 0)
        });
        wait_until("no background task left", || {
            zookeeper_mt_recipes::live_background_tasks() == tasks
        });
        let added = threads().saturating_sub(before);
        assert!(added <= 2, "the dropped waits left {added} threads");
    });
}

/// A barrier wait, set and remove dropped after each of their await points leave no
/// watch or request behind, and no half effect: the barrier is set or not.
#[test]
fn dropped_barrier_calls_leave_nothing() {
    let zk = connect();
    let barrier = Barrier::new(&zk, &unique_path("async-gate"));
    barrier.set().unwrap();
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    for polls in 0.. {
        let mut wait = Box::pin(barrier.wait_async(Timeout::Never));
        let advanced = advance(&mut wait, polls);
        assert!(
            !matches!(advanced, Advanced::Done(_)),
            "passed a closed gate"
        );
        drop(wait);
        settle(&zk, contexts);
        if matches!(advanced, Advanced::Parked) {
            break;
        }
    }
    for polls in 0..4 {
        let mut remove = Box::pin(barrier.remove_async());
        let removed = matches!(advance(&mut remove, polls), Advanced::Done(Ok(())));
        drop(remove);
        settle(&zk, contexts);
        assert!(!removed || !barrier.is_set().unwrap());
        barrier.remove().unwrap();
        assert!(!barrier.is_set().unwrap());

        let mut set = Box::pin(barrier.set_async());
        let set_done = matches!(advance(&mut set, polls), Advanced::Done(Ok(())));
        drop(set);
        settle(&zk, contexts);
        assert!(!set_done || barrier.is_set().unwrap());
        barrier.set().unwrap();
        assert!(barrier.is_set().unwrap());
    }
    // Still a working barrier.
    let mut wait = Box::pin(barrier.wait_async(WAIT));
    assert!(zk_harness::executor::poll_once(&mut wait).is_pending());
    barrier.remove().unwrap();
    zk_harness::executor::block_on(wait).unwrap();
    assert_no_leftover_contexts(&zk);
}

/// An enter dropped after each of its await points (the create unanswered included)
/// withdraws its participant node, leaves no watch, and has not entered; a second call
/// while one is in progress is refused.
#[test]
fn a_dropped_enter_withdraws() {
    let zk = connect();
    let dir = unique_path("async-enter");
    let lone = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    for polls in 0.. {
        let mut enter = Box::pin(lone.enter_async(Timeout::Never));
        let advanced = advance(&mut enter, polls);
        assert!(!matches!(advanced, Advanced::Done(_)), "entered alone");
        if polls > 0 {
            assert!(matches!(
                lone.leave(WAIT),
                Err(RecipeError::InvalidArgument(_))
            ));
        }
        drop(enter);
        settle(&zk, contexts);
        assert_eq!(lone.node(), None);
        // The withdrawal runs in the background: wait for it.
        wait_until("the dropped enter's node withdrawn", || {
            participants(&zk, &dir) == 0
        });
        if matches!(advanced, Advanced::Parked) {
            break;
        }
    }
    // Neither entered nor busy: a new enter runs (and times out alone).
    assert_eq!(
        lone.enter(Duration::from_millis(100)),
        Err(RecipeError::Timeout)
    );
    assert_eq!(participants(&zk, &dir), 0);
    // A pair of async participants on this one thread completes a round.
    let other = DoubleBarrier::new(&zk, &dir, 2).unwrap();
    let entered = join_all(vec![
        Box::pin(lone.enter_async(WAIT)),
        Box::pin(other.enter_async(WAIT)),
    ]);
    assert!(entered.iter().all(Result::is_ok), "{entered:?}");
    let left = join_all(vec![
        Box::pin(lone.leave_async(WAIT)),
        Box::pin(other.leave_async(WAIT)),
    ]);
    assert!(left.iter().all(Result::is_ok), "{left:?}");
    assert!(zk.get_children(&dir).unwrap().is_empty());
    assert_no_leftover_contexts(&zk);
}

/// A leave dropped after each of its await points (the lowest participant's, which
/// waits for the others, and another's, which deletes its node first) leaves no watch
/// and the participant still entered; leaving again completes the round cleanly.
#[test]
fn a_dropped_leave_can_be_resumed() {
    let zk = connect();
    let dir = unique_path("async-leave");
    let pair = [
        DoubleBarrier::new(&zk, &dir, 2).unwrap(),
        DoubleBarrier::new(&zk, &dir, 2).unwrap(),
    ];
    zk.exists("/").unwrap();
    let contexts = zk.live_contexts();
    let seq = |b: &DoubleBarrier| zookeeper_mt_recipes::nodes::sequence_of(&b.node().unwrap());
    for lowest in [true, false] {
        for polls in 0.. {
            let entered = join_all(vec![
                Box::pin(pair[0].enter_async(WAIT)),
                Box::pin(pair[1].enter_async(WAIT)),
            ]);
            assert!(entered.iter().all(Result::is_ok), "{entered:?}");
            let low = usize::from(seq(&pair[1]) < seq(&pair[0]));
            let leaver = &pair[if lowest { low } else { 1 - low }];
            let mut leave = Box::pin(leaver.leave_async(Timeout::Never));
            let advanced = advance(&mut leave, polls);
            assert!(!matches!(advanced, Advanced::Done(_)), "left alone");
            drop(leave);
            settle(&zk, contexts);
            assert!(leaver.node().is_some(), "a dropped leave counts as left");
            let left = join_all(vec![
                Box::pin(pair[0].leave_async(WAIT)),
                Box::pin(pair[1].leave_async(WAIT)),
            ]);
            assert!(left.iter().all(Result::is_ok), "{left:?}");
            assert!(pair.iter().all(|b| b.node().is_none()));
            assert!(
                zk.get_children(&dir).unwrap().is_empty(),
                "the round left nodes behind"
            );
            settle(&zk, contexts);
            if matches!(advanced, Advanced::Parked) {
                break;
            }
        }
    }
    assert_no_leftover_contexts(&zk);
}

/// Clones owned by `'static` futures: a barrier's wait and a double barrier's enter and
/// leave, each on a clone moved into its future; a clone is the same participant.
#[test]
fn clones_owned_by_tasks() {
    let zk = connect();
    let gate = Barrier::new(&zk, &unique_path("async-clone"));
    let dir = unique_path("async-clone-double");
    let pair = [
        DoubleBarrier::new(&zk, &dir, 2).unwrap(),
        DoubleBarrier::new(&zk, &dir, 2).unwrap(),
    ];
    zk_harness::executor::block_on(async {
        gate.set_async().await.unwrap();
        assert!(gate.is_set_async().await.unwrap());
        let waiter = gate.clone();
        let mut wait = Box::pin(async move { waiter.wait_async(WAIT).await });
        assert!(zk_harness::executor::poll_once(&mut wait).is_pending());
        gate.remove_async().await.unwrap();
        wait.await.unwrap();
        assert!(!gate.is_set_async().await.unwrap());
    });
    let enter = |p: &DoubleBarrier| -> Boxed<'static, _> {
        let p = p.clone();
        Box::pin(async move { p.enter_async(WAIT).await })
    };
    let entered = join_all(vec![enter(&pair[0]), enter(&pair[1])]);
    assert!(entered.iter().all(Result::is_ok), "{entered:?}");
    // The clones entered as the originals: the originals know their nodes.
    assert!(pair.iter().all(|p| p.node().is_some()));
    let leave = |p: &DoubleBarrier| -> Boxed<'static, _> {
        let p = p.clone();
        Box::pin(async move { p.leave_async(WAIT).await })
    };
    let left = join_all(vec![leave(&pair[0]), leave(&pair[1])]);
    assert!(left.iter().all(Result::is_ok), "{left:?}");
    assert!(zk.get_children(&dir).unwrap().is_empty());
    drop(pair);
    assert_no_leftover_contexts(&zk);
}
