//! `serve`: one standalone server for work outside the runner (the profiling script):
//! prints `HOSTS <connect string>` and keeps the server until stdin closes; the harness
//! stops it (and removes its files) on the way out.

use crate::flags::Flags;
use crate::rust_client::Result;
use std::io::Read;
use zk_harness::{Server, ServerOptions};

pub fn main(flags: &Flags) -> Result<()> {
    if let Some(bad) = flags.unknown(&["fsync"]).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let fsync = match flags.get("fsync").unwrap_or("off") {
        "on" => true,
        "off" => false,
        other => return Err(format!("--fsync on|off, not {other:?}").into()),
    };
    let server = Server::start_with(
        &ServerOptions::new()
            .force_sync(fsync)
            .fast_startup(false)
            .log_level("WARN"),
    )?;
    println!("HOSTS {}", server.connect_string());
    // Until stdin reaches EOF (the caller closed it or exited).
    let mut sink = [0u8; 256];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    drop(server);
    Ok(())
}
