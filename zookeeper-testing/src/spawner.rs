//! Spawning server JVMs from one long-lived thread, so they die with the test process.
//!
//! Every JVM is started with `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills it when
//! its parent dies, even if the test process is killed abruptly (SIGKILL, abort, a
//! `panic = "abort"` profile) and no `Drop` or `atexit` code runs.
//!
//! The catch: for PDEATHSIG the "parent" is the *thread* that forked, not the process.
//! `cargo test` runs each test on its own short-lived thread; a JVM forked from a test
//! thread would be SIGKILLed as soon as that test's thread ends, e.g. a JVM started for
//! [`shared_server`](crate::shared_server) by the first test that asks for it. So all
//! JVMs are forked by a single dedicated thread that lives as long as the process: it
//! receives [`Command`]s over a channel and replies with the spawned [`Child`]. The thread
//! only ends when the process ends, which is exactly when the JVMs should die.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;

struct SpawnRequest {
    cmd: Command,
    reply: mpsc::SyncSender<io::Result<Child>>,
}

fn spawner() -> io::Result<&'static mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    // Racing initialisers may each start a thread; only one sender is kept and the other
    // thread ends at once when its sender is dropped, having spawned nothing.
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    thread::Builder::new()
        .name("zk-harness-spawner".into())
        .spawn(move || {
            // Ends only when every sender is gone; the kept sender is in a static.
            for mut req in rx {
                let result = req.cmd.spawn();
                let _ = req.reply.send(result);
            }
        })?;
    Ok(SPAWNER.get_or_init(|| tx))
}

/// Spawns `cmd` on the spawner thread with PDEATHSIG set (Linux), returning the child.
pub(crate) fn spawn(mut cmd: Command) -> io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid, _exit); it allocates nothing and
    // touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                ) == -1
                {
                    return Err(io::Error::last_os_error());
                }
            }
            // The parent may have died between fork and prctl: then no signal will come.
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let gone = || io::Error::other("zk-harness spawner thread is gone");
    spawner()?
        .send(SpawnRequest {
            cmd,
            reply: reply_tx,
        })
        .map_err(|_| gone())?;
    reply_rx.recv().map_err(|_| gone())?
}

/// Sends `sig` to `pid`. Returns false if the process does not exist.
///
/// Callers only pass pids of children they have not reaped yet, so the pid cannot have
/// been reused by another process.
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// True if our child `pid` has exited; does not reap it (`WNOWAIT`).
pub(crate) fn has_exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with a valid siginfo_t pointer; WNOWAIT leaves the
    // child waitable, so std's `Child` can still reap it.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read for a waitid result (0 when nothing changed).
    rc == 0 && unsafe { info.si_pid() } != 0
}

/// The state letter of `/proc/<pid>/task/<tid>/stat`-style content (after the
/// parenthesised command name, which may contain spaces).
fn stat_state(stat: &str) -> Option<char> {
    let i = stat.rfind(')')?;
    stat[i + 1..].trim_start().chars().next()
}

/// After SIGSTOP, waits (up to `timeout`) until every thread of `pid` is actually stopped:
/// the group stop is asynchronous, and a thread busy in a system call could still answer
/// a request right after `kill` returns. Returns false on timeout.
pub(crate) fn wait_stopped(pid: u32, timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let task_dir = format!("/proc/{pid}/task");
    loop {
        let Ok(tasks) = std::fs::read_dir(&task_dir) else {
            // No /proc (or the process is gone): nothing to wait for.
            return true;
        };
        let all_stopped = tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|s| stat_state(&s))
                .is_none_or(|c| matches!(c, 'T' | 't' | 'Z' | 'X'))
        });
        if all_stopped {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// True if a process with this pid exists and is not a zombie.
///
/// Useful to check that a JVM is gone after cleanup, also when it was reparented to a
/// PID 1 that does not reap zombies.
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks existence and permission.
    let exists = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat_state(&stat), Some('Z' | 'X')),
        // Without /proc the kill(2) answer is all there is.
        Err(_) => !std::path::Path::new("/proc/self/stat").exists(),
    }
}
