//! The C client's log, as `log` records (target `zookeeper_mt::c`) or, with the `tracing`
//! feature, as structured `tracing` events (fields `c_function`, `c_line`, `session_id`).
//!
//! The C level is process-wide (`zoo_set_debug_level`). Unless set explicitly with
//! [`set_c_log_level`], it follows the most verbose level anyone listens at
//! (`log::max_level()`, and with `tracing` the current subscriber's level): at each
//! connect and, while a handle is open, once a second, so the C client neither formats
//! messages nobody will see nor stays quiet after a subscriber asks for more.
//!
//! Routine connection trouble (a lost connection, a connect or read time-out, a session
//! the server expired) is logged by the C client at ERROR; it is reported at WARN here,
//! since the client rides it out (or the application learns it from the session events).

use crossbeam_channel::Sender;
use log::{Level, LevelFilter};
use std::os::raw::c_char;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use zookeeper_mt_sys as sys;

mod line;

use line::CLine;

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
/// connects (and the once-a-second check while handles are open) from deriving it from
/// the `log` / `tracing` levels.
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
        apply(listened_level());
        // Starts the thread that keeps following the level while handles are open.
        let _ = log_thread();
    }
}

/// The most verbose level a record could be wanted at.
fn listened_level() -> LevelFilter {
    let level = log::max_level();
    #[cfg(feature = "tracing")]
    {
        // The session id is read from the C client's INFO line announcing the session,
        // so tracing users get at least INFO from C (a handful of lines per connect).
        let traced = match tracing::level_filters::LevelFilter::current().into_level() {
            None => LevelFilter::Off,
            Some(tracing::Level::ERROR) => LevelFilter::Error,
            Some(tracing::Level::WARN) => LevelFilter::Warn,
            Some(tracing::Level::INFO) => LevelFilter::Info,
            Some(tracing::Level::DEBUG) => LevelFilter::Debug,
            Some(tracing::Level::TRACE) => LevelFilter::Trace,
        };
        let traced = if traced > LevelFilter::Off {
            traced.max(LevelFilter::Info)
        } else {
            traced
        };
        level.max(traced)
    }
    #[cfg(not(feature = "tracing"))]
    level
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

// ---------- one log callback per handle ----------

/// The C log callback has no context pointer. So that a record can name its session,
/// each handle gets one of a fixed set of distinct callbacks (a slot); past the set, the
/// shared callback, whose records carry no session id.
const LOG_SLOTS: usize = 64;

struct SlotState {
    in_use: AtomicBool,
    /// The session id the handle's C client announced (0 until then).
    session: AtomicI64,
}

#[allow(clippy::declare_interior_mutable_const)] // each array element is its own static
const FREE_SLOT: SlotState = SlotState {
    in_use: AtomicBool::new(false),
    session: AtomicI64::new(0),
};
static SLOTS: [SlotState; LOG_SLOTS] = [FREE_SLOT; LOG_SLOTS];
/// Slots in use: handles open (the level check runs only while there are some).
static OPEN_SLOTS: AtomicUsize = AtomicUsize::new(0);

/// The type of the C client's log callback.
pub(crate) type LogCallback = unsafe extern "C" fn(*const c_char);

/// The callback of slot `I`.
///
/// # Safety
/// As [`crate::context::log_callback`]: `message` is NUL-terminated, valid for the call.
unsafe extern "C" fn slot_callback<const I: usize>(message: *const c_char) {
    // SAFETY: the message is forwarded as C passed it, under the same contract.
    unsafe { crate::context::log_callback_for(Some(I), message) }
}

macro_rules! slot_callbacks {
    ($($i:literal)*) => { [$(slot_callback::<$i> as LogCallback,)*] };
}
static CALLBACKS: [LogCallback; LOG_SLOTS] = slot_callbacks!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60
    61 62 63
);

/// A handle's log slot, held for as long as its C client can log (kept with the handle
/// until `zookeeper_close` has returned); freed when dropped.
#[derive(Debug)]
pub(crate) struct LogSlot {
    index: Option<usize>,
}

