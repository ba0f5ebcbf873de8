//! One real ZooKeeper server process.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::edge::{self, Crafted};
use crate::error::{HarnessError, Result};
use crate::fourlw::{four_letter, Mode};
use crate::options::ServerOptions;
use crate::spawner;
use crate::util;

/// Poll interval of the readiness checks.
pub(crate) const POLL: Duration = Duration::from_millis(50);
/// Timeout of one four-letter probe inside a wait loop.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Timeout of [`Server::four_letter`].
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(3);
/// Start attempts when the server log shows a port bind failure (port stolen after picking).
pub(crate) const START_ATTEMPTS: usize = 3;

const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// Quorum settings of an ensemble member.
pub(crate) struct QuorumMember {
    /// This member's `myid`.
    pub my_id: u32,
    /// `(myid, quorum port, election port)` of every member, this one included.
    pub peers: Vec<(u32, u16, u16)>,
}

#[derive(Default)]
struct ProcState {
    child: Option<Child>,
    paused: bool,
}

/// A real ZooKeeper server (a JVM running `QuorumPeerMain`) on 127.0.0.1, with its own
/// temp dir holding `zoo.cfg`, the data dir and `server.log`.
///
/// Dropping it SIGKILLs and reaps the process (also when paused, also while a test
/// panics) and removes the temp dir (kept when `ZK_HARNESS_KEEP_DIRS=1`). If the test
/// process dies abruptly, the kernel kills the JVM (see the spawner notes in the crate
/// docs).
///
/// All methods take `&self`: a server can be shared between threads.
pub struct Server {
    label: String,
    port: u16,
    /// The TLS client port, when started with [`ServerOptions::tls`].
    secure_port: Option<u16>,
    dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    cfg_path: PathBuf,
    java: PathBuf,
    args: Vec<String>,
    start_timeout: Duration,
    stop_timeout: Duration,
    state: Mutex<ProcState>,
    /// Pid of the unreaped child, 0 if none. Cleared *before* the child is reaped, so a
    /// non-zero value never names a reused pid. Read by the `atexit` hook, which must not
    /// block on `state`.
    pid_mirror: AtomicU32,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("label", &self.label)
            .field("port", &self.port)
            .field("dir", &self.dir)
            .field("pid", &self.pid())
            .finish()
    }
}

impl Server {
    /// Starts a standalone server with [`ServerOptions::default`] and waits until it
    /// serves.
    pub fn start() -> Result<Server> {
        Self::start_with(&ServerOptions::default())
    }

    /// Starts a standalone server on a free loopback port and waits (up to
    /// `opts.start_timeout`) until it answers `ruok` with `imok` and `srvr` reports
    /// `Mode: standalone`.
    pub fn start_with(opts: &ServerOptions) -> Result<Server> {
        Self::start_prepared(opts, |_| Ok(()))
    }

    /// Starts a standalone server (with [`ServerOptions::default`]) whose data dir first
    /// gets a snapshot holding the [`Crafted`] nodes, with counters at chosen values (e.g.
    /// a parent's sequential counter right below `i32::MAX`). See [`Crafted`].
    ///
    /// The crafted state is an ordinary snapshot: it survives restarts like any data.
    pub fn start_crafted(crafted: &Crafted) -> Result<Server> {
        Self::start_crafted_with(crafted, &ServerOptions::default())
    }

    /// [`start_crafted`](Self::start_crafted) with options. The snapshot writer's output
    /// goes to the head of [`log_path`](Self::log_path).
    pub fn start_crafted_with(crafted: &Crafted, opts: &ServerOptions) -> Result<Server> {
        Self::start_prepared(opts, |server| {
            crafted
                .write_logged(&server.data_dir, &server.dir, &server.log_path)
                .map_err(|e| edge::with_output(e, &server.log_path))
        })
    }

