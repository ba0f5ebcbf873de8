//! `memcheck --per-watch N`: heap bytes per armed watch, our client next to the raw C
//! client, in one process against one server.
//!
//! Every figure is a delta of glibc's `mallinfo2` (`uordblks + hblkhd`: bytes in use in
//! every arena plus mmapped blocks), which counts Rust and C allocations the same way
//! (both go through `malloc`). Phases:
//!
//! - distinct: N exists-watches on N distinct absent paths (pipelined, `--batch` in
//!   flight), heap with them all armed, per watch;
//! - extra: N more watches on ONE already watched path, per extra watch (C: N distinct
//!   contexts on one path, as C merges equal (watcher, context) pairs);
//! - after drop: every watch dropped (C: each removed with `zoo_remove_watches`, local),
//!   the handle open: what stays from the peak (C's own watch hash tables never shrink;
//!   our registry and watch table do);
//! - after close: the handle closed, against the heap before it was opened.
//!
//! The `Watch` values are kept in a vector reserved before the baseline, so the figure is
//! the client's memory, not the caller's container (`size_of::<Watch>()` is printed).

use crate::flags::Flags;
use crate::rust_client::{connect, ensure_path, Result};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use zookeeper_mt::Watch;
use zookeeper_mt_sys as sys;

/// Bytes in use on the heap, every arena and mmapped block.
fn heap() -> i64 {
    // SAFETY: mallinfo2 has no preconditions.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as i64
}

fn per(bytes: i64, n: usize) -> f64 {
    bytes as f64 / n as f64
}

struct Figures {
    distinct: f64,
    extra: f64,
    after_drop: i64,
    after_close: i64,
}

