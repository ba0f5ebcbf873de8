//! The C client's log goes to the `log` crate, target `zookeeper_mt::c`.
//!
//! The C level is process-wide (`zoo_set_debug_level`). Unless set explicitly with
//! [`set_c_log_level`], each connect sets it from `log::max_level()`, so the C client
//! does not format messages nobody will see.

use crossbeam_channel::Sender;
use log::{Level, LevelFilter};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use zookeeper_mt_sys as sys;

static EXPLICIT_LEVEL: AtomicBool = AtomicBool::new(false);

/// The C level last set, or -1. `zoo_set_debug_level` writes a plain global that every
/// handle's C threads read unsynchronized: it is only called when the level changes, not
/// at every connect while other handles run.
static APPLIED_LEVEL: AtomicI32 = AtomicI32::new(-1);

/// TLS handshake failures the C client has logged in this process.
static TLS_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The count of TLS handshake failures logged so far (process-wide: the C log line names
/// no handle, so a concurrent connect to another TLS server can be counted too).
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(crate) fn tls_failures() -> u64 {
    TLS_FAILURES.load(Ordering::Relaxed)
}

/// Sets the C client's log level for the whole process (it is global in C), and stops
/// connects from deriving it from `log::max_level()`.
///
/// The C client writes the level to a plain global its threads read without
/// synchronization: changing it while handles are open is a (benign in practice) data
/// race inside the C client. Set it once, before connecting.
pub fn set_c_log_level(level: LevelFilter) {
    EXPLICIT_LEVEL.store(true, Ordering::Relaxed);
    apply(level);
}

pub(crate) fn apply_default_level() {
    if !EXPLICIT_LEVEL.load(Ordering::Relaxed) {
        apply(log::max_level());
    }
}

fn apply(level: LevelFilter) {
    let c_level = match level {
        // Errors are always asked of C (they are rare): `forward` counts TLS handshake
        // failures from them, so `connect` can name the cause of a timeout.
        LevelFilter::Off | LevelFilter::Error => sys::ZOO_LOG_LEVEL_ERROR,
        LevelFilter::Warn => sys::ZOO_LOG_LEVEL_WARN,
        LevelFilter::Info => sys::ZOO_LOG_LEVEL_INFO,
        LevelFilter::Debug | LevelFilter::Trace => sys::ZOO_LOG_LEVEL_DEBUG,
    };
    if APPLIED_LEVEL.swap(c_level as i32, Ordering::Relaxed) == c_level as i32 {
        return;
    }
    // SAFETY: sets a process-wide int; no preconditions.
    unsafe { sys::zoo_set_debug_level(c_level) };
}

/// Maps one C log line (`time:pid(tid):ZOO_LEVEL@func@line: message`) to a `log` record.
///
/// Called on C threads, possibly while the C client holds one of its locks, so the
/// installed logger (user code) must not run here: the record is handed to a dedicated
/// thread. Only `log::max_level()` (a static) is consulted on the C thread.
pub(crate) fn forward(line: &str) {
    if line.contains("zk retcode=-15") {
        // ZSSLCONNECTIONERROR: the C client reports a failed TLS handshake only here.
        TLS_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    let level = if line.contains("ZOO_ERROR@") {
        Level::Error
    } else if line.contains("ZOO_WARN@") {
        Level::Warn
    } else if line.contains("ZOO_INFO@") {
        Level::Info
    } else {
        Level::Debug
    };
    if level > log::max_level() {
        return;
    }
    let message = line
        .split_once("ZOO_")
        .map_or(line, |(_, rest)| {
            rest.split_once('@').map_or(rest, |(_, m)| m)
        })
        .trim_end()
        .to_string();
    let _ = log_thread().send((level, message));
}

/// Logs an error of this binding's own from a C thread (e.g. a panic caught in a
/// callback): as for [`forward`], the installed logger runs on the log thread, not on
/// the C thread.
pub(crate) fn error_off_thread(message: String) {
    if Level::Error <= log::max_level() {
        let _ = log_thread().send((Level::Error, message));
    }
}

/// The sending end of the thread that hands C log records to the `log` crate.
fn log_thread() -> &'static Sender<(Level, String)> {
    static SENDER: OnceLock<Sender<(Level, String)>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (sender, receiver) = crossbeam_channel::unbounded::<(Level, String)>();
        let spawned = std::thread::Builder::new()
            .name("zookeeper-c-log".into())
            .spawn(move || {
                for (level, message) in receiver {
                    log::log!(target: "zookeeper_mt::c", level, "{message}");
                }
            });
        if let Err(error) = spawned {
            // Without the thread records are dropped (the channel has no receiver).
            eprintln!("zookeeper-mt: cannot start the C log thread: {error}");
        }
        sender
    })
}
