//! The recipe scenarios through `recipes` (seed 000's queue, the lock): the Rust column.

use crate::rust_client::{connect, delete_tree, ensure_path, row, Params, Result, Row};
use recipes::lock::Lock;
use recipes::queue::Queue;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Instant;

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
    let t = Instant::now();
    for i in 0..p.n {
        producer.put(format!("item-{i}").as_bytes())?;
    }
    let mut rows = vec![row("queue_put", p.n, t.elapsed().as_secs_f64(), 0)];
    let taken = AtomicUsize::new(0);
    let got = std::sync::Mutex::new(Vec::with_capacity(p.n));
    let t = Instant::now();
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = consumers
            .iter()
            .map(|q| {
                let (taken, got, producer) = (&taken, &got, &producer);
                s.spawn(move || -> Result<()> {
                    loop {
                        let item = q.take()?;
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
    rows.push(row(format!("queue_take_c{}", p.workers), p.n, secs, notif));
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
    let t = Instant::now();
    thread::scope(|s| -> Result<()> {
        let joins: Vec<_> = locks
            .iter()
            .map(|lock| {
                let (holders, overlap) = (&holders, &overlap);
                s.spawn(move || -> Result<()> {
                    for _ in 0..per {
                        let guard = lock.acquire()?;
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
    Ok(vec![row(
        format!("lock_c{}", p.workers),
        per * p.workers,
        secs,
        notif,
    )])
}
