//! Choosing between an external ZooKeeper (from the environment) and an embedded one, and
//! the process-wide shared test server.

use std::sync::{Mutex, OnceLock, PoisonError};

use crate::error::{HarnessError, Result};
use crate::options::ServerOptions;
use crate::server::Server;

/// Environment variable naming external servers for tests (a connect string).
pub const TEST_HOSTS_ENV: &str = "ZK_TEST_HOSTS";
/// Environment variable naming external servers for examples and benchmarks.
pub const HOSTS_ENV: &str = "ZK_HOSTS";

/// Where a test or example connects: external servers named in the environment, or a
/// server the harness started (stopped when this value is dropped).
#[derive(Debug)]
pub enum Hosts {
    /// A connect string from the environment; nothing was started.
    External(String),
    /// A server started by the harness (boxed: a `Server` is much larger than a `String`).
    Embedded(Box<Server>),
}

impl Hosts {
    /// If the environment variable `var` is set and not empty, uses it as the connect
    /// string; otherwise starts a server with [`ServerOptions::default`].
    ///
    /// Examples use `Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)` (`ZK_HOSTS`).
    pub fn from_env_or_start(var: &str) -> Result<Hosts> {
        Self::from_env_or_start_with(var, &ServerOptions::default())
    }

    /// Like [`from_env_or_start`](Self::from_env_or_start) with explicit options for the
    /// embedded server.
    pub fn from_env_or_start_with(var: &str, opts: &ServerOptions) -> Result<Hosts> {
        match std::env::var(var) {
            Ok(hosts) if !hosts.trim().is_empty() => Ok(Hosts::External(hosts.trim().to_string())),
            _ => Server::start_with(opts).map(|s| Hosts::Embedded(Box::new(s))),
        }
    }

    /// The connect string to hand to a client.
    pub fn connect_string(&self) -> String {
        match self {
            Hosts::External(hosts) => hosts.clone(),
            Hosts::Embedded(server) => server.connect_string(),
        }
    }

    /// The embedded server, if the harness started one.
    pub fn server(&self) -> Option<&Server> {
        match self {
            Hosts::External(_) => None,
            Hosts::Embedded(server) => Some(server),
        }
    }

    /// True if the hosts come from the environment.
    pub fn is_external(&self) -> bool {
        matches!(self, Hosts::External(_))
    }
}

/// Hosts for one test: `ZK_TEST_HOSTS` if set, else a fresh server started with
/// [`ServerOptions::for_tests`] (TTL nodes enabled, no fsync), stopped when dropped.
pub fn test_hosts() -> Result<Hosts> {
    Hosts::from_env_or_start_with(TEST_HOSTS_ENV, &ServerOptions::for_tests())
}

/// The connect string for tests that share one server: `ZK_TEST_HOSTS` if set, else the
/// [`shared_server`]'s. Panics if the shared server cannot start.
pub fn shared_test_connect_string() -> String {
    match std::env::var(TEST_HOSTS_ENV) {
        Ok(hosts) if !hosts.trim().is_empty() => hosts.trim().to_string(),
        _ => shared_server().connect_string(),
    }
}

static SHARED: OnceLock<Server> = OnceLock::new();
static SHARED_INIT: Mutex<()> = Mutex::new(());

/// One server for the whole test binary, started on first use with
/// [`ServerOptions::for_tests`]. Panics (failing the calling test with the harness error)
/// if it cannot start; see [`try_shared_server`].
///
/// Statics are never dropped, so an `atexit` hook kills the JVM and removes its dir when
/// the process exits normally (the test harness returning from `main`); if the process
/// dies abruptly the kernel kills the JVM (PDEATHSIG). Tests sharing it must not stop,
/// restart or pause it, and should use distinct znode paths.
pub fn shared_server() -> &'static Server {
    match try_shared_server() {
        Ok(server) => server,
        Err(e) => panic!("zk-harness: cannot start the shared ZooKeeper server: {e}"),
    }
}

/// Like [`shared_server`] but returns the start error. After a failure the next call
/// tries again.
pub fn try_shared_server() -> Result<&'static Server> {
    if let Some(server) = SHARED.get() {
        return Ok(server);
    }
    let _guard = SHARED_INIT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = SHARED.get() {
        return Ok(server);
    }
    let server = Server::start_with(&ServerOptions::for_tests())?;
    // SAFETY: `cleanup_shared` is an `extern "C" fn()` that never unwinds.
    if unsafe { libc::atexit(cleanup_shared) } != 0 {
        return Err(HarnessError::io(
            "registering the shared server's atexit hook",
            std::io::Error::other("atexit failed"),
        ));
    }
    Ok(SHARED.get_or_init(|| server))
}

extern "C" fn cleanup_shared() {
    // Nothing here may panic: unwinding out of an `extern "C"` fn aborts.
    if let Some(server) = SHARED.get() {
        server.emergency_cleanup();
    }
}
