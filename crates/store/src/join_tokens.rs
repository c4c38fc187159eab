//! Node join tokens (kubeadm bootstrap tokens): the record of each one a tenant asked for. Only the
//! token's public id is stored; its secret half never reaches PostgreSQL.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::StoreError;

/// A join token's record (never the secret half).
#[derive(Debug, Clone, PartialEq)]
pub struct JoinTokenRow {
    /// Row id.
    pub id: Uuid,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Control plane.
    pub control_plane_id: Uuid,
    /// The token's public id (`[a-z0-9]{6}`).
    pub token_id: String,
    /// Description.
    pub description: Option<String>,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Who asked for it (`role:subject(jti)`).
    pub created_by: String,
    /// Revoked (or never usable) at.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a new join token's record holds.
#[derive(Debug, Clone)]
pub struct NewJoinToken<'a> {
    /// Tenant.
    pub tenant: Uuid,
    /// Control plane.
    pub control_plane: Uuid,
    /// The token's public id.
    pub token_id: &'a str,
    /// Description.
    pub description: Option<&'a str>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Who asks for it.
    pub created_by: &'a str,
}

/// Records a join token before it is created in the tenant cluster, so that every token that may exist
/// there is on record. A clash of its id with an earlier token of the control plane is a
/// [`StoreError::Conflict`].
pub async fn insert(db: impl PgExecutor<'_>, new: &NewJoinToken<'_>) -> Result<JoinTokenRow, StoreError> {
    Ok(sqlx::query_as!(
        JoinTokenRow,
        "insert into join_tokens (id, tenant_id, control_plane_id, token_id, description, created_at, expires_at, created_by)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         returning id, tenant_id, control_plane_id, token_id, description, expires_at, created_at, created_by, revoked_at",
        Uuid::new_v4(),
        new.tenant,
        new.control_plane,
        new.token_id,
        new.description,
        new.created_at,
        new.expires_at,
        new.created_by
    )
    .fetch_one(db)
    .await?)
}

/// How many of the control plane's tokens are neither revoked nor expired.
pub async fn count_live(db: impl PgExecutor<'_>, control_plane: Uuid) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"select count(*) as "n!" from join_tokens
           where control_plane_id = $1 and revoked_at is null and expires_at > now()"#,
        control_plane
    )
    .fetch_one(db)
    .await?)
}

/// [`insert`], unless the control plane has `max` live tokens already (`Ok(None)`). The control plane's
/// row is locked for the count and the insert, so concurrent creates cannot pass the cap together.
pub async fn insert_capped(
    db: &sqlx::PgPool,
    new: &NewJoinToken<'_>,
    max: i64,
) -> Result<Option<JoinTokenRow>, StoreError> {
    let mut tx = db.begin().await?;
    sqlx::query!(
        "select id from control_planes where id = $1 for no key update",
        new.control_plane
    )
    .fetch_optional(&mut *tx)
    .await?;
    if count_live(&mut *tx, new.control_plane).await? >= max {
        return Ok(None);
    }
    let row = insert(&mut *tx, new).await?;
    tx.commit().await?;
    Ok(Some(row))
}

/// The control plane's tokens that are neither revoked nor expired, oldest first.
pub async fn live(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    control_plane: Uuid,
) -> Result<Vec<JoinTokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        JoinTokenRow,
        "select id, tenant_id, control_plane_id, token_id, description, expires_at, created_at, created_by, revoked_at
         from join_tokens
         where tenant_id = $1 and control_plane_id = $2 and revoked_at is null and expires_at > now()
         order by created_at, token_id",
        tenant,
        control_plane
    )
    .fetch_all(db)
    .await?)
}

/// An unrevoked token of the control plane (expired ones too: their Secret may still be in the tenant
/// cluster).
pub async fn unrevoked(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    control_plane: Uuid,
    token_id: &str,
) -> Result<Option<JoinTokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        JoinTokenRow,
        "select id, tenant_id, control_plane_id, token_id, description, expires_at, created_at, created_by, revoked_at
         from join_tokens
         where tenant_id = $1 and control_plane_id = $2 and token_id = $3 and revoked_at is null",
        tenant,
        control_plane,
        token_id
    )
    .fetch_optional(db)
    .await?)
}

/// Marks an unrevoked token revoked (a revocation, or a token that never became usable); returns the
/// row, or `None` when it was revoked already.
pub async fn revoke(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<JoinTokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        JoinTokenRow,
        "update join_tokens set revoked_at = now() where tenant_id = $1 and id = $2 and revoked_at is null
         returning id, tenant_id, control_plane_id, token_id, description, expires_at, created_at, created_by, revoked_at",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?)
}
