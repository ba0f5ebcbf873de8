//! `zookeeper-bench`: paired Rust/C runs with CPU per op, scaling tables, and the same
//! scenarios through our Rust crates, the raw C client, zkpython (the C client's Python
//! bindings), kazoo and Curator, against servers the harness starts, printed as Markdown
//! tables with ratios. See `bench/README.md`.
//!
//! ```text
//! zookeeper-bench [run] [--quick] [--sections side,paired,scaling,cache] [--rounds R]
//!                 [--configs fsync-on,fsync-off,ensemble] [--perf-config fsync-off]
//!                 [--clients rust,c,zkpython,kazoo,curator] [--only sync,async,...]
//!                 [--pairs 7] [--ops get,...] [--tables watches,...] [--out FILE]
//! zookeeper-bench memcheck [--n 1000000] [--batch 1000] [--sample 100000] [--hosts H]
//! zookeeper-bench memcheck --per-watch 20000 [--batch 4000] [--hosts H]
//! zookeeper-bench compare [--hosts H] [--script FILE] [--inject-difference]
//! zookeeper-bench threads [--quick] [--hosts H] [--check]
//! zookeeper-bench before-after --old BIN [--pairs 6] [--peers c,...] [--only ROWS] [--hosts H]
//! zookeeper-bench serve [--fsync off|on]                    (a server for bench/profile)
//! zookeeper-bench client --hosts H --scenario S [...]      (the Rust client process)
//! ```

mod before_after;
mod cache_client;
mod cache_scale;
mod compare;
mod flags;
mod launchers;
mod memcheck;
mod paired;
mod proto;
mod recipes_bench;
mod report;
mod runner;
mod rust_client;
mod scale_client;
mod scaling;
mod serve;
mod threads;
mod usage;

use flags::Flags;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.first().map(String::as_str) {
        Some(
            c @ ("run" | "client" | "memcheck" | "compare" | "threads" | "before-after" | "serve"
            | "help"),
        ) => (c, &args[1..]),
        Some("--help" | "-h") => ("help", &args[1..]),
        _ => ("run", &args[..]),
    };
    let switches: &[&str] = match cmd {
        "run" => &["quick", "no-zkpython-build"],
        "compare" => &["inject-difference", "no-zkpython-build"],
        "threads" => &["quick", "check"],
        "before-after" => &["quick", "instructions"],
        _ => &[],
    };
    let flags = match Flags::parse(rest, switches) {
        Ok(f) => f,
        Err(e) => return usage_error(&e),
    };
    let outcome = match cmd {
        "run" => runner::main(&flags),
        "client" => rust_client::Params::from_flags(&flags)
            .map_err(Into::into)
            .and_then(|p| rust_client::run(&p)),
        "memcheck" => memcheck::main(&flags),
        "compare" => compare::main(&flags),
        "threads" => threads::main(&flags),
        "before-after" => before_after::main(&flags),
        "serve" => serve::main(&flags),
        _ => {
            print!("{}", USAGE);
            return ExitCode::SUCCESS;
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zookeeper-bench {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("zookeeper-bench: {msg}\n{USAGE}");
    ExitCode::from(2)
}

const USAGE: &str = "\
usage:
  zookeeper-bench [run] [--quick] [--sections side,paired,scaling,cache] [--rounds R]
                  [--timeout SECS] [--out FILE]
                  paired:  [--pairs 7] [--ops get,exists,set,create_delete,aget,acreate,get_hop]
                  scaling: [--tables watches,inflight,queue,lock,sessions]
                  both on one server: [--perf-config fsync-off|fsync-on]
                  cache:   [--cache-rounds 1]   (only with --sections ...,cache)
                  side:    [--configs fsync-on,fsync-off,ensemble] [--no-zkpython-build]
                           [--clients rust,c,zkpython,kazoo,curator]
                           [--only sync,async,watch,queue,lock,idgen]
      Starts the servers and prints Markdown tables: paired Rust/C runs (throughput and
      CPU-per-op ratios), scaling tables (cost against watches, requests in flight,
      queue length, lock waiters; memory per session), and every scenario through every
      client (ops/s median with min-max, ratios, peak RSS, watch notifications per op).
      --quick: CI size (one config, small counts). --sections cache (not a default):
      tree caches at scale (ours, Curator TreeCache and CuratorCache, kazoo) on a tree
      of 101,101 nodes: load time, memory, a burst of 10,000 changes.
  zookeeper-bench memcheck [--n 1000000] [--batch 1000] [--sample 100000] [--hosts H]
                  [--max-growth-mb 16]
      RSS of our client across N watch registrations + firings (fails if it grows).
  zookeeper-bench memcheck --per-watch 20000 [--batch 4000] [--hosts H]
      Heap per armed watch (distinct paths, extra watches on one path, after drop and
      close), our client next to the raw C client in one process.
  zookeeper-bench compare [--hosts H] [--script FILE] [--inject-difference]
      Runs the behaviour script (basic ops, error kinds, watches, the classic queue recipe)
      through zkpython and through our crates; fails on any difference.
  zookeeper-bench threads [--quick] [--hosts H] [--check]
      Threads, live contexts and background tasks of one session holding 1,000 pending
      async lock acquires, 1,000 pending async queue takes and 200 each of node caches,
      leader latches, persistent nodes and config watches (--quick: 100 and 20); then
      whether dropping them all gives everything back. --check: exit non-zero if a
      target fails.
  zookeeper-bench before-after --old BIN [--pairs 6] [--quick] [--hosts H] [--fsync off|on]
                  [--peers c,zkpython,kazoo,curator|none] [--only lock,latch,...]
                  [--instructions] [--old-label L] [--new-label L] [--command TEXT]
                  [--timeout SECS] [--out FILE]
      The recipe rows (queue put/take, lock, lock hand-off, leader latch hand-over, id
      generator, put cost) through an older build of this bench (BIN, its `client`) and
      this one, alternately, on one server: after/before ratios per row, CPU and context
      switches per op, and the peers' figures; --instructions: also instructions per op
      under callgrind (load-independent). bench/before-after.sh <commit> builds BIN.
  zookeeper-bench serve [--fsync off|on]
      Starts one standalone server, prints HOSTS <connect string>, stops it when stdin
      closes (bench/profile/profile.py uses it).
  zookeeper-bench client --hosts H --scenario S [--rounds R] [--n N] [--window W]
                  [--workers K] [--batch B] [--mode naive|batched] [--prefix P]
                  [--op get|exists|set|create_delete|aget|acreate|get_hop] [--reps R]
                  [--watches K] [--takes T] [--value V] [--bound SECS] [--expect NODES]
      S: sync async watch queue lock latch idgen op watchscale sessions queuescale queueput
         tree_cache tree_build tree_burst
      One Rust client process (the runner starts these).
";
