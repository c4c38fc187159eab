//! The one-machine stack of `make run` (`tenantplane dev up`): a local PostgreSQL, an etcd and a
//! kube-apiserver (+ controller-manager) as the management cluster, a TLS etcd as the `default`
//! DataStore pool, and Tenantplane itself (`serve`, the sync worker, the controllers and the pod-less
//! runner) in this process. Everything lives in one scratch directory and dies with the process.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use kube::Api;
use serde_json::json;

use crate::{
    api,
    auth::{ClusterCredentialSettings, TokenSettings, keys::ServerKey},
    controller::{ControllerSettings, metrics::Metrics, settings::DEFAULT_STATE_NAMESPACE},
    domain::Role,
    k8s::crd::DataStore,
    localenv::{
        self, assets,
        etcd::{EtcdOptions, LocalEtcd},
        kube::{KubeOptions, LocalKube},
        postgres::LocalPostgres,
    },
    pki::Ca,
    runner::{Runner, RunnerSettings},
    service::{self, Ctx},
    store,
    translate::{ClusterIssuer, TenantAddress},
    worker::{Worker, WorkerMetrics, WorkerSettings},
};

/// Where the demo tenant lives.
pub const DEMO_TENANT: &str = "demo";
/// The DataStore pool `dev up` registers.
pub const POOL: &str = "default";
/// The kine image the controller renders (the runner maps it to the cached kine binary).
pub const KINE_IMAGE: &str = "rancher/kine:v0.17.5";

/// Options of [`DevStack::start`].
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// Address of the HTTP API (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Print progress lines on stderr.
    pub progress: bool,
}

/// A running local stack; dropping it stops everything.
pub struct DevStack {
    /// Base URL of the HTTP API, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// A platform-admin token.
    pub admin_token: String,
    /// A tenant-member token of the demo tenant.
    pub demo_token: String,
    /// A tenant-admin token of the demo tenant (printed only in the join-token curl; deletes need it).
    pub demo_admin_token: String,
    /// The Kubernetes version the cached binaries run.
    pub kube_version: String,
    /// The scratch directory (PostgreSQL, etcds, kube-apiserver, pods).
    pub dir: PathBuf,
    runner: Runner,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _worker: Arc<Worker>,
    _datastore: LocalEtcd,
    _kube: LocalKube,
    _etcd: LocalEtcd,
    _pg: LocalPostgres,
}

impl std::fmt::Debug for DevStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevStack")
            .field("url", &self.url)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for DevStack {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn step(progress: bool, what: &str) {
    if progress {
        eprintln!("[dev up] {what}");
    }
}

/// Registers the TLS etcd `etcd` as DataStore `etcd-default` in pool `default`: the Secret and the
/// DataStore object in the cluster, the registry rows in PostgreSQL.
async fn register_datastore(
    client: &kube::Client,
    db: &sqlx::PgPool,
    etcd: &LocalEtcd,
) -> anyhow::Result<()> {
    // The controller's state namespace, made with the management cluster, also holds the pool's Secret.
    let ns = DEFAULT_STATE_NAMESPACE;
    localenv::kube::create_etcd_datastore(client, etcd, "etcd-default", ns).await?;
    let pool = store::datastores::insert_pool(db, POOL, "spread", &json!({})).await?;
    let api_ref = |key: &str| json!({"name": "etcd-default-tls", "namespace": ns, "keyPath": key});
    store::datastores::insert(
        db,
        &store::datastores::NewDataStore {
            name: "etcd-default".into(),
            pool_id: Some(pool.id),
            driver: "etcd".into(),
            endpoints: vec![etcd.endpoint()],
            secret_refs: json!({
                "caCertificate": api_ref("ca.crt"), "caPrivateKey": api_ref("ca.key"),
                "clientCertificate": api_ref("root.crt"), "clientPrivateKey": api_ref("root.key"),
            }),
            labels: json!({}),
            capacity_tenants: 100,
            capacity_bytes: None,
            ca_id: Some("dev-etcd-ca".into()),
        },
    )
    .await?;
    Ok(())
}

/// Starts the local PostgreSQL under `dir/pg`, connects and runs the migrations.
async fn start_postgres(dir: &std::path::Path) -> anyhow::Result<(LocalPostgres, sqlx::PgPool)> {
    let pg = LocalPostgres::start(dir.join("pg"))
        .await
        .context("start PostgreSQL")?;
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&pg.url())
        .await
        .context("connect to PostgreSQL")?;
    store::MIGRATOR.run(&db).await.context("run migrations")?;
    Ok((pg, db))
}

