//! The GraphQL API at `/graphql`: queries and mutations over HTTP (POST, and GET for queries), GraphiQL for
//! browsers, and subscriptions over WebSocket (`graphql-transport-ws`, and `graphql-ws` for older clients).
//!
//! Every resolver calls the same `service` use-cases as REST, with the caller's [`Principal`]: the
//! authorization rules, validation and transactions live there once. HTTP requests authenticate with the
//! `Authorization` header (failures are `401` problem documents, as in REST); WebSocket connections with
//! the token in `connection_init` (failures close the socket with `4403`).

mod connection;
mod drains;
mod loader;
mod mutation;
mod payload;
mod query;
mod slots;
mod subscription;
pub mod types;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_graphql::{
    Data, ErrorExtensions, Schema,
    http::{WebSocketProtocols as Protocols, WsMessage},
    parser::types::OperationType,
};
use axum::{
    Extension, Router,
    body::Body,
    extract::{
        RawQuery, State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection},
    },
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use futures_util::{SinkExt, StreamExt, future};
use tokio::sync::Notify;

pub use self::{mutation::Mutation, query::Query, slots::TenantSockets, subscription::Subscription};
use super::{
    AppState,
    error::ApiError,
    extract::{Auth, RequestId, bearer_token},
};
use tenantplane_service::auth::{Principal, TokenError};
use tenantplane_service::{self as service, Ctx, ServiceError, events::Hub};

/// The schema type.
pub type AppSchema = Schema<Query, Mutation, Subscription>;

/// The deepest query accepted.
pub const MAX_DEPTH: usize = 10;
/// WebSocket close code for a subscriber that fell further behind than the subscription buffer.
pub const CLOSE_SLOW_CONSUMER: u16 = 4008;
/// How long one WebSocket frame may take to reach the client before the connection is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Live subscriptions one WebSocket connection may hold; one more closes it with `4400`.
pub const MAX_SUBSCRIPTIONS: usize = 100;
/// How long a WebSocket client has to send `connection_init`.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// GraphQL limits and switches (`serve` flags).
#[derive(Debug, Clone, clap::Args)]
pub struct GraphqlSettings {
    /// Largest query complexity: every field costs 1, and `controlPlanes` multiplies its selection by the
    /// page size.
    #[arg(
        long = "graphql-max-complexity",
        env = "TENANTPLANE_GRAPHQL_MAX_COMPLEXITY",
        default_value_t = 5000
    )]
    pub max_complexity: usize,
    /// Serve introspection (`__schema`, `__type`); turn it off in production.
    #[arg(long = "graphql-introspection", env = "TENANTPLANE_GRAPHQL_INTROSPECTION", default_value_t = true,
          action = clap::ArgAction::Set)]
    pub introspection: bool,
    /// Largest GraphQL request (POST body, GET query string or WebSocket message), in bytes.
    #[arg(
        long = "graphql-max-request-bytes",
        env = "TENANTPLANE_GRAPHQL_MAX_REQUEST_BYTES",
        default_value_t = 32768
    )]
    pub max_request_bytes: usize,
    /// Events a subscriber may fall behind before it is disconnected (close code 4008).
    #[arg(
        long = "graphql-subscription-buffer",
        env = "TENANTPLANE_GRAPHQL_SUBSCRIPTION_BUFFER",
        default_value_t = 256
    )]
    pub subscription_buffer: usize,
    /// Seconds between re-checks of a WebSocket connection's token (revocation, expiry) while it is open.
    /// Each operation re-checks it too, an announced revocation (`NOTIFY token_revoked`) closes it at once,
    /// and a timer closes it at the token's expiry; this interval catches announcements a listener missed.
    #[arg(
        long = "graphql-token-recheck-seconds",
        env = "TENANTPLANE_GRAPHQL_TOKEN_RECHECK_SECONDS",
        default_value_t = 60.0
    )]
    pub token_recheck_seconds: f64,
    /// Most aliases one request may use (`a: node(…) b: node(…)` …), counted through fragments.
    #[arg(
        long = "graphql-max-aliases",
        env = "TENANTPLANE_GRAPHQL_MAX_ALIASES",
        default_value_t = 50
    )]
    pub max_aliases: usize,
    /// Most root fields one operation may select.
    #[arg(
        long = "graphql-max-root-fields",
        env = "TENANTPLANE_GRAPHQL_MAX_ROOT_FIELDS",
        default_value_t = 20
    )]
    pub max_root_fields: usize,
    /// Most WebSocket connections one tenant's tokens may hold open together (platform admins count as
    /// one tenant); one more is closed at `connection_init` with 1013 (try again later).
    #[arg(
        long = "graphql-max-sockets-per-tenant",
        env = "TENANTPLANE_GRAPHQL_MAX_SOCKETS_PER_TENANT",
        default_value_t = 100
    )]
    pub max_sockets_per_tenant: usize,
    /// Most live WebSocket operations (subscriptions, and queries and mutations until they end) of one
    /// tenant over all its connections; one more is refused with `TOO_MANY_SUBSCRIPTIONS`.
    #[arg(
        long = "graphql-max-subscriptions-per-tenant",
        env = "TENANTPLANE_GRAPHQL_MAX_SUBSCRIPTIONS_PER_TENANT",
        default_value_t = 500
    )]
    pub max_subscriptions_per_tenant: usize,
}

