//! Command-line entry point: `tenantplane <subcommand>`.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
};

use anyhow::Context as _;
use clap::{CommandFactory as _, Parser, Subcommand};
use sqlx::{PgPool, postgres::PgPoolOptions};

use crate::{
    api,
    auth::{TokenSettings, keys::ServerKey},
    client,
    config::{AuthArgs, ControllerArgs, DbArgs, GlobalArgs, ServeArgs, WorkerArgs},
    domain::Role,
    runtime::postgres::LocalPostgres,
    runtime::telemetry,
    service::{self, Ctx},
    store,
    worker::{Worker, WorkerMetrics},
};

/// Tenantplane: control-plane-as-a-service for Kamaji-compatible tenant control planes.
#[derive(Debug, Parser)]
#[command(name = "tenantplane", version, about, after_help = client::EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version.
    Version,
    /// Serve the HTTP API.
    Serve(Box<ServeArgs>),
    /// Run the sync worker: outbox → TenantControlPlanes, status → PostgreSQL.
    Worker(WorkerArgs),
    /// Apply database migrations and exit.
    Migrate(DbArgs),
    /// Mint tokens directly in the database (bootstrap).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Write the CRD YAML of TenantControlPlane and DataStore.
    Crdgen(crate::k8s::crd::CrdgenArgs),
    /// Print the OpenAPI document (as committed in schema/openapi.json).
    Openapi,
    /// Print the GraphQL schema (SDL, as committed in schema/schema.graphql).
    Sdl,
    /// Run the DataStore and TenantControlPlane controllers (leader-elected).
    Controller(ControllerArgs),
    /// Client: check a token with the API and save the URL, token and tenant to the config file.
    Login(client::login::LoginArgs),
    /// Client: create, list, get, upgrade, scale and delete control planes.
    Cp(client::cp::CpArgs),
    /// Client: a control plane's admin kubeconfig, printed or merged into ~/.kube/config.
    Kubeconfig(client::kubeconfig::KubeconfigArgs),
    /// Client: node join tokens and their `kubeadm join` command.
    JoinToken(client::join_token::JoinTokenArgs),
    /// Client: get an operation, or wait until it is done.
    Op(client::op::OpArgs),
    /// Client: the kubectl exec credential plugin downloaded kubeconfigs run (prints an ExecCredential).
    Credential(client::credential::CredentialArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion(client::CompletionArgs),
}

/// `tenantplane token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token and print it.
    Mint(TokenMintArgs),
}

/// `tenantplane token mint`.
#[derive(Debug, clap::Args)]
pub struct TokenMintArgs {
    /// Mint a platform-admin token (the first token of a fresh installation).
    #[arg(long, conflicts_with = "tenant")]
    pub platform_admin: bool,
    /// Tenant slug, for a tenant token.
    #[arg(long, required_unless_present = "platform_admin")]
    pub tenant: Option<String>,
    /// Role of a tenant token.
    #[arg(long, default_value = "tenant-admin")]
    pub role: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 86400)]
    pub ttl_seconds: i64,
    /// Description (becomes `sub`).
    #[arg(long, default_value = "bootstrap")]
    pub description: String,
    #[command(flatten)]
    db: DbArgs,
    #[command(flatten)]
    auth: AuthArgs,
}

impl Cli {
    /// Runs the chosen subcommand and maps errors to a non-zero exit code.
    pub async fn run(self) -> ExitCode {
        telemetry::init(self.global.log_format);
        crate::runtime::install_crypto_provider();
        let result = match self.command {
            Command::Version => {
                println!("tenantplane {}", crate::VERSION);
                Ok(())
            }
            Command::Serve(args) => serve(args).await,
            Command::Worker(args) => worker(args).await,
            Command::Migrate(args) => migrate(args).await,
            Command::Token(TokenCommand::Mint(args)) => mint(args).await,
            Command::Crdgen(args) => args.run(),
            Command::Controller(args) => controller(args).await,
            Command::Openapi => {
                print!("{}", api::openapi_json());
                Ok(())
            }
            Command::Sdl => {
                print!("{}", api::graphql::sdl());
                Ok(())
            }
            Command::Login(args) => return client::exit(args.run().await),
            Command::Cp(args) => return client::exit(args.run().await),
            Command::Kubeconfig(args) => return client::exit(args.run().await),
            Command::JoinToken(args) => return client::exit(args.run().await),
            Command::Op(args) => return client::exit(args.run().await),
            Command::Credential(args) => return args.run().await,
            Command::Completion(args) => {
                args.run(&mut Cli::command());
                Ok(())
            }
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!("{err:#}");
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        }
    }
}

