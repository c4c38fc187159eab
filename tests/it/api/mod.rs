//! The REST API over real HTTP against real PostgreSQL.

mod audit;
pub mod auth_matrix;
mod authenticators;
mod cli_origin;
mod contract;
mod control_planes;
mod cors;
mod crud;
mod drain;
mod errors;
mod external_issuers;
mod join_tokens;
mod migrate;
mod operations;
mod placement;
mod quotas;
mod rate_limits;
mod tokens;
mod unsatisfiable;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{
    domain::Role,
    service::{self, Ctx},
    store,
};
use tenantplane_testkit::app;
use uuid::Uuid;

use crate::support;

/// A running API server on a fresh database.
pub struct App {
    pub base: String,
    pub ctx: Ctx,
    pub admin: String,
    pub http: reqwest::Client,
    /// The credential issuer it serves over HTTPS (with a management cluster).
    pub issuer: Option<tenantplane::translate::ClusterIssuer>,
}

/// Starts `serve`'s router on a fresh, migrated database, in this test's runtime.
pub async fn spawn_app() -> App {
    spawn_app_with(None).await
}

/// The same, with a management-cluster client for kubeconfig downloads.
pub async fn spawn_app_with(kube: Option<kube::Client>) -> App {
    spawn_app_configured(kube, Default::default()).await
}

/// The same, also accepting tokens of external OIDC issuers.
pub async fn spawn_app_configured(
    kube: Option<kube::Client>,
    external: tenantplane::auth::external::ExternalIssuers,
) -> App {
    spawn_app_full(kube, external, Default::default()).await
}

/// The same, with GraphQL settings.
pub async fn spawn_app_with_graphql(graphql: tenantplane::api::graphql::GraphqlSettings) -> App {
    spawn_app_full(None, Default::default(), graphql).await
}

/// Every knob: the production app through the testkit's test app, on a fresh database with a default
/// pool whose DataStore has room for everything, so control planes always find one.
pub async fn spawn_app_full(
    kube: Option<kube::Client>,
    external: tenantplane::auth::external::ExternalIssuers,
    graphql: tenantplane::api::graphql::GraphqlSettings,
) -> App {
    spawn_app_custom(kube, external, |settings| settings.graphql = graphql).await
}

/// The same, with the app's settings as `settings` leaves them.
pub async fn spawn_app_custom(
    kube: Option<kube::Client>,
    external: tenantplane::auth::external::ExternalIssuers,
    settings: impl FnOnce(&mut tenantplane::api::AppSettings),
) -> App {
    tenantplane_devenv::localenv::install_crypto_provider();
    let mut options = app::TestAppOptions::new(support::fresh_database("api").await);
    // With a management cluster, tenant clusters can run: serve the credential issuer over HTTPS, and
    // let downloaded kubeconfigs run this build's `tenantplane credential`.
    if kube.is_some() {
        let tls = tenantplane_devenv::localenv::issuer::start().await.unwrap();
        options.credential_issuer = Some((tls.listener, tls.issuer));
        options.exec_command = env!("CARGO_BIN_EXE_tenantplane").into();
    }
    options.kube = kube;
    options.external = external;
    settings(&mut options.settings);
    let test_app = app::spawn(options).await.unwrap();
    app::default_datastore(
        &test_app.ctx.db,
        "etcd-default:2379",
        1_000_000,
        Some("ca-default"),
    )
    .await
    .unwrap();
    App {
        base: test_app.base,
        ctx: test_app.ctx,
        admin: test_app.admin,
        http: reqwest::Client::new(),
        issuer: test_app.issuer,
    }
}

/// A response: status, headers and JSON (or text wrapped in a JSON string).
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl App {
    /// Sends a request with an optional bearer token and JSON body.
    pub async fn call(&self, method: Method, path: &str, token: Option<&str>, body: Option<Value>) -> Reply {
        self.call_with(method, path, token, body, &[]).await
    }

    /// The same, with extra headers.
    pub async fn call_with(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    /// Creates a tenant as platform admin; returns its slug.
    pub async fn tenant(&self, prefix: &str) -> String {
        let slug = support::unique(prefix);
        let r = self
            .call(
                Method::POST,
                "/api/v1/tenants",
                Some(&self.admin),
                Some(json!({"slug": slug, "displayName": prefix})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        slug
    }

    /// Mints a token of `role` in tenant `slug` (through the API, as a tenant would).
    pub async fn token(&self, slug: &str, role: &str) -> String {
        let tenant = store::tenants::by_slug(&self.ctx.db, slug)
            .await
            .unwrap()
            .unwrap();
        let bootstrap = service::tokens::mint_unchecked(
            &self.ctx,
            Some(tenant.id),
            Role::TenantAdmin,
            3600,
            "bootstrap",
            "tests",
        )
        .await
        .unwrap()
        .token;
        let r = self
            .call(
                Method::POST,
                &format!("/api/v1/tenants/{slug}/tokens"),
                Some(&bootstrap),
                Some(json!({"role": role, "ttlSeconds": 3600})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        assert_eq!(
            r.headers["cache-control"], "no-store",
            "a minted token is shown once"
        );
        r.body["token"].as_str().unwrap().to_string()
    }

    /// Creates a control plane; returns the 202 body.
    pub async fn control_plane(&self, slug: &str, token: &str, name: &str) -> Value {
        let r = self
            .call(
                Method::POST,
                &format!("/api/v1/tenants/{slug}/control-planes"),
                Some(token),
                Some(json!({"name": name, "kubernetesVersion": "v1.33.2"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
        r.body
    }
}

/// Sets tenant `slug`'s quotas as a platform admin (tests that make more than the default 50).
pub async fn set_quotas(app: &App, slug: &str, quotas: Value) {
    let r = app
        .call(
            Method::PUT,
            &format!("/api/v1/tenants/{slug}/quotas"),
            Some(&app.admin),
            Some(quotas),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// Tenant id of `slug`.
/// SQL statements executed in the app's database so far (pg_stat_statements, this database only; the
/// caller creates the extension first).
pub async fn statements(app: &App) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "select coalesce(sum(calls), 0)::bigint from pg_stat_statements s
         join pg_database d on d.oid = s.dbid
         where d.datname = current_database() and s.query not like '%pg_stat_statements%'",
    )
    .fetch_one(&app.ctx.db)
    .await
    .unwrap()
}

pub async fn tenant_id(app: &App, slug: &str) -> Uuid {
    store::tenants::by_slug(&app.ctx.db, slug)
        .await
        .unwrap()
        .unwrap()
        .id
}
