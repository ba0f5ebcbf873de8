//! A stream's items turned into others, some skipped.

use super::{waiter_id, EventStream, RecvTimeoutError, Source, TryRecvError};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// A stream's items turned into others, some skipped ([`EventStream::filter_map`]).
pub(super) struct FilterMap<T, U> {
    pub(super) inner: EventStream<T>,
    pub(super) map: Arc<dyn Fn(T) -> Option<U> + Send + Sync>,
}

impl<T: 'static, U: 'static> Source<U> for FilterMap<T, U> {
    fn try_recv(&self) -> Result<U, TryRecvError> {
        loop {
            if let Some(item) = (self.map)(self.inner.source.try_recv()?) {
                return Ok(item);
            }
        }
    }

    fn recv_deadline(&self, deadline: Option<Instant>) -> Result<U, RecvTimeoutError> {
        loop {
            if let Some(item) = (self.map)(self.inner.source.recv_deadline(deadline)?) {
                return Ok(item);
            }
        }
    }

    fn poll_recv(&self, cx: &mut Context<'_>, waiter: u64) -> Poll<Option<U>> {
        loop {
            match self.inner.source.poll_recv(cx, waiter) {
                Poll::Ready(Some(item)) => {
                    if let Some(item) = (self.map)(item) {
                        return Poll::Ready(Some(item));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn forget(&self, waiter: u64) {
        self.inner.source.forget(waiter);
    }

    fn wakers(&self) -> usize {
        self.inner.source.wakers()
    }

    fn len(&self) -> usize {
        self.inner.source.len()
    }

    fn is_ended(&self) -> bool {
        self.inner.source.is_ended()
    }

    fn fork(&self) -> Option<Arc<dyn Source<U>>> {
        let inner = EventStream {
            source: self.inner.source.fork()?,
            reader: waiter_id(),
            keep_alive: self.inner.keep_alive.clone(),
        };
        Some(Arc::new(FilterMap {
            inner,
            map: Arc::clone(&self.map),
        }))
    }

    fn subscribe(&self) -> Arc<dyn Source<U>> {
        Arc::new(FilterMap {
            inner: self.inner.subscribe(),
            map: Arc::clone(&self.map),
        })
    }

    fn subscribers(&self) -> usize {
        self.inner.source.subscribers()
    }
}
