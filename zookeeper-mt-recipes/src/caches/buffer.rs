//! The events a cache holds for its reader, coalesced per path so that their memory is
//! bounded by the size of the tree, not by the number of changes.
//!
//! For each path with news, the buffer keeps what the reader last learned of it (from
//! events already received) and the cache's latest state. When the reader takes the
//! path's turn (the position of its oldest unread change), the event is the difference
//! between the two: `Added`, `Updated`, `Removed`, or `Removed` then `Added` for a node
//! deleted and created again (a different `czxid`). A change that undoes an unread one
//! (created and deleted again) leaves nothing to read.

use super::{CacheEvent, NodeData};
use crate::events::Buffer;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Most connection signals kept for a reader that does not read (older ones go first;
/// `Initialized`, `Lost` and `NewSession` are never dropped).
const MAX_SIGNALS: usize = 32;

#[derive(Debug, Clone)]
enum Slot {
    /// A path's turn; stale unless `pending[path].seq` equals the number.
    Path(String, u64),
    Signal(CacheEvent),
}

#[derive(Debug, Clone)]
struct Pending {
    seq: u64,
    /// What the reader knows: the state it last received (`None`: absent).
    seen: Option<Arc<NodeData>>,
    /// The cache's state now.
    latest: Option<Arc<NodeData>>,
}

/// See the [module docs](self).
#[derive(Debug, Default, Clone)]
pub(crate) struct CacheBuffer {
    order: VecDeque<Slot>,
    pending: HashMap<String, Pending>,
    next_seq: u64,
    signals: usize,
}

/// Whether two states are the same version of the node.
fn same(a: &Option<Arc<NodeData>>, b: &Option<Arc<NodeData>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.stat.czxid == b.stat.czxid && a.stat.mzxid == b.stat.mzxid,
        _ => false,
    }
}

impl CacheBuffer {
    /// The node at `path` went from `before` to `after` in the cache.
    pub(crate) fn change(
        &mut self,
        path: &str,
        before: Option<Arc<NodeData>>,
        after: Option<Arc<NodeData>>,
    ) {
        if let Some(pending) = self.pending.get_mut(path) {
            pending.latest = after;
            if same(&pending.seen, &pending.latest) {
                // Back to what the reader knows: nothing to tell.
                self.pending.remove(path);
                self.compact();
            }
            return;
        }
        if same(&before, &after) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.pending.insert(
            path.to_string(),
            Pending {
                seq,
                seen: before,
                latest: after,
            },
        );
        self.order.push_back(Slot::Path(path.to_string(), seq));
    }

    /// A signal (initialized, connection change) in its place among the changes.
    pub(crate) fn signal(&mut self, event: CacheEvent) {
        if self.signals >= MAX_SIGNALS {
            let oldest = self.order.iter().position(|slot| {
                matches!(
                    slot,
                    Slot::Signal(CacheEvent::Suspended | CacheEvent::Reconnected)
                )
            });
            if let Some(index) = oldest {
                self.order.remove(index);
                self.signals -= 1;
            }
        }
        self.order.push_back(Slot::Signal(event));
        self.signals += 1;
    }

    /// Drops stale turns once they outnumber the live ones (a path created and deleted
    /// over and over leaves one stale turn each time).
    fn compact(&mut self) {
        if self.order.len() <= 2 * (self.pending.len() + self.signals) + 32 {
            return;
        }
        let pending = &self.pending;
        self.order.retain(|slot| match slot {
            Slot::Signal(_) => true,
            Slot::Path(path, seq) => pending.get(path).is_some_and(|p| p.seq == *seq),
        });
    }
}

impl Buffer for CacheBuffer {
    type Item = CacheEvent;

