//! Locks, read-write locks, semaphores and lease semaphores: nothing of a dropped
//! request blocks anyone.

use super::*;
use zookeeper_mt_recipes::locks::lease_semaphore::{LeaseGuard, LeaseSemaphore, SemaphoreLayout};
use zookeeper_mt_recipes::locks::semaphore::{self, Semaphore};
use zookeeper_mt_recipes::locks::{Lock, LockGuard};
use zookeeper_mt_recipes::locks::{ReadGuard, ReadWriteLock};

// ------------------------------------------------------------------ locks

pub(super) enum LockCall {
    Acquire(Duration),
    Release,
}

struct LockSubject {
    lock: Lock,
    guard: Option<LockGuard>,
    rival: Option<LockGuard>,
    call: LockCall,
}

pub(super) fn lock_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    call: LockCall,
    held: bool,
) -> Made {
    let rival = match held {
        true => Some(
            Lock::new(admin, path)
                .and_then(|l| l.acquire(OP_TIMEOUT))
                .map_err(err_text)?,
        ),
        false => None,
    };
    let lock = Lock::new(zk, path).map_err(err_text)?;
    let guard = match call {
        LockCall::Release => Some(lock.acquire(OP_TIMEOUT).map_err(err_text)?),
        LockCall::Acquire(_) => None,
    };
    Ok(Box::new(LockSubject {
        lock,
        guard,
        rival,
        call,
    }))
}

impl Subject for LockSubject {
    fn call(&mut self) -> Call<'_> {
        match self.call {
            LockCall::Acquire(timeout) => {
                let lock = &self.lock;
                Box::pin(async move {
                    let guard = lock.acquire_async(timeout).await.map_err(err_text)?;
                    Ok(kept(guard.fencing_token().to_string(), guard))
                })
            }
            LockCall::Release => {
                let guard = self.guard.take().expect("acquired");
                Box::pin(async move {
                    guard
                        .release_async()
                        .await
                        .map(|()| String::new())
                        .map_err(err_text)
                })
            }
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        drop(self.rival.take());
        // The lock is free for anyone.
        let rival = Lock::new(admin, self.lock.path()).map_err(err_text)?;
        let guard = rival
            .acquire(SETTLE)
            .map_err(|e| format!("a rival cannot take the free lock: {e}"))?;
        guard.release().map_err(err_text)
    }
}

pub(super) enum RwCall {
    Read,
    Write,
}

struct RwSubject {
    lock: ReadWriteLock,
    call: RwCall,
    timeout: Duration,
    rival: Option<ReadGuard>,
}

impl Subject for RwSubject {
    fn call(&mut self) -> Call<'_> {
        let (lock, timeout) = (&self.lock, self.timeout);
        match self.call {
            RwCall::Read => Box::pin(async move {
                let guard = lock.read_async(timeout).await.map_err(err_text)?;
                Ok(kept(guard.fencing_token().to_string(), guard))
            }),
            RwCall::Write => Box::pin(async move {
                let guard = lock.write_async(timeout).await.map_err(err_text)?;
                Ok(kept(guard.fencing_token().to_string(), guard))
            }),
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        drop(self.rival.take());
        let writer = ReadWriteLock::new(admin, self.lock.path()).map_err(err_text)?;
        let guard = writer
            .write(SETTLE)
            .map_err(|e| format!("a writer cannot take the free lock: {e}"))?;
        guard.release().map_err(err_text)
    }
}

pub(super) fn rw_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    call: RwCall,
    held: bool,
) -> Made {
    let rival = match held {
        true => Some(
            ReadWriteLock::new(admin, path)
                .and_then(|l| l.read(OP_TIMEOUT))
                .map_err(err_text)?,
        ),
        false => None,
    };
    Ok(Box::new(RwSubject {
        lock: ReadWriteLock::new(zk, path).map_err(err_text)?,
        call,
        timeout: if held { WAIT } else { OP_TIMEOUT },
        rival,
    }))
}

// ------------------------------------------------------------------ semaphores

struct SemaphoreSubject {
    semaphore: Semaphore,
    path: String,
    timeout: Duration,
    rival: Option<(Semaphore, semaphore::PermitGuard)>,
}

impl Subject for SemaphoreSubject {
    fn call(&mut self) -> Call<'_> {
        let (semaphore, timeout) = (&self.semaphore, self.timeout);
        Box::pin(async move {
            let lease = semaphore.acquire_async(timeout).await.map_err(err_text)?;
            Ok(kept(String::new(), lease))
        })
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        drop(self.rival.take());
        let semaphore = Semaphore::new(admin, &self.path, 1).map_err(err_text)?;
        let lease = semaphore
            .acquire(SETTLE)
            .map_err(|e| format!("the only permit stayed taken: {e}"))?;
        drop(lease);
        Ok(())
    }
}

pub(super) fn semaphore_subject(admin: &ZooKeeper, zk: &ZooKeeper, path: &str, held: bool) -> Made {
    let rival = match held {
        true => {
            let semaphore = Semaphore::new(admin, path, 1).map_err(err_text)?;
            let lease = semaphore.acquire(OP_TIMEOUT).map_err(err_text)?;
            Some((semaphore, lease))
        }
        false => None,
    };
    Ok(Box::new(SemaphoreSubject {
        semaphore: Semaphore::new(zk, path, 1).map_err(err_text)?,
        path: path.to_string(),
        timeout: if held { WAIT } else { OP_TIMEOUT },
        rival,
    }))
}

struct LeaseSubject {
    semaphore: LeaseSemaphore,
    /// The lease whose release is the call (else the call acquires one).
    mine: Option<LeaseGuard>,
    path: String,
    timeout: Duration,
    rival: Option<(LeaseSemaphore, Vec<LeaseGuard>)>,
}

impl Subject for LeaseSubject {
    fn call(&mut self) -> Call<'_> {
        if let Some(lease) = self.mine.take() {
            return Box::pin(async move {
                let released = lease.release_async().await;
                released.map(|()| String::new()).map_err(err_text)
            });
        }
        let (semaphore, timeout) = (&self.semaphore, self.timeout);
        Box::pin(async move {
            let leases = semaphore
                .acquire_async(1, timeout)
                .await
                .map_err(err_text)?;
            Ok(kept(leases.len().to_string(), leases))
        })
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        drop(self.rival.take());
        let semaphore = LeaseSemaphore::new(admin, &self.path, 1, SemaphoreLayout::Curator)
            .map_err(err_text)?;
        let leases = semaphore
            .acquire(1, SETTLE)
            .map_err(|e| format!("the only lease stayed taken: {e}"))?;
        drop(leases);
        Ok(())
    }
}

/// `held`: a rival holds the only lease; `release`: the call releases ours.
pub(super) fn lease_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    held: bool,
    release: bool,
) -> Made {
    let make = |zk: &ZooKeeper| LeaseSemaphore::new(zk, path, 1, SemaphoreLayout::Curator);
    let rival = match held {
        true => {
            let semaphore = make(admin).map_err(err_text)?;
            let leases = semaphore.acquire(1, OP_TIMEOUT).map_err(err_text)?;
            Some((semaphore, leases))
        }
        false => None,
    };
    let semaphore = make(zk).map_err(err_text)?;
    let mine = match release {
        true => semaphore.acquire(1, OP_TIMEOUT).map_err(err_text)?.pop(),
        false => None,
    };
    Ok(Box::new(LeaseSubject {
        semaphore,
        mine,
        path: path.to_string(),
        timeout: if held { WAIT } else { OP_TIMEOUT },
        rival,
    }))
}
