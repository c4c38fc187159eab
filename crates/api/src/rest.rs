//! REST handlers under `/api/v1`: thin wrappers over `crate::service`.

use axum::{
    Json,
    extract::{Path, Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use sqlx::PgConnection;
use utoipa::IntoParams;

use super::{
    AppState,
    error::{ApiError, Problem},
    extract::{Auth, IdempotencyKey, JsonBody, RequestId},
};
use crate::domain::{FieldError, OperationKind, OperationState, Role};
use tenantplane_service::{
    self as service, ServiceError,
    control_planes::ListFilter,
    idempotency,
    model::{
        Accepted, AuditPage, Authenticator, AuthenticatorList, ClusterCredential, ControlPlane,
        ControlPlanePage, CreateControlPlane, CreateCredential, CreateDataStore, CreateJoinToken, CreatePool,
        CreateTenant, CreatedJoinToken, DataStore, DataStorePage, JoinTokenList, MintToken, MintedToken,
        Operation, OperationPage, Pool, PoolPage, Quotas, SetQuotas, Tenant, TenantDeletion, TenantPage,
        Token, TokenPage, UpdateControlPlane, UpdateDataStore, UpdatePool, Viewer,
    },
    placement::{DrainMove, SimulateRequest},
};

type ApiResult<T> = Result<T, ApiError>;

/// Runs a write through [`service::idempotency::run`] and answers its status and body (a replay answers
/// the stored ones).
pub(super) async fn idempotent<T: serde::Serialize>(
    state: &AppState,
    auth: &Auth,
    route: &str,
    key: IdempotencyKey,
    hash: &[u8],
    status: StatusCode,
    work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, ServiceError>,
) -> ApiResult<(StatusCode, serde_json::Value)> {
    let request = idempotency::Request {
        route,
        key: key.0.as_deref(),
        request_hash: hash,
        status: status.as_u16(),
    };
    let outcome = idempotency::run(&state.ctx, &auth.0, request, work).await?;
    Ok((replay_status(&outcome, status), outcome.body))
}

/// The status to answer: `first` for a first run, the stored one for a replay.
fn replay_status(outcome: &idempotency::Outcome, first: StatusCode) -> StatusCode {
    if outcome.replayed {
        StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::OK)
    } else {
        first
    }
}

pub(super) fn accepted_response(tenant: &str, status: StatusCode, body: serde_json::Value) -> Response {
    let mut headers = HeaderMap::new();
    if let Some(op) = body.pointer("/operation/id").and_then(|v| v.as_str())
        && let Ok(v) = HeaderValue::from_str(&format!("/api/v1/tenants/{tenant}/operations/{op}"))
    {
        headers.insert(header::LOCATION, v);
    }
    if let Some(g) = body.pointer("/controlPlane/generation").and_then(|v| v.as_i64())
        && let Ok(v) = HeaderValue::from_str(&format!("\"{g}\""))
    {
        headers.insert(header::ETAG, v);
    }
    (status, headers, Json(body)).into_response()
}

pub(super) fn with_request_id<T>(result: Result<T, ServiceError>, request_id: &RequestId) -> ApiResult<T> {
    result.map_err(|e| ApiError::from(e).with_request_id(request_id.0.clone()))
}

/// The caller's identity.
#[utoipa::path(get, path = "/viewer", tag = "auth", security(("bearer" = [])),
    responses((status = 200, description = "OK", body = Viewer), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem)))]
