//! The operations under test.

use super::*;

/// The operations, the longest first (they run a few at a time).
pub(super) fn ops() -> Vec<Op> {
    vec![
        Op {
            name: "work-take-wait",
            make: |a, zk, p| work_subject(a, zk, p, WorkCall::Take(WAIT), false),
        },
        Op {
            name: "queue-put-all",
            make: |a, zk, p| queue_subject(a, zk, p, QueueCall::PutAll, None),
        },
        Op {
            name: "work-take",
            make: |a, zk, p| work_subject(a, zk, p, WorkCall::Take(OP_TIMEOUT), true),
        },
        Op {
            name: "latch-await",
            make: |a, zk, p| latch_subject(a, zk, p, false),
        },
        Op {
            name: "latch-await-held",
            make: |a, zk, p| latch_subject(a, zk, p, true),
        },
        Op {
            name: "queue-put",
            make: |a, zk, p| queue_subject(a, zk, p, QueueCall::Put, None),
        },
        Op {
            name: "queue-take",
            make: |a, zk, p| queue_subject(a, zk, p, QueueCall::Take(OP_TIMEOUT), Some("precious")),
        },
        Op {
            name: "queue-take-timeout",
            make: |a, zk, p| {
                let short = Duration::from_millis(300);
                queue_subject(a, zk, p, QueueCall::Take(short), Some("precious"))
            },
        },
        Op {
            name: "queue-take-wait",
            make: |a, zk, p| queue_subject(a, zk, p, QueueCall::Take(WAIT), None),
        },
        Op {
            name: "lock-acquire",
            make: |a, zk, p| lock_subject(a, zk, p, LockCall::Acquire(OP_TIMEOUT), false),
        },
        Op {
            name: "lock-acquire-held",
            make: |a, zk, p| lock_subject(a, zk, p, LockCall::Acquire(WAIT), true),
        },
        Op {
            name: "lock-release",
            make: |a, zk, p| lock_subject(a, zk, p, LockCall::Release, false),
        },
        Op {
            name: "work-complete",
            make: |a, zk, p| work_subject(a, zk, p, WorkCall::Complete, true),
        },
        Op {
            name: "work-release",
            make: |a, zk, p| work_subject(a, zk, p, WorkCall::Release, true),
        },
        Op {
            name: "id-next",
            make: |a, zk, p| id_subject(a, zk, p, IdCall::Next),
        },
        Op {
            name: "id-reserve",
            make: |a, zk, p| id_subject(a, zk, p, IdCall::Reserve),
        },
        Op {
            name: "semaphore-acquire",
            make: |a, zk, p| semaphore_subject(a, zk, p, false),
        },
        Op {
            name: "semaphore-acquire-held",
            make: |a, zk, p| semaphore_subject(a, zk, p, true),
        },
        Op {
            name: "lease-acquire",
            make: |a, zk, p| lease_subject(a, zk, p, false, false),
        },
        Op {
            name: "lease-acquire-held",
            make: |a, zk, p| lease_subject(a, zk, p, true, false),
        },
        Op {
            name: "lease-release",
            make: |a, zk, p| lease_subject(a, zk, p, false, true),
        },
        Op {
            name: "election-resign",
            make: |a, zk, p| election_subject(a, zk, p, ElectionCall::Resign),
        },
        Op {
            name: "work-put",
            make: |a, zk, p| work_subject(a, zk, p, WorkCall::Put, false),
        },
        Op {
            name: "counter-add",
            make: counter_subject,
        },
        Op {
            name: "election-join",
            make: |a, zk, p| election_subject(a, zk, p, ElectionCall::Join),
        },
        Op {
            name: "election-wait-held",
            make: |a, zk, p| election_subject(a, zk, p, ElectionCall::Wait),
        },
        Op {
            name: "rwlock-read",
            make: |a, zk, p| rw_subject(a, zk, p, RwCall::Read, false),
        },
        Op {
            name: "rwlock-write",
            make: |a, zk, p| rw_subject(a, zk, p, RwCall::Write, false),
        },
        Op {
            name: "rwlock-write-held",
            make: |a, zk, p| rw_subject(a, zk, p, RwCall::Write, true),
        },
        Op {
            name: "barrier-enter",
            make: |_, zk, p| barrier_subject(zk, p, BarrierCall::Enter, 1),
        },
        Op {
            name: "barrier-enter-wait",
            make: |_, zk, p| barrier_subject(zk, p, BarrierCall::Enter, 2),
        },
        Op {
            name: "barrier-leave",
            make: |_, zk, p| barrier_subject(zk, p, BarrierCall::Leave, 1),
        },
    ]
}
