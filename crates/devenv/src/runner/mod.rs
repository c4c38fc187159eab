//! The pod-less runner: plays kubelet, the deployment controller and kube-proxy for the control-plane
//! Deployments, by running each replica's containers as local processes.
//!
//! It watches Deployments labelled `kamaji.clastix.io/name`. For each it starts one "pod" per replica:
//! the Secret, ConfigMap and emptyDir volumes become directories, container paths are rewritten onto
//! them, `$(VAR)` is expanded, images map to the cached binaries of the same name and version
//! ([`pod`]), and the replica gets its own loopback address ([`net`]). It runs the probes, restarts
//! exited containers with backoff, rolls to a new template (surge; once the new pods are ready the
//! old ones leave the Service and stop, as terminating pods leave their EndpointSlice) and patches the
//! Deployment status as the deployment controller would. The tenant's published address
//! (`networkProfile.address` of the owning TenantControlPlane) is served by a TCP proxy to the ready
//! replicas. While a pod runs, its Secret and ConfigMap volume files follow their objects ([`volumes`]:
//! changed files are rewritten atomically, no process restarts). Every process dies with the runner
//! (drop, stop, or parent death).

mod deployment;
pub mod net;
pub mod pod;
mod volumes;

use std::{
    collections::{BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use futures_util::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{Api, ResourceExt as _, runtime::watcher};
use tokio::{sync::watch, task::JoinHandle};

use crate::localenv::assets;
use pod::{ImageResolver, PlanError};

/// The label every control-plane Deployment carries (the TenantControlPlane's name).
pub const DEPLOYMENT_LABEL: &str = "kamaji.clastix.io/name";

/// Settings of a runner.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Where pods live: `<dir>/<8 hex>/{v,logs,pod.json}` (`v`: volumes; keep `dir` short, unix sockets live there).
    pub dir: PathBuf,
    /// Only Deployments of these namespaces (all when `None`).
    pub namespaces: Option<BTreeSet<String>>,
    /// Probe interval until a container is first ready (then the probe's own `periodSeconds`).
    pub fast_probe: Duration,
    /// Largest restart backoff of an exited container.
    pub max_backoff: Duration,
    /// How often a running pod's Secret/ConfigMap volume files are re-read and the changed ones
    /// rewritten atomically (kubelet: about a minute; at least 100 ms).
    pub volume_sync: Duration,
}

impl RunnerSettings {
    /// Pods under `dir`, every namespace, 200 ms probes until ready, backoff up to 30 s, volume sync every 2 s.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            namespaces: None,
            fast_probe: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
            volume_sync: Duration::from_secs(2),
        }
    }
}

/// Maps images to the binaries `scripts/test-env` caches: `<registry>/<name>:<version>` runs
/// `<cache>/bin/<name>-<version>`; a command other than the image's own binary (e.g. `sh`) runs the
/// host's program.
#[derive(Debug, Clone, Copy, Default)]
pub struct CachedImages;

/// The components the runner has binaries for.
pub const KNOWN_IMAGES: &[&str] = &[
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kine",
    "etcd",
    "proxy-server",
];

/// The cached binary of an image whose binary has another name: Konnectivity's images are
/// `kas-network-proxy/proxy-server` and `proxy-agent`, `scripts/test-env` builds `konnectivity-server`
/// and `konnectivity-agent`.
pub fn binary_name(image_name: &str) -> &str {
    match image_name {
        "proxy-server" => "konnectivity-server",
        "proxy-agent" => "konnectivity-agent",
        other => other,
    }
}

impl ImageResolver for CachedImages {
    fn resolve(&self, image: &str, command0: Option<&str>) -> Result<PathBuf, PlanError> {
        let (name, version) = pod::image_name_version(image)
            .ok_or_else(|| PlanError::ImageNotBuilt(format!("image {image} has no <name>:<version> tag")))?;
        if let Some(cmd) = command0 {
            let base = cmd.rsplit('/').next().unwrap_or(cmd);
            if base != name {
                return assets::system_program(base)
                    .map_err(|e| PlanError::ImageNotBuilt(format!("image {image}: command {cmd}: {e}")));
            }
        }
        if !KNOWN_IMAGES.contains(&name.as_str()) {
            return Err(PlanError::ImageNotBuilt(format!(
                "image {image}: the runner has no binary for {name} (known: {})",
                KNOWN_IMAGES.join(", ")
            )));
        }
        assets::versioned_binary(binary_name(&name), &version)
            .map_err(|e| PlanError::ImageNotBuilt(format!("image {image}: {e}")))
    }
}

