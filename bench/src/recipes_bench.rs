//! The recipe scenarios through `recipes` (the classic queue recipe, the lock, the leader
//! latch's hand-over): the Rust column, and the queue's scaling and put-cost measurements.
//! The queue, lock and latch rows carry the process's CPU time and context switches over
//! the timed phase (`cpu_us`, `sys_us`, `csw`), for `before-after`.

use crate::rust_client::{
    connect, delete_tree, ensure_path, pipelined, row, Params, Result, Row, DATA,
};
use crate::usage::Usage;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Instant;
use zookeeper_mt::Timeout;
use zookeeper_mt::{Acl, CreateMode};
use zookeeper_mt_recipes::leadership::LeaderLatch;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::queues::Queue;

const STOP: &[u8] = b"STOP";

/// Put `n` items, then take them with `workers` consumers (each its own session and
/// `Queue` value, blocking `take`); when the last item is taken, one STOP per consumer
/// ends them. Notifications = child-watch wake-ups the consumers' queues received.
pub fn queue(p: &Params, base: &str) -> Result<Vec<Row>> {
    let producer_zk = connect(&p.hosts)?;
    let qpath = format!("{base}/q");
    let producer = Queue::new(&producer_zk, &qpath)?;
    let consumer_zks = (0..p.workers)
        .map(|_| connect(&p.hosts))
        .collect::<Result<Vec<_>>>()?;
    let consumers = consumer_zks
        .iter()
        .map(|zk| Queue::new(zk, &qpath))
        .collect::<Result<Vec<_>, _>>()?;
    let u0 = Usage::now();
    let t = Instant::now();
    for i in 0..p.n {
        producer.put(format!("item-{i}").as_bytes())?;
    }
    let mut put = row("queue_put", p.n, t.elapsed().as_secs_f64(), 0);
    put.4 = u0.fields_since();
    let mut rows = vec![put];
    let taken = AtomicUsize::new(0);
    let got = std::sync::Mutex::new(Vec::with_capacity(p.n));
    let u0 = Usage::now();
    let t = Instant::now();
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = consumers
            .iter()
            .map(|q| {
                let (taken, got, producer) = (&taken, &got, &producer);
                s.spawn(move || -> Result<()> {
                    loop {
                        let item = q.take(Timeout::Never)?;
                        if item == STOP {
                            return Ok(());
                        }
                        got.lock().expect("not poisoned").push(item);
                        if taken.fetch_add(1, Ordering::SeqCst) + 1 == p.n {
                            for _ in 0..p.workers {
                                producer.put(STOP)?;
                            }
                        }
                    }
                })
            })
            .collect();
        for j in joins {
            j.join().map_err(|_| "consumer panicked")??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let usage = u0.fields_since();
    let mut got = got.into_inner().expect("not poisoned");
    got.sort();
    got.dedup();
    if got.len() != p.n {
        return Err(format!(
            "queue lost or duplicated items: {} distinct of {}",
            got.len(),
            p.n
        )
        .into());
    }
    let notif: u64 = consumers.iter().map(Queue::wakeups).sum();
    let mut take = row(format!("queue_take_c{}", p.workers), p.n, secs, notif);
    take.4 = usage;
    rows.push(take);
    drop(consumers);
    for zk in consumer_zks {
        zk.close()?;
    }
    drop(producer);
    delete_tree(&producer_zk, base)?;
    producer_zk.close()?;
    Ok(rows)
}

/// Lock handoff: `workers` contenders (own sessions, own `Lock` values) each acquire and
/// release `n / workers` times. Notifications = predecessor-watch wake-ups
/// (`Lock::wakeups`): one per handoff when only the successor is woken.
pub fn lock(p: &Params, base: &str) -> Result<Vec<Row>> {
    let setup = connect(&p.hosts)?;
    let lpath = format!("{base}/lock");
    ensure_path(&setup, &lpath)?;
    let per = p.n / p.workers;
    let handles = (0..p.workers)
        .map(|_| connect(&p.hosts))
        .collect::<Result<Vec<_>>>()?;
    let locks = handles
        .iter()
        .map(|zk| Lock::new(zk, &lpath))
        .collect::<Result<Vec<_>, _>>()?;
    let holders = AtomicUsize::new(0);
    let overlap = AtomicUsize::new(0);
    let u0 = Usage::now();
    let t = Instant::now();
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = locks
            .iter()
            .map(|lock| {
                let (holders, overlap) = (&holders, &overlap);
                s.spawn(move || -> Result<()> {
                    for _ in 0..per {
                        let guard = lock.acquire(Timeout::Never)?;
                        if holders.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlap.fetch_add(1, Ordering::SeqCst);
                        }
                        holders.fetch_sub(1, Ordering::SeqCst);
                        guard.release()?;
                    }
                    Ok(())
                })
            })
            .collect();
        for j in joins {
            j.join().map_err(|_| "contender panicked")??;
        }
        Ok(())
    })?;
    let secs = t.elapsed().as_secs_f64();
    let usage = u0.fields_since();
    if overlap.load(Ordering::SeqCst) != 0 {
        return Err("two lock holders at once".into());
    }
    let notif: u64 = locks.iter().map(Lock::wakeups).sum();
    drop(locks);
    for zk in handles {
        zk.close()?;
    }
    delete_tree(&setup, base)?;
    setup.close()?;
    let mut r = row(format!("lock_c{}", p.workers), per * p.workers, secs, notif);
    r.4 = usage;
    Ok(vec![r])
}

