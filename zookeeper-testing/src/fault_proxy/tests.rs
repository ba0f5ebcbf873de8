//! Unit tests of the framing and the proxy against a fake server.

use super::*;

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

fn request(xid: i32, op: i32, payload: &[u8]) -> Vec<u8> {
    let mut body = xid.to_be_bytes().to_vec();
    body.extend_from_slice(&op.to_be_bytes());
    body.extend_from_slice(payload);
    frame(&body)
}

fn reply(xid: i32, zxid: i64, err: i32) -> Vec<u8> {
    let mut body = xid.to_be_bytes().to_vec();
    body.extend_from_slice(&zxid.to_be_bytes());
    body.extend_from_slice(&err.to_be_bytes());
    body.extend_from_slice(b"payload");
    frame(&body)
}

#[test]
fn requests_split_exactly_across_arbitrary_reads() {
    let mut stream = frame(b"connect-request");
    stream.extend(request(1, 1, b"/a"));
    stream.extend(request(PING_XID, 11, b""));
    stream.extend(request(2, 3, b"/b"));
    for chunk in [1, 3, 5, 7, stream.len()] {
        let mut p = Parser::new(Framing::Requests);
        let mut kinds = Vec::new();
        let mut total = 0;
        for piece in stream.chunks(chunk) {
            p.push(piece);
            while let Some(u) = p.next_unit() {
                total += u.bytes.len();
                kinds.push(u.kind);
            }
        }
        assert_eq!(total, stream.len());
        assert_eq!(
            kinds,
            vec![
                UnitKind::Other,
                UnitKind::Request { xid: 1, op: 1 },
                UnitKind::Ping,
                UnitKind::Request { xid: 2, op: 3 },
            ],
            "chunk size {chunk}"
        );
    }
}

#[test]
fn replies_in_one_read_are_separate_units() {
    let mut stream = frame(b"connect-response");
    stream.extend(reply(PING_XID, 5, 0));
    stream.extend(reply(7, 0x1_0000_0003, 0));
    stream.extend(reply(NOTIFICATION_XID, 0, 0));
    stream.extend(reply(8, 0x1_0000_0003, -101));
    let mut p = Parser::new(Framing::Replies);
    p.push(&stream);
    let kinds: Vec<UnitKind> = std::iter::from_fn(|| p.next_unit().map(|u| u.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            UnitKind::Other,
            UnitKind::Ping,
            UnitKind::Reply(ReplyHeader {
                xid: 7,
                zxid: 0x1_0000_0003,
                err: 0
            }),
            UnitKind::Other,
            UnitKind::Reply(ReplyHeader {
                xid: 8,
                zxid: 0x1_0000_0003,
                err: -101
            }),
        ]
    );
}

#[test]
fn a_four_letter_word_falls_back_to_raw() {
    let mut p = Parser::new(Framing::Requests);
    p.push(b"ruok");
    let u = p.next_unit().expect("a unit");
    assert_eq!(u.bytes, b"ruok");
    assert_eq!(u.kind, UnitKind::Other);
    p.push(b"more");
    assert_eq!(p.next_unit().unwrap().bytes, b"more");
}

fn quorum_packet(typ: i32, data: Option<&[u8]>, auth: &[(&str, &str)]) -> Vec<u8> {
    let mut b = typ.to_be_bytes().to_vec();
    b.extend_from_slice(&0x42i64.to_be_bytes());
    match data {
        None => b.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(d) => {
            b.extend_from_slice(&(d.len() as i32).to_be_bytes());
            b.extend_from_slice(d);
        }
    }
    b.extend_from_slice(&(auth.len() as i32).to_be_bytes());
    for (scheme, id) in auth {
        for s in [scheme, id] {
            b.extend_from_slice(&(s.len() as i32).to_be_bytes());
            b.extend_from_slice(s.as_bytes());
        }
    }
    b
}

#[test]
fn quorum_packets_are_measured_and_snap_switches_to_raw() {
    let mut stream = quorum_packet(2, Some(b"proposal"), &[]);
    stream.extend(quorum_packet(QUORUM_PING, None, &[("digest", "u:x")]));
    stream.extend(quorum_packet(4, None, &[]));
    stream.extend(quorum_packet(QUORUM_SNAP, None, &[]));
    stream.extend(b"snapshot bytes that are not packets");
    let mut p = Parser::new(Framing::Quorum);
    let mut kinds = Vec::new();
    for byte in stream.chunks(1) {
        p.push(byte);
        while let Some(u) = p.next_unit() {
            kinds.push((u.kind, u.bytes.len()));
        }
    }
    assert_eq!(kinds[0].0, UnitKind::Quorum { passes: false });
    assert_eq!(kinds[1].0, UnitKind::Quorum { passes: true });
    assert_eq!(kinds[2].0, UnitKind::Quorum { passes: false });
    assert_eq!(kinds[3].0, UnitKind::Quorum { passes: false });
    assert!(kinds[4..].iter().all(|(k, _)| *k == UnitKind::Other));
    let total: usize = kinds.iter().map(|(_, n)| n).sum();
    assert_eq!(total, stream.len());
}

#[test]
fn op_codes_have_names() {
    assert_eq!(OpCode::CREATE.to_string(), "create");
    assert_eq!(OpCode(999).to_string(), "op999");
    assert!(OpCode::MULTI.is_write());
    assert!(!OpCode::EXISTS.is_write());
}