const LOCAL_URL_FILE: &str = "database-url";
const LOCAL_KEY_FILE: &str = "encryption.key";

/// Connects to PostgreSQL; without `DATABASE_URL`, reuses or starts the local PostgreSQL in `--local-dir`.
async fn connect(db: &DbArgs) -> anyhow::Result<(PgPool, Option<LocalPostgres>)> {
    db.validate().map_err(anyhow::Error::msg)?;
    let options = PgPoolOptions::new()
        .max_connections(db.db_max_connections)
        .acquire_timeout(std::time::Duration::from_secs(5));
    // Every connection waits at most `lock_timeout` for a lock and runs at most `statement_timeout`.
    let session = |url: &str| -> anyhow::Result<sqlx::postgres::PgConnectOptions> {
        Ok(db.db_timeouts.apply(url.parse().context("parse DATABASE_URL")?))
    };
    if let Some(url) = db.database_url.as_ref().filter(|u| !u.expose().is_empty()) {
        return Ok((
            options
                .connect_with(session(url.expose())?)
                .await
                .context("connect to PostgreSQL")?,
            None,
        ));
    }
    // A local PostgreSQL another tenantplane process already runs?
    if let Ok(url) = std::fs::read_to_string(db.local_dir.join(LOCAL_URL_FILE))
        && let Ok(url) = session(url.trim())
        && let Ok(pool) = options.clone().connect_with(url).await
    {
        return Ok((pool, None));
    }
    tracing::info!(dir = %db.local_dir.display(), "DATABASE_URL is unset: starting a local PostgreSQL");
    let pg = LocalPostgres::start(db.local_dir.clone())
        .await
        .context("start the local PostgreSQL")?;
    std::fs::write(db.local_dir.join(LOCAL_URL_FILE), pg.url())?;
    tracing::info!(port = pg.port(), "local PostgreSQL is ready");
    Ok((
        options
            .connect_with(session(&pg.url())?)
            .await
            .context("connect to the local PostgreSQL")?,
        Some(pg),
    ))
}

/// The server key: from config, or (local runs only) generated once into `--local-dir`.
fn server_key(auth: &AuthArgs, db: &DbArgs) -> anyhow::Result<ServerKey> {
    if let Some(key) = &auth.encryption_key {
        return ServerKey::from_base64(key.expose()).map_err(anyhow::Error::msg);
    }
    if db.database_url.as_ref().is_some_and(|u| !u.expose().is_empty()) {
        anyhow::bail!(
            "TENANTPLANE_ENCRYPTION_KEY is required with DATABASE_URL (32 random bytes, base64; e.g. `openssl rand -base64 32`)"
        );
    }
    let path = db.local_dir.join(LOCAL_KEY_FILE);
    if !path.exists() {
        write_private(&path, &ServerKey::generate_base64()?)?;
    }
    ServerKey::from_base64(&std::fs::read_to_string(&path)?).map_err(anyhow::Error::msg)
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    std::io::Write::write_all(&mut file, content.as_bytes())?;
    Ok(())
}

async fn migrate(db: DbArgs) -> anyhow::Result<()> {
    let (pool, _local) = connect(&db).await?;
    store::migrate(&pool).await.context("run migrations")?;
    println!("migrations applied");
    Ok(())
}

