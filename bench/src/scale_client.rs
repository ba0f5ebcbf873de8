//! The Rust side of the paired runs and the scaling tables (the C side is the same
//! scenario in `c/zkbench.c`): one op kind timed alone (`op`), cost against armed watches
//! (`watchscale`) and memory per session (`sessions`).

use crate::proto;
use crate::rust_client::{
    connect, delete_tree, ensure_path, node_paths, pipelined, row, Params, Result, Row, DATA,
};
use crate::usage::Usage;
use std::collections::VecDeque;
use std::time::Instant;
use zookeeper_mt::{Acl, CreateMode, Stat, Watch, ZkFuture, ZooKeeper};

/// The op kinds of the paired runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Exists,
    Set,
    /// A create and a delete of the same node: one op.
    CreateDelete,
    /// Pipelined get, `--window` in flight.
    AGet,
    /// Pipelined create, `--window` in flight.
    ACreate,
    /// A sync get, paired with C's get through `zoo_aget` + a wait on a condition
    /// variable signalled from the completion thread: the binding's own design (one
    /// hand-off more than `zoo_get`) done in C. Rust runs a plain sync get.
    GetHop,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::Get,
        OpKind::Exists,
        OpKind::Set,
        OpKind::CreateDelete,
        OpKind::AGet,
        OpKind::ACreate,
        OpKind::GetHop,
    ];

    /// The `--op` name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Exists => "exists",
            OpKind::Set => "set",
            OpKind::CreateDelete => "create_delete",
            OpKind::AGet => "aget",
            OpKind::ACreate => "acreate",
            OpKind::GetHop => "get_hop",
        }
    }

    pub fn parse(s: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == s)
    }

    pub fn pipelined(self) -> bool {
        matches!(self, OpKind::AGet | OpKind::ACreate)
    }

    /// Whether the op needs its nodes to exist first.
    fn reads_existing(self) -> bool {
        !matches!(self, OpKind::CreateDelete | OpKind::ACreate)
    }
}

/// `paths.len()` ops of kind `k`: sync ones in turn, pipelined ones `window` in flight.
fn run_op(zk: &ZooKeeper, k: OpKind, paths: &[String], window: usize, acl: &[Acl]) -> Result<()> {
    run_op_as(zk, k, paths, window, acl, CreateMode::Persistent)
}

/// [`run_op`], the pipelined creates in `create` mode.
fn run_op_as(
    zk: &ZooKeeper,
    k: OpKind,
    paths: &[String],
    window: usize,
    acl: &[Acl],
    create: CreateMode,
) -> Result<()> {
    match k {
        OpKind::Get | OpKind::GetHop => {
            for path in paths {
                zk.get(path)?;
            }
        }
        OpKind::Exists => {
            for path in paths {
                if zk.exists(path)?.is_none() {
                    return Err(format!("{path} is missing").into());
                }
            }
        }
        OpKind::Set => {
            for path in paths {
                zk.set(path, DATA, None)?;
            }
        }
        OpKind::CreateDelete => {
            for path in paths {
                zk.create(
                    path,
                    DATA,
                    zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
                )?;
                zk.delete(path, None)?;
            }
        }
        OpKind::AGet => {
            pipelined(paths, window, |path| zk.get_async(path))?;
        }
        OpKind::ACreate => {
            pipelined(paths, window, |path| {
                zk.create_async(
                    path,
                    DATA,
                    zookeeper_mt::CreateOptions::new(create).with_acl(acl),
                )
            })?;
        }
    }
    Ok(())
}

fn create_all(zk: &ZooKeeper, paths: &[String], acl: &[Acl]) -> Result<()> {
    pipelined(paths, 1000, |path| {
        zk.create_async(
            path,
            DATA,
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(acl),
        )
    })?;
    Ok(())
}

fn delete_all(zk: &ZooKeeper, paths: &[String]) -> Result<()> {
    pipelined(paths, 1000, |path| zk.delete_async(path, None))?;
    Ok(())
}

