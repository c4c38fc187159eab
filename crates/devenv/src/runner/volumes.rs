//! Volume sync: keeps the files of a running pod's Secret, ConfigMap and projected volumes in step with
//! their objects, as kubelet's atomic writer does (kubelet: about a minute; the runner:
//! [`RunnerSettings::volume_sync`](super::RunnerSettings::volume_sync)).
//!
//! Each interval the Deployment's task reads every referenced object once ([`fetch`], shared by its
//! pods), re-plans each pod's volume files with [`pod::plan_files`] (same directory, same address) and
//! rewrites only the files that changed ([`diff`]), each through a temporary file and a rename
//! ([`write_atomic`]), so a process never reads half a file. Processes are not restarted. When an
//! object is unreadable, or gone and not optional, the old files stay (as kubelet keeps them).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use kube::Api;

use super::pod::{self, FilePlan};

/// Writes `content` to `path` with `mode`, atomically: a temporary file in the same directory (created
/// `0600`, written, then given `mode`), renamed over `path`.
pub(super) fn write_atomic(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    use std::{
        io::Write as _,
        os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::other(format!("{} names no file", path.display())));
    };
    std::fs::create_dir_all(dir)?;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let tmp = dir.join(format!(".{}.{suffix}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(content)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What to do on disk to go from one set of planned files to another.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct FileDiff<'a> {
    /// Files that are new or whose content or mode changed.
    pub(super) write: Vec<&'a FilePlan>,
    /// Files no longer planned (a key left its ConfigMap or Secret).
    pub(super) remove: Vec<&'a Path>,
}

/// The files of `new` that differ from `old` (content or mode) or are not in it, and the paths of
/// `old` that `new` no longer has; a path planned twice counts as its last plan (as it is written).
pub(super) fn diff<'a>(old: &'a [FilePlan], new: &'a [FilePlan]) -> FileDiff<'a> {
    let by_path = |files: &'a [FilePlan]| -> BTreeMap<&'a Path, &'a FilePlan> {
        files.iter().map(|f| (f.path.as_path(), f)).collect()
    };
    let (old, new) = (by_path(old), by_path(new));
    FileDiff {
        write: new
            .iter()
            .filter(|(path, f)| {
                old.get(*path)
                    .is_none_or(|o| o.content != f.content || o.mode != f.mode)
            })
            .map(|(_, f)| *f)
            .collect(),
        remove: old.keys().filter(|p| !new.contains_key(*p)).copied().collect(),
    }
}

/// The referenced objects of one interval: what was read, and what could not be.
#[derive(Debug, Default)]
pub(super) struct Fetched {
    /// Secrets that exist.
    pub(super) secrets: HashMap<String, Secret>,
    /// ConfigMaps that exist.
    pub(super) config_maps: HashMap<String, ConfigMap>,
    /// `(kind, name)` → the error of a read that failed (a missing object is not an error).
    pub(super) unreadable: BTreeMap<(&'static str, String), String>,
}

/// Reads the named Secrets and ConfigMaps of `namespace`, one GET each, concurrently.
pub(super) async fn fetch(
    client: &kube::Client,
    namespace: &str,
    secrets: &BTreeSet<String>,
    config_maps: &BTreeSet<String>,
) -> Fetched {
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let cms_api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let (secrets_api, cms_api) = (&secrets_api, &cms_api);
    let (s, c) = futures_util::future::join(
        futures_util::future::join_all(
            secrets
                .iter()
                .map(|n| async move { (n, secrets_api.get_opt(n).await) }),
        ),
        futures_util::future::join_all(
            config_maps
                .iter()
                .map(|n| async move { (n, cms_api.get_opt(n).await) }),
        ),
    )
    .await;
    let mut fetched = Fetched::default();
    for (name, result) in s {
        match result {
            Ok(Some(secret)) => {
                fetched.secrets.insert(name.clone(), secret);
            }
            Ok(None) => {}
            Err(e) => {
                fetched.unreadable.insert(("Secret", name.clone()), e.to_string());
            }
        }
    }
    for (name, result) in c {
        match result {
            Ok(Some(cm)) => {
                fetched.config_maps.insert(name.clone(), cm);
            }
            Ok(None) => {}
            Err(e) => {
                fetched
                    .unreadable
                    .insert(("ConfigMap", name.clone()), e.to_string());
            }
        }
    }
    fetched
}

/// What one refresh of a pod's volumes did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refresh {
    /// Every file was up to date; nothing was touched.
    Unchanged,
    /// These files were rewritten (or removed).
    Updated(Vec<PathBuf>),
    /// The old files stay; `first` is whether this reason is new (to log it once).
    Kept {
        /// Why.
        reason: String,
        /// Whether the previous refresh had another outcome.
        first: bool,
    },
}

