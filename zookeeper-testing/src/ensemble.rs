//! A quorum of real ZooKeeper servers on loopback.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::fourlw::Mode;
use crate::options::ServerOptions;
use crate::server::{QuorumMember, Server, POLL, START_ATTEMPTS};
use crate::util;

/// `(myid, quorum port, election port)` of a member, as a `server.N` line lists it.
pub(crate) type PeerPorts = (u32, u16, u16);

/// Maps the real peer ports to what each member's `zoo.cfg` lists (see
/// [`Ensemble::start_with_peer_views`]).
pub(crate) type PeerViews<'a> = dyn FnMut(&[PeerPorts]) -> Result<Vec<Vec<PeerPorts>>> + 'a;

/// An ensemble of `n` servers on 127.0.0.1 (member `i` has `myid` `i + 1`), each with its
/// own client, quorum and election port and temp dir.
///
/// Members are addressed by index `0..n`. Dropping the ensemble kills every member and
/// removes every dir.
#[derive(Debug)]
pub struct Ensemble {
    members: Vec<Server>,
    start_timeout: Duration,
}

impl Ensemble {
    /// Starts `n` members and waits (up to `opts.start_timeout`) until exactly one
    /// reports `Mode: leader` and all others `Mode: follower`.
    pub fn start(n: usize, opts: &ServerOptions) -> Result<Ensemble> {
        Self::start_with_peer_views(n, opts, &mut |peers| Ok(vec![peers.to_vec(); peers.len()]))
    }

