//! Seeded, reproducible fault schedules for fault runs.
//!
//! [`FaultSchedule::generate`] turns a seed into a list of timed actions (kill a member
//! and restart it, kill the leader, pause and resume a member, cut a proxy and restore
//! it, expire a session). The same seed, duration, kinds and [`ScheduleShape`] give the
//! same schedule on every machine: a failing run prints its schedule (`Display` shows the
//! seed first) and the seed replays it.
//!
//! Faults never overlap: each one is healed before the next begins, and all are healed by
//! the end of the schedule. So at most one member is down or paused at any time, and a
//! 3-member ensemble keeps its quorum throughout.

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{HarnessError, Result};
use crate::testing::Rng;

/// A kind of fault a schedule may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL one ensemble member, restart it after an outage.
    KillMember,
    /// SIGKILL whichever member leads at that moment, restart it after an outage.
    KillLeader,
    /// SIGSTOP one member (a hung machine), SIGCONT it after an outage.
    PauseMember,
    /// Cut one client proxy's connections, restore it after an outage.
    ProxyCut,
    /// Force one client's session to expire (instantaneous).
    ExpireSession,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::KillMember,
        FaultKind::KillLeader,
        FaultKind::PauseMember,
        FaultKind::ProxyCut,
        FaultKind::ExpireSession,
    ];
}

/// One thing a fault runner does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// SIGKILL member `member` (0-based index into the ensemble).
    Kill {
        /// Member index.
        member: usize,
    },
    /// Restart member `member` after a [`Kill`](Self::Kill).
    Restart {
        /// Member index.
        member: usize,
    },
    /// SIGKILL the current leader; the runner remembers which member that was.
    KillLeader,
    /// Restart the member the preceding [`KillLeader`](Self::KillLeader) killed.
    RestartLeader,
    /// SIGSTOP member `member`.
    Pause {
        /// Member index.
        member: usize,
    },
    /// SIGCONT member `member` after a [`Pause`](Self::Pause).
    Resume {
        /// Member index.
        member: usize,
    },
    /// Cut proxy `proxy` (drop its connections, refuse new ones).
    CutProxy {
        /// Proxy index.
        proxy: usize,
    },
    /// Let proxy `proxy` pass traffic again.
    RestoreProxy {
        /// Proxy index.
        proxy: usize,
    },
    /// Expire client `client`'s session (e.g. close a second handle on its session id).
    ExpireSession {
        /// Client index.
        client: usize,
    },
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultAction::Kill { member } => write!(f, "kill member {member}"),
            FaultAction::Restart { member } => write!(f, "restart member {member}"),
            FaultAction::KillLeader => write!(f, "kill the leader"),
            FaultAction::RestartLeader => write!(f, "restart the killed leader"),
            FaultAction::Pause { member } => write!(f, "pause member {member}"),
            FaultAction::Resume { member } => write!(f, "resume member {member}"),
            FaultAction::CutProxy { proxy } => write!(f, "cut proxy {proxy}"),
            FaultAction::RestoreProxy { proxy } => write!(f, "restore proxy {proxy}"),
            FaultAction::ExpireSession { client } => write!(f, "expire session of client {client}"),
        }
    }
}

/// An action and when to do it, as an offset from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimedAction {
    /// Offset from the start of the run.
    pub at: Duration,
    /// What to do.
    pub action: FaultAction,
}

/// The targets and pacing a schedule is generated for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleShape {
    /// Ensemble members (kill / pause targets). Default 3.
    pub members: usize,
    /// Client proxies (cut targets). Default 1.
    pub proxies: usize,
    /// Clients whose sessions may be expired. Default 1.
    pub clients: usize,
    /// Quiet time between faults, at least. Default 500 ms.
    pub min_gap: Duration,
    /// Quiet time between faults, at most. Default 2 s.
    pub max_gap: Duration,
    /// How long a fault lasts, at least. Default 300 ms.
    pub min_outage: Duration,
    /// How long a fault lasts, at most. Default 3 s.
    pub max_outage: Duration,
}

impl Default for ScheduleShape {
    fn default() -> Self {
        ScheduleShape {
            members: 3,
            proxies: 1,
            clients: 1,
            min_gap: Duration::from_millis(500),
            max_gap: Duration::from_secs(2),
            min_outage: Duration::from_millis(300),
            max_outage: Duration::from_secs(3),
        }
    }
}

/// A reproducible list of timed fault actions; see the module docs.
///
/// ```
/// use std::time::Duration;
/// use zookeeper_testing::{FaultKind, FaultSchedule};
///
/// let a = FaultSchedule::generate(42, Duration::from_secs(20), &FaultKind::ALL);
/// let b = FaultSchedule::generate(42, Duration::from_secs(20), &FaultKind::ALL);
/// assert_eq!(a, b);
/// println!("{a}"); // seed first, then one action per line
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSchedule {
    seed: u64,
    duration: Duration,
    kinds: Vec<FaultKind>,
    shape: ScheduleShape,
    actions: Vec<TimedAction>,
}

