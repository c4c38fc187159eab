//! A local kine: an etcd-compatible endpoint over PostgreSQL, MySQL/MariaDB or NATS JetStream.

use std::{path::PathBuf, time::Duration};

use super::{
    IoContext, LocalEnvError, Result, assets, port_open, ports,
    process::{ChildProcess, Spec},
    wait_until,
};

/// A running kine process.
#[derive(Debug)]
pub struct LocalKine {
    child: ChildProcess,
    port: ports::PortClaim,
}

impl LocalKine {
    /// Starts kine on `endpoint` (a kine DSN such as `postgres://…`, `mysql://…` or `nats://…`).
    pub async fn start(dir: PathBuf, endpoint: &str) -> Result<Self> {
        let kine = assets::binary("kine")?;
        std::fs::create_dir_all(&dir).context("create the kine dir")?;
        let mut last = None;
        for _attempt in 0..3 {
            let port = ports::claim().context("claim the kine port")?;
            // The DSN (with its password) goes in kine's environment, never on its command line.
            let spec = Spec::new("kine", &kine)
                .args([
                    format!("--listen-address=127.0.0.1:{}", port.port()),
                    "--metrics-bind-address=0".into(),
                    "--compact-interval=0".into(),
                ])
                .env("KINE_ENDPOINT", endpoint);
            let mut child = ChildProcess::spawn(&spec, &dir.join("kine.log"))?;
            let p = port.port();
            // kine opens its listener only after it reached the backend and created its schema.
            match wait_until("kine", Duration::from_secs(60), &mut child, || port_open(p)).await {
                Ok(()) => return Ok(Self { child, port }),
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("kine did not start".into())))
    }

    /// The etcd-protocol URL for kube-apiserver's `--etcd-servers`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port.port())
    }

    /// The kine process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }
}
