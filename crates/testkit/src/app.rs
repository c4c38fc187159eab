//! The test app: the production app ([`crate::api::App`]) on a migrated database, serving on
//! `127.0.0.1:0` in the caller's runtime, with a platform-admin token.

use std::{net::SocketAddr, sync::Arc};

use crate::{
    api::{self, AppSettings},
    auth::{TokenSettings, external::ExternalIssuers, keys::ServerKey},
    domain::Role,
    service::{self, Ctx},
    store,
};
use anyhow::Context as _;
use serde_json::json;

/// The issuer, audience and public URL of a test app unless its options say otherwise.
pub const TEST_ISSUER: &str = "https://tenantplane.test";
/// See [`TEST_ISSUER`].
pub const TEST_AUDIENCE: &str = "tenantplane";

/// How to start a test app. [`TestAppOptions::new`] has the test defaults.
pub struct TestAppOptions {
    /// An empty (or migrated) database; the app runs the migrations.
    pub database_url: String,
    /// Connections of the app's pool.
    pub max_connections: u32,
    /// A management-cluster client, for kubeconfig downloads.
    pub kube: Option<kube::Client>,
    /// `iss` of minted tokens.
    pub issuer: String,
    /// `aud` of minted tokens.
    pub audience: String,
    /// External OIDC issuers whose tokens are accepted.
    pub external: ExternalIssuers,
    /// The app's knobs (public URL, body limit, GraphQL settings, metrics).
    pub settings: AppSettings,
    /// An HTTPS listener and the credential issuer it serves (none: no cluster credentials).
    pub credential_issuer: Option<(api::tls::TlsListener, crate::translate::ClusterIssuer)>,
    /// What downloaded kubeconfigs run as their exec plugin.
    pub exec_command: String,
}

impl std::fmt::Debug for TestAppOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestAppOptions")
            .field("max_connections", &self.max_connections)
            .field("kube", &self.kube.is_some())
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TestAppOptions {
    /// The test defaults on `database_url`: 20 connections, no management cluster, issuer and public
    /// URL [`TEST_ISSUER`], audience [`TEST_AUDIENCE`], no external issuers, no rate limits (the rate-limit
    /// tests turn them on), `serve`'s other defaults.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            max_connections: 20,
            kube: None,
            issuer: TEST_ISSUER.into(),
            audience: TEST_AUDIENCE.into(),
            external: Default::default(),
            settings: AppSettings {
                public_url: TEST_ISSUER.into(),
                rate_limits: api::limits::RateLimitSettings::OFF,
                ..Default::default()
            },
            credential_issuer: None,
            exec_command: "tenantplane".into(),
        }
    }
}

/// A running test app.
#[derive(Debug)]
pub struct TestApp {
    /// Base URL, `http://127.0.0.1:<port>`.
    pub base: String,
    /// The address it serves on.
    pub addr: SocketAddr,
    /// The use-case context the app runs on (its database, keys and settings).
    pub ctx: Ctx,
    /// A platform-admin token.
    pub admin: String,
    /// The credential issuer it serves over HTTPS, if any.
    pub issuer: Option<crate::translate::ClusterIssuer>,
}

/// The default limits, with kube-apiserver's authenticator check that `scripts/test-env` builds (a
/// test of it fails without it).
fn limits() -> service::Limits {
    service::Limits {
        authenticator_checker: tenantplane_runtime::assets::binary(service::authenticator_check::PROGRAM)
            .ok(),
        ..Default::default()
    }
}

/// Starts the production app with `options`: connects and migrates the database, builds the context
/// (a fresh server key), serves on `127.0.0.1:0` in a task of the current runtime, and mints a
/// platform-admin token. The task panics if serving fails.
pub async fn spawn(options: TestAppOptions) -> anyhow::Result<TestApp> {
    tenantplane_runtime::install_crypto_provider();
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(options.max_connections)
        .connect(&options.database_url)
        .await
        .context("connect to the test database")?;
    store::MIGRATOR.run(&db).await.context("run migrations")?;
    let key = ServerKey::generate_base64().map_err(anyhow::Error::msg)?;
    let ctx = Ctx {
        db,
        server_key: Arc::new(ServerKey::from_base64(&key).map_err(anyhow::Error::msg)?),
        tokens: TokenSettings {
            issuer: options.issuer,
            audience: options.audience,
            external: options.external,
            verifying_keys: Default::default(),
            cluster: Default::default(),
        },
        versions: Default::default(),
        placement: Default::default(),
        limits: limits(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tls, issuer) = match options.credential_issuer {
        Some((tls, issuer)) => (Some(tls), Some(issuer)),
        None => (None, None),
    };
    let mut ctx = ctx;
    ctx.tokens.cluster = crate::auth::ClusterCredentialSettings {
        issuer: issuer.clone(),
        api_url: format!("http://{addr}/api/v1"),
        exec_command: options.exec_command,
    };
    let app = api::App::build(ctx.clone(), options.kube, options.settings);
    if let Some(tls) = tls {
        let router = app.router();
        tokio::spawn(async move {
            if let Err(err) = api::serve_tls(router, tls, std::future::pending()).await {
                panic!("the test app stopped serving HTTPS: {err}");
            }
        });
    }
    tokio::spawn(async move {
        if let Err(err) = app.serve(listener, std::future::pending()).await {
            panic!("the test app stopped serving: {err}");
        }
    });
    let admin = service::tokens::mint_unchecked(&ctx, None, Role::PlatformAdmin, 3600, "test admin", "tests")
        .await
        .context("mint the platform-admin token")?
        .token;
    Ok(TestApp {
        base: format!("http://{addr}"),
        addr,
        ctx,
        admin,
        issuer,
    })
}

/// Registers pool `default` (policy `spread`) with one etcd DataStore `etcd-default` at `endpoint`, so
/// control planes find a DataStore without a cluster behind it.
pub async fn default_datastore(
    db: &sqlx::PgPool,
    endpoint: &str,
    capacity_tenants: i32,
    ca_id: Option<&str>,
) -> anyhow::Result<()> {
    let pool = store::datastores::insert_pool(db, "default", "spread", &json!({})).await?;
    store::datastores::insert(
        db,
        &store::datastores::NewDataStore {
            name: "etcd-default".into(),
            pool_id: Some(pool.id),
            driver: "etcd".into(),
            endpoints: vec![endpoint.into()],
            secret_refs: json!({}),
            labels: json!({}),
            capacity_tenants,
            capacity_bytes: None,
            ca_id: ca_id.map(str::to_string),
        },
    )
    .await?;
    Ok(())
}
