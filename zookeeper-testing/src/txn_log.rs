//! Reading a server's transaction log, to tell a recipe's fault from the ensemble's.
//!
//! A recipe can only keep its guarantees if the ensemble keeps what it committed. The
//! 3.8.0 server does not always: a member that crashes or restarts around a leader
//! change can apply transactions during its sync with the leader without logging them
//! (ZOOKEEPER-4785; also ZOOKEEPER-4643, ZOOKEEPER-4646), leaving a hole in its log.
//! Rebuilt from that log after a restart, and elected leader, it hands the rest of the
//! ensemble a history without those transactions: deleted nodes come back, completed
//! work reappears. [`holes`] finds such holes by comparing the members' logs:
//! transactions a quorum logged that another member lacks although it logged later
//! transactions of the same epoch.
//!
//! The format (the server's `FileTxnLog`): a 16-byte header (magic `ZKLG`, version,
//! database id), then records of a CRC (8 bytes), a length (4), the serialized
//! transaction header and body, and an end-of-record byte `B`; a zero length ends the
//! log (the rest of the file is preallocated zeros). The header starts with the session
//! (8 bytes) and cxid (4), then the zxid (8).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::Path;

/// `ZKLG`, the first four bytes of every transaction log file.
const MAGIC: &[u8; 4] = b"ZKLG";
const FILE_HEADER: usize = 16;
const END_OF_RECORD: u8 = b'B';

/// One logged transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedTxn {
    /// Its zxid (epoch in the high 32 bits, counter in the low 32).
    pub zxid: i64,
    /// The serialized transaction (header and body), for searching paths and data in.
    pub bytes: Vec<u8>,
}

/// What one (sub-)transaction did to a node, as far as the checks here need to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeChange {
    /// A create of any kind (plain, container, TTL).
    Created(String),
    /// A delete.
    Deleted(String),
    /// A data write.
    DataSet(String),
    /// Anything else (checks, ACLs, sessions, errors of a failed multi).
    Other,
}

/// The server's transaction types (`ZooDefs.OpCode`) the checks read.
const CREATE: i32 = 1;
const DELETE: i32 = 2;
const SET_DATA: i32 = 5;
const MULTI: i32 = 14;
const CREATE2: i32 = 15;
const CREATE_CONTAINER: i32 = 19;
const CREATE_TTL: i32 = 21;
const ERROR: i32 = -1;
/// The header: session (8), cxid (4), zxid (8), time (8), type (4).
const TXN_HEADER: usize = 32;

impl LoggedTxn {
    /// Whether `needle` occurs in the serialized transaction (a path, a node name, data).
    pub fn mentions(&self, needle: &[u8]) -> bool {
        !needle.is_empty() && self.bytes.windows(needle.len()).any(|w| w == needle)
    }

    /// The transaction's type (`ZooDefs.OpCode`; 14 is a multi).
    pub fn txn_type(&self) -> i32 {
        be_i32(&self.bytes, 28).unwrap_or(ERROR)
    }

    /// What the transaction did: one change, or one per operation of a multi. A failed
    /// multi is logged too (its operations as errors): it changed nothing.
    pub fn changes(&self) -> Vec<NodeChange> {
        let body = &self.bytes[TXN_HEADER.min(self.bytes.len())..];
        if self.txn_type() != MULTI {
            return vec![change(self.txn_type(), body)];
        }
        let mut changes = Vec::new();
        let Some(count) = be_i32(body, 0) else {
            return changes;
        };
        let mut at = 4;
        for _ in 0..count.max(0) {
            let (Some(kind), Some(len)) = (be_i32(body, at), be_i32(body, at + 4)) else {
                break;
            };
            let start = at + 8;
            let Some(sub) = usize::try_from(len)
                .ok()
                .and_then(|l| body.get(start..start + l))
            else {
                break;
            };
            if kind == ERROR {
                return Vec::new();
            }
            changes.push(change(kind, sub));
            at = start + sub.len();
        }
        changes
    }
}

fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// A (sub-)transaction body of `kind`: every kind read here starts with the path.
fn change(kind: i32, body: &[u8]) -> NodeChange {
    let path = || {
        let len = usize::try_from(be_i32(body, 0)?).ok()?;
        Some(String::from_utf8_lossy(body.get(4..4 + len)?).into_owned())
    };
    match (kind, path()) {
        (CREATE | CREATE2 | CREATE_CONTAINER | CREATE_TTL, Some(p)) => NodeChange::Created(p),
        (DELETE, Some(p)) => NodeChange::Deleted(p),
        (SET_DATA, Some(p)) => NodeChange::DataSet(p),
        _ => NodeChange::Other,
    }
}

