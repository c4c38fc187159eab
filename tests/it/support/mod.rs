//! The shared test environment: etcd + kube-apiserver + kube-controller-manager, PostgreSQL, MariaDB
//! and NATS.
//!
//! Under nextest (one process per test) the services are the run's shared ones, started once by the
//! setup script (`tenantplane-dev test-env`, see `.config/nextest.toml`) and found through
//! `TENANTPLANE_TEST_ENV`. Without that variable (`cargo test`: one process for the whole binary) each
//! component starts on first use and its children die with the test process (parent-death signal), so
//! nothing outlives the run. Each test gets a fresh `kube::Client` (clients are bound to the tokio
//! runtime that made them) and, when it needs one, a fresh namespace or PostgreSQL database.

#![allow(dead_code)]

pub use tenantplane_testkit::{eventually, processes_mentioning};

use std::{
    future::Future,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, api::PostParams};
use tenantplane_devenv::{
    localenv::{
        self,
        etcd::{EtcdOptions, LocalEtcd},
        kube::{KubeOptions, LocalKube},
        mariadb::LocalMariaDb,
        nats::LocalNats,
        postgres::LocalPostgres,
    },
    testenv::Manifest,
};

/// The run's shared services when `TENANTPLANE_TEST_ENV` names them (nextest), else `None`. Installs
/// rustls' crypto provider either way, as starting a service here does: a test alone in its process
/// (nextest) builds TLS clients after asking for a service, with nothing else having installed it.
fn shared() -> Option<&'static Manifest> {
    static SHARED: OnceLock<Option<Manifest>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            localenv::install_crypto_provider();
            Manifest::from_env().map(|m| m.unwrap_or_else(|e| panic!("the shared test environment: {e:#}")))
        })
        .as_ref()
}

/// Runs an async start-up on its own thread and runtime, so that a blocking `OnceLock` init works from
/// any test (each `#[tokio::test]` has its own runtime).
fn start_blocking<T, F, Fut>(what: &str, start: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, localenv::LocalEnvError>> + 'static,
{
    let what = what.to_string();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("{what}: runtime: {e}"))?;
        runtime
            .block_on(start())
            .map_err(|e| format!("starting {what} failed: {e}"))
    })
    .join()
    .map_err(|_| "start-up thread panicked".to_string())?
}

fn get<T>(cell: &'static OnceLock<Result<T, String>>) -> &'static T {
    match cell.get().expect("initialized") {
        Ok(value) => value,
        Err(err) => panic!("{err}"),
    }
}

/// The shared management cluster: etcd, kube-apiserver and kube-controller-manager.
#[derive(Debug)]
pub struct Cluster {
    pub kube: Kube,
}

/// Admin access to the shared kube-apiserver; owns it when this process started it.
#[derive(Debug)]
pub struct Kube {
    kubeconfig: PathBuf,
    _local: Option<(LocalEtcd, LocalKube)>,
}

impl Kube {
    /// Path of an admin kubeconfig (CN=admin, O=system:masters).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A fresh `kube::Config` for the admin (one per tokio runtime).
    pub async fn config(&self) -> localenv::Result<kube::Config> {
        localenv::kube::config_from(&self.kubeconfig).await
    }

    /// A fresh admin client.
    pub async fn client(&self) -> localenv::Result<kube::Client> {
        localenv::kube::client_from(&self.kubeconfig).await
    }
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared cluster: the run's, or started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| match shared() {
        Some(manifest) => Ok(Cluster {
            kube: Kube {
                kubeconfig: manifest.kubeconfig.clone(),
                _local: None,
            },
        }),
        None => start_blocking("etcd + kube-apiserver", || async {
            let dir = localenv::scratch_dir("cluster")?;
            let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions::default()).await?;
            let kube = LocalKube::start(dir.join("kube"), KubeOptions::new(etcd.url())).await?;
            let kubeconfig = kube.kubeconfig_path().to_path_buf();
            Ok(Cluster {
                kube: Kube {
                    kubeconfig,
                    _local: Some((etcd, kube)),
                },
            })
        }),
    });
    get(&CLUSTER)
}

/// A fresh admin client of the shared cluster.
pub async fn client() -> kube::Client {
    cluster().kube.client().await.expect("kube client")
}

/// Creates a namespace with a unique name and returns it.
pub async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    name
}

static POSTGRES: OnceLock<Result<PgServer, String>> = OnceLock::new();

/// The test PostgreSQL: the run's shared server or the one at `TENANTPLANE_TEST_DATABASE_URL` (both
/// `External`), else a local one.
pub enum PgServer {
    External(String),
    Local(LocalPostgres),
}

impl PgServer {
    /// URL of the maintenance database.
    pub fn admin_url(&self) -> String {
        match self {
            PgServer::External(url) => url.clone(),
            PgServer::Local(pg) => pg.url(),
        }
    }
}

