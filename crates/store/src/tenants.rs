//! Tenants.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// A tenant row.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRow {
    /// Id.
    pub id: Uuid,
    /// URL slug.
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Labels.
    pub labels: serde_json::Value,
    /// `active` or `suspended`.
    pub state: String,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// Inserts a tenant.
pub async fn insert(
    db: impl PgExecutor<'_>,
    slug: &str,
    display_name: &str,
    labels: &serde_json::Value,
) -> Result<TenantRow, StoreError> {
    Ok(sqlx::query_as!(
        TenantRow,
        "insert into tenants (id, slug, display_name, labels) values ($1, $2, $3, $4)
         returning id, slug, display_name, labels, state, created_at",
        Uuid::new_v4(),
        slug,
        display_name,
        labels
    )
    .fetch_one(db)
    .await?)
}

/// A tenant by slug.
pub async fn by_slug(db: impl PgExecutor<'_>, slug: &str) -> Result<Option<TenantRow>, StoreError> {
    if slug.contains('\0') {
        return Ok(None);
    }
    Ok(sqlx::query_as!(
        TenantRow,
        "select id, slug, display_name, labels, state, created_at from tenants where slug = $1",
        slug
    )
    .fetch_optional(db)
    .await?)
}

/// Every tenant, by slug.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<TenantRow>, StoreError> {
    Ok(sqlx::query_as!(
        TenantRow,
        "select id, slug, display_name, labels, state, created_at from tenants order by slug"
    )
    .fetch_all(db)
    .await?)
}

/// The slug of tenant `id`.
pub async fn slug_of(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar!("select slug from tenants where id = $1", id)
        .fetch_optional(db)
        .await?)
}

/// Filters and position of a tenant page.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only slugs starting with this.
    pub prefix: Option<String>,
    /// Only suspended (true) or not suspended (false) tenants.
    pub suspended: Option<bool>,
    /// After this `(created_at, id)`.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// A page of tenants ordered by `(created_at, id)`.
pub async fn page(db: impl PgExecutor<'_>, q: &ListQuery) -> Result<Vec<TenantRow>, StoreError> {
    let (after_ts, after_id) = q.after.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        TenantRow,
        "select id, slug, display_name, labels, state, created_at from tenants
         where ($1::text is null or left(slug, length($1)) = $1)
           and ($2::bool is null or (state = 'suspended') = $2)
           and ($3::timestamptz is null or (created_at, id) > ($3, $4::uuid))
         order by created_at, id
         limit $5",
        q.prefix,
        q.suspended,
        after_ts,
        after_id,
        q.limit
    )
    .fetch_all(db)
    .await?)
}

/// Tenant `slug`, its row locked until the transaction ends (lifecycle changes run one at a time).
pub async fn lock_by_slug(tx: &mut PgConnection, slug: &str) -> Result<Option<TenantRow>, StoreError> {
    if slug.contains('\0') {
        return Ok(None);
    }
    Ok(sqlx::query_as!(
        TenantRow,
        "select id, slug, display_name, labels, state, created_at from tenants where slug = $1 for update",
        slug
    )
    .fetch_optional(&mut *tx)
    .await?)
}

/// Sets the tenant's state; returns the row.
pub async fn set_state(db: impl PgExecutor<'_>, id: Uuid, state: &str) -> Result<TenantRow, StoreError> {
    Ok(sqlx::query_as!(
        TenantRow,
        "update tenants set state = $2, updated_at = now() where id = $1
         returning id, slug, display_name, labels, state, created_at",
        id,
        state
    )
    .fetch_one(db)
    .await?)
}

/// The ids of the tenant's live control planes (not yet gone from the cluster), oldest first.
pub async fn live_control_planes(db: impl PgExecutor<'_>, id: Uuid) -> Result<Vec<Uuid>, StoreError> {
    Ok(sqlx::query_scalar!(
        "select id from control_planes where tenant_id = $1 and deleted_at is null order by created_at, id",
        id
    )
    .fetch_all(db)
    .await?)
}

/// Removes the tenant row and, through the foreign keys, everything that belongs to it.
pub async fn remove(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), StoreError> {
    sqlx::query!("delete from tenants where id = $1", id)
        .execute(db)
        .await?;
    Ok(())
}

/// Removes a `deleting` tenant once its last control plane is gone; returns whether it did. Locks the
/// tenant row first, so of two last deletes finishing at once the later one sees the other's.
pub async fn remove_if_drained(tx: &mut PgConnection, id: Uuid) -> Result<bool, StoreError> {
    let state = sqlx::query_scalar!("select state from tenants where id = $1 for update", id)
        .fetch_optional(&mut *tx)
        .await?;
    if state.as_deref() != Some("deleting") || !live_control_planes(&mut *tx, id).await?.is_empty() {
        return Ok(false);
    }
    remove(&mut *tx, id).await?;
    Ok(true)
}

/// Announces the revocation of every unrevoked token of the tenant (`NOTIFY token_revoked`), so open
/// connections re-check them now (suspension, deletion).
pub async fn announce_tokens(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), StoreError> {
    sqlx::query!(
        "select pg_notify('token_revoked', jti::text) from api_tokens where tenant_id = $1 and revoked_at is null",
        id
    )
    .execute(db)
    .await?;
    Ok(())
}