pub async fn viewer(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Viewer>> {
    Ok(Json(service::tenants::viewer(&state.ctx, &auth.0).await?))
}

/// Creates a tenant (platform admin).
#[utoipa::path(post, path = "/tenants", tag = "tenants", security(("bearer" = [])), request_body = CreateTenant,
    responses((status = 201, description = "Created", body = Tenant), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem),
              (status = 409, description = "Conflicts with the current state", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn create_tenant(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    body: JsonBody<CreateTenant>,
) -> ApiResult<Response> {
    let (status, value) = idempotent(
        &state,
        &auth,
        "POST /tenants",
        key,
        &body.hash,
        StatusCode::CREATED,
        async |tx| service::tenants::create(&state.ctx, tx, &auth.0, body.value, rid.0.as_deref()).await,
    )
    .await
    .map_err(|e| e.with_request_id(rid.0.clone()))?;
    Ok((status, Json(value)).into_response())
}

/// Answers a malformed query string with 422 naming the query.
fn query<T>(
    query: Result<Query<T>, axum::extract::rejection::QueryRejection>,
    rid: &RequestId,
) -> ApiResult<T> {
    query.map(|Query(q)| q).map_err(|e| {
        ApiError::invalid(vec![FieldError::new("query", e.body_text())]).with_request_id(rid.0.clone())
    })
}

/// Page and filters of the tenant list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TenantListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only tenants whose slug starts with this.
    pub prefix: Option<String>,
    /// Only suspended (`true`) or not suspended (`false`) tenants.
    pub suspended: Option<bool>,
}

/// Lists tenants, oldest first, with cursor pagination (platform admin).
#[utoipa::path(get, path = "/tenants", tag = "tenants", security(("bearer" = [])), params(TenantListParams),
    responses((status = 200, description = "OK", body = TenantPage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_tenants(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    params: Result<Query<TenantListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<TenantPage>> {
    let p = query(params, &rid)?;
    let filter = service::tenants::ListFilter {
        prefix: p.prefix,
        suspended: p.suspended,
        cursor: p.cursor,
        limit: p.limit,
    };
    with_request_id(service::tenants::page(&state.ctx, &auth.0, filter).await, &rid).map(Json)
}

/// Options of a tenant delete.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteTenantParams {
    /// Also delete the tenant's control planes (each through its own delete operation); without it, a
    /// tenant that has any is refused with 409.
    pub cascade: Option<bool>,
}

/// Deletes a tenant (platform admin). Without control planes: 204, gone at once with its tokens, keys,
/// quotas and audit log. With some and `cascade=true`: 202, the tenant is `deleting` (its tokens are
/// refused), each control plane gets its delete operation, and the tenant is removed when the last one is
/// gone (`GET` at `Location` then answers 404). With some and no `cascade`: 409 naming how many.
#[utoipa::path(delete, path = "/tenants/{tenant}", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), DeleteTenantParams),
    responses((status = 202, description = "Accepted: the control planes are being deleted, and the tenant with the last one", body = TenantDeletion,
               headers(("Location" = String, description = "The tenant: `/api/v1/tenants/{tenant}` (404 once gone)"))),
              (status = 204, description = "Deleted"), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The tenant still has control planes and `cascade` is not set; the detail says how many", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn delete_tenant(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    params: Result<Query<DeleteTenantParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let p = query(params, &rid)?;
    let cascade = p.cascade.unwrap_or(false);
    let done = with_request_id(
        service::tenants::delete(&state.ctx, &auth.0, &tenant, cascade, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok(match done {
        service::tenants::Deleted::Gone => StatusCode::NO_CONTENT.into_response(),
        service::tenants::Deleted::Deleting(body) => {
            let location = HeaderValue::from_str(&format!("/api/v1/tenants/{}", body.tenant.slug))
                .map_err(|e| ApiError::internal(&e.to_string()))?;
            (StatusCode::ACCEPTED, [(header::LOCATION, location)], Json(body)).into_response()
        }
    })
}

/// Suspends a tenant (platform admin): from the next request on, every request with its tokens is refused
/// with `403 tenant-suspended` (reads too; GraphQL the same, and its open WebSocket connections close).
/// Its control planes keep running.
#[utoipa::path(post, path = "/tenants/{tenant}/suspend", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "OK", body = Tenant), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The tenant is being deleted", body = Problem)))]
pub async fn suspend_tenant(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
) -> ApiResult<Json<Tenant>> {
    with_request_id(
        service::tenants::set_suspended(&state.ctx, &auth.0, &tenant, true, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Resumes a suspended tenant (platform admin): its tokens work again.
#[utoipa::path(post, path = "/tenants/{tenant}/resume", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "OK", body = Tenant), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The tenant is being deleted", body = Problem)))]
pub async fn resume_tenant(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
) -> ApiResult<Json<Tenant>> {
    with_request_id(
        service::tenants::set_suspended(&state.ctx, &auth.0, &tenant, false, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Page and filters of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only this action, e.g. `control-plane.kubeconfig`.
    pub action: Option<String>,
    /// Only entries at or after this RFC 3339 time.
    pub since: Option<String>,
}

/// The tenant's audit log, newest first, with cursor pagination (tenant member or platform admin): who
/// (`role:subject(tokenId)`) did what to which target, kubeconfig downloads included.
#[utoipa::path(get, path = "/tenants/{tenant}/audit", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), AuditListParams),
    responses((status = 200, description = "OK", body = AuditPage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_audit(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    params: Result<Query<AuditListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<AuditPage>> {
    let p = query(params, &rid)?;
    let filter = service::audit::ListFilter {
        action: p.action,
        since: p.since,
        cursor: p.cursor,
        limit: p.limit,
    };
    with_request_id(
        service::audit::list(&state.ctx, &auth.0, &tenant, filter).await,
        &rid,
    )
    .map(Json)
}

/// One tenant.
#[utoipa::path(get, path = "/tenants/{tenant}", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "OK", body = Tenant), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_tenant(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
) -> ApiResult<Json<Tenant>> {
    with_request_id(service::tenants::get(&state.ctx, &auth.0, &tenant).await, &rid).map(Json)
}

/// The tenant's quotas and what counts against them (tenant viewer): live control planes (being deleted
/// ones count until they are gone) and live tokens (neither revoked nor expired).
#[utoipa::path(get, path = "/tenants/{tenant}/quotas", tag = "tenants", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "OK", body = Quotas), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_quotas(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
) -> ApiResult<Json<Quotas>> {
    with_request_id(service::quotas::get(&state.ctx, &auth.0, &tenant).await, &rid).map(Json)
}

/// Sets the tenant's quotas (platform admin); a limit left out or `null` is the server's default
/// (`--default-quota-control-planes`, `--default-quota-tokens`). A limit below what is in use removes
/// nothing: it stops new control planes or tokens (`403 quota-exceeded`) until usage is below it.
#[utoipa::path(put, path = "/tenants/{tenant}/quotas", tag = "tenants", security(("bearer" = [])), request_body = SetQuotas,
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "OK", body = Quotas), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem),
              (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn set_quotas(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    body: JsonBody<SetQuotas>,
) -> ApiResult<Json<Quotas>> {
    with_request_id(
        service::quotas::set(&state.ctx, &auth.0, &tenant, body.value, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Mints a token in the tenant (tenant admin). The JWT is shown only in this response
/// (`Cache-Control: no-store`).
#[utoipa::path(post, path = "/tenants/{tenant}/tokens", tag = "tokens", security(("bearer" = [])), request_body = MintToken,
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 201, description = "Created", body = MintedToken), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low, or the tenant's token quota is reached (`quota-exceeded`, naming `tokens`)", body = Problem),
              (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn mint_token(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    body: JsonBody<MintToken>,
) -> ApiResult<Response> {
    let minted = with_request_id(
        service::tokens::mint(&state.ctx, &auth.0, &tenant, body.value, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(minted),
    )
        .into_response())
}

/// Page and filters of the token list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TokenListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only revoked (`true`) or unrevoked (`false`) tokens.
    pub revoked: Option<bool>,
    /// Only tokens of this role.
    pub role: Option<Role>,
}

/// Lists the tenant's tokens, newest first, with cursor pagination (tenant admin).
#[utoipa::path(get, path = "/tenants/{tenant}/tokens", tag = "tokens", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), TokenListParams),
    responses((status = 200, description = "OK", body = TokenPage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_tokens(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    params: Result<Query<TokenListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<TokenPage>> {
    let p = query(params, &rid)?;
    let filter = service::tokens::ListFilter {
        revoked: p.revoked,
        role: p.role,
        cursor: p.cursor,
        limit: p.limit,
    };
    with_request_id(
        service::tokens::list(&state.ctx, &auth.0, &tenant, filter).await,
        &rid,
    )
    .map(Json)
}

/// Revokes a token (tenant admin); effective on its next request.
#[utoipa::path(delete, path = "/tenants/{tenant}/tokens/{token}", tag = "tokens", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("token" = String, Path, description = "Token id (jti)")),
    responses((status = 200, description = "OK", body = Token), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn revoke_token(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, token)): Path<(String, String)>,
) -> ApiResult<Json<Token>> {
    with_request_id(
        service::tokens::revoke(&state.ctx, &auth.0, &tenant, &token, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Rotates the tenant's signing key (tenant admin); old tokens stay valid until they expire.
#[utoipa::path(post, path = "/tenants/{tenant}/signing-keys/rotate", tag = "tokens", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug")),
    responses((status = 200, description = "The new key id", body = Object), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The tenant has as many live signing keys as allowed", body = Problem)))]
pub async fn rotate_signing_key(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let kid = with_request_id(
        service::tokens::rotate_signing_key(&state.ctx, &auth.0, &tenant, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok(Json(serde_json::json!({ "kid": kid })))
}

/// Requests a control plane (tenant member): 202 with the operation that creates it.
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes", tag = "control-planes", security(("bearer" = [])),
    request_body = CreateControlPlane,
    params(("tenant" = String, Path, description = "Tenant slug"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first response for the same body")),
    responses((status = 202, description = "Accepted: the operation carries the change to the cluster", body = Accepted), (status = 400, description = "Malformed JSON", body = Problem), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low, or the tenant's control-plane quota is reached (`quota-exceeded`, naming `controlPlanes`)", body = Problem),
              (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem), (status = 413, description = "The body is too large", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn create_control_plane(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    Path(tenant): Path<String>,
    body: JsonBody<CreateControlPlane>,
) -> ApiResult<Response> {
    let route = format!("POST /tenants/{tenant}/control-planes");
    let request = idempotency::Request {
        route: &route,
        key: key.0.as_deref(),
        request_hash: &body.hash,
        status: StatusCode::ACCEPTED.as_u16(),
    };
    let (ctx, who) = (&state.ctx, &auth.0);
    // The DataStore reservation comes after the stored answer, last before the commit.
    let outcome = with_request_id(
        idempotency::run_then(
            ctx,
            who,
            request,
            async |tx| {
                service::control_planes::create_unreserved(
                    ctx,
                    tx,
                    who,
                    &tenant,
                    body.value,
                    rid.0.as_deref(),
                )
                .await
            },
            async |tx, pending| service::control_planes::reserve_created(ctx, tx, who, pending).await,
        )
        .await,
        &rid,
    )?;
    Ok(accepted_response(
        &tenant,
        replay_status(&outcome, StatusCode::ACCEPTED),
        outcome.body,
    ))
}

/// Filters of the control-plane list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only this phase.
    pub status: Option<String>,
    /// Only this Kubernetes version.
    pub version: Option<String>,
    /// Only control planes with this label, `key=value`.
    pub label: Option<String>,
}

/// Lists the tenant's control planes, oldest first, with cursor pagination.
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ListParams),
    responses((status = 200, description = "OK", body = ControlPlanePage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_control_planes(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<ControlPlanePage>> {
    let Query(params) = query.map_err(|e| {
        ApiError::invalid(vec![FieldError::new("query", e.body_text())]).with_request_id(rid.0.clone())
    })?;
    let filter = ListFilter {
        status: params.status,
        version: params.version,
        labels: params.label.into_iter().collect(),
        cursor: params.cursor,
        limit: params.limit,
    };
    with_request_id(
        service::control_planes::list(&state.ctx, &auth.0, &tenant, filter).await,
        &rid,
    )
    .map(Json)
}

/// One control plane; the `ETag` header carries its generation.
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 200, description = "OK", body = ControlPlane), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_control_plane(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let cp = with_request_id(
        service::control_planes::get(&state.ctx, &auth.0, &tenant, &id).await,
        &rid,
    )?;
    let etag = HeaderValue::from_str(&cp.etag()).map_err(|e| ApiError::internal(&e.to_string()))?;
    Ok(([(header::ETAG, etag)], Json(cp)).into_response())
}

/// Changes version, replicas or labels (tenant member); `If-Match` guards against lost updates.
#[utoipa::path(patch, path = "/tenants/{tenant}/control-planes/{id}", tag = "control-planes", security(("bearer" = [])),
    request_body = UpdateControlPlane,
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("If-Match" = Option<String>, Header, description = "The ETag the change is based on"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first response for the same body")),
    responses((status = 202, description = "Accepted: the operation carries the change to the cluster", body = Accepted), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem),
              (status = 412, description = "If-Match does not match the current ETag", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn update_control_plane(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    headers: HeaderMap,
    Path((tenant, id)): Path<(String, String)>,
    body: JsonBody<UpdateControlPlane>,
) -> ApiResult<Response> {
    let if_match = headers
        .get(header::IF_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let route = format!("PATCH /tenants/{tenant}/control-planes/{id}");
    let (status, value) = idempotent(
        &state,
        &auth,
        &route,
        key,
        &body.hash,
        StatusCode::ACCEPTED,
        async |tx| {
            service::control_planes::update(
                &state.ctx,
                tx,
                &auth.0,
                &tenant,
                &id,
                body.value,
                if_match.as_deref(),
                rid.0.as_deref(),
            )
            .await
        },
    )
    .await
    .map_err(|e| e.with_request_id(rid.0.clone()))?;
    Ok(accepted_response(&tenant, status, value))
}

/// Deletes a control plane (tenant admin): 202 with the delete operation.
#[utoipa::path(delete, path = "/tenants/{tenant}/control-planes/{id}", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first response")),
    responses((status = 202, description = "Accepted: the operation carries the change to the cluster", body = Accepted), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn delete_control_plane(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let route = format!("DELETE /tenants/{tenant}/control-planes/{id}");
    let (status, value) = idempotent(
        &state,
        &auth,
        &route,
        key,
        &[],
        StatusCode::ACCEPTED,
        async |tx| {
            service::control_planes::delete(&state.ctx, tx, &auth.0, &tenant, &id, rid.0.as_deref()).await
        },
    )
    .await
    .map_err(|e| e.with_request_id(rid.0.clone()))?;
    Ok(accepted_response(&tenant, status, value))
}

/// The kubeconfig of a control plane that has served (tenant viewer or above); 409 until then, or when
/// this server has no credential issuer. It holds the cluster's address and CA and no secret at all:
/// its user runs `tenantplane credential` (a client-go exec plugin), which exchanges the caller's
/// Tenantplane token for a short-lived credential (`POST …/credentials`). Its cluster, user and current
/// context are all named `tenantplane_<tenant>_<control plane name>`, so kubeconfigs of several control
/// planes merge. Audited as `control-plane.kubeconfig`.
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}/kubeconfig", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 200, description = "kubeconfig YAML", content_type = "application/yaml", body = String),
              (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem), (status = 503, description = "Unavailable", body = Problem)))]
pub async fn kubeconfig(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let content = with_request_id(
        service::control_planes::kubeconfig(&state.ctx, state.kube.as_ref(), &auth.0, &tenant, &id).await,
        &rid,
    )?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/yaml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        content,
    )
        .into_response())
}

/// Exchanges the caller's Tenantplane token for a short-lived credential of one tenant cluster (tenant
/// viewer or above): an ES256 JWT whose audience is this control plane alone, carrying the caller's
/// subject and role, which the tenant API server maps to `tenantplane:<subject>` in group
/// `tenantplane:admins`, `tenantplane:members` or `tenantplane:viewers` (bound to `cluster-admin`,
/// `edit` and `view`). Revoking the caller's token stops new credentials at once; a credential already
/// handed out lasts until its expiry. Audited as `control-plane.credential` (never the token).
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes/{id}/credentials", tag = "control-planes", security(("bearer" = [])),
    request_body = CreateCredential,
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 201, description = "Minted; the only time the token is shown", body = ClusterCredential),
              (status = 400, description = "Malformed JSON", body = Problem), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "This server has no credential issuer", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem),
              (status = 503, description = "Unavailable", body = Problem)))]
pub async fn create_credential(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
    body: JsonBody<CreateCredential>,
) -> ApiResult<Response> {
    let credential = with_request_id(
        service::control_planes::credential(&state.ctx, &auth.0, &tenant, &id, body.value).await,
        &rid,
    )?;
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(credential),
    )
        .into_response())
}

/// The `system:masters` admin kubeconfig of a control plane, for break-glass (platform admin only):
/// a client certificate that no Tenantplane token revocation stops. Audited as
/// `control-plane.break-glass-kubeconfig`. Tenants use `…/kubeconfig` instead.
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}/admin-kubeconfig", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 200, description = "kubeconfig YAML with a client key", content_type = "application/yaml", body = String),
              (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "Not a platform admin", body = Problem),
              (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem), (status = 503, description = "Unavailable", body = Problem)))]
pub async fn admin_kubeconfig(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let content = with_request_id(
        service::control_planes::break_glass(&state.ctx, state.kube.as_ref(), &auth.0, &tenant, &id).await,
        &rid,
    )?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/yaml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        content,
    )
        .into_response())
}

/// Creates a node join token (tenant admin): a kubeadm bootstrap token in the control plane's tenant
/// cluster (`kube-system/bootstrap-token-<id>`, usages authentication and signing, group
/// `system:bootstrappers:kubeadm:default-node-token`), recorded without its secret half.
///
/// The answer comes once the token is usable: the tenant's bootstrapsigner has signed
/// `kube-public/cluster-info` with it and the tenant API server authenticates it, so `joinCommand` works
/// at once. If that does not happen within 30 seconds, the Secret is deleted again and the answer is
/// 503 with `Retry-After` (nothing is left behind; retry). 409 until the control plane has served (as
/// for its kubeconfig), and while it has 100 live tokens (revoke one, or wait for one to expire). The token is shown only in this answer (`Cache-Control: no-store`);
/// `Idempotency-Key` is not supported here, because a replay would have to store the secret: a retried
/// request makes another token.
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes/{id}/join-tokens", tag = "join-tokens", security(("bearer" = [])),
    request_body = CreateJoinToken,
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 201, description = "Created and usable; the only time the token is shown", body = CreatedJoinToken),
              (status = 400, description = "Malformed JSON", body = Problem), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The control plane has not served yet", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem),
              (status = 503, description = "The tenant cluster did not answer or did not make the token usable in time; nothing was created, retry after `Retry-After` seconds", body = Problem)))]
pub async fn create_join_token(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
    body: JsonBody<CreateJoinToken>,
) -> ApiResult<Response> {
    let created = with_request_id(
        service::join_tokens::create(
            &state.ctx,
            state.kube.as_ref(),
            &auth.0,
            &tenant,
            &id,
            body.value,
            rid.0.as_deref(),
        )
        .await,
        &rid,
    )?;
    Ok((
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(created),
    )
        .into_response())
}

/// The control plane's node join tokens that are neither revoked nor expired, oldest first (tenant
/// admin): never their secret half. Read from Tenantplane's record, so it answers while the tenant
/// cluster sleeps; a token's Secret deleted in the tenant cluster by other means stays listed until it
/// expires or is revoked here.
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}/join-tokens", tag = "join-tokens", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 200, description = "OK", body = JoinTokenList), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn list_join_tokens(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Json<JoinTokenList>> {
    with_request_id(
        service::join_tokens::list(&state.ctx, &auth.0, &tenant, &id).await,
        &rid,
    )
    .map(Json)
}

/// Revokes a node join token (tenant admin): deletes its Secret in the tenant cluster (the API server
/// stops authenticating it) and waits up to 30 seconds for its signature to leave `cluster-info`, so
/// `kubeadm join` with it fails once this answers. 404 for an unknown or already revoked token; an
/// expired one is still removed.
#[utoipa::path(delete, path = "/tenants/{tenant}/control-planes/{id}/join-tokens/{tokenId}", tag = "join-tokens", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("tokenId" = String, Path, description = "The token's public id (the part before the dot)")),
    responses((status = 204, description = "Revoked"), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The control plane has not served yet", body = Problem),
              (status = 503, description = "The tenant cluster did not answer; nothing was changed, retry after `Retry-After` seconds", body = Problem)))]
pub async fn revoke_join_token(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id, token_id)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    with_request_id(
        service::join_tokens::revoke(
            &state.ctx,
            state.kube.as_ref(),
            &auth.0,
            &tenant,
            &id,
            &token_id,
            rid.0.as_deref(),
        )
        .await,
        &rid,
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds a JWT authenticator (a tenant's own identity provider) to a control plane (tenant admin): its
/// tenant API server trusts that issuer too, after Tenantplane's, once it reloads its configuration (no
/// restart; within about a minute). The body is the API server's own `JWTAuthenticator`
/// (`apiserver.config.k8s.io/v1`). Refused with 422 naming the field: a non-https URL, CEL that does
/// not parse or reads anything but `claims` (`user` in userValidationRules), a `system:` (or, for users,
/// `tenantplane:`) prefix, a bad CA bundle. 409 for an issuer the control plane already trusts, or
/// beyond 15 authenticators. Starts `pending`; `active` once the API server runs it.
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes/{id}/authenticators", tag = "authenticators", security(("bearer" = [])),
    request_body = crate::k8s::crd::JwtAuthenticator,
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 201, description = "Added; pending until the tenant API server loads it", body = Authenticator),
              (status = 400, description = "Malformed JSON", body = Problem), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The issuer is trusted already, or the control plane has 15 authenticators", body = Problem),
              (status = 422, description = "Invalid input; the problem names each field", body = Problem), (status = 503, description = "Unavailable", body = Problem)))]
