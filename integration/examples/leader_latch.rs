//! One leader among Rust services and a Java service: three Rust `LeaderLatch`es (each
//! with a session that is renewed after expiry) and, if installed, a Curator
//! `LeaderLatch` process take part in one election in Curator's node layout. Each Rust
//! service leads for a moment with `run_while_leader` and hands over; one leader's node
//! is deleted behind its back and its guard reports the loss; one service's session
//! expires while it leads, its guard reports that too, and it wins a new term (with a
//! larger fencing token) in its new session without ever resuming the old one.
//!
//! `cargo run --example leader_latch` (uses `ZK_HOSTS` if set, else starts a server).
//! The Curator process needs `./setup.sh` (libcurator-recipes-java, default-jdk-headless);
//! without it the Rust services run alone.

use std::time::Duration;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::leadership::{LatchLayout, LeaderLatch, LeadershipEvent};
use zookeeper_mt_recipes::lifecycle::ManagedZooKeeper;
use zookeeper_testing::peers::{monotonic_ns, Participant, Peer};
use zookeeper_testing::{Hosts, HOSTS_ENV};

const WAIT: Duration = Duration::from_secs(60);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = Hosts::from_env_or_start(HOSTS_ENV)?;
    let connect = hosts.connect_string();
    let path = format!("/examples/leader-{}", zookeeper_mt_recipes::nodes::guid());
    let admin = ZooKeeper::connect(&connect, Duration::from_secs(10))?;
    println!("election {path} on {connect}");

    let clients: Vec<ManagedZooKeeper> = (0..3)
        .map(|_| ManagedZooKeeper::connect(&connect, Duration::from_secs(6)))
        .collect::<Result<_, _>>()?;
    let latches: Vec<LeaderLatch> = clients
        .iter()
        .enumerate()
        .map(|(i, client)| {
            LeaderLatch::builder(&path)
                .id(format!("rust-{i}"))
                .layout(LatchLayout::CuratorLeaderLatch)
                .build(client)
        })
        .collect::<Result<_, _>>()?;

    // 1. Every service leads once, in turn: each waits for its term, works, hands over.
    std::thread::scope(|scope| -> Result<(), Box<dyn std::error::Error>> {
        let turns: Vec<_> = latches
            .iter()
            .map(|latch| {
                scope.spawn(move || {
                    latch.run_while_leader(WAIT, |guard| {
                        println!(
                            "  {} leads (term {}, fencing token {})",
                            latch.id(),
                            guard.term(),
                            guard.token()
                        );
                    })
                })
            })
            .collect();
        for turn in turns {
            turn.join().map_err(|_| "a service panicked")??;
        }
        Ok(())
    })?;

    // 2. A Java service joins the same election (Curator's LeaderLatch) and leads once.
    match Peer::builder(Participant::CuratorLeaderLatch, &connect, &path)
        .id("curator")
        .start()
    {
        Ok(mut curator) => {
            // The Rust leaders hand over until the Curator process's turn comes.
            curator.send_acquire()?;
            while !curator.answered_within(Duration::from_millis(100))? {
                for latch in &latches {
                    if let Some(guard) = latch.leadership() {
                        guard.relinquish()?;
                    }
                }
            }
            let enter = curator.finish_acquire(WAIT)?;
            let leader = latches[0].participants()?.first().map(|p| p.id.clone());
            println!(
                "  the Curator process leads; the first participant is {leader:?}; \
                 Rust leaders meanwhile: {}",
                latches.iter().filter(|l| l.has_leadership()).count()
            );
            let exit = curator.release(WAIT)?;
            println!("  it handed over after {} µs", (exit - enter) / 1000);
            curator.quit(WAIT)?;
        }
        Err(error) => println!("  (skipping the Curator process: {error})"),
    }

    // 3. Someone deletes the leader's node: its guard reports the loss at once.
    let (leader, guard) = wait_for_leader(&latches)?;
    let lost = guard.lost();
    admin.delete(guard.node(), None)?;
    println!(
        "  deleted {}'s node: {}",
        latches[leader].id(),
        lost.wait(WAIT)?.ok_or("the term ended without a loss")?
    );

    // 4. The leader's session expires: the guard reports it; the latch joins again in
    //    its new session and later leads a new term, never the old one.
    let (leader, guard) = wait_for_leader(&latches)?;
    let events = latches[leader].events().clone();
    while events.try_recv().is_ok() {}
    let old = clients[leader].current();
    let thief = ZooKeeper::builder(&connect)
        .session(old.client_id()?)
        .connect()?;
    thief.close()?; // the server ends the session (as ZooKeeper's own tests expire one)
                    // With the default zero grace the first news is the dropped connection (the server
                    // moved the session to the other handle); the expiry itself comes right after.
    let reason = guard
        .lost()
        .wait(WAIT)?
        .ok_or("the term ended without a loss")?;
    println!(
        "  {}'s session ended while leading term {} (token {}): {reason}",
        latches[leader].id(),
        guard.term(),
        guard.token(),
    );
    // Let the others hand over until it leads again.
    let started = monotonic_ns();
    loop {
        for (i, latch) in latches.iter().enumerate() {
            if i != leader {
                if let Some(other) = latch.leadership() {
                    other.relinquish()?;
                }
            }
        }
        if let Ok(LeadershipEvent::BecameLeader {
            term,
            token,
            generation,
        }) = events.recv_timeout(Duration::from_millis(200))
        {
            println!(
                "  {} leads again: term {term}, token {token} > {}, session generation \
                 {generation}; the old guard is still lost: {}",
                latches[leader].id(),
                guard.token(),
                guard.is_lost()
            );
            break;
        }
        if monotonic_ns() - started > WAIT.as_nanos() as u64 {
            return Err("the latch never led again".into());
        }
    }

    for latch in latches {
        latch.close();
    }
    println!(
        "closed; nodes left in the election: {}",
        admin.get_children(&path)?.len()
    );
    Ok(())
}

/// The index and guard of the current leader among `latches`.
fn wait_for_leader(
    latches: &[LeaderLatch],
) -> Result<(usize, zookeeper_mt_recipes::leadership::LeadershipGuard), Box<dyn std::error::Error>>
{
    let started = monotonic_ns();
    loop {
        for (i, latch) in latches.iter().enumerate() {
            if let Ok(guard) = latch.await_leadership(Duration::from_millis(50)) {
                return Ok((i, guard));
            }
        }
        if monotonic_ns() - started > WAIT.as_nanos() as u64 {
            return Err("no leader".into());
        }
    }
}
