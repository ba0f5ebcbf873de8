//! Ports, temp dirs, log excerpts and locating Java and ZooKeeper.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{HarnessError, Result};
use crate::spawner::process_alive;

/// Picks `n` distinct free TCP ports on 127.0.0.1.
///
/// All listeners are held until every port is picked (so none is handed out twice),
/// then all are closed. The ports come from outside the kernel's ephemeral range (below
/// it where there is room), which the kernel never assigns by itself: a member killed
/// and restarted gets its port back. A port can still be taken by another process before
/// the server binds it; server start-up retries with new ports when the server log shows
/// a bind failure.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    Ok(reserve_ports(n)?.release())
}

/// Ports picked and still held by listeners, so that nothing in this process that binds
/// port 0 meanwhile (a proxy in an ensemble's peer view, say) can be given one of them.
/// Dropping it frees the ports for the servers that are to bind them.
pub(crate) struct ReservedPorts {
    pub(crate) ports: Vec<u16>,
    listeners: Vec<TcpListener>,
}

impl ReservedPorts {
    /// Closes the listeners: the ports are free for the servers to bind.
    pub(crate) fn release(self) -> Vec<u16> {
        drop(self.listeners);
        self.ports
    }
}

/// The lowest port the harness picks from.
const PICK_FLOOR: u32 = 10_000;

/// The ports to pick from: those below the kernel's ephemeral range (or above it), which
/// the kernel never numbers a socket with by itself. So a client's outgoing connection,
/// or a bind to port 0, cannot take a member's port while the member is down between a
/// kill and its restart, when it must get the same port back. `None`: no such room, pick
/// with port 0.
fn pick_range() -> Option<(u32, u32)> {
    let text = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut bounds = text.split_whitespace().map(|v| v.parse::<u32>().ok());
    let (low, high) = (bounds.next()??, bounds.next()??);
    if low >= PICK_FLOOR + 1_000 {
        Some((PICK_FLOOR, low - 1))
    } else if high + 1_000 <= 65_535 {
        Some((high + 1, 65_535))
    } else {
        None
    }
}

/// The next candidate port of this process: a cursor that walks the range from a start
/// that differs per process, so that successive picks (and concurrent harness processes)
/// do not probe the ports just released for a server that has not bound them yet.
fn next_candidate(range: (u32, u32)) -> u16 {
    static CURSOR: OnceLock<AtomicU64> = OnceLock::new();
    let span = u64::from(range.1 - range.0 + 1);
    let cursor = CURSOR.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        AtomicU64::new(u64::from(std::process::id()) * 7_919 + u64::from(nanos))
    });
    let offset = cursor.fetch_add(1, Ordering::Relaxed) % span;
    // In range: range.1 <= 65_535.
    (u64::from(range.0) + offset) as u16
}

/// Picks `n` distinct free ports and holds them (see [`ReservedPorts`]).
pub(crate) fn reserve_ports(n: usize) -> Result<ReservedPorts> {
    let mut listeners = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let range = pick_range();
    let mut probes = range.map_or(0, |(low, high)| high - low + 1);
    while ports.len() < n {
        let listener = match range {
            Some(range) if probes > 0 => {
                probes -= 1;
                match TcpListener::bind((Ipv4Addr::LOCALHOST, next_candidate(range))) {
                    Ok(listener) => listener,
                    Err(_) => continue, // in use: the next one
                }
            }
            // No room outside the ephemeral range, or all of it in use.
            _ => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to pick a free port", e))?,
        };
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading a picked port", e))?
            .port();
        ports.push(port);
        listeners.push(listener);
    }
    Ok(ReservedPorts { ports, listeners })
}

/// Picks one free TCP port on 127.0.0.1 (nothing listens there afterwards, which also
/// makes it a "connection refused" address for tests).
pub fn free_port() -> Result<u16> {
    Ok(free_ports(1)?[0])
}

const DIR_PREFIX: &str = "zk-harness-";

/// Set `ZK_HARNESS_KEEP_DIRS=1` to keep server dirs (logs, data) after the harness is done.
pub(crate) fn keep_dirs() -> bool {
    std::env::var_os("ZK_HARNESS_KEEP_DIRS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Creates a fresh private directory `<tmp>/zk-harness-<pid>-<n>-<nanos>`.
pub(crate) fn create_temp_dir() -> Result<PathBuf> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    static SWEEP: Once = Once::new();
    let base = std::env::temp_dir();
    SWEEP.call_once(|| sweep_stale_dirs(&base));
    let pid = std::process::id();
    loop {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = base.join(format!("{DIR_PREFIX}{pid}-{seq}-{nanos}"));
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(HarnessError::io(
                    format!("creating temp dir {}", path.display()),
                    e,
                ))
            }
        }
    }
}

