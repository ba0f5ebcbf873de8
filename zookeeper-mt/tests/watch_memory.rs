//! Heap per armed watch stays near the C client's, and what a peak of watches and
//! requests in flight allocated is given back. Measured with `mallinfo2` deltas (every
//! arena, mmapped blocks included), which count Rust's and C's allocations alike.
//!
//! One test in this binary, so no other test allocates while it measures. The bounds
//! have slack (measured, 30-byte paths: ~350 B per distinct-path watch, the C client
//! alone ~180 B; ~26 B per extra watch on a watched path; `bench memcheck --per-watch`
//! prints both side by side).

mod common;

use common::{connect, create};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use zookeeper_mt::Watch;

const WATCHES: usize = 20_000;
/// Reads in flight at once (below the C client's wake-up pipe limit; see the notes).
const IN_FLIGHT: usize = 4_000;
/// Bound per watch on a distinct path (target: 2 x the C client's ~180 B).
const MAX_PER_DISTINCT: f64 = 400.0;
/// Bound per extra watch on an already watched path.
const MAX_PER_EXTRA: f64 = 160.0;
/// What C itself keeps after its watches are gone, per peak watch: its watch hash
/// tables never shrink (~20 B measured).
const C_KEEPS_PER_PEAK_WATCH: i64 = 30;
/// Allocator and test noise.
const SLACK: i64 = 128 * 1024;

/// Counts the blocks Rust allocates and has not freed (C's `malloc`s are not seen).
struct CountingAlloc;

static RUST_BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a
// side effect that allocates nothing.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        RUST_BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        RUST_BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Bytes in use on the heap.
fn heap() -> i64 {
    // SAFETY: mallinfo2 has no preconditions.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as i64
}

/// Arms a watch for each path, `IN_FLIGHT` reads at a time.
fn arm(zk: &zookeeper_mt::ZooKeeper, paths: &[String], into: &mut Vec<Watch>) {
    for chunk in paths.chunks(IN_FLIGHT) {
        let pending: Vec<_> = chunk.iter().map(|p| zk.exists_watch_async(p)).collect();
        for reply in pending {
            into.push(reply.wait().expect("exists_watch").1);
        }
    }
}

#[test]
fn heap_per_watch_stays_near_the_c_clients_and_peaks_are_given_back() {
    // Paths of about 30 bytes, as in the bench (each byte counts twice: ours and C's).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let base = format!("/zkrs-wm-{}-{nanos:09}", std::process::id());
    let absent: Vec<String> = (0..WATCHES).map(|i| format!("{base}/{i:05}")).collect();
    let watched = format!("{base}/watched");
    let same: Vec<String> = vec![watched.clone(); WATCHES];
    // Reserved up front: the caller's container is not the client's memory.
    let mut watches: Vec<Watch> = Vec::with_capacity(WATCHES + 1);
    {
        let zk = connect();
        create(&zk, &base, b"");
        create(&zk, &watched, b"");
    }

    let before_connect = heap();
    let zk = connect();
    drop(zk.exists_watch(&format!("{base}/warm-up")).unwrap());

    let (start, start_blocks) = (heap(), RUST_BLOCKS.load(Ordering::Relaxed));
    arm(&zk, &absent, &mut watches);
    assert_eq!(zk.live_contexts(), WATCHES);
    let per_distinct = (heap() - start) as f64 / WATCHES as f64;
    let blocks = (RUST_BLOCKS.load(Ordering::Relaxed) - start_blocks) as f64 / WATCHES as f64;
    watches.clear();
    assert_eq!(zk.live_contexts(), 0);
    let after_drop = heap() - start;

    watches.push(zk.exists_watch(&watched).unwrap().1);
    let start = heap();
    arm(&zk, &same[1..], &mut watches);
    assert_eq!(zk.live_contexts(), 1);
    let per_extra = (heap() - start) as f64 / (WATCHES - 1) as f64;
    watches.clear();

    zk.close().unwrap();
    drop(zk);
    let after_close = heap() - before_connect;
    println!(
        "{}-byte paths: per distinct-path watch {per_distinct:.0} B ({blocks:.2} Rust \
         blocks), per extra watch {per_extra:.0} B, \
         left after dropping {WATCHES} watches {after_drop} B, after close {after_close} B",
        absent[0].len()
    );

    assert!(
        per_distinct < MAX_PER_DISTINCT,
        "{per_distinct:.0} B per distinct-path watch"
    );
    assert!(
        per_extra < MAX_PER_EXTRA,
        "{per_extra:.0} B per extra watch"
    );
    // Our registrations, their table and the registry entries of the reads in flight
    // (several hundred KiB at the peak) are given back; C's tables are not.
    let c_keeps = C_KEEPS_PER_PEAK_WATCH * WATCHES as i64;
    assert!(
        after_drop < c_keeps + SLACK,
        "{after_drop} B left after every watch was dropped (C keeps up to {c_keeps} B)"
    );
    // The registry is global: it must not keep the peak after the handle is gone.
    assert!(after_close < SLACK, "{after_close} B left after close");
}
