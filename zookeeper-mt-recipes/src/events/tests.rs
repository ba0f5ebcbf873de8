//! Unit tests of the stream machinery (no server).

use super::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Wake;
use std::task::Waker;
use std::thread;
use std::time::Duration;

/// Keeps the last `CAP` items (a coalescing rule that drops the oldest).
#[derive(Default, Clone)]
struct Capped(VecDeque<u32>);
const CAP: usize = 4;

impl Buffer for Capped {
    type Item = u32;
    fn pop(&mut self) -> Option<u32> {
        self.0.pop_front()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn capped() -> (Arc<EventQueue<Capped>>, EventStream<u32>) {
    let queue = EventQueue::new(Capped::default());
    (Arc::clone(&queue), EventStream::new(queue))
}

fn push(queue: &EventQueue<Capped>, item: u32) {
    queue.update(|b| {
        if b.0.len() == CAP {
            b.0.pop_front();
        }
        b.0.push_back(item);
    });
}

/// A minimal executor: polls on this thread, parks until woken.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread, AtomicBool);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.1.store(true, Ordering::Release);
            self.0.unpark();
        }
    }
    let unpark = Arc::new(Unpark(thread::current(), AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&unpark));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        while !unpark.1.swap(false, Ordering::Acquire) {
            thread::park_timeout(Duration::from_secs(5));
        }
    }
}

#[test]
fn memory_is_bounded_by_the_buffer_and_the_newest_item_stays() {
    let (queue, stream) = capped();
    for i in 0..10_000 {
        push(&queue, i);
        assert!(stream.len() <= CAP);
    }
    let items: Vec<u32> = std::iter::from_fn(|| stream.try_recv().ok()).collect();
    assert_eq!(items, vec![9_996, 9_997, 9_998, 9_999]);

    let newest = EventQueue::new(Newest::default());
    let values = EventStream::new(Arc::clone(&newest) as Arc<dyn Source<u32>>);
    for i in 0..10_000 {
        newest.update(|b| b.set(i));
    }
    newest.update(|b| b.set_final(u32::MAX));
    newest.close();
    assert_eq!(values.len(), 2);
    assert_eq!(values.iter().collect::<Vec<_>>(), vec![9_999, u32::MAX]);
}

