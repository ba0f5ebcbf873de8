//! Elections, latches and the double barrier: a dropped call leaves nobody in line and
//! blocks no round.

use super::*;
use zookeeper_mt_recipes::barriers::DoubleBarrier;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::leadership::LeaderLatch;

// ------------------------------------------------------------------ elections

pub(super) enum ElectionCall {
    Join,
    Wait,
    Resign,
}

struct ElectionSubject {
    zk: ZooKeeper,
    path: String,
    election: Option<LeaderElection>,
    rival: Option<LeaderElection>,
    call: ElectionCall,
}

pub(super) fn election_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    call: ElectionCall,
) -> Made {
    let (election, rival) = match call {
        ElectionCall::Join => (None, None),
        ElectionCall::Resign => {
            let ours = LeaderElection::new(zk, path, b"me").map_err(err_text)?;
            (Some(ours), None)
        }
        ElectionCall::Wait => {
            let rival = LeaderElection::new(admin, path, b"rival").map_err(err_text)?;
            let ours = LeaderElection::new(zk, path, b"me").map_err(err_text)?;
            (Some(ours), Some(rival))
        }
    };
    Ok(Box::new(ElectionSubject {
        zk: zk.clone(),
        path: path.to_string(),
        election,
        rival,
        call,
    }))
}

impl Subject for ElectionSubject {
    fn call(&mut self) -> Call<'_> {
        match self.call {
            ElectionCall::Join => {
                let (zk, path) = (&self.zk, &self.path);
                Box::pin(async move {
                    // A joined candidate is dropped: it leaves in the background.
                    let joined = LeaderElection::new_async(zk, path, b"me").await;
                    joined
                        .map(|e| kept(e.node().to_string(), e))
                        .map_err(err_text)
                })
            }
            ElectionCall::Resign => {
                let election = self.election.take().expect("joined");
                Box::pin(async move {
                    let resigned = election.resign_async().await;
                    resigned.map(|()| String::new()).map_err(err_text)
                })
            }
            ElectionCall::Wait => {
                let election = self.election.as_ref().expect("joined");
                Box::pin(async move {
                    let waited = election.wait_until_leader_async(WAIT).await;
                    waited.map(|()| String::new()).map_err(err_text)
                })
            }
        }
    }

    fn ours(&self, ours: &[String]) -> Result<(), String> {
        // A candidate whose wait was dropped stays in the election.
        let expected: Vec<String> = self.election.iter().map(|e| e.node().to_string()).collect();
        if ours == expected.as_slice() {
            Ok(())
        } else {
            Err(format!("candidates {ours:?}, expected {expected:?}"))
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        drop(self.rival.take());
        if let Some(election) = &self.election {
            // Still in line: it leads once the rival left.
            election
                .wait_until_leader(SETTLE)
                .map_err(|e| format!("the waiting candidate never leads: {e}"))?;
            return Ok(());
        }
        // Nothing left in line: the next candidate leads at once.
        let next = LeaderElection::new(admin, &self.path, b"next").map_err(err_text)?;
        let led = next.wait_until_leader(SETTLE);
        next.resign().map_err(err_text)?;
        led.map_err(|e| format!("a stale candidate blocks the line: {e}"))
    }
}

struct LatchSubject {
    zk: ZooKeeper,
    path: String,
    latch: Option<LeaderLatch>,
    rival: Option<LeaderLatch>,
    timeout: Duration,
}

pub(super) fn latch_subject(admin: &ZooKeeper, zk: &ZooKeeper, path: &str, held: bool) -> Made {
    let rival = match held {
        true => {
            let rival = LeaderLatch::builder(path)
                .id("rival")
                .build(admin)
                .map_err(err_text)?;
            rival.await_leadership(OP_TIMEOUT).map_err(err_text)?;
            Some(rival)
        }
        false => None,
    };
    Ok(Box::new(LatchSubject {
        zk: zk.clone(),
        path: path.to_string(),
        latch: None,
        rival,
        timeout: if held { WAIT } else { OP_TIMEOUT },
    }))
}