/// The shared PostgreSQL server: the run's, or started on first use.
pub fn postgres() -> &'static PgServer {
    if let Some(manifest) = shared() {
        POSTGRES.get_or_init(|| Ok(PgServer::External(manifest.postgres_url.clone())));
        return get(&POSTGRES);
    }
    POSTGRES.get_or_init(|| match std::env::var("TENANTPLANE_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Ok(PgServer::External(url)),
        _ => start_blocking("PostgreSQL", || async {
            Ok(PgServer::Local(
                LocalPostgres::start(localenv::scratch_dir("pg")?).await?,
            ))
        }),
    });
    get(&POSTGRES)
}

/// A fresh, empty database on the shared PostgreSQL; returns its URL.
pub async fn fresh_database(prefix: &str) -> String {
    localenv::postgres::create_database(&postgres().admin_url(), prefix)
        .await
        .expect("create database")
}

/// The shared MariaDB server (passwordless root on 127.0.0.1); owns it when this process started it.
#[derive(Debug)]
pub struct MariaDb {
    port: u16,
    _local: Option<LocalMariaDb>,
}

impl MariaDb {
    /// The port (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A sqlx URL for the root user and database `db`.
    pub fn url_for(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// A kine DSN for the root user and database `db`.
    pub fn kine_dsn(&self, db: &str) -> String {
        format!("mysql://root@tcp(127.0.0.1:{})/{db}", self.port)
    }
}

static MARIADB: OnceLock<Result<MariaDb, String>> = OnceLock::new();

/// The shared MariaDB server: the run's, or started on first use.
pub fn mariadb() -> &'static MariaDb {
    MARIADB.get_or_init(|| match shared() {
        Some(manifest) => Ok(MariaDb {
            port: manifest.mariadb_port,
            _local: None,
        }),
        None => start_blocking("MariaDB", || async {
            let local = LocalMariaDb::start(localenv::scratch_dir("mariadb")?).await?;
            Ok(MariaDb {
                port: local.port(),
                _local: Some(local),
            })
        }),
    });
    get(&MARIADB)
}

/// The shared NATS server (JetStream on); owns it when this process started it.
#[derive(Debug)]
pub struct Nats {
    port: u16,
    monitor_port: u16,
    _local: Option<LocalNats>,
}

impl Nats {
    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The bare `host:port` endpoint.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The monitoring URL (`/jsz`, `/healthz`, …).
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }
}

static NATS: OnceLock<Result<Nats, String>> = OnceLock::new();

/// The shared NATS server: the run's, or started on first use.
pub fn nats() -> &'static Nats {
    NATS.get_or_init(|| match shared() {
        Some(manifest) => Ok(Nats {
            port: manifest.nats_port,
            monitor_port: manifest.nats_monitor_port,
            _local: None,
        }),
        None => start_blocking("NATS", || async {
            let local = LocalNats::start(localenv::scratch_dir("nats")?).await?;
            Ok(Nats {
                port: local.port(),
                monitor_port: local.monitor_port(),
                _local: Some(local),
            })
        }),
    });
    get(&NATS)
}

/// Whether this run asks for the full depth of the depth-bound tests (`TENANTPLANE_TEST_DEPTH=deep`,
/// `make test-deep`); `make test` (CI) runs them at a fixed-seed depth that still finds their known bugs.
pub fn deep() -> bool {
    std::env::var("TENANTPLANE_TEST_DEPTH").as_deref() == Ok("deep")
}

/// A unique lowercase suffix for names.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// Runs kubectl against the shared cluster with `stdin`; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let kubeconfig = cluster().kube.kubeconfig_path().to_path_buf();
    let kubectl = localenv::assets::binary("kubectl").unwrap_or_else(|_| "kubectl".into());
    let mut child = std::process::Command::new(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

static CRDS: OnceLock<Result<(), String>> = OnceLock::new();

/// Installs the generated CRDs into the shared cluster (once) and waits until they are served; the
/// run's shared cluster has them already.
pub fn crds_installed() {
    if cluster().kube._local.is_none() {
        return;
    }
    CRDS.get_or_init(|| {
        start_blocking("the CRDs", || async {
            let client = cluster().kube.client().await?;
            localenv::kube::install_crds(&client, "tenantplane-tests").await?;
            let state = tenantplane::controller::settings::DEFAULT_STATE_NAMESPACE;
            localenv::kube::ensure_namespace(&client, state).await
        })
    })
    .as_ref()
    .map_err(|e| e.clone())
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The stage names of an operation as the API answers it, in order.
pub fn stage_names(op: &serde_json::Value) -> Vec<&str> {
    op["stages"]
        .as_array()
        .map(|stages| stages.iter().filter_map(|s| s["stage"].as_str()).collect())
        .unwrap_or_default()
}
