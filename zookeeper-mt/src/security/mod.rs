//! TLS and SASL connections (features `tls` and `sasl`, which build the vendored C client
//! with OpenSSL / Cyrus SASL: Debian's `libzookeeper_mt` has neither).
//!
//! ```no_run
//! # #[cfg(all(feature = "tls", feature = "sasl"))]
//! # fn main() -> zookeeper_mt::Result<()> {
//! use zookeeper_mt::{SaslConfig, TlsConfig, ZooKeeper};
//!
//! let zk = ZooKeeper::builder("zk1.example:2281")
//!     .tls(TlsConfig::new("ca.pem", "client.pem", "client-key.pem"))
//!     .sasl(SaslConfig::digest_md5("alice", "secret"))
//!     .connect()?;
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "tls", feature = "sasl")))]
//! # fn main() {}
//! ```
//!
//! See [`ZooKeeperBuilder::tls`] and [`ZooKeeperBuilder::sasl`] for how failures show,
//! and `docs/security.md` in the repository for the set-up.

#[cfg(feature = "sasl")]
use crate::client::ZooKeeper;
use crate::client::ZooKeeperBuilder;
use crate::error::{Error, Result};
#[cfg(any(feature = "tls", feature = "sasl"))]
use crate::path::c_string;
#[cfg(feature = "sasl")]
use crate::types::SessionState;
use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::ptr;
#[cfg(feature = "sasl")]
use std::time::{Duration, Instant};
use zookeeper_mt_sys as sys;

/// TLS settings: PEM files of the CA the server certificate must chain to, the client
/// certificate (chain) and its private key (feature `tls`).
///
/// The C client verifies the server's chain against `ca` (and the system's default
/// trust paths) but not its host name. ZooKeeper servers ask for a client certificate by
/// default (`ssl.clientAuth=need`).
#[cfg(feature = "tls")]
#[derive(Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// CA certificate(s), PEM.
    pub ca: std::path::PathBuf,
    /// Client certificate chain, PEM.
    pub cert: std::path::PathBuf,
    /// Client private key, PEM.
    pub key: std::path::PathBuf,
    /// Passphrase of `key` if it is encrypted.
    pub key_password: Option<String>,
}

