use super::*;

#[test]
fn counter_formats() {
    assert_eq!(parse_counter(b"").unwrap(), (0, None));
    assert_eq!(parse_counter(b"42").unwrap(), (42, None));
    assert_eq!(
        parse_counter(b"42 abc-1").unwrap(),
        (42, Some("abc-1".to_string()))
    );
    assert!(parse_counter(b"x1").is_err());
    assert!(parse_counter(&[0, 0, 0, 0, 0, 0, 0, 1]).is_err());
}

fn cas(token: &str, version: i32, mzxid: i64) -> Cas {
    Cas {
        payload: format!("10 {token}"),
        token: token.to_string(),
        version,
        mzxid,
    }
}

fn stat(version: i32, mzxid: i64) -> Stat {
    Stat {
        version,
        mzxid,
        ..Stat::default()
    }
}

#[test]
fn resolutions() {
    let mine = cas("me-1", 3, 100);
    assert_eq!(
        resolve(b"10 me-1", &stat(4, 101), &mine),
        Resolution::Applied
    );
    assert_eq!(
        resolve(b"5 other-1", &stat(3, 100), &mine),
        Resolution::NotYet
    );
    assert_eq!(
        resolve(b"10 other-1", &stat(4, 101), &mine),
        Resolution::Superseded
    );
    assert_eq!(
        resolve(b"20 other-2", &stat(5, 102), &mine),
        Resolution::Unknown
    );
}

/// No CAS is ever sent with expected version -1 on its own (ZOOKEEPER-4743: "any
/// version"), and none leaves the counter at -1 for the next writer.
#[test]
fn cas_never_relies_on_version_minus_one() {
    for version in [i32::MIN, -3, 0, 1, i32::MAX] {
        assert_eq!(CasPlan::for_version(version), CasPlan::Set);
        assert_ne!(CasPlan::version_after(version), -1, "from {version}");
    }
    assert_eq!(CasPlan::version_after(i32::MAX), i32::MIN);
    assert_eq!(CasPlan::version_after(-3), -2);
    assert_eq!(CasPlan::for_version(-2), CasPlan::SkipMinusOne);
    assert_eq!(CasPlan::version_after(-2), 0);
    assert_eq!(CasPlan::for_version(-1), CasPlan::Marker);
    assert_eq!(CasPlan::version_after(-1), 0);
}

/// Around -1 the outcome of a lost reply is still judged right: a write from -2 or
/// -1 lands at 0; another writer at 0 superseded ours; a state at -1 that is not the
/// one we read (another mzxid) is not "not yet".
#[test]
fn resolutions_around_minus_one() {
    let from_minus_two = cas("me-1", -2, 100);
    assert_eq!(
        resolve(b"10 other", &stat(0, 101), &from_minus_two),
        Resolution::Superseded
    );
    assert_eq!(
        resolve(b"10 me-1", &stat(0, 101), &from_minus_two),
        Resolution::Applied
    );
    let from_minus_one = cas("me-1", -1, 100);
    assert_eq!(
        resolve(b"5 x", &stat(-1, 100), &from_minus_one),
        Resolution::NotYet
    );
    assert_eq!(
        resolve(b"5 x", &stat(-1, 999), &from_minus_one),
        Resolution::Unknown
    );
    assert_eq!(
        resolve(b"10 other", &stat(0, 101), &from_minus_one),
        Resolution::Superseded
    );
}

/// The multis sent around -1, on a real server: the skip moves the version by two
/// and checks the first set; the marker lets only the first writer of a state through.
#[test]
fn wrap_multis_on_a_server() {
    let zk = ZooKeeper::connect(
        &zk_harness::shared_test_connect_string(),
        Duration::from_secs(10),
    )
    .unwrap();
    let path = format!("/recipes-unit/id-wrap-{}", guid());
    IdGenerator::create_counter(&zk, &path, &NodeOptions::default()).unwrap();
    for i in 0..5 {
        zk.set(&path, i.to_string().as_bytes(), None).unwrap();
    }
    let (_, before) = zk.get(&path).unwrap();
    assert_eq!(before.version, 5);
    // A stale skip changes nothing.
    let stale = zk.multi(&skip_ops(&path, b"9 stale", 4));
    assert!(matches!(stale, Err(Error::MultiFailed { index: 0, .. })));
    zk.multi(&skip_ops(&path, b"10 me", 5)).unwrap();
    let (data, after) = zk.get(&path).unwrap();
    assert_eq!((data.as_slice(), after.version), (&b"10 me"[..], 7));
    // Two writers of the same state: one gets through.
    let acl = zookeeper_mt::Acl::OPEN_UNSAFE;
    zk.multi(&marker_ops(&path, b"11 a", after.mzxid, acl))
        .unwrap();
    let second = zk.multi(&marker_ops(&path, b"11 b", after.mzxid, acl));
    assert!(matches!(second, Err(Error::MultiFailed { index: 0, .. })));
    let (data, last) = zk.get(&path).unwrap();
    assert_eq!((data.as_slice(), last.version), (&b"11 a"[..], 8));
    zk.close().unwrap();
}

