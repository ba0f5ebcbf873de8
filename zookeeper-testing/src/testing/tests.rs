use super::*;

#[test]
fn unique_names_differ_and_are_clean() {
    let a = unique_path("a/b c");
    let b = unique_path("a/b c");
    assert_ne!(a, b);
    assert!(a.starts_with("/a_b_c-"), "{a}");
    assert_eq!(a.matches('/').count(), 1);
    assert!(unique_name("").starts_with("node-"));
    assert!(unique_name("..").starts_with("node..-"));
}

#[test]
fn rng_is_deterministic_and_in_range() {
    let seed = Seed::new(42);
    let a: Vec<u64> = (0..5).map(|_| seed.rng().next_u64()).collect();
    assert!(a.windows(2).all(|w| w[0] == w[1]));
    let mut r1 = seed.rng();
    let mut r2 = seed.rng();
    for _ in 0..1000 {
        assert_eq!(r1.next_u64(), r2.next_u64());
        let x = r1.below(7);
        assert_eq!(x, r2.below(7));
        assert!(x < 7);
        let y = r1.range(10..12);
        assert_eq!(y, r2.range(10..12));
        assert!((10..12).contains(&y));
    }
    assert_eq!(r1.below(0), 0);
    assert_ne!(seed.rng_for(1).next_u64(), seed.rng_for(2).next_u64());
    let mut v: Vec<u32> = (0..20).collect();
    seed.rng().shuffle(&mut v);
    let mut sorted = v.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..20).collect::<Vec<_>>());
    assert_ne!(v, sorted, "a 20-element shuffle left everything in place");
}

#[test]
fn seed_parsing() {
    assert_eq!(Seed::parse("0x10").unwrap().value(), 16);
    assert_eq!(Seed::parse(" 17 ").unwrap().value(), 17);
    assert!(matches!(
        Seed::parse("nope"),
        Err(HarnessError::InvalidArgument(_))
    ));
    // Unset: a random seed (two in a row differ through the per-process counter).
    let var = "ZK_HARNESS_TESTING_SEED_UNIT_NEVER_SET";
    let a = Seed::from_env_or_random(var).unwrap();
    let b = Seed::from_env_or_random(var).unwrap();
    assert_ne!(a, b);
}

/// The child side of `child_processes`: does nothing in a normal run.
#[test]
fn child_entry() {
    if child_role().as_deref() != Some("testing::tests::child_entry") {
        return;
    }
    let lines = watch_parent();
    report("READY|", std::env::var("CHILD_PARAM").unwrap_or_default());
    for line in lines {
        report("ECHO|", line);
    }
}

#[test]
fn child_processes() {
    let wait = Duration::from_secs(60);
    let mut child =
        TestChild::spawn("testing::tests::child_entry", &[("CHILD_PARAM", "p-42")]).unwrap();
    assert_eq!(child.wait_for_marker("READY|", wait).unwrap(), "p-42");
    child.send_line("hello").unwrap();
    assert_eq!(child.wait_for_marker("ECHO|", wait).unwrap(), "hello");
    // Closing stdin ends the child (watch_parent exits the process).
    child.close_stdin();
    assert!(child.wait_exit(wait).unwrap().success());
    assert!(child.send_line("late").is_err());

    // Dropped while running: killed and reaped.
    let mut child = TestChild::spawn("testing::tests::child_entry", &[]).unwrap();
    assert_eq!(child.wait_for_marker("READY|", wait).unwrap(), "");
    let pid = child.pid();
    child.pause().unwrap();
    drop(child);
    assert!(!crate::process_alive(pid));

    // A marker that never comes: the child's stdout closes first.
    let mut child = TestChild::spawn("testing::tests::child_entry", &[]).unwrap();
    child.close_stdin();
    assert!(matches!(
        child.wait_for_marker("NEVER|", wait),
        Err(HarnessError::NotRunning { .. })
    ));
}

#[test]
fn polling() {
    let mut n = 0;
    assert!(poll_until(Duration::from_secs(5), || {
        n += 1;
        n == 3
    }));
    assert!(!poll_until(Duration::from_millis(20), || false));
    assert!(matches!(
        try_wait_until("never", Duration::from_millis(5), || false),
        Err(HarnessError::Timeout { .. })
    ));
}