/// Starts the management cluster (an etcd and a kube-apiserver) and installs the CRDs.
async fn start_management_cluster(
    dir: &std::path::Path,
) -> anyhow::Result<(LocalEtcd, LocalKube, kube::Client)> {
    let etcd = LocalEtcd::start(dir.join("etcd"), EtcdOptions::default()).await?;
    let kube = LocalKube::start(dir.join("kube"), KubeOptions::new(etcd.url())).await?;
    let client = kube.client().await?;
    localenv::kube::install_crds(&client, "tenantplane-dev").await?;
    localenv::kube::ensure_namespace(&client, DEFAULT_STATE_NAMESPACE).await?;
    Ok((etcd, kube, client))
}

/// Starts the TLS etcd of the `default` pool and registers it as a DataStore.
async fn start_pool_etcd(
    dir: &std::path::Path,
    client: &kube::Client,
    db: &sqlx::PgPool,
) -> anyhow::Result<LocalEtcd> {
    let ca = Ca::new("tenantplane-dev-etcd-ca")?;
    let datastore = LocalEtcd::start(dir.join("datastore"), EtcdOptions { tls_ca: Some(&ca) }).await?;
    register_datastore(client, db, &datastore).await?;
    Ok(datastore)
}

/// The program the demo's kubeconfigs run as their credential plugin: the `tenantplane` binary next to
/// this one when it is built (`make run` builds it), else `tenantplane` on the PATH.
fn exec_command() -> String {
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name("tenantplane"))
        .filter(|p| p.is_file())
        .map_or_else(|| "tenantplane".into(), |p| p.display().to_string())
}

/// The service context of `dev up`: a fresh server key, the local credential issuer, the default settings.
fn dev_ctx(db: &sqlx::PgPool, url: &str, issuer: &ClusterIssuer) -> anyhow::Result<Ctx> {
    Ok(Ctx {
        db: db.clone(),
        server_key: Arc::new(
            ServerKey::from_base64(&ServerKey::generate_base64()?).map_err(anyhow::Error::msg)?,
        ),
        tokens: TokenSettings {
            issuer: "tenantplane".into(),
            audience: "tenantplane".into(),
            external: Default::default(),
            verifying_keys: Default::default(),
            cluster: ClusterCredentialSettings {
                issuer: Some(issuer.clone()),
                api_url: format!("{url}/api/v1"),
                exec_command: exec_command(),
            },
        },
        versions: Default::default(),
        placement: Default::default(),
        // kube-apiserver's own check of tenants' JWT authenticators, as `scripts/test-env` built it.
        limits: service::Limits {
            authenticator_checker: assets::binary(service::authenticator_check::PROGRAM).ok(),
            ..Default::default()
        },
    })
}

/// Spawns `serve` (the HTTP API) on `listener`, and the same router over HTTPS on `tls`.
fn spawn_serve(
    ctx: Ctx,
    client: &kube::Client,
    url: &str,
    listener: tokio::net::TcpListener,
    tls: localenv::issuer::LocalIssuer,
) -> tokio::task::JoinHandle<()> {
    let app = api::App::build(
        ctx,
        Some(client.clone()),
        api::AppSettings {
            public_url: url.to_string(),
            ..Default::default()
        },
    );
    let router = app.router();
    tokio::spawn(async move {
        if let Err(err) = api::serve_tls(router, tls.listener, std::future::pending()).await {
            tracing::error!("serve (HTTPS) stopped: {err}");
        }
    });
    tokio::spawn(async move {
        if let Err(err) = app.serve(listener, std::future::pending()).await {
            tracing::error!("serve stopped: {err}");
        }
    })
}

/// The sync worker of `dev up`: fast polling, tenants on loopback addresses.
fn dev_worker(db: &sqlx::PgPool, client: &kube::Client, issuer: &ClusterIssuer) -> Arc<Worker> {
    Arc::new(Worker::new(
        db.clone(),
        client.clone(),
        WorkerSettings {
            poll_ms: 100,
            tenant_address: TenantAddress::Loopback,
            issuer: Some(issuer.clone()),
            ..WorkerSettings::default()
        },
        WorkerMetrics::default(),
    ))
}

/// Spawns the worker's loop.
fn spawn_worker(worker: &Arc<Worker>) -> tokio::task::JoinHandle<()> {
    let worker = worker.clone();
    tokio::spawn(async move {
        if let Err(err) = worker.run().await {
            tracing::error!("worker stopped: {err:#}");
        }
    })
}

