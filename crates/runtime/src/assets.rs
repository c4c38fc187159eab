//! Where the binaries built by `scripts/test-env` live.

use std::path::PathBuf;

use super::{LocalEnvError, Result};

/// The directory of test binaries: `TENANTPLANE_TEST_ASSETS_DIR`, else the cache `scripts/test-env` fills.
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TENANTPLANE_TEST_ASSETS_DIR") {
        return PathBuf::from(dir);
    }
    cache_root().join("assets")
}

/// The cache `scripts/test-env` fills: `TENANTPLANE_CACHE`, else `$XDG_CACHE_HOME/tenantplane`, else
/// `~/.cache/tenantplane`.
fn cache_root() -> PathBuf {
    std::env::var_os("TENANTPLANE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("tenantplane")
        })
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

/// The directory of versioned binaries (`<name>-<version>`) that `scripts/test-env` builds.
pub fn bin_dir() -> PathBuf {
    cache_root().join("bin")
}

/// Versions of `name` that are built (`<bin_dir>/<name>-<version>`), sorted.
pub fn built_versions(name: &str) -> Vec<String> {
    let prefix = format!("{name}-v");
    let mut versions: Vec<String> = std::fs::read_dir(bin_dir())
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let file = e.file_name().to_string_lossy().into_owned();
                    file.strip_prefix(&prefix)
                        .filter(|v| !v.ends_with(".tmp"))
                        .map(|v| format!("v{v}"))
                })
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
}

/// The built binary `name` at exactly `version`: `<bin_dir>/<name>-<version>`, or the unversioned one in
/// [`dir`] when it is a Kubernetes component of that version; else an error naming the built versions.
pub fn versioned_binary(name: &str, version: &str) -> Result<PathBuf> {
    let path = bin_dir().join(format!("{name}-{version}"));
    if path.is_file() {
        return Ok(path);
    }
    let unversioned = dir().join(name);
    if name.starts_with("kube-") && unversioned.exists() && kube_version().as_deref() == Some(version) {
        return Ok(unversioned);
    }
    let built = built_versions(name);
    let how = if name.starts_with("kube-") {
        format!("scripts/test-env build-kube {version}")
    } else if name.starts_with("konnectivity-") {
        format!("TENANTPLANE_KONNECTIVITY_VERSION={version} scripts/test-env")
    } else {
        format!(
            "TENANTPLANE_{}_VERSION={version} scripts/test-env",
            name.replace('-', "_").to_uppercase()
        )
    };
    Err(LocalEnvError::MissingBinary(format!(
        "{name} {version} is not built (built: {}); build it with `{how}`",
        if built.is_empty() {
            "none".to_string()
        } else {
            built.join(", ")
        },
    )))
}
