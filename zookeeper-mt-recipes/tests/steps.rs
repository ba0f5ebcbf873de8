//! Step enumeration: every request of a recipe operation, cut in turn.
//!
//! For each operation the driver first runs it once through a [`FaultProxy`] to count
//! the requests it sends (session upkeep left out). Then, for every index `k` of that
//! count and for two faults — the connection cut right after request `k` is forwarded
//! (the server applies it, the reply never arrives) and the reply of request `k`
//! dropped on a live connection — it runs the operation again on a fresh path and a
//! fresh session and checks the operation's documented guarantee from a second,
//! unproxied session. Each case prints its operation, `k` and fault; `ZK_STEPS_ONLY=<name>`
//! runs one operation.

use std::time::Duration;
use zk_harness::fault_proxy::Request;
use zk_harness::testing::{poll_until, unique_path};
use zk_harness::{FaultProxy, OpCode};
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::barriers::DoubleBarrier;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::semaphore::Semaphore;
use zookeeper_mt_recipes::locks::Lock;
use zookeeper_mt_recipes::locks::ReadWriteLock;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::WorkQueue;
use zookeeper_mt_recipes::shared::IdGenerator;

/// Short, so a dropped reply is noticed soon (the next ping's reply exposes it).
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// How long an operation under a fault may take: it rides out the reconnection.
const OP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the check waits for background cleanup to settle.
const SETTLE: Duration = Duration::from_secs(30);

fn connect(hosts: &str) -> ZooKeeper {
    let zk = ZooKeeper::connect(hosts, SESSION_TIMEOUT).expect("connect");
    zk.wait_connected(OP_TIMEOUT).expect("connected");
    zk
}

/// Requests an operation sends itself (not session upkeep).
fn counts(request: &Request) -> bool {
    ![
        OpCode::PING,
        OpCode::SET_WATCHES,
        OpCode::SET_WATCHES2,
        OpCode::AUTH,
        OpCode::CLOSE_SESSION,
    ]
    .contains(&request.op)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Cut,
    DropReply,
}

/// What an operation returned: its value, or the error's text.
type Outcome = Result<String, String>;

/// One recipe operation under test.
struct Case {
    name: &'static str,
    /// Prepares `path` (through the unproxied admin session).
    setup: fn(&ZooKeeper, &str),
    /// Runs the operation on the proxied session; `Ok(value)` or the error text.
    run: fn(&ZooKeeper, &str) -> Outcome,
    /// Checks the guarantee from the admin session after the proxied session closed.
    check: fn(&ZooKeeper, &str, &Outcome) -> Result<(), String>,
}

fn run_case(case: &Case, server: &str, admin: &ZooKeeper) {
    // Count the operation's requests once, without a fault.
    let path = unique_path(case.name);
    (case.setup)(admin, &path);
    let proxy = FaultProxy::start(server).unwrap();
    let zk = connect(&proxy.connect_string());
    let mark = proxy.mark();
    let outcome = (case.run)(&zk, &path);
    let n = proxy
        .requests_since(mark)
        .iter()
        .filter(|r| counts(r))
        .count() as u64;
    drop(zk);
    assert!(
        outcome.is_ok(),
        "{}: fails without a fault: {outcome:?}",
        case.name
    );
    (case.check)(admin, &path, &outcome).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    assert!(n > 0, "{}: sent no request", case.name);

    for fault in [Fault::Cut, Fault::DropReply] {
        for k in 1..=n {
            let path = unique_path(case.name);
            (case.setup)(admin, &path);
            let proxy = FaultProxy::start(server).unwrap();
            let zk = connect(&proxy.connect_string());
            match fault {
                Fault::Cut => proxy.cut_after_matching(k, counts),
                Fault::DropReply => proxy.drop_reply_matching(k, counts),
            }
            let outcome = (case.run)(&zk, &path);
            let fired = proxy.fired();
            zk.close().ok();
            println!(
                "{} k={k}/{n} {fault:?}: {} -> {outcome:?}",
                case.name,
                fired
                    .first()
                    .map_or("(not reached)".to_string(), |f| f.request.to_string()),
            );
            (case.check)(admin, &path, &outcome)
                .unwrap_or_else(|e| panic!("{} k={k}/{n} {fault:?}: {e}", case.name));
        }
    }
}

fn err_text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// Items in the queue at `path` whose data is `data`.
fn copies(admin: &ZooKeeper, path: &str, data: &[u8]) -> usize {
    let Ok(children) = admin.get_children(path) else {
        return 0;
    };
    children
        .iter()
        .filter(|c| c.starts_with("item-"))
        .filter(|c| {
            admin
                .get(&format!("{path}/{c}"))
                .is_ok_and(|(d, _)| d == data)
        })
        .count()
}

