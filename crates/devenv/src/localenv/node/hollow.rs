//! A hollow kubelet: kubemark `--morph=kubelet` (built by `scripts/test-env` unless
//! `TENANTPLANE_NODE_TOOLS=0`), a real kubelet with a fake container runtime. Given only the bootstrap
//! kubeconfig it does the kubelet's TLS bootstrap (a CSR signed `kubernetes.io/kube-apiserver-client-kubelet`,
//! approved and issued by the tenant's controller-manager), registers its Node and runs the pods the
//! scheduler binds to it (every pod IP is 192.168.192.168). No root, containerd or cgroups needed.
//!
//! Layout of a node's directory: `bootstrap.kubeconfig`, `kubeconfig` and `certs/` (written by the
//! bootstrap; a directory that already has a `kubeconfig` would skip it, so each start needs a fresh
//! one) and `kubemark.log`. kubemark also leaves `/tmp/hollow-kubelet.<rand>/` (named in its log) and
//! the fake runtime's socket `/tmp/kubelet_remote_<rand>.sock` (found with `ss` of iproute2: without it the
//! socket stays); [`HollowNode::stop`] removes those of this process only. The Node object stays in the
//! tenant after a stop.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Node;

use super::{Bootstrap, NodeError, Result, bootstrap_kubeconfig};
use crate::localenv::{
    assets, ports,
    process::{ChildProcess, Spec},
};

/// How often a process whose port was taken meanwhile is started again with new ports.
const PORT_RETRIES: u32 = 3;
/// The file kubemark's certificate lands in (certificate and key).
const CLIENT_CERT: &str = "certs/kubelet-client-current.pem";

/// A running hollow kubelet; dropping it kills the process and removes its `/tmp` leftovers.
pub struct HollowNode {
    name: String,
    dir: PathBuf,
    bootstrap: Bootstrap,
    child: ChildProcess,
    ports: (ports::PortClaim, ports::PortClaim),
    started: Instant,
    spawned: SystemTime,
    restarts: u32,
    leftovers: Leftovers,
    client: Option<kube::Client>,
    stopped: bool,
}

impl std::fmt::Debug for HollowNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HollowNode")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("pid", &self.child.pid())
            .field("ports", &self.ports())
            .finish_non_exhaustive()
    }
}

