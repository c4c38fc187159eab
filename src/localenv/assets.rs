//! Where the binaries built by `scripts/test-env` live.

use std::path::PathBuf;

use super::{LocalEnvError, Result};

/// The directory of test binaries: `TENANTPLANE_TEST_ASSETS_DIR`, else the cache `scripts/test-env` fills.
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TENANTPLANE_TEST_ASSETS_DIR") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("TENANTPLANE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("tenantplane")
        });
    cache.join("assets")
}

/// The path of binary `name` in [`dir`], or an error that says how to build it.
pub fn binary(name: &str) -> Result<PathBuf> {
    let path = dir().join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(LocalEnvError::MissingBinary(format!(
            "{} is missing: run `scripts/test-env` (builds kube-apiserver, etcd, kine, nats-server and helm \
             from the Go module proxy) or set TENANTPLANE_TEST_ASSETS_DIR",
            path.display()
        )))
    }
}

/// The Kubernetes version the cached kube-apiserver was built at (e.g. `v1.34.4`).
pub fn kube_version() -> Option<String> {
    std::fs::read_to_string(dir().join("KUBE_VERSION"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Finds a system program: first in PostgreSQL's versioned bin dirs (for `initdb`/`postgres`), then on PATH.
pub fn system_program(name: &str) -> Result<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    candidates.extend(["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"].map(PathBuf::from));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| LocalEnvError::MissingBinary(format!("{name} not found (install it; see README)")))
}
