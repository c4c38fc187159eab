//! A tenant's own JWT authenticators of its control planes (identity providers the tenant
//! kube-apiserver trusts after Tenantplane's issuer).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// The unique index that keeps an issuer to one authenticator per control plane.
pub const ISSUER_KEY: &str = "authenticators_control_plane_id_issuer_url_key";

/// One authenticator.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthenticatorRow {
    /// Id.
    pub id: Uuid,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Control plane.
    pub control_plane_id: Uuid,
    /// `issuer.url`.
    pub issuer_url: String,
    /// The apiserver's JWTAuthenticator fields, as accepted.
    pub spec: serde_json::Value,
    /// Who added it (`role:subject(jti)`).
    pub created_by: String,
    /// Added.
    pub created_at: DateTime<Utc>,
}

/// Adds an authenticator; a second one for the same issuer is a conflict on [`ISSUER_KEY`].
pub async fn insert(db: impl PgExecutor<'_>, row: &AuthenticatorRow) -> Result<(), StoreError> {
    sqlx::query!(
        "insert into authenticators (id, tenant_id, control_plane_id, issuer_url, spec, created_by, created_at)
         values ($1, $2, $3, $4, $5, $6, $7)",
        row.id,
        row.tenant_id,
        row.control_plane_id,
        row.issuer_url,
        row.spec,
        row.created_by,
        row.created_at
    )
    .execute(db)
    .await?;
    Ok(())
}

/// The authenticators of control plane `cp` of `tenant`, oldest first (the order they are rendered in).
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    cp: Uuid,
) -> Result<Vec<AuthenticatorRow>, StoreError> {
    Ok(sqlx::query_as!(
        AuthenticatorRow,
        "select id, tenant_id, control_plane_id, issuer_url, spec, created_by, created_at from authenticators
         where tenant_id = $1 and control_plane_id = $2 order by created_at, id",
        tenant,
        cp
    )
    .fetch_all(db)
    .await?)
}

/// Removes authenticator `id` of control plane `cp`; whether it existed.
pub async fn delete(tx: &mut PgConnection, tenant: Uuid, cp: Uuid, id: Uuid) -> Result<bool, StoreError> {
    let done = sqlx::query!(
        "delete from authenticators where tenant_id = $1 and control_plane_id = $2 and id = $3",
        tenant,
        cp,
        id
    )
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Locks control plane `cp`'s row, so that counting and inserting its authenticators is atomic.
pub async fn lock_control_plane(tx: &mut PgConnection, tenant: Uuid, cp: Uuid) -> Result<(), StoreError> {
    sqlx::query!(
        "select id from control_planes where tenant_id = $1 and id = $2 for no key update",
        tenant,
        cp
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(())
}

/// Queues a re-render of control plane `cp`'s TenantControlPlane at its current generation (no operation).
pub async fn enqueue_render(tx: &mut PgConnection, tenant: Uuid, cp: Uuid) -> Result<(), StoreError> {
    sqlx::query!(
        "insert into outbox (tenant_id, control_plane_id, operation_id, kind, payload)
         select tenant_id, id, null, 'apply', jsonb_build_object('generation', generation)
         from control_planes where tenant_id = $1 and id = $2",
        tenant,
        cp
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