impl LogSlot {
    pub(crate) fn acquire() -> LogSlot {
        let index = SLOTS.iter().position(|slot| {
            slot.in_use
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if let Some(index) = index {
            SLOTS[index].session.store(0, Ordering::Relaxed);
        }
        OPEN_SLOTS.fetch_add(1, Ordering::Relaxed);
        LogSlot { index }
    }

    /// The callback to hand to `zookeeper_init2`.
    pub(crate) fn callback(&self) -> LogCallback {
        match self.index {
            Some(index) => CALLBACKS[index],
            None => crate::context::log_callback,
        }
    }
}

impl Drop for LogSlot {
    fn drop(&mut self) {
        OPEN_SLOTS.fetch_sub(1, Ordering::Relaxed);
        if let Some(index) = self.index {
            SLOTS[index].session.store(0, Ordering::Relaxed);
            SLOTS[index].in_use.store(false, Ordering::Release);
        }
    }
}

// ---------- records ----------

/// One record, handed from a C thread to the log thread.
struct Record {
    level: Level,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    function: String,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    line: u32,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    session: Option<i64>,
    message: String,
}

/// Maps one C log line (`time:pid(tid):ZOO_LEVEL@func@line: message`) from the handle of
/// log slot `slot` to a record.
///
/// Called on C threads, possibly while the C client holds one of its locks, so the
/// installed logger or subscriber (user code) must not run here: the record is handed to
/// a dedicated thread. Only statics are consulted on the C thread.
pub(crate) fn forward(slot: Option<usize>, text: &str) {
    let parsed = CLine::parse(text);
    if parsed.retcode == Some(-15) {
        // ZSSLCONNECTIONERROR: the C client reports a failed TLS handshake only here.
        TLS_FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    let slot = slot.map(|index| &SLOTS[index]);
    if let (Some(slot), Some(id)) = (slot, parsed.announced_session) {
        slot.session.store(id, Ordering::Relaxed);
    }
    let level = parsed.level();
    if level > listened_level() {
        return;
    }
    let session = slot
        .map(|slot| slot.session.load(Ordering::Relaxed))
        .filter(|&id| id != 0);
    let _ = log_thread().send(Record {
        level,
        function: parsed.function.to_string(),
        line: parsed.line,
        session,
        message: parsed.message.trim_end().to_string(),
    });
}

/// Logs an error of this binding's own from a C thread (e.g. a panic caught in a
/// callback): as for [`forward`], the installed logger runs on the log thread, not on
/// the C thread.
pub(crate) fn error_off_thread(message: String) {
    if Level::Error <= listened_level() {
        let _ = log_thread().send(Record {
            level: Level::Error,
            function: String::new(),
            line: 0,
            session: None,
            message,
        });
    }
}

/// Hands a record to `log` or `tracing` (on the log thread).
fn emit(record: Record) {
    #[cfg(feature = "tracing")]
    {
        let session = record.session.map(|id| format!("{id:#x}"));
        let session = session.as_deref().unwrap_or("");
        let (function, line, message) = (&record.function, record.line, &record.message);
        macro_rules! event {
            ($level:expr) => {
                tracing::event!(
                    target: "zookeeper_mt::c",
                    $level,
                    c_function = %function,
                    c_line = line,
                    session_id = session,
                    "{message}"
                )
            };
        }
        match record.level {
            Level::Error => event!(tracing::Level::ERROR),
            Level::Warn => event!(tracing::Level::WARN),
            Level::Info => event!(tracing::Level::INFO),
            Level::Debug => event!(tracing::Level::DEBUG),
            Level::Trace => event!(tracing::Level::TRACE),
        }
    }
    #[cfg(not(feature = "tracing"))]
    log::log!(target: "zookeeper_mt::c", record.level, "{}", record.message);
}

/// The sending end of the thread that hands C log records to `log` / `tracing`, and
/// that re-reads the listened level once a second while handles are open.
fn log_thread() -> &'static Sender<Record> {
    static SENDER: OnceLock<Sender<Record>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (sender, receiver) = crossbeam_channel::unbounded::<Record>();
        let spawned = std::thread::Builder::new()
            .name("zookeeper-c-log".into())
            .spawn(move || loop {
                match receiver.recv_timeout(Duration::from_secs(1)) {
                    Ok(record) => emit(record),
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        if OPEN_SLOTS.load(Ordering::Relaxed) > 0
                            && !EXPLICIT_LEVEL.load(Ordering::Relaxed)
                        {
                            apply(listened_level());
                        }
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
                }
            });
        if let Err(error) = spawned {
            // Without the thread records are dropped (the channel has no receiver).
            eprintln!("zookeeper-mt: cannot start the C log thread: {error}");
        }
        sender
    })
}