impl Default for GraphqlSettings {
    fn default() -> Self {
        Self {
            max_complexity: 5000,
            introspection: true,
            max_request_bytes: 32768,
            subscription_buffer: 256,
            token_recheck_seconds: 60.0,
            max_aliases: 50,
            max_root_fields: 20,
            max_sockets_per_tenant: 100,
            max_subscriptions_per_tenant: 500,
        }
    }
}

impl GraphqlSettings {
    /// The token re-check interval (at least 100 ms).
    pub fn token_recheck(&self) -> Duration {
        if self.token_recheck_seconds.is_finite() && self.token_recheck_seconds > 0.1 {
            Duration::from_secs_f64(self.token_recheck_seconds)
        } else {
            Duration::from_millis(100)
        }
    }
}

/// Selections walked at most while counting aliases (fragments spread in fragments can multiply a small
/// document).
const MAX_SHAPE_NODES: usize = 10_000;

/// Counts aliases (through fragment spreads) and the fields of selection sets, within a node budget.
struct ShapeWalk<'a> {
    doc: &'a async_graphql::parser::types::ExecutableDocument,
    aliases: usize,
    nodes: usize,
    path: Vec<&'a str>,
}

impl<'a> ShapeWalk<'a> {
    /// Counts aliases below `set`; returns its fields (fragments expanded).
    fn set(&mut self, set: &'a async_graphql::parser::types::SelectionSet) -> usize {
        use async_graphql::parser::types::Selection;
        let mut fields = 0;
        for item in &set.items {
            self.nodes += 1;
            if self.nodes > MAX_SHAPE_NODES {
                return fields;
            }
            match &item.node {
                Selection::Field(f) => {
                    fields += 1;
                    self.aliases += usize::from(f.node.alias.is_some());
                    self.set(&f.node.selection_set.node);
                }
                Selection::InlineFragment(f) => fields += self.set(&f.node.selection_set.node),
                Selection::FragmentSpread(spread) => {
                    let name = spread.node.fragment_name.node.as_str();
                    if self.path.contains(&name) {
                        continue;
                    }
                    if let Some(fragment) = self.doc.fragments.get(&spread.node.fragment_name.node) {
                        self.path.push(name);
                        fields += self.set(&fragment.node.selection_set.node);
                        self.path.pop();
                    }
                }
            }
        }
        fields
    }
}

/// Refuses a document with more aliases (counted through fragment spreads) or, in any operation, more root
/// fields than the settings allow.
pub fn check_shape(
    doc: &async_graphql::parser::types::ExecutableDocument,
    settings: &GraphqlSettings,
) -> Result<(), String> {
    let mut walk = ShapeWalk {
        doc,
        aliases: 0,
        nodes: 0,
        path: Vec::new(),
    };
    for (_, op) in doc.operations.iter() {
        let roots = walk.set(&op.node.selection_set.node);
        if roots > settings.max_root_fields {
            return Err(format!(
                "Query has too many root fields ({roots}; at most {}).",
                settings.max_root_fields
            ));
        }
    }
    if walk.nodes > MAX_SHAPE_NODES {
        return Err(format!(
            "Query is too large (more than {MAX_SHAPE_NODES} selections)."
        ));
    }
    if walk.aliases > settings.max_aliases {
        return Err(format!(
            "Query has too many aliases ({}; at most {}).",
            walk.aliases, settings.max_aliases
        ));
    }
    Ok(())
}

/// The shape check of a WebSocket `subscribe`/`start` payload's query (`None`: nothing to refuse here;
/// parse errors are async-graphql's to answer).
fn payload_shape(message: &serde_json::Value, settings: &GraphqlSettings) -> Option<String> {
    let query = message.get("payload")?.get("query")?.as_str()?;
    let doc = async_graphql::parser::parse_query(query).ok()?;
    check_shape(&doc, settings).err()
}

/// The authenticated caller of a request or WebSocket connection.
#[derive(Debug, Clone)]
struct Caller(Principal);

