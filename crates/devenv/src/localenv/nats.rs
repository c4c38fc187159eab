//! A local NATS server with JetStream, built by `scripts/test-env`.

use std::{path::PathBuf, time::Duration};

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec},
    wait_until,
};

/// A running nats-server.
#[derive(Debug)]
pub struct LocalNats {
    child: ChildProcess,
    port: ports::PortClaim,
    monitor_port: ports::PortClaim,
}

impl LocalNats {
    /// Starts nats-server with JetStream storage under `dir`.
    pub async fn start(dir: PathBuf) -> Result<Self> {
        let bin = assets::binary("nats-server")?;
        super::install_crypto_provider();
        std::fs::create_dir_all(&dir).context("create the NATS dir")?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| LocalEnvError::Other(e.to_string()))?;
        let mut last = None;
        for _attempt in 0..3 {
            let port = ports::claim().context("claim the NATS port")?;
            let monitor_port = ports::claim().context("claim the NATS monitor port")?;
            let spec = Spec::new("nats-server", &bin).args([
                "-js".to_string(),
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.port().to_string(),
                "-m".into(),
                monitor_port.port().to_string(),
                "-sd".into(),
                dir.join("jetstream").display().to_string(),
            ]);
            let mut child = ChildProcess::spawn(&spec, &dir.join("nats.log"))?;
            let url = format!(
                "http://127.0.0.1:{}/healthz?js-enabled-only=true",
                monitor_port.port()
            );
            let ready = wait_until("nats-server", Duration::from_secs(60), &mut child, || {
                let http = http.clone();
                let url = url.clone();
                async move {
                    let r = http.get(&url).send().await.map_err(|e| e.to_string())?;
                    if r.status().is_success() {
                        Ok(())
                    } else {
                        Err(r.status().to_string())
                    }
                }
            })
            .await;
            match ready {
                Ok(()) => {
                    return Ok(Self {
                        child,
                        port,
                        monitor_port,
                    });
                }
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("nats-server did not start".into())))
    }

    /// The client port (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port.port()
    }

    /// The monitoring port (127.0.0.1).
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port.port()
    }

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port.port())
    }

    /// The bare `host:port` endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port.port())
    }

    /// The monitoring URL (`/jsz`, `/healthz`, …).
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port.port())
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}
