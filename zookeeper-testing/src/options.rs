//! Server start-up options.

use std::time::Duration;

use crate::security::{ServerSasl, ServerTls};

/// How to start a server (or every member of an ensemble).
///
/// Fields are public; the same-named methods set them in a builder style:
///
/// ```
/// let opts = zookeeper_testing::ServerOptions::default()
///     .extended_types(true)
///     .force_sync(false)
///     .tick_time_ms(200);
/// assert_eq!(opts.tick_time_ms, 200);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Start the JVM with `-Dzookeeper.extendedTypesEnabled=true` (TTL nodes need it).
    /// Default `false`, as in a stock server.
    pub extended_types: bool,
    /// Whether the transaction log is fsynced before acknowledging writes
    /// (`-Dzookeeper.forceSync`). Default `true`, the server default; tests may turn it off
    /// for speed ([`ServerOptions::for_tests`] does).
    pub force_sync: bool,
    /// Maximum JVM heap in MiB (`-Xmx`). Default 256.
    pub heap_mb: u32,
    /// `tickTime` in milliseconds. Default 500 (the stock server uses 2000): shorter ticks
    /// make elections, session expiry and failure detection faster. Note the server's
    /// default session timeout bounds are 2 and 20 ticks (1 s to 10 s with the default);
    /// a client asking for more or less is clamped to them unless
    /// [`min_session_timeout_ms`](Self::min_session_timeout_ms) /
    /// [`max_session_timeout_ms`](Self::max_session_timeout_ms) are set.
    pub tick_time_ms: u32,
    /// `minSessionTimeout` in milliseconds; `None` keeps the server default (2 ticks).
    pub min_session_timeout_ms: Option<u32>,
    /// `maxSessionTimeout` in milliseconds; `None` keeps the server default (20 ticks).
    pub max_session_timeout_ms: Option<u32>,
    /// How long to wait for a server (or ensemble) to serve. Default 60 s.
    pub start_timeout: Duration,
    /// How long [`Server::stop`](crate::Server::stop) waits after SIGTERM before SIGKILL.
    /// Default 10 s.
    pub stop_timeout: Duration,
    /// Fast JVM start-up: C1 JIT only (`-XX:TieredStopAtLevel=1`). Default `true`, good for
    /// tests; benchmarks measuring server throughput should set it to `false`.
    pub fast_startup: bool,
    /// log4j level of the server log (`INFO`, `WARN`, `DEBUG`, ...). Default `INFO`.
    pub log_level: String,
    /// Extra `key=value` lines appended to `zoo.cfg`.
    pub extra_config: Vec<(String, String)>,
    /// Extra JVM arguments, placed before the main class.
    pub jvm_args: Vec<String>,
    /// A TLS client port as well (see [`ServerTls`]; its number is
    /// [`Server::secure_port`](crate::Server::secure_port)). Default `None`.
    pub tls: Option<ServerTls>,
    /// SASL authentication (see [`ServerSasl`]). Default `None`.
    pub sasl: Option<ServerSasl>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            extended_types: false,
            force_sync: true,
            heap_mb: 256,
            tick_time_ms: 500,
            min_session_timeout_ms: None,
            max_session_timeout_ms: None,
            start_timeout: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(10),
            fast_startup: true,
            log_level: "INFO".to_string(),
            extra_config: Vec::new(),
            jvm_args: Vec::new(),
            tls: None,
            sasl: None,
        }
    }
}

impl ServerOptions {
    /// The defaults (same as [`Default::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Options for test servers: the defaults plus extended types (TTL nodes) enabled and
    /// `forceSync` off. Used by [`shared_server`](crate::shared_server) and
    /// [`test_hosts`](crate::test_hosts).
    pub fn for_tests() -> Self {
        Self::default().extended_types(true).force_sync(false)
    }

    /// Sets [`extended_types`](Self::extended_types).
    pub fn extended_types(mut self, on: bool) -> Self {
        self.extended_types = on;
        self
    }

    /// Sets [`force_sync`](Self::force_sync).
    pub fn force_sync(mut self, on: bool) -> Self {
        self.force_sync = on;
        self
    }

    /// Sets [`heap_mb`](Self::heap_mb).
    pub fn heap_mb(mut self, mb: u32) -> Self {
        self.heap_mb = mb;
        self
    }

    /// Sets [`tick_time_ms`](Self::tick_time_ms).
    pub fn tick_time_ms(mut self, ms: u32) -> Self {
        self.tick_time_ms = ms;
        self
    }

    /// Sets [`min_session_timeout_ms`](Self::min_session_timeout_ms).
    pub fn min_session_timeout_ms(mut self, ms: Option<u32>) -> Self {
        self.min_session_timeout_ms = ms;
        self
    }

    /// Sets [`max_session_timeout_ms`](Self::max_session_timeout_ms).
    pub fn max_session_timeout_ms(mut self, ms: Option<u32>) -> Self {
        self.max_session_timeout_ms = ms;
        self
    }

    /// Sets [`start_timeout`](Self::start_timeout).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Sets [`stop_timeout`](Self::stop_timeout).
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// Sets [`fast_startup`](Self::fast_startup).
    pub fn fast_startup(mut self, on: bool) -> Self {
        self.fast_startup = on;
        self
    }

    /// Sets [`log_level`](Self::log_level).
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.log_level = level.into();
        self
    }

    /// Appends a `key=value` line to `zoo.cfg`.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_config.push((key.into(), value.into()));
        self
    }

    /// Appends a JVM argument.
    pub fn jvm_arg(mut self, arg: impl Into<String>) -> Self {
        self.jvm_args.push(arg.into());
        self
    }

    /// Sets [`tls`](Self::tls): also serve TLS on a secure client port.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets [`sasl`](Self::sasl).
    pub fn sasl(mut self, sasl: ServerSasl) -> Self {
        self.sasl = Some(sasl);
        self
    }
}