/// The request id of an HTTP request or of a WebSocket connection's upgrade request.
#[derive(Debug, Clone)]
struct RequestIdData(Option<String>);

/// The management-cluster client of the server, when it has one (join tokens reach tenant clusters
/// through it).
#[derive(Clone)]
struct Cluster(Option<kube::Client>);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cluster").field(&self.0.is_some()).finish()
    }
}

/// The management-cluster client, for resolvers.
fn cluster<'a>(ctx: &'a async_graphql::Context<'_>) -> Option<&'a kube::Client> {
    ctx.data_opt::<Cluster>().and_then(|c| c.0.as_ref())
}

/// Set by a subscription whose subscriber fell behind; the connection then closes with
/// [`CLOSE_SLOW_CONSUMER`].
#[derive(Debug, Clone)]
struct SlowConsumer(Arc<Notify>);

/// The schema with its limits and shared data.
pub fn schema(ctx: Ctx, settings: &GraphqlSettings) -> AppSchema {
    schema_with(ctx, settings, Hub::new(settings.subscription_buffer), None)
}

/// The schema, with the event hub its subscriptions (and WebSocket revocation checks) share and the
/// management-cluster client.
fn schema_with(ctx: Ctx, settings: &GraphqlSettings, hub: Hub, kube: Option<kube::Client>) -> AppSchema {
    let builder = Schema::build(Query, Mutation, Subscription)
        .data(ctx)
        .data(hub)
        .data(Cluster(kube))
        .limit_depth(MAX_DEPTH)
        .limit_complexity(settings.max_complexity);
    if settings.introspection {
        builder.finish()
    } else {
        builder.disable_introspection().finish()
    }
}

/// The SDL, as committed in `schema/schema.graphql` (`tenantplane sdl`).
pub fn sdl() -> String {
    Schema::build(Query, Mutation, Subscription).finish().sdl()
}

/// The caller and the use-case context, for resolvers.
fn caller<'a>(ctx: &'a async_graphql::Context<'_>) -> async_graphql::Result<(&'a Ctx, &'a Principal)> {
    let c = ctx.data::<Ctx>()?;
    let who = ctx.data_opt::<Caller>().ok_or_else(|| {
        async_graphql::Error::new(TokenError::Missing.to_string())
            .extend_with(|_, e| e.set("code", "UNAUTHENTICATED"))
    })?;
    Ok((c, &who.0))
}

fn request_id(ctx: &async_graphql::Context<'_>) -> Option<String> {
    ctx.data_opt::<RequestIdData>().and_then(|r| r.0.clone())
}

/// `field: message` of each field error, joined with `; `.
fn joined(errors: &[crate::domain::FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A service error as a GraphQL error with `extensions.code` (and `extensions.fields` for invalid input).
/// Internal details are logged, never returned.
fn gql_error(err: ServiceError) -> async_graphql::Error {
    let (code, message) = match &err {
        ServiceError::Invalid(errors) => ("BAD_USER_INPUT", joined(errors)),
        ServiceError::ConflictFields(errors) => ("CONFLICT", joined(errors)),
        ServiceError::NotFound(_) => ("NOT_FOUND", err.to_string()),
        ServiceError::Forbidden(_) => ("FORBIDDEN", err.to_string()),
        ServiceError::QuotaExceeded(..) => ("QUOTA_EXCEEDED", err.to_string()),
        ServiceError::Conflict(_) | ServiceError::NotReady(_) | ServiceError::InUse { .. } => {
            ("CONFLICT", err.to_string())
        }
        ServiceError::PreconditionFailed(_) => ("PRECONDITION_FAILED", err.to_string()),
        // No GraphQL field produces this yet (no idempotency keys for mutations).
        ServiceError::IdempotencyKeyReused => ("IDEMPOTENCY_KEY_REUSED", err.to_string()),
        ServiceError::NoManagementCluster | ServiceError::Unavailable(_) => ("UNAVAILABLE", err.to_string()),
        ServiceError::Internal(detail) => {
            tracing::error!(error = %detail, "internal error");
            (
                "INTERNAL",
                "an internal error occurred; quote the request id when reporting it".to_string(),
            )
        }
    };
    let fields = match &err {
        ServiceError::Invalid(errors) | ServiceError::ConflictFields(errors) => Some(
            errors
                .iter()
                .map(|e| {
                    let mut m = async_graphql::indexmap::IndexMap::new();
                    m.insert(
                        async_graphql::Name::new("field"),
                        async_graphql::Value::from(e.field.clone()),
                    );
                    m.insert(
                        async_graphql::Name::new("message"),
                        async_graphql::Value::from(e.message.clone()),
                    );
                    async_graphql::Value::Object(m)
                })
                .collect::<Vec<_>>(),
        ),
        _ => None,
    };
    async_graphql::Error::new(message).extend_with(move |_, e| {
        e.set("code", code);
        if let Some(fields) = fields.clone() {
            e.set("fields", async_graphql::Value::List(fields));
        }
    })
}

/// `/graphql`: POST and GET (queries only) execute, GET without a query serves GraphiQL, and a WebSocket
/// upgrade starts a subscription connection.
pub fn routes(state: &AppState) -> Router<AppState> {
    let hub = state.hub.clone();
    let schema = schema_with(state.ctx.clone(), &state.graphql, hub.clone(), state.kube.clone());
    // A request is charged one when it is authenticated (`Auth`), its mutation fields in `execute`, and
    // WebSocket operations as they start.
    let post = axum::routing::post(post_graphql);
    Router::new()
        .route("/graphql", get(get_graphql).merge(post))
        .layer(Extension(schema))
        .layer(Extension(hub))
}

fn too_large(limit: usize) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Payload too large",
        format!("the GraphQL request exceeds {limit} bytes"),
    )
    .into_response()
}

