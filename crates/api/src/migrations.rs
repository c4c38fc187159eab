//! REST handlers of live migrations between DataStores: thin wrappers over `tenantplane_service::migrations`.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};

use super::{
    AppState,
    error::{ApiError, Problem},
    extract::{Auth, IdempotencyKey, JsonBody, RequestId},
    rest::{accepted_response, idempotent},
};
use tenantplane_service::{self as service, migrations::MigrateControlPlane, model::Accepted};

/// Starts moving a control plane, live, to another DataStore of its driver (platform admin; etcd, or kine on PostgreSQL or MySQL): 202
/// with the `migrate` operation, whose stages are the migration's (`copying`, `catchingUp`, `frozen`,
/// `switching`, `verifying`, `done`). The target's capacity is reserved now; the source's is released when
/// the operation succeeds, the target's when it fails.
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes/{id}/migrate", tag = "control-planes", security(("bearer" = [])),
    request_body = MigrateControlPlane,
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first response for the same body")),
    responses((status = 202, description = "Accepted: the operation carries the migration", body = Accepted), (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "Conflicts with the current state (an open operation; the target not ready, cordoned or full)", body = Problem),
              (status = 422, description = "Invalid input (no such DataStore, the current one, another driver, NATS, or `overrides: move` when the re-placed override spaces would split or merge); the problem names the field", body = Problem)))]
pub async fn migrate_control_plane(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    Path((tenant, id)): Path<(String, String)>,
    body: JsonBody<MigrateControlPlane>,
) -> Result<Response, ApiError> {
    let route = format!("POST /tenants/{tenant}/control-planes/{id}/migrate");
    let (status, value) = idempotent(
        &state,
        &auth,
        &route,
        key,
        &body.hash,
        StatusCode::ACCEPTED,
        async |tx| {
            service::migrations::start(
                &state.ctx,
                tx,
                &auth.0,
                (&tenant, &id),
                body.value,
                rid.0.as_deref(),
            )
            .await
        },
    )
    .await
    .map_err(|e| e.with_request_id(rid.0.clone()))?;
    Ok(accepted_response(&tenant, status, value))
}

/// Aborts a live migration before its switch (platform admin): the worker renders the source DataStore
/// again, the controller thaws it and removes the target space, and the `migrate` operation fails with
/// reason `MigrationAborted` (at once when copying had not started). 202 with that operation. Once the
/// migration reached `switching` the tenant serves from the target: 409 naming the stage.
#[utoipa::path(post, path = "/tenants/{tenant}/control-planes/{id}/migrate/abort", tag = "control-planes", security(("bearer" = [])),
    params(("tenant" = String, Path, description = "Tenant slug"), ("id" = String, Path, description = "Control-plane id or name"),
           ("Idempotency-Key" = Option<String>, Header, description = "Replays the first response")),
    responses((status = 202, description = "Accepted: the migration's operation, failing with `MigrationAborted` once unwound", body = Accepted),
              (status = 401, description = "Missing, invalid, expired or revoked token", body = Problem),
              (status = 403, description = "The caller's role is too low", body = Problem), (status = 404, description = "Not found, or not visible to the caller", body = Problem),
              (status = 409, description = "No open migration, or it reached `switching` (the problem names the stage)", body = Problem)))]
pub async fn abort_migration(
    State(state): State<AppState>,
    auth: Auth,
    rid: RequestId,
    key: IdempotencyKey,
    Path((tenant, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let route = format!("POST /tenants/{tenant}/control-planes/{id}/migrate/abort");
    let (status, value) = idempotent(
        &state,
        &auth,
        &route,
        key,
        &[],
        StatusCode::ACCEPTED,
        async |tx| service::migrations::abort(tx, &auth.0, (&tenant, &id), rid.0.as_deref()).await,
    )
    .await
    .map_err(|e| e.with_request_id(rid.0.clone()))?;
    Ok(accepted_response(&tenant, status, value))
}
