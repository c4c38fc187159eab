//! Local processes for development and tests: PostgreSQL, etcd, kube-apiserver (+ controller-manager),
//! kine, MariaDB and NATS, started from installed packages or the binaries `scripts/test-env` builds.
//!
//! The same code backs `tenantplane serve` without `DATABASE_URL` (a throwaway local PostgreSQL) and the
//! integration-test harness. Every process is a child that dies with us (see [`process`]).

use tenantplane_pki as pki;

pub mod assets;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod telemetry;

use std::{
    future::Future,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Errors from starting or talking to a local process.
#[derive(Debug, thiserror::Error)]
pub enum LocalEnvError {
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Spawning or waiting for a process failed.
    #[error("process error: {0}")]
    Process(#[from] std::io::Error),
    /// A child exited while starting.
    #[error(transparent)]
    Exited(#[from] process::ExitedEarly),
    /// A child did not become ready in time.
    #[error("{what} was not ready after {seconds}s: {last_error}")]
    Timeout {
        /// The component.
        what: String,
        /// The timeout.
        seconds: u64,
        /// The last readiness error seen.
        last_error: String,
    },
    /// A required binary is missing.
    #[error("{0}")]
    MissingBinary(String),
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Pki(#[from] crate::pki::PkiError),
    /// Anything else, with a message.
    #[error("{0}")]
    Other(String),
}

/// Result alias for this module.
pub type Result<T, E = LocalEnvError> = std::result::Result<T, E>;

/// Adds context to I/O errors.
pub trait IoContext<T> {
    fn context(self, context: impl Into<String>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|source| LocalEnvError::Io {
            context: context.into(),
            source,
        })
    }
}

/// The per-process scratch directory `$TMPDIR/tenantplane-<pid>`; directories of dead processes are removed.
pub fn workdir() -> Result<PathBuf> {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix("tenantplane-")
                .and_then(|p| p.parse::<u32>().ok())
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("tenantplane-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context(format!("create {}", dir.display()))?;
    Ok(dir)
}

/// A fresh, uniquely named directory below [`workdir`].
pub fn scratch_dir(prefix: &str) -> Result<PathBuf> {
    let dir = workdir()?.join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).context(format!("create {}", dir.display()))?;
    Ok(dir)
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective uid).
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// The uid and gid of a local user, read from `/etc/passwd`.
pub fn user_ids(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&user))
            .then(|| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
            .flatten()
    })
}

/// Polls `probe` every `interval` until it succeeds, the child dies, or `timeout` passes.
pub async fn wait_until<F, Fut, T>(
    what: &str,
    timeout: Duration,
    child: &mut process::ChildProcess,
    mut probe: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, String>>,
{
    let start = Instant::now();
    loop {
        child.check_running()?;
        let last_error = match probe().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        if start.elapsed() > timeout {
            return Err(LocalEnvError::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs(),
                last_error: format!("{last_error}\nlog tail:\n{}", child.log_tail(20)),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a TCP connection to `127.0.0.1:port` succeeds.
pub async fn port_open(port: u16) -> std::result::Result<(), String> {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Installs the process-wide rustls crypto provider (ring); safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
