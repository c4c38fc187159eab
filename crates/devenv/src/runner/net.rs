//! The runner's pod network: one loopback address per replica (claimed across processes with a file
//! lock, like ports), and a TCP proxy that plays the Service on the tenant's published address.

use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr},
    sync::atomic::{AtomicUsize, Ordering},
};

use tokio::{net::TcpListener, sync::watch, task::JoinHandle};

/// A claimed loopback address; the claim ends when this is dropped (or the process dies).
#[derive(Debug)]
pub struct AddressClaim {
    ip: Ipv4Addr,
    _lock: File,
}

impl AddressClaim {
    /// The address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }
}

/// Claims a free pod address in 127.1.0.1–127.63.255.254 (disjoint from 127.0.0.0/16, which the test
/// environment uses, and from the tenant addresses in 127.128.0.0/9).
pub fn claim_address() -> std::io::Result<AddressClaim> {
    let dir = std::env::temp_dir().join("tenantplane-ports");
    std::fs::create_dir_all(&dir)?;
    let mut last_err = None;
    for _ in 0..100 {
        let r = uuid::Uuid::new_v4().as_u128();
        let ip = Ipv4Addr::new(
            127,
            1 + (r % 63) as u8,
            ((r >> 8) % 256) as u8,
            1 + ((r >> 16) % 254) as u8,
        );
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("addr-{ip}")))?;
        match file.try_lock() {
            Ok(()) => return Ok(AddressClaim { ip, _lock: file }),
            Err(err) => last_err = Some(err),
        }
    }
    Err(std::io::Error::other(format!(
        "no free loopback address after 100 tries: {last_err:?}"
    )))
}

/// A TCP proxy from a published address to the ready replicas (round robin); stops when dropped.
#[derive(Debug)]
pub struct ServiceProxy {
    address: SocketAddr,
    task: JoinHandle<()>,
}

impl ServiceProxy {
    /// Listens on `address` and forwards each connection to one of `backends`' current addresses;
    /// connections arriving while there is none are closed.
    pub async fn start(
        address: SocketAddr,
        backends: watch::Receiver<Vec<SocketAddr>>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(address).await?;
        let next = std::sync::Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let targets = backends.borrow().clone();
                if targets.is_empty() {
                    continue;
                }
                let target = targets[next.fetch_add(1, Ordering::Relaxed) % targets.len()];
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Self { address, task })
    }

    /// The published address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
