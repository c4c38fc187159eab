//! HTTPS for the API and the credential issuer: tenant kube-apiservers fetch the issuer's discovery
//! document and JWKS over https only. TLS handshakes run off the accept loop, each with a deadline.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
use tokio::{net::TcpListener, sync::mpsc};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

/// Longest a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A rustls server configuration from a PEM certificate chain and a PEM private key (HTTP/1.1).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<rustls::ServerConfig, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the TLS certificate file is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("the TLS certificate file holds no certificate".into());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("the TLS key file holds no private key: {e}"))?;
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("the TLS certificate and key do not fit: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A listener that hands out TLS streams whose handshake succeeded (an axum [`axum::serve::Listener`]).
#[derive(Debug)]
pub struct TlsListener {
    accepted: mpsc::Receiver<(TlsStream<tokio::net::TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener` and runs each handshake in its own task.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (tx, accepted) = mpsc::channel(64);
        let acceptor = TlsAcceptor::from(config);
        let task = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(pair) => pair,
                    Err(err) => {
                        tracing::debug!("TLS accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(err)) => tracing::debug!(%peer, "TLS handshake failed: {err}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { accepted, addr, task })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(pair) => pair,
            // The accept task only ends when aborted (on drop); never hand out a stream after that.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
