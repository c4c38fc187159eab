//! End to end: from a REST request to a serving tenant cluster. Each test runs `serve` (on a fresh
//! database), the sync worker, the controllers and the pod-less runner in-process on the shared
//! management cluster, scoped to its own tenants (controller: label selector on the tenant ids;
//! runner: the tenants' namespaces; DataStores: a label), so tests run in parallel without seeing each
//! other. Tokens are minted through the API, as a tenant would.

mod carry;
mod cli;
mod drain;
mod etcd;
mod identity;
mod join_tokens;
mod kine;
mod konnectivity;
mod kubeadm;
mod lifecycle;
mod migration;
mod node_join;
mod nodes;
mod ts_client;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{
    controller::{ControllerSettings, metrics::Metrics},
    k8s::crd::DataStore,
    pki::{Ca, CertKey},
    translate::TenantAddress,
    worker::{Worker, WorkerMetrics, WorkerSettings},
};
use tenantplane_devenv::{
    localenv::{
        self,
        etcd::{EtcdOptions, LocalEtcd},
        process::{ChildProcess, Spec},
    },
    runner::{Runner, RunnerSettings},
};

use crate::{
    api::{App, spawn_app_with, tenant_id},
    support::{self, eventually},
};

/// How long a control plane may take to become Ready on a loaded 2-core machine (a bound, not a speed
/// claim: with every e2e stack and schemathesis at once the load passes 30, and a tenant apiserver once
/// took more than 180 s).
pub const READY: Duration = Duration::from_secs(300);
const LABEL: &str = "tenantplane.test/e2e";
/// The kine image the controller renders: the runner maps it to the cached kine binary.
pub const KINE_IMAGE: &str = "rancher/kine:v0.17.5";

/// One tenant of a stack: its slug, namespace and a tenant-member token minted through the API.
pub struct Tenant {
    pub slug: String,
    pub namespace: String,
    pub member: String,
    pub admin: String,
}

/// serve + worker + controller + runner for a set of tenants; everything stops when dropped.
pub struct Stack {
    pub app: App,
    pub kube: kube::Client,
    pub id: String,
    pub tenants: Vec<Tenant>,
    /// A namespace for the stack's own Secrets (DataStore credentials).
    pub ns: String,
    pub runner: Runner,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The controllers as a `tenantplane controller` process (see [`stack_with_controller_process`]).
    controller: Option<ControllerProcess>,
    _worker: Arc<Worker>,
}

/// How a stack runs its controllers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Controllers {
    /// In a task of the test process.
    Task,
    /// As a `tenantplane controller` child process, which a test can SIGKILL and start again.
    Process,
}

