//! Follower lag: an ensemble in which one follower keeps serving clients from an old
//! state for a while.
//!
//! # How
//! Each member reads its own `zoo.cfg`, so member `i`'s configuration lists every other
//! member's quorum port as the port of a proxy owned by member `i` (election ports stay
//! direct). A follower opens its one learner connection to the leader through such a
//! proxy. [`LaggingEnsemble::stall_member`] makes that proxy hold the leader's proposals,
//! commits and sync answers, while letting the leader's pings and session revalidations
//! through: the follower stays a follower, keeps its clients, accepts reconnecting
//! sessions (a reconnect to a follower is revalidated by the leader) and answers reads
//! from the state it had when the stall began. [`LaggingEnsemble::resume_member`]
//! delivers the held packets in order and the follower catches up.
//!
//! # The lag window
//! The leader drops a follower that has not acknowledged a proposal within
//! `syncLimit * tickTime` (its `SyncLimitCheck`); the follower then rejoins with a new
//! election and stops serving for a moment. So a stall is faithful for
//! [`lag_window`](LaggingEnsemble::lag_window) after the first write that follows it
//! (before any write nothing is outstanding and the stall can last indefinitely).
//! [`LaggingEnsemble::start`] sets `syncLimit` so that the window is
//! [`DEFAULT_LAG_WINDOW`] (with the default 500 ms tick: `syncLimit=20`); resume within
//! it. A longer window only costs time when a test fails to resume.
//!
//! A client that has seen a zxid newer than the lagging member's last one is refused by
//! that member ("client must try another server"), a guarantee of ZooKeeper's; a client
//! whose write reply was lost has not seen the write's zxid, so it can reconnect there.

use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::ensemble::Ensemble;
use crate::error::{HarnessError, Result};
use crate::fault_proxy::{FaultProxy, Protocol};
use crate::fourlw::{four_letter, Mode};
use crate::options::ServerOptions;
use crate::server::{Server, POLL, PROBE_TIMEOUT};

/// The lag window of [`LaggingEnsemble::start`].
pub const DEFAULT_LAG_WINDOW: Duration = Duration::from_secs(10);

/// How long [`LaggingEnsemble::stall_member`] waits for the member to catch up first.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(30);

/// An ensemble whose followers can be made to lag behind the leader (see the
/// [module docs](self)), with a [`FaultProxy`] in front of every member's client port.
///
/// ```no_run
/// use zookeeper_testing::{LaggingEnsemble, ServerOptions};
///
/// let ens = LaggingEnsemble::start(&ServerOptions::for_tests())?;
/// let lagging = ens.followers()[0];
/// ens.stall_member(lagging)?;
/// // Writes through other members are not seen by reads on `lagging` ...
/// ens.resume_member(lagging);
/// // ... until now; `sync` on it waits for the resume.
/// # Ok::<(), zookeeper_testing::HarnessError>(())
/// ```
///
/// Dropping it kills every member, then closes every proxy.
#[derive(Debug)]
pub struct LaggingEnsemble {
    // Field order is drop order: the servers die before their links.
    ensemble: Ensemble,
    clients: Vec<FaultProxy>,
    /// `links[i][j]`: member `i`'s proxy to member `j`'s quorum port (`None` for `i == j`).
    links: Vec<Vec<Option<FaultProxy>>>,
    stalled: Mutex<Vec<bool>>,
    lag_window: Duration,
}

impl LaggingEnsemble {
    /// Starts a 3-member ensemble with a [`DEFAULT_LAG_WINDOW`].
    pub fn start(opts: &ServerOptions) -> Result<LaggingEnsemble> {
        Self::start_with(3, opts, DEFAULT_LAG_WINDOW)
    }

    /// Starts `n` members (at least 3, so that a quorum remains while one lags) whose
    /// `syncLimit` makes the lag window at least `lag_window` (rounded up to whole
    /// ticks of `opts.tick_time_ms`); `opts` is otherwise used as is.
    pub fn start_with(
        n: usize,
        opts: &ServerOptions,
        lag_window: Duration,
    ) -> Result<LaggingEnsemble> {
        if n < 3 {
            return Err(HarnessError::InvalidArgument(format!(
                "a lagging ensemble needs at least 3 members (a quorum without the laggard), not {n}"
            )));
        }
        let tick = u128::from(opts.tick_time_ms.max(1));
        let sync_limit = lag_window.as_millis().div_ceil(tick).max(2);
        let opts = opts.clone().config("syncLimit", sync_limit.to_string());
        let lag_window = Duration::from_millis((sync_limit * tick) as u64);

        let mut links: Vec<Vec<Option<FaultProxy>>> = Vec::new();
        let ensemble = Ensemble::start_with_peer_views(n, &opts, &mut |peers| {
            // A new attempt (new ports) replaces the proxies of a failed one.
            links.clear();
            let mut views = Vec::with_capacity(peers.len());
            for (i, _) in peers.iter().enumerate() {
                let mut row = Vec::with_capacity(peers.len());
                let mut view = Vec::with_capacity(peers.len());
                for (j, &(id, quorum, election)) in peers.iter().enumerate() {
                    if i == j {
                        row.push(None);
                        view.push((id, quorum, election));
                        continue;
                    }
                    let target = ([127, 0, 0, 1], quorum).into();
                    let proxy = FaultProxy::start_addr(target, Protocol::Quorum)?;
                    view.push((id, proxy.local_addr().port(), election));
                    row.push(Some(proxy));
                }
                links.push(row);
                views.push(view);
            }
            Ok(views)
        })?;
        let clients = ensemble
            .members()
            .iter()
            .map(|m| FaultProxy::start(m.connect_string()))
            .collect::<Result<Vec<_>>>()?;
        Ok(LaggingEnsemble {
            stalled: Mutex::new(vec![false; n]),
            ensemble,
            clients,
            links,
            lag_window,
        })
    }