fn ctx(
    pool: PgPool,
    auth: &AuthArgs,
    db: &DbArgs,
    versions: crate::domain::VersionRange,
) -> anyhow::Result<Ctx> {
    Ok(Ctx {
        db: pool,
        server_key: Arc::new(server_key(auth, db)?),
        tokens: TokenSettings {
            issuer: auth.issuer.clone(),
            audience: auth.audience.clone(),
            external: external_issuers(auth)?,
            verifying_keys: Default::default(),
            cluster: Default::default(),
        },
        versions,
        placement: Default::default(),
        limits: Default::default(),
    })
}

/// The external OIDC issuers of `--oidc-issuers-file` (none without it).
fn external_issuers(auth: &AuthArgs) -> anyhow::Result<crate::auth::external::ExternalIssuers> {
    let Some(path) = &auth.oidc_issuers_file else {
        return Ok(Default::default());
    };
    let configs = crate::auth::external::load(path, &auth.issuer).map_err(anyhow::Error::msg)?;
    tracing::info!(issuers = ?configs.iter().map(|c| &c.issuer).collect::<Vec<_>>(), "external OIDC issuers");
    crate::auth::external::ExternalIssuers::new(configs).map_err(anyhow::Error::msg)
}

async fn mint(args: TokenMintArgs) -> anyhow::Result<()> {
    let (pool, _local) = connect(&args.db).await?;
    store::migrate(&pool).await.context("run migrations")?;
    let ctx = ctx(pool, &args.auth, &args.db, Default::default())?;
    let (tenant, role) = if args.platform_admin {
        (None, Role::PlatformAdmin)
    } else {
        let slug = args.tenant.unwrap_or_default();
        let tenant = store::tenants::by_slug(&ctx.db, &slug)
            .await?
            .with_context(|| format!("no tenant {slug:?}"))?;
        (
            Some(tenant.id),
            args.role.parse::<Role>().map_err(anyhow::Error::msg)?,
        )
    };
    let minted =
        service::tokens::mint_unchecked(&ctx, tenant, role, args.ttl_seconds, &args.description, "cli")
            .await
            .map_err(|e| anyhow::anyhow!("{e}: {e:?}"))?;
    println!("{}", minted.token);
    Ok(())
}

/// The HTTPS listener of `--tls-listen`, bound, with its address.
struct BoundTls {
    listener: api::tls::TlsListener,
    addr: std::net::SocketAddr,
}

impl BoundTls {
    fn local_addr_text(&self) -> String {
        self.addr.to_string()
    }
}

/// Binds `--tls-listen` with `--tls-cert-file`/`--tls-key-file` (none without `--tls-listen`).
async fn tls_listener(args: &ServeArgs) -> anyhow::Result<Option<BoundTls>> {
    let Some(at) = args.tls_listen else {
        return Ok(None);
    };
    let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_key_file) else {
        anyhow::bail!("--tls-listen needs --tls-cert-file and --tls-key-file");
    };
    let cert = std::fs::read(cert).with_context(|| format!("read {}", cert.display()))?;
    let key = std::fs::read(key).with_context(|| format!("read {}", key.display()))?;
    let config = api::tls::server_config(&cert, &key).map_err(anyhow::Error::msg)?;
    let tcp = tokio::net::TcpListener::bind(at)
        .await
        .with_context(|| format!("bind {at}"))?;
    let addr = tcp.local_addr()?;
    let listener = api::tls::TlsListener::new(tcp, Arc::new(config))?;
    Ok(Some(BoundTls { listener, addr }))
}

/// `tenantplane worker`.
async fn worker(mut args: WorkerArgs) -> anyhow::Result<()> {
    args.worker.validate().map_err(anyhow::Error::msg)?;
    args.worker.issuer = args.issuer.issuer(None).map_err(anyhow::Error::msg)?;
    let (pool, _local) = connect(&args.db).await?;
    if args.migrate {
        store::migrate(&pool).await.context("run migrations")?;
    }
    let kube = crate::k8s::client(args.kubeconfig.as_deref())
        .await
        .context("the worker needs a management cluster (--kubeconfig)")?;
    let worker = Arc::new(Worker::new(pool, kube, args.worker, WorkerMetrics::default()));
    println!("tenantplane worker {} running", worker.id());
    tokio::select! {
        r = worker.run() => r,
        () = crate::runtime::shutdown_signal() => Ok(()),
    }
}