impl FaultSchedule {
    /// A schedule for a run of `duration` over a 3-member ensemble, one proxy and one
    /// client ([`ScheduleShape::default`]), using only `kinds` (duplicates ignored; none:
    /// an empty schedule).
    pub fn generate(seed: u64, duration: Duration, kinds: &[FaultKind]) -> FaultSchedule {
        Self::generate_with(seed, duration, kinds, &ScheduleShape::default())
    }

    /// [`generate`](Self::generate) for other targets and pacing. Kinds without a target
    /// in `shape` (e.g. member faults with `members == 0`) are left out.
    pub fn generate_with(
        seed: u64,
        duration: Duration,
        kinds: &[FaultKind],
        shape: &ScheduleShape,
    ) -> FaultSchedule {
        let mut usable: Vec<FaultKind> = kinds
            .iter()
            .copied()
            .filter(|k| match k {
                FaultKind::KillMember | FaultKind::KillLeader | FaultKind::PauseMember => {
                    shape.members > 0
                }
                FaultKind::ProxyCut => shape.proxies > 0,
                FaultKind::ExpireSession => shape.clients > 0,
            })
            .collect();
        usable.sort();
        usable.dedup();

        let mut rng = Rng::new(seed);
        let mut actions = Vec::new();
        let mut t = rng.duration_between(shape.min_gap, shape.max_gap);
        while !usable.is_empty() && t < duration {
            let kind = usable[rng.below(usable.len() as u64) as usize];
            let pick = |rng: &mut Rng, n: usize| rng.below(n as u64) as usize;
            let (start, end) = match kind {
                FaultKind::KillMember => {
                    let member = pick(&mut rng, shape.members);
                    (
                        FaultAction::Kill { member },
                        Some(FaultAction::Restart { member }),
                    )
                }
                FaultKind::KillLeader => {
                    (FaultAction::KillLeader, Some(FaultAction::RestartLeader))
                }
                FaultKind::PauseMember => {
                    let member = pick(&mut rng, shape.members);
                    (
                        FaultAction::Pause { member },
                        Some(FaultAction::Resume { member }),
                    )
                }
                FaultKind::ProxyCut => {
                    let proxy = pick(&mut rng, shape.proxies);
                    (
                        FaultAction::CutProxy { proxy },
                        Some(FaultAction::RestoreProxy { proxy }),
                    )
                }
                FaultKind::ExpireSession => {
                    let client = pick(&mut rng, shape.clients);
                    (FaultAction::ExpireSession { client }, None)
                }
            };
            let outage = rng.duration_between(shape.min_outage, shape.max_outage);
            let gap = rng.duration_between(shape.min_gap, shape.max_gap);
            match end {
                Some(end) => {
                    // Heal by the end of the run; skip a fault too short to matter.
                    let outage = outage.min(duration - t);
                    if outage < shape.min_outage {
                        break;
                    }
                    actions.push(TimedAction {
                        at: t,
                        action: start,
                    });
                    actions.push(TimedAction {
                        at: t + outage,
                        action: end,
                    });
                    t += outage + gap;
                }
                None => {
                    actions.push(TimedAction {
                        at: t,
                        action: start,
                    });
                    t += gap;
                }
            }
        }
        FaultSchedule {
            seed,
            duration,
            kinds: usable,
            shape: shape.clone(),
            actions,
        }
    }

    /// The seed it was generated from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The run's length; every fault is healed by then.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The kinds it was generated from (those with a target, deduplicated).
    pub fn kinds(&self) -> &[FaultKind] {
        &self.kinds
    }

    /// The shape it was generated for.
    pub fn shape(&self) -> &ScheduleShape {
        &self.shape
    }

    /// The actions, by time.
    pub fn actions(&self) -> &[TimedAction] {
        &self.actions
    }

    /// Runs the schedule from now: sleeps until each action's offset and calls `act`
    /// with it, then returns (after the last action, not at [`duration`](Self::duration)).
    /// If `act` is late (a slow restart), the next actions follow at once, in order.
    pub fn play(&self, mut act: impl FnMut(&TimedAction)) {
        let start = Instant::now();
        for a in &self.actions {
            let due = start + a.at;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            act(a);
        }
    }

    /// The seed in environment variable `var` (decimal, or hex with `0x`), else a fresh
    /// one from the clock and process id. A value that does not parse is an
    /// [`HarnessError::InvalidArgument`]. Print the seed you use.
    pub fn seed_from_env(var: &str) -> Result<u64> {
        match std::env::var(var) {
            Ok(text) if !text.trim().is_empty() => {
                let text = text.trim();
                let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => text.parse(),
                };
                parsed.map_err(|e| {
                    HarnessError::InvalidArgument(format!("{var}={text:?} is not a seed: {e}"))
                })
            }
            _ => {
                let nanos = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                Ok(Rng::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64())
            }
        }
    }
}

impl fmt::Display for FaultSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fault schedule seed={} duration={:?} kinds={:?} members={} proxies={} clients={}: {} action(s)",
            self.seed,
            self.duration,
            self.kinds,
            self.shape.members,
            self.shape.proxies,
            self.shape.clients,
            self.actions.len()
        )?;
        for a in &self.actions {
            let at = format!("+{:.3}s", a.at.as_secs_f64());
            write!(f, "\n  {at:>9}  {}", a.action)?;
        }
        Ok(())
    }
}
