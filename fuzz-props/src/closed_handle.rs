//! A closed handle from a handshake-only fake server on loopback.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;
use zookeeper_mt::ZooKeeper;

/// A closed `ZooKeeper` handle, made once per process: the client connects to a
/// handshake-only fake server on loopback (it answers the connect request and replies
/// ZOK to every later request, including the close), then closes.
pub fn closed_handle() -> &'static ZooKeeper {
    static HANDLE: OnceLock<ZooKeeper> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let address = listener.local_addr().expect("local address");
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = fake_session(stream);
                });
            }
        });
        let zk = ZooKeeper::builder(&address.to_string())
            .session_timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(30))
            .connect()
            .expect("connect to the fake server");
        zk.close().expect("close");
        zk
    })
}

fn read_frame(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body)?;
    Ok(body)
}

fn write_frame(stream: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    stream.write_all(&frame)
}

/// Serves one client connection: the ConnectResponse (protocol 0, timeout, session id,
/// 16-byte password, readOnly), then a ReplyHeader (xid, zxid, ZOK) per request.
fn fake_session(mut stream: TcpStream) -> io::Result<()> {
    read_frame(&mut stream)?;
    let mut response = Vec::new();
    response.extend_from_slice(&0i32.to_be_bytes());
    response.extend_from_slice(&30_000i32.to_be_bytes());
    response.extend_from_slice(&0x5eed_i64.to_be_bytes());
    response.extend_from_slice(&16i32.to_be_bytes());
    response.extend_from_slice(&[7u8; 16]);
    response.push(0);
    write_frame(&mut stream, &response)?;
    loop {
        let request = read_frame(&mut stream)?;
        if request.len() < 8 {
            return Ok(());
        }
        let mut reply = request[..4].to_vec(); // xid
        reply.extend_from_slice(&1i64.to_be_bytes()); // zxid
        reply.extend_from_slice(&0i32.to_be_bytes()); // err
        write_frame(&mut stream, &reply)?;
        if request[4..8] == (-11i32).to_be_bytes() {
            return Ok(()); // closeSession
        }
    }
}