/// One op kind, timed alone in its own process (the paired runs): the nodes it reads and
/// a warm-up on other nodes are untimed; the row carries the process's CPU time and
/// context switches over the timed phase. `--reps R` repeats the timed phase on the same
/// nodes (profilers subtract a 1-rep run from an R-rep run: the cost of the ops alone).
/// Pipelined creates under `--reps R > 1` are ephemeral sequential: the same paths serve
/// every repetition (the server numbers the nodes) and the nodes go with the session, so
/// no work in the process grows with R but the creates themselves.
pub fn op(p: &Params, base: &str) -> Result<Vec<Row>> {
    let k = OpKind::parse(&p.op).ok_or_else(|| format!("unknown --op {}", p.op))?;
    let repeated_creates = p.reps > 1 && k == OpKind::ACreate;
    let create = if repeated_creates {
        CreateMode::EphemeralSequential
    } else {
        CreateMode::Persistent
    };
    let zk = connect(&p.hosts)?;
    let acl = Acl::OPEN_UNSAFE;
    let wbase = format!("{base}/warm");
    ensure_path(&zk, &wbase)?;
    let warm = (p.n / 5).clamp(1, 1000);
    let paths = node_paths(base, p.n);
    let wpaths = node_paths(&wbase, warm);
    if k.reads_existing() {
        create_all(&zk, &paths, acl)?;
        create_all(&zk, &wpaths, acl)?;
    }
    run_op_as(&zk, k, &wpaths, p.window, acl, create)?;
    let u0 = Usage::now();
    let t = Instant::now();
    for _ in 0..p.reps {
        run_op_as(&zk, k, &paths, p.window, acl, create)?;
    }
    let secs = t.elapsed().as_secs_f64();
    let mut r = row(format!("op_{}", k.name()), p.n * p.reps, secs, 0);
    r.4 = u0.fields_since();
    if repeated_creates {
        // The ephemerals end with the session; what is left is `base` and its `warm`.
        zk.close()?;
        let zk = connect(&p.hosts)?;
        delete_tree(&zk, base)?;
        zk.close()?;
        return Ok(vec![r]);
    }
    if k != OpKind::CreateDelete {
        delete_all(&zk, &paths)?;
        delete_all(&zk, &wpaths)?;
    }
    delete_tree(&zk, base)?;
    zk.close()?;
    Ok(vec![r])
}

/// Arms `--watches` exists-watches on absent nodes (they never fire), then times sync
/// gets and pipelined gets (`--window` in flight) on other nodes.
pub fn watch_scale(p: &Params, base: &str) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    ensure_path(&zk, base)?;
    let acl = Acl::OPEN_UNSAFE;
    let paths = node_paths(base, p.n);
    create_all(&zk, &paths, acl)?;
    let absent = node_paths(&format!("{base}/absent"), p.watches);
    let mut watches: Vec<Watch> = Vec::with_capacity(p.watches);
    let mut in_flight: VecDeque<ZkFuture<(Option<Stat>, Watch)>> = VecDeque::with_capacity(1000);
    for path in &absent {
        if in_flight.len() >= 1000 {
            let f = in_flight.pop_front().expect("not empty");
            watches.push(f.wait()?.1);
        }
        in_flight.push_back(zk.exists_watch_async(path));
    }
    for f in in_flight {
        watches.push(f.wait()?.1);
    }
    run_op(&zk, OpKind::Get, &paths[..p.n.min(500)], 1, acl)?; // warm-up
    let mut rows = Vec::new();
    for (metric, k) in [("ws_get", OpKind::Get), ("ws_aget", OpKind::AGet)] {
        let u0 = Usage::now();
        let t = Instant::now();
        run_op(&zk, k, &paths, p.window, acl)?;
        let mut r = row(metric, p.n, t.elapsed().as_secs_f64(), 0);
        r.4 = u0.fields_since();
        rows.push(r);
    }
    if let Some(last) = rows.last_mut() {
        last.4.insert("rss_kb".into(), proto::rss_kb().to_string());
        last.4.insert("live".into(), zk.live_contexts().to_string());
    }
    delete_all(&zk, &paths)?;
    delete_tree(&zk, base)?;
    zk.close()?;
    drop(watches); // disconnected by close
    Ok(rows)
}

/// Opens `--n` sessions (each connected and having answered one `exists`), reports RSS
/// before and after, then closes them.
pub fn sessions(p: &Params) -> Result<Vec<Row>> {
    let rss0 = proto::rss_kb();
    let t = Instant::now();
    let mut handles = Vec::with_capacity(p.n);
    for _ in 0..p.n {
        let zk = connect(&p.hosts)?;
        zk.exists("/")?;
        handles.push(zk);
    }
    let secs = t.elapsed().as_secs_f64();
    let mut r = row("sessions", p.n, secs, 0);
    r.4.insert("rss0_kb".into(), rss0.to_string());
    r.4.insert("rss_kb".into(), proto::rss_kb().to_string());
    r.4.insert("threads".into(), proto::threads().to_string());
    for zk in handles {
        zk.close()?;
    }
    Ok(vec![r])
}
