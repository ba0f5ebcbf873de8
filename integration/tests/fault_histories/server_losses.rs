//! Tracing an item violation to the ensemble: did the server lose a committed write?
//!
//! The 3.8.0 server can apply transactions it received while syncing with a leader
//! without ever logging them (ZOOKEEPER-4785, the ZOOKEEPER-3023 family). After a
//! restart that member's state lacks them; elected leader, it hands that state to the
//! others, and nodes whose deletion was committed come back: a taken queue item or a
//! completed work item is delivered again. No client protocol can prevent that.
//!
//! An item violation is the server's when the logs prove it (the item's transactions are
//! found by its data in its create, then by its node name):
//! - a transaction on the item's nodes lies in a hole of some member's log
//!   ([`zk_harness::txn_log::holes`]): the lost write itself is missing there; or
//! - the logged history of the item's nodes contradicts what the state did: a delete or
//!   data write applied to a node the log had already deleted, with no create between
//!   ([`zk_harness::txn_log::contradictions`]). A state rebuilt without logged writes
//!   (the same bug family, seen through a snapshot or a sync) leaves this trace even when
//!   every log is complete.
//!
//! Anything else stays a violation.

use super::judge::{ItemViolation, Verdict};
use std::path::PathBuf;
use zk_harness::txn_log::{contradictions, holes, Hole, LoggedTxn, MemberLog};

impl Verdict {
    /// Moves the item violations explained by holes in the members' logs out of the
    /// violations (counted as `server_lost_commits`, printed with the evidence); the
    /// others become violations.
    pub(super) fn trace_to_server(&mut self, data_dirs: &[PathBuf]) {
        self.counts.insert("server_lost_commits", 0);
        let items = std::mem::take(&mut self.items);
        if items.is_empty() {
            return;
        }
        let members: Vec<MemberLog> = data_dirs
            .iter()
            .map(|dir| MemberLog::read(dir).expect("reading a member's log"))
            .collect();
        let holes = holes(&members);
        for hole in &holes {
            println!("ensemble: {hole}");
        }
        let mut lost = 0;
        for violation in items {
            match explained(&violation, &members, &holes) {
                Some(evidence) => {
                    lost += 1;
                    println!(
                        "server lost a committed write: {}: {evidence}",
                        violation.text
                    );
                }
                None => self.violations.push(violation.text),
            }
        }
        self.counts.insert("server_lost_commits", lost);
    }
}

/// The evidence that `violation`'s item was touched by a lost transaction, if it was.
fn explained(violation: &ItemViolation, members: &[MemberLog], holes: &[Hole]) -> Option<String> {
    // The item's data as the create serializes it: a 4-byte length, then the bytes.
    let data = violation.item.as_bytes();
    let mut prefixed = (data.len() as i32).to_be_bytes().to_vec();
    prefixed.extend_from_slice(data);
    let all = || members.iter().flat_map(|m| m.txns.values());
    let create = all().find(|t| t.mentions(&prefixed))?;
    let node = node_name(create, &prefixed)?;
    let mut touched: Vec<i64> = all()
        .filter(|t| t.mentions(node.as_bytes()))
        .map(|t| t.zxid)
        .collect();
    touched.sort_unstable();
    touched.dedup();
    let lost: Vec<(i64, &Hole)> = touched
        .iter()
        .filter_map(|&z| holes.iter().find(|h| h.contains(z)).map(|h| (z, h)))
        .collect();
    if let Some((_, hole)) = lost.first() {
        let zxids: Vec<String> = lost.iter().map(|(z, _)| format!("{z:#x}")).collect();
        return Some(format!(
            "{} of the {} transactions on its node {node} ({}) lie in a hole: {hole}",
            lost.len(),
            touched.len(),
            zxids.join(", ")
        ));
    }
    // Every member logged the item's history, yet the state contradicted it.
    let history: Vec<&LoggedTxn> = touched
        .iter()
        .filter_map(|z| members.iter().find_map(|m| m.txns.get(z)))
        .collect();
    let contradiction = contradictions(history).into_iter().next()?;
    Some(format!("its log contradicts the state: {contradiction}"))
}

/// The `item-<guid>` name (unique per item) of the node a queue or work-queue create
/// made with `data`: the last such name before the data, since a create serializes its
/// path, then its data (a batched put creates many items in one multi).
fn node_name(create: &LoggedTxn, data: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = b"item-";
    const GUID: usize = 32;
    let bytes = &create.bytes;
    let data_at = bytes.windows(data.len()).position(|w| w == data)?;
    (0..=data_at.checked_sub(PREFIX.len() + GUID)?)
        .rev()
        .find_map(|i| {
            let guid = &bytes[i + PREFIX.len()..i + PREFIX.len() + GUID];
            (bytes[i..].starts_with(PREFIX) && guid.iter().all(u8::is_ascii_hexdigit))
                .then(|| format!("item-{}", String::from_utf8_lossy(guid)))
        })
}

/// Judges a kept history again and traces its item violations to kept server dirs:
/// `FH_REPLAY_HISTORY=<history.log> FH_REPLAY_DATA_DIRS=<data>:<data>:<data>` (a soak
/// run with `ZK_KEEP_HISTORY=1 ZK_HARNESS_KEEP_DIRS=1` prints both).
#[test]
#[ignore = "a tool for kept soak runs"]
fn replay_a_kept_history() {
    let history = PathBuf::from(std::env::var("FH_REPLAY_HISTORY").expect("FH_REPLAY_HISTORY"));
    let dirs: Vec<PathBuf> = std::env::var("FH_REPLAY_DATA_DIRS")
        .expect("FH_REPLAY_DATA_DIRS")
        .split(':')
        .map(PathBuf::from)
        .collect();
    let mut verdict = super::judge(&history, &[]);
    verdict.trace_to_server(&dirs);
    println!("{verdict}");
    // The children's summaries are not kept: membership cannot be judged here.
    for violation in verdict
        .violations
        .iter()
        .filter(|v| !v.starts_with("membership"))
    {
        println!("violation: {violation}");
    }
}