/// Spawns the controllers, rendering kine as [`KINE_IMAGE`].
fn spawn_controllers(client: &kube::Client) -> tokio::task::JoinHandle<()> {
    let mut settings = ControllerSettings::new(format!("dev-{}", std::process::id()));
    settings.workload.kine_image = KINE_IMAGE.into();
    let client = client.clone();
    tokio::spawn(async move {
        let _ = crate::controller::run(
            client,
            settings,
            None,
            Arc::new(Metrics::default()),
            std::future::pending(),
        )
        .await;
    })
}

/// Waits (up to 60 s) until the DataStore `etcd-default` is Ready.
async fn wait_datastore_ready(client: &kube::Client) -> anyhow::Result<()> {
    let datastores: Api<DataStore> = Api::all(client.clone());
    let start = std::time::Instant::now();
    while !datastores
        .get_opt("etcd-default")
        .await?
        .and_then(|d| d.status)
        .is_some_and(|s| s.ready)
    {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(60),
            "the DataStore etcd-default is not Ready after 60s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Mints a week-long token created by `dev`; `what` names it in the error.
async fn mint(
    ctx: &Ctx,
    tenant: Option<uuid::Uuid>,
    role: Role,
    description: &str,
    what: &str,
) -> anyhow::Result<String> {
    Ok(
        service::tokens::mint_unchecked(ctx, tenant, role, 7 * 86400, description, "dev")
            .await
            .map_err(|e| anyhow::anyhow!("mint the {what}: {e}"))?
            .token,
    )
}

/// The tokens `make run` hands out.
struct DevTokens {
    admin: String,
    demo: String,
    demo_admin: String,
}

/// Creates the demo tenant through the API; returns its id.
async fn create_demo_tenant(db: &sqlx::PgPool, url: &str, admin_token: &str) -> anyhow::Result<uuid::Uuid> {
    let response = reqwest::Client::new()
        .post(format!("{url}/api/v1/tenants"))
        .bearer_auth(admin_token)
        .json(&json!({"slug": DEMO_TENANT, "displayName": "Demo tenant"}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status().is_success(),
        "create the demo tenant: {}",
        response.status()
    );
    let tenant = store::tenants::by_slug(db, DEMO_TENANT)
        .await?
        .context("the demo tenant is missing")?;
    Ok(tenant.id)
}

/// The platform-admin token, the demo tenant, and its member and admin tokens.
async fn demo_tenant_and_tokens(ctx: &Ctx, url: &str) -> anyhow::Result<DevTokens> {
    let admin = mint(ctx, None, Role::PlatformAdmin, "make run", "platform-admin token").await?;
    let tenant = create_demo_tenant(&ctx.db, url, &admin).await?;
    let demo = mint(
        ctx,
        Some(tenant),
        Role::TenantMember,
        "make run demo",
        "demo token",
    )
    .await?;
    let demo_admin = mint(
        ctx,
        Some(tenant),
        Role::TenantAdmin,
        "make run demo admin",
        "demo admin token",
    )
    .await?;
    Ok(DevTokens {
        admin,
        demo,
        demo_admin,
    })
}

impl DevStack {
    /// Starts everything; returns once the API serves and the pool is ready.
    pub async fn start(options: DevOptions) -> anyhow::Result<Self> {
        let p = options.progress;
        localenv::install_crypto_provider();
        let kube_version = assets::kube_version().context(
            "the cached binaries are missing: run `scripts/test-env build` (or `make run`, which does)",
        )?;
        // The API port first: a port in use fails before anything starts.
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .with_context(|| format!("bind {}", options.listen))?;
        let dir = localenv::scratch_dir("dev")?;

        step(p, "starting PostgreSQL");
        let (pg, db) = start_postgres(&dir).await?;

        step(p, "starting etcd and kube-apiserver (the management cluster)");
        let (etcd, kube, client) = start_management_cluster(&dir).await?;

        step(p, "starting the etcd of the `default` DataStore pool");
        let datastore = start_pool_etcd(&dir, &client, &db).await?;

        step(
            p,
            "starting serve, the worker, the controllers and the pod-less runner",
        );
        let url = format!("http://{}", listener.local_addr()?);
        let tls = localenv::issuer::start().await?;
        let issuer = tls.issuer.clone();
        let ctx = dev_ctx(&db, &url, &issuer)?;
        let mut tasks = vec![spawn_serve(ctx.clone(), &client, &url, listener, tls)];
        let worker = dev_worker(&db, &client, &issuer);
        tasks.push(spawn_worker(&worker));
        tasks.push(spawn_controllers(&client));
        let runner = Runner::start(client.clone(), RunnerSettings::new(dir.join("pods")))?;

        // Wait until the DataStore is Ready, then the tenant and the tokens.
        wait_datastore_ready(&client).await?;
        let tokens = demo_tenant_and_tokens(&ctx, &url).await?;
        Ok(Self {
            url,
            admin_token: tokens.admin,
            demo_token: tokens.demo,
            demo_admin_token: tokens.demo_admin,
            kube_version,
            dir,
            runner,
            tasks,
            _worker: worker,
            _datastore: datastore,
            _kube: kube,
            _etcd: etcd,
            _pg: pg,
        })
    }

    /// The curl line that creates a demo control plane.
    pub fn create_command(&self) -> String {
        format!(
            "curl -sX POST {}/api/v1/tenants/{DEMO_TENANT}/control-planes -H 'authorization: Bearer {}' -H 'content-type: application/json' -d '{{\"name\":\"demo\",\"kubernetesVersion\":\"{}\",\"replicas\":1}}'",
            self.url, self.demo_token, self.kube_version
        )
    }

    /// The banner's lines on joining a node: a join token through the API (tenant admin), then a hollow
    /// node from its `joinCommand`; when kubemark is not built (`make run` skips it), how to build it.
    pub fn join_lines(&self) -> String {
        let build = if assets::binary("kubemark").is_ok() {
            String::new()
        } else {
            "  (kubemark is not built yet: TENANTPLANE_KUBE_EXTRA_VERSIONS= scripts/test-env build)\n".into()
        };
        format!(
            "Join a node, once Ready (a join token as tenant admin, then a hollow kubelet with its joinCommand):\n  \
             curl -sX POST {}/api/v1/tenants/{DEMO_TENANT}/control-planes/<id>/join-tokens -H 'authorization: Bearer {}' -H 'content-type: application/json' -d '{{}}'\n  \
             cargo run --release -p tenantplane-devenv --bin tenantplane-dev -- join '<joinCommand>'\n{build}",
            self.url, self.demo_admin_token,
        )
    }

    /// What `make run` prints. Its last line is `Scratch directory: …`.
    pub fn banner(&self) -> String {
        let u = &self.url;
        // A path as one shell word: bare when it is plain, else single-quoted.
        let word = |path: &std::path::Path| {
            let s = path.display().to_string();
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c))
            {
                s
            } else {
                format!("'{}'", s.replace('\'', r"'\''"))
            }
        };
        // The machine's kubectl, else the one `scripts/test-env` built into the asset directory.
        let on_path = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("kubectl").is_file()));
        let kubectl = match localenv::assets::binary("kubectl") {
            Ok(built) if !on_path => word(&built),
            _ => "kubectl".to_string(),
        };
        format!(
            "Tenantplane is running (Ctrl-C stops everything)\n\
             API:      {u}/api/v1   (OpenAPI: {u}/api/v1/openapi.json)\n\
             GraphiQL: {u}/graphql\n\
             Docs:     {u}/docs\n\
             Portal:   {u}/portal/#token={}   (signed in as the demo tenant's member; admin: #token=<platform-admin token>)\n\
             Platform-admin token: {}\n\
             Demo tenant token ({DEMO_TENANT}, tenant-member): {}\n\
             Create a control plane:\n  {}\n\
             Watch it: curl -s {u}/api/v1/tenants/{DEMO_TENANT}/control-planes -H 'authorization: Bearer {}'\n\
             Its kubeconfig, once Ready (no secret in it: kubectl runs `tenantplane credential`, which uses TENANTPLANE_TOKEN):\n  \
             curl -s {u}/api/v1/tenants/{DEMO_TENANT}/control-planes/<id>/kubeconfig -H 'authorization: Bearer {}' > demo.kubeconfig\n  \
             TENANTPLANE_TOKEN={} KUBECONFIG=demo.kubeconfig {kubectl} auth whoami\n\
             {}\
             Management cluster (admin): KUBECONFIG={} {kubectl} get tcp -A\n\
             Scratch directory: {} (removed on Ctrl-C)\n",
            self.demo_token,
            self.admin_token,
            self.demo_token,
            self.create_command(),
            self.demo_token,
            self.demo_token,
            self.demo_token,
            self.join_lines(),
            word(self._kube.kubeconfig_path()),
            self.dir.display(),
        )
    }

    /// Stops the runner (every tenant pod), then the rest.
    pub async fn stop(mut self) {
        self.runner.stop().await;
        for t in &self.tasks {
            t.abort();
        }
        let dir = self.dir.clone();
        drop(self);
        let _ = std::fs::remove_dir_all(&dir);
        // The per-process work directory too, when nothing else is in it.
        if let Some(parent) = dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}