#[test]
fn the_end_comes_after_every_queued_item() {
    let (queue, stream) = capped();
    push(&queue, 1);
    push(&queue, 2);
    queue.close();
    push(&queue, 3); // ignored: the stream has ended
    assert!(stream.is_ended());
    assert_eq!(stream.len(), 2);
    assert!(!FusedStream::is_terminated(&stream));
    assert_eq!(stream.recv_timeout(Duration::ZERO), Ok(1));
    assert_eq!(block_on(stream.next()), Some(2));
    assert_eq!(stream.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(stream.recv(), Err(RecvError));
    assert_eq!(
        stream.recv_timeout(Duration::from_secs(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    assert_eq!(block_on(stream.next()), None);
    assert!(FusedStream::is_terminated(&stream));
}

#[test]
fn waiting_readers_get_items_and_the_end() {
    let (queue, stream) = capped();
    assert_eq!(stream.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(
        stream.recv_timeout(Duration::from_millis(10)),
        Err(RecvTimeoutError::Timeout)
    );
    let producer = thread::spawn(move || {
        for i in 0..3 {
            thread::sleep(Duration::from_millis(5));
            push(&queue, i);
        }
        queue.close();
    });
    let received: Vec<u32> = stream.clone().into_iter().collect();
    producer.join().unwrap();
    assert_eq!(received, vec![0, 1, 2]);
}

#[test]
fn the_stream_impl_works_on_a_minimal_executor() {
    let (queue, stream) = capped();
    let evens = stream.filter_map(|i| (i % 2 == 0).then_some(i * 10));
    let producer = thread::spawn(move || {
        for i in 0..6 {
            // Slower than the reader: every item is seen (nothing coalesced).
            thread::sleep(Duration::from_millis(5));
            push(&queue, i);
        }
        queue.close();
    });
    let mut evens = evens;
    let received = block_on(async {
        let mut received = Vec::new();
        while let Some(item) = std::future::poll_fn(|cx| Pin::new(&mut evens).poll_next(cx)).await {
            received.push(item);
        }
        received
    });
    producer.join().unwrap();
    assert_eq!(received, vec![0, 20, 40]);
    assert!(FusedStream::is_terminated(&evens));
}

#[test]
fn clones_share_the_queue() {
    let (queue, first) = capped();
    let second = first.clone();
    push(&queue, 1);
    push(&queue, 2);
    assert_eq!(first.try_recv(), Ok(1));
    assert_eq!(second.try_recv(), Ok(2));
    assert!(first.is_empty() && second.is_empty());
}

#[test]
fn streams_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<EventStream<u32>>();
    both::<Next<'static, u32>>();
    both::<IntoIter<u32>>();
}

#[test]
fn a_subscriber_sees_every_item_and_clones_split_them() {
    let (queue, stream) = capped();
    push(&queue, 1);
    // Level with its source: the unread 1 too.
    let subscriber = stream.subscribe();
    let clone = stream.clone();
    assert_eq!(stream.subscribers(), 1);
    assert_eq!(subscriber.subscribers(), 1);
    push(&queue, 2);
    push(&queue, 3);
    assert_eq!(subscriber.try_recv(), Ok(1));
    assert_eq!(stream.try_recv(), Ok(1));
    assert_eq!(clone.try_recv(), Ok(2));
    assert_eq!(stream.try_recv(), Ok(3));
    assert_eq!(subscriber.recv_timeout(Duration::ZERO), Ok(2));
    // Each keeps its own buffer under the same rule (the last `CAP` items).
    for i in 10..20 {
        push(&queue, i);
    }
    assert_eq!(stream.len(), CAP);
    assert_eq!(subscriber.len(), CAP);
    queue.close();
    assert_eq!(subscriber.iter().collect::<Vec<_>>(), vec![16, 17, 18, 19]);
    assert_eq!(
        subscriber.recv_timeout(Timeout::Never),
        Err(RecvTimeoutError::Disconnected)
    );
    // A subscriber of an ended stream gets what its source holds, then the end.
    let late = stream.subscribe();
    assert_eq!(late.iter().count(), CAP);
    // The end unregistered every subscriber.
    assert_eq!(stream.subscribers(), 0);
}

#[test]
fn dropped_subscribers_unsubscribe() {
    let (queue, stream) = capped();
    let evens = stream.filter_map(|i| (i % 2 == 0).then_some(i));
    for i in 0..1000 {
        let subscriber = evens.subscribe();
        let clone = subscriber.clone();
        push(&queue, i * 2);
        assert_eq!(clone.try_recv(), Ok(i * 2));
        assert_eq!(evens.try_recv(), Ok(i * 2));
        assert_eq!(evens.subscribers(), 1);
    }
    assert_eq!(evens.subscribers(), 0);
    // A waiting subscriber is woken by the end when the producer's queue goes.
    let subscriber = evens.subscribe();
    let waiting = thread::spawn(move || subscriber.recv_timeout(Duration::from_secs(20)));
    drop(evens);
    drop(queue);
    assert_eq!(waiting.join().unwrap(), Err(RecvTimeoutError::Disconnected));
}

#[test]
fn a_subscriber_keeps_its_own_wakers() {
    let (queue, stream) = capped();
    let subscriber = stream.subscribe();
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    {
        let mut next = std::pin::pin!(subscriber.next());
        assert!(next.as_mut().poll(&mut cx).is_pending());
        assert_eq!((subscriber.wakers(), stream.wakers()), (1, 0));
    }
    assert_eq!(subscriber.wakers(), 0);
    push(&queue, 1);
    assert_eq!(block_on(subscriber.next()), Some(1));
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}
