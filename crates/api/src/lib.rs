//! HTTP surfaces: the REST API under `/api/v1` (with its OpenAPI document), the GraphQL API at `/graphql`,
//! the portal at `/portal/`, probes, metrics and the JWKS / OIDC discovery documents.

use tenantplane_core::domain;
use tenantplane_crd as k8s;

pub mod drains;
pub mod error;
pub mod extract;
pub mod graphql;
pub mod limits;
pub mod metrics;
pub mod migrations;
pub mod openapi;
pub mod portal;
pub mod rest;
pub mod serve;
pub mod tls;
pub mod web;

use std::{sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, State},
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::json;
use tower_http::{
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use tenantplane_service::Ctx;

/// State shared by every handler; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Use-case context (database, keys, settings).
    pub ctx: Ctx,
    /// Management-cluster client, when one is configured (kubeconfig downloads).
    pub kube: Option<kube::Client>,
    /// HTTP metrics.
    pub metrics: Arc<metrics::Metrics>,
    /// Public base URL (OIDC discovery).
    pub public_url: String,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// GraphQL limits and switches.
    pub graphql: graphql::GraphqlSettings,
    /// This process's fan-out of committed changes (subscriptions and long polls).
    pub hub: tenantplane_service::events::Hub,
    /// Origins allowed to call from a browser on another origin.
    pub cors_origins: Vec<HeaderValue>,
    /// Rate limits per token subject and per tenant; `None`: off.
    pub limits: Option<limits::RateLimits>,
    /// How long a client may take to send a request.
    pub http_timeouts: serve::HttpTimeouts,
    /// Per-tenant caps on GraphQL WebSockets and their live operations.
    pub sockets: graphql::TenantSockets,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("ctx", &self.ctx)
            .field("kube", &self.kube.is_some())
            .field("public_url", &self.public_url)
            .finish()
    }
}

/// The knobs of the HTTP app that differ between `serve`, `dev up`, tests and benchmarks.
#[derive(Debug, Clone)]
pub struct AppSettings {
    /// Public base URL (OIDC discovery), e.g. `http://127.0.0.1:8080`.
    pub public_url: String,
    /// Largest accepted request body (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// GraphQL limits and switches.
    pub graphql: graphql::GraphqlSettings,
    /// HTTP metrics; `serve --with-worker` registers the worker's metrics in the same registry.
    pub metrics: Arc<metrics::Metrics>,
    /// Sets `TCP_NODELAY` on accepted connections, so small answers go out at once rather than after the
    /// client's delayed ACK (`serve` does; the in-process stacks keep the OS default).
    pub tcp_nodelay: bool,
    /// Origins a browser app on another origin may call from (`--cors-allowed-origins`, exact match);
    /// none: no CORS headers, same origin only.
    pub cors_origins: Vec<HeaderValue>,
    /// Rate limits per token subject and per tenant (`--rate-limit-per-second`, `--rate-limit-burst`,
    /// `--rate-limit-tenant-per-second`, `--rate-limit-tenant-burst`).
    pub rate_limits: limits::RateLimitSettings,
    /// How long a client may take to send a request's head and body (`--http-header-timeout-seconds`,
    /// `--http-body-timeout-seconds`), on the plain and the TLS listener.
    pub http_timeouts: serve::HttpTimeouts,
}

impl Default for AppSettings {
    /// `serve`'s defaults, without `TCP_NODELAY`.
    fn default() -> Self {
        Self {
            public_url: "http://127.0.0.1:8080".into(),
            max_body_bytes: 64 * 1024,
            graphql: Default::default(),
            metrics: Arc::new(metrics::Metrics::default()),
            tcp_nodelay: false,
            cors_origins: Vec::new(),
            rate_limits: Default::default(),
            http_timeouts: Default::default(),
        }
    }
}

/// The HTTP app: its state and how it serves. The one place that builds an [`AppState`] and its router,
/// used by `serve`, `dev up`, the integration tests and the benchmarks.
#[derive(Debug, Clone)]
pub struct App {
    /// The state every handler shares.
    pub state: AppState,
    tcp_nodelay: bool,
}

