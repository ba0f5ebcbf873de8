//! Environment handling: external hosts, embedded fallback, missing Java.
//!
//! One test only: it changes environment variables, which must not race other tests.

use zk_harness::{HarnessError, Hosts, Mode, Server};

#[test]
fn hosts_from_env_and_missing_java() {
    const VAR: &str = "ZK_HARNESS_SELFTEST_HOSTS";

    std::env::set_var(VAR, " 10.1.2.3:2181,10.1.2.4:2181 ");
    let hosts = Hosts::from_env_or_start(VAR).unwrap();
    assert!(hosts.is_external());
    assert!(hosts.server().is_none());
    assert_eq!(hosts.connect_string(), "10.1.2.3:2181,10.1.2.4:2181");

    std::env::set_var(VAR, "");
    let hosts = Hosts::from_env_or_start(VAR).unwrap();
    assert!(!hosts.is_external());
    let server = hosts.server().expect("an embedded server");
    assert_eq!(hosts.connect_string(), server.connect_string());
    assert_eq!(server.mode(), Some(Mode::Standalone));
    let pid = server.pid().unwrap();
    drop(hosts);
    assert!(!zk_harness::process_alive(pid));
    std::env::remove_var(VAR);

    std::env::set_var("ZK_HARNESS_JAVA", "/nonexistent/bin/java");
    let err = Server::start().expect_err("no java");
    std::env::remove_var("ZK_HARNESS_JAVA");
    let msg = err.to_string();
    assert!(matches!(err, HarnessError::JavaNotFound { .. }), "{msg}");
    assert!(msg.contains("./setup.sh"), "{msg}");
    assert!(msg.contains("zookeeper"), "{msg}");
}