/// `tenantplane controller`.
async fn controller(args: ControllerArgs) -> anyhow::Result<()> {
    use crate::controller::{ControllerSettings, leader::LeaseSettings, metrics::Metrics};
    let client = crate::k8s::client(args.kubeconfig.as_deref())
        .await
        .context("connect to the management cluster")?;
    let identity = args.identity();
    let mut settings = ControllerSettings::new(identity.clone());
    settings.concurrency = args.concurrency.max(1);
    settings.reconcile_timeout = std::time::Duration::from_secs(args.reconcile_timeout_secs.max(1));
    settings.workload.rotation_threshold_secs = i64::from(args.certificate_rotation_days) * 24 * 3600;
    settings.workload.kine_image = args.kine_image.clone();
    settings.workload.key_algorithm = args.certificate_key_algorithm;
    settings.namespace = args.watch_namespace.clone();
    settings.datastore_selector = args.datastore_selector.clone();
    settings.control_plane_selector = args.control_plane_selector.clone();
    settings.default_datastore = args.default_datastore.clone().filter(|d| !d.is_empty());
    settings.in_tenant = args.in_tenant;
    settings.in_tenant_resync = std::time::Duration::from_secs(args.in_tenant_resync_secs.max(1));
    settings.state_namespace = args.state_namespace.clone();
    let (issuer_url, issuer_endpoint) = args.credential_issuer().map_err(anyhow::Error::msg)?;
    settings.workload.credential_issuer_url = issuer_url;
    settings.workload.credential_issuer_endpoint = issuer_endpoint;
    let lease = args.leader_election.then(|| {
        LeaseSettings::new(
            args.leader_election_name.clone(),
            args.leader_election_namespace.clone(),
            identity.clone(),
        )
    });
    let metrics = Arc::new(Metrics::default());
    let listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("bind {}", args.metrics_listen))?;
    let router = {
        let metrics = metrics.clone();
        axum::Router::new()
            .route("/healthz", axum::routing::get(|| async { "ok" }))
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let metrics = metrics.clone();
                    async move { metrics.encode() }
                }),
            )
    };
    let http = tokio::spawn(async move { axum::serve(listener, router).await });
    tracing::info!(%identity, leader_election = lease.is_some(), "starting the controllers");
    let result = crate::controller::run(
        client,
        settings,
        lease,
        metrics,
        crate::runtime::shutdown_signal(),
    )
    .await;
    http.abort();
    result.map_err(anyhow::Error::from)
}

/// The authenticator checker `serve` runs: `--authenticator-checker` (which must exist), else the
/// one found beside this binary or on PATH, else none (with a warning: CEL is then not type-checked).
fn authenticator_checker(configured: Option<PathBuf>) -> anyhow::Result<Option<PathBuf>> {
    if let Some(path) = &configured
        && !path.is_file()
    {
        anyhow::bail!("--authenticator-checker {}: no such file", path.display());
    }
    let found = service::authenticator_check::locate(configured);
    match &found {
        Some(path) => {
            tracing::info!(checker = %path.display(), "JWT authenticators are checked by kube-apiserver's own code")
        }
        None => tracing::warn!(
            "{} not found beside this binary or on PATH: tenant JWT authenticators get Tenantplane's own checks only (CEL parsed, not type-checked; one kube-apiserver refuses stops its next start)",
            service::authenticator_check::PROGRAM
        ),
    }
    Ok(found)
}