fn bad_request(detail: impl Into<String>) -> Response {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad-graphql-request",
        "Bad GraphQL request",
        detail,
    )
    .into_response()
}

async fn post_graphql(
    State(state): State<AppState>,
    Extension(schema): Extension<AppSchema>,
    auth: Result<Auth, ApiError>,
    rid: RequestId,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json") || ct.ends_with("+json"));
    if !json {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            "send the GraphQL request as application/json",
        )
        .into_response();
    }
    let limit = state.graphql.max_request_bytes;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return too_large(limit);
    };
    let request: async_graphql::Request = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("the body is not a GraphQL request: {e}")),
    };
    execute(&state, &schema, auth, rid, request).await
}

#[expect(clippy::too_many_arguments, reason = "one axum handler with its extractors")]
async fn get_graphql(
    State(state): State<AppState>,
    Extension(schema): Extension<AppSchema>,
    Extension(hub): Extension<Hub>,
    auth: Result<Auth, ApiError>,
    rid: RequestId,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    if let Ok(upgrade) = upgrade {
        return websocket(state, (schema, hub), upgrade, &headers, rid);
    }
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return super::web::graphiql();
    };
    let limit = state.graphql.max_request_bytes;
    if query.len() > limit {
        return too_large(limit);
    }
    let mut request = match async_graphql::http::parse_query_string(&query) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("the query string is not a GraphQL request: {e}")),
    };
    // GET must not change anything (no CSRF through links): only queries run over GET.
    if let Ok(doc) = request.parsed_query()
        && doc
            .operations
            .iter()
            .any(|(_, op)| op.node.ty != OperationType::Query)
    {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            "only queries run over GET; send mutations with POST and subscriptions over WebSocket",
        )
        .into_response();
    }
    execute(&state, &schema, auth, rid, request).await
}

/// What operation `name` of `doc` (or its only one) costs against the rate limit: one per mutation root
/// field (through fragments), and at least one.
pub fn operation_cost(doc: &async_graphql::parser::types::ExecutableDocument, name: Option<&str>) -> u32 {
    let mut walk = ShapeWalk {
        doc,
        aliases: 0,
        nodes: 0,
        path: Vec::new(),
    };
    let fields = doc
        .operations
        .iter()
        .filter(|(n, _)| name.is_none_or(|want| n.is_some_and(|n| n.as_str() == want)))
        .filter(|(_, op)| op.node.ty == OperationType::Mutation)
        .map(|(_, op)| walk.set(&op.node.selection_set.node))
        .max()
        .unwrap_or(0);
    u32::try_from(fields.max(1)).unwrap_or(u32::MAX)
}

async fn execute(
    state: &AppState,
    schema: &AppSchema,
    auth: Result<Auth, ApiError>,
    rid: RequestId,
    request: async_graphql::Request,
) -> Response {
    let who = match auth {
        Ok(Auth(who)) => who,
        Err(e) => return e.with_request_id(rid.0).into_response(),
    };
    let mut request = request;
    let name = request.operation_name.clone();
    if let (Some(limits), Ok(doc)) = (&state.limits, request.parsed_query()) {
        let cost = operation_cost(doc, name.as_deref());
        // Authenticating the request charged one already.
        if let Err(refused) = limits.charge(&who, cost, 1) {
            return limits.refusal(refused).into_response();
        }
    }
    if let Ok(doc) = request.parsed_query()
        && let Err(message) = check_shape(doc, &state.graphql)
    {
        let refused =
            async_graphql::Response::from_errors(vec![async_graphql::ServerError::new(message, None)]);
        return (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&refused).unwrap_or_default(),
        )
            .into_response();
    }
    let request = request
        .data(loader::Loaders::new(&state.ctx, &who))
        .data(Caller(who))
        .data(RequestIdData(rid.0));
    let response = schema.execute(request).await;
    // Answers are per caller and may hold a kubeconfig: never stored by a cache.
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        serde_json::to_string(&response).unwrap_or_default(),
    )
        .into_response()
}

