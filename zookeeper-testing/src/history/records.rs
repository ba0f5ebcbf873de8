//! Records: the parsed events of every process, grouped by recipe.

use super::*;

// ------------------------------------------------------------------------------------
// Records

/// A critical section: `owner` held the lock (leadership, a semaphore permit) with
/// fencing token `token` from `start` to `end` ([`monotonic_nanos`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CriticalSection {
    /// Who held it (process / thread / session name).
    pub owner: String,
    /// The fencing token of this hold (e.g. the lock node's sequence number or czxid).
    pub token: i64,
    /// When the hold was known to have begun (after acquire returned).
    pub start: u64,
    /// When the hold was last known to last (before release was called).
    pub end: u64,
}

impl Record for CriticalSection {
    const KIND: &'static str = "section";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("owner", &self.owner)
            .with("token", self.token)
            .with("start", self.start)
            .with("end", self.end)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(CriticalSection {
            owner: e.parse("owner")?,
            token: e.parse("token")?,
            start: e.parse("start")?,
            end: e.parse("end")?,
        })
    }
}

impl fmt::Display for CriticalSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{}..{}]",
            self.owner, self.token, self.start, self.end
        )
    }
}

/// A write to a resource guarded by fencing tokens, from `start` to `end`
/// ([`monotonic_nanos`]); `accepted` is the resource's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencedWrite {
    /// The writer.
    pub owner: String,
    /// The token the write carried.
    pub token: i64,
    /// Before the write was sent.
    pub start: u64,
    /// After the answer arrived.
    pub end: u64,
    /// Whether the resource applied it.
    pub accepted: bool,
}

impl Record for FencedWrite {
    const KIND: &'static str = "fenced_write";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("owner", &self.owner)
            .with("token", self.token)
            .with("start", self.start)
            .with("end", self.end)
            .with("accepted", self.accepted)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(FencedWrite {
            owner: e.parse("owner")?,
            token: e.parse("token")?,
            start: e.parse("start")?,
            end: e.parse("end")?,
            accepted: e.parse("accepted")?,
        })
    }
}

impl fmt::Display for FencedWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} [{}..{}] {}",
            self.owner,
            self.token,
            self.start,
            self.end,
            if self.accepted {
                "accepted"
            } else {
                "rejected"
            }
        )
    }
}

/// A put into a queue (or a submission to a work queue): sent at `start`,
/// acknowledged at `end`; `end: None` when the outcome is unknown (error, lost reply,
/// process killed), so the item may or may not be in the queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Put {
    /// The item's unique name.
    pub item: String,
    /// Who put it.
    pub producer: String,
    /// Before the put was sent.
    pub start: u64,
    /// When the put was acknowledged, if it was.
    pub end: Option<u64>,
}

impl Put {
    /// True if the put was acknowledged.
    pub fn acknowledged(&self) -> bool {
        self.end.is_some()
    }
}

impl Record for Put {
    const KIND: &'static str = "put";
    fn to_event(&self) -> Event {
        let e = Event::new(Self::KIND)
            .with("item", &self.item)
            .with("producer", &self.producer)
            .with("start", self.start);
        match self.end {
            Some(end) => e.with("end", end),
            None => e,
        }
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Put {
            item: e.parse("item")?,
            producer: e.parse("producer")?,
            start: e.parse("start")?,
            end: e.parse_opt("end")?,
        })
    }
}

/// A delivery: `consumer` took (or completed) `item`; `at` is when that returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Take {
    /// The item's unique name.
    pub item: String,
    /// Who took (completed) it.
    pub consumer: String,
    /// When the take (completion) returned.
    pub at: u64,
}

impl Record for Take {
    const KIND: &'static str = "take";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("item", &self.item)
            .with("consumer", &self.consumer)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Take {
            item: e.parse("item")?,
            consumer: e.parse("consumer")?,
            at: e.parse("at")?,
        })
    }
}

/// A work-queue item completed by `worker` (kind `done`, so one history can hold both
/// takes and completions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The item's unique name.
    pub item: String,
    /// Who completed it.
    pub worker: String,
    /// When the completion was acknowledged.
    pub at: u64,
}

impl Record for Completion {
    const KIND: &'static str = "done";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("item", &self.item)
            .with("worker", &self.worker)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(Completion {
            item: e.parse("item")?,
            worker: e.parse("worker")?,
            at: e.parse("at")?,
        })
    }
}

/// An id handed out by an id generator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IssuedId {
    /// The id, as text.
    pub id: String,
    /// Who got it.
    pub owner: String,
}

impl Record for IssuedId {
    const KIND: &'static str = "id";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("id", &self.id)
            .with("owner", &self.owner)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(IssuedId {
            id: e.parse("id")?,
            owner: e.parse("owner")?,
        })
    }
}

/// A configuration value a watcher saw, with the znode's `mzxid` at that read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigSeen {
    /// Who saw it.
    pub watcher: String,
    /// The value (text; hex-encode binary data).
    pub value: String,
    /// `Stat.mzxid` of the read that returned it.
    pub mzxid: i64,
    /// When it was seen ([`monotonic_nanos`]).
    pub at: u64,
}

impl Record for ConfigSeen {
    const KIND: &'static str = "config";
    fn to_event(&self) -> Event {
        Event::new(Self::KIND)
            .with("watcher", &self.watcher)
            .with("value", &self.value)
            .with("mzxid", self.mzxid)
            .with("at", self.at)
    }
    fn from_event(e: &Event) -> Result<Self, HistoryError> {
        Ok(ConfigSeen {
            watcher: e.parse("watcher")?,
            value: e.parse("value")?,
            mzxid: e.parse("mzxid")?,
            at: e.parse("at")?,
        })
    }
}
