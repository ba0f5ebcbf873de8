//! Standalone servers: start, probe, stop, kill, restart, pause, drop.

use std::time::{Duration, Instant};

use zk_harness::{four_letter, process_alive, HarnessError, Mode, Server, ServerOptions};

fn start() -> Server {
    let t = Instant::now();
    let server = Server::start_with(&ServerOptions::for_tests()).expect("server starts");
    eprintln!("standalone server serving after {:?}", t.elapsed());
    server
}

#[test]
fn start_answers_ruok_and_srvr() {
    let server = start();
    assert!(server.is_running());
    assert_eq!(
        server.connect_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");
    let srvr = server.four_letter("srvr").unwrap();
    assert!(srvr.contains("Mode: standalone"), "{srvr}");
    assert_eq!(server.mode(), Some(Mode::Standalone));
    assert!(server.data_dir().is_dir());
    let cfg = std::fs::read_to_string(server.config_path()).unwrap();
    assert!(
        cfg.contains(&format!("clientPort={}", server.port())),
        "{cfg}"
    );
    // The log4j binding is on the class path: the server log has the server's own lines.
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("QuorumPeerConfig"), "{log}");
    assert!(!log.contains("NOPLogger"), "{log}");
}

#[test]
fn stop_ends_the_process() {
    let server = start();
    let pid = server.pid().expect("pid while running");
    assert!(process_alive(pid));
    let t = Instant::now();
    server.stop();
    eprintln!("graceful stop took {:?}", t.elapsed());
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!process_alive(pid), "pid {pid} still alive after stop");
    assert!(server.four_letter("ruok").is_err());
}

#[test]
fn kill_then_restart_serves_on_the_same_port() {
    let server = start();
    let port = server.port();
    let old_pid = server.pid().unwrap();
    server.kill();
    assert!(!server.is_running());
    assert!(!process_alive(old_pid));
    assert!(
        server.four_letter("ruok").is_err(),
        "killed server answered"
    );

    let t = Instant::now();
    assert_eq!(server.restart().expect("restart"), Mode::Standalone);
    eprintln!("restart serving after {:?}", t.elapsed());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid().unwrap(), old_pid);
    assert_eq!(server.four_letter("ruok").unwrap(), "imok");

    // Restarting a running server stops it gracefully first.
    let pid = server.pid().unwrap();
    server.restart().expect("second restart");
    assert!(!process_alive(pid));
    assert_eq!(server.mode(), Some(Mode::Standalone));
}

#[test]
fn pause_and_resume() {
    let server = start();
    server.pause().unwrap();
    assert!(server.is_paused());
    assert!(server.is_running());
    assert_eq!(server.mode(), None);
    assert!(
        four_letter(&server.connect_string(), "ruok", Duration::from_millis(300)).is_err(),
        "a paused server answered"
    );
    server.resume().unwrap();
    assert!(!server.is_paused());
    assert_eq!(
        server.wait_until_serving(Duration::from_secs(20)).unwrap(),
        Mode::Standalone
    );
    // Stopping a paused server works too (SIGTERM is delivered after SIGCONT).
    server.pause().unwrap();
    let pid = server.pid().unwrap();
    server.stop();
    assert!(!process_alive(pid));
    assert!(server.pause().is_err());
}

#[test]
fn drop_kills_a_paused_server_and_removes_its_dir() {
    let server = start();
    let pid = server.pid().unwrap();
    let dir = server.dir().to_path_buf();
    assert!(dir.is_dir());
    server.pause().unwrap();
    drop(server);
    assert!(!process_alive(pid), "pid {pid} survived drop");
    assert!(!dir.exists(), "{} survived drop", dir.display());
}

#[test]
fn drop_during_a_panic_cleans_up() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let server = start();
        tx.send((server.pid().unwrap(), server.dir().to_path_buf()))
            .unwrap();
        panic!("test failure while a server runs");
    })
    .join();
    assert!(result.is_err());
    let (pid, dir) = rx.recv().unwrap();
    assert!(!process_alive(pid), "pid {pid} survived the panic");
    assert!(!dir.exists());
}

#[test]
fn start_failure_reports_the_log() {
    let opts = ServerOptions::for_tests().jvm_arg("-XX:+NoSuchHarnessOption");
    let err = Server::start_with(&opts).expect_err("the JVM must refuse the option");
    let msg = err.to_string();
    assert!(matches!(err, HarnessError::StartFailed { .. }), "{msg}");
    assert!(msg.contains("server.log"), "{msg}");
    assert!(msg.contains("NoSuchHarnessOption"), "{msg}");
}
