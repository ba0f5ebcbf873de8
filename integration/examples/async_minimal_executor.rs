//! The async recipe forms need no runtime: this example drives them with a dozen-line
//! executor (poll, park until woken). Two tasks contend for a lock while a third
//! waits for the election leadership, all on the main thread.
//!
//! ```text
//! cargo run --example async_minimal_executor  # starts a throwaway server
//! ZK_HOSTS=127.0.0.1:2181 cargo run --example async_minimal_executor
//! ```

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;
use zookeeper_mt::ZooKeeper;
use zookeeper_mt_recipes::leadership::LeaderElection;
use zookeeper_mt_recipes::locks::Lock;

/// Wakes the executor's thread.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// The whole executor: poll the future, park until a worker wakes it, repeat.
fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

/// Polls both futures until both are done (a two-task join).
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (Box::pin(a), Box::pin(b));
    let (mut out_a, mut out_b) = (None, None);
    std::future::poll_fn(move |cx| {
        if out_a.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                out_a = Some(v);
            }
        }
        if out_b.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                out_b = Some(v);
            }
        }
        if out_a.is_some() && out_b.is_some() {
            Poll::Ready((out_a.take().unwrap(), out_b.take().unwrap()))
        } else {
            Poll::Pending
        }
    })
    .await
}

async fn hold(lock: Lock, who: &str) -> zookeeper_mt_recipes::Result<()> {
    let guard = lock.acquire_async(Duration::from_secs(30)).await?;
    println!("{who} holds the lock ({})", guard.node());
    guard.release_async().await?;
    println!("{who} released it");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = zookeeper_testing::Hosts::from_env_or_start(zookeeper_testing::HOSTS_ENV)?;
    let zk = ZooKeeper::connect(&hosts.connect_string(), Duration::from_secs(10))?;
    let base = format!("/async-minimal-{}", std::process::id());
    let lock = Lock::new(&zk, &format!("{base}/lock"))?;
    block_on(async {
        let (first, second) =
            join(hold(lock.clone(), "task 1"), hold(lock.clone(), "task 2")).await;
        first?;
        second?;
        let election = LeaderElection::new_async(&zk, &format!("{base}/election"), b"main").await?;
        election
            .wait_until_leader_async(Duration::from_secs(30))
            .await?;
        println!("leading: {}", election.is_leader_async().await?);
        election.resign_async().await?;
        Ok::<_, zookeeper_mt_recipes::RecipeError>(())
    })?;
    Ok(())
}