/// Leader latch hand-over: `workers` participants (own sessions, own `LeaderLatch`
/// values, ids `p0`, `p1`, ...) on one election; each, on its own thread, waits for
/// leadership and relinquishes the term at once (a relinquishing latch joins again at the
/// back). Timed: `n` hand-overs, from the first term's start to the start of term `n`;
/// one hand-over = the relinquish (the old node's delete, a new node's create), the next
/// in line's watch firing, its latch seeing it lead and its waiting caller woken. Which
/// latch leads next is the server's order (two re-joins may race), so no participant
/// counts its own terms: a participant that gets a term past `n` leaves the election
/// (`close`) and its thread ends, and so every one does. Notifications = the latches'
/// predecessor-watch wake-ups. Only the latch's long-standing calls (`builder`, `build`,
/// `await_leadership`, `relinquish`, `close`, `wakeups`), so `before-after` runs this
/// same code against older trees (those with the current crate and module names).
pub fn latch(p: &Params, base: &str) -> Result<Vec<Row>> {
    let setup = connect(&p.hosts)?;
    let dir = format!("{base}/latch");
    ensure_path(&setup, &dir)?;
    let handles = (0..p.workers.max(2))
        .map(|_| connect(&p.hosts))
        .collect::<Result<Vec<_>>>()?;
    let latches = handles
        .iter()
        .enumerate()
        .map(|(i, zk)| LeaderLatch::builder(&dir).id(format!("p{i}")).build(zk))
        .collect::<Result<Vec<_>, _>>()?;
    let terms = AtomicUsize::new(0);
    let leaders = AtomicUsize::new(0);
    let overlap = AtomicUsize::new(0);
    let wakeups = AtomicUsize::new(0);
    let marks = std::sync::Mutex::new([None; 2]);
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = latches
            .into_iter()
            .map(|latch| {
                let (terms, leaders, overlap, wakeups, marks) =
                    (&terms, &leaders, &overlap, &wakeups, &marks);
                s.spawn(move || -> Result<()> {
                    let mut last = None;
                    loop {
                        let term = latch.await_leadership(Timeout::Never)?;
                        let k = terms.fetch_add(1, Ordering::SeqCst);
                        if k == 0 || k == p.n {
                            let now = (Instant::now(), Usage::now());
                            marks.lock().expect("not poisoned")[usize::from(k != 0)] = Some(now);
                        }
                        if last.is_some_and(|last| term.term() <= last) {
                            return Err("a relinquished term was handed out again".into());
                        }
                        last = Some(term.term());
                        if leaders.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlap.fetch_add(1, Ordering::SeqCst);
                        }
                        leaders.fetch_sub(1, Ordering::SeqCst);
                        if k >= p.n {
                            wakeups.fetch_add(latch.wakeups() as usize, Ordering::SeqCst);
                            latch.close();
                            return Ok(());
                        }
                        if !term.relinquish()? {
                            return Err("a term ended before it was relinquished".into());
                        }
                    }
                })
            })
            .collect();
        for j in joins {
            j.join().map_err(|_| "participant panicked")??;
        }
        Ok(())
    })?;
    if overlap.load(Ordering::SeqCst) != 0 {
        return Err("two leaders at once".into());
    }
    let [Some((t0, u0)), Some((t1, u1))] = *marks.lock().expect("not poisoned") else {
        return Err("fewer terms than hand-overs asked for".into());
    };
    for zk in handles {
        zk.close()?;
    }
    delete_tree(&setup, base)?;
    setup.close()?;
    // Wake-ups are counted to the end (a few past term `n`): per hand-over they read
    // slightly high, alike for every version.
    let notif = wakeups.load(Ordering::SeqCst) as u64;
    let mut r = row(
        format!("latch_w{}", p.workers),
        p.n,
        (t1 - t0).as_secs_f64(),
        notif,
    );
    let (cpu, sys) = (u1.cpu_us - u0.cpu_us, u1.sys_us - u0.sys_us);
    r.4 = std::collections::BTreeMap::from([
        ("cpu_us".to_string(), format!("{cpu:.0}")),
        ("user_us".to_string(), format!("{:.0}", cpu - sys)),
        ("sys_us".to_string(), format!("{sys:.0}")),
        ("csw".to_string(), (u1.csw - u0.csw).to_string()),
    ]);
    Ok(vec![r])
}

