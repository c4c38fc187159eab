//! One Deployment's pods: start, probe, restart, roll, stop, and the status the deployment controller
//! would write.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::PodSpec};
use kube::{
    Api, Resource, ResourceExt as _,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use serde_json::json;
use tokio::sync::watch;

use super::{
    CachedImages, Key, RunnerSettings,
    net::{self, AddressClaim, ServiceProxy},
    pod::{self, ContainerPlan, HttpProbe, PlanError},
    template_hash,
    volumes::{self, PodVolumes, Refresh},
};
use crate::{
    k8s::crd::TenantControlPlane,
    localenv::process::{ChildProcess, Spec},
};

/// One container process and its probe state.
#[derive(Debug)]
struct Container {
    plan: ContainerPlan,
    log: PathBuf,
    child: Option<ChildProcess>,
    started_at: Instant,
    restarts: u32,
    restart_at: Option<Instant>,
    started: bool,
    ready: bool,
    ever_ready: bool,
    liveness_failures: u32,
    readiness_failures: u32,
    next_probe: Instant,
}

/// One replica: its address, directory and containers.
#[derive(Debug)]
struct Pod {
    name: String,
    hash: String,
    address: AddressClaim,
    dir: PathBuf,
    containers: Vec<Container>,
    /// Its volume files, kept in sync with their objects.
    volumes: PodVolumes,
}

impl Pod {
    fn ready(&self) -> bool {
        self.containers.iter().all(|c| c.ready)
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for c in &mut self.containers {
            if let Some(mut child) = c.child.take() {
                child.stop(Duration::from_secs(2));
            }
        }
        // Secrets on disk go with the pod; the logs stay for whoever reads them.
        let _ = std::fs::remove_dir_all(self.dir.join("v"));
    }
}

fn spawn(plan: &ContainerPlan, log: &std::path::Path) -> std::io::Result<ChildProcess> {
    let mut spec = Spec::new(plan.name.clone(), &plan.program).args(plan.args.clone());
    spec.clear_env = true;
    for (k, v) in &plan.env {
        spec = spec.env(k, v);
    }
    ChildProcess::spawn(&spec, log)
}

/// Runs `plan` to completion (init containers), within a minute.
async fn run_init(plan: &ContainerPlan, log: &std::path::Path) -> Result<(), String> {
    let mut child = spawn(plan, log).map_err(|e| format!("init container {}: {e}", plan.name))?;
    let start = Instant::now();
    loop {
        match child.check_running() {
            Ok(()) if start.elapsed() < Duration::from_secs(60) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(()) => return Err(format!("init container {} ran over 60s", plan.name)),
            Err(exit) if exit.status == "exit status: 0" => return Ok(()),
            Err(exit) => return Err(format!("init container {} failed: {exit}", plan.name)),
        }
    }
}

fn write_files(plan: &pod::PodPlan) -> std::io::Result<()> {
    for dir in &plan.dirs {
        std::fs::create_dir_all(dir)?;
    }
    for file in &plan.files {
        volumes::write_atomic(&file.path, &file.content, file.mode)?;
    }
    Ok(())
}

/// What a probe saw.
async fn probe(http: &reqwest::Client, p: &HttpProbe) -> bool {
    match http
        .get(p.url())
        .timeout(p.timeout.max(Duration::from_millis(500)))
        .send()
        .await
    {
        Ok(r) => r.status().is_success() || r.status().is_redirection(),
        Err(_) => false,
    }
}

/// The names of every Secret and ConfigMap a pod template references.
fn references(spec: &PodSpec) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut secrets, mut cms) = volume_references(spec);
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for from in c.env_from.iter().flatten() {
            if let Some(s) = &from.secret_ref {
                secrets.insert(s.name.clone());
            }
            if let Some(m) = &from.config_map_ref {
                cms.insert(m.name.clone());
            }
        }
        for var in c.env.iter().flatten() {
            if let Some(from) = &var.value_from {
                if let Some(s) = &from.secret_key_ref {
                    secrets.insert(s.name.clone());
                }
                if let Some(m) = &from.config_map_key_ref {
                    cms.insert(m.name.clone());
                }
            }
        }
    }
    (secrets, cms)
}

