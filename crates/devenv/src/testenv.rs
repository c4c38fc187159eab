//! The shared services of one nextest run (`tenantplane-dev test-env`).
//!
//! nextest runs every test in a process of its own, so the integration tests cannot start their
//! cluster once per process as `cargo test` does. Instead nextest's setup script runs
//! [`start`]: it launches a detached daemon ([`serve`]) that starts etcd + kube-apiserver (+
//! kube-controller-manager), PostgreSQL, MariaDB and NATS once, installs the CRDs, and writes a
//! [`Manifest`] of their addresses. The script hands the manifest's directory to every test through
//! [`ENV_VAR`]. The daemon stops everything as soon as the nextest process that ran the script is gone,
//! so nothing outlives the run.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kube::{KubeOptions, LocalKube},
    mariadb::LocalMariaDb,
    nats::LocalNats,
    postgres::LocalPostgres,
};

/// The variable that points a test process at the shared services: the directory of the manifest.
pub const ENV_VAR: &str = "TENANTPLANE_TEST_ENV";

/// File name of the manifest inside that directory.
pub const MANIFEST: &str = "manifest.json";

/// Addresses of the shared services.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Admin kubeconfig of the shared kube-apiserver.
    pub kubeconfig: PathBuf,
    /// URL of PostgreSQL's maintenance database (superuser).
    pub postgres_url: String,
    /// MariaDB's port on 127.0.0.1 (passwordless root).
    pub mariadb_port: u16,
    /// NATS client port on 127.0.0.1 (JetStream on).
    pub nats_port: u16,
    /// NATS monitoring port on 127.0.0.1.
    pub nats_monitor_port: u16,
}

impl Manifest {
    /// Reads the manifest of the directory named by [`ENV_VAR`]; `None` when the variable is unset.
    pub fn from_env() -> Option<anyhow::Result<Self>> {
        let dir = std::env::var_os(ENV_VAR).filter(|d| !d.is_empty())?;
        Some(Self::read(Path::new(&dir)))
    }

    /// Reads `dir/manifest.json`.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
    }
}

/// The running services; dropping it stops them.
#[derive(Debug)]
struct Services {
    _etcd: LocalEtcd,
    kube: LocalKube,
    _postgres: Option<LocalPostgres>,
    postgres_url: String,
    mariadb: LocalMariaDb,
    nats: LocalNats,
}

impl Services {
    /// Starts every service (the datastores beside the cluster) and installs the CRDs.
    async fn start() -> anyhow::Result<Self> {
        let cluster = async {
            let dir = localenv::scratch_dir("cluster")?;
            let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions::default()).await?;
            let kube = LocalKube::start(dir.join("kube"), KubeOptions::new(etcd.url())).await?;
            Ok::<_, localenv::LocalEnvError>((etcd, kube))
        };
        let external_pg = std::env::var("TENANTPLANE_TEST_DATABASE_URL")
            .ok()
            .filter(|url| !url.is_empty());
        let postgres = async {
            match external_pg {
                Some(_) => Ok(None),
                None => LocalPostgres::start(localenv::scratch_dir("pg")?).await.map(Some),
            }
        };
        let mariadb = async { LocalMariaDb::start(localenv::scratch_dir("mariadb")?).await };
        let nats = async { LocalNats::start(localenv::scratch_dir("nats")?).await };
        let (cluster, postgres, mariadb, nats) = tokio::join!(cluster, postgres, mariadb, nats);
        let (etcd, kube) = cluster.context("start etcd + kube-apiserver")?;
        let postgres = postgres.context("start PostgreSQL")?;
        let postgres_url = match &postgres {
            Some(pg) => pg.url(),
            None => std::env::var("TENANTPLANE_TEST_DATABASE_URL").unwrap_or_default(),
        };
        let client = kube.client().await?;
        localenv::kube::install_crds(&client, "tenantplane-tests").await?;
        localenv::kube::ensure_namespace(&client, crate::k8s::DEFAULT_STATE_NAMESPACE).await?;
        Ok(Self {
            _etcd: etcd,
            kube,
            _postgres: postgres,
            postgres_url,
            mariadb: mariadb.context("start MariaDB")?,
            nats: nats.context("start NATS")?,
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            kubeconfig: self.kube.kubeconfig_path().to_path_buf(),
            postgres_url: self.postgres_url.clone(),
            mariadb_port: self.mariadb.port(),
            nats_port: self.nats.port(),
            nats_monitor_port: self.nats.monitor_port(),
        }
    }
}