fn settles(what: &str, mut condition: impl FnMut() -> bool) -> Result<(), String> {
    if poll_until(SETTLE, &mut condition) {
        Ok(())
    } else {
        Err(format!("never settled: {what}"))
    }
}

/// Nothing of the operation is left in `path` once things settle (its session is
/// closed, so even an orphan ephemeral is gone).
fn settles_empty(admin: &ZooKeeper, path: &str) -> Result<(), String> {
    settles(&format!("{path} is empty"), || {
        admin.get_children(path).map_or(true, |c| c.is_empty())
    })
}

fn no_setup(_: &ZooKeeper, _: &str) {}

fn with_item(admin: &ZooKeeper, path: &str) {
    Queue::new(admin, path).unwrap().put(b"precious").unwrap();
}

fn with_work(admin: &ZooKeeper, path: &str) {
    WorkQueue::new(admin, path).unwrap().put(b"job").unwrap();
}

fn with_counter(admin: &ZooKeeper, path: &str) {
    IdGenerator::create_counter(admin, path, &Default::default()).unwrap();
    // Ids up to 5 were handed out before.
    admin.set(path, b"5", None).unwrap();
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "queue-put",
            setup: no_setup,
            run: |zk, path| {
                let queue = Queue::new(zk, path).map_err(err_text)?;
                queue.put(b"item").map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, outcome| {
                // Drain from a fresh session: a put in doubt whose session ended is
                // either delivered once or dropped as an orphan, never twice.
                let queue = Queue::new(admin, path).unwrap();
                let mut delivered = 0;
                while let Some(data) = queue.try_take().map_err(err_text)? {
                    delivered += usize::from(data == b"item");
                }
                match outcome {
                    Ok(_) if delivered != 1 => {
                        Err(format!("acknowledged put delivered {delivered} times"))
                    }
                    Err(_) if delivered > 1 => {
                        Err(format!("failed put delivered {delivered} times"))
                    }
                    _ => Ok(()),
                }
            },
        },
        Case {
            name: "queue-put-all",
            setup: no_setup,
            run: |zk, path| {
                let queue = Queue::new(zk, path).map_err(err_text)?;
                queue
                    .put_all(["b0", "b1", "b2"])
                    .map(|()| String::new())
                    .map_err(err_text)
            },
            check: |admin, path, outcome| {
                // All or nothing, never twice, and in order when acknowledged.
                let queue = Queue::new(admin, path).unwrap();
                let mut delivered = Vec::new();
                while let Some(data) = queue.try_take().map_err(err_text)? {
                    delivered.push(String::from_utf8_lossy(&data).into_owned());
                }
                match outcome {
                    Ok(_) if delivered != ["b0", "b1", "b2"] => {
                        Err(format!("acknowledged batch delivered as {delivered:?}"))
                    }
                    Err(_) if !delivered.is_empty() && delivered != ["b0", "b1", "b2"] => {
                        Err(format!("failed batch delivered as {delivered:?}"))
                    }
                    _ => Ok(()),
                }
            },
        },
        Case {
            name: "queue-take",
            setup: with_item,
            run: |zk, path| {
                let queue = Queue::new(zk, path).map_err(err_text)?;
                queue
                    .take(OP_TIMEOUT)
                    .map(|d| String::from_utf8_lossy(&d).into_owned())
                    .map_err(err_text)
            },
            check: |admin, path, outcome| {
                let left = copies(admin, path, b"precious");
                match outcome {
                    Ok(data) if data == "precious" && left == 0 => Ok(()),
                    Ok(data) => Err(format!("took {data:?}, {left} copies left")),
                    Err(_) if left == 1 => Ok(()),
                    Err(e) => Err(format!("take failed ({e}) and {left} copies left: lost")),
                }
            },
        },
        Case {
            name: "lock-acquire-release",
            setup: no_setup,
            run: |zk, path| {
                let lock = Lock::new(zk, path).map_err(err_text)?;
                let guard = lock.acquire(OP_TIMEOUT).map_err(err_text)?;
                let token = guard.fencing_token();
                guard.release().map_err(err_text)?;
                Ok(token.to_string())
            },
            check: |admin, path, _| {
                // Whatever happened, nothing of ours is left once things settle (the
                // session is closed, so even an orphan ephemeral is gone).
                settles_empty(admin, path)
            },
        },
        Case {
            name: "lock-exclusion",
            setup: no_setup,
            run: |zk, path| {
                let lock = Lock::new(zk, path).map_err(err_text)?;
                let guard = lock.acquire(OP_TIMEOUT).map_err(err_text)?;
                // While we hold it, nobody else can have it.
                let other = connect(&zk_harness::shared_test_connect_string());
                let rival = Lock::new(&other, path).map_err(err_text)?;
                let stolen = rival.try_acquire().map_err(err_text)?;
                if stolen.is_some() && !guard.is_lost() {
                    return Err("two holders".into());
                }
                Ok(String::new())
            },
            check: |_, _, outcome| match outcome {
                Err(e) if e == "two holders" => Err(e.clone()),
                _ => Ok(()),
            },
        },
        Case {
            name: "work-take-complete",
            setup: with_work,
            run: |zk, path| {
                let queue = WorkQueue::new(zk, path).map_err(err_text)?;
                let item = queue.take(OP_TIMEOUT).map_err(err_text)?;
                item.complete().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, outcome| {
                let queue = WorkQueue::new(admin, path).unwrap();
                match outcome {
                    Ok(_) => match queue.len().unwrap() {
                        0 => Ok(()),
                        n => Err(format!("completed, yet {n} items left")),
                    },
                    // Not completed: the item must still be there, and claimable once
                    // the failed consumer's session is gone.
                    Err(_) => {
                        let item = queue
                            .take(SETTLE)
                            .map_err(|e| format!("unfinished item lost: {e}"))?;
                        item.complete().map_err(err_text)
                    }
                }
            },
        },
        Case {
            name: "id-next",
            setup: with_counter,
            run: |zk, path| {
                let ids = IdGenerator::new(zk, path).map_err(err_text)?;
                let a = ids.next_id().map_err(err_text)?;
                let b = ids.next_id().map_err(err_text)?;
                if a <= 5 || b <= a {
                    return Err(format!("ids {a}, {b} after 5"));
                }
                Ok(b.to_string())
            },
            check: |admin, path, outcome| {
                if let Err(e) = outcome {
                    if e.starts_with("ids ") {
                        return Err(e.clone());
                    }
                }
                // The next id handed out anywhere is above every id we got.
                let ids = IdGenerator::new(admin, path).unwrap();
                let next = ids.next_id().map_err(err_text)?;
                match outcome {
                    Ok(last) if next <= last.parse::<u64>().unwrap() => {
                        Err(format!("id {next} handed out again (last {last})"))
                    }
                    _ => Ok(()),
                }
            },
        },
        Case {
            name: "semaphore-acquire",
            setup: no_setup,
            run: |zk, path| {
                let semaphore = Semaphore::new(zk, path, 1).map_err(err_text)?;
                let lease = semaphore.acquire(OP_TIMEOUT).map_err(err_text)?;
                drop(lease);
                Ok(String::new())
            },
            check: |admin, path, _| {
                // No leaked lease: a fresh participant gets the only permit.
                let semaphore = Semaphore::new(admin, path, 1).unwrap();
                semaphore
                    .acquire(SETTLE)
                    .map(drop)
                    .map_err(|e| format!("the only permit stayed taken: {e}"))
            },
        },
        Case {
            name: "election-join",
            setup: no_setup,
            run: |zk, path| {
                let election = LeaderElection::new(zk, path, b"me").map_err(err_text)?;
                election.wait_until_leader(OP_TIMEOUT).map_err(err_text)?;
                election.resign().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, _| {
                // Nothing left in line: the next candidate leads at once.
                let election = LeaderElection::new(admin, path, b"next").unwrap();
                let led = election.wait_until_leader(SETTLE);
                election.resign().ok();
                led.map_err(|e| format!("a stale candidate blocks the line: {e}"))
            },
        },
        Case {
            name: "queue-take-timeout",
            setup: with_item,
            run: |zk, path| {
                // A short deadline: a fault makes it pass while the take is in doubt.
                let queue = Queue::new(zk, path).map_err(err_text)?;
                queue
                    .take(Duration::from_millis(300))
                    .map(|d| String::from_utf8_lossy(&d).into_owned())
                    .map_err(err_text)
            },
            check: |admin, path, outcome| {
                let left = copies(admin, path, b"precious");
                match outcome {
                    Ok(data) if data == "precious" && left == 0 => Ok(()),
                    Ok(data) => Err(format!("took {data:?}, {left} copies left")),
                    Err(_) if left == 1 => Ok(()),
                    Err(e) => Err(format!("take failed ({e}) and {left} copies left")),
                }
            },
        },
        Case {
            name: "lock-acquire-timeout",
            setup: no_setup,
            run: |zk, path| {
                let lock = Lock::new(zk, path).map_err(err_text)?;
                let guard = lock.acquire(Duration::from_secs(2)).map_err(err_text)?;
                guard.release().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, _| {
                settles_empty(admin, path)?;
                let rival = Lock::new(admin, path).unwrap();
                match rival.try_acquire().map_err(err_text)? {
                    Some(guard) => guard.release().map_err(err_text),
                    None => Err("a rival cannot take the free lock".into()),
                }
            },
        },
        Case {
            name: "work-take-release",
            setup: with_work,
            run: |zk, path| {
                let queue = WorkQueue::new(zk, path).map_err(err_text)?;
                let item = queue.take(OP_TIMEOUT).map_err(err_text)?;
                item.release().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, _| {
                // Released or not, the item is there once and claimable once the
                // consumer's session is gone.
                let queue = WorkQueue::new(admin, path).unwrap();
                let item = queue
                    .take(SETTLE)
                    .map_err(|e| format!("released item not claimable: {e}"))?;
                item.complete().map_err(err_text)?;
                match queue.len().map_err(err_text)? {
                    0 => Ok(()),
                    n => Err(format!("{n} copies after completing the one item")),
                }
            },
        },
        Case {
            name: "id-reserve",
            setup: with_counter,
            run: |zk, path| {
                let ids = IdGenerator::new(zk, path).map_err(err_text)?;
                let range = ids.reserve(10, OP_TIMEOUT).map_err(err_text)?;
                if range.start <= 5 || range.end - range.start != 10 {
                    return Err(format!("ids {range:?} after 5"));
                }
                Ok(range.end.to_string())
            },
            check: |admin, path, outcome| {
                if let Err(e) = outcome {
                    if e.starts_with("ids ") {
                        return Err(e.clone());
                    }
                }
                let next = IdGenerator::new(admin, path)
                    .unwrap()
                    .next_id()
                    .map_err(err_text)?;
                match outcome {
                    Ok(end) if next < end.parse::<u64>().unwrap() => {
                        Err(format!("id {next} inside a reserved range (end {end})"))
                    }
                    _ => Ok(()),
                }
            },
        },
        Case {
            name: "rwlock-write",
            setup: no_setup,
            run: |zk, path| {
                let lock = ReadWriteLock::new(zk, path).map_err(err_text)?;
                let guard = lock.write(OP_TIMEOUT).map_err(err_text)?;
                guard.release().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, _| {
                settles_empty(admin, path)?;
                let rival = ReadWriteLock::new(admin, path).unwrap();
                match rival.try_write().map_err(err_text)? {
                    Some(guard) => guard.release().map_err(err_text),
                    None => Err("a writer cannot take the free lock".into()),
                }
            },
        },
        Case {
            name: "rwlock-read",
            setup: no_setup,
            run: |zk, path| {
                let lock = ReadWriteLock::new(zk, path).map_err(err_text)?;
                let guard = lock.read(OP_TIMEOUT).map_err(err_text)?;
                guard.release().map(|()| String::new()).map_err(err_text)
            },
            check: |admin, path, _| {
                settles_empty(admin, path)?;
                let rival = ReadWriteLock::new(admin, path).unwrap();
                match rival.try_write().map_err(err_text)? {
                    Some(guard) => guard.release().map_err(err_text),
                    None => Err("a stale reader blocks writers".into()),
                }
            },
        },
        Case {
            name: "double-barrier",
            setup: no_setup,
            run: |zk, path| {
                let barrier = DoubleBarrier::new(zk, path, 1).map_err(err_text)?;
                barrier.enter(OP_TIMEOUT).map_err(err_text)?;
                barrier
                    .leave(OP_TIMEOUT)
                    .map(|()| String::new())
                    .map_err(err_text)
            },
            check: |admin, path, _| {
                // A later round works: nothing stale blocks it or lets it pass early.
                let barrier = DoubleBarrier::new(admin, path, 1).unwrap();
                barrier
                    .enter(SETTLE)
                    .and_then(|()| barrier.leave(SETTLE))
                    .map_err(|e| format!("the next round is stuck: {e}"))
            },
        },
    ]
}

#[test]
fn every_request_of_every_operation_can_fail() {
    let server = zk_harness::shared_test_connect_string();
    let admin = connect(&server);
    let only = std::env::var("ZK_STEPS_ONLY").ok();
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|case| only.as_deref().is_none_or(|o| o == case.name))
        .collect();
    // Two cases at a time: each waits on the server most of the time.
    let (server, admin) = (&server, &admin);
    for pair in cases.chunks(2) {
        std::thread::scope(|scope| {
            for case in pair {
                scope.spawn(move || run_case(case, server, admin));
            }
        });
    }
}