    /// Prepares a server, runs `before_launch` on it (its dirs exist, no process yet),
    /// launches it and waits until it serves; retries with a new port if the port was
    /// taken in between.
    fn start_prepared(
        opts: &ServerOptions,
        before_launch: impl Fn(&Server) -> Result<()>,
    ) -> Result<Server> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = util::free_port()?;
            let server = Server::prepare(format!("server 127.0.0.1:{port}"), port, opts, None)?;
            before_launch(&server)?;
            let result = server
                .launch()
                .and_then(|()| server.wait_until_serving(opts.start_timeout));
            match result {
                Ok(_) => return Ok(server),
                Err(_) if attempt < START_ATTEMPTS && server.bind_failed() => continue,
                Err(e) => return Err(server.note_dir_removal(e)),
            }
        }
    }

    /// Creates the temp dir and writes the configuration; starts no process.
    pub(crate) fn prepare(
        label: String,
        port: u16,
        opts: &ServerOptions,
        quorum: Option<&QuorumMember>,
    ) -> Result<Server> {
        let java = util::find_java()?;
        let classpath = util::server_classpath()?;
        let secure_port = match opts.tls {
            Some(_) => Some(
                util::free_ports(2)?
                    .into_iter()
                    .find(|p| *p != port)
                    .unwrap_or(port.wrapping_add(1)),
            ),
            None => None,
        };
        let dir = util::create_temp_dir()?;
        // From here on the Server owns `dir` and removes it on drop, also on error.
        let mut server = Server {
            label,
            port,
            secure_port,
            data_dir: dir.join("data"),
            log_path: dir.join("server.log"),
            cfg_path: dir.join("zoo.cfg"),
            dir,
            java,
            args: Vec::new(),
            start_timeout: opts.start_timeout,
            stop_timeout: opts.stop_timeout,
            state: Mutex::new(ProcState::default()),
            pid_mirror: AtomicU32::new(0),
        };
        server.write_files(opts, quorum)?;
        server.args = server.jvm_args(opts, &classpath);
        Ok(server)
    }

    fn write_files(&self, opts: &ServerOptions, quorum: Option<&QuorumMember>) -> Result<()> {
        let write = |path: &Path, text: &str| {
            fs::write(path, text)
                .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
        };
        fs::create_dir(&self.data_dir)
            .map_err(|e| HarnessError::io(format!("creating {}", self.data_dir.display()), e))?;

        let tick = opts.tick_time_ms.max(1);
        let mut cfg = String::new();
        // `writeln!` into a String cannot fail.
        let _ = writeln!(cfg, "tickTime={tick}");
        let _ = writeln!(cfg, "initLimit={}", 10.max(10_000u32.div_ceil(tick)));
        let _ = writeln!(cfg, "syncLimit={}", 5.max(5_000u32.div_ceil(tick)));
        let _ = writeln!(cfg, "dataDir={}", self.data_dir.display());
        let _ = writeln!(cfg, "clientPort={}", self.port);
        let _ = writeln!(cfg, "clientPortAddress=127.0.0.1");
        let _ = writeln!(cfg, "admin.enableServer=false");
        let _ = writeln!(cfg, "4lw.commands.whitelist=*");
        // The default (60 connections per client IP) is easily reached by tests, all
        // connecting from 127.0.0.1.
        let _ = writeln!(cfg, "maxClientCnxns=0");
        if let Some(ms) = opts.min_session_timeout_ms {
            let _ = writeln!(cfg, "minSessionTimeout={ms}");
        }
        if let Some(ms) = opts.max_session_timeout_ms {
            let _ = writeln!(cfg, "maxSessionTimeout={ms}");
        }
        if let Some(q) = quorum {
            for (id, quorum_port, election_port) in &q.peers {
                let _ = writeln!(cfg, "server.{id}=127.0.0.1:{quorum_port}:{election_port}");
            }
            if q.peers.len() == 1 {
                // Otherwise a single configured peer runs in standalone mode.
                let _ = writeln!(cfg, "standaloneEnabled=false");
            }
            write(&self.data_dir.join("myid"), &format!("{}\n", q.my_id))?;
        }
        if let (Some(tls), Some(secure_port)) = (&opts.tls, self.secure_port) {
            let _ = writeln!(cfg, "secureClientPort={secure_port}");
            let _ = writeln!(cfg, "secureClientPortAddress=127.0.0.1");
            let _ = writeln!(
                cfg,
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
            );
            let _ = writeln!(cfg, "ssl.keyStore.location={}", tls.key_store.display());
            let _ = writeln!(cfg, "ssl.keyStore.password={}", tls.key_store_password);
            let _ = writeln!(cfg, "ssl.keyStore.type={}", tls.store_type);
            let _ = writeln!(cfg, "ssl.trustStore.location={}", tls.trust_store.display());
            let _ = writeln!(cfg, "ssl.trustStore.password={}", tls.trust_store_password);
            let _ = writeln!(cfg, "ssl.trustStore.type={}", tls.store_type);
            let _ = writeln!(cfg, "ssl.clientAuth={}", tls.client_auth);
        }
        if let Some(sasl) = &opts.sasl {
            write(&self.dir.join("jaas.conf"), &sasl.jaas_config()?)?;
        }
        for (key, value) in &opts.extra_config {
            let _ = writeln!(cfg, "{key}={value}");
        }
        write(&self.cfg_path, &cfg)?;

        let log4j = format!(
            "log4j.rootLogger={}, CONSOLE\n\
             log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.CONSOLE.layout.ConversionPattern=%d{{ISO8601}} [myid:%X{{myid}}] - %-5p [%t:%C{{1}}@%L] - %m%n\n",
            opts.log_level
        );
        write(&self.dir.join("log4j.properties"), &log4j)
    }

    fn jvm_args(&self, opts: &ServerOptions, classpath: &str) -> Vec<String> {
        let mut args = vec![
            format!("-Xmx{}m", opts.heap_mb),
            "-XX:+UseSerialGC".to_string(),
            "-Xshare:auto".to_string(),
            "-XX:-UsePerfData".to_string(),
            "-XX:+ExitOnOutOfMemoryError".to_string(),
            "-Djava.net.preferIPv4Stack=true".to_string(),
            "-Dzookeeper.jmx.log4j.disable=true".to_string(),
            format!(
                "-Dlog4j.configuration=file:{}",
                self.dir.join("log4j.properties").display()
            ),
        ];
        if opts.fast_startup {
            args.push("-XX:TieredStopAtLevel=1".to_string());
        }
        if opts.extended_types {
            args.push("-Dzookeeper.extendedTypesEnabled=true".to_string());
        }
        if !opts.force_sync {
            args.push("-Dzookeeper.forceSync=no".to_string());
        }
        if let Some(sasl) = &opts.sasl {
            args.push(format!(
                "-Djava.security.auth.login.config={}",
                self.dir.join("jaas.conf").display()
            ));
            args.push(
                "-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
                    .to_string(),
            );
            if sasl.require_sasl {
                args.push("-Dzookeeper.sessionRequireClientSASLAuth=true".to_string());
            }
        }
        args.extend(opts.jvm_args.iter().cloned());
        args.push("-cp".to_string());
        let mut classpath = classpath.to_string();
        if opts.tls.is_some() {
            for jar in crate::security::netty_classpath() {
                classpath.push(':');
                classpath.push_str(&jar);
            }
        }
        args.push(classpath);
        args.push(MAIN_CLASS.to_string());
        args.push(self.cfg_path.display().to_string());
        args
    }

    fn lock(&self) -> MutexGuard<'_, ProcState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Spawns the JVM (stopping nothing; the caller makes sure none runs).
    pub(crate) fn launch(&self) -> Result<()> {
        let mut st = self.lock();
        if st.child.is_some() {
            return Err(HarnessError::NotRunning {
                what: format!("{} is already running", self.label),
            });
        }
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", self.log_path.display()), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut cmd = Command::new(&self.java);
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = spawner::spawn(cmd).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::PermissionDenied {
                HarnessError::JavaNotFound {
                    program: self.java.clone(),
                    source: Some(e),
                }
            } else {
                HarnessError::io(
                    format!("spawning {} for {}", self.java.display(), self.label),
                    e,
                )
            }
        })?;
        self.pid_mirror.store(child.id(), Ordering::SeqCst);
        st.child = Some(child);
        st.paused = false;
        Ok(())
    }

    /// `"127.0.0.1:PORT"`, for a client's connect string.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The client port (on 127.0.0.1). It stays the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS client port (on 127.0.0.1) when started with [`ServerOptions::tls`].
    pub fn secure_port(&self) -> Option<u16> {
        self.secure_port
    }

    /// `"127.0.0.1:SECURE_PORT"` when started with [`ServerOptions::tls`].
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure_port.map(|port| format!("127.0.0.1:{port}"))
    }

    /// The server log: the JVM's stdout and stderr, log4j output included. Appended to
    /// across restarts.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The data dir (snapshots, transaction log, `myid`). Kept across restarts.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server's temp dir (holds `zoo.cfg`, `log4j.properties`, `server.log`, `data/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The generated `zoo.cfg`.
    pub fn config_path(&self) -> &Path {
        &self.cfg_path
    }

    /// The last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        util::log_tail(&self.log_path, lines)
    }

    /// The JVM's pid while a process is started and not yet reaped (it may have exited on
    /// its own; see [`is_running`](Self::is_running)).
    pub fn pid(&self) -> Option<u32> {
        self.lock().child.as_ref().map(Child::id)
    }

    /// True if the JVM process is alive (paused counts as alive). Reaps it if it exited.
    pub fn is_running(&self) -> bool {
        let mut st = self.lock();
        Self::check_exit(&mut st, &self.pid_mirror).is_none() && st.child.is_some()
    }

    /// True if the server was paused with [`pause`](Self::pause) and not resumed.
    pub fn is_paused(&self) -> bool {
        self.lock().paused
    }

    /// If the child exited, reaps it and returns its status.
    fn check_exit(st: &mut ProcState, mirror: &AtomicU32) -> Option<std::process::ExitStatus> {
        let child = st.child.as_mut()?;
        let pid = child.id();
        if !spawner::has_exited(pid) {
            return None;
        }
        // Exited but not reaped yet: forget the pid before reaping it.
        let _ = mirror.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
        match child.try_wait() {
            Ok(Some(status)) => {
                st.child = None;
                st.paused = false;
                Some(status)
            }
            _ => None,
        }
    }

    /// Stops the server gracefully: SIGTERM (plus SIGCONT if paused), waits up to the
    /// stop timeout, then SIGKILL. Always reaps the process. No-op if not running.
    pub fn stop(&self) {
        let mut st = self.lock();
        let Some(mut child) = st.child.take() else {
            return;
        };
        let pid = child.id();
        self.pid_mirror.store(0, Ordering::SeqCst);
        let paused = std::mem::take(&mut st.paused);
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        spawner::signal(pid, libc::SIGTERM);
        if paused {
            spawner::signal(pid, libc::SIGCONT);
        }
        let deadline = Instant::now() + self.stop_timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
        spawner::signal(pid, libc::SIGKILL);
        let _ = child.wait();
    }

    /// Kills the server with SIGKILL (works on a paused process too; SIGCONT is sent as
    /// well) and reaps it. No-op if not running.
    pub fn kill(&self) {
        let mut st = self.lock();
        st.paused = false;
        if let Some(mut child) = st.child.take() {
            let pid = child.id();
            self.pid_mirror.store(0, Ordering::SeqCst);
            // The child is not reaped yet, so `pid` is still ours (maybe a zombie).
            spawner::signal(pid, libc::SIGKILL);
            spawner::signal(pid, libc::SIGCONT);
            let _ = child.wait();
        }
    }

    /// Restarts the server on the same port with the same data dir (gracefully stopping
    /// it first if it runs) and waits until it serves again.
    pub fn restart(&self) -> Result<Mode> {
        self.restart_no_wait()?;
        self.wait_until_serving(self.start_timeout)
    }

    /// Like [`restart`](Self::restart) but returns as soon as the process is spawned (an
    /// ensemble member may not serve until a quorum is back).
    pub fn restart_no_wait(&self) -> Result<()> {
        self.stop();
        self.launch()
    }

    /// Waits until the server answers `ruok` with `imok` and `srvr` reports a mode, i.e.
    /// it actually serves. Fails early if the process exits; on failure the error carries
    /// the log path and the last log lines.
    pub fn wait_until_serving(&self, timeout: Duration) -> Result<Mode> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut st = self.lock();
                if let Some(status) = Self::check_exit(&mut st, &self.pid_mirror) {
                    return Err(self.start_failed(format!("the JVM exited ({status})")));
                }
                if st.child.is_none() {
                    return Err(self.start_failed("no process is running".to_string()));
                }
            }
            let last = match self.probe() {
                Ok(mode) => return Ok(mode),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.start_failed(format!(
                    "not serving after {timeout:?} (last probe: {last})"
                )));
            }
            thread::sleep(POLL);
        }
    }

    /// One readiness probe: `ruok` then `srvr`.
    fn probe(&self) -> std::result::Result<Mode, String> {
        let addr = self.connect_string();
        let ruok = four_letter(&addr, "ruok", PROBE_TIMEOUT).map_err(|e| e.to_string())?;
        if ruok.trim() != "imok" {
            return Err(format!("ruok answered {ruok:?}"));
        }
        let srvr = four_letter(&addr, "srvr", PROBE_TIMEOUT).map_err(|e| e.to_string())?;
        Mode::from_srvr(&srvr).ok_or_else(|| format!("srvr answered {:?}", srvr.trim()))
    }

    pub(crate) fn start_failed(&self, reason: String) -> HarnessError {
        HarnessError::StartFailed {
            server: self.label.clone(),
            reason,
            log_path: self.log_path.clone(),
            log_tail: self.log_tail(20),
        }
    }

    /// Adds a note to a start error that the dir (and log) will be removed on drop.
    pub(crate) fn note_dir_removal(&self, e: HarnessError) -> HarnessError {
        match e {
            HarnessError::StartFailed {
                server,
                reason,
                log_path,
                log_tail,
            } if !util::keep_dirs() => HarnessError::StartFailed {
                server,
                reason: format!(
                    "{reason} (the server dir is removed; set ZK_HARNESS_KEEP_DIRS=1 to keep it)"
                ),
                log_path,
                log_tail,
            },
            other => other,
        }
    }

    pub(crate) fn bind_failed(&self) -> bool {
        util::log_shows_bind_failure(&self.log_path)
    }

    /// Pauses the JVM with SIGSTOP and waits until all its threads are stopped: it keeps
    /// its sockets (the kernel still accepts connections) but answers nothing, like a
    /// hung machine.
    pub fn pause(&self) -> Result<()> {
        let mut st = self.lock();
        match st.child.as_ref().map(Child::id) {
            Some(pid) => {
                spawner::signal(pid, libc::SIGSTOP);
                st.paused = true;
                // Return only once the JVM is really frozen.
                spawner::wait_stopped(pid, Duration::from_secs(2));
                Ok(())
            }
            None => Err(HarnessError::NotRunning {
                what: format!("cannot pause {}: not running", self.label),
            }),
        }
    }

    /// Resumes a paused JVM with SIGCONT.
    pub fn resume(&self) -> Result<()> {
        let mut st = self.lock();
        match st.child.as_ref() {
            Some(child) => {
                spawner::signal(child.id(), libc::SIGCONT);
                st.paused = false;
                Ok(())
            }
            None => Err(HarnessError::NotRunning {
                what: format!("cannot resume {}: not running", self.label),
            }),
        }
    }

    /// Sends a four-letter word (`ruok`, `srvr`, `stat`, `mntr`, `cons`, `dump`, ...) and
    /// returns the reply. Times out after 3 s (a paused server does not answer).
    pub fn four_letter(&self, cmd: &str) -> Result<String> {
        four_letter(&self.connect_string(), cmd, FOUR_LETTER_TIMEOUT)
    }

    /// The mode reported by `srvr`, or `None` if the server is not running, paused, or
    /// not serving (e.g. an ensemble member looking for a leader).
    pub fn mode(&self) -> Option<Mode> {
        {
            let mut st = self.lock();
            if Self::check_exit(&mut st, &self.pid_mirror).is_some()
                || st.child.is_none()
                || st.paused
            {
                return None;
            }
        }
        let srvr = four_letter(&self.connect_string(), "srvr", PROBE_TIMEOUT).ok()?;
        Mode::from_srvr(&srvr)
    }

    /// Kills the process and removes the dir without taking the state lock; for the
    /// `atexit` hook of the shared server.
    pub(crate) fn emergency_cleanup(&self) {
        let pid = self.pid_mirror.swap(0, Ordering::SeqCst);
        if pid != 0 {
            spawner::signal(pid, libc::SIGKILL);
            spawner::signal(pid, libc::SIGCONT);
            // SAFETY: waitpid on our own unreaped child with a null status pointer.
            unsafe {
                libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
        }
        if !util::keep_dirs() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !util::keep_dirs() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