/// The volume sync interval, at least 100 ms.
fn volume_sync_interval(settings: &RunnerSettings) -> Duration {
    settings.volume_sync.max(Duration::from_millis(100))
}

/// The names of the Secrets and ConfigMaps a pod template's volumes reference (what volume sync re-reads).
fn volume_references(spec: &PodSpec) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut secrets = BTreeSet::new();
    let mut cms = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.secret {
            secrets.extend(s.secret_name.clone());
        }
        if let Some(c) = &v.config_map {
            cms.insert(c.name.clone());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
            if let Some(c) = &src.config_map {
                cms.insert(c.name.clone());
            }
        }
    }
    (secrets, cms)
}

/// The probes due on one container: which pod and container, and the probes to run.
struct DueProbes {
    pod: usize,
    container: usize,
    startup: Option<HttpProbe>,
    readiness: Option<HttpProbe>,
    liveness: Option<HttpProbe>,
}

/// What the due probes of one container saw (`None`: not run).
struct ProbeResults {
    pod: usize,
    container: usize,
    startup: Option<bool>,
    readiness: Option<bool>,
    liveness: Option<bool>,
    /// The readiness probe's period.
    period: Option<Duration>,
}

impl DueProbes {
    /// Runs the startup probe, then readiness once started, and liveness.
    async fn run(self, http: reqwest::Client) -> ProbeResults {
        let startup = match &self.startup {
            Some(p) => Some(probe(&http, p).await),
            None => None,
        };
        let gate = startup.unwrap_or(true);
        let readiness = match (&self.readiness, gate) {
            (Some(p), true) => Some(probe(&http, p).await),
            _ => None,
        };
        let liveness = match &self.liveness {
            Some(p) => Some(probe(&http, p).await),
            None => None,
        };
        ProbeResults {
            pod: self.pod,
            container: self.container,
            startup,
            readiness,
            liveness,
            period: self.readiness.map(|p| p.period),
        }
    }
}

impl Container {
    /// Notices an exit: schedules a restart after a backoff (1 s doubling), like restartPolicy Always.
    fn reap(&mut self, pod: &str, now: Instant, max_backoff: Duration) -> Option<String> {
        let status = self.child.as_mut()?.check_running().err()?.status;
        self.child = None;
        self.ready = false;
        self.started = false;
        let backoff = Duration::from_secs(1u64 << self.restarts.min(5)).min(max_backoff);
        self.restart_at = Some(now + backoff);
        Some(format!(
            "pod {pod}, container {} exited ({status}); restarting in {}s (restart {}); log: {}",
            self.plan.name,
            backoff.as_secs(),
            self.restarts + 1,
            self.log.display()
        ))
    }

    /// Respawns the process once its restart is due; a failed spawn retries after `max_backoff`.
    fn restart_if_due(&mut self, pod: &str, now: Instant, max_backoff: Duration) -> Option<String> {
        if self.child.is_some() || self.restart_at.is_none_or(|t| t > now) {
            return None;
        }
        self.restart_at = None;
        self.restarts += 1;
        self.liveness_failures = 0;
        self.readiness_failures = 0;
        match spawn(&self.plan, &self.log) {
            Ok(child) => {
                self.child = Some(child);
                self.started_at = now;
                self.next_probe = now;
                None
            }
            Err(e) => {
                self.restart_at = Some(now + max_backoff);
                Some(format!("pod {pod}, container {}: {e}", self.plan.name))
            }
        }
    }