/// Prefixes of `connection_init` failures, mapped to close codes.
const INIT_UNAUTHORIZED: &str = "unauthorized: ";
const INIT_UNAVAILABLE: &str = "unavailable: ";
const INIT_TOO_MANY: &str = "try again later: ";

/// The bearer token of a `connection_init` payload: `Authorization` / `authorization` (`Bearer …`) or
/// `token`.
fn init_token(payload: &serde_json::Value) -> Option<String> {
    ["Authorization", "authorization"]
        .iter()
        .find_map(|k| payload.get(*k).and_then(|v| v.as_str()).and_then(bearer_token))
        .or_else(|| payload.get("token").and_then(|v| v.as_str()))
        .map(str::to_string)
}

fn websocket(
    state: AppState,
    schema: (AppSchema, Hub),
    upgrade: WebSocketUpgrade,
    headers: &HeaderMap,
    rid: RequestId,
) -> Response {
    let protocol = headers
        .get(header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|list| list.split(',').find_map(|p| p.trim().parse::<Protocols>().ok()));
    let Some(protocol) = protocol else {
        return bad_request("ask for the WebSocket subprotocol graphql-transport-ws (or graphql-ws)");
    };
    let limit = state.graphql.max_request_bytes;
    upgrade
        .protocols(async_graphql::http::ALL_WEBSOCKET_PROTOCOLS)
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| serve_socket(socket, schema, protocol, state, rid.0))
}

/// An operation refused before it ran.
enum Refusal {
    /// The token no longer holds (operation id, why): the connection closes.
    Token(Option<String>, TokenError),
    /// The operation is refused (operation id, message, error code), e.g. its document is over a limit
    /// or its token over the rate limit: only it is refused.
    Operation(String, String, &'static str),
}

/// One WebSocket connection's shared state between its input filter and its output loop.
#[derive(Clone)]
struct SocketState {
    ctx: Ctx,
    /// The caller, once `connection_init` succeeded.
    who: Arc<std::sync::Mutex<Option<Principal>>>,
    /// Live subscriptions.
    active: Arc<AtomicUsize>,
    /// A client asked for more than [`MAX_SUBSCRIPTIONS`].
    too_many: Arc<Notify>,
    /// Operations refused before they run.
    denied: tokio::sync::mpsc::UnboundedSender<Refusal>,
    /// Limits of one request.
    settings: GraphqlSettings,
    /// Why the client's side ended, when it was an error (e.g. a message over the size limit).
    input_error: Arc<std::sync::Mutex<Option<String>>>,
    /// Rate limits, when on.
    limits: Option<super::limits::RateLimits>,
    /// The per-tenant caps on connections and live operations.
    sockets: TenantSockets,
    /// This connection's place under its tenant's caps, once `connection_init` succeeded.
    slot: Arc<std::sync::Mutex<Option<slots::SocketSlot>>>,
}

impl SocketState {
    fn caller(&self) -> Option<Principal> {
        self.who.lock().ok().and_then(|w| w.clone())
    }

    /// Re-checks the caller's token; the close frame when it no longer holds.
    async fn recheck_close(&self) -> Option<Message> {
        let who = self.caller()?;
        let err = service::tokens::recheck(&self.ctx, &who).await.err()?;
        let (code, reason) = token_close(&err);
        Some(close_message(code, reason))
    }

    /// Charges an operation message to the connection caller's buckets; why not, when it is over a limit.
    fn over_limit(&self, message: &serde_json::Value) -> Option<String> {
        let limits = self.limits.as_ref()?;
        let who = self.caller()?;
        let payload = message.get("payload")?;
        let doc = async_graphql::parser::parse_query(payload.get("query")?.as_str()?).ok()?;
        let name = payload.get("operationName").and_then(|v| v.as_str());
        limits
            .charge(&who, operation_cost(&doc, name), 0)
            .err()
            .map(|refused| limits.message(refused))
    }

