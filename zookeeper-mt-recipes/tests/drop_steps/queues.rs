//! The queue and the work queue: their calls, and no item lost or doubled.

use super::*;
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::queues::{WorkItem, WorkQueue};

// ------------------------------------------------------------------ queues

pub(super) enum QueueCall {
    Put,
    PutAll,
    Take(Duration),
}

struct QueueSubject {
    queue: Queue,
    call: QueueCall,
    /// The data the setup put.
    put: Option<&'static str>,
}

pub(super) fn queue_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    call: QueueCall,
    put: Option<&'static str>,
) -> Made {
    if let Some(data) = put {
        Queue::new(admin, path)
            .and_then(|q| q.put(data.as_bytes()))
            .map_err(err_text)?;
    }
    let queue = Queue::new(zk, path).map_err(err_text)?;
    Ok(Box::new(QueueSubject { queue, call, put }))
}

impl Subject for QueueSubject {
    fn call(&mut self) -> Call<'_> {
        let queue = &self.queue;
        match self.call {
            QueueCall::Put => Box::pin(async move {
                queue
                    .put_async(b"item")
                    .await
                    .map(|()| String::new())
                    .map_err(err_text)
            }),
            QueueCall::PutAll => Box::pin(async move {
                let batch = queue.put_all_async(["b0", "b1", "b2"]);
                batch.await.map(|()| String::new()).map_err(err_text)
            }),
            QueueCall::Take(timeout) => Box::pin(async move {
                queue
                    .take_async(timeout)
                    .await
                    .map(|d| lossy(&d))
                    .map_err(err_text)
            }),
        }
    }

    fn extra_contexts(&self, _: Option<&Outcome>, _: bool) -> (usize, usize) {
        // The value's one child watch, shared by its takes, stays armed between them.
        (0, 1)
    }

    fn settled(&self, admin: &ZooKeeper, outcome: Option<&Outcome>) -> Result<(), String> {
        let items = item_data(admin, self.queue.path());
        let acked = matches!(outcome, Some(Ok(_)));
        match self.call {
            QueueCall::Put => match items.iter().filter(|d| *d == "item").count() {
                1 => Ok(()),
                0 if !acked => Ok(()),
                copies => Err(format!("put ({outcome:?}) is in the queue {copies} times")),
            },
            QueueCall::PutAll => {
                let whole = items == ["b0", "b1", "b2"];
                if whole || (items.is_empty() && !acked) {
                    Ok(())
                } else {
                    Err(format!("batch ({outcome:?}) is in the queue as {items:?}"))
                }
            }
            QueueCall::Take(_) => {
                let Some(precious) = self.put else {
                    // An empty queue stays empty.
                    return match (items.as_slice(), outcome) {
                        ([], None | Some(Err(_))) => Ok(()),
                        _ => Err(format!("{items:?} in the queue, took {outcome:?}")),
                    };
                };
                let left = items.iter().filter(|d| *d == precious).count();
                let taken = usize::from(matches!(outcome, Some(Ok(d)) if d == precious));
                match (left, taken) {
                    (1, 0) | (0, 1) => Ok(()),
                    _ => Err(format!(
                        "{left} copies left, {taken} delivered ({outcome:?})"
                    )),
                }
            }
        }
    }

    fn after(&mut self, _: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        match self.queue.waiting() {
            0 => Ok(()),
            n => Err(format!("{n} takes still counted as waiting")),
        }
    }
}

pub(super) enum WorkCall {
    Put,
    Take(Duration),
    Complete,
    Release,
}

struct WorkSubject {
    queue: WorkQueue,
    with_item: bool,
    item: Option<WorkItem>,
    call: WorkCall,
    path: String,
}