/// Take cost against queue length: fills the queue with `--n` items (pipelined raw
/// creates named the way `Queue::put` names them, `item-<guid>-<seq>`: a put per item would
/// take minutes at 100,000), then with a fresh `Queue` value times the first take (it lists
/// the whole queue) and the next `--takes` (served from that listing).
pub fn queue_scale(p: &Params, base: &str) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    let qpath = format!("{base}/q");
    let len = Queue::new(&zk, &qpath)?;
    // `Queue` creates its node on first use; the raw creates below need it now.
    zookeeper_mt_recipes::nodes::ensure_path(&zk, &qpath)?;
    let prefix = format!("{qpath}/item-{}-", zookeeper_mt_recipes::nodes::guid());
    let acl = Acl::OPEN_UNSAFE;
    let names = vec![prefix; p.n];
    pipelined(&names, 1000, |path| {
        zk.create_async(
            path,
            DATA,
            zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential).with_acl(acl),
        )
    })?;
    let listed = len.len()?;
    if listed != p.n {
        return Err(format!("queue holds {listed} items, expected {}", p.n).into());
    }
    drop(len);
    let queue = Queue::new(&zk, &qpath)?;
    let u0 = Usage::now();
    let t = Instant::now();
    queue.take(Timeout::Never)?;
    let mut first = row("qs_first_take", 1, t.elapsed().as_secs_f64(), 0);
    first.4 = u0.fields_since();
    let takes = p.takes.min(p.n - 1);
    let u0 = Usage::now();
    let t = Instant::now();
    for _ in 0..takes {
        queue.take(Timeout::Never)?;
    }
    let mut rest = row("qs_take", takes, t.elapsed().as_secs_f64(), 0);
    rest.4 = u0.fields_since();
    drop(queue);
    let left: Vec<String> = zk
        .get_children(&qpath)?
        .into_iter()
        .filter(|name| name.starts_with("item"))
        .map(|name| format!("{qpath}/{name}"))
        .collect();
    pipelined(&left, 1000, |path| zk.delete_async(path, None))?;
    delete_tree(&zk, base)?;
    zk.close()?;
    let mut rows = vec![first];
    if takes > 0 {
        rows.push(rest);
    }
    Ok(rows)
}

/// `Queue::put` (exactly-once: a multi of item + receipt, then the receipt's delete)
/// against one raw sequential create and against `Queue::put_all` of 50 items (one
/// batch per chunk), `--n` items each, alternating in chunks of 50 so load drift hits
/// all alike.
pub fn queue_put_cost(p: &Params, base: &str) -> Result<Vec<Row>> {
    let zk = connect(&p.hosts)?;
    let qpath = format!("{base}/q");
    let queue = Queue::new(&zk, &qpath)?;
    let raw_dir = format!("{base}/raw");
    ensure_path(&zk, &raw_dir)?;
    let raw_prefix = format!("{raw_dir}/item-");
    let acl = Acl::OPEN_UNSAFE;
    let (mut put_secs, mut raw_secs, mut batch_secs) = (0.0, 0.0, 0.0);
    let (mut put_cpu, mut raw_cpu, mut batch_cpu) = (0.0, 0.0, 0.0);
    let mut done = 0;
    while done < p.n {
        let chunk = 50.min(p.n - done);
        let u0 = Usage::now();
        let t = Instant::now();
        for _ in 0..chunk {
            queue.put(DATA)?;
        }
        put_secs += t.elapsed().as_secs_f64();
        put_cpu += Usage::now().cpu_us - u0.cpu_us;
        let u0 = Usage::now();
        let t = Instant::now();
        for _ in 0..chunk {
            zk.create(
                &raw_prefix,
                DATA,
                zookeeper_mt::CreateOptions::new(CreateMode::PersistentSequential).with_acl(acl),
            )?;
        }
        raw_secs += t.elapsed().as_secs_f64();
        raw_cpu += Usage::now().cpu_us - u0.cpu_us;
        let u0 = Usage::now();
        let t = Instant::now();
        queue.put_all(vec![DATA; chunk])?;
        batch_secs += t.elapsed().as_secs_f64();
        batch_cpu += Usage::now().cpu_us - u0.cpu_us;
        done += chunk;
    }
    let mut put = row("qp_put", p.n, put_secs, 0);
    put.4.insert("cpu_us".into(), format!("{put_cpu:.0}"));
    let mut raw = row("qp_raw_create", p.n, raw_secs, 0);
    raw.4.insert("cpu_us".into(), format!("{raw_cpu:.0}"));
    let mut batch = row("qp_put_all", p.n, batch_secs, 0);
    batch.4.insert("cpu_us".into(), format!("{batch_cpu:.0}"));
    drop(queue);
    for dir in [qpath, raw_dir] {
        let items: Vec<String> = zk
            .get_children(&dir)?
            .into_iter()
            .filter(|name| name.starts_with("item"))
            .map(|name| format!("{dir}/{name}"))
            .collect();
        pipelined(&items, 1000, |path| zk.delete_async(path, None))?;
    }
    delete_tree(&zk, base)?;
    zk.close()?;
    Ok(vec![put, raw, batch])
}