/// The controllers' child process and what starts it again.
struct ControllerProcess {
    spec: Spec,
    log: std::path::PathBuf,
    child: Option<ChildProcess>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts a stack with `n` tenants.
pub async fn stack(prefix: &str, n: usize) -> Stack {
    start_stack(prefix, n, Controllers::Task, |_| {}).await
}

/// Starts a stack with `n` tenants whose controller settings `tune` changes.
pub async fn stack_with(prefix: &str, n: usize, tune: impl FnOnce(&mut ControllerSettings)) -> Stack {
    start_stack(prefix, n, Controllers::Task, tune).await
}

/// Starts a stack with `n` tenants whose controllers run as a child process
/// ([`Stack::kill_controller`], [`Stack::start_controller`]).
pub async fn stack_with_controller_process(prefix: &str, n: usize) -> Stack {
    start_stack(prefix, n, Controllers::Process, |_| {}).await
}

async fn start_stack(
    prefix: &str,
    n: usize,
    controllers: Controllers,
    tune: impl FnOnce(&mut ControllerSettings),
) -> Stack {
    support::crds_installed();
    let kube = support::client().await;
    let app = spawn_app_with(Some(kube.clone())).await;
    let id = support::unique(prefix);
    let mut tenants = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..n {
        let slug = app.tenant(prefix).await;
        ids.push(tenant_id(&app, &slug).await.to_string());
        let member = app.token(&slug, "tenant-member").await;
        let admin = app.token(&slug, "tenant-admin").await;
        tenants.push(Tenant {
            namespace: format!("tp-{slug}"),
            slug,
            member,
            admin,
        });
    }
    let ns = support::namespace(&kube, prefix).await;

    let worker = Arc::new(Worker::new(
        app.ctx.db.clone(),
        kube.clone(),
        WorkerSettings {
            poll_ms: 50,
            backoff_ms: 200,
            backoff_max_ms: 2000,
            resync_seconds: 3600.0,
            tenant_address: TenantAddress::Loopback,
            issuer: app.issuer.clone(),
            ..WorkerSettings::default()
        },
        WorkerMetrics::default(),
    ));
    let mut tasks = vec![tokio::spawn({
        let worker = worker.clone();
        async move {
            let _ = worker.run().await;
        }
    })];

    let mut settings = ControllerSettings::new(format!("e2e-{id}"));
    settings.concurrency = 4;
    settings.datastore_selector = Some(format!("{LABEL}={id}"));
    settings.control_plane_selector = Some(format!("tenantplane.io/tenant in ({})", ids.join(",")));
    settings.workload.kine_image = KINE_IMAGE.into();
    settings.resync = Duration::from_secs(30);
    // The in-tenant phase's periodic check, short enough for the remediation tests.
    settings.in_tenant_resync = Duration::from_secs(10);
    tune(&mut settings);
    let controller = match controllers {
        Controllers::Task => {
            tasks.push(spawn_controller(&kube, &settings));
            None
        }
        Controllers::Process => {
            let mut process = controller_process(&settings);
            process.child = Some(spawn_controller_process(&process));
            Some(process)
        }
    };

    let mut runner_settings = RunnerSettings::new(localenv::workdir().unwrap().join(&id[id.len() - 10..]));
    runner_settings.namespaces = Some(
        tenants
            .iter()
            .map(|t| t.namespace.clone())
            .collect::<BTreeSet<_>>(),
    );
    let runner = Runner::start(kube.clone(), runner_settings).unwrap();
    Stack {
        app,
        kube,
        id,
        tenants,
        ns,
        runner,
        tasks,
        controller,
        _worker: worker,
    }
}

/// The `tenantplane controller` command line of `settings` (no leader election: one replica).
fn controller_process(settings: &ControllerSettings) -> ControllerProcess {
    let kubeconfig = support::cluster().kube.kubeconfig_path().to_path_buf();
    let log = localenv::scratch_dir("controller-process")
        .unwrap()
        .join(format!("{}.log", settings.identity));
    let mut spec = Spec::new("controller", env!("CARGO_BIN_EXE_tenantplane"))
        .args(["controller", "--leader-election", "false"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--identity", &settings.identity])
        .args(["--concurrency", &settings.concurrency.to_string()])
        .args(["--kine-image", &settings.workload.kine_image])
        .args([
            "--in-tenant-resync-secs",
            &settings.in_tenant_resync.as_secs().to_string(),
        ])
        .args(["--kubeconfig", &kubeconfig.to_string_lossy()])
        .env("RUST_LOG", "info");
    for (flag, value) in [
        ("--datastore-selector", &settings.datastore_selector),
        ("--control-plane-selector", &settings.control_plane_selector),
    ] {
        if let Some(value) = value {
            spec = spec.args([flag, value.as_str()]);
        }
    }
    ControllerProcess {
        spec,
        log,
        child: None,
    }
}

fn spawn_controller_process(process: &ControllerProcess) -> ChildProcess {
    ChildProcess::spawn(&process.spec, &process.log).unwrap()
}

/// The controllers in a task of their own.
fn spawn_controller(kube: &kube::Client, settings: &ControllerSettings) -> tokio::task::JoinHandle<()> {
    let (kube, settings) = (kube.clone(), settings.clone());
    tokio::spawn(async move {
        let _ = tenantplane::controller::run(
            kube,
            settings,
            None,
            Arc::new(Metrics::default()),
            std::future::pending(),
        )
        .await;
    })
}

/// TLS etcds sharing one CA.
pub async fn etcds(prefix: &str, n: usize) -> (Ca, Vec<LocalEtcd>) {
    let ca = Ca::new(&format!("{prefix}-etcd-ca")).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let dir = localenv::scratch_dir(prefix).unwrap();
        out.push(
            LocalEtcd::start(dir, EtcdOptions { tls_ca: Some(&ca) })
                .await
                .unwrap(),
        );
    }
    (ca, out)
}

impl Stack {
    /// A Secret in the stack's namespace.
    pub async fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let data: serde_json::Map<String, Value> =
            data.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
        Api::<Secret>::namespaced(self.kube.clone(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    fn sref(&self, secret: &str, key: &str) -> Value {
        json!({"secretReference": {"name": secret, "namespace": self.ns, "keyPath": key}})
    }

    fn api_ref(&self, secret: &str, key: &str) -> Value {
        json!({"name": secret, "namespace": self.ns, "keyPath": key})
    }

    /// Creates a pool through the API (platform admin).
    pub async fn pool(&self, name: &str) {
        let r = self
            .app
            .call(
                Method::POST,
                "/api/v1/pools",
                Some(&self.app.admin),
                Some(json!({"name": name, "policy": "spread"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }

    /// Registers a DataStore through the API and creates its DataStore object in the cluster (as an
    /// operator does: the registry and the cluster object share the name), then waits until it is Ready.
    /// `body` is the `POST /datastores` body; `spec` the DataStore object's spec.
    async fn register(&self, body: Value, spec: Value) {
        let name = body["name"].as_str().unwrap().to_string();
        let name = name.as_str();
        let r = self
            .app
            .call(
                Method::POST,
                "/api/v1/datastores",
                Some(&self.app.admin),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        let ds: DataStore = serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "DataStore",
            "metadata": {"name": name, "labels": {LABEL: self.id}},
            "spec": spec,
        }))
        .unwrap();
        let api: Api<DataStore> = Api::all(self.kube.clone());
        api.create(&PostParams::default(), &ds).await.unwrap();
        eventually(
            &format!("DataStore {name} Ready"),
            Duration::from_secs(60),
            || {
                let api = api.clone();
                async move {
                    api.get_opt(name)
                        .await
                        .ok()??
                        .status
                        .filter(|s| s.ready)
                        .map(|_| ())
                }
            },
        )
        .await;
    }

    /// An etcd DataStore in `pool` whose TLS material sits in Secret `<name>-tls`.
    pub async fn etcd_datastore(&self, pool: &str, etcd: &LocalEtcd, ca_id: &str) -> String {
        let name = support::unique("e2e-etcd");
        let tls = etcd.tls().unwrap();
        let secret = format!("{name}-tls");
        self.secret(
            &secret,
            &[
                ("ca.crt", &tls.ca.cert_pem),
                ("ca.key", &tls.ca.key_pem),
                ("root.crt", &tls.root_client.cert_pem),
                ("root.key", &tls.root_client.key_pem),
            ],
        )
        .await;
        let spec = json!({
            "driver": "etcd",
            "endpoints": [etcd.endpoint()],
            "tlsConfig": {
                "certificateAuthority": {"certificate": self.sref(&secret, "ca.crt"), "privateKey": self.sref(&secret, "ca.key")},
                "clientCertificate": {"certificate": self.sref(&secret, "root.crt"), "privateKey": self.sref(&secret, "root.key")},
            },
        });
        let api = json!({
            "caCertificate": self.api_ref(&secret, "ca.crt"),
            "caPrivateKey": self.api_ref(&secret, "ca.key"),
            "clientCertificate": self.api_ref(&secret, "root.crt"),
            "clientPrivateKey": self.api_ref(&secret, "root.key"),
        });
        let body = json!({
            "name": name, "pool": pool, "driver": "etcd", "endpoints": [etcd.endpoint()],
            "secrets": api, "capacityTenants": 100, "caId": ca_id,
        });
        self.register(body, spec).await;
        name
    }

    /// A basic-auth DataStore (PostgreSQL, MySQL or NATS) in `pool`.
    pub async fn basic_datastore(
        &self,
        pool: &str,
        driver: &str,
        endpoint: &str,
        user: &str,
        password: &str,
        capacity: i32,
    ) -> String {
        let name = support::unique(&format!("e2e-{}", driver.to_lowercase()));
        let secret = format!("{name}-auth");
        self.secret(&secret, &[("username", user), ("password", password)])
            .await;
        let spec = json!({
            "driver": driver,
            "endpoints": [endpoint],
            "basicAuth": {"username": self.sref(&secret, "username"), "password": self.sref(&secret, "password")},
        });
        let api = json!({"username": self.api_ref(&secret, "username"), "password": self.api_ref(&secret, "password")});
        let body = json!({
            "name": name, "pool": pool, "driver": driver, "endpoints": [endpoint],
            "secrets": api, "capacityTenants": capacity,
        });
        self.register(body, spec).await;
        name
    }

    /// A SQL DataStore in `pool` over TLS: the CA (with its key, so tenants get client certificates of
    /// their own), the admin's client certificate `admin` and basic auth.
    pub async fn tls_datastore(
        &self,
        pool: &str,
        driver: &str,
        endpoint: &str,
        (user, password): (&str, &str),
        ca: &Ca,
        admin: &CertKey,
    ) -> String {
        let name = support::unique(&format!("e2e-tls-{}", driver.to_lowercase()));
        let secret = format!("{name}-tls");
        let entries = [
            ("username", user),
            ("password", password),
            ("ca.crt", ca.ca.cert_pem.as_str()),
            ("ca.key", ca.ca.key_pem.as_str()),
            ("admin.crt", admin.cert_pem.as_str()),
            ("admin.key", admin.key_pem.as_str()),
        ];
        self.secret(&secret, &entries).await;
        let spec = json!({
            "driver": driver,
            "endpoints": [endpoint],
            "basicAuth": {"username": self.sref(&secret, "username"), "password": self.sref(&secret, "password")},
            "tlsConfig": {
                "certificateAuthority": {"certificate": self.sref(&secret, "ca.crt"), "privateKey": self.sref(&secret, "ca.key")},
                "clientCertificate": {"certificate": self.sref(&secret, "admin.crt"), "privateKey": self.sref(&secret, "admin.key")},
            },
        });
        let api = json!({
            "username": self.api_ref(&secret, "username"), "password": self.api_ref(&secret, "password"),
            "caCertificate": self.api_ref(&secret, "ca.crt"), "caPrivateKey": self.api_ref(&secret, "ca.key"),
            "clientCertificate": self.api_ref(&secret, "admin.crt"), "clientPrivateKey": self.api_ref(&secret, "admin.key"),
        });
        let body = json!({
            "name": name, "pool": pool, "driver": driver, "endpoints": [endpoint],
            "secrets": api, "capacityTenants": 10,
        });
        self.register(body, spec).await;
        name
    }

    /// POSTs a control plane as tenant `t` (member token); returns the 202 body.
    pub async fn create(&self, t: usize, body: Value) -> Value {
        let tenant = &self.tenants[t];
        let r = self
            .app
            .call(
                Method::POST,
                &format!("/api/v1/tenants/{}/control-planes", tenant.slug),
                Some(&tenant.member),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        r.body
    }

    /// GET of a control plane through the API.
    pub async fn get(&self, t: usize, id: &str) -> Value {
        let tenant = &self.tenants[t];
        let r = self
            .app
            .call(
                Method::GET,
                &format!("/api/v1/tenants/{}/control-planes/{id}", tenant.slug),
                Some(&tenant.member),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        r.body
    }

    /// Waits until the API reports phase `Ready` (and `installedVersion` = `version`); returns the body.
    pub async fn ready(&self, t: usize, id: &str, version: &str) -> Value {
        let start = std::time::Instant::now();
        loop {
            let cp = self.get(t, id).await;
            if cp["phase"] == "Ready" && cp["status"]["installedVersion"] == version {
                return cp;
            }
            if start.elapsed() > READY {
                let ns = &self.tenants[t].namespace;
                let name = cp["name"].as_str().unwrap_or_default();
                let logs: Vec<String> = self
                    .runner
                    .logs(ns, name)
                    .iter()
                    .map(|p| format!("== {}\n{}", p.display(), tail(p, 15)))
                    .collect();
                panic!(
                    "control plane {id} not Ready at {version} after {READY:?}: {cp:#}\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Long-polls operation `op` of tenant `t` (`waitSeconds=30`) until it is done, within [`READY`];
    /// returns every distinct answer seen, in order, and at each one the control plane as it was right
    /// after (`(operation, control plane)`).
    pub async fn operation_until_done(&self, t: usize, op: &str) -> Vec<(Value, Value)> {
        let tenant = &self.tenants[t];
        let start = std::time::Instant::now();
        let mut seen: Vec<(Value, Value)> = Vec::new();
        loop {
            let r = self
                .app
                .call(
                    Method::GET,
                    &format!("/api/v1/tenants/{}/operations/{op}?waitSeconds=30", tenant.slug),
                    Some(&tenant.member),
                    None,
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            let cp = self
                .app
                .call(
                    Method::GET,
                    &format!(
                        "/api/v1/tenants/{}/control-planes/{}",
                        tenant.slug,
                        r.body["controlPlaneId"].as_str().unwrap()
                    ),
                    Some(&tenant.member),
                    None,
                )
                .await
                .body;
            if seen.last().is_none_or(|(last, _)| *last != r.body) {
                seen.push((r.body.clone(), cp));
            }
            if r.body["done"] == true {
                return seen;
            }
            assert!(
                start.elapsed() < READY,
                "operation {op} not done after {READY:?}: {:#}",
                r.body
            );
        }
    }

    /// The tenant's kubeconfig through the API (the exec-plugin one, the same over REST and GraphQL).
    pub async fn kubeconfig(&self, t: usize, id: &str) -> String {
        let tenant = &self.tenants[t];
        let r = self
            .app
            .call(
                Method::GET,
                &format!("/api/v1/tenants/{}/control-planes/{id}/kubeconfig", tenant.slug),
                Some(&tenant.member),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        // GraphQL hands out the same one (`ControlPlane.kubeconfig`).
        let query = "query($id: ID!) { node(id: $id) { ... on ControlPlane { kubeconfig } } }";
        let gid = crate::graphql::control_plane_gid(&tenant.slug, id);
        let data =
            crate::graphql::data(&self.app, &tenant.member, query, serde_json::json!({"id": gid})).await;
        assert_eq!(data["node"]["kubeconfig"].as_str(), Some(r.text.as_str()));
        r.text
    }

    /// The break-glass admin kubeconfig (`system:masters`, platform admin), as a kube client.
    pub async fn tenant_client(&self, t: usize, id: &str) -> kube::Client {
        let tenant = &self.tenants[t];
        let r = self
            .app
            .call(
                Method::GET,
                &format!(
                    "/api/v1/tenants/{}/control-planes/{id}/admin-kubeconfig",
                    tenant.slug
                ),
                Some(&self.app.admin),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let kubeconfig: kube::config::Kubeconfig = serde_yaml::from_str(&r.text).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

impl Stack {
    /// SIGKILLs the controllers' process (a stack of [`stack_with_controller_process`]); returns its pid.
    pub fn kill_controller(&mut self) -> u32 {
        let process = self
            .controller
            .as_mut()
            .expect("a stack with a controller process");
        let child = process.child.take().expect("the controller process runs");
        let pid = child.pid();
        drop(child); // SIGKILL
        pid
    }

    /// Starts the controllers' process again after [`Stack::kill_controller`].
    pub fn start_controller(&mut self) {
        let process = self
            .controller
            .as_mut()
            .expect("a stack with a controller process");
        assert!(process.child.is_none(), "the controller process already runs");
        process.child = Some(spawn_controller_process(process));
    }

    /// Stops the runner and checks that none of its processes is left.
    pub async fn stop(mut self) {
        let dir = self.runner.dir().to_string_lossy().into_owned();
        self.runner.stop().await;
        assert_eq!(
            support::processes_mentioning(&dir),
            Vec::<String>::new(),
            "runner processes left behind"
        );
    }
}

fn tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs a tenant-cluster call, again while it fails to connect (for up to 30 s): under a full test run's
/// load a replica's readiness probe can fail for a moment, and the runner's Service proxy then has no
/// ready backend, as a real Service would not either. API errors are returned at once.
pub async fn connected<T, F, Fut>(call: F) -> Result<T, kube::Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match call().await {
            Err(kube::Error::Service(_) | kube::Error::HyperError(_))
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            result => return result,
        }
    }
}

/// Namespace names of a tenant cluster.
pub async fn namespaces(client: &kube::Client) -> BTreeSet<String> {
    let api = Api::<Namespace>::all(client.clone());
    let params = ListParams::default();
    connected(|| api.list(&params))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// Creates `object`; one that a retried call already created counts.
async fn create_once<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let params = PostParams::default();
    match connected(|| api.create(&params, object)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create failed: {e}"),
    }
}

/// Creates namespace `name` and an Event in it in the tenant cluster.
pub async fn namespace_and_event(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    create_once(&Api::<Namespace>::all(client.clone()), &ns).await;
    let event: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e2e-event", "namespace": name},
        "involvedObject": {"kind": "Namespace", "name": name, "namespace": name, "apiVersion": "v1"},
        "reason": "E2E", "message": "written by the e2e test", "type": "Normal",
    }))
    .unwrap();
    create_once(
        &Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), name),
        &event,
    )
    .await;
}

/// Keys under `prefix` in an etcd (read directly through its gateway as root).
pub async fn etcd_keys(etcd: &LocalEtcd, prefix: &str) -> Vec<String> {
    etcd.http()
        .unwrap()
        .range_prefix(prefix.as_bytes())
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| String::from_utf8_lossy(&k).into_owned())
        .collect()
}