    fn pop(&mut self) -> Option<CacheEvent> {
        loop {
            let path = match self.order.front()? {
                Slot::Signal(_) => {
                    let Some(Slot::Signal(event)) = self.order.pop_front() else {
                        unreachable!("the front slot was a signal");
                    };
                    self.signals -= 1;
                    return Some(event);
                }
                Slot::Path(path, seq) => match self.pending.get(path) {
                    Some(pending) if pending.seq == *seq => path.clone(),
                    _ => {
                        self.order.pop_front();
                        continue;
                    }
                },
            };
            let pending = self.pending.get_mut(&path).expect("checked above");
            let event = match (pending.seen.take(), pending.latest.clone()) {
                (Some(old), Some(new)) if old.stat.czxid != new.stat.czxid => {
                    // Deleted and created again: the removal now, the creation on the next
                    // call (the turn stays, the reader now knows the node as absent).
                    return Some(CacheEvent::Removed(old));
                }
                (Some(old), Some(new)) => CacheEvent::Updated { old, new },
                (None, Some(new)) => CacheEvent::Added(new),
                (Some(old), None) => CacheEvent::Removed(old),
                (None, None) => {
                    self.pending.remove(&path);
                    self.order.pop_front();
                    continue;
                }
            };
            self.pending.remove(&path);
            self.order.pop_front();
            return Some(event);
        }
    }

    fn len(&self) -> usize {
        self.pending.len() + self.signals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_mt::Stat;

    fn node(path: &str, czxid: i64, mzxid: i64) -> Option<Arc<NodeData>> {
        Some(Arc::new(NodeData {
            path: path.to_string(),
            data: format!("{czxid}/{mzxid}").into_bytes(),
            stat: Stat {
                czxid,
                mzxid,
                ..Stat::default()
            },
        }))
    }

    fn drain(buffer: &mut CacheBuffer) -> Vec<String> {
        std::iter::from_fn(|| buffer.pop())
            .map(|event| match event {
                CacheEvent::Added(n) => format!("+{}@{}", n.path, n.stat.mzxid),
                CacheEvent::Updated { old, new } => {
                    format!("~{}@{}->{}", new.path, old.stat.mzxid, new.stat.mzxid)
                }
                CacheEvent::Removed(n) => format!("-{}@{}", n.path, n.stat.mzxid),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn coalesces_per_path_in_first_change_order() {
        let mut b = CacheBuffer::default();
        b.change("/a", None, node("/a", 1, 1));
        b.change("/b", None, node("/b", 2, 2));
        b.change("/a", node("/a", 1, 1), node("/a", 1, 3));
        b.signal(CacheEvent::Initialized);
        b.change("/b", node("/b", 2, 2), None);
        b.change("/c", None, node("/c", 4, 4));
        assert_eq!(b.len(), 3);
        assert_eq!(drain(&mut b), vec!["+/a@3", "Initialized", "+/c@4"]);
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn recreation_is_removed_then_added() {
        let mut b = CacheBuffer::default();
        b.change("/a", node("/a", 1, 5), None);
        b.change("/a", None, node("/a", 7, 7));
        b.change("/a", node("/a", 7, 7), node("/a", 7, 9));
        assert_eq!(drain(&mut b), vec!["-/a@5", "+/a@9"]);
        b.change("/a", node("/a", 7, 9), node("/a", 7, 10));
        assert_eq!(drain(&mut b), vec!["~/a@9->10"]);
    }

    #[test]
    fn churn_stays_bounded() {
        let mut b = CacheBuffer::default();
        for i in 0..10_000 {
            b.change("/x", None, node("/x", i, i));
            b.change("/x", node("/x", i, i), None);
            b.change("/y", node("/y", 0, i), node("/y", 0, i + 1));
            b.signal(CacheEvent::Suspended);
            b.signal(CacheEvent::Reconnected);
        }
        assert!(b.order.len() <= 2 * (b.pending.len() + b.signals) + 32 + 4);
        assert!(b.len() <= 1 + MAX_SIGNALS);
        let events = drain(&mut b);
        assert_eq!(events[0], "~/y@0->10000");
        assert_eq!(events.last().map(String::as_str), Some("Reconnected"));
    }
}