#[cfg(feature = "tls")]
impl TlsConfig {
    /// CA, client certificate and unencrypted client key.
    pub fn new(
        ca: impl Into<std::path::PathBuf>,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> TlsConfig {
        TlsConfig {
            ca: ca.into(),
            cert: cert.into(),
            key: key.into(),
            key_password: None,
        }
    }

    /// The passphrase of an encrypted key.
    pub fn key_password(mut self, password: impl Into<String>) -> TlsConfig {
        self.key_password = Some(password.into());
        self
    }

    /// The C client's `"ca,cert,key[,passwd]"` string, after checking that each file can
    /// be read (the C client would otherwise retry a missing file forever).
    fn c_cert_string(&self) -> Result<CString> {
        let mut fields = Vec::with_capacity(4);
        for (path, what_bad, what_missing) in [
            (&self.ca, "TLS CA path", "TLS CA file cannot be read"),
            (
                &self.cert,
                "TLS certificate path",
                "TLS certificate file cannot be read",
            ),
            (&self.key, "TLS key path", "TLS key file cannot be read"),
        ] {
            let text = path
                .to_str()
                .ok_or(Error::InvalidArgument("TLS file paths must be valid UTF-8"))?;
            if text.is_empty() || text.contains(',') {
                // The C client splits the string at commas.
                return Err(Error::InvalidArgument(
                    "TLS file paths must be non-empty and contain no ','",
                ));
            }
            if std::fs::File::open(path).is_err() || !path.is_file() {
                log::error!("zookeeper-mt: {what_missing}: {}", path.display());
                return Err(Error::InvalidArgument(what_missing));
            }
            c_string(text, what_bad)?;
            fields.push(text);
        }
        // OpenSSL asks for the passphrase of an encrypted key on the terminal when none is
        // given: refuse instead of blocking the C IO thread on a prompt.
        if self.key_password.is_none() && key_is_encrypted(&self.key) {
            return Err(Error::InvalidArgument(
                "TLS key is encrypted: set TlsConfig::key_password",
            ));
        }
        if let Some(password) = &self.key_password {
            if password.is_empty() || password.contains(',') {
                return Err(Error::InvalidArgument(
                    "TLS key password must be non-empty and contain no ','",
                ));
            }
            fields.push(password);
        }
        let cert = c_string(&fields.join(","), "TLS key password")?;
        check_tls_files(&cert)?;
        Ok(cert)
    }
}

/// Loads the files once as the C client will (`zookeeper_mt_sys_check_tls`): a file it
/// cannot use would otherwise make its IO thread retry without pause until the connect
/// timeout, and only the C log would say why.
#[cfg(feature = "tls")]
fn check_tls_files(cert: &CString) -> Result<()> {
    let mut reason = [0 as std::os::raw::c_char; 256];
    // SAFETY: `cert` is NUL-terminated; `reason` is a writable buffer of the given length
    // that C NUL-terminates; the call keeps neither pointer.
    let step = unsafe {
        sys::zookeeper_mt_sys_check_tls(cert.as_ptr(), reason.as_mut_ptr(), reason.len())
    };
    if step == 0 {
        return Ok(());
    }
    // SAFETY: C wrote a NUL-terminated string into `reason` (or left it empty, "").
    let reason = unsafe { std::ffi::CStr::from_ptr(reason.as_ptr()) }.to_string_lossy();
    let error = match step {
        1 => Error::InvalidArgument("TLS CA file holds no usable PEM certificate"),
        2 => Error::InvalidArgument("TLS certificate file holds no usable PEM certificate"),
        3 => Error::InvalidArgument(
            "TLS key cannot be used (not a PEM key, a wrong key_password, or not the certificate's key)",
        ),
        4 => Error::InvalidArgument("TLS key does not belong to the certificate"),
        5 => Error::InvalidArgument("TLS settings are malformed"),
        _ => Error::SystemError,
    };
    log::error!("zookeeper-mt: {error}: {reason}");
    Err(error)
}

/// Whether a PEM key file is encrypted (PKCS#8 `ENCRYPTED PRIVATE KEY` or a legacy
/// `Proc-Type: 4,ENCRYPTED` header).
#[cfg(feature = "tls")]
fn key_is_encrypted(path: &std::path::Path) -> bool {
    std::fs::read(path).is_ok_and(|pem| {
        let text = String::from_utf8_lossy(&pem);
        text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
            || text.contains("Proc-Type: 4,ENCRYPTED")
    })
}

#[cfg(feature = "tls")]
impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field(
                "key_password",
                &self.key_password.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// SASL settings (feature `sasl`): a mechanism of the system's Cyrus SASL (Debian:
/// `libsasl2-modules` has DIGEST-MD5) with a user name and password.
///
/// The defaults match a stock ZooKeeper server with DIGEST-MD5 users in its JAAS
/// `Server` section: service `zookeeper`, server name `zk-sasl-md5`. After a successful
/// authentication the session's identity is `sasl:<user>` (for ACLs).
#[cfg(feature = "sasl")]
#[derive(Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// Mechanism list, e.g. `DIGEST-MD5`.
    pub mechanism: String,
    /// Service name. Default `zookeeper`.
    pub service: String,
    /// Server name the mechanism authenticates to. Default `zk-sasl-md5` (the Java
    /// server's DIGEST-MD5 name).
    pub host: String,
    /// User (authentication and authorization name).
    pub user: String,
    /// Password.
    pub password: String,
    /// Realm; `None` takes the first one the server offers.
    pub realm: Option<String>,
}

#[cfg(feature = "sasl")]
impl SaslConfig {
    /// DIGEST-MD5 with the defaults above.
    pub fn digest_md5(user: impl Into<String>, password: impl Into<String>) -> SaslConfig {
        SaslConfig {
            mechanism: "DIGEST-MD5".to_string(),
            service: "zookeeper".to_string(),
            host: "zk-sasl-md5".to_string(),
            user: user.into(),
            password: password.into(),
            realm: None,
        }
    }

    /// Sets [`mechanism`](Self::mechanism).
    pub fn mechanism(mut self, mechanism: impl Into<String>) -> SaslConfig {
        self.mechanism = mechanism.into();
        self
    }

    /// Sets [`service`](Self::service).
    pub fn service(mut self, service: impl Into<String>) -> SaslConfig {
        self.service = service.into();
        self
    }

    /// Sets [`host`](Self::host).
    pub fn host(mut self, host: impl Into<String>) -> SaslConfig {
        self.host = host.into();
        self
    }

    /// Sets [`realm`](Self::realm).
    pub fn realm(mut self, realm: impl Into<String>) -> SaslConfig {
        self.realm = Some(realm.into());
        self
    }
}

#[cfg(feature = "sasl")]
impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("mechanism", &self.mechanism)
            .field("service", &self.service)
            .field("host", &self.host)
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .field("realm", &self.realm)
            .finish()
    }
}

/// What a builder asked for.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecurityOptions {
    #[cfg(feature = "tls")]
    tls: Option<TlsConfig>,
    #[cfg(feature = "sasl")]
    sasl: Option<SaslConfig>,
}