/// A write the log shows applied to a node that the log had already deleted (no create
/// in between): the server's state had lost that delete, whatever its log says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// The node.
    pub path: String,
    /// The logged delete the state lost.
    pub deleted_at: i64,
    /// The later write that found the node there anyway.
    pub applied_at: i64,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} was deleted at {:#x} and written again at {:#x} with no create between: \
             the server's state had lost a logged delete",
            self.path, self.deleted_at, self.applied_at
        )
    }
}

/// The contradictions in `txns` (in zxid order): deletes or data writes applied to a node
/// the log had deleted before, with no create of it between. Sessions ending remove
/// ephemeral nodes without naming them, so only an explicit delete counts as the first.
pub fn contradictions<'a>(txns: impl IntoIterator<Item = &'a LoggedTxn>) -> Vec<Contradiction> {
    let mut deleted: BTreeMap<String, i64> = BTreeMap::new();
    let mut found = Vec::new();
    for txn in txns {
        for change in txn.changes() {
            let contradicted = |path: &str, deleted_at: i64| Contradiction {
                path: path.to_string(),
                deleted_at,
                applied_at: txn.zxid,
            };
            match change {
                NodeChange::Created(path) => {
                    deleted.remove(&path);
                }
                NodeChange::Deleted(path) => {
                    if let Some(&at) = deleted.get(&path) {
                        found.push(contradicted(&path, at));
                    }
                    deleted.insert(path, txn.zxid);
                }
                NodeChange::DataSet(path) => {
                    if let Some(&at) = deleted.get(&path) {
                        found.push(contradicted(&path, at));
                    }
                }
                NodeChange::Other => {}
            }
        }
    }
    found
}

/// Every transaction in the `log.*` files of a server's data directory (its
/// `version-2` subdirectory), by zxid. A truncated last record (a crash mid-write) ends
/// that file's reading.
pub fn read_data_dir(data_dir: &Path) -> io::Result<BTreeMap<i64, LoggedTxn>> {
    let mut txns = BTreeMap::new();
    let dir = data_dir.join("version-2");
    for entry in fs::read_dir(&dir)? {
        let path = entry?.path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("log."));
        if is_log {
            for txn in parse_log(&fs::read(&path)?) {
                txns.entry(txn.zxid).or_insert(txn);
            }
        }
    }
    Ok(txns)
}

/// The transactions in one log file's contents (nothing if it is not a log file).
pub fn parse_log(file: &[u8]) -> Vec<LoggedTxn> {
    let mut txns = Vec::new();
    if file.len() < FILE_HEADER || &file[..4] != MAGIC {
        return txns;
    }
    let mut at = FILE_HEADER;
    while let Some(len) = file.get(at + 8..at + 12) {
        let len = i32::from_be_bytes(len.try_into().expect("4 bytes"));
        let start = at + 12;
        let Ok(len) = usize::try_from(len) else { break };
        if len < 20 || file.get(start + len) != Some(&END_OF_RECORD) {
            break;
        }
        let bytes = file[start..start + len].to_vec();
        let zxid = i64::from_be_bytes(bytes[12..20].try_into().expect("8 bytes"));
        txns.push(LoggedTxn { zxid, bytes });
        at = start + len + 1;
    }
    txns
}

/// What a member has on disk: its logged transactions and the zxids of its snapshots.
#[derive(Debug, Clone, Default)]
pub struct MemberLog {
    /// Every logged transaction, by zxid.
    pub txns: BTreeMap<i64, LoggedTxn>,
    /// The zxid of each `snapshot.<zxid>` file.
    pub snapshots: BTreeSet<i64>,
}

impl MemberLog {
    /// Reads a member's data directory (its `version-2` subdirectory).
    pub fn read(data_dir: &Path) -> io::Result<MemberLog> {
        let mut snapshots = BTreeSet::new();
        for entry in fs::read_dir(data_dir.join("version-2"))? {
            let path = entry?.path();
            let zxid = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("snapshot."))
                .and_then(|z| i64::from_str_radix(z, 16).ok());
            snapshots.extend(zxid);
        }
        Ok(MemberLog {
            txns: read_data_dir(data_dir)?,
            snapshots,
        })
    }
}