    /// The probes due now — startup until started, readiness, liveness once started — or `None`
    /// while not running, not yet due or within an initial delay.
    fn due_probes(&self, pod: usize, container: usize, now: Instant) -> Option<DueProbes> {
        if self.child.is_none() || self.next_probe > now {
            return None;
        }
        let startup = (!self.started).then(|| self.plan.startup.clone()).flatten();
        let readiness = self.plan.readiness.clone();
        let liveness = self.started.then(|| self.plan.liveness.clone()).flatten();
        let delay_ok = |p: &Option<HttpProbe>| {
            p.as_ref()
                .is_none_or(|p| now.duration_since(self.started_at) >= p.initial_delay)
        };
        if !delay_ok(&startup) || !delay_ok(&readiness) {
            return None;
        }
        Some(DueProbes {
            pod,
            container,
            startup,
            readiness,
            liveness,
        })
    }

    /// Applies a readiness result: ready at once; unready at once until first ready, then after
    /// the failure threshold; no probe means ready once started.
    fn apply_readiness(&mut self, ok: Option<bool>) {
        match ok {
            Some(true) => {
                self.ready = true;
                self.ever_ready = true;
                self.readiness_failures = 0;
            }
            Some(false) => {
                self.readiness_failures += 1;
                let threshold = self
                    .plan
                    .readiness
                    .as_ref()
                    .map(|p| p.failure_threshold)
                    .unwrap_or(3);
                if !self.ever_ready || self.readiness_failures >= threshold {
                    self.ready = false;
                }
            }
            None if self.plan.readiness.is_none() && self.started => self.ready = true,
            None => {}
        }
    }

    /// Applies a liveness result: past the failure threshold the process stops and restarts now.
    fn apply_liveness(&mut self, pod: &str, ok: Option<bool>, now: Instant) -> Option<String> {
        match ok {
            Some(false) => {
                self.liveness_failures += 1;
                let threshold = self
                    .plan
                    .liveness
                    .as_ref()
                    .map(|p| p.failure_threshold)
                    .unwrap_or(3);
                if self.liveness_failures < threshold {
                    return None;
                }
                let mut child = self.child.take()?;
                let note = format!(
                    "pod {pod}, container {} failed its liveness probe {threshold} times; restarting",
                    self.plan.name
                );
                child.stop(Duration::from_secs(2));
                self.ready = false;
                self.started = false;
                self.restart_at = Some(now);
                Some(note)
            }
            Some(true) => {
                self.liveness_failures = 0;
                None
            }
            None => None,
        }
    }

    /// Applies one round of probe results and schedules the next: fast probes until first ready,
    /// then the readiness probe's own period.
    fn apply_probes(&mut self, pod: &str, r: &ProbeResults, now: Instant, fast: Duration) -> Option<String> {
        if r.startup.unwrap_or(true) {
            self.started = true;
        }
        self.apply_readiness(r.readiness);
        let note = self.apply_liveness(pod, r.liveness, now);
        let period = r.period.unwrap_or(Duration::from_secs(10));
        self.next_probe = now
            + if self.ever_ready && self.ready {
                period
            } else {
                fast
            };
        note
    }
}

/// One published Service port: its proxy and the replicas it forwards to.
struct Published {
    proxy: ServiceProxy,
    backends: watch::Sender<Vec<SocketAddr>>,
}