pub async fn create_authenticator(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
    body: JsonBody<crate::k8s::crd::JwtAuthenticator>,
) -> ApiResult<(StatusCode, Json<Authenticator>)> {
    with_request_id(
        service::authenticators::create(&state.ctx, &auth.0, &tenant, &id, body.value).await,
        &rid,
    )
    .map(|a| (StatusCode::CREATED, Json(a)))
}

/// A control plane's authenticators, oldest first, each `pending`, `active` or `failed` as its tenant
/// API server reports (tenant admin).
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}/authenticators", tag = "authenticators", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name")),
    responses((status = 200, description = "OK", body = AuthenticatorList), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn list_authenticators(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
) -> ApiResult<Json<AuthenticatorList>> {
    with_request_id(
        service::authenticators::list(&state.ctx, &auth.0, &tenant, &id).await,
        &rid,
    )
    .map(Json)
}

/// One authenticator of a control plane (tenant admin).
#[utoipa::path(get, path = "/tenants/{tenant}/control-planes/{id}/authenticators/{authenticatorId}", tag = "authenticators", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("authenticatorId" = String, Path, description = "The authenticator's id")),
    responses((status = 200, description = "OK", body = Authenticator), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_authenticator(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id, authenticator)): Path<(String, String, String)>,
) -> ApiResult<Json<Authenticator>> {
    let result = match uuid::Uuid::parse_str(&authenticator) {
        Ok(aid) => service::authenticators::get(&state.ctx, &auth.0, &tenant, &id, aid).await,
        Err(_) => service::authenticators::list(&state.ctx, &auth.0, &tenant, &id)
            .await
            .and(Err(ServiceError::NotFound("authenticator"))),
    };
    with_request_id(result, &rid).map(Json)
}