impl SecurityOptions {
    /// Whether the connection uses TLS (a connect timeout is then checked for a TLS
    /// handshake failure the C client logged).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        return false;
    }

    /// Whether `connect` must watch the C state for a failed SASL authentication.
    #[cfg_attr(not(feature = "sasl"), allow(dead_code))]
    pub(crate) fn uses_sasl(&self) -> bool {
        #[cfg(feature = "sasl")]
        return self.sasl.is_some();
        #[cfg(not(feature = "sasl"))]
        return false;
    }
}

impl ZooKeeperBuilder {
    /// Connect with TLS (feature `tls`). The hosts must be the servers' secure client
    /// ports (`secureClientPort`).
    ///
    /// How failures show:
    /// - files that cannot be used (unreadable, not PEM, a wrong or missing
    ///   [`TlsConfig::key_password`], a key not matching the certificate) or a `,` in a
    ///   path or the password (the C client splits its certificate string at commas):
    ///   `connect` fails at once with `InvalidArgument`, before any C thread starts (the
    ///   files are loaded once, as the C client will; it would retry them in a busy loop,
    ///   and OpenSSL would prompt on the terminal for a missing password). The OpenSSL
    ///   reason is logged;
    /// - a failed handshake (server certificate not signed by `ca`, client certificate
    ///   refused by the server, a plaintext port): the C client retries until the connect
    ///   timeout, then `connect` returns `SslConnectionError` (the C client reports the
    ///   cause only in its log, at ERROR: `zk retcode=-15 ... error in ssl connect`; the
    ///   binding counts those lines, process-wide, so a concurrent failing TLS connect
    ///   elsewhere in the process can also turn a plain timeout into this error).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.security.tls = Some(tls);
        self
    }

    /// Authenticate with SASL when the session is established (feature `sasl`); the
    /// C client re-authenticates after every reconnect.
    ///
    /// A failed authentication (wrong password, unknown user, a mechanism the system's
    /// Cyrus SASL lacks) makes `connect` return `AuthFailed` as soon as the C client
    /// gives up, usually within milliseconds.
    ///
    /// Should a later re-authentication fail (after a reconnect), the session ends as on
    /// an `AuthFailed` session event: [`ZooKeeper::state`] says `AuthFailed`, pending
    /// requests fail with `AuthFailed`, every armed [`Watch`](crate::Watch) gets a final
    /// `Session`/`AuthFailed` event and session subscribers get one too. The C client
    /// ends such a session without any event (it only sets its state), so a monitor
    /// thread per SASL handle checks the C state every 50 ms until the session ends.
    #[cfg(feature = "sasl")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sasl")))]
    pub fn sasl(mut self, sasl: SaslConfig) -> Self {
        self.security.sasl = Some(sasl);
        self
    }
}

/// Everything the C init call needs, built (and checked) before any context is handed
/// to C, and what C keeps referencing for the life of the handle.
pub(crate) struct Prepared {
    cert: Option<CString>,
    #[cfg(feature = "sasl")]
    sasl: Option<Box<sasl::SaslState>>,
}

/// Kept alive until `zookeeper_close` has returned: the C handle references it.
pub(crate) struct Keepalive {
    /// The handle's log callback (which names its session) stays its own until C is done.
    _log: crate::logging::LogSlot,
    #[cfg(feature = "sasl")]
    _sasl: Option<Box<sasl::SaslState>>,
}

impl Prepared {
    pub(crate) fn new(options: &SecurityOptions) -> Result<Prepared> {
        #[cfg(feature = "tls")]
        let cert = options
            .tls
            .as_ref()
            .map(TlsConfig::c_cert_string)
            .transpose()?;
        #[cfg(not(feature = "tls"))]
        let cert = None;
        let _ = options;
        Ok(Prepared {
            cert,
            #[cfg(feature = "sasl")]
            sasl: options
                .sasl
                .as_ref()
                .map(sasl::SaslState::new)
                .transpose()?,
        })
    }

