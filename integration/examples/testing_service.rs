//! Testing your own service with `zookeeper-testing`: a lock-guarded job run by three
//! workers on a 3-member ensemble survives the leader's kill and one worker's session
//! expiry, and the recorded critical sections pass the mutex checker (no overlap,
//! fencing tokens increasing in section order).
//!
//! Worker 0's session is expired while it works, from its id and password, by
//! `zookeeper_testing::expire_session` (`support::expire_session`): no proxy, no
//! race with the worker retaking its session.
//!
//! ```text
//! cargo run --example testing_service
//! ```

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;
use zookeeper_mt::{Timeout, ZooKeeper};
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_testing::history::{check_lock, monotonic_nanos, CriticalSection};
use zookeeper_testing::{ServerOptions, TestingCluster};

const WORKERS: usize = 3;
const SESSION: Duration = Duration::from_secs(6);
const BOUND: Duration = Duration::from_secs(60);

/// One worker: takes the lock, does its "job", records the section, again until `stop`.
/// Any error (connection loss while the leader is gone, its session expired) ends the
/// session and the worker starts a new one, as a service would.
fn worker(
    name: String,
    hosts: String,
    resource: String,
    handle: Arc<Mutex<Option<ZooKeeper>>>,
    stop: Arc<AtomicBool>,
    sections: mpsc::Sender<CriticalSection>,
) {
    while !stop.load(Ordering::SeqCst) {
        let Ok(zk) = ZooKeeper::connect(&hosts, SESSION) else {
            continue;
        };
        *handle.lock().unwrap() = Some(zk.clone());
        let run = || -> Result<(), zookeeper_mt_recipes::RecipeError> {
            let lock = Lock::new(&zk, &resource)?;
            while !stop.load(Ordering::SeqCst) {
                let guard = lock.acquire(Timeout::After(BOUND))?;
                let start = monotonic_nanos();
                thread::sleep(Duration::from_millis(20)); // the job
                let end = monotonic_nanos();
                let token = guard.fencing_token();
                guard.release()?;
                let owner = name.clone();
                let _ = sections.send(CriticalSection {
                    owner,
                    token,
                    start,
                    end,
                });
            }
            Ok(())
        };
        if let Err(e) = run() {
            println!("{name}: {e}; starting a new session");
        }
        let _ = zk.close();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = TestingCluster::start(3, &ServerOptions::for_tests())?;
    let leader = cluster.wait_for_leader(BOUND)?;
    let resource = format!("/job-lock-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..WORKERS).map(|_| Arc::new(Mutex::new(None))).collect();
    let threads: Vec<_> = (0..WORKERS)
        .map(|i| {
            let hosts = cluster.connect_string();
            let (resource, handle) = (resource.clone(), Arc::clone(&handles[i]));
            let (stop, tx) = (Arc::clone(&stop), tx.clone());
            thread::spawn(move || worker(format!("worker-{i}"), hosts, resource, handle, stop, tx))
        })
        .collect();
    drop(tx);

    let mut sections = Vec::new();
    let mut collect = |n: usize| -> Result<(), Box<dyn std::error::Error>> {
        for _ in 0..n {
            sections.push(rx.recv_timeout(BOUND).map_err(|_| "no progress")?);
        }
        Ok(())
    };
    collect(10)?;
    println!("killing the leader, member {leader}");
    cluster.kill(leader);
    println!("new leader: member {}", cluster.wait_for_leader(BOUND)?);
    collect(10)?;
    let zk0 = handles[0]
        .lock()
        .unwrap()
        .clone()
        .ok_or("worker-0 has no session")?;
    let id = support::expire_session(&zk0, &cluster.connect_string())?;
    println!("worker-0's session {id:#x} expired");
    cluster.restart(leader)?;
    collect(10)?;

    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("a worker panicked");
    }
    sections.extend(rx.try_iter());
    if let Err(violations) = check_lock(&sections) {
        eprintln!("{violations}");
        return Err("the mutex was violated".into());
    }
    println!(
        "{} critical sections, none overlapping, tokens increasing",
        sections.len()
    );
    Ok(())
}
