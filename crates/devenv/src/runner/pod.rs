//! Pure planning of one replica: a Deployment's pod template + the Secrets and ConfigMaps it mounts →
//! the files to write, the processes to start (binary, rewritten args, expanded env) and their probes.
//!
//! No I/O: the caller writes the files, resolves images through [`ImageResolver`] and starts the processes.

use std::{
    collections::{BTreeMap, HashMap},
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::{
    api::core::v1::{ConfigMap, Container, KeyToPath, PodSpec, Probe, Secret, Volume},
    apimachinery::pkg::util::intstr::IntOrString,
};

/// Why a replica cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A container image maps to no built binary (or to one of another version).
    #[error("{0}")]
    ImageNotBuilt(String),
    /// A Secret or ConfigMap a volume or env var needs does not exist (yet).
    #[error("{kind} {name} is missing")]
    Missing {
        /// `Secret` or `ConfigMap`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The pod template uses something the runner does not support.
    #[error("unsupported pod template: {0}")]
    Unsupported(String),
}

impl PlanError {
    /// A CamelCase reason for conditions and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::ImageNotBuilt(_) => "ImageNotBuilt",
            PlanError::Missing { .. } => "VolumeSourceMissing",
            PlanError::Unsupported(_) => "UnsupportedPodTemplate",
        }
    }
}

/// Maps a container image and its command to a local program.
pub trait ImageResolver {
    /// The program for `image` (`<registry>/<name>:<tag>`) when the container runs `command0` (its
    /// `command[0]`, if any).
    fn resolve(&self, image: &str, command0: Option<&str>) -> Result<PathBuf, PlanError>;
}

/// `(name, version)` of an image reference: `registry.k8s.io/kube-apiserver:v1.34.4` →
/// `("kube-apiserver", "v1.34.4")`; an architecture suffix of the tag (`-amd64`, `-arm64`) is dropped.
pub fn image_name_version(image: &str) -> Option<(String, String)> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next()?;
    let (name, tag) = last.split_once(':')?;
    let tag = ["-amd64", "-arm64"]
        .iter()
        .find_map(|s| tag.strip_suffix(s))
        .unwrap_or(tag);
    (!name.is_empty() && !tag.is_empty()).then(|| (name.to_string(), tag.to_string()))
}

/// An HTTP(S) GET probe against the pod's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProbe {
    /// `http` or `https`.
    pub scheme: String,
    /// Host (the pod address unless the probe names one).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path.
    pub path: String,
    /// Seconds between probes.
    pub period: Duration,
    /// Per-probe timeout.
    pub timeout: Duration,
    /// Consecutive failures that count as failed.
    pub failure_threshold: u32,
    /// Delay after the container started.
    pub initial_delay: Duration,
}

impl HttpProbe {
    /// The probe URL.
    pub fn url(&self) -> String {
        format!("{}://{}:{}{}", self.scheme, self.host, self.port, self.path)
    }
}

/// One process of the replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPlan {
    /// Container name.
    pub name: String,
    /// Program to run.
    pub program: PathBuf,
    /// Arguments (`command[1..]` + `args`), paths rewritten, `$(VAR)` expanded.
    pub args: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// Readiness probe.
    pub readiness: Option<HttpProbe>,
    /// Liveness probe.
    pub liveness: Option<HttpProbe>,
    /// Startup probe.
    pub startup: Option<HttpProbe>,
}

/// A file to write before the processes start (and to keep in sync while they run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePlan {
    /// Absolute path.
    pub path: PathBuf,
    /// Content.
    pub content: Vec<u8>,
    /// Unix mode.
    pub mode: u32,
}

/// Everything needed to run one replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodPlan {
    /// Directories to create (emptyDirs and volume roots).
    pub dirs: Vec<PathBuf>,
    /// Files to write (Secret and ConfigMap keys).
    pub files: Vec<FilePlan>,
    /// Init containers, run one after the other to completion.
    pub init: Vec<ContainerPlan>,
    /// Containers, started together after the init containers.
    pub containers: Vec<ContainerPlan>,
}

/// What the pod template can reference.
#[derive(Debug)]
pub struct Sources<'a> {
    /// Secrets of the namespace by name.
    pub secrets: &'a HashMap<String, Secret>,
    /// ConfigMaps of the namespace by name.
    pub config_maps: &'a HashMap<String, ConfigMap>,
}