    /// Creates the C handle with the global watcher and log callback of this crate:
    /// `zookeeper_mt_sys_init_secure` when built with TLS or SASL, else `zookeeper_init2`.
    ///
    /// # Safety
    /// As `zookeeper_init2`: `hosts` NUL-terminated, `client_id` NULL or valid, `context`
    /// valid for the handle's life. The returned `Keepalive` must outlive the handle.
    pub(crate) unsafe fn init(
        self,
        hosts: *const std::os::raw::c_char,
        recv_timeout: c_int,
        client_id: *const sys::clientid_t,
        context: *mut c_void,
        flags: c_int,
    ) -> (*mut sys::zhandle_t, Keepalive) {
        #[cfg(feature = "sasl")]
        let sasl_params = self
            .sasl
            .as_ref()
            .map_or(ptr::null_mut(), |state| state.params_ptr());
        #[cfg(not(feature = "sasl"))]
        let sasl_params: *mut c_void = ptr::null_mut();
        let log = crate::logging::LogSlot::acquire();
        let log_callback = log.callback();
        #[cfg(not(any(feature = "tls", feature = "sasl")))]
        let _ = (&self.cert, sasl_params);
        // SAFETY: the caller's contract covers hosts, client_id and context; the
        // callbacks are ours.
        #[cfg(not(any(feature = "tls", feature = "sasl")))]
        let zh = unsafe {
            sys::zookeeper_init2(
                hosts,
                Some(crate::session::global_watcher),
                recv_timeout,
                client_id,
                context,
                flags,
                Some(log_callback),
            )
        };
        // SAFETY: the caller's contract covers hosts, client_id and context; `cert` is
        // NULL or NUL-terminated and copied by C; `sasl_params` is NULL or points into
        // `self.sasl`, whose strings C copies and whose callback list (with everything
        // the callbacks read) moves, unchanged in place, into the returned Keepalive.
        #[cfg(any(feature = "tls", feature = "sasl"))]
        let zh = unsafe {
            sys::zookeeper_mt_sys_init_secure(
                hosts,
                self.cert.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
                Some(crate::session::global_watcher),
                recv_timeout,
                client_id,
                context,
                flags,
                Some(log_callback),
                sasl_params,
            )
        };
        (
            zh,
            Keepalive {
                _log: log,
                #[cfg(feature = "sasl")]
                _sasl: self.sasl,
            },
        )
    }
}

/// What `connect` watches while it waits for the session: a failed SASL authentication
/// (which ends the session without a session event) and TLS handshake failures (which
/// the C client only logs).
pub(crate) struct Connecting {
    #[cfg(feature = "tls")]
    tls_failures_before: Option<u64>,
}

impl Connecting {
    /// Starts watching `zk`, whose options are `options`.
    pub(crate) fn start(options: &SecurityOptions, zk: &crate::client::ZooKeeper) -> Connecting {
        // A monitor notices a failed SASL authentication now and for the rest of the
        // handle's life.
        #[cfg(feature = "sasl")]
        if options.uses_sasl() {
            monitor_authentication(zk);
        }
        let _ = (options, zk);
        Connecting {
            #[cfg(feature = "tls")]
            tls_failures_before: options.uses_tls().then(crate::logging::tls_failures),
        }
    }

    /// The error for a connect that timed out: `SslConnectionError` if a TLS handshake
    /// failed meanwhile (the C client retries it until the deadline and only logs why),
    /// else `Timeout`.
    pub(crate) fn timeout_error(&self) -> Error {
        #[cfg(feature = "tls")]
        if let Some(before) = self.tls_failures_before {
            if crate::logging::tls_failures() != before {
                return Error::SslConnectionError;
            }
        }
        Error::Timeout
    }
}

/// How often the authentication monitor reads the C state.
#[cfg(feature = "sasl")]
const AUTH_POLL: Duration = Duration::from_millis(50);

/// Starts the thread that notices the C client giving up on SASL, at connect or at any
/// later re-authentication: `zoo_sasl_mark_failed` sets `ZOO_AUTH_FAILED_STATE` and the
/// IO thread stops, with no session event and no completion for pending requests. The
/// thread reads the C state every [`AUTH_POLL`] and, on a failure, ends the session the
/// way an `AuthFailed` event would (`ZooKeeper::end_session`). It holds no strong
/// reference between polls and exits once the session has ended (closed included) or
/// the last handle is gone.
#[cfg(feature = "sasl")]
pub(crate) fn monitor_authentication(zk: &ZooKeeper) {
    let weak = zk.downgrade();
    let spawned = std::thread::Builder::new()
        .name("zookeeper-sasl-monitor".into())
        .spawn(move || loop {
            if weak.session.wait_terminal(Instant::now() + AUTH_POLL) {
                return;
            }
            let Some(zk) = weak.upgrade() else { return };
            // SAFETY: live handle (with_handle holds the lock that keeps close out);
            // `zoo_state` reads one int.
            let Ok(c_state) = zk.with_handle(|zh| unsafe { sys::zoo_state(zh) }) else {
                return; // closed or ended
            };
            // SAFETY: reading an `extern const int` the C library defines and never writes.
            if c_state == unsafe { sys::ZOO_AUTH_FAILED_STATE } {
                zk.end_session(SessionState::AuthFailed);
                return;
            }
            // Dropping `zk` here may close the handle (the last clone): this is not a C
            // thread, so that is allowed.
        });
    if let Err(error) = spawned {
        log::error!("zookeeper-mt: cannot start the SASL monitor thread: {error}");
    }
}

#[cfg(feature = "sasl")]
mod sasl;