pub fn main(flags: &Flags) -> Result<()> {
    let n: usize = flags.num("per-watch", 20_000)?;
    let batch: usize = flags.num("batch", 4_000)?;
    if n == 0 || batch == 0 {
        return Err("--per-watch and --batch must be positive".into());
    }
    let (_server, hosts) = flags.hosts_or_start()?;
    let base = format!("/watchmem-{}", std::process::id());
    {
        let zk = connect(&hosts)?;
        ensure_path(&zk, &base)?;
        zk.create(
            &format!("{base}/watched"),
            b"",
            zookeeper_mt::CreateMode::Persistent,
        )?;
        zk.close()?;
    }
    let absent = |i: usize| format!("{base}/absent-{i:08}");
    println!(
        "{n} exists-watches on distinct absent paths ({} bytes each), {batch} in flight; \
         {n} extra watches on one path; heap = mallinfo2 uordblks + hblkhd\n",
        absent(0).len()
    );
    let t = Instant::now();
    let rust = rust_phase(&hosts, n, batch, &base, absent)?;
    let c = c_phase(&hosts, n, batch, &base, absent)?;
    println!("| heap per watch | zookeeper-mt | C client | ratio |\n|---|---:|---:|---:|");
    println!(
        "| distinct path (B/watch) | {:.0} | {:.0} | {:.2} |",
        rust.distinct,
        c.distinct,
        rust.distinct / c.distinct
    );
    println!(
        "| extra watch on a watched path (B/watch) | {:.0} | {:.0} | {:.2} |",
        rust.extra,
        c.extra,
        rust.extra / c.extra
    );
    println!(
        "| left after dropping (C: removing) every distinct watch, handle open (B total) | {} | {} | |",
        rust.after_drop, c.after_drop
    );
    println!(
        "| left after close vs. before connect (B total) | {} | {} | |",
        rust.after_close, c.after_close
    );
    println!(
        "\nsize_of::<Watch>() = {} B (held by the caller, not counted above); {:.1} s",
        std::mem::size_of::<Watch>(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn rust_phase(
    hosts: &str,
    n: usize,
    batch: usize,
    base: &str,
    absent: impl Fn(usize) -> String,
) -> Result<Figures> {
    let paths: Vec<String> = (0..n).map(&absent).collect();
    let mut watches: Vec<Watch> = Vec::with_capacity(n + 1);
    let before_connect = heap();
    let zk = connect(hosts)?;
    // Warm-up: one watch armed and dropped (first-use allocations are not per watch).
    drop(zk.exists_watch(&absent(n))?);
    let start = heap();
    for chunk in paths.chunks(batch) {
        let pending: Vec<_> = chunk.iter().map(|p| zk.exists_watch_async(p)).collect();
        for reply in pending {
            let (stat, watch) = reply.wait()?;
            if stat.is_some() {
                return Err("an absent path exists".into());
            }
            watches.push(watch);
        }
    }
    let distinct = per(heap() - start, n);
    watches.clear();
    let after_drop = heap() - start;

    let watched = format!("{base}/watched");
    watches.push(zk.exists_watch(&watched)?.1);
    let start = heap();
    for _ in 0..n / batch.max(1) + 1 {
        let k = batch.min(n + 1 - watches.len());
        let pending: Vec<_> = (0..k).map(|_| zk.exists_watch_async(&watched)).collect();
        for reply in pending {
            watches.push(reply.wait()?.1);
        }
    }
    let extra = per(heap() - start, n);
    watches.clear();
    zk.close()?;
    drop(zk);
    Ok(Figures {
        distinct,
        extra,
        after_drop,
        after_close: heap() - before_connect,
    })
}

/// Counts C completions; the waiting thread blocks until the count is reached.
static DONE: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

unsafe extern "C" fn c_completion(_rc: c_int, _stat: *const sys::Stat, _data: *const c_void) {
    *DONE.0.lock().unwrap() += 1;
    DONE.1.notify_all();
}

unsafe extern "C" fn c_watcher(
    _zh: *mut sys::zhandle_t,
    _type: c_int,
    _state: c_int,
    _path: *const c_char,
    _context: *mut c_void,
) {
}

fn wait_done(count: usize) -> Result<()> {
    let guard = DONE.0.lock().unwrap();
    let (guard, timeout) = DONE
        .1
        .wait_timeout_while(guard, Duration::from_secs(60), |done| *done < count)
        .unwrap();
    if timeout.timed_out() {
        return Err(format!("C: {} of {count} completions", *guard).into());
    }
    Ok(())
}

/// Arms `contexts.len()` C watches with `zoo_awexists`, `batch` in flight.
fn c_arm(
    zh: *mut sys::zhandle_t,
    paths: &[CString],
    contexts: &[usize],
    batch: usize,
) -> Result<()> {
    let mut submitted = *DONE.0.lock().unwrap();
    for (paths, contexts) in paths.chunks(batch).zip(contexts.chunks(batch)) {
        for (path, &context) in paths.iter().zip(contexts) {
            // SAFETY: `zh` is a live handle used by this thread only; the path is
            // NUL-terminated (C copies it); the contexts are plain integers never read.
            let rc = unsafe {
                sys::zoo_awexists(
                    zh,
                    path.as_ptr(),
                    Some(c_watcher),
                    context as *mut c_void,
                    Some(c_completion),
                    std::ptr::null(),
                )
            };
            if rc != sys::ZOK {
                return Err(format!("zoo_awexists: {rc}").into());
            }
            submitted += 1;
        }
        wait_done(submitted)?;
    }
    Ok(())
}

fn c_phase(
    hosts: &str,
    n: usize,
    batch: usize,
    base: &str,
    absent: impl Fn(usize) -> String,
) -> Result<Figures> {
    let paths: Vec<CString> = (0..n).map(|i| CString::new(absent(i)).unwrap()).collect();
    let watched = vec![CString::new(format!("{base}/watched")).unwrap(); n];
    let host = CString::new(hosts)?;
    let before_connect = heap();
    // SAFETY: the host string is NUL-terminated (copied by C); no client id, no context.
    let zh = unsafe {
        sys::zoo_set_debug_level(sys::ZOO_LOG_LEVEL_ERROR);
        sys::zookeeper_init(
            host.as_ptr(),
            Some(c_watcher),
            10_000,
            std::ptr::null(),
            std::ptr::null_mut(),
            0,
        )
    };
    if zh.is_null() {
        return Err("zookeeper_init failed".into());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    // SAFETY: `zh` is live; reading the C library's constant.
    while unsafe { sys::zoo_state(zh) != sys::ZOO_CONNECTED_STATE } {
        if Instant::now() > deadline {
            return Err("C client did not connect".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Warm-up, as for Rust.
    c_arm(zh, &[CString::new(absent(n)).unwrap()], &[0], 1)?;
    let start = heap();
    c_arm(zh, &paths, &vec![0; n], batch)?;
    let distinct = per(heap() - start, n);
    for path in &paths {
        // SAFETY: live handle; NUL-terminated path; the (watcher, context) pair armed
        // above. Local removal only touches C's tables (it completes before returning).
        let rc = unsafe {
            sys::zoo_remove_watches(
                zh,
                path.as_ptr(),
                sys::ZWATCHTYPE_DATA,
                Some(c_watcher),
                std::ptr::null_mut(),
                1,
            )
        };
        if rc != sys::ZOK {
            return Err(format!("zoo_remove_watches: {rc}").into());
        }
    }
    let after_drop = heap() - start;
    c_arm(zh, &watched[..1], &[1], 1)?;
    let start = heap();
    let contexts: Vec<usize> = (2..n + 2).collect();
    c_arm(zh, &watched, &contexts, batch)?;
    let extra = per(heap() - start, n);
    // SAFETY: the handle is closed once, from this (non-callback) thread.
    unsafe { sys::zookeeper_close(zh) };
    Ok(Figures {
        distinct,
        extra,
        after_drop,
        after_close: heap() - before_connect,
    })
}
