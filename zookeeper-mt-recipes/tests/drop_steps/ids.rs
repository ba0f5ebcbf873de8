//! Ids and counters: a dropped call never hands an id out twice, never adds twice.

use super::*;
use std::collections::HashSet;
use zookeeper_mt_recipes::shared::AtomicLong;
use zookeeper_mt_recipes::shared::IdGenerator;

pub(super) enum IdCall {
    Next,
    Reserve,
}

struct IdSubject {
    ids: IdGenerator,
    call: IdCall,
}

pub(super) fn id_subject(admin: &ZooKeeper, zk: &ZooKeeper, path: &str, call: IdCall) -> Made {
    IdGenerator::create_counter(admin, path, &Default::default()).map_err(err_text)?;
    // Ids up to 5 were handed out before.
    admin.set(path, b"5", None).map_err(err_text)?;
    let ids = IdGenerator::new(zk, path).map_err(err_text)?;
    Ok(Box::new(IdSubject { ids, call }))
}

impl Subject for IdSubject {
    fn call(&mut self) -> Call<'_> {
        let ids = &self.ids;
        match self.call {
            IdCall::Next => Box::pin(async move {
                ids.next_id_async()
                    .await
                    .map(|id| format!("{id}..{}", id + 1))
                    .map_err(err_text)
            }),
            IdCall::Reserve => Box::pin(async move {
                let range = ids.reserve_async(10, OP_TIMEOUT).await.map_err(err_text)?;
                Ok(format!("{}..{}", range.start, range.end))
            }),
        }
    }

    fn after(&mut self, admin: &ZooKeeper, outcome: Option<&Outcome>) -> Result<(), String> {
        // Every id handed out from now on, here and elsewhere, is new.
        let mut handed: Vec<u64> = Vec::new();
        if let Some(Ok(range)) = outcome {
            let (start, end) = range.split_once("..").ok_or("bad range")?;
            let (start, end): (u64, u64) = (start.parse().unwrap(), end.parse().unwrap());
            handed.extend(start..end);
        }
        let other = IdGenerator::new(admin, self.ids.path()).map_err(err_text)?;
        for _ in 0..2 {
            handed.push(self.ids.next_id().map_err(err_text)?);
            handed.push(other.next_id().map_err(err_text)?);
        }
        handed.extend(self.ids.reserve(3, OP_TIMEOUT).map_err(err_text)?);
        let distinct: HashSet<u64> = handed.iter().copied().collect();
        if distinct.len() != handed.len() || handed.iter().any(|&id| id <= 5) {
            return Err(format!("ids handed out twice or again: {handed:?}"));
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ counters

struct CounterSubject {
    counter: AtomicLong,
    path: String,
}

pub(super) fn counter_subject(_: &ZooKeeper, zk: &ZooKeeper, path: &str) -> Made {
    let counter = AtomicLong::new(zk, path).map_err(err_text)?;
    let path = path.to_string();
    Ok(Box::new(CounterSubject { counter, path }))
}

impl Subject for CounterSubject {
    fn call(&mut self) -> Call<'_> {
        let counter = &self.counter;
        Box::pin(async move {
            let added = counter.add_async(5).await.map_err(err_text)?;
            Ok(format!("{}->{}", added.pre, added.post))
        })
    }

    fn settled(&self, admin: &ZooKeeper, outcome: Option<&Outcome>) -> Result<(), String> {
        // Added once or not at all: never twice.
        let value = AtomicLong::new(admin, &self.path)
            .and_then(|c| c.get())
            .map_err(err_text)?;
        match (value, outcome) {
            (5, _) | (0, None | Some(Err(_))) => Ok(()),
            (value, outcome) => Err(format!(
                "the counter is {value} after adding 5 ({outcome:?})"
            )),
        }
    }

    fn after(&mut self, admin: &ZooKeeper, _: Option<&Outcome>) -> Result<(), String> {
        // Later adds, here and elsewhere, each count once.
        let before = self.counter.get().map_err(err_text)?;
        self.counter.add(1).map_err(err_text)?;
        let other = AtomicLong::new(admin, &self.path).map_err(err_text)?;
        other.add(10).map_err(err_text)?;
        match other.get().map_err(err_text)? {
            value if value == before + 11 => Ok(()),
            value => Err(format!("{before} + 1 + 10 made {value}")),
        }
    }
}