/// The refill turn, without a server: one caller refills while the others wait (woken
/// when it ends), a refill dropped unfinished hands the turn on, and an installed batch
/// serves each id once, in order.
#[test]
fn the_refill_turn_is_handed_on() {
    use super::batch::{Batch, Turn};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    #[derive(Default)]
    struct Flag(AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    fn poll<F: std::future::Future>(
        future: std::pin::Pin<&mut F>,
        flag: &Arc<Flag>,
    ) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(&Waker::from(Arc::clone(flag))))
    }
    fn id(turn: Poll<Turn<'_>>) -> Option<u64> {
        match turn {
            Poll::Ready(Turn::Id(id)) => Some(id),
            _ => None,
        }
    }

    let batch = Batch::default();
    let (first_flag, second_flag) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
    let mut first = Box::pin(batch.turn());
    let Poll::Ready(Turn::Refill(refilling)) = poll(first.as_mut(), &first_flag) else {
        panic!("an empty batch with nobody refilling: refill it");
    };
    let mut second = Box::pin(batch.turn());
    assert!(poll(second.as_mut(), &second_flag).is_pending());
    // The refilling caller's future is dropped: the waiter is woken and takes the turn.
    drop(refilling);
    assert!(
        second_flag.0.load(Ordering::SeqCst),
        "the waiter was not woken"
    );
    let Poll::Ready(Turn::Refill(refilling)) = poll(second.as_mut(), &second_flag) else {
        panic!("the turn was not handed on");
    };
    let mut third = Box::pin(batch.turn());
    assert!(poll(third.as_mut(), &first_flag).is_pending());
    assert_eq!(refilling.install(10..13), 10);
    assert_eq!(batch.remaining(), 2);
    assert_eq!(id(poll(third.as_mut(), &first_flag)), Some(11));
    assert_eq!(
        id(poll(Box::pin(batch.turn()).as_mut(), &first_flag)),
        Some(12)
    );
    assert!(matches!(
        poll(Box::pin(batch.turn()).as_mut(), &first_flag),
        Poll::Ready(Turn::Refill(_))
    ));
}

/// Waiters for a refill whose futures are dropped leave no waker behind (a `select!`
/// loop over `next_id_async` and a tick), and the live waiter is still woken.
#[test]
fn dropped_refill_waiters_leave_no_waker() {
    use super::batch::{Batch, Turn};
    use std::future::Future;
    use std::task::{Context, Poll};

    let batch = Batch::default();
    let mut cx = Context::from_waker(crate::runtime::noop_waker());
    let mut refill = Box::pin(batch.turn());
    let Poll::Ready(Turn::Refill(refilling)) = refill.as_mut().poll(&mut cx) else {
        panic!("an empty batch with nobody refilling: refill it");
    };
    struct Distinct;
    impl std::task::Wake for Distinct {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    for _ in 0..10_000 {
        // A waker of its own each time, as each task of a `select!` loop has.
        let waker = std::task::Waker::from(std::sync::Arc::new(Distinct));
        let mut waiter = Box::pin(batch.turn());
        assert!(waiter
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
    }
    assert_eq!(batch.waiters(), 0, "dropped waiters left their wakers");
    let mut live = Box::pin(batch.turn());
    assert!(live.as_mut().poll(&mut cx).is_pending());
    assert_eq!(batch.waiters(), 1);
    assert_eq!(refilling.install(5..7), 5);
    assert!(matches!(
        live.as_mut().poll(&mut cx),
        Poll::Ready(Turn::Id(6))
    ));
    assert_eq!(batch.waiters(), 0);
}