/// The volume files of one running pod and what they were planned from.
#[derive(Debug)]
pub(super) struct PodVolumes {
    spec: PodSpec,
    secrets: BTreeSet<String>,
    config_maps: BTreeSet<String>,
    dir: PathBuf,
    ip: Ipv4Addr,
    files: Vec<FilePlan>,
    problem: Option<String>,
}

impl PodVolumes {
    /// The volumes of a pod started from `spec` in `dir` on `ip`, whose files are now `files`; it
    /// re-reads the Secrets and ConfigMaps named in `references`.
    pub(super) fn new(
        spec: PodSpec,
        references: (BTreeSet<String>, BTreeSet<String>),
        dir: PathBuf,
        ip: Ipv4Addr,
        files: Vec<FilePlan>,
    ) -> Self {
        let (secrets, config_maps) = references;
        Self {
            spec,
            secrets,
            config_maps,
            dir,
            ip,
            files,
            problem: None,
        }
    }

    /// The Secrets and ConfigMaps to read for the next refresh.
    pub(super) fn references(&self) -> (&BTreeSet<String>, &BTreeSet<String>) {
        (&self.secrets, &self.config_maps)
    }

    /// Re-plans the files from `fetched` and rewrites those that changed; keeps the old files when
    /// an object is unreadable or missing, or a write fails (retried at the next refresh).
    pub(super) fn refresh(&mut self, fetched: &Fetched) -> Refresh {
        match self.plan(fetched).and_then(|files| self.apply(files)) {
            Ok(changed) => {
                self.problem = None;
                if changed.is_empty() {
                    Refresh::Unchanged
                } else {
                    Refresh::Updated(changed)
                }
            }
            Err(reason) => {
                let first = self.problem.as_deref() != Some(reason.as_str());
                self.problem = Some(reason.clone());
                Refresh::Kept { reason, first }
            }
        }
    }

    /// The files `fetched` makes, or why there are none.
    fn plan(&self, fetched: &Fetched) -> Result<Vec<FilePlan>, String> {
        let wanted = self
            .secrets
            .iter()
            .map(|n| ("Secret", n))
            .chain(self.config_maps.iter().map(|n| ("ConfigMap", n)));
        for (kind, name) in wanted {
            if let Some(e) = fetched.unreadable.get(&(kind, name.clone())) {
                return Err(format!("reading {kind} {name}: {e}"));
            }
        }
        let sources = pod::Sources {
            secrets: &fetched.secrets,
            config_maps: &fetched.config_maps,
        };
        pod::plan_files(&self.spec, &sources, &self.dir, self.ip).map_err(|e| e.to_string())
    }

    /// Writes the changed files of `files`, removes the ones it lacks; returns the paths touched.
    fn apply(&mut self, files: Vec<FilePlan>) -> Result<Vec<PathBuf>, String> {
        let mut touched = Vec::new();
        let changes = diff(&self.files, &files);
        for f in changes.write {
            write_atomic(&f.path, &f.content, f.mode)
                .map_err(|e| format!("writing {}: {e}", f.path.display()))?;
            touched.push(f.path.clone());
        }
        for path in changes.remove {
            match std::fs::remove_file(path) {
                Ok(()) => touched.push(path.to_path_buf()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("removing {}: {e}", path.display())),
            }
        }
        self.files = files;
        Ok(touched)
    }
}

#[cfg(test)]
#[path = "volumes_tests.rs"]
mod tests;
