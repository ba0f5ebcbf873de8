//! The future of an async connect: woken by the session event that reports the
//! connection (or the end of the session), and by the client's timer at the connect
//! timeout. It blocks no thread; dropped early, it hands the half-made handle's close to
//! the closer thread.

use crate::client::{Started, ZooKeeper};
use crate::error::{Error, Result};
use crate::timer::Alarm;
use crate::types::SessionState;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The future of [`ZooKeeper::connect_async`] and
/// [`ZooKeeperBuilder::connect_async`](crate::ZooKeeperBuilder::connect_async): the
/// connected handle, or `connect`'s error. Needs no runtime (any executor, or a
/// hand-written poll loop).
#[must_use = "dropping the future closes the handle being connected"]
pub struct ConnectFuture {
    state: State,
}

enum State {
    Failed(Option<Error>),
    Connecting(Box<Connecting>),
}

struct Connecting {
    zk: Option<ZooKeeper>,
    why_not: crate::security::Connecting,
    alarm: Option<Alarm>,
    /// This future's entry among the session's state wakers.
    waker_key: Option<u64>,
}

impl ConnectFuture {
    pub(crate) fn new(started: Started) -> ConnectFuture {
        ConnectFuture {
            state: State::Connecting(Box::new(Connecting {
                zk: Some(started.zk),
                why_not: started.connecting,
                alarm: started.deadline.map(Alarm::new),
                waker_key: None,
            })),
        }
    }

    pub(crate) fn failed(error: Error) -> ConnectFuture {
        ConnectFuture {
            state: State::Failed(Some(error)),
        }
    }
}

impl Connecting {
    /// The outcome once there is one: the state is read after the waker is registered,
    /// so a change between the two wakes it.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<ZooKeeper>> {
        let Some(zk) = self.zk.as_ref() else {
            return Poll::Ready(Err(Error::Closed));
        };
        let session = zk.session();
        session.wake_on_change(&mut self.waker_key, cx.waker());
        let outcome = match session.state() {
            state if state.is_connected() => Ok(()),
            SessionState::Expired => Err(Error::SessionExpired),
            SessionState::AuthFailed => Err(Error::AuthFailed),
            SessionState::Closed => Err(Error::Closed),
            _ => match self.alarm.as_mut() {
                Some(alarm) if alarm.expired() => Err(self.why_not.timeout_error()),
                Some(alarm) => {
                    alarm.arm(cx.waker());
                    return Poll::Pending;
                }
                None => return Poll::Pending,
            },
        };
        session.forget_waker(self.waker_key.take());
        self.alarm = None;
        Poll::Ready(match outcome {
            Ok(()) => self.zk.take().ok_or(Error::Closed),
            Err(error) => {
                self.abandon();
                Err(error)
            }
        })
    }

    /// Closes the handle, if it was not handed out, on the closer thread.
    fn abandon(&mut self) {
        if let Some(zk) = self.zk.take() {
            zk.session().forget_waker(self.waker_key.take());
            zk.close_in_background();
        }
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.abandon();
    }
}

impl Future for ConnectFuture {
    type Output = Result<ZooKeeper>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<ZooKeeper>> {
        match &mut self.get_mut().state {
            State::Failed(error) => Poll::Ready(Err(error.take().unwrap_or(Error::Closed))),
            State::Connecting(connecting) => connecting.poll(cx),
        }
    }
}

impl std::fmt::Debug for ConnectFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectFuture")
    }
}