/// The hash of a pod template (like `pod-template-hash`).
pub fn template_hash(template: &serde_json::Value) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, template.to_string().as_bytes());
    digest.as_ref()[..5].iter().map(|b| format!("{b:02x}")).collect()
}

/// A running runner; dropping it kills every process it started.
#[derive(Debug)]
pub struct Runner {
    dir: PathBuf,
    task: JoinHandle<()>,
    shutdown: watch::Sender<bool>,
}

impl Runner {
    /// Starts watching Deployments of the management cluster.
    pub fn start(client: kube::Client, settings: RunnerSettings) -> std::io::Result<Self> {
        std::fs::create_dir_all(&settings.dir)?;
        let dir = settings.dir.clone();
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(watch_deployments(client, Arc::new(settings), rx));
        Ok(Self { dir, task, shutdown })
    }

    /// Stops every pod and waits until their processes are gone.
    pub async fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        let _ = (&mut self.task).await;
    }

    /// Every container log of the Deployment `namespace/name`, across its pods (oldest pods first).
    pub fn logs(&self, namespace: &str, name: &str) -> Vec<PathBuf> {
        logs(&self.dir, namespace, name)
    }

    /// The pods' directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
        // The pods' processes die with their tasks; their files (volumes hold Secrets) go now.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Container logs of `namespace/name` under a runner directory.
pub fn logs(dir: &Path, namespace: &str, name: &str) -> Vec<PathBuf> {
    let mut pods: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let meta: serde_json::Value =
                        serde_json::from_slice(&std::fs::read(e.path().join("pod.json")).ok()?).ok()?;
                    (meta["namespace"] == namespace && meta["deployment"] == name)
                        .then(|| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                        .flatten()
                })
                .collect()
        })
        .unwrap_or_default();
    pods.sort();
    pods.into_iter()
        .flat_map(|(_, pod)| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(pod.join("logs"))
                .map(|e| e.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            files.sort();
            files
        })
        .collect()
}

type Key = (String, String);

async fn watch_deployments(
    client: kube::Client,
    settings: Arc<RunnerSettings>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Deployment> = Api::all(client.clone());
    let mut stream = watcher(api, watcher::Config::default().labels(DEPLOYMENT_LABEL)).boxed();
    let mut running: HashMap<Key, Managed> = HashMap::new();
    let mut seen: Option<BTreeSet<Key>> = None;
    let in_scope = |d: &Deployment| {
        settings
            .namespaces
            .as_ref()
            .is_none_or(|set| d.namespace().is_some_and(|ns| set.contains(&ns)))
    };
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            _ = shutdown.changed() => break,
        };
        let Some(event) = event else { break };
        let event = match event {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!("runner: watching Deployments failed: {err}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let upsert = |d: Deployment, running: &mut HashMap<Key, Managed>| {
            let key = (d.namespace().unwrap_or_default(), d.name_any());
            match running.get(&key) {
                Some(managed) => {
                    let _ = managed.tx.send(Some(d));
                }
                None => {
                    let (tx, rx) = watch::channel(Some(d));
                    let task =
                        tokio::spawn(deployment::run(client.clone(), settings.clone(), key.clone(), rx));
                    running.insert(key.clone(), Managed { tx, task: Some(task) });
                }
            }
            key
        };
        match event {
            watcher::Event::Init => seen = Some(BTreeSet::new()),
            watcher::Event::InitApply(d) | watcher::Event::Apply(d) if in_scope(&d) => {
                let key = upsert(d, &mut running);
                if let Some(seen) = seen.as_mut() {
                    seen.insert(key);
                }
            }
            watcher::Event::Delete(d) => {
                let key = (d.namespace().unwrap_or_default(), d.name_any());
                stop_deployment(&mut running, &key).await;
            }
            watcher::Event::InitDone => {
                if let Some(seen) = seen.take() {
                    let gone: Vec<Key> = running.keys().filter(|k| !seen.contains(*k)).cloned().collect();
                    for key in gone {
                        stop_deployment(&mut running, &key).await;
                    }
                }
            }
            _ => {}
        }
    }
    let keys: Vec<Key> = running.keys().cloned().collect();
    for key in keys {
        stop_deployment(&mut running, &key).await;
    }
}

/// A Deployment's task; aborted when dropped (its pods are dropped with it, which kills their processes).
struct Managed {
    tx: watch::Sender<Option<Deployment>>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Managed {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

async fn stop_deployment(running: &mut HashMap<Key, Managed>, key: &Key) {
    if let Some(mut managed) = running.remove(key) {
        let _ = managed.tx.send(None);
        if let Some(task) = managed.task.take() {
            let _ = task.await;
        }
    }
}