    /// Like [`start`](Self::start), but member `i`'s `zoo.cfg` lists the peers as
    /// `views(real)[i]` says: `real` holds `(myid, quorum port, election port)` of every
    /// member as it binds them, and a view may point member `i` at other ports for its
    /// peers (e.g. proxies). A member's own entry must stay real (it binds those ports).
    /// `views` is called again with new ports if a start attempt hits a taken port.
    pub(crate) fn start_with_peer_views(
        n: usize,
        opts: &ServerOptions,
        views: &mut PeerViews<'_>,
    ) -> Result<Ensemble> {
        if n == 0 || n > 255 {
            return Err(HarnessError::InvalidArgument(format!(
                "an ensemble needs 1 to 255 members, not {n}"
            )));
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            // All ports at once, so none is handed out twice, and held while the views
            // are built: a proxy that a view binds must not get a member's port (the
            // server refuses a config where two of its ports coincide).
            let reserved = util::reserve_ports(3 * n)?;
            let peers: Vec<(u32, u16, u16)> = (0..n)
                .map(|i| {
                    let ports = &reserved.ports;
                    (i as u32 + 1, ports[3 * i + 1], ports[3 * i + 2])
                })
                .collect();
            let views = views(&peers)?;
            let ports = reserved.release();
            if views.len() != n
                || views
                    .iter()
                    .enumerate()
                    .any(|(i, v)| v.get(i) != peers.get(i))
            {
                return Err(HarnessError::InvalidArgument(
                    "an ensemble peer view must have one entry per member and keep the member's own ports".into(),
                ));
            }
            let mut members = Vec::with_capacity(n);
            for (i, view) in views.into_iter().enumerate() {
                let quorum = QuorumMember {
                    my_id: i as u32 + 1,
                    peers: view,
                };
                let port = ports[3 * i];
                let label = format!("ensemble member {i} (myid {}, 127.0.0.1:{port})", i + 1);
                members.push(Server::prepare(label, port, opts, Some(&quorum))?);
            }
            let ensemble = Ensemble {
                members,
                start_timeout: opts.start_timeout,
            };
            let result = ensemble
                .members
                .iter()
                .try_for_each(Server::launch)
                .and_then(|()| ensemble.wait_for_all_serving(opts.start_timeout));
            match result {
                Ok(_) => return Ok(ensemble),
                Err(_)
                    if attempt < START_ATTEMPTS
                        && ensemble.members.iter().any(Server::bind_failed) => {}
                Err(e) => {
                    return Err(match e {
                        HarnessError::StartFailed { .. } => ensemble.members[0].note_dir_removal(e),
                        other => other,
                    })
                }
            }
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false (an ensemble has at least one member).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `"127.0.0.1:P1,127.0.0.1:P2,..."`, every member in index order.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(Server::connect_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`. Panics if `i >= len()`.
    pub fn member(&self, i: usize) -> &Server {
        &self.members[i]
    }

    /// All members, in index order.
    pub fn members(&self) -> &[Server] {
        &self.members
    }

    /// SIGKILLs member `i` and reaps it.
    pub fn kill(&self, i: usize) {
        self.members[i].kill();
    }

    /// Stops member `i` gracefully (SIGTERM, then SIGKILL after the stop timeout).
    pub fn stop(&self, i: usize) {
        self.members[i].stop();
    }

    /// Restarts member `i` (same ports, same data dir) and waits until it serves as
    /// leader or follower, which needs a quorum of running members.
    pub fn restart(&self, i: usize) -> Result<Mode> {
        self.members[i].restart()
    }

    /// Pauses member `i` with SIGSTOP.
    pub fn pause(&self, i: usize) -> Result<()> {
        self.members[i].pause()
    }

    /// Resumes member `i` with SIGCONT.
    pub fn resume(&self, i: usize) -> Result<()> {
        self.members[i].resume()
    }

    /// The mode of each member (`None`: not running, paused, or not serving).
    pub fn modes(&self) -> Vec<Option<Mode>> {
        self.members.iter().map(Server::mode).collect()
    }

    /// The index of a member that reports `Mode: leader` now (asks `srvr` of every
    /// running, not paused member).
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.mode() == Some(Mode::Leader))
    }

    /// Waits until some member reports `Mode: leader` and returns its index.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize> {
        self.wait_for("a leader", timeout, |modes| {
            modes.iter().position(|m| *m == Some(Mode::Leader))
        })
    }

    /// Waits until a leader exists and a majority of all members report leader or
    /// follower (clients can then read and write); returns the leader's index.
    pub fn wait_for_quorum(&self, timeout: Duration) -> Result<usize> {
        let majority = self.members.len() / 2 + 1;
        self.wait_for("a quorum", timeout, |modes| {
            let serving = modes
                .iter()
                .filter(|m| matches!(m, Some(Mode::Leader | Mode::Follower)))
                .count();
            let leader = modes.iter().position(|m| *m == Some(Mode::Leader))?;
            (serving >= majority).then_some(leader)
        })
    }

    /// Waits until exactly one member is leader and every other member follows (all must
    /// be running and not paused); returns the leader's index.
    pub fn wait_for_all_serving(&self, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            for m in &self.members {
                if !m.is_running() {
                    return Err(m.start_failed("the JVM is not running".to_string()));
                }
            }
            let modes = self.modes();
            let leaders: Vec<usize> = (0..modes.len())
                .filter(|&i| modes[i] == Some(Mode::Leader))
                .collect();
            let followers = modes.iter().filter(|m| **m == Some(Mode::Follower)).count();
            if leaders.len() == 1 && followers == modes.len() - 1 {
                return Ok(leaders[0]);
            }
            if Instant::now() >= deadline {
                return Err(self.timeout_error("every member serving", timeout, &modes));
            }
            thread::sleep(POLL);
        }
    }

    /// The start timeout the ensemble was created with.
    pub fn start_timeout(&self) -> Duration {
        self.start_timeout
    }

    fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Option<Mode>]) -> Option<usize>,
    ) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let modes = self.modes();
            if let Some(i) = done(&modes) {
                return Ok(i);
            }
            if Instant::now() >= deadline {
                return Err(self.timeout_error(what, timeout, &modes));
            }
            thread::sleep(POLL);
        }
    }

    fn timeout_error(&self, what: &str, waited: Duration, modes: &[Option<Mode>]) -> HarnessError {
        let mut details = String::new();
        for (i, (m, mode)) in self.members.iter().zip(modes).enumerate() {
            let state = if !m.is_running() {
                "not running".to_string()
            } else if m.is_paused() {
                "paused".to_string()
            } else {
                match mode {
                    Some(mode) => mode.to_string(),
                    None => "not serving".to_string(),
                }
            };
            let _ = writeln!(
                details,
                "member {i} ({}): {state}; log {} (last lines):\n{}",
                m.connect_string(),
                m.log_path().display(),
                m.log_tail(8)
            );
        }
        HarnessError::Timeout {
            what: what.to_string(),
            waited,
            details,
        }
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        // Kill every member before any is dropped (and its dir removed), so the survivors
        // do not spend the teardown running elections.
        for m in &self.members {
            m.kill();
        }
    }
}
