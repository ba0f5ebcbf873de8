//! The reproducer of ZOOKEEPER-4699, the reason `ZooKeeper::set_servers` is `unsafe`.
//!
//! Ignored by default: it provokes memory corruption in the C client on purpose.
//! `scripts/asan.sh` runs it in its AddressSanitizer build (the C client compiled with
//! `-fsanitize=address`) and expects a heap-use-after-free report naming the C client's
//! address-list or host-string code: `zoo_set_servers` frees and replaces both under a
//! lock the IO thread does not take when it walks the list after a failed connection
//! attempt (`handle_error`) or logs the host string while it pauses between rounds.

mod common;

use std::time::{Duration, Instant};
use zookeeper_mt::ZooKeeper;

/// An address on which nothing listens (connections are refused at once), on a
/// loopback IP of its own (the C client compares address lists by IP only). With one
/// address per list, every failed attempt ends a round: the IO thread then logs the
/// host string (unlocked) before it pauses and tries again.
fn refused(net: u8) -> String {
    format!("127.0.{net}.1:{}", zk_harness::free_port().unwrap())
}

#[test]
#[ignore = "provokes a use-after-free in the C client (ZOOKEEPER-4699) on purpose; \
            scripts/asan.sh runs it under AddressSanitizer"]
fn set_servers_while_the_client_reconnects() {
    // WARN lines make the C client format the host string while it pauses.
    zookeeper_mt::set_c_log_level(log::LevelFilter::Warn);
    let proxy = common::Proxy::start(&common::hosts());
    let zk = ZooKeeper::builder(&proxy.connect_string())
        // The shortest the test server grants: the IO thread pauses a 60th of it.
        .session_timeout(Duration::from_secs(1))
        .connect()
        .unwrap();
    // From now on every connection attempt fails: the IO thread keeps walking the list.
    proxy.block();
    let lists = [refused(1), refused(2)];
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < Duration::from_secs(60) {
        // SAFETY: none; this is the race the contract forbids, provoked on purpose.
        let _ = unsafe { zk.set_servers(&lists[(calls % 2) as usize]) };
        calls += 1;
    }
    println!(
        "no use-after-free detected after {calls} set_servers calls in {:?} \
         (the race is timing-dependent)",
        started.elapsed()
    );
}