impl Subject for LatchSubject {
    fn call(&mut self) -> Call<'_> {
        // The latch's task sends the requests; the call waits for their outcome.
        let latch = LeaderLatch::builder(&self.path).id("me").build(&self.zk);
        let latch = match latch {
            Ok(latch) => &*self.latch.insert(latch),
            Err(error) => {
                let error = err_text(error);
                return Box::pin(async move { Err(error) });
            }
        };
        let timeout = self.timeout;
        Box::pin(async move {
            let guard = latch
                .await_leadership_async(timeout)
                .await
                .map_err(err_text)?;
            Ok(kept(guard.token().to_string(), guard))
        })
    }

    fn ours(&self, ours: &[String]) -> Result<(), String> {
        // The latch stays in line with exactly one node.
        let node = self.latch.as_ref().and_then(LeaderLatch::node);
        match (ours, node) {
            ([one], Some(node)) if node.ends_with(one.as_str()) => Ok(()),
            (ours, node) => Err(format!("latch nodes {ours:?}, the latch says {node:?}")),
        }
    }

    fn extra_contexts(&self, _: Option<&Outcome>, _: bool) -> (usize, usize) {
        let armed = self.latch.as_ref().map_or(0, LeaderLatch::armed_watches);
        (armed, armed)
    }

    fn after(&mut self, _: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        if let Some(rival) = self.rival.take() {
            rival.close();
        }
        let latch = self.latch.as_ref().ok_or("no latch")?;
        latch
            .await_leadership(SETTLE)
            .map(drop)
            .map_err(|e| format!("the latch never leads: {e}"))
    }
}

// ------------------------------------------------------------------ double barrier

pub(super) enum BarrierCall {
    Enter,
    Leave,
}

struct BarrierSubject {
    barrier: DoubleBarrier,
    path: String,
    call: BarrierCall,
    timeout: Duration,
}

pub(super) fn barrier_subject(zk: &ZooKeeper, path: &str, call: BarrierCall, count: usize) -> Made {
    let barrier = DoubleBarrier::new(zk, path, count).map_err(err_text)?;
    if let BarrierCall::Leave = call {
        barrier.enter(OP_TIMEOUT).map_err(err_text)?;
    }
    Ok(Box::new(BarrierSubject {
        barrier,
        path: path.to_string(),
        call,
        timeout: if count > 1 { WAIT } else { OP_TIMEOUT },
    }))
}

impl Subject for BarrierSubject {
    fn call(&mut self) -> Call<'_> {
        let (barrier, timeout) = (&self.barrier, self.timeout);
        match self.call {
            BarrierCall::Enter => Box::pin(async move {
                barrier
                    .enter_async(timeout)
                    .await
                    .map(|()| String::new())
                    .map_err(err_text)
            }),
            BarrierCall::Leave => Box::pin(async move {
                barrier
                    .leave_async(timeout)
                    .await
                    .map(|()| String::new())
                    .map_err(err_text)
            }),
        }
    }

    fn ours(&self, ours: &[String]) -> Result<(), String> {
        // Only an entered participant (a completed enter, a dropped leave) has a node.
        let node = self.barrier.node();
        match (ours, &node) {
            ([], _) => Ok(()),
            ([one], Some(node)) if one == node => Ok(()),
            _ => Err(format!("participants {ours:?}, entered as {node:?}")),
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        if self.barrier.node().is_some() {
            // Entered still: leaving again finishes the round.
            self.barrier
                .leave(SETTLE)
                .map_err(|e| format!("leaving again fails: {e}"))?;
        }
        if self.barrier.count() == 1 {
            // A later round works: nothing stale blocks it or lets it pass early.
            let next = DoubleBarrier::new(admin, &self.path, 1).map_err(err_text)?;
            next.enter(SETTLE)
                .and_then(|()| next.leave(SETTLE))
                .map_err(|e| format!("the next round is stuck: {e}"))?;
        }
        match children(admin, &self.path).as_slice() {
            [] => Ok(()),
            left => Err(format!("left in the barrier after a full round: {left:?}")),
        }
    }
}

fn children(admin: &ZooKeeper, dir: &str) -> Vec<String> {
    let mut names = admin.get_children(dir).unwrap_or_default();
    names.sort();
    names
}
