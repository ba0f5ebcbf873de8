//! Why leadership ends, and the bounded stream of leadership events.

use super::*;

// ---------------------------------------------------------------------------------------
// Losses, term ends, events.
// ---------------------------------------------------------------------------------------

/// Why leadership was lost (the vocabulary of [`crate::locks::lock::LockLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipLost {
    /// The session expired: the server deleted the latch's node.
    SessionExpired,
    /// The latch's node was deleted by someone else.
    NodeDeleted,
    /// A node that the layout orders first appeared before the latch's node (Curator or
    /// kazoo peers past the sequence counter's end).
    Preempted,
    /// The connection was down longer than the disconnect grace, or the session may
    /// have expired by now as far as the server's answers tell: another participant
    /// may lead.
    Disconnected,
    /// The handle was closed (or authentication failed): the session is gone.
    Closed,
}

impl LeadershipLost {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            LeadershipLost::SessionExpired => "leadership lost: session expired",
            LeadershipLost::NodeDeleted => "leadership lost: latch node deleted",
            LeadershipLost::Preempted => "leadership lost: another node is ordered first",
            LeadershipLost::Disconnected => {
                "leadership lost: disconnected longer than the grace period"
            }
            LeadershipLost::Closed => "leadership lost: handle closed",
        }
    }
}

impl fmt::Display for LeadershipLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a term of leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TermEnd {
    /// The latch relinquished it ([`LeaderLatch::relinquish`],
    /// [`LeaderLatch::run_while_leader`]) and joined again at the back.
    Relinquished,
    /// The latch was closed.
    LatchClosed,
    /// Leadership was lost.
    Lost(LeadershipLost),
}

/// What a latch's event stream reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeadershipEvent {
    /// The latch leads: a new term began.
    BecameLeader {
        /// The term's number (1 for the latch's first term, one more for each).
        term: u64,
        /// The term's fencing token (its node's `czxid`).
        token: i64,
        /// The generation of the session it leads on.
        generation: u64,
    },
    /// The term ended: the latch no longer leads.
    LostLeadership {
        /// The term's number.
        term: u64,
        /// Why.
        end: TermEnd,
    },
}

/// Most events kept for a reader that does not read.
pub(super) const EVENT_CAPACITY: usize = 64;

/// Queued leadership events, bounded: see [`LeaderLatch::events`].
#[derive(Debug, Default, Clone)]
pub(super) struct LeadershipBuffer {
    pub(super) queue: VecDeque<LeadershipEvent>,
}

impl LeadershipBuffer {
    pub(super) fn push(&mut self, event: LeadershipEvent) {
        if self.queue.len() >= EVENT_CAPACITY {
            // Terms alternate (BecameLeader n, LostLeadership n, ...): drop the oldest
            // complete term, which later events supersede.
            let pair = (1..self.queue.len()).find(|&i| {
                matches!(
                    (self.queue[i - 1], self.queue[i]),
                    (
                        LeadershipEvent::BecameLeader { term: a, .. },
                        LeadershipEvent::LostLeadership { term: b, .. },
                    ) if a == b
                )
            });
            match pair {
                Some(i) => {
                    self.queue.drain(i - 1..=i);
                }
                None => {
                    self.queue.pop_front();
                }
            }
        }
        self.queue.push_back(event);
    }
}

impl Buffer for LeadershipBuffer {
    type Item = LeadershipEvent;

    fn pop(&mut self) -> Option<LeadershipEvent> {
        self.queue.pop_front()
    }

    fn len(&self) -> usize {
        self.queue.len()
    }
}
