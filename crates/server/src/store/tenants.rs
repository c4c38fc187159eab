//! Tenants.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
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
