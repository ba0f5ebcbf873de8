//! `zk_harness::expire_session` (the testing crate's client-independent expiry) ends a
//! connected handle's session, with no proxy between the handle and the server: the
//! handle observes `SessionExpired`, and its ephemeral node is gone.

mod common;

use common::{connect, create_mode, hosts, unique, wait_for_state, WAIT};
use std::time::Instant;
use zookeeper_mt::{CreateMode, Error, SessionState};

const ROUNDS: usize = 20;

#[test]
fn a_connected_handle_observes_its_session_expired_in_every_round() {
    let observer = connect();
    let mut millis = Vec::new();
    for round in 0..ROUNDS {
        let zk = connect();
        let events = zk.session_events();
        let path = create_mode(
            &zk,
            &unique(&format!("expire-{round}")),
            b"",
            CreateMode::Ephemeral,
        );
        let id = zk.client_id().unwrap();
        let started = Instant::now();
        zk_harness::expire_session(&hosts(), id.session_id, &id.password, WAIT)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        millis.push(started.elapsed().as_secs_f64() * 1e3);

        let seen = wait_for_state(&events, SessionState::Expired, WAIT);
        assert_eq!(zk.state(), SessionState::Expired, "round {round}: {seen:?}");
        assert!(matches!(zk.exists(&path), Err(Error::SessionExpired)));
        assert_eq!(observer.exists(&path).unwrap(), None, "round {round}");
        // The server refuses the session to anyone now.
        match zk_harness::WireSession::resume(&hosts(), id.session_id, &id.password, WAIT) {
            Err(zk_harness::HarnessError::SessionExpired { .. }) => {}
            other => panic!("round {round}: resume after expiry gave {other:?}"),
        }
    }
    millis.sort_by(f64::total_cmp);
    println!(
        "{ROUNDS} connected handles saw SessionExpired; expire_session took min {:.1} / \
         median {:.1} / max {:.1} ms",
        millis[0],
        millis[ROUNDS / 2],
        millis[ROUNDS - 1]
    );
}
