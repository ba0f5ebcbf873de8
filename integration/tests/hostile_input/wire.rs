//! Just enough of the ZooKeeper wire protocol to put any bytes in a request path,
//! bypassing every client-side check.

use super::*;

/// What the server did with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A reply with this error code, and the body (e.g. a created path).
    Reply(i32, Vec<u8>),
    /// The server closed the connection instead of answering.
    Closed,
}

impl Verdict {
    pub fn accepts_path(&self) -> bool {
        matches!(self, Verdict::Reply(rc, _) if *rc != sys::ZBADARGUMENTS)
    }

    /// For a create: the node was made (or exists). NONODE does not count: the
    /// server looks the parent up before it validates the new name, so a path whose
    /// parent cannot exist (`B//`) gets NONODE.
    pub fn creates(&self) -> bool {
        matches!(self, Verdict::Reply(rc, _) if *rc == sys::ZOK || *rc == sys::ZNODEEXISTS)
    }

    pub fn describe(&self) -> String {
        match self {
            Verdict::Reply(rc, _) => rc_name(*rc),
            Verdict::Closed => "connection closed".into(),
        }
    }

    /// The path in a create reply.
    pub fn created(&self) -> Option<String> {
        match self {
            Verdict::Reply(0, body) if body.len() >= 4 => {
                let len = i32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
                Some(String::from_utf8_lossy(body.get(4..4 + len)?).into_owned())
            }
            _ => None,
        }
    }
}

pub struct Session {
    stream: TcpStream,
    xid: i32,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
    out.extend_from_slice(bytes);
}

impl Session {
    pub fn connect(address: &str) -> io::Result<Session> {
        let stream = TcpStream::connect(address)?;
        stream.set_read_timeout(Some(WAIT))?;
        stream.set_write_timeout(Some(WAIT))?;
        let mut session = Session { stream, xid: 0 };
        // ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd,
        // readOnly.
        let mut body = Vec::new();
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        body.extend_from_slice(&10_000i32.to_be_bytes());
        body.extend_from_slice(&0i64.to_be_bytes());
        put_bytes(&mut body, &[0; 16]);
        body.push(0);
        session.send(&body)?;
        let response = session.recv()?;
        if response.len() < 16 || response[8..16] == [0; 8] {
            return Err(io::Error::other("no session in the ConnectResponse"));
        }
        Ok(session)
    }

    fn send(&mut self, body: &[u8]) -> io::Result<()> {
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        self.stream.write_all(&frame)
    }

    fn recv(&mut self) -> io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body)?;
        Ok(body)
    }

    /// Sends one request (`op` code and body); the server's verdict.
    pub fn request(&mut self, op: i32, body: &[u8]) -> Verdict {
        self.xid += 1;
        let mut frame = self.xid.to_be_bytes().to_vec();
        frame.extend_from_slice(&op.to_be_bytes());
        frame.extend_from_slice(body);
        if self.send(&frame).is_err() {
            return Verdict::Closed;
        }
        loop {
            let Ok(reply) = self.recv() else {
                return Verdict::Closed;
            };
            // ReplyHeader: xid, zxid, err. Skip anything that is not our reply.
            let xid = i32::from_be_bytes(reply[..4].try_into().unwrap());
            if xid == self.xid {
                let err = i32::from_be_bytes(reply[12..16].try_into().unwrap());
                return Verdict::Reply(err, reply[16..].to_vec());
            }
        }
    }

    /// SetData(path, empty data, version 123456): the server validates the path
    /// before anything else (BADARGUMENTS), then looks the node up (NONODE or
    /// BADVERSION).
    pub fn set_data(&mut self, path: &[u8]) -> Verdict {
        let mut body = Vec::new();
        put_bytes(&mut body, path);
        put_bytes(&mut body, b"");
        body.extend_from_slice(&123_456i32.to_be_bytes());
        self.request(5, &body)
    }

    /// Create(path, empty data, world:anyone ALL, flags).
    pub fn create(&mut self, path: &[u8], flags: i32) -> Verdict {
        let mut body = Vec::new();
        put_bytes(&mut body, path);
        put_bytes(&mut body, b"");
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&31i32.to_be_bytes());
        put_bytes(&mut body, b"world");
        put_bytes(&mut body, b"anyone");
        body.extend_from_slice(&flags.to_be_bytes());
        self.request(1, &body)
    }

    pub fn close(mut self) {
        let _ = self.request(-11, &[]);
    }
}