/// The manifest directory of the daemon with process id `pid`.
fn manifest_dir(pid: u32) -> PathBuf {
    std::env::temp_dir()
        .join(format!("tenantplane-{pid}"))
        .join("test-env")
}

/// The daemon: starts the services, writes the manifest, and stops everything once `watch` is gone
/// (or on SIGINT/SIGTERM). `log` (its own output) is removed at a clean end.
pub async fn serve(watch: u32, log: &Path) -> anyhow::Result<()> {
    let watched = ProcessIdentity::of(watch).with_context(|| format!("process {watch} is not running"))?;
    let services = tokio::select! {
        services = Services::start() => services?,
        () = watched.gone() => bail!("process {watch} ended before the services were up"),
    };
    let dir = localenv::workdir()?.join("test-env");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&services.manifest())?)?;
    std::fs::rename(&tmp, dir.join(MANIFEST))?;
    eprintln!("[test-env] ready in {}; watching process {watch}", dir.display());
    tokio::select! {
        () = watched.gone() => eprintln!("[test-env] process {watch} ended: stopping"),
        () = localenv::shutdown_signal() => eprintln!("[test-env] signal: stopping"),
    }
    drop(services);
    let _ = std::fs::remove_dir_all(localenv::workdir()?);
    let _ = std::fs::remove_file(log);
    Ok(())
}

/// Launches the daemon detached, watching `watch` (default: the nearest `cargo-nextest` ancestor, else
/// the parent), and waits until its manifest exists; returns the manifest's directory.
pub fn start(watch: Option<u32>, timeout: Duration) -> anyhow::Result<PathBuf> {
    use std::os::unix::process::CommandExt;
    let watch = watch.unwrap_or_else(default_watch);
    let log = std::env::temp_dir().join(format!("tenantplane-test-env.{}.log", std::process::id()));
    let out = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["test-env", "serve", "--watch", &watch.to_string(), "--log"])
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // Its own process group: a signal to the setup script's group does not reach it.
        .process_group(0)
        .spawn()
        .context("spawn the test-env daemon")?;
    let dir = manifest_dir(child.id());
    let started = Instant::now();
    while !dir.join(MANIFEST).exists() {
        if let Some(status) = child.try_wait()? {
            bail!("the test-env daemon exited ({status}); its log:\n{}", tail(&log));
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            bail!(
                "the test-env daemon was not ready after {timeout:?}; its log:\n{}",
                tail(&log)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(dir)
}

/// The last 40 lines of `path`.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The nearest ancestor named `cargo-nextest` (the run to outlive no longer than), else the parent.
fn default_watch() -> u32 {
    let parent = std::os::unix::process::parent_id();
    let mut pid = parent;
    while pid > 1 {
        let Some(stat) = ProcessIdentity::stat(pid) else {
            break;
        };
        if stat.comm.starts_with("cargo-nextest") {
            return pid;
        }
        pid = stat.ppid;
    }
    parent
}

/// A process told apart from a later one with the same id by its start time.
#[derive(Debug, Clone, Copy)]
struct ProcessIdentity {
    pid: u32,
    start_time: u64,
}

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug)]
struct Stat {
    comm: String,
    ppid: u32,
    start_time: u64,
}

impl ProcessIdentity {
    fn of(pid: u32) -> Option<Self> {
        Self::stat(pid).map(|s| Self {
            pid,
            start_time: s.start_time,
        })
    }

    /// Parses `/proc/<pid>/stat`: `pid (comm) state ppid … starttime(22nd field) …`.
    fn stat(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?.to_string();
        let rest: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
        // `rest` starts at field 3 (state): ppid is field 4, starttime field 22.
        Some(Stat {
            comm,
            ppid: rest.get(1)?.parse().ok()?,
            start_time: rest.get(19)?.parse().ok()?,
        })
    }

    fn alive(&self) -> bool {
        Self::stat(self.pid).is_some_and(|s| s.start_time == self.start_time)
    }

    /// Resolves once the process has ended.
    async fn gone(self) {
        while self.alive() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_one_is_not() {
        let me = ProcessIdentity::of(std::process::id()).unwrap();
        assert!(me.alive());
        let stale = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(
            !stale.alive(),
            "a reused pid with another start time counts as gone"
        );
    }

    #[test]
    fn the_parent_is_found_in_proc() {
        let stat = ProcessIdentity::stat(std::process::id()).unwrap();
        assert_eq!(stat.ppid, std::os::unix::process::parent_id());
    }
}