    /// The underlying ensemble (members, kill, pause, restart, modes, ...).
    pub fn ensemble(&self) -> &Ensemble {
        &self.ensemble
    }

    /// Member `i`. Panics if `i >= len()`.
    pub fn member(&self, i: usize) -> &Server {
        self.ensemble.member(i)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.ensemble.len()
    }

    /// Always false (a lagging ensemble has at least 3 members).
    pub fn is_empty(&self) -> bool {
        self.ensemble.is_empty()
    }

    /// The lag window: how long after the first write a stalled member keeps serving its
    /// old state (see the [module docs](self)).
    pub fn lag_window(&self) -> Duration {
        self.lag_window
    }

    /// The [`FaultProxy`] in front of member `i`'s client port (a test may redirect it to
    /// another member). Panics if `i >= len()`.
    pub fn proxy(&self, i: usize) -> &FaultProxy {
        &self.clients[i]
    }

    /// The connect string of member `i` through its proxy.
    pub fn connect_string(&self, i: usize) -> String {
        self.clients[i].connect_string()
    }

    /// Every member through its proxy, in index order.
    pub fn connect_string_all(&self) -> String {
        self.clients
            .iter()
            .map(FaultProxy::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that reports `Mode: leader` now.
    pub fn leader(&self) -> Option<usize> {
        self.ensemble.leader()
    }

    /// The members that report `Mode: follower` now, in index order.
    pub fn followers(&self) -> Vec<usize> {
        self.ensemble
            .modes()
            .iter()
            .enumerate()
            .filter(|(_, m)| **m == Some(Mode::Follower))
            .map(|(i, _)| i)
            .collect()
    }

    /// The last zxid member `i` applied (`Zxid:` of `srvr`); `None` if it does not
    /// answer.
    pub fn zxid(&self, i: usize) -> Option<i64> {
        let srvr = four_letter(
            &self.ensemble.member(i).connect_string(),
            "srvr",
            PROBE_TIMEOUT,
        )
        .ok()?;
        parse_zxid(&srvr)
    }

    /// Waits until member `i` has applied everything the leader has (equal zxids).
    pub fn wait_caught_up(&self, i: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.leader();
            let (mine, theirs) = (self.zxid(i), leader.and_then(|l| self.zxid(l)));
            if let (Some(a), Some(b)) = (mine, theirs) {
                if a >= b {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    what: format!("member {i} to catch up with the leader"),
                    waited: timeout,
                    details: format!(
                        "leader {leader:?}; zxid of member {i}: {mine:?}, of the leader: {theirs:?}"
                    ),
                });
            }
            thread::sleep(POLL);
        }
    }

    /// Makes follower `i` lag: first waits until it has caught up with the leader, then
    /// holds the leader's proposals, commits and sync answers to it until
    /// [`resume_member`](Self::resume_member). It keeps serving reads from the state it
    /// has. Fails if `i` is the leader (a leader cannot lag) or no leader is known.
    pub fn stall_member(&self, i: usize) -> Result<()> {
        match self.leader() {
            None => {
                return Err(HarnessError::NotRunning {
                    what: "cannot stall a member: the ensemble has no leader".into(),
                })
            }
            Some(l) if l == i => {
                return Err(HarnessError::InvalidArgument(format!(
                    "member {i} is the leader; only a follower can lag"
                )))
            }
            Some(_) => {}
        }
        self.wait_caught_up(i, CATCH_UP_TIMEOUT)?;
        for link in self.links[i].iter().flatten() {
            link.hold_inbound();
        }
        self.lock_stalled()[i] = true;
        Ok(())
    }

    /// Ends a [`stall_member`](Self::stall_member): the held packets are delivered in
    /// order and the member catches up (use [`wait_caught_up`](Self::wait_caught_up) or
    /// a client `sync` to wait for it). No-op if not stalled.
    pub fn resume_member(&self, i: usize) {
        for link in self.links[i].iter().flatten() {
            link.release_inbound();
        }
        self.lock_stalled()[i] = false;
    }

    /// True while member `i` is stalled.
    pub fn is_stalled(&self, i: usize) -> bool {
        self.lock_stalled()[i]
    }

    /// Member `i`'s proxy to member `j`'s quorum port (its learner connection when `j`
    /// leads); `None` if `i == j`. Stalling or cutting it with the [`FaultProxy`] calls
    /// affects all traffic of that link.
    pub fn quorum_link(&self, i: usize, j: usize) -> Option<&FaultProxy> {
        self.links[i][j].as_ref()
    }

    fn lock_stalled(&self) -> std::sync::MutexGuard<'_, Vec<bool>> {
        self.stalled.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `Zxid: 0x...` line of a `srvr` reply.
fn parse_zxid(srvr: &str) -> Option<i64> {
    let value = srvr.lines().find_map(|l| l.strip_prefix("Zxid:"))?.trim();
    let hex = value.strip_prefix("0x").unwrap_or(value);
    i64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::parse_zxid;

    #[test]
    fn zxid_line_is_parsed() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nZxid: 0x100000002\nMode: follower\n";
        assert_eq!(parse_zxid(srvr), Some(0x1_0000_0002));
        assert_eq!(parse_zxid("Mode: follower"), None);
    }
}
