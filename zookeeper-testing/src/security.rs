//! TLS and SASL for test servers: certificates and stores made on the spot with the
//! `openssl` CLI and the JRE's `keytool`, and the server-side settings
//! ([`ServerTls`], [`ServerSasl`]) that [`ServerOptions`](crate::ServerOptions) takes.
//!
//! ```no_run
//! use zookeeper_testing::{Server, ServerOptions, ServerSasl, TlsMaterial};
//!
//! let tls = TlsMaterial::generate()?;
//! let server = Server::start_with(
//!     &ServerOptions::for_tests()
//!         .tls(tls.server_tls())
//!         .sasl(ServerSasl::digest_users([("alice", "secret")])),
//! )?;
//! println!("TLS port {:?}, CA {}", server.secure_port(), tls.ca_cert().display());
//! # Ok::<(), zookeeper_testing::HarnessError>(())
//! ```

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{HarnessError, Result};
use crate::util;

/// Password of the generated PKCS#12 key store and trust store.
const STORE_PASSWORD: &str = "zk-harness-store";

/// Server-side TLS settings: a secure client port served by the Netty connection factory
/// (`secureClientPort`, `serverCnxnFactory=...NettyServerCnxnFactory`, `ssl.*`). The
/// plaintext client port stays open (the harness's readiness probes use it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    /// The server's key store (its key and certificate chain).
    pub key_store: PathBuf,
    /// Password of `key_store`.
    pub key_store_password: String,
    /// The server's trust store (the CAs client certificates must chain to).
    pub trust_store: PathBuf,
    /// Password of `trust_store`.
    pub trust_store_password: String,
    /// Store type for both stores (`PKCS12`, `JKS`, `PEM`).
    pub store_type: String,
    /// `ssl.clientAuth`: `need` (the server default: clients must present a trusted
    /// certificate), `want` or `none`.
    pub client_auth: String,
}

/// Server-side SASL settings: a JAAS `Server` section with DIGEST-MD5 users
/// (`DigestLoginModule`), the `SASLAuthenticationProvider`, and optionally
/// `zookeeper.sessionRequireClientSASLAuth=true` (sessions that do not authenticate with
/// SASL are closed at their first request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSasl {
    /// `(user, password)` pairs the server accepts.
    pub users: Vec<(String, String)>,
    /// Close sessions that did not authenticate with SASL.
    pub require_sasl: bool,
}

impl ServerSasl {
    /// DIGEST-MD5 users, SASL not required.
    pub fn digest_users<U, P>(users: impl IntoIterator<Item = (U, P)>) -> ServerSasl
    where
        U: Into<String>,
        P: Into<String>,
    {
        ServerSasl {
            users: users
                .into_iter()
                .map(|(user, password)| (user.into(), password.into()))
                .collect(),
            require_sasl: false,
        }
    }

    /// Sets [`require_sasl`](Self::require_sasl).
    pub fn require_sasl(mut self, on: bool) -> ServerSasl {
        self.require_sasl = on;
        self
    }

    /// The JAAS configuration file text (`Server` section).
    pub fn jaas_config(&self) -> Result<String> {
        let mut text = String::from(
            "Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required",
        );
        for (user, password) in &self.users {
            // The option name is `user_<name>`: keep it a plain JAAS token.
            if user.is_empty()
                || !user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.@".contains(c))
            {
                return Err(HarnessError::InvalidArgument(format!(
                    "SASL user name {user:?}: use ASCII letters, digits and _ - . @ only"
                )));
            }
            let quoted = password.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = write!(text, "\n    user_{user}=\"{quoted}\"");
        }
        text.push_str(";\n};\n");
        Ok(text)
    }
}

/// A throw-away PKI for one test: a CA, a server certificate (for `127.0.0.1` and
/// `localhost`) and a client certificate it signed, as PEM files, plus the server's
/// PKCS#12 key store (`openssl pkcs12`) and trust store holding the CA (`keytool`).
///
/// Lives in its own temp dir, removed on drop (kept with `ZK_HARNESS_KEEP_DIRS=1`). Two
/// calls to [`generate`](Self::generate) give two unrelated CAs: use one's CA against the
/// other's server to test a failing verification.
#[derive(Debug)]
pub struct TlsMaterial {
    dir: PathBuf,
}

impl TlsMaterial {
    /// Generates everything (about a second: three RSA-2048 keys and one `keytool` run).
    /// Needs `openssl` and `keytool` (`$JAVA_HOME/bin`, next to the harness's `java`,
    /// or on `PATH`).
    pub fn generate() -> Result<TlsMaterial> {
        let material = TlsMaterial {
            dir: util::create_temp_dir()?,
        };
        material.make_all()?;
        Ok(material)
    }