impl Sources<'_> {
    fn secret(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, PlanError> {
        let secret = self.secrets.get(name).ok_or_else(|| PlanError::Missing {
            kind: "Secret",
            name: name.to_string(),
        })?;
        let mut data: BTreeMap<String, Vec<u8>> = secret
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        for (k, v) in secret.string_data.iter().flatten() {
            data.insert(k.clone(), v.clone().into_bytes());
        }
        Ok(data)
    }

    fn config_map(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, PlanError> {
        let cm = self.config_maps.get(name).ok_or_else(|| PlanError::Missing {
            kind: "ConfigMap",
            name: name.to_string(),
        })?;
        let mut data: BTreeMap<String, Vec<u8>> = cm
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        for (k, v) in cm.data.iter().flatten() {
            data.insert(k.clone(), v.clone().into_bytes());
        }
        Ok(data)
    }
}

/// One file of a volume: relative path, content, mode.
type VolumeFile = (String, Vec<u8>, Option<i32>);

/// Files of one Secret/ConfigMap projection: every key, or only `items` (key → relative path).
fn project(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    source: &str,
) -> Result<Vec<VolumeFile>, PlanError> {
    match items {
        None => Ok(data.iter().map(|(k, v)| (k.clone(), v.clone(), None)).collect()),
        Some(items) => items
            .iter()
            .map(|item| {
                data.get(&item.key)
                    .map(|v| (item.path.clone(), v.clone(), item.mode))
                    .ok_or_else(|| PlanError::Missing {
                        kind: "Secret key",
                        name: format!("{source}/{}", item.key),
                    })
            })
            .collect(),
    }
}

/// Whether `text` is a kubeconfig; if so, the same kubeconfig with every `127.0.0.1`/`localhost`
/// server moved to the pod address (inside a pod, loopback is the pod's own), verifying the server
/// certificate as `localhost`.
pub fn localize_kubeconfig(text: &str, pod_ip: Ipv4Addr) -> Option<String> {
    let mut value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    if value.get("kind").and_then(|k| k.as_str()) != Some("Config") {
        return None;
    }
    let clusters = value.get_mut("clusters")?.as_sequence_mut()?;
    let mut changed = false;
    for cluster in clusters {
        let Some(inner) = cluster.get_mut("cluster").and_then(|c| c.as_mapping_mut()) else {
            continue;
        };
        let Some(server) = inner.get("server").and_then(|s| s.as_str()).map(String::from) else {
            continue;
        };
        for local in ["//127.0.0.1:", "//localhost:", "//127.0.0.1/", "//localhost/"] {
            if server.contains(local) {
                let moved = server.replacen(&local[..local.len() - 1], &format!("//{pod_ip}"), 1);
                inner.insert("server".into(), moved.into());
                inner.insert("tls-server-name".into(), "localhost".into());
                changed = true;
                break;
            }
        }
    }
    changed.then(|| serde_yaml::to_string(&value).ok()).flatten()
}

/// Whether `text` is kube-apiserver's EgressSelectorConfiguration; if so, the same configuration with
/// every `udsName` moved onto the host directory of the volume mounted there (a socket path inside a
/// file is not an argument, so [`rewrite_paths`] does not see it otherwise).
pub fn localize_egress_selector(text: &str, mounts: &[(String, PathBuf)]) -> Option<String> {
    let mut value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    if value.get("kind").and_then(|k| k.as_str()) != Some("EgressSelectorConfiguration") {
        return None;
    }
    let selections = value.get_mut("egressSelections")?.as_sequence_mut()?;
    for selection in selections {
        let Some(uds) = selection
            .get_mut("connection")
            .and_then(|c| c.get_mut("transport"))
            .and_then(|t| t.get_mut("uds"))
            .and_then(|u| u.as_mapping_mut())
        else {
            continue;
        };
        if let Some(name) = uds.get("udsName").and_then(|n| n.as_str()).map(String::from) {
            uds.insert("udsName".into(), rewrite_paths(&name, mounts).into());
        }
    }
    serde_yaml::to_string(&value).ok()
}

/// Every container's `(mount path, host path)` pairs.
fn pod_mounts(spec: &PodSpec, roots: &HashMap<String, PathBuf>) -> Vec<(String, PathBuf)> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .filter_map(|m| {
            let root = roots.get(&m.name)?;
            let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => root.join(sub),
                None => root.clone(),
            };
            Some((m.mount_path.trim_end_matches('/').to_string(), host))
        })
        .collect()
}

