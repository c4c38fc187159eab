//! A local credential issuer: a throwaway CA and an HTTPS listener on loopback for `serve`, so the tenant
//! kube-apiservers of this machine can fetch the issuer's discovery and keys (`make run` and the tests).

use std::{net::IpAddr, sync::Arc};

use tenantplane_api::tls::{TlsListener, server_config};
use tenantplane_core::translate::ClusterIssuer;
use tenantplane_pki::Ca;

/// A bound HTTPS listener and the issuer it serves (`https://127.0.0.1:<port>/credentials`).
#[derive(Debug)]
pub struct LocalIssuer {
    /// The listener to serve the API's router on.
    pub listener: TlsListener,
    /// The issuer, with its CA.
    pub issuer: ClusterIssuer,
}

/// Makes a CA and a serving certificate for 127.0.0.1 and binds `127.0.0.1:0` over TLS.
pub async fn start() -> anyhow::Result<LocalIssuer> {
    crate::localenv::install_crypto_provider();
    let ca = Ca::new("tenantplane-local-issuer-ca")?;
    let ip: IpAddr = [127, 0, 0, 1].into();
    let leaf = ca.server("tenantplane-issuer", &["localhost"], &[ip])?;
    let config =
        server_config(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes()).map_err(anyhow::Error::msg)?;
    let tcp = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = tcp.local_addr()?;
    Ok(LocalIssuer {
        listener: TlsListener::new(tcp, Arc::new(config))?,
        issuer: ClusterIssuer {
            url: format!("https://{addr}/credentials"),
            certificate_authority: Some(ca.ca.cert_pem.clone()),
        },
    })
}