impl App {
    /// The app on `ctx`, with a management-cluster client for kubeconfig downloads when there is one.
    pub fn build(ctx: Ctx, kube: Option<kube::Client>, settings: AppSettings) -> Self {
        let AppSettings {
            public_url,
            max_body_bytes,
            graphql,
            metrics,
            tcp_nodelay,
            cors_origins,
            rate_limits,
            http_timeouts,
        } = settings;
        Self {
            state: AppState {
                ctx,
                kube,
                metrics,
                public_url,
                max_body_bytes,
                hub: tenantplane_service::events::Hub::new(graphql.subscription_buffer),
                sockets: graphql::TenantSockets::new(
                    graphql.max_sockets_per_tenant,
                    graphql.max_subscriptions_per_tenant,
                ),
                graphql,
                cors_origins,
                limits: limits::RateLimits::new(rate_limits),
                http_timeouts,
            },
            tcp_nodelay,
        }
    }

    /// The full router ([`router`]).
    pub fn router(&self) -> Router {
        router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` resolves, then finishes the open requests.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = self.router();
        // Forgets refilled buckets while serving; stops with the server.
        let _sweep = self
            .state
            .limits
            .clone()
            .map(|l| AbortOnDrop(tokio::spawn(l.sweep())));
        let header = self.state.http_timeouts.header();
        if self.tcp_nodelay {
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(err) = tcp.set_nodelay(true) {
                    tracing::debug!("TCP_NODELAY not set: {err}");
                }
            });
            serve::serve(listener, router, header, shutdown).await
        } else {
            serve::serve(listener, router, header, shutdown).await
        }
    }

    /// Serves the same app over TLS on `listener` until `shutdown`, with the same deadlines.
    pub async fn serve_tls(
        self,
        listener: tls::TlsListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let header = self.state.http_timeouts.header();
        serve::serve(listener, self.router(), header, shutdown).await
    }
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document's static parts.
#[derive(Debug, OpenApi)]
#[openapi(
    info(title = "Tenantplane API", description = "Self-service control planes for Kamaji-compatible tenant clusters. Errors are RFC 9457 problem documents."),
    servers((url = "/api/v1")),
    modifiers(&BearerAuth),
    components(schemas(error::Problem)),
    tags((name = "tenants"), (name = "tokens"), (name = "control-planes"), (name = "join-tokens"), (name = "authenticators"), (name = "datastores"), (name = "auth"))
)]
pub struct ApiDoc;

/// The `/api/v1` routes and the OpenAPI document describing exactly them, under `contract`.
pub fn api_v1(contract: &openapi::Contract) -> (Router<AppState>, serde_json::Value) {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(rest::viewer))
        .routes(routes!(rest::create_tenant, rest::list_tenants))
        .routes(routes!(rest::get_tenant, rest::delete_tenant))
        .routes(routes!(rest::suspend_tenant))
        .routes(routes!(rest::resume_tenant))
        .routes(routes!(rest::list_audit))
        .routes(routes!(rest::get_quotas, rest::set_quotas))
        .routes(routes!(rest::mint_token, rest::list_tokens))
        .routes(routes!(rest::revoke_token))
        .routes(routes!(rest::rotate_signing_key))
        .routes(routes!(rest::create_control_plane, rest::list_control_planes))
        .routes(routes!(
            rest::get_control_plane,
            rest::update_control_plane,
            rest::delete_control_plane
        ))
        .routes(routes!(rest::kubeconfig))
        .routes(routes!(rest::create_credential))
        .routes(routes!(rest::admin_kubeconfig))
        .routes(routes!(migrations::migrate_control_plane))
        .routes(routes!(migrations::abort_migration))
        .routes(routes!(rest::create_authenticator, rest::list_authenticators))
        .routes(routes!(rest::get_authenticator, rest::delete_authenticator))
        .routes(routes!(rest::create_join_token, rest::list_join_tokens))
        .routes(routes!(rest::revoke_join_token))
        .routes(routes!(rest::list_operations))
        .routes(routes!(rest::get_operation))
        .routes(routes!(drains::get_parent_operation))
        .routes(routes!(rest::create_pool, rest::list_pools))
        .routes(routes!(rest::get_pool, rest::update_pool, rest::delete_pool))
        .routes(routes!(rest::create_datastore, rest::list_datastores))
        .routes(routes!(
            rest::get_datastore,
            rest::update_datastore,
            rest::delete_datastore
        ))
        .routes(routes!(rest::cordon_datastore))
        .routes(routes!(rest::uncordon_datastore))
        .routes(routes!(rest::drain_plan))
        .routes(routes!(drains::drain_datastore))
        .routes(routes!(drains::rebalance_pool))
        .routes(routes!(rest::simulate_placement))
        .split_for_parts();
    (router, openapi::complete(&doc, contract))
}

/// The OpenAPI document as committed in `schema/openapi.json` (`serve`'s default settings).
pub fn openapi_json() -> String {
    let (_, doc) = api_v1(&openapi::Contract::default());
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The full HTTP router.
pub fn router(state: AppState) -> Router {
    let (api, doc) = api_v1(&openapi::Contract::new(state.ctx.versions, &state.ctx.limits));
    let doc = Arc::new(doc);
    let request_id = HeaderName::from_static("x-request-id");
    let metrics = state.metrics.clone();
    let graphql = graphql::routes(&state);
    let cors = cors(&state.cors_origins);
    let router = Router::new()
        .nest("/api/v1", api)
        .merge(graphql)
        .route("/api/v1/openapi.json", get(move || async move { Json(doc.as_ref().clone()) }))
        .route("/docs", get(web::docs))
        .route("/assets/{name}", get(web::asset))
        .route("/", get(portal::root))
        .route("/portal", get(portal::index))
        .route("/portal/", get(portal::index))
        .route("/portal/{*path}", get(portal::file))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/.well-known/openid-configuration", get(openid_configuration))
        .merge(credential_issuer_routes(&state))
        .fallback(|| async { error::ApiError::new(StatusCode::NOT_FOUND, "not-found", "Not found", "no such route") })
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.http_timeouts.body(),
            serve::body_deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(metrics, metrics::track))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request.id = %id, tenant.id = tracing::field::Empty)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid));
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
    .with_state(state)
}

/// A browser origin as `--cors-allowed-origins` takes it: `http` or `https`, a host and an optional port,
/// nothing after (no path, no trailing slash, no `*`, no `null`), as browsers send it in `Origin`.
pub fn parse_origin(s: &str) -> Result<HeaderValue, String> {
    let bad =
        || format!("{s:?} is not an origin: give scheme://host[:port], e.g. https://portal.example.com");
    let (scheme, rest) = s.split_once("://").ok_or_else(bad)?;
    let host_ok = |h: &str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0) && !p.starts_with('0'));
    if !matches!(scheme, "http" | "https") || !host_ok(host) || !port_ok {
        return Err(bad());
    }
    HeaderValue::from_str(s).map_err(|_| bad())
}

/// CORS for browser apps on `origins` (exact match; none: no CORS headers at all). Bearer tokens, not
/// cookies, so no credentials; preflights are cached for 10 minutes.
fn cors(origins: &[HeaderValue]) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::Method;
    use tower_http::cors::{AllowOrigin, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins.iter().cloned()))
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::PATCH,
                Method::DELETE,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::IF_MATCH,
                HeaderName::from_static("idempotency-key"),
            ])
            .expose_headers([
                header::ETAG,
                header::LOCATION,
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
                HeaderName::from_static("x-request-id"),
            ])
            .max_age(Duration::from_secs(600)),
    )
}

/// Liveness: the process serves HTTP.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: PostgreSQL answers `SELECT 1` within two seconds.
async fn readyz(State(state): State<AppState>) -> Response {
    let check = tokio::time::timeout(
        Duration::from_secs(2),
        sqlx::query_scalar!("select 1 as one").fetch_one(&state.ctx.db),
    )
    .await;
    match check {
        Ok(Ok(Some(1))) => Json(json!({"status": "ok", "checks": {"postgres": "ok"}})).into_response(),
        Err(_) => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Not ready",
            "PostgreSQL did not answer within 2s",
        ),
        Ok(other) => {
            if let Err(err) = other {
                tracing::warn!(error = %err, "readiness check failed");
            }
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not ready",
                "PostgreSQL is unreachable",
            )
        }
    }
}

/// Prometheus metrics.
async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// The public keys of every tenant and of the platform.
async fn jwks(State(state): State<AppState>) -> Response {
    match tenantplane_service::auth::keys::jwks(&state.ctx.db).await {
        Ok(keys) => Json(json!({"keys": keys})).into_response(),
        Err(e) => error::ApiError::internal(&e.to_string()).into_response(),
    }
}

/// The path under which the credential issuer's discovery and JWKS are served: its URL's path
/// (`/credentials` for `https://host:8443/credentials`).
pub fn credential_issuer_path(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
    path.trim_end_matches('/').to_string()
}

/// Discovery and JWKS of the credential issuer, under its URL's path (none without an issuer).
fn credential_issuer_routes(state: &AppState) -> Router<AppState> {
    let Some(issuer) = &state.ctx.tokens.cluster.issuer else {
        return Router::new();
    };
    let path = credential_issuer_path(&issuer.url);
    let discovery = tenantplane_service::auth::cluster::discovery(&issuer.url);
    Router::new()
        .route(
            &format!("{path}/.well-known/openid-configuration"),
            get(move || async move { Json(discovery) }),
        )
        .route(
            &format!("{path}{}", tenantplane_service::auth::cluster::JWKS_PATH),
            get(credential_jwks),
        )
}

/// The public keys that sign cluster credentials.
async fn credential_jwks(State(state): State<AppState>) -> Response {
    match tenantplane_service::auth::cluster::jwks(&state.ctx.db).await {
        Ok(keys) => Json(json!({"keys": keys})).into_response(),
        Err(e) => error::ApiError::internal(&e.to_string()).into_response(),
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`, with the default header deadline
/// ([`App::serve_tls`] uses the app's).
pub async fn serve_tls(
    router: Router,
    listener: tls::TlsListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let header = serve::HttpTimeouts::default().header();
    serve::serve(listener, router, header, shutdown).await
}

/// OIDC discovery for the built-in issuer.
async fn openid_configuration(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({
        "issuer": state.ctx.tokens.issuer,
        "jwks_uri": format!("{}/.well-known/jwks.json", state.public_url.trim_end_matches('/')),
        "id_token_signing_alg_values_supported": ["EdDSA"],
        "token_endpoint_auth_methods_supported": ["none"],
        "response_types_supported": ["token"],
        "subject_types_supported": ["public"],
        "claims_supported": ["iss", "aud", "sub", "jti", "tid", "role", "iat", "nbf", "exp"]
    }))
}

/// An RFC 9457 `application/problem+json` response.
pub fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod origin_tests {
    use super::parse_origin;

    #[test]
    fn an_origin_is_scheme_host_and_port_only() {
        for ok in [
            "https://portal.example.com",
            "http://127.0.0.1:5173",
            "https://a-b.c:8443",
        ] {
            assert_eq!(
                parse_origin(ok).map(|v| v.to_str().unwrap().to_string()),
                Ok(ok.to_string())
            );
        }
        for bad in [
            "*",
            "null",
            "portal.example.com",
            "https://portal.example.com/",
            "https://x.com/app",
            "ftp://x.com",
            "https://X.com",
            "https://x.com:0",
            "https://x.com:99999",
            "https://",
            "https://x.com:08",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }
}