    /// Lets one client message through, or not: each operation (`subscribe`, `start`) first re-checks the
    /// token (revocation and expiry), and one over the subscription cap is not started.
    async fn admit(self, message: Result<Message, axum::Error>) -> Option<Vec<u8>> {
        let bytes = match message {
            Ok(Message::Text(t)) => t.as_str().as_bytes().to_vec(),
            Ok(Message::Binary(b)) => b.to_vec(),
            _ => return None,
        };
        let parsed = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
        let starts = parsed.as_ref().is_some_and(|v| {
            matches!(
                v.get("type").and_then(|t| t.as_str()),
                Some("subscribe" | "start")
            )
        });
        if !starts {
            self.ended(parsed.as_ref(), &["complete", "stop"]);
            return Some(bytes);
        }
        if let Some(who) = self.caller()
            && let Err(err) = service::tokens::recheck(&self.ctx, &who).await
        {
            let id = parsed
                .as_ref()
                .and_then(|v| v.get("id"))
                .and_then(|v| v.as_str())
                .map(str::to_string);
            let _ = self.denied.send(Refusal::Token(id, err));
            return None;
        }
        let id = || {
            parsed
                .as_ref()
                .and_then(|v| v.get("id"))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        if let Some(message) = parsed.as_ref().and_then(|v| payload_shape(v, &self.settings)) {
            let _ = self.denied.send(Refusal::Operation(id(), message, "BAD_REQUEST"));
            return None;
        }
        if let Some(message) = parsed.as_ref().and_then(|v| self.over_limit(v)) {
            let _ = self
                .denied
                .send(Refusal::Operation(id(), message, "RATE_LIMITED"));
            return None;
        }
        if self.with_slot(|slot| slot.start(&id())) == Some(false) {
            let message = format!(
                "too many live subscriptions for this tenant (at most {})",
                self.sockets.max_operations
            );
            let _ = self
                .denied
                .send(Refusal::Operation(id(), message, "TOO_MANY_SUBSCRIPTIONS"));
            return None;
        }
        if self.active.fetch_add(1, Ordering::SeqCst) >= MAX_SUBSCRIPTIONS {
            self.too_many.notify_one();
            return None;
        }
        Some(bytes)
    }

    /// `f` of this connection's place under its tenant's caps, once it has one.
    fn with_slot<T>(&self, f: impl FnOnce(&slots::SocketSlot) -> T) -> Option<T> {
        let slot = self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.as_ref().map(f)
    }

    /// Ends the live operation that `message` names, when its type is one of `kinds` (a client's
    /// `complete`/`stop`, the server's `complete`/`error`).
    fn ended(&self, message: Option<&serde_json::Value>, kinds: &[&str]) {
        let Some(message) = message else { return };
        let kind = message.get("type").and_then(|t| t.as_str());
        if let (Some(kind), Some(id)) = (kind, message.get("id").and_then(|i| i.as_str()))
            && kinds.contains(&kind)
        {
            self.with_slot(|slot| slot.end(id));
        }
    }
}

/// The next announced revocation; pending forever without a receiver.
async fn next_revocation(
    receiver: &mut Option<tokio::sync::broadcast::Receiver<uuid::Uuid>>,
) -> Result<uuid::Uuid, tokio::sync::broadcast::error::RecvError> {
    match receiver {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// The close frame of a token that no longer holds: `4403`, or `1011` when the token store is down.
fn token_close(err: &TokenError) -> (u16, String) {
    match err {
        TokenError::Unavailable => (1011, err.to_string()),
        err => (4403, format!("Forbidden: {err}")),
    }
}

/// The `error` message of a refused operation, in the connection's protocol.
fn operation_error(protocol: Protocols, id: &str, message: &str, code: &str) -> String {
    let error = serde_json::json!({"message": message, "extensions": {"code": code}});
    let payload = match protocol {
        Protocols::GraphQLWS => serde_json::json!([error]),
        Protocols::SubscriptionsTransportWS => error,
    };
    serde_json::json!({"type": "error", "id": id, "payload": payload}).to_string()
}

fn close_message(code: u16, reason: String) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// The close frame for what async-graphql ends a connection with.
fn graphql_close(code: u16, reason: String) -> Message {
    match (code, reason) {
        (1002, r) if r.starts_with(INIT_UNAUTHORIZED) => close_message(4403, r),
        (1002, r) if r.starts_with(INIT_UNAVAILABLE) => close_message(1011, r),
        (1002, r) if r.starts_with(INIT_TOO_MANY) => close_message(1013, r),
        (1011, r) if r.contains("handshake") => {
            close_message(4401, "Unauthorized: send connection_init first".into())
        }
        (code, r) => close_message(code, r),
    }
}

/// The client's messages as async-graphql reads them: up to the first error (remembered for the close
/// frame), each operation admitted by [`SocketState::admit`].
fn socket_input(
    source: futures_util::stream::SplitStream<WebSocket>,
    state: SocketState,
) -> impl futures_util::Stream<Item = Vec<u8>> {
    let seen_error = state.input_error.clone();
    source
        .take_while(move |m| {
            if let (Err(e), Ok(mut slot)) = (m, seen_error.lock()) {
                *slot = Some(e.to_string());
            }
            future::ready(matches!(
                m,
                Ok(Message::Text(_) | Message::Binary(_) | Message::Ping(_) | Message::Pong(_))
            ))
        })
        .filter_map(move |m| state.clone().admit(m))
}

/// The periodic token re-check of a socket: every `period` (at least 100 ms), the first one period from
/// now, not at once as `interval`'s first tick (connection_init has just checked the token, and an
/// immediate tick raced an operation's own re-check for the close).
fn recheck_interval(period: Duration) -> tokio::time::Interval {
    let period = period.max(Duration::from_millis(100));
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    recheck
}

/// `connection_init`: authenticates the token, remembers the caller for the connection's re-checks, and
/// hands resolvers the caller and its DataLoaders.
async fn connection_init(state: SocketState, payload: serde_json::Value) -> async_graphql::Result<Data> {
    let ctx = state.ctx.clone();
    let token = init_token(&payload)
        .ok_or_else(|| async_graphql::Error::new(format!("{INIT_UNAUTHORIZED}{}", TokenError::Missing)))?;
    let who = service::tokens::authenticate(&ctx, &token)
        .await
        .map_err(|e| match e {
            TokenError::Unavailable => async_graphql::Error::new(format!("{INIT_UNAVAILABLE}{e}")),
            e => async_graphql::Error::new(format!("{INIT_UNAUTHORIZED}{e}")),
        })?;
    let slot = state.sockets.open(who.tenant_id).ok_or_else(|| {
        async_graphql::Error::new(format!(
            "{INIT_TOO_MANY}too many WebSocket connections for this tenant (at most {})",
            state.sockets.max_sockets
        ))
    })?;
    *state
        .slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(slot);
    if let Ok(mut slot) = state.who.lock() {
        *slot = Some(who.clone());
    }
    let mut data = Data::default();
    data.insert(loader::Loaders::new(&ctx, &who));
    data.insert(Caller(who));
    Ok(data)
}

/// A new connection's state: nobody signed in yet, no operation, no tenant slot.
fn socket_state(app: &AppState, denied: tokio::sync::mpsc::UnboundedSender<Refusal>) -> SocketState {
    SocketState {
        ctx: app.ctx.clone(),
        who: Arc::default(),
        active: Arc::new(AtomicUsize::new(0)),
        too_many: Arc::new(Notify::new()),
        denied,
        settings: app.graphql.clone(),
        input_error: Arc::default(),
        limits: app.limits.clone(),
        sockets: app.sockets.clone(),
        slot: Arc::default(),
    }
}

/// Serves one `/graphql` WebSocket. The token of `connection_init` is checked again before every
/// operation and every `token_recheck` while the connection lives, and the connection closes (`4403`) when
/// the token is revoked or expires (a timer fires at `exp`).
async fn serve_socket(
    socket: WebSocket,
    (schema, hub): (AppSchema, Hub),
    protocol: Protocols,
    app: AppState,
    rid: Option<String>,
) {
    let token_recheck = app.graphql.token_recheck();
    let (mut sink, source) = socket.split();
    let (denied, mut denied_rx) = tokio::sync::mpsc::unbounded_channel();
    let state = socket_state(&app, denied);
    let input = socket_input(source, state.clone());
    let slow = SlowConsumer(Arc::new(Notify::new()));
    let mut connection = Data::default();
    connection.insert(slow.clone());
    connection.insert(RequestIdData(rid));
    let init_state = state.clone();
    let graphql = async_graphql::http::WebSocket::new(schema, input, protocol)
        .connection_data(connection)
        .on_connection_init(move |payload| connection_init(init_state, payload));
    let mut graphql = std::pin::pin!(graphql);
    let init_deadline = tokio::time::sleep(INIT_TIMEOUT);
    let mut init_deadline = std::pin::pin!(init_deadline);
    // The token's expiry, armed once the connection is acknowledged.
    let expiry = tokio::time::sleep(Duration::MAX / 4);
    let mut expiry = std::pin::pin!(expiry);
    let mut recheck = recheck_interval(token_recheck);
    // Announced revocations, once the connection is acknowledged.
    let mut revoked: Option<tokio::sync::broadcast::Receiver<uuid::Uuid>> = None;
    let mut acknowledged = false;
    loop {
        let message = tokio::select! {
            biased;
            () = slow.0.notified() => Some(close_message(
                CLOSE_SLOW_CONSUMER,
                "slow consumer: the client fell too far behind the event stream".into(),
            )),
            () = &mut init_deadline, if !acknowledged => Some(close_message(4408, "connection initialisation timeout".into())),
            Some(refusal) = denied_rx.recv() => match refusal {
                Refusal::Token(id, err) => {
                    if let Some(id) = id {
                        let text = operation_error(protocol, &id, &err.to_string(), "UNAUTHENTICATED");
                        let _ = tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Text(text.into()))).await;
                    }
                    let (code, reason) = token_close(&err);
                    Some(close_message(code, reason))
                }
                Refusal::Operation(id, message, code) => {
                    let text = operation_error(protocol, &id, &message, code);
                    match tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Text(text.into()))).await {
                        Ok(Ok(())) => None,
                        _ => break,
                    }
                }
            },
            () = &mut expiry, if acknowledged => Some(close_message(4403, "Forbidden: the token expired".into())),
            _ = recheck.tick(), if acknowledged => state.recheck_close().await,
            r = next_revocation(&mut revoked), if acknowledged => match r {
                // Revoked, or its tenant suspended or being deleted: the re-check says which.
                Ok(jti) if state.caller().is_some_and(|w| w.jti == jti) => state
                    .recheck_close()
                    .await
                    .or_else(|| Some(close_message(4403, format!("Forbidden: {}", TokenError::Revoked)))),
                Ok(_) => None,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => state.recheck_close().await,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    revoked = None;
                    None
                }
            },
            () = state.too_many.notified() => Some(close_message(
                4400,
                format!("too many subscriptions on one connection (at most {MAX_SUBSCRIPTIONS})"),
            )),
            next = graphql.next() => match next {
                Some(WsMessage::Text(text)) => {
                    if !acknowledged && text.contains("\"connection_ack\"") {
                        acknowledged = true;
                        if let Some(who) = state.caller() {
                            let left = (who.expires_at - chrono::Utc::now()).to_std().unwrap_or_default();
                            expiry.as_mut().reset(tokio::time::Instant::now() + left);
                        }
                        revoked = hub.revocations(&state.ctx.db).await.ok();
                    }
                    if text.starts_with("{\"type\":\"complete\"") {
                        let _ = state.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
                    }
                    if text.starts_with("{\"type\":\"complete\"") || text.starts_with("{\"type\":\"error\"") {
                        state.ended(serde_json::from_str(&text).ok().as_ref(), &["complete", "error"]);
                    }
                    match tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Text(text.into()))).await {
                        Ok(Ok(())) => None,
                        // The client is gone, or has not read for SEND_TIMEOUT: nothing more can reach it.
                        _ => break,
                    }
                }
                Some(WsMessage::Close(code, reason)) => Some(graphql_close(code, reason)),
                None => Some(match state.input_error.lock().ok().and_then(|e| e.clone()) {
                    Some(e) if e.contains("too long") => close_message(1009, format!("message too big: {e}")),
                    Some(e) => close_message(1002, e),
                    None => close_message(1000, String::new()),
                }),
            },
        };
        if let Some(message) = message {
            let _ = tokio::time::timeout(SEND_TIMEOUT, sink.send(message)).await;
            break;
        }
    }
    // The connection's place and live operations go back to its tenant now, not when the last clone goes.
    drop(
        state
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(),
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::{init_token, types};

    #[test]
    fn control_plane_global_ids_round_trip_and_junk_is_none() {
        let id = types::global_id("ControlPlane", "acme:0193a3c0-0000-7000-8000-0000000000c1");
        assert_eq!(
            types::control_plane_key(&id),
            Some(("acme".into(), "0193a3c0-0000-7000-8000-0000000000c1".into()))
        );
        assert_eq!(
            types::control_plane_key(&types::global_id("Tenant", "acme")),
            None
        );
        assert_eq!(types::parse_global_id("%%%"), None);
        assert_eq!(types::control_plane_key("QUJD"), None);
    }

    #[test]
    fn connection_init_takes_the_token_from_authorization_or_token() {
        assert_eq!(
            init_token(&json!({"Authorization": "Bearer abc"})),
            Some("abc".into())
        );
        assert_eq!(
            init_token(&json!({"authorization": "bearer abc "})),
            Some("abc".into())
        );
        assert_eq!(init_token(&json!({"token": "abc"})), Some("abc".into()));
        assert_eq!(init_token(&json!({"Authorization": "Basic abc"})), None);
        assert_eq!(init_token(&json!({})), None);
    }
}
