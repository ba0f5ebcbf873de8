//! Framing: splitting each direction's byte stream into ZooKeeper frames (client
//! requests and replies, quorum packets) without buffering more than one frame.

use super::*;

// ---------------------------------------------------------------- framing

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// Client to server: ConnectRequest, then RequestHeader frames.
    Requests,
    /// Server to client: ConnectResponse, then ReplyHeader frames.
    Replies,
    /// Leader to learner: QuorumPackets (not length-prefixed).
    Quorum,
    /// Unparsed.
    Raw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitKind {
    /// Handshake frames, notifications, unparsed bytes, frames too short for a header.
    Other,
    Ping,
    Request {
        xid: i32,
        op: i32,
    },
    Reply(ReplyHeader),
    /// A QuorumPacket; `passes` for pings and revalidations.
    Quorum {
        passes: bool,
    },
}

pub(super) struct Unit {
    pub(super) kind: UnitKind,
    pub(super) bytes: Vec<u8>,
}

/// Splits a byte stream into frames.
pub(super) struct Parser {
    pub(super) framing: Framing,
    pub(super) buf: Vec<u8>,
    pub(super) handshake_done: bool,
}

/// Quorum packet types that pass while the leader stream is held.
pub(super) const QUORUM_PING: i32 = 5;
pub(super) const QUORUM_REVALIDATE: i32 = 6;
/// After SNAP the leader writes a serialized snapshot that is not QuorumPacket framing.
pub(super) const QUORUM_SNAP: i32 = 15;

pub(super) fn be_i32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

pub(super) fn be_i64(b: &[u8], at: usize) -> Option<i64> {
    let s = b.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(i64::from_be_bytes(a))
}

/// Outcome of measuring the next frame in a buffer.
pub(super) enum Measure {
    /// The frame is this many bytes long.
    Complete(usize),
    /// More bytes are needed.
    Incomplete,
    /// Not this framing.
    Invalid,
}

/// A jute length-prefixed field (buffer or string) at `at`: -1 is null. Returns the end.
pub(super) fn jute_field(b: &[u8], at: usize) -> std::result::Result<usize, Measure> {
    let len = be_i32(b, at).ok_or(Measure::Incomplete)?;
    if len == -1 {
        return Ok(at + 4);
    }
    if len < 0 || len as usize > MAX_FRAME {
        return Err(Measure::Invalid);
    }
    Ok(at + 4 + len as usize)
}

/// Length of the QuorumPacket at the start of `b`: type i32, zxid i64, data buffer,
/// authinfo vector of Id {scheme string, id string}.
pub(super) fn measure_quorum_packet(b: &[u8]) -> Measure {
    let walk = || -> std::result::Result<usize, Measure> {
        let mut at = jute_field(b, 12)?;
        let count = be_i32(b, at).ok_or(Measure::Incomplete)?;
        at += 4;
        if !(-1..=1 << 20).contains(&count) {
            return Err(Measure::Invalid);
        }
        for _ in 0..count.max(0) {
            at = jute_field(b, at)?;
            at = jute_field(b, at)?;
        }
        Ok(at)
    };
    match walk() {
        Ok(end) if end <= b.len() => Measure::Complete(end),
        Ok(_) => Measure::Incomplete,
        Err(m) => m,
    }
}

impl Parser {
    pub(super) fn new(framing: Framing) -> Parser {
        Parser {
            framing,
            buf: Vec::new(),
            handshake_done: false,
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub(super) fn take_rest(&mut self) -> Option<Vec<u8>> {
        (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf))
    }

    pub(super) fn split(&mut self, len: usize, kind: UnitKind) -> Unit {
        let rest = self.buf.split_off(len);
        let bytes = std::mem::replace(&mut self.buf, rest);
        Unit { kind, bytes }
    }

    pub(super) fn next_unit(&mut self) -> Option<Unit> {
        if self.buf.is_empty() {
            return None;
        }
        let measure = match self.framing {
            Framing::Raw => Measure::Invalid,
            Framing::Quorum => measure_quorum_packet(&self.buf),
            Framing::Requests | Framing::Replies => match be_i32(&self.buf, 0) {
                None => Measure::Incomplete,
                Some(len) if len < 0 || len as usize > MAX_FRAME => Measure::Invalid,
                Some(len) if self.buf.len() < 4 + len as usize => Measure::Incomplete,
                Some(len) => Measure::Complete(4 + len as usize),
            },
        };
        let len = match measure {
            Measure::Incomplete => return None,
            Measure::Invalid => {
                // Not (or no longer) this framing: forward the rest of the stream as is.
                self.framing = Framing::Raw;
                let bytes = std::mem::take(&mut self.buf);
                return Some(Unit {
                    kind: UnitKind::Other,
                    bytes,
                });
            }
            Measure::Complete(len) => len,
        };
        let b = &self.buf;
        let kind = match self.framing {
            Framing::Quorum => {
                let typ = be_i32(b, 0).unwrap_or(0);
                if typ == QUORUM_SNAP {
                    self.framing = Framing::Raw;
                }
                UnitKind::Quorum {
                    passes: typ == QUORUM_PING || typ == QUORUM_REVALIDATE,
                }
            }
            _ if !self.handshake_done => {
                self.handshake_done = true;
                UnitKind::Other
            }
            Framing::Requests => match (be_i32(b, 4), be_i32(b, 8)) {
                (Some(PING_XID), Some(_)) => UnitKind::Ping,
                (Some(xid), Some(op)) => UnitKind::Request { xid, op },
                _ => UnitKind::Other,
            },
            Framing::Replies => match (be_i32(b, 4), be_i64(b, 8), be_i32(b, 16)) {
                (Some(PING_XID), _, _) => UnitKind::Ping,
                (Some(NOTIFICATION_XID), _, _) => UnitKind::Other,
                (Some(xid), Some(zxid), Some(err)) if len >= 20 => {
                    UnitKind::Reply(ReplyHeader { xid, zxid, err })
                }
                _ => UnitKind::Other,
            },
            Framing::Raw => UnitKind::Other,
        };
        Some(self.split(len, kind))
    }
}