pub(super) fn work_subject(
    admin: &ZooKeeper,
    zk: &ZooKeeper,
    path: &str,
    call: WorkCall,
    with_item: bool,
) -> Made {
    if with_item {
        WorkQueue::new(admin, path)
            .and_then(|q| q.put(b"job"))
            .map_err(err_text)?;
    }
    let queue = WorkQueue::new(zk, path).map_err(err_text)?;
    let item = match call {
        WorkCall::Complete | WorkCall::Release => Some(queue.take(OP_TIMEOUT).map_err(err_text)?),
        WorkCall::Put | WorkCall::Take(_) => None,
    };
    Ok(Box::new(WorkSubject {
        queue,
        with_item,
        item,
        call,
        path: path.to_string(),
    }))
}

impl Subject for WorkSubject {
    fn call(&mut self) -> Call<'_> {
        let queue = &self.queue;
        match self.call {
            WorkCall::Put => Box::pin(async move {
                let put = queue.put_async(b"job").await;
                put.map(|()| String::new()).map_err(err_text)
            }),
            WorkCall::Take(timeout) => Box::pin(async move {
                // A completed take's item is dropped: released in the background.
                let item = queue.take_async(timeout).await.map_err(err_text)?;
                Ok(kept(lossy(item.data()), item))
            }),
            WorkCall::Complete => {
                let item = self.item.take().expect("claimed");
                Box::pin(async move {
                    item.complete_async()
                        .await
                        .map(|()| String::new())
                        .map_err(err_text)
                })
            }
            WorkCall::Release => {
                let item = self.item.take().expect("claimed");
                Box::pin(async move {
                    item.release_async()
                        .await
                        .map(|()| String::new())
                        .map_err(err_text)
                })
            }
        }
    }

    fn extra_contexts(&self, outcome: Option<&Outcome>, past_wait: bool) -> (usize, usize) {
        // A take whose turn as head of the line ended (it timed out, or completed) has
        // handed its two watches to the value for the next turn, as designed: they go
        // with the value (checked once it is dropped). A take dropped during its turn
        // takes them off.
        (0, if outcome.is_some() || past_wait { 2 } else { 0 })
    }

    fn settled(&self, admin: &ZooKeeper, outcome: Option<&Outcome>) -> Result<(), String> {
        let copies = item_data(admin, &format!("{}/items", self.path))
            .iter()
            .filter(|d| *d == "job")
            .count();
        let expected: &[usize] = match (&self.call, outcome) {
            (WorkCall::Take(_), _) if !self.with_item => &[0],
            // Added once, or (dropped, in doubt) at most once.
            (WorkCall::Put, Some(Ok(_))) => &[1],
            (WorkCall::Put, _) => &[0, 1],
            (WorkCall::Complete, Some(Ok(_))) => &[0],
            (WorkCall::Complete, _) => &[0, 1],
            _ => &[1],
        };
        if expected.contains(&copies) {
            Ok(())
        } else {
            Err(format!("{copies} copies of the item ({outcome:?})"))
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        // What is left is claimable (not locked) and completes once.
        let queue = WorkQueue::new(admin, &self.path).map_err(err_text)?;
        if queue.len().map_err(err_text)? == 1 {
            let item = queue
                .take(SETTLE)
                .map_err(|e| format!("the item is not claimable: {e}"))?;
            item.complete().map_err(err_text)?;
        }
        match queue.len().map_err(err_text)? {
            0 => Ok(()),
            n => Err(format!("{n} items after completing the one")),
        }
    }
}

/// The data of the items in `dir` (children named `item-…`), in sequence order.
fn item_data(admin: &ZooKeeper, dir: &str) -> Vec<String> {
    let Ok(mut children) = admin.get_children(dir) else {
        return Vec::new();
    };
    children.retain(|c| c.starts_with("item-"));
    children.sort_by_key(|c| c.rsplit('-').next().unwrap_or_default().to_string());
    children
        .iter()
        .filter_map(|c| admin.get(&format!("{dir}/{c}")).ok())
        .map(|(data, _)| lossy(&data))
        .collect()
}