    fn make_all(&self) -> Result<()> {
        let d = &self.dir;
        let unique = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        fs::write(
            d.join("ca.ext"),
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n\
             subjectKeyIdentifier=hash\n",
        )
        .map_err(|e| HarnessError::io("writing ca.ext", e))?;
        fs::write(
            d.join("leaf.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n\
             authorityKeyIdentifier=keyid\n",
        )
        .map_err(|e| HarnessError::io("writing leaf.ext", e))?;

        // The CA: a self-signed certificate with CA extensions.
        let subject = format!("/O=zk-harness/CN=zk-harness test CA {unique}");
        key_and_csr(d, "ca-key.pem", &subject, "ca.csr")?;
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "ca.csr",
                "-signkey",
                "ca-key.pem",
                "-days",
                "3650",
                "-sha256",
                "-extfile",
                "ca.ext",
                "-out",
                "ca.pem",
            ],
        )?;
        for (name, cn) in [("server", "localhost"), ("client", "zk-harness-client")] {
            let key = format!("{name}-key.pem");
            let csr = format!("{name}.csr");
            let cert = format!("{name}.pem");
            let subject = format!("/O=zk-harness/CN={cn}");
            key_and_csr(d, &key, &subject, &csr)?;
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca-key.pem",
                    "-CAcreateserial",
                    "-days",
                    "3650",
                    "-sha256",
                    "-extfile",
                    "leaf.ext",
                    "-out",
                    &cert,
                ],
            )?;
        }
        let pass = format!("pass:{STORE_PASSWORD}");
        openssl(
            d,
            &[
                "pkcs12",
                "-export",
                "-in",
                "server.pem",
                "-inkey",
                "server-key.pem",
                "-certfile",
                "ca.pem",
                "-name",
                "server",
                "-passout",
                &pass,
                "-out",
                "server-keystore.p12",
            ],
        )?;
        run(
            Command::new(keytool()?).current_dir(d).args([
                "-importcert",
                "-noprompt",
                "-alias",
                "ca",
                "-file",
                "ca.pem",
                "-keystore",
                "truststore.p12",
                "-storetype",
                "PKCS12",
                "-storepass",
                STORE_PASSWORD,
            ]),
            "keytool -importcert",
        )
    }

    /// The temp dir holding everything.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM): what a client verifies the server against.
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The client certificate (PEM), signed by the CA.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client's private key (PEM, unencrypted).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client-key.pem")
    }

    /// The client's private key encrypted with `passphrase` (AES-256, PKCS#8 PEM), written
    /// on first use.
    pub fn encrypted_client_key(&self, passphrase: &str) -> Result<PathBuf> {
        let name = "client-key-encrypted.pem";
        openssl(
            &self.dir,
            &[
                "pkcs8",
                "-topk8",
                "-v2",
                "aes-256-cbc",
                "-in",
                "client-key.pem",
                "-passout",
                &format!("pass:{passphrase}"),
                "-out",
                name,
            ],
        )?;
        Ok(self.dir.join(name))
    }

    /// The server certificate (PEM).
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The server's private key (PEM, unencrypted).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server-key.pem")
    }

    /// Server settings using this material (`ssl.clientAuth=need`).
    pub fn server_tls(&self) -> ServerTls {
        ServerTls {
            key_store: self.dir.join("server-keystore.p12"),
            key_store_password: STORE_PASSWORD.to_string(),
            trust_store: self.dir.join("truststore.p12"),
            trust_store_password: STORE_PASSWORD.to_string(),
            store_type: "PKCS12".to_string(),
            client_auth: "need".to_string(),
        }
    }
}

impl Drop for TlsMaterial {
    fn drop(&mut self) {
        if !util::keep_dirs() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A fresh 2048-bit RSA key in `key` and a signing request for `subject` in `csr`.
fn key_and_csr(dir: &Path, key: &str, subject: &str, csr: &str) -> Result<()> {
    let bits = "rsa_keygen_bits:2048";
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            bits,
            "-out",
            key,
        ],
    )?;
    openssl(
        dir,
        &["req", "-new", "-key", key, "-subj", subject, "-out", csr],
    )
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let what = format!("openssl {}", args.first().copied().unwrap_or(""));
    run(Command::new("openssl").current_dir(dir).args(args), &what)
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let output = cmd.stdin(Stdio::null()).output().map_err(|e| {
        HarnessError::io(
            format!("running {what} (is it installed? see scripts/setup-security.sh)"),
            e,
        )
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(HarnessError::io(
        format!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        std::io::Error::other("command failed"),
    ))
}

/// `keytool` of the JRE the harness runs (next to its `java`), else from `PATH`.
fn keytool() -> Result<PathBuf> {
    let java = util::find_java()?;
    if let Ok(real) = fs::canonicalize(&java) {
        let beside = real.with_file_name("keytool");
        if beside.is_file() {
            return Ok(beside);
        }
    }
    Ok(PathBuf::from("keytool"))
}

/// The Netty jars the Netty connection factory needs beyond those `zookeeper.jar`'s
/// manifest lists, if present. Debian's manifest omits codec and resolver: the server
/// starts, but its first TLS connection fails with `NoClassDefFoundError:
/// io/netty/handler/codec/ByteToMessageDecoder`.
pub(crate) fn netty_classpath() -> Vec<String> {
    [
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-transport-native-unix-common.jar",
    ]
    .iter()
    .map(|name| Path::new("/usr/share/java").join(name))
    .filter(|path| path.is_file())
    .map(|path| path.display().to_string())
    .collect()
}
