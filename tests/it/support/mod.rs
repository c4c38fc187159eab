//! The shared test environment: started once per test binary, torn down when the binary exits.
//!
//! Each component starts on first use: etcd + kube-apiserver + kube-controller-manager, PostgreSQL,
//! MariaDB and NATS. Children die with the test process (parent-death signal), so nothing outlives
//! the run. Each test gets a fresh `kube::Client` (clients are bound to the tokio runtime that made
//! them) and, when it needs one, a fresh namespace or PostgreSQL database.

#![allow(dead_code)]

pub use tenantplane_testkit::{eventually, processes_mentioning};

use std::{future::Future, sync::OnceLock};

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, api::PostParams};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    kube::{KubeOptions, LocalKube},
    mariadb::LocalMariaDb,
    nats::LocalNats,
    postgres::LocalPostgres,
};

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
pub struct Cluster {
    pub etcd: LocalEtcd,
    pub kube: LocalKube,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The shared cluster, started on first use.
pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        start_blocking("etcd + kube-apiserver", || async {
            let dir = localenv::scratch_dir("cluster")?;
            let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions::default()).await?;
            let kube = LocalKube::start(dir.join("kube"), KubeOptions::new(etcd.url())).await?;
            Ok(Cluster { etcd, kube })
        })
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

/// The test PostgreSQL: the server at `TENANTPLANE_TEST_DATABASE_URL` when set, else a local one.
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

/// The shared PostgreSQL server, started on first use.
pub fn postgres() -> &'static PgServer {
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

static MARIADB: OnceLock<Result<LocalMariaDb, String>> = OnceLock::new();

/// The shared MariaDB server, started on first use.
pub fn mariadb() -> &'static LocalMariaDb {
    MARIADB.get_or_init(|| {
        start_blocking("MariaDB", || async {
            LocalMariaDb::start(localenv::scratch_dir("mariadb")?).await
        })
    });
    get(&MARIADB)
}

static NATS: OnceLock<Result<LocalNats, String>> = OnceLock::new();

/// The shared NATS server (JetStream on), started on first use.
pub fn nats() -> &'static LocalNats {
    NATS.get_or_init(|| {
        start_blocking("NATS", || async {
            LocalNats::start(localenv::scratch_dir("nats")?).await
        })
    });
    get(&NATS)
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

/// Installs the generated CRDs into the shared cluster (once) and waits until they are served.
pub fn crds_installed() {
    cluster();
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