impl HollowNode {
    /// Starts a hollow kubelet named `name` in `dir` (created; it must not hold a `kubeconfig` yet)
    /// that bootstraps with `bootstrap` alone.
    pub fn start(dir: &Path, name: &str, bootstrap: &Bootstrap) -> Result<Self> {
        check_name(name)?;
        let io = |what: &str, e: std::io::Error| NodeError::node(name, format!("{what}: {e}"));
        if dir.join("kubeconfig").exists() {
            return Err(NodeError::node(
                name,
                format!(
                    "{} already holds a kubeconfig (kubemark would skip the bootstrap): use a fresh directory",
                    dir.display()
                ),
            ));
        }
        std::fs::create_dir_all(dir.join("certs")).map_err(|e| io("create the node directory", e))?;
        write_private(
            &dir.join("bootstrap.kubeconfig"),
            &bootstrap_kubeconfig(bootstrap),
        )
        .map_err(|e| io("write the bootstrap kubeconfig", e))?;
        let spawned = SystemTime::now();
        let (child, ports) = spawn(dir, name)?;
        Ok(Self {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            bootstrap: bootstrap.clone(),
            child,
            ports,
            started: Instant::now(),
            spawned,
            restarts: 0,
            leftovers: Leftovers::default(),
            client: None,
            stopped: false,
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The kubemark process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The kubelet port (its API, plain HTTP, on 0.0.0.0) and the read-only port.
    pub fn ports(&self) -> (u16, u16) {
        (self.ports.0.port(), self.ports.1.port())
    }

    /// The path of kubemark's log.
    pub fn log_path(&self) -> &Path {
        self.child.log_path()
    }

    /// kubemark's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// When the process was started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Fails when kubemark has exited; one that lost a port to another process meanwhile is started
    /// again with new ports (its certificate and kubeconfig are kept, so it does not bootstrap again).
    pub fn check_running(&mut self) -> Result<()> {
        let Err(exited) = self.child.check_running() else {
            self.leftovers.note(self.child.pid(), self.child.log_path());
            return Ok(());
        };
        self.leftovers.note_exited(self.child.log_path(), self.spawned);
        if !exited.address_in_use || self.restarts >= PORT_RETRIES || self.stopped {
            return Err(NodeError::node(&self.name, exited.to_string()));
        }
        self.restarts += 1;
        tracing::info!(node = %self.name, "kubemark lost a port; starting it again with new ports");
        self.leftovers.remove();
        let old = self.dir.join("kubemark.log");
        let _ = std::fs::rename(&old, self.dir.join(format!("kubemark.log.{}", self.restarts)));
        self.spawned = SystemTime::now();
        (self.child, self.ports) = spawn(&self.dir, &self.name)?;
        Ok(())
    }

    /// A client with the node's own identity (`system:node:<name>`), once its certificate is issued.
    pub async fn client(&mut self) -> Result<Option<kube::Client>> {
        if self.client.is_none() {
            let Ok(pem) = std::fs::read_to_string(self.dir.join(CLIENT_CERT)) else {
                return Ok(None);
            };
            let Some(client) = node_client(&self.bootstrap, &pem).await? else {
                return Ok(None);
            };
            self.client = Some(client);
        }
        Ok(self.client.clone())
    }

    /// Waits until the Node is Ready in the tenant (read with the node's own credentials); returns the
    /// time from the start. Fails when kubemark exits or `timeout` passes, with the end of its log.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let mut last = "no client certificate issued yet".to_string();
        loop {
            self.check_running()?;
            if let Some(client) = self.client().await? {
                match kube::Api::<Node>::all(client).get_opt(&self.name).await {
                    Ok(Some(node)) if is_ready(&node) => return Ok(self.started.elapsed()),
                    Ok(Some(_)) => last = "the Node is registered, not Ready yet".into(),
                    Ok(None) => last = "the certificate is issued, the Node is not registered yet".into(),
                    Err(e) => last = format!("get the Node: {e}"),
                }
            }
            if self.started.elapsed() > timeout {
                let tail = self.child.log_tail(20);
                return Err(NodeError::node(
                    &self.name,
                    format!(
                        "not Ready after {} s ({last}); last log lines:\n{tail}",
                        timeout.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `/tmp` paths kubemark made that were found so far (its root directory, its runtime socket).
    pub fn leftovers(&self) -> Vec<PathBuf> {
        self.leftovers.paths()
    }

    /// Stops kubemark (SIGTERM, then SIGKILL after 5 s) and removes its `/tmp` leftovers. The Node
    /// object stays in the tenant (it goes `Unknown` after the node-monitor grace period).
    pub fn stop(&mut self) {
        self.stop_within(Duration::from_secs(5));
    }

    fn stop_within(&mut self, grace: Duration) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let _ = self.check_running();
        self.child.stop(grace);
        self.leftovers.note_exited(self.child.log_path(), self.spawned);
        self.leftovers.remove();
    }
}

impl Drop for HollowNode {
    fn drop(&mut self) {
        self.stop_within(Duration::ZERO);
    }
}

/// Claims two ports and spawns kubemark for `name` in `dir`.
fn spawn(dir: &Path, name: &str) -> Result<(ChildProcess, (ports::PortClaim, ports::PortClaim))> {
    let kubemark = assets::binary("kubemark").map_err(|e| {
        NodeError::node(
            name,
            format!(
                "{e} (kubemark is built by `scripts/test-env build` unless TENANTPLANE_NODE_TOOLS=0, which `make run` sets)"
            ),
        )
    })?;
    let claim = || ports::claim().map_err(|e| NodeError::node(name, format!("claim a port: {e}")));
    let ports = (claim()?, claim()?);
    let path = |p: &str| dir.join(p).display().to_string();
    let spec = Spec::new(format!("kubemark {name}"), kubemark).args([
        "--morph=kubelet".to_string(),
        format!("--name={name}"),
        format!("--bootstrap-kubeconfig={}", path("bootstrap.kubeconfig")),
        format!("--kubeconfig={}", path("kubeconfig")),
        format!("--cert-dir={}", path("certs")),
        format!("--kubelet-port={}", ports.0.port()),
        format!("--kubelet-read-only-port={}", ports.1.port()),
        // Without containerd: the fake image service (the default dials containerd and exits).
        "--use-host-image-service=false".into(),
        "--v=2".into(),
    ]);
    let child = ChildProcess::spawn(&spec, &dir.join("kubemark.log"))
        .map_err(|e| NodeError::node(name, format!("start kubemark: {e}")))?;
    Ok((child, ports))
}

/// A node name must be a DNS-1123 subdomain (it is the Node's name and the CSR's CN).
fn check_name(name: &str) -> Result<()> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(NodeError::node(
            name,
            "a node name is lowercase letters, digits, '-' and '.' (a DNS-1123 subdomain)",
        ))
    }
}

/// Writes `text` readable by the owner only (it holds the bootstrap token).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::{io::Write as _, os::unix::fs::OpenOptionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// Whether the Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The PEM blocks of `pem` whose label satisfies `wanted`, concatenated.
fn pem_blocks(pem: &str, wanted: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let mut keep = false;
    for line in pem.lines() {
        if let Some(label) = line.strip_prefix("-----BEGIN ") {
            keep = wanted(label.trim_end_matches('-'));
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with("-----END ") {
            keep = false;
        }
    }
    out
}

/// A client for the bootstrap's server and CA with the certificate and key of `pem` (kubemark's
/// `kubelet-client-current.pem`); `None` while the file is incomplete.
async fn node_client(bootstrap: &Bootstrap, pem: &str) -> Result<Option<kube::Client>> {
    let cert = pem_blocks(pem, |l| l == "CERTIFICATE");
    let key = pem_blocks(pem, |l| l.ends_with("PRIVATE KEY"));
    if cert.is_empty() || key.is_empty() {
        return Ok(None);
    }
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: tenant\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
         users:\n- name: node\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
         contexts:\n- name: node\n  context: {{cluster: tenant, user: node}}\ncurrent-context: node\n",
        serde_json::Value::from(bootstrap.server.as_str()),
        b64(&bootstrap.ca_pem),
        b64(&cert),
        b64(&key),
    );
    let fail = |e: String| NodeError::ClusterInfo(format!("the node's kubeconfig: {e}"));
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).map_err(|e| fail(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    Ok(Some(
        kube::Client::try_from(config).map_err(|e| fail(e.to_string()))?,
    ))
}

/// The `/tmp` paths one kubemark process made.
#[derive(Debug, Default)]
struct Leftovers {
    root_dir: Option<PathBuf>,
    sockets: BTreeSet<PathBuf>,
}

/// The prefix of the fake runtime's sockets.
const SOCKET_PREFIX: &str = "/tmp/kubelet_remote_";

impl Leftovers {
    /// Records the root directory named in the log and, once it is there, the runtime socket the live
    /// process `pid` listens on.
    fn note(&mut self, pid: u32, log: &Path) {
        self.note_root_dir(log);
        if self.root_dir.is_none() || !self.sockets.is_empty() {
            return;
        }
        let Some(listening) = listening_unix_files() else {
            return;
        };
        for (path, inode, _) in runtime_socket_files() {
            if listening
                .iter()
                .any(|(pids, i)| *i == inode && pids.contains(&pid))
            {
                self.sockets.insert(path);
            }
        }
    }

    /// After the process exited: the root directory, and runtime sockets made since `spawned` that no
    /// process listens on (those of a process that died before its socket was seen).
    fn note_exited(&mut self, log: &Path, spawned: SystemTime) {
        self.note_root_dir(log);
        if self.root_dir.is_none() || !self.sockets.is_empty() {
            return;
        }
        let Some(listening) = listening_unix_files() else {
            return;
        };
        for (path, inode, made) in runtime_socket_files() {
            if made >= spawned && listening.iter().all(|(_, i)| *i != inode) {
                self.sockets.insert(path);
            }
        }
    }

    fn note_root_dir(&mut self, log: &Path) {
        if self.root_dir.is_some() {
            return;
        }
        let text = std::fs::read_to_string(log).unwrap_or_default();
        self.root_dir = text.lines().find_map(|line| {
            let (_, rest) = line.split_once("Using /tmp/hollow-kubelet.")?;
            let (suffix, _) = rest.split_once(" as root dir")?;
            (!suffix.is_empty() && !suffix.contains('/'))
                .then(|| PathBuf::from(format!("/tmp/hollow-kubelet.{suffix}")))
        });
    }

    fn paths(&self) -> Vec<PathBuf> {
        self.root_dir.iter().chain(&self.sockets).cloned().collect()
    }

    fn remove(&mut self) {
        if let Some(dir) = self.root_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        for socket in std::mem::take(&mut self.sockets) {
            let _ = std::fs::remove_file(socket);
        }
    }
}

fn is_runtime_socket(path: &Path) -> bool {
    path.to_str()
        .and_then(|p| p.strip_prefix(SOCKET_PREFIX))
        .and_then(|rest| rest.strip_suffix(".sock"))
        .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// The fake runtime sockets in `/tmp`: path, file inode, modification time.
fn runtime_socket_files() -> Vec<(PathBuf, u64, SystemTime)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| is_runtime_socket(&entry.path()))
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            Some((entry.path(), meta.ino(), meta.modified().ok()?))
        })
        .collect()
}

/// The listening unix sockets as (processes holding them, inode of their file), from `ss -xlpe`
/// (iproute2); `None` without `ss`. `/proc/net/unix` cannot tell: it shows the path a socket was
/// bound at, and the fake runtime binds a temporary name and renames it.
fn listening_unix_files() -> Option<Vec<(Vec<u32>, u64)>> {
    let out = std::process::Command::new("ss")
        .arg("-xlpe")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| parse_ss(&String::from_utf8_lossy(&out.stdout)))
}

/// The `pid=` values and the `ino:` (file inode) of each line of `ss -xlpe`.
fn parse_ss(text: &str) -> Vec<(Vec<u32>, u64)> {
    text.lines()
        .filter_map(|line| {
            let inode = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("ino:"))?
                .parse()
                .ok()?;
            let pids = line
                .match_indices("pid=")
                .filter_map(|(at, _)| {
                    let digits: String = line[at + 4..].chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().ok()
                })
                .collect();
            Some((pids, inode))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn node_names_are_dns_subdomains() {
        for ok in ["hollow-1", "a", "n.example", "hollow-0a1b2c3d"] {
            check_name(ok).unwrap();
        }
        for bad in ["", "Hollow", "-a", "a-", "a..b", "a_b", "a/b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_root_dir_comes_from_the_log_and_sockets_are_matched_by_name() {
        let dir = crate::localenv::scratch_dir("hollow-unit").unwrap();
        let log = dir.join("kubemark.log");
        std::fs::write(
            &log,
            "I1201 hollow_kubelet.go:152] Using /tmp/hollow-kubelet.2838777918 as root dir for hollow-kubelet\n",
        )
        .unwrap();
        let mut leftovers = Leftovers::default();
        leftovers.note_root_dir(&log);
        assert_eq!(
            leftovers.paths(),
            vec![PathBuf::from("/tmp/hollow-kubelet.2838777918")]
        );
        std::fs::write(&log, "Using /tmp/hollow-kubelet.1/../x as root dir\n").unwrap();
        let mut other = Leftovers::default();
        other.note_root_dir(&log);
        assert_eq!(other.paths(), Vec::<PathBuf>::new());
        assert!(is_runtime_socket(Path::new(
            "/tmp/kubelet_remote_4425160548253164824.sock"
        )));
        assert!(!is_runtime_socket(Path::new("/tmp/kubelet_remote_.sock")));
        assert!(!is_runtime_socket(Path::new("/tmp/kubelet_remote_1/../x.sock")));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn ss_lines_give_the_processes_and_the_file_inode() {
        let text = "Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n\
            u_str LISTEN 0 4096 /tmp/3556194572 802229 * 0 users:((\"kubemark\",pid=5431,fd=7)) <-> ino:9981007 dev:0/65024 peers:\n\
            u_str LISTEN 0 4096 /tmp/x.sock 1 * 0 users:((\"a\",pid=1,fd=3),(\"b\",pid=22,fd=4)) <-> ino:5 dev:0/1 peers:\n";
        assert_eq!(parse_ss(text), vec![(vec![5431], 9981007), (vec![1, 22], 5)]);
    }

    #[test]
    fn certificate_and_key_blocks_are_split() {
        let pem = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\nBBB\n-----END EC PRIVATE KEY-----\n";
        assert_eq!(
            pem_blocks(pem, |l| l == "CERTIFICATE"),
            "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n"
        );
        assert_eq!(
            pem_blocks(pem, |l| l.ends_with("PRIVATE KEY")),
            "-----BEGIN EC PRIVATE KEY-----\nBBB\n-----END EC PRIVATE KEY-----\n"
        );
    }
}
