//! Real Apache ZooKeeper servers for testing any Rust ZooKeeper client.
//!
//! The Rust counterpart of Curator's `curator-test` and `kazoo.testing`: [`TestingServer`]
//! (= [`Server`]), [`TestingCluster`] (= [`Ensemble`]) with kill/restart/pause and leader
//! lookup, a per-client [`FaultProxy`], a session's forced expiry from its id and
//! password ([`expire_session`], Curator's `KillSession`, on the crate's own wire client
//! [`WireSession`]), and history recording with checkers ([`history`]). It depends on no
//! C code and on no particular client.
//!
//! Starts the Java server of Debian's `zookeeper` package (`QuorumPeerMain` from
//! `/usr/share/java/zookeeper.jar`) on free loopback ports, each in its own temp dir, and
//! waits until it actually serves (`ruok` answers `imok` and `srvr` reports a mode).
//!
//! ```no_run
//! use zookeeper_testing::{Ensemble, Server, ServerOptions};
//! use std::time::Duration;
//!
//! let server = Server::start()?;
//! println!("connect to {}", server.connect_string());
//! assert_eq!(server.four_letter("ruok")?, "imok");
//!
//! let ensemble = Ensemble::start(3, &ServerOptions::for_tests())?;
//! let leader = ensemble.leader().unwrap();
//! ensemble.kill(leader);
//! let new_leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
//! assert_ne!(leader, new_leader);
//! # Ok::<(), zookeeper_testing::HarnessError>(())
//! ```
//!
//! # Cleanup
//! Every JVM is SIGKILLed and reaped and every temp dir removed when its [`Server`] or
//! [`Ensemble`] is dropped, also while a failing test unwinds. The [`shared_server`] is
//! cleaned up by an `atexit` hook. If the test process dies abruptly the kernel kills the
//! JVMs: they are started with `PR_SET_PDEATHSIG = SIGKILL` from one long-lived spawner
//! thread (PDEATHSIG follows the forking *thread*, and test threads are short-lived).
//! Dirs left behind by such a death are removed by the next harness run.
//!
//! # Environment
//! - `ZK_TEST_HOSTS`, `ZK_HOSTS`: external servers, see [`Hosts`] and [`test_hosts`].
//! - `ZK_HARNESS_JAVA`: the `java` to run (else `$JAVA_HOME/bin/java`, else `PATH`).
//! - `ZK_HARNESS_CLASSPATH`: the server class path, else `ZOOKEEPER_HOME` (an Apache
//!   release unpacked: `$ZOOKEEPER_HOME/lib/*`), else Debian's jars.
//! - `ZK_HARNESS_JAVAC`: the `javac` compiling the crafted-data-dir writer (else next to
//!   `java`, `$JAVA_HOME/bin`, `PATH`); see [`Crafted`].
//! - `ZK_HARNESS_KEEP_DIRS=1`: keep server dirs (config, data, `server.log`) for debugging.
//!
//! # Requirements
//! A Java runtime and the `zookeeper` Debian package (the project's `./setup.sh`); servers
//! from crafted data dirs ([`Server::start_crafted`]) also need `javac`
//! (`default-jdk-headless`, installed by the same script).

#![warn(missing_docs)]

mod edge;
mod ensemble;
mod error;
pub mod executor;
pub mod fault_proxy;
mod fourlw;
pub mod history;
mod hosts;
pub mod lag;
mod options;
#[cfg(feature = "peers")]
pub mod peers;
mod schedule;
mod security;
mod server;
mod session;
mod spawner;
pub mod testing;
pub mod txn_log;
mod util;

pub use edge::{Crafted, CraftedNode};
pub use ensemble::Ensemble;
pub use error::{HarnessError, Result};
pub use fault_proxy::{FaultProxy, OpCode};
pub use fourlw::{four_letter, Mode};
pub use hosts::{
    shared_server, shared_test_connect_string, test_hosts, try_shared_server, Hosts, HOSTS_ENV,
    TEST_HOSTS_ENV,
};
pub use lag::LaggingEnsemble;
pub use options::ServerOptions;
pub use schedule::{FaultAction, FaultKind, FaultSchedule, ScheduleShape, TimedAction};
pub use security::{ServerSasl, ServerTls, TlsMaterial};
pub use server::Server;
pub use session::{expire_session, WireSession};
pub use spawner::process_alive;
/// Alias of [`Server`], the name `curator-test` users know.
pub type TestingServer = Server;
/// Alias of [`Ensemble`], the name `curator-test` users know.
pub type TestingCluster = Ensemble;

pub use testing::Rng;
pub use util::{free_port, free_ports};