fn is_boundary_before(c: Option<char>) -> bool {
    matches!(
        c,
        None | Some(' ' | '=' | ',' | ';' | ':' | '"' | '\'' | '/' | '(' | '\t')
    )
}

fn is_boundary_after(c: Option<char>) -> bool {
    matches!(
        c,
        None | Some('/' | ' ' | ',' | ';' | '"' | '\'' | ')' | '&' | '\t' | '|')
    )
}

/// Rewrites container paths onto host paths: every occurrence of a mount path (longest first) that
/// stands as a whole path component is replaced by its host directory or file.
pub fn rewrite_paths(arg: &str, mounts: &[(String, PathBuf)]) -> String {
    let mut sorted: Vec<&(String, PathBuf)> = mounts.iter().collect();
    sorted.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    let mut prev: Option<char> = None;
    'outer: while !rest.is_empty() {
        if is_boundary_before(prev) {
            for (mount, host) in &sorted {
                if let Some(after) = rest.strip_prefix(mount.as_str())
                    && is_boundary_after(after.chars().next())
                {
                    out.push_str(&host.to_string_lossy());
                    prev = mount.chars().last();
                    rest = after;
                    continue 'outer;
                }
            }
        }
        let Some(c) = rest.chars().next() else { break };
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Kubernetes' `$(VAR)` expansion: `$(NAME)` becomes the value of a defined variable, `$$` becomes `$`,
/// and anything else (including an undefined `$(NAME)`) stays as written.
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(inner) = tail.strip_prefix("$(")
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Flags that make a component listen on the pod's own address (inside a pod, `0.0.0.0` and loopback
/// are the pod's; on the host they are shared by every replica).
fn pin_listen(program: &str, args: &mut Vec<String>, ip: Ipv4Addr) {
    let set = |args: &mut Vec<String>, flag: &str, value: String, add: bool| {
        let prefix = format!("--{flag}=");
        if let Some(a) = args.iter_mut().find(|a| a.starts_with(&prefix)) {
            *a = format!("{prefix}{value}");
        } else if add {
            args.push(format!("{prefix}{value}"));
        }
    };
    match program {
        "kube-apiserver" | "kube-controller-manager" | "kube-scheduler" => {
            set(args, "bind-address", ip.to_string(), true);
        }
        name if name == "proxy-server" || name.starts_with("konnectivity-server") => {
            for flag in [
                "server-bind-address",
                "agent-bind-address",
                "admin-bind-address",
                "health-bind-address",
            ] {
                set(args, flag, ip.to_string(), true);
            }
        }
        "kine" => {
            let port = args
                .iter()
                .find_map(|a| a.strip_prefix("--metrics-bind-address="))
                .and_then(|v| v.rsplit(':').next())
                .filter(|p| !p.is_empty() && *p != "0")
                .unwrap_or("8080")
                .to_string();
            set(args, "metrics-bind-address", format!("{ip}:{port}"), true);
        }
        _ => {
            for flag in ["bind-address", "address"] {
                let prefix = format!("--{flag}=");
                if let Some(a) = args.iter_mut().find(|a| {
                    a.strip_prefix(&prefix)
                        .is_some_and(|v| matches!(v, "0.0.0.0" | "127.0.0.1" | "localhost" | "::"))
                }) {
                    *a = format!("{prefix}{ip}");
                }
            }
        }
    }
}

fn seconds(value: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(value.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
}

fn probe(p: Option<&Probe>, container: &Container, ip: Ipv4Addr) -> Result<Option<HttpProbe>, PlanError> {
    let Some(p) = p else { return Ok(None) };
    let Some(get) = &p.http_get else {
        return Err(PlanError::Unsupported(format!(
            "container {}: only httpGet probes are supported",
            container.name
        )));
    };
    let port = match &get.port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
    .ok_or_else(|| {
        PlanError::Unsupported(format!(
            "container {}: probe port {:?} is not a port",
            container.name, get.port
        ))
    })?;
    Ok(Some(HttpProbe {
        scheme: get.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
        host: get.host.clone().unwrap_or_else(|| ip.to_string()),
        port,
        path: get.path.clone().unwrap_or_else(|| "/".into()),
        period: seconds(p.period_seconds, 10),
        timeout: seconds(p.timeout_seconds, 1),
        failure_threshold: p
            .failure_threshold
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(3),
        initial_delay: seconds(p.initial_delay_seconds, 0),
    }))
}

fn env_of(
    container: &Container,
    sources: &Sources<'_>,
    ip: Ipv4Addr,
) -> Result<BTreeMap<String, String>, PlanError> {
    let mut env = BTreeMap::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(s) = &from.secret_ref {
            match sources.secret(&s.name) {
                Ok(d) => d,
                Err(_) if s.optional == Some(true) => BTreeMap::new(),
                Err(e) => return Err(e),
            }
        } else if let Some(c) = &from.config_map_ref {
            match sources.config_map(&c.name) {
                Ok(d) => d,
                Err(_) if c.optional == Some(true) => BTreeMap::new(),
                Err(e) => return Err(e),
            }
        } else {
            BTreeMap::new()
        };
        for (k, v) in data {
            env.insert(format!("{prefix}{k}"), String::from_utf8_lossy(&v).into_owned());
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(value) = &var.value {
            expand(value, &env)
        } else if let Some(from) = &var.value_from {
            if let Some(r) = &from.secret_key_ref {
                let data = sources.secret(&r.name)?;
                data.get(&r.key)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            } else if let Some(r) = &from.config_map_key_ref {
                let data = sources.config_map(&r.name)?;
                data.get(&r.key)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            } else if let Some(r) = &from.field_ref {
                match r.field_path.as_str() {
                    "status.podIP" | "status.hostIP" => ip.to_string(),
                    other => {
                        return Err(PlanError::Unsupported(format!(
                            "container {}: fieldRef {other}",
                            container.name
                        )));
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.insert(var.name.clone(), value);
    }
    Ok(env)
}

/// Plans the files of every volume under `<dir>/v/<name>`; returns the host root of each volume.
fn volumes(
    spec: &PodSpec,
    sources: &Sources<'_>,
    dir: &Path,
    ip: Ipv4Addr,
    plan: &mut PodPlan,
) -> Result<HashMap<String, PathBuf>, PlanError> {
    let mut roots = HashMap::new();
    for volume in spec.volumes.iter().flatten() {
        let root = dir.join("v").join(&volume.name);
        plan.dirs.push(root.clone());
        for (rel, content, mode) in volume_files(volume, sources)? {
            let content = match std::str::from_utf8(&content)
                .ok()
                .and_then(|t| localize_kubeconfig(t, ip))
            {
                Some(localized) => localized.into_bytes(),
                None => content,
            };
            plan.files.push(FilePlan {
                path: root.join(rel),
                content,
                mode: mode.and_then(|m| u32::try_from(m).ok()).unwrap_or(0o600),
            });
        }
        roots.insert(volume.name.clone(), root);
    }
    Ok(roots)
}

fn volume_files(volume: &Volume, sources: &Sources<'_>) -> Result<Vec<VolumeFile>, PlanError> {
    let with_default = |files: Vec<VolumeFile>, default: Option<i32>| {
        files
            .into_iter()
            .map(|(p, c, m)| (p, c, m.or(default)))
            .collect::<Vec<_>>()
    };
    if let Some(s) = &volume.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let data = match sources.secret(&name) {
            Ok(d) => d,
            Err(_) if s.optional == Some(true) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        return Ok(with_default(
            project(&data, s.items.as_ref(), &name)?,
            s.default_mode,
        ));
    }
    if let Some(c) = &volume.config_map {
        let data = match sources.config_map(&c.name) {
            Ok(d) => d,
            Err(_) if c.optional == Some(true) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        return Ok(with_default(
            project(&data, c.items.as_ref(), &c.name)?,
            c.default_mode,
        ));
    }
    if let Some(p) = &volume.projected {
        let mut files = Vec::new();
        for source in p.sources.iter().flatten() {
            if let Some(s) = &source.secret {
                match sources.secret(&s.name) {
                    Ok(data) => files.extend(project(&data, s.items.as_ref(), &s.name)?),
                    Err(_) if s.optional == Some(true) => {}
                    Err(e) => return Err(e),
                }
            } else if let Some(c) = &source.config_map {
                match sources.config_map(&c.name) {
                    Ok(data) => files.extend(project(&data, c.items.as_ref(), &c.name)?),
                    Err(_) if c.optional == Some(true) => {}
                    Err(e) => return Err(e),
                }
            } else {
                return Err(PlanError::Unsupported(format!(
                    "volume {}: only secret and configMap projections are supported",
                    volume.name
                )));
            }
        }
        return Ok(with_default(files, p.default_mode));
    }
    if volume.empty_dir.is_some() {
        return Ok(Vec::new());
    }
    Err(PlanError::Unsupported(format!(
        "volume {}: only secret, configMap, projected and emptyDir volumes are supported",
        volume.name
    )))
}

fn container_plan(
    container: &Container,
    roots: &HashMap<String, PathBuf>,
    sources: &Sources<'_>,
    images: &dyn ImageResolver,
    ip: Ipv4Addr,
) -> Result<ContainerPlan, PlanError> {
    let image = container.image.clone().unwrap_or_default();
    let command = container.command.clone().unwrap_or_default();
    let program = images.resolve(&image, command.first().map(String::as_str))?;
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let root = roots.get(&m.name).ok_or_else(|| {
            PlanError::Unsupported(format!(
                "container {}: volumeMount {} names no volume",
                container.name, m.name
            ))
        })?;
        let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => root.join(sub),
            None => root.clone(),
        };
        mounts.push((m.mount_path.trim_end_matches('/').to_string(), host));
    }
    let env = env_of(container, sources, ip)?;
    let raw: Vec<String> = command
        .iter()
        .skip(1)
        .chain(container.args.iter().flatten())
        .cloned()
        .collect();
    let mut args: Vec<String> = raw
        .iter()
        .map(|a| expand(&rewrite_paths(a, &mounts), &env))
        .collect();
    let program_name = program
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = image_name_version(&image)
        .map(|(n, _)| n)
        .filter(|n| program_name.starts_with(n.as_str()))
        .unwrap_or(program_name);
    pin_listen(&base, &mut args, ip);
    Ok(ContainerPlan {
        name: container.name.clone(),
        program,
        args,
        env: env.into_iter().collect(),
        readiness: probe(container.readiness_probe.as_ref(), container, ip)?,
        liveness: probe(container.liveness_probe.as_ref(), container, ip)?,
        startup: probe(container.startup_probe.as_ref(), container, ip)?,
    })
}

/// Plans one replica of `spec` in `dir` on address `ip`.
pub fn plan(
    spec: &PodSpec,
    sources: &Sources<'_>,
    images: &dyn ImageResolver,
    dir: &Path,
    ip: Ipv4Addr,
) -> Result<PodPlan, PlanError> {
    let mut plan = PodPlan::default();
    let roots = volumes(spec, sources, dir, ip, &mut plan)?;
    localize_files(spec, &roots, &mut plan.files);
    for c in spec.init_containers.iter().flatten() {
        plan.init.push(container_plan(c, &roots, sources, images, ip)?);
    }
    for c in &spec.containers {
        plan.containers
            .push(container_plan(c, &roots, sources, images, ip)?);
    }
    Ok(plan)
}

/// The volume files of one replica exactly as [`plan`] plans them (to refresh a running replica's volumes).
pub fn plan_files(
    spec: &PodSpec,
    sources: &Sources<'_>,
    dir: &Path,
    ip: Ipv4Addr,
) -> Result<Vec<FilePlan>, PlanError> {
    let mut plan = PodPlan::default();
    let roots = volumes(spec, sources, dir, ip, &mut plan)?;
    localize_files(spec, &roots, &mut plan.files);
    Ok(plan.files)
}

/// Rewrites the socket paths of an EgressSelectorConfiguration file onto the pod directory.
fn localize_files(spec: &PodSpec, roots: &HashMap<String, PathBuf>, files: &mut [FilePlan]) {
    let mounts = pod_mounts(spec, roots);
    for file in files {
        if let Some(localized) = std::str::from_utf8(&file.content)
            .ok()
            .and_then(|t| localize_egress_selector(t, &mounts))
        {
            file.content = localized.into_bytes();
        }
    }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