/// A run of consecutive zxids one member lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hole {
    /// The member (index into the logs given to [`holes`]).
    pub member: usize,
    /// The zxids it lacks, consecutive, each logged by a majority of the members.
    pub zxids: BTreeSet<i64>,
}

impl Hole {
    /// Whether the hole holds `zxid`.
    pub fn contains(&self, zxid: i64) -> bool {
        self.zxids.contains(&zxid)
    }
}

impl std::fmt::Display for Hole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first = self.zxids.first().copied().unwrap_or(0);
        let last = self.zxids.last().copied().unwrap_or(0);
        write!(
            f,
            "member {} lacks {} transaction(s) {first:#x}..={last:#x} that a majority logged, \
             with later ones of that epoch logged and no snapshot covering them",
            self.member,
            self.zxids.len()
        )
    }
}

/// The holes in each member's log: runs of zxids that a majority of the members logged
/// but a member did not, although it logged a later zxid of the same epoch (so it was
/// following then, not down) and took no snapshot between the run and that later zxid
/// (a member synced by snapshot has the run in the snapshot, not in its log). A member
/// down or behind at the end of an epoch has no hole: it catches up by the protocol.
pub fn holes(members: &[MemberLog]) -> Vec<Hole> {
    let majority = members.len() / 2 + 1;
    let all: BTreeSet<i64> = members
        .iter()
        .flat_map(|m| m.txns.keys().copied())
        .collect();
    let mut found = Vec::new();
    for (member, log) in members.iter().enumerate() {
        let mut run: BTreeSet<i64> = BTreeSet::new();
        let mut close = |run: &mut BTreeSet<i64>| {
            let (Some(&first), Some(&last)) = (run.first(), run.last()) else {
                return;
            };
            let epoch_end = (first >> 32) << 32 | 0xffff_ffff;
            let next_logged = log.txns.range(last + 1..=epoch_end).next().map(|(&z, _)| z);
            let covered =
                next_logged.is_some_and(|next| log.snapshots.range(last..next).next().is_some());
            if next_logged.is_some() && !covered {
                found.push(Hole {
                    member,
                    zxids: std::mem::take(run),
                });
            }
            run.clear();
        };
        for &zxid in &all {
            let missing = !log.txns.contains_key(&zxid)
                && members
                    .iter()
                    .filter(|m| m.txns.contains_key(&zxid))
                    .count()
                    >= majority;
            if !missing || run.last().is_some_and(|&last| last + 1 != zxid) {
                close(&mut run);
            }
            if missing {
                run.insert(zxid);
            }
        }
        close(&mut run);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(zxid: i64, body: &[u8]) -> Vec<u8> {
        let mut txn = Vec::new();
        txn.extend_from_slice(&7i64.to_be_bytes()); // session
        txn.extend_from_slice(&1i32.to_be_bytes()); // cxid
        txn.extend_from_slice(&zxid.to_be_bytes());
        txn.extend_from_slice(&0i64.to_be_bytes()); // time
        txn.extend_from_slice(&1i32.to_be_bytes()); // type
        txn.extend_from_slice(body);
        let mut out = 0i64.to_be_bytes().to_vec(); // crc (not checked)
        out.extend_from_slice(&(txn.len() as i32).to_be_bytes());
        out.extend_from_slice(&txn);
        out.push(END_OF_RECORD);
        out
    }

    fn file(records: &[Vec<u8>]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&2i32.to_be_bytes());
        f.extend_from_slice(&0i64.to_be_bytes());
        for r in records {
            f.extend_from_slice(r);
        }
        f.extend_from_slice(&[0; 64]); // preallocated
        f
    }

    fn log(zxids: &[i64]) -> MemberLog {
        MemberLog {
            txns: parse_log(&file(
                &zxids.iter().map(|&z| record(z, b"")).collect::<Vec<_>>(),
            ))
            .into_iter()
            .map(|t| (t.zxid, t))
            .collect(),
            snapshots: BTreeSet::new(),
        }
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = (s.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out
    }

    /// A logged multi of `(kind, path)` operations (an `ERROR` kind makes it a failed one).
    fn multi(zxid: i64, ops: &[(i32, &str)]) -> LoggedTxn {
        let mut body = (ops.len() as i32).to_be_bytes().to_vec();
        for &(kind, path) in ops {
            let sub = if kind == ERROR {
                (-101i32).to_be_bytes().to_vec()
            } else {
                string(path)
            };
            body.extend_from_slice(&kind.to_be_bytes());
            body.extend_from_slice(&(sub.len() as i32).to_be_bytes());
            body.extend_from_slice(&sub);
        }
        let mut bytes = 7i64.to_be_bytes().to_vec();
        bytes.extend_from_slice(&1i32.to_be_bytes());
        bytes.extend_from_slice(&zxid.to_be_bytes());
        bytes.extend_from_slice(&0i64.to_be_bytes());
        bytes.extend_from_slice(&MULTI.to_be_bytes());
        bytes.extend_from_slice(&body);
        LoggedTxn { zxid, bytes }
    }

    #[test]
    fn a_second_delete_without_a_create_between_is_a_contradiction() {
        let q = "/q/item-1";
        let log = [
            multi(1, &[(CREATE, q), (CREATE, "/q/receipt")]),
            multi(2, &[(DELETE, q), (CREATE, "/q/took")]),
            multi(3, &[(DELETE, q), (ERROR, "")]), // failed: changed nothing
            multi(4, &[(DELETE, q), (CREATE, "/q/took-2")]),
        ];
        assert_eq!(log[1].changes()[0], NodeChange::Deleted(q.to_string()));
        assert!(log[2].changes().is_empty());
        let found = contradictions(&log);
        assert_eq!(
            found,
            [Contradiction {
                path: q.to_string(),
                deleted_at: 2,
                applied_at: 4
            }]
        );
        // Created again in between: no contradiction; a data write after the delete is one.
        let recreated = [
            multi(1, &[(DELETE, q)]),
            multi(2, &[(CREATE, q)]),
            multi(3, &[(DELETE, q)]),
            multi(4, &[(SET_DATA, q)]),
        ];
        let found = contradictions(&recreated);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].deleted_at, found[0].applied_at), (3, 4));
    }

    #[test]
    fn records_parse_until_the_preallocated_zeros() {
        let f = file(&[
            record(0x1_0000_0001, b"/a/item-1"),
            record(0x1_0000_0002, b"x"),
        ]);
        let txns = parse_log(&f);
        assert_eq!(
            txns.iter().map(|t| t.zxid).collect::<Vec<_>>(),
            [0x1_0000_0001, 0x1_0000_0002]
        );
        assert!(txns[0].mentions(b"item-1") && !txns[1].mentions(b"item-1"));
        // A record cut short by a crash ends the reading; garbage is no log.
        assert_eq!(parse_log(&f[..f.len() - 70]).len(), 1);
        assert!(parse_log(b"not a log file at all").is_empty());
    }

    #[test]
    fn a_hole_is_what_a_quorum_logged_and_a_following_member_skipped() {
        let e = 0x13_i64 << 32;
        let full = log(&[e + 1, e + 2, e + 3, e + 4]);
        let holed = log(&[e + 1, e + 4]);
        let found = holes(&[holed, full.clone(), full.clone()]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].member, 0);
        assert_eq!(found[0].zxids, BTreeSet::from([e + 2, e + 3]));
        assert!(found[0].to_string().contains("0x1300000002..=0x1300000003"));
        // Down from e+3 on (nothing later in that epoch): behind, not holed.
        let behind = log(&[e + 1, e + 2]);
        assert!(holes(&[full.clone(), full.clone(), behind]).is_empty());
        // Logged by one member only: not committed, so not missing.
        assert!(holes(&[full.clone(), log(&[e + 1, e + 4]), log(&[e + 1, e + 4])]).is_empty());
        // Synced by a snapshot at the run's end: in the snapshot, not lost.
        let mut snapped = log(&[e + 1, e + 4]);
        snapped.snapshots.insert(e + 3);
        assert!(holes(&[snapped, full.clone(), full.clone()]).is_empty());
        // Two runs are two holes.
        let wide = log(&[e + 1, e + 2, e + 3, e + 4, e + 5]);
        let found = holes(&[log(&[e + 1, e + 3, e + 5]), wide.clone(), wide]);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[1].contains(e + 4) && !found[1].contains(e + 2));
    }
}
