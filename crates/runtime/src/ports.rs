//! Free loopback ports that stay claimed across parallel test processes.
//!
//! A port is found by binding `127.0.0.1:0`, then claimed with an exclusive file lock in a shared
//! directory, held for as long as the [`PortClaim`] lives. Another process (another test binary, or
//! nextest's per-test processes) that finds the same port sees the lock and picks again.

use std::{fs::File, net::TcpListener, path::PathBuf};

/// A claimed port; the claim ends when this is dropped (or the process dies).
#[derive(Debug)]
pub struct PortClaim {
    port: u16,
    _lock: File,
}

impl PortClaim {
    /// The claimed port number.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn lock_dir() -> PathBuf {
    std::env::temp_dir().join("tenantplane-ports")
}

/// Finds and claims a free port on 127.0.0.1.
pub fn claim() -> std::io::Result<PortClaim> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir)?;
    let mut last_err = None;
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("port-{port}")))?;
        match file.try_lock() {
            Ok(()) => return Ok(PortClaim { port, _lock: file }),
            Err(err) => last_err = Some(err),
        }
    }
    Err(std::io::Error::other(format!(
        "no free port after 100 tries: {last_err:?}"
    )))
}