/// State of one Deployment.
pub(super) struct Runtime {
    client: kube::Client,
    settings: Arc<RunnerSettings>,
    key: Key,
    recorder: Recorder,
    http: reqwest::Client,
    pods: Vec<Pod>,
    /// The Service's ports as published on the tenant's address, each with its ready backends.
    published: Vec<Published>,
    failure: Option<(&'static str, String)>,
    reported: BTreeSet<String>,
    last_status: Option<serde_json::Value>,
    next_start: Instant,
    /// When the pods' volume files are next refreshed.
    next_volume_sync: Instant,
    serial: u32,
}

impl Runtime {
    pub(super) fn new(client: kube::Client, settings: Arc<RunnerSettings>, key: Key) -> Self {
        crate::localenv::install_crypto_provider();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "tenantplane-runner".into(),
                instance: Some(format!("runner-{}", std::process::id())),
            },
        );
        let http = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .build()
            .unwrap_or_default();
        let next_volume_sync = Instant::now() + volume_sync_interval(&settings);
        Self {
            client,
            settings,
            key,
            recorder,
            http,
            pods: Vec::new(),
            published: Vec::new(),
            failure: None,
            reported: BTreeSet::new(),
            last_status: None,
            next_start: Instant::now(),
            next_volume_sync,
            serial: 0,
        }
    }

    async fn event(&mut self, deployment: &Deployment, type_: EventType, reason: &str, note: &str) {
        // One Event per distinct message: a crash loop must not flood the API.
        if !self.reported.insert(format!("{reason}/{note}")) {
            return;
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Run".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &deployment.object_ref(&())).await {
            tracing::warn!(deployment = %deployment.name_any(), "runner: publishing an Event failed: {err}");
        }
    }

    /// Plans and starts one pod of template `hash`.
    async fn start_pod(
        &mut self,
        deployment: &Deployment,
        spec: &PodSpec,
        hash: &str,
    ) -> Result<(), (&'static str, String)> {
        let (ns, name) = self.key.clone();
        let (secret_names, cm_names) = references(spec);
        let fetched = volumes::fetch(&self.client, &ns, &secret_names, &cm_names).await;
        if let Some(((kind, object), e)) = fetched.unreadable.iter().next() {
            return Err(("KubernetesApiError", format!("reading {kind} {object}: {e}")));
        }
        let address = net::claim_address().map_err(|e| ("AddressUnavailable", e.to_string()))?;
        self.serial += 1;
        let pod_name = format!("{name}-{hash}-{}", self.serial);
        // Short: a unix socket path (kine's) must stay under 108 bytes; pod.json maps it back.
        let dir = self
            .settings
            .dir
            .join(&uuid::Uuid::new_v4().simple().to_string()[..8]);
        let sources = pod::Sources {
            secrets: &fetched.secrets,
            config_maps: &fetched.config_maps,
        };
        let mut plan = pod::plan(spec, &sources, &CachedImages, &dir, address.ip())
            .map_err(|e: PlanError| (e.reason(), e.to_string()))?;
        let io = |e: std::io::Error| ("PodSetupFailed", format!("pod {pod_name}: {e}"));
        std::fs::create_dir_all(dir.join("logs")).map_err(io)?;
        std::fs::write(
            dir.join("pod.json"),
            json!({"namespace": ns, "deployment": name, "pod": pod_name, "ip": address.ip().to_string(), "hash": hash}).to_string(),
        )
        .map_err(io)?;
        write_files(&plan).map_err(io)?;
        let volumes = PodVolumes::new(
            spec.clone(),
            volume_references(spec),
            dir.clone(),
            address.ip(),
            std::mem::take(&mut plan.files),
        );
        let mut pod = Pod {
            name: pod_name.clone(),
            hash: hash.to_string(),
            address,
            dir: dir.clone(),
            containers: Vec::new(),
            volumes,
        };
        for init in &plan.init {
            run_init(init, &dir.join("logs").join(format!("init-{}.log", init.name)))
                .await
                .map_err(|e| ("InitContainerFailed", format!("pod {pod_name}: {e}")))?;
        }
        for c in plan.containers {
            let log = dir.join("logs").join(format!("{}.log", c.name));
            let child = spawn(&c, &log).map_err(|e| {
                (
                    "ContainerStartFailed",
                    format!("pod {pod_name}, container {}: {e}", c.name),
                )
            })?;
            pod.containers.push(Container {
                plan: c,
                log,
                child: Some(child),
                started_at: Instant::now(),
                restarts: 0,
                restart_at: None,
                started: false,
                ready: false,
                ever_ready: false,
                liveness_failures: 0,
                readiness_failures: 0,
                next_probe: Instant::now(),
            });
        }
        tracing::info!(namespace = %ns, deployment = %name, pod = %pod_name, ip = %pod.address.ip(), "runner: started pod");
        let _ = deployment;
        self.pods.push(pod);
        Ok(())
    }

    /// Restarts exited containers (with backoff) and runs due probes.
    async fn tick_pods(&mut self) -> Vec<String> {
        let now = Instant::now();
        let mut notes = self.restart_exited(now);
        let due = self.due_probes(now);
        let http = self.http.clone();
        // Probes, concurrently across containers.
        let results = futures_util::future::join_all(due.into_iter().map(|d| d.run(http.clone()))).await;
        notes.extend(self.apply_probe_results(&results, now));
        notes
    }

    /// Notices exited containers and restarts those whose backoff is over; returns what happened.
    fn restart_exited(&mut self, now: Instant) -> Vec<String> {
        let max_backoff = self.settings.max_backoff;
        let mut notes = Vec::new();
        for pod in &mut self.pods {
            for c in &mut pod.containers {
                notes.extend(c.reap(&pod.name, now, max_backoff));
                notes.extend(c.restart_if_due(&pod.name, now, max_backoff));
            }
        }
        notes
    }

    /// The probes due now, across every pod.
    fn due_probes(&self, now: Instant) -> Vec<DueProbes> {
        let mut due = Vec::new();
        for (pi, pod) in self.pods.iter().enumerate() {
            for (ci, c) in pod.containers.iter().enumerate() {
                due.extend(c.due_probes(pi, ci, now));
            }
        }
        due
    }

    /// Applies probe results to their containers; returns the liveness restarts.
    fn apply_probe_results(&mut self, results: &[ProbeResults], now: Instant) -> Vec<String> {
        let fast = self.settings.fast_probe;
        let mut notes = Vec::new();
        for r in results {
            let Some(pod) = self.pods.get_mut(r.pod) else {
                continue;
            };
            let Some(c) = pod.containers.get_mut(r.container) else {
                continue;
            };
            notes.extend(c.apply_probes(&pod.name, r, now, fast));
        }
        notes
    }

    /// The tenant's published addresses: `networkProfile.address:port` of the owning TenantControlPlane
    /// and, with `spec.addons.konnectivity`, the Konnectivity server's port on the same address.
    async fn published_addresses(&self, deployment: &Deployment) -> Vec<SocketAddr> {
        let Some(owner) = deployment
            .owner_references()
            .iter()
            .find(|o| o.kind == "TenantControlPlane")
            .map(|o| o.name.clone())
        else {
            return Vec::new();
        };
        let Ok(Some(tcp)) = Api::<TenantControlPlane>::namespaced(self.client.clone(), &self.key.0)
            .get_opt(&owner)
            .await
        else {
            return Vec::new();
        };
        let Some(ip) = tcp
            .spec
            .network_profile
            .as_ref()
            .and_then(|np| np.address.as_deref()?.parse::<IpAddr>().ok())
            .filter(IpAddr::is_loopback)
        else {
            return Vec::new();
        };
        let port = |p: i32| u16::try_from(p).ok();
        let apiserver = tcp
            .spec
            .network_profile
            .as_ref()
            .and_then(|np| np.port)
            .and_then(port)
            .unwrap_or(6443);
        let konnectivity = tcp
            .spec
            .addons
            .as_ref()
            .and_then(|a| a.konnectivity.as_ref())
            .and_then(|k| port(k.server.port));
        std::iter::once(apiserver)
            .chain(konnectivity)
            .map(|p| SocketAddr::new(ip, p))
            .collect()
    }

    /// The Service: each published address forwards to the same port of the ready replicas.
    async fn publish(&mut self, deployment: &Deployment) {
        let addresses = self.published_addresses(deployment).await;
        self.published.retain(|p| addresses.contains(&p.proxy.address()));
        for addr in addresses {
            let backends: Vec<SocketAddr> = self
                .pods
                .iter()
                .filter(|p| p.ready())
                .map(|p| SocketAddr::new(IpAddr::V4(p.address.ip()), addr.port()))
                .collect();
            if let Some(p) = self.published.iter().find(|p| p.proxy.address() == addr) {
                p.backends.send_replace(backends);
                continue;
            }
            let (tx, rx) = watch::channel(backends);
            match ServiceProxy::start(addr, rx).await {
                Ok(proxy) => self.published.push(Published { proxy, backends: tx }),
                Err(e) => {
                    let message = format!("cannot publish {addr}: {e}");
                    self.event(deployment, EventType::Warning, "EndpointUnavailable", &message)
                        .await;
                }
            }
        }
    }

    /// One pass: scale, roll, probe, publish, report. Returns when the pass is done.
    pub(super) async fn reconcile(&mut self, deployment: &Deployment) {
        let spec = deployment.spec.clone().unwrap_or_default();
        let template = serde_json::to_value(&spec.template).unwrap_or_default();
        let hash = template_hash(&template);
        let deleting = deployment.metadata.deletion_timestamp.is_some();
        let desired = if deleting {
            0
        } else {
            spec.replicas.unwrap_or(1).max(0) as usize
        };
        let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
        let pod_spec = spec.template.spec.clone().unwrap_or_default();

        // Recreate: old pods go first.
        if recreate {
            self.pods.retain(|p| p.hash == hash);
        }
        let current = self.pods.iter().filter(|p| p.hash == hash).count();
        if current < desired && Instant::now() >= self.next_start {
            match self.start_pod(deployment, &pod_spec, &hash).await {
                Ok(()) => self.failure = None,
                Err((reason, message)) => {
                    tracing::warn!(namespace = %self.key.0, deployment = %self.key.1, reason, "runner: cannot start a pod: {message}");
                    self.event(deployment, EventType::Warning, reason, &message).await;
                    self.failure = Some((reason, message));
                    self.next_start = Instant::now() + Duration::from_secs(2);
                }
            }
        }
        if current > desired {
            // Scale down: the newest pods of the current template go first.
            let mut extra = current - desired;
            let mut i = self.pods.len();
            while extra > 0 && i > 0 {
                i -= 1;
                if self.pods[i].hash == hash {
                    self.pods.remove(i);
                    extra -= 1;
                }
            }
        }
        for note in self.tick_pods().await {
            self.event(deployment, EventType::Warning, "BackOff", &note).await;
        }
        // Rolling update: once every replica of the new template is ready, the old ones stop. As a
        // terminating pod leaves its EndpointSlice at once, they leave the Service in this pass and
        // stop off the runtime's threads (a graceful stop waits up to 2 s per container).
        let new_ready = self.pods.iter().filter(|p| p.hash == hash && p.ready()).count();
        if new_ready >= desired {
            let (current, old): (Vec<Pod>, Vec<Pod>) = std::mem::take(&mut self.pods)
                .into_iter()
                .partition(|p| p.hash == hash);
            self.pods = current;
            if !old.is_empty() {
                tokio::task::spawn_blocking(move || drop(old));
            }
        }
        self.sync_volumes().await;

        self.publish(deployment).await;

        self.patch_status(deployment, &hash, desired).await;
    }

    async fn patch_status(&mut self, deployment: &Deployment, hash: &str, desired: usize) {
        let total = self.pods.len();
        let updated = self.pods.iter().filter(|p| p.hash == hash).count();
        let ready = self.pods.iter().filter(|p| p.ready()).count();
        let unavailable = desired.saturating_sub(ready);
        let available = ready >= desired;
        let mut conditions = vec![
            json!({
                "type": "Available",
                "status": if available { "True" } else { "False" },
                "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                "message": if available { "Deployment has minimum availability.".to_string() } else { format!("{ready}/{desired} replicas ready") },
            }),
            json!({
                "type": "Progressing",
                "status": "True",
                "reason": if updated == desired && total == desired && available { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                "message": format!("{updated}/{desired} replicas of template {hash} running under the pod-less runner"),
            }),
        ];
        if let Some((reason, message)) = &self.failure {
            conditions.push(
                json!({"type": "ReplicaFailure", "status": "True", "reason": reason, "message": message}),
            );
        }
        let status = json!({
            "observedGeneration": deployment.metadata.generation,
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": unavailable,
            "conditions": conditions,
        });
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.key.0);
        let patch = json!({"status": status});
        match api
            .patch_status(&self.key.1, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_status = Some(status),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(err) => {
                tracing::warn!(namespace = %self.key.0, deployment = %self.key.1, "runner: patching the Deployment status failed: {err}")
            }
        }
    }

    /// Once `volume_sync` has elapsed: reads each Secret and ConfigMap the pods' volumes reference
    /// (one GET per object, shared by the pods) and rewrites the files that changed; never restarts.
    async fn sync_volumes(&mut self) {
        let now = Instant::now();
        if self.pods.is_empty() || now < self.next_volume_sync {
            return;
        }
        self.next_volume_sync = now + volume_sync_interval(&self.settings);
        let mut secrets = BTreeSet::new();
        let mut cms = BTreeSet::new();
        for pod in &self.pods {
            let (s, c) = pod.volumes.references();
            secrets.extend(s.iter().cloned());
            cms.extend(c.iter().cloned());
        }
        if secrets.is_empty() && cms.is_empty() {
            return;
        }
        let fetched = volumes::fetch(&self.client, &self.key.0, &secrets, &cms).await;
        let (ns, name) = (&self.key.0, &self.key.1);
        for pod in &mut self.pods {
            match pod.volumes.refresh(&fetched) {
                Refresh::Unchanged => {}
                Refresh::Updated(files) => {
                    tracing::info!(namespace = %ns, deployment = %name, pod = %pod.name, ?files, "runner: volume files updated");
                }
                Refresh::Kept { reason, first: true } => {
                    tracing::warn!(namespace = %ns, deployment = %name, pod = %pod.name, "runner: keeping the pod's volume files: {reason}");
                }
                Refresh::Kept { reason, first: false } => {
                    tracing::debug!(namespace = %ns, deployment = %name, pod = %pod.name, "runner: still keeping the pod's volume files: {reason}");
                }
            }
        }
    }

    /// How long until the next volume sync is due (`None` without pods).
    pub(super) fn until_volume_sync(&self) -> Option<Duration> {
        (!self.pods.is_empty()).then(|| self.next_volume_sync.saturating_duration_since(Instant::now()))
    }

    /// Whether any container still needs fast polling.
    pub(super) fn settling(&self) -> bool {
        self.failure.is_some()
            || self
                .pods
                .iter()
                .any(|p| !p.ready() || p.containers.iter().any(|c| c.child.is_none()))
    }
}

/// The task of one Deployment: reconciles on every change and at least every second (200 ms while
/// pods settle, sooner when a volume sync is due); stops its pods when the Deployment is gone.
pub(super) async fn run(
    client: kube::Client,
    settings: Arc<RunnerSettings>,
    key: Key,
    mut rx: watch::Receiver<Option<Deployment>>,
) {
    let fast = settings.fast_probe;
    let mut rt = Runtime::new(client, settings, key);
    loop {
        let Some(deployment) = rx.borrow_and_update().clone() else {
            break;
        };
        rt.reconcile(&deployment).await;
        let wait = if rt.settling() {
            fast
        } else {
            Duration::from_secs(1)
        };
        let wait = rt.until_volume_sync().map_or(wait, |due| wait.min(due));
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { break },
            () = tokio::time::sleep(wait) => {}
        }
    }
    rt.pods.clear();
    rt.published.clear();
}
