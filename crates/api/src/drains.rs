//! REST handlers of drains and rebalances (platform admin): thin wrappers over `tenantplane_service::drains`.

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};

use super::{
    AppState,
    error::{ApiError, Problem},
    extract::{Auth, JsonBody, RequestId},
    rest::with_request_id,
};
use tenantplane_service::{
    self as service,
    drains::{DrainDataStore, ParentOperation, RebalancePool},
};

/// 202 with the parent operation, `Location` naming it.
fn accepted(op: ParentOperation) -> Result<Response, ApiError> {
    let location = HeaderValue::from_str(&format!("/api/v1/operations/{}", op.id))
        .map_err(|e| ApiError::internal(&e.to_string()))?;
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)], Json(op)).into_response())
}

/// Drains a DataStore (platform admin): cordons it (as `POST …/cordon`), then moves every control plane
/// off it as the drain plan (`GET …/drain-plan`) says, as one `drain` operation whose children the worker
/// starts at most `concurrency` at a time: a live `migrate` per control plane using it as its primary, an
/// `update` re-placing the overrides (their data dropped) of one using it only for offloaded resources. A
/// move the plan cannot place, or a control plane already migrating, is a failed child with its reason;
/// the others go on. The body is optional.
#[utoipa::path(post, path = "/datastores/{name}/drain", tag = "datastores", security(("bearer" = [])),
    request_body = Option<DrainDataStore>,
    params(("name" = String, Path, description = "DataStore name")),
    responses((status = 202, description = "Accepted: the drain, `running` until every child has ended", body = ParentOperation,
               headers(("Location" = String, description = "The drain: `/api/v1/operations/{id}`"))),
              (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "A drain of this DataStore is open (the problem names `name`), or it holds tenants but is in no pool the engine can plan in", body = Problem),
              (status = 422, description = "Invalid input (`concurrency` out of 1–10, `overrides: move`: a drain drops override data), or a DataStore whose tenants cannot move live (kine, NATS; the problem names `name`)", body = Problem)))]
pub async fn drain_datastore(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
    body: Option<JsonBody<DrainDataStore>>,
) -> Result<Response, ApiError> {
    let input = body.map(|b| b.value).unwrap_or_default();
    let op = with_request_id(
        service::drains::drain(&state.ctx, &auth.0, &name, input, rid.0.as_deref()).await,
        &rid,
    )?;
    accepted(op)
}

/// Rebalances a `spread` pool (platform admin): plans primary moves from its fullest to its emptiest
/// DataStores until the spread imbalance (most minus fewest tenants on its ready, uncordoned DataStores of
/// one driver) is at most one tenant, and carries them out as one `rebalance` operation whose children
/// (live migrations) the worker starts at most `concurrency` at a time. A balanced pool answers a
/// rebalance that has already succeeded, without children. The body is optional.
#[utoipa::path(post, path = "/pools/{name}/rebalance", tag = "datastores", security(("bearer" = [])),
    request_body = Option<RebalancePool>,
    params(("name" = String, Path, description = "Pool name")),
    responses((status = 202, description = "Accepted: the rebalance, `running` until every child has ended", body = ParentOperation,
               headers(("Location" = String, description = "The rebalance: `/api/v1/operations/{id}`"))),
              (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "A rebalance of this pool is open, or the pool's policy is not `spread` (the problem names `name`)", body = Problem),
              (status = 422, description = "Invalid input (`concurrency` out of 1–10); the problem names the field", body = Problem)))]
pub async fn rebalance_pool(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(name): Path<String>,
    body: Option<JsonBody<RebalancePool>>,
) -> Result<Response, ApiError> {
    let input = body.map(|b| b.value).unwrap_or_default();
    let op = with_request_id(
        service::drains::rebalance(&state.ctx, &auth.0, &name, input, rid.0.as_deref()).await,
        &rid,
    )?;
    accepted(op)
}

/// One drain or rebalance (platform admin): its state, its children with their states and stages, and
/// counts per state. A child's own operation is also served to its tenant at
/// `/tenants/{tenant}/operations/{operationId}`.
#[utoipa::path(get, path = "/operations/{id}", tag = "datastores", security(("bearer" = [])),
    params(("id" = String, Path, description = "Operation id")),
    responses((status = 200, description = "OK", body = ParentOperation), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem)))]
pub async fn get_parent_operation(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    Path(id): Path<String>,
) -> Result<Json<ParentOperation>, ApiError> {
    with_request_id(service::drains::get(&state.ctx, &auth.0, &id).await, &rid).map(Json)
}