/// `tenantplane serve`.
async fn serve(args: Box<ServeArgs>) -> anyhow::Result<()> {
    let (pool, local_pg) = connect(&args.db).await?;
    if args.migrate {
        store::migrate(&pool).await.context("run migrations")?;
    }
    args.worker.validate().map_err(anyhow::Error::msg)?;
    args.http_timeouts.validate().map_err(anyhow::Error::msg)?;
    let mut ctx = ctx(pool, &args.auth, &args.db, args.kubernetes_versions)?;
    ctx.placement.auto_override_pool = args.auto_override_pool.clone();
    ctx.limits = service::Limits {
        namespace_template: args.worker.namespace_template.clone(),
        node_ports: args.node_port_range,
        max_signing_keys: args.max_signing_keys.max(1),
        operation_deadline_seconds: args.operation_deadline_seconds,
        default_quota_control_planes: args.default_quota_control_planes,
        default_quota_tokens: args.default_quota_tokens,
        external_mint_max_ttl_seconds: args.external_mint_max_ttl_seconds,
        authenticator_checker: authenticator_checker(args.authenticator_checker.clone())?,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    let tls = tls_listener(&args).await?;
    let public_url = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{addr}"));
    let default_issuer = tls
        .as_ref()
        .map(|l| format!("https://{}/credentials", l.local_addr_text()));
    let issuer = args.issuer.issuer(default_issuer).map_err(anyhow::Error::msg)?;
    ctx.tokens.cluster = crate::auth::ClusterCredentialSettings {
        issuer: issuer.clone(),
        api_url: format!("{}/api/v1", public_url.trim_end_matches('/')),
        exec_command: args.kubeconfig_exec_command.clone(),
    };
    let mut worker_settings = args.worker.clone();
    worker_settings.issuer = issuer;
    let kube = crate::k8s::client(args.kubeconfig.as_deref()).await;
    let worker_metrics = WorkerMetrics::default();
    let background = if args.with_worker {
        let kube = kube
            .as_ref()
            .map_err(|e| anyhow::anyhow!("--with-worker needs a management cluster (--kubeconfig): {e:#}"))?
            .clone();
        let worker = Arc::new(Worker::new(
            ctx.db.clone(),
            kube,
            worker_settings,
            worker_metrics.clone(),
        ));
        Some(tokio::spawn(async move {
            if let Err(err) = worker.run().await {
                tracing::error!("sync worker stopped: {err:#}");
            }
        }))
    } else {
        None
    };
    let app = api::App::build(
        ctx,
        kube.ok(),
        api::AppSettings {
            public_url,
            max_body_bytes: args.max_body_bytes,
            graphql: args.graphql.clone(),
            metrics: Arc::new(api::metrics::Metrics::new(|registry| {
                if args.with_worker {
                    worker_metrics.register(registry);
                }
            })),
            // Small JSON answers go out at once, not after the client's delayed ACK (Nagle).
            tcp_nodelay: true,
            cors_origins: args.cors_allowed_origins.clone(),
            rate_limits: args.rate_limits,
            http_timeouts: args.http_timeouts,
        },
    );
    tracing::info!(%addr, management_cluster = app.state.kube.is_some(), "serving HTTP");
    println!("tenantplane serving on http://{addr}");
    let tls_task = tls.map(|tls| {
        println!("tenantplane serving on https://{}", tls.local_addr_text());
        let app = app.clone();
        tokio::spawn(async move {
            if let Err(err) = app
                .serve_tls(tls.listener, crate::runtime::shutdown_signal())
                .await
            {
                tracing::error!("the HTTPS listener stopped: {err}");
            }
        })
    });
    app.serve(listener, crate::runtime::shutdown_signal()).await?;
    if let Some(task) = tls_task {
        task.abort();
    }
    if let Some(task) = background {
        task.abort();
    }
    tracing::info!("stopped");
    if local_pg.is_some() {
        let _ = std::fs::remove_file(args.db.local_dir.join(LOCAL_URL_FILE));
    }
    drop(local_pg);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// clap's own checks of every subcommand (unique argument ids, well-formed flags): a clash only
    /// shows when a command starts, so this catches it before anyone runs one.
    #[test]
    fn every_subcommand_s_flags_are_unique_and_well_formed() {
        use clap::CommandFactory as _;
        super::Cli::command().debug_assert();
    }
}