/// Removes an authenticator (tenant admin): its tokens stop working once the tenant API server reloads
/// its configuration (no restart; within about a minute). Audited.
#[utoipa::path(delete, path = "/tenants/{tenant}/control-planes/{id}/authenticators/{authenticatorId}", tag = "authenticators", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("authenticatorId" = String, Path, description = "The authenticator's id")),
    responses((status = 204, description = "Removed"), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn delete_authenticator(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id, authenticator)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let result = match uuid::Uuid::parse_str(&authenticator) {
        Ok(aid) => service::authenticators::delete(&state.ctx, &auth.0, &tenant, &id, aid).await,
        Err(_) => service::authenticators::list(&state.ctx, &auth.0, &tenant, &id)
            .await
            .and(Err(ServiceError::NotFound("authenticator"))),
    };
    with_request_id(result, &rid)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Long poll of one operation.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// Wait up to this many seconds (at most 60) for the operation to change (a new stage, its state) or
    /// end; a done operation answers at once. 0 or absent: answer at once.
    #[serde(rename = "waitSeconds")]
    #[param(rename = "waitSeconds")]
    pub wait_seconds: Option<u64>,
}

/// One operation: its state, `done`, the stages it reached with their times, and why it failed. A create
/// or update succeeds when the control plane is Ready at the operation's generation (or a later one),
/// and fails with the controller's reason on a permanent error, or at its deadline; a delete succeeds
/// when the control plane and its datastore space are gone. `waitSeconds` makes it a long poll.
#[utoipa::path(get, path = "/tenants/{tenant}/operations/{id}", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Operation id"), WaitParams),
    responses((status = 200, description = "OK", body = Operation), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn get_operation(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path((tenant, id)): Path<(String, String)>,
    query: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Operation>> {
    let Query(params) = query.map_err(|e| {
        ApiError::invalid(vec![FieldError::new("query", e.body_text())]).with_request_id(rid.0.clone())
    })?;
    with_request_id(
        service::operations::get(&state.ctx, &state.hub, &auth.0, &tenant, &id, params.wait_seconds).await,
        &rid,
    )
    .map(Json)
}

/// Filters of the operation list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OperationListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only this control plane's operations (its id).
    #[serde(rename = "controlPlane")]
    #[param(rename = "controlPlane")]
    pub control_plane: Option<String>,
    /// Only operations in this state.
    pub state: Option<OperationState>,
    /// Only operations of this kind.
    pub kind: Option<OperationKind>,
}

/// Lists the tenant's operations, newest first, with cursor pagination (tenant viewer).
#[utoipa::path(get, path = "/tenants/{tenant}/operations", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), OperationListParams),
    responses((status = 200, description = "OK", body = OperationPage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_operations(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(tenant): Path<String>,
    query: Result<Query<OperationListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<OperationPage>> {
    let Query(params) = query.map_err(|e| {
        ApiError::invalid(vec![FieldError::new("query", e.body_text())]).with_request_id(rid.0.clone())
    })?;
    let filter = service::operations::ListFilter {
        control_plane: params.control_plane,
        state: params.state,
        kind: params.kind,
        cursor: params.cursor,
        limit: params.limit,
    };
    with_request_id(
        service::operations::list(&state.ctx, &auth.0, &tenant, filter).await,
        &rid,
    )
    .map(Json)
}

/// Creates a pool (platform admin).
#[utoipa::path(post, path = "/pools", tag = "datastores", security(("bearer" = [])), request_body = CreatePool,
    responses((status = 201, description = "Created", body = Pool), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn create_pool(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    body: JsonBody<CreatePool>,
) -> ApiResult<(StatusCode, Json<Pool>)> {
    let pool = with_request_id(
        service::datastores::create_pool(&state.ctx, &auth.0, body.value, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok((StatusCode::CREATED, Json(pool)))
}

/// A page of a list without filters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
}

/// Lists pools, oldest first, with cursor pagination (platform admin).
#[utoipa::path(get, path = "/pools", tag = "datastores", security(("bearer" = [])), params(PageParams),
    responses((status = 200, description = "OK", body = PoolPage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_pools(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    params: Result<Query<PageParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<PoolPage>> {
    let p = query(params, &rid)?;
    with_request_id(
        service::datastores::pool_page(&state.ctx, &auth.0, p.limit, p.cursor.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Changes a pool's policy or labels (platform admin); the next placements use them.
#[utoipa::path(patch, path = "/pools/{name}", tag = "datastores", security(("bearer" = [])), request_body = UpdatePool,
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 200, description = "OK", body = Pool), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn update_pool(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
    body: JsonBody<UpdatePool>,
) -> ApiResult<Json<Pool>> {
    with_request_id(
        service::datastores::update_pool(&state.ctx, &auth.0, &name, body.value, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Deletes a pool without DataStores (platform admin); 409 `in-use` naming its DataStores otherwise.
#[utoipa::path(delete, path = "/pools/{name}", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 204, description = "Deleted"), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The pool still has DataStores (`in-use`; `usedBy` counts and names them)", body = Problem)))]
pub async fn delete_pool(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    with_request_id(
        service::datastores::delete_pool(&state.ctx, &auth.0, &name, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// One pool (platform admin).
#[utoipa::path(get, path = "/pools/{name}", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 200, description = "OK", body = Pool), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_pool(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<Json<Pool>> {
    with_request_id(service::datastores::pool(&state.ctx, &auth.0, &name).await, &rid).map(Json)
}

/// Registers a DataStore (platform admin); credentials are Secret references only.
#[utoipa::path(post, path = "/datastores", tag = "datastores", security(("bearer" = [])), request_body = CreateDataStore,
    responses((status = 201, description = "Created", body = DataStore), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn create_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    body: JsonBody<CreateDataStore>,
) -> ApiResult<(StatusCode, Json<DataStore>)> {
    let ds = with_request_id(
        service::datastores::create(&state.ctx, &auth.0, body.value, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok((StatusCode::CREATED, Json(ds)))
}

/// Page and filters of the DataStore list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DataStoreListParams {
    /// Page size, 1–100 (default 20).
    pub limit: Option<i64>,
    /// Cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
    /// Only DataStores in this pool.
    pub pool: Option<String>,
    /// Only this driver: etcd, MySQL, PostgreSQL or NATS.
    pub driver: Option<String>,
    /// Only cordoned (`true`) or uncordoned (`false`) DataStores.
    pub cordoned: Option<bool>,
}

/// Lists DataStores, oldest first, with cursor pagination (platform admin).
#[utoipa::path(get, path = "/datastores", tag = "datastores", security(("bearer" = [])), params(DataStoreListParams),
    responses((status = 200, description = "OK", body = DataStorePage), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn list_datastores(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    params: Result<Query<DataStoreListParams>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<DataStorePage>> {
    let p = query(params, &rid)?;
    let filter = service::datastores::ListFilter {
        pool: p.pool,
        driver: p.driver,
        cordoned: p.cordoned,
        cursor: p.cursor,
        limit: p.limit,
    };
    with_request_id(service::datastores::page(&state.ctx, &auth.0, filter).await, &rid).map(Json)
}

/// Changes a DataStore's pool, labels or capacities (platform admin); placed tenants stay where they are.
#[utoipa::path(patch, path = "/datastores/{name}", tag = "datastores", security(("bearer" = [])), request_body = UpdateDataStore,
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 200, description = "OK", body = DataStore), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The pool named does not exist, or a NATS DataStore would take more than 1 tenant (the problem names the field)", body = Problem), (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn update_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
    body: JsonBody<UpdateDataStore>,
) -> ApiResult<Json<DataStore>> {
    with_request_id(
        service::datastores::update(&state.ctx, &auth.0, &name, body.value, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Deletes a DataStore no control plane is placed on (platform admin); 409 `in-use` naming them
/// (`tenant/name`) otherwise. Only Tenantplane's record goes: the Kubernetes `DataStore` object is the
/// operator's, as it is on create.
#[utoipa::path(delete, path = "/datastores/{name}", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 204, description = "Deleted"), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "Control planes are placed on it (`in-use`; `usedBy` counts and names them)", body = Problem)))]
pub async fn delete_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    with_request_id(
        service::datastores::delete(&state.ctx, &auth.0, &name, rid.0.as_deref()).await,
        &rid,
    )?;
    Ok(StatusCode::NO_CONTENT)
}

/// One DataStore (platform admin).
#[utoipa::path(get, path = "/datastores/{name}", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 200, description = "OK", body = DataStore), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<Json<DataStore>> {
    with_request_id(service::datastores::get(&state.ctx, &auth.0, &name).await, &rid).map(Json)
}

/// Cordons a DataStore: it takes no new tenants (platform admin).
#[utoipa::path(post, path = "/datastores/{name}/cordon", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 200, description = "OK", body = DataStore), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn cordon_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<Json<DataStore>> {
    with_request_id(
        service::datastores::set_cordoned(&state.ctx, &auth.0, &name, true, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Uncordons a DataStore (platform admin).
#[utoipa::path(post, path = "/datastores/{name}/uncordon", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 200, description = "OK", body = DataStore), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem), (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn uncordon_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<Json<DataStore>> {
    with_request_id(
        service::datastores::set_cordoned(&state.ctx, &auth.0, &name, false, rid.0.as_deref()).await,
        &rid,
    )
    .map(Json)
}

/// Where a control plane would be placed, with every candidate's score or rejection; reserves nothing
/// (platform admin).
#[utoipa::path(post, path = "/placements:simulate", tag = "datastores", security(("bearer" = [])), request_body = SimulateRequest,
    responses((status = 200, description = "OK", body = Object), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 409, description = "Conflicts with the current state", body = Problem),
              (status = 422, description = "Invalid input; the problem names each field", body = Problem)))]
pub async fn simulate_placement(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    body: JsonBody<SimulateRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    let decision = with_request_id(
        service::placement::simulate(&state.ctx, &auth.0, body.value).await,
        &rid,
    )?;
    Ok(Json(
        serde_json::to_value(decision).map_err(|e| ApiError::internal(&e.to_string()))?,
    ))
}

/// The moves that would empty a DataStore under its pool's policy (a plan only; platform admin).
#[utoipa::path(get, path = "/datastores/{name}/drain-plan", tag = "datastores", security(("bearer" = [])),
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 200, description = "OK", body = [DrainMove]), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "The DataStore holds tenants but is in no pool the engine can plan in", body = Problem)))]
pub async fn drain_plan(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<DrainMove>>> {
    with_request_id(
        service::placement::drain_plan(&state.ctx, &auth.0, &name).await,
        &rid,
    )
    .map(Json)
}