/// Removes dirs left by harness processes that died without cleaning up (e.g. SIGKILLed
/// test binaries; their JVMs died with them through PDEATHSIG).
fn sweep_stale_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != me && !process_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// The last `lines` lines of a log file (reads at most the last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("  <cannot read {}: {e}>", path.display()),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err() || f.read_to_end(&mut buf).is_err() {
        return format!("  <cannot read {}>", path.display());
    }
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    if all.is_empty() {
        return "  <log is empty>".to_string();
    }
    all[from..]
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// True if the log shows the server could not bind one of its ports.
pub(crate) fn log_shows_bind_failure(path: &Path) -> bool {
    fs::read_to_string(path)
        .map(|s| s.contains("Address already in use") || s.contains("BindException"))
        .unwrap_or(false)
}

/// The Java executable: `$ZK_HARNESS_JAVA`, else `$JAVA_HOME/bin/java`, else `java` on
/// `PATH`.
pub(crate) fn find_java() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ZK_HARNESS_JAVA").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|v| !v.is_empty()) {
        let p = Path::new(&home).join("bin/java");
        if p.is_file() {
            return Ok(p);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("java");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(HarnessError::JavaNotFound {
        program: PathBuf::from("java"),
        source: None,
    })
}

const JAVA_DIR: &str = "/usr/share/java";

/// The server class path after the per-server config dir: `$ZK_HARNESS_CLASSPATH`, else
/// `$ZOOKEEPER_HOME/lib/*` (an Apache release tarball's layout), else Debian's jars.
///
/// Debian's `zookeeper.jar` lists its dependencies in its manifest `Class-Path`, but no
/// SLF4J binding. A `/usr/share/java/*` wildcard must not be used: that directory holds
/// several SLF4J bindings (nop, simple, jdk14, log4j12, ...), SLF4J then picks one by
/// directory order (in practice the NOP one, so the server logs nothing) and scanning
/// ~500 jars slows start-up. So: the server jar plus the log4j 1.2 binding, explicitly.
pub(crate) fn server_classpath() -> Result<String> {
    if let Some(cp) = std::env::var("ZK_HARNESS_CLASSPATH")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Ok(cp);
    }
    if let Some(home) = std::env::var_os("ZOOKEEPER_HOME").filter(|v| !v.is_empty()) {
        let lib = Path::new(&home).join("lib");
        let has_server_jar = fs::read_dir(&lib)
            .map(|dir| {
                dir.flatten().any(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("zookeeper-") && name.ends_with(".jar")
                })
            })
            .unwrap_or(false);
        if !has_server_jar {
            return Err(HarnessError::ZooKeeperNotInstalled {
                jar: lib.join("zookeeper-*.jar"),
            });
        }
        // The JVM expands `dir/*` to the jars in it; a release's lib/ holds one logging
        // binding only, unlike /usr/share/java.
        return Ok(format!("{}/*", lib.display()));
    }
    let jar = Path::new(JAVA_DIR).join("zookeeper.jar");
    if !jar.is_file() {
        return Err(HarnessError::ZooKeeperNotInstalled { jar });
    }
    let mut parts = vec![jar.display().to_string()];
    for name in ["zookeeper-jute.jar", "slf4j-log4j12.jar", "log4j-1.2.jar"] {
        let p = Path::new(JAVA_DIR).join(name);
        if p.is_file() {
            parts.push(p.display().to_string());
        }
    }
    Ok(parts.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_are_not_handed_out_while_held() {
        let reserved = reserve_ports(16).unwrap();
        let mut distinct = reserved.ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 16, "{:?}", reserved.ports);
        // What a proxy in a peer view does meanwhile: bind port 0 (and keep it).
        let others: Vec<TcpListener> = (0..256)
            .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap())
            .collect();
        for l in &others {
            let port = l.local_addr().unwrap().port();
            assert!(
                !reserved.ports.contains(&port),
                "reserved port {port} handed out"
            );
        }
    }

    #[test]
    fn picked_ports_are_outside_the_ephemeral_range() {
        let Some((low, high)) = pick_range() else {
            eprintln!("no room outside the ephemeral range here: ports come from port 0");
            return;
        };
        for port in free_ports(64).unwrap() {
            assert!(
                (low..=high).contains(&u32::from(port)),
                "{port} outside {low}..={high}"
            );
        }
    }
}
