//! `expire_session` against real servers: a session held by the crate's own wire client
//! is ended and a resume is refused, whether its holder is idle, gone, or live and
//! retaking the session as fast as it can (the race a takeover-and-close must survive),
//! on a standalone server and on an ensemble.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_testing::{
    expire_session, four_letter, free_port, shared_test_connect_string, Ensemble, HarnessError,
    ServerOptions, WireSession,
};

const WAIT: Duration = Duration::from_secs(30);
const SESSION: Duration = Duration::from_secs(10);
/// How long a holder waits for an answer before it takes the connection for dead, as a
/// real client does (the C client: two thirds of the session timeout). A server may
/// leave the connection of a session it ended open without answering on it.
const READ_TIMEOUT: Duration = Duration::from_millis(SESSION.as_millis() as u64 * 2 / 3);
const ROUNDS: usize = 20;

fn assert_refused(connect: &str, id: i64, password: &[u8]) {
    match WireSession::resume(connect, id, password, WAIT) {
        Err(HarnessError::SessionExpired { session_id }) => assert_eq!(session_id, id),
        Ok(s) => panic!("session {id:#x} resumed on {} after its expiry", s.server()),
        Err(e) => panic!("resuming {id:#x}: {e}"),
    }
}

#[test]
fn an_idle_or_gone_holder_is_expired_and_a_second_call_is_ok() {
    let connect = shared_test_connect_string();
    // Idle: connected, never pinging.
    let idle = WireSession::connect(&connect, SESSION, WAIT).unwrap();
    assert_ne!(idle.session_id(), 0);
    assert_eq!(idle.password().len(), 16);
    expire_session(&connect, idle.session_id(), idle.password(), WAIT).unwrap();
    assert_refused(&connect, idle.session_id(), idle.password());
    // Already gone: confirmed at once.
    expire_session(&connect, idle.session_id(), idle.password(), WAIT).unwrap();

    // Gone: its connection dropped, the session lingers on the server until it times out.
    let gone = WireSession::connect(&connect, SESSION, WAIT).unwrap();
    let (id, password) = (gone.session_id(), gone.password().to_vec());
    drop(gone);
    let started = Instant::now();
    expire_session(&connect, id, &password, WAIT).unwrap();
    assert!(
        started.elapsed() < SESSION,
        "waited for the timeout instead of closing"
    );
    assert_refused(&connect, id, &password);
}

#[test]
fn bad_arguments_and_unreachable_servers_are_typed_errors() {
    assert!(matches!(
        expire_session("/chroot", 1, &[0; 16], WAIT),
        Err(HarnessError::InvalidArgument(_))
    ));
    let nobody = format!("127.0.0.1:{}", free_port().unwrap());
    let started = Instant::now();
    match expire_session(&nobody, 1, &[0; 16], Duration::from_millis(300)) {
        Err(HarnessError::Timeout { details, .. }) => assert!(details.contains("handshakes")),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// What a holder saw in one round.
struct Holder {
    pings: u32,
    retakes: u32,
    failed_resumes: u32,
}

/// Holds `session` like a live client: pings back to back and, whenever its connection
/// is closed, resumes the session at once, until a resume is refused (or `stop`). `ready`
/// gets one message after its first ping.
fn hold(
    mut session: WireSession,
    connect: String,
    ready: mpsc::Sender<()>,
    stop: Arc<AtomicBool>,
) -> Result<Holder, String> {
    let (id, password) = (session.session_id(), session.password().to_vec());
    let mut seen = Holder {
        pings: 0,
        retakes: 0,
        failed_resumes: 0,
    };
    let mut lost_since: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(seen);
        }
        match session.ping(READ_TIMEOUT) {
            Ok(()) => {
                if seen.pings == 0 {
                    let _ = ready.send(());
                }
                seen.pings += 1;
            }
            Err(_) => loop {
                match WireSession::resume(&connect, id, &password, READ_TIMEOUT) {
                    Ok(s) => {
                        seen.retakes += 1;
                        session = s;
                        lost_since = None;
                        break;
                    }
                    Err(HarnessError::SessionExpired { .. }) => return Ok(seen),
                    // Closed before an answer (the server was ending or moving the
                    // session): a client retries, as here, within its session timeout.
                    Err(e) => {
                        let since = *lost_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > WAIT {
                            return Err(format!("holder of {id:#x}: {e}"));
                        }
                        seen.failed_resumes += 1;
                    }
                }
            },
        }
    }
}

/// Whether `member` lists a connection of `session_id` that has answered a request
/// since its handshake (its last operation, `lop`, is not the handshake's).
fn serving_connection(member: &str, session_id: i64) -> bool {
    let sid = format!("sid={session_id:#x},");
    four_letter(member, "cons", Duration::from_secs(5)).is_ok_and(|listing| {
        listing
            .lines()
            .any(|line| line.contains(&sid) && !line.contains("lop=SESS"))
    })
}

/// `rounds` expiries of live, retaking holders connected through `holder_connect`,
/// expired through `expire_connect`; prints the figures. Returns how many holders were
/// left on a connection the server went on answering (see `expire_session`'s docs: a
/// server race when the holder retakes the session on the member the expiry goes
/// through); each is checked to be refused everywhere all the same.
fn race(label: &str, rounds: usize, holder_connect: &str, expire_connect: &str) -> usize {
    let mut millis = Vec::new();
    let (mut retakes, mut pings, mut failed, mut outlived) = (0, 0, 0, 0);
    for round in 0..rounds {
        let session = WireSession::connect(holder_connect, SESSION, WAIT).unwrap();
        let (id, password) = (session.session_id(), session.password().to_vec());
        let holder_member = session.server().to_owned();
        let (ready_tx, ready) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let connect = holder_connect.to_owned();
        let holder_stop = Arc::clone(&stop);
        thread::spawn(move || {
            let _ = done_tx.send(hold(session, connect, ready_tx, holder_stop));
        });
        ready.recv_timeout(WAIT).expect("the holder never pinged");
        let started = Instant::now();
        expire_session(expire_connect, id, &password, WAIT)
            .unwrap_or_else(|e| panic!("{label} round {round}: {e}"));
        millis.push(started.elapsed().as_secs_f64() * 1e3);
        let seen = match done.recv_timeout(WAIT) {
            Ok(seen) => seen.unwrap_or_else(|e| panic!("{label} round {round}: {e}")),
            Err(_) => {
                // Still pinging: only acceptable as the server race, on a connection the
                // holder's member still answers.
                let listed = serving_connection(&holder_member, id);
                stop.store(true, Ordering::Relaxed);
                let seen = done.recv_timeout(WAIT).expect("the holder stops");
                assert!(
                    listed,
                    "{label} round {round}: the holder still holds {id:#x}, and its member \
                     lists no connection of it"
                );
                println!(
                    "{label} round {round}: {holder_member} went on answering a connection \
                     of ended session {id:#x} (the server race)"
                );
                outlived += 1;
                seen.unwrap_or_else(|e| panic!("{label} round {round}: {e}"))
            }
        };
        assert_refused(expire_connect, id, &password);
        retakes += seen.retakes;
        pings += seen.pings;
        failed += seen.failed_resumes;
    }
    millis.sort_by(f64::total_cmp);
    println!(
        "{label}: {rounds} live sessions expired; holders retook them {retakes} times during \
         the expiries ({failed} resumes closed unanswered, {pings} pings, {outlived} left on \
         a connection the server went on answering); expire_session took min {:.1} / median \
         {:.1} / max {:.1} ms",
        millis[0],
        millis[millis.len() / 2],
        millis[millis.len() - 1]
    );
    outlived
}

#[test]
fn live_retaking_holders_are_expired_on_a_standalone_server() {
    let connect = shared_test_connect_string();
    assert_eq!(race("standalone", ROUNDS, &connect, &connect), 0);
}

#[test]
fn live_holders_are_expired_on_an_ensemble_from_any_member() {
    let ensemble = Ensemble::start(3, &ServerOptions::for_tests()).unwrap();
    ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    let member = |i: usize| ensemble.member(i).connect_string();
    // The holder on member 0; the expiry enters at member 1 (and at member 0 itself).
    let other_first = format!("{},{},{}", member(1), member(2), member(0));
    assert_eq!(
        race("ensemble, other member", 5, &member(0), &other_first),
        0
    );
    // The server race needs the holder's handshake and the close on one member: not
    // ours to prevent, but every such holder was checked to be on a connection its
    // member still answers, and its session refused everywhere.
    race("ensemble, same member", 5, &member(0), &member(0));

    // A member down, listed first: the expiry goes through the others. The member killed
    // is a follower: killing the leader would start an election, during which the other
    // members close their clients' connections (what this part checks is the skip).
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    let dead = if leader == 1 { 2 } else { 1 };
    let alive: Vec<usize> = (0..3).filter(|&i| i != dead).collect();
    ensemble.kill(dead);
    let dead_first = format!("{},{},{}", member(dead), member(alive[0]), member(alive[1]));
    let holder = WireSession::connect(&member(alive[1]), SESSION, WAIT).unwrap();
    expire_session(&dead_first, holder.session_id(), holder.password(), WAIT).unwrap();
    for i in alive {
        assert_refused(&member(i), holder.session_id(), holder.password());
    }
}
