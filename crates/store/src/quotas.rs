//! Tenant quotas and what counts against them.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// A tenant's own quotas (`None`: the server's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set {
    /// Live control planes.
    pub control_planes: Option<i32>,
    /// Live tokens.
    pub tokens: Option<i32>,
}

/// The tenant's quotas, locking its row until the transaction ends: creates and mints of one tenant
/// count and insert one at a time, so two at once cannot both take the last place. `no key update`: rows
/// that reference the tenant (an insert's foreign-key check) are not held up by it. Also returns the
/// tenant's state as of the lock (a tenant delete holds the same row lock).
pub async fn lock(tx: &mut PgConnection, tenant: Uuid) -> Result<(Set, String), StoreError> {
    let row = sqlx::query!(
        "select quota_control_planes, quota_tokens, state from tenants where id = $1 for no key update",
        tenant
    )
    .fetch_one(&mut *tx)
    .await?;
    let set = Set {
        control_planes: row.quota_control_planes,
        tokens: row.quota_tokens,
    };
    Ok((set, row.state))
}

/// The tenant's quotas.
pub async fn get(db: impl PgExecutor<'_>, tenant: Uuid) -> Result<Set, StoreError> {
    let row = sqlx::query!(
        "select quota_control_planes, quota_tokens from tenants where id = $1",
        tenant
    )
    .fetch_one(db)
    .await?;
    Ok(Set {
        control_planes: row.quota_control_planes,
        tokens: row.quota_tokens,
    })
}

/// Sets the tenant's quotas.
pub async fn set(db: impl PgExecutor<'_>, tenant: Uuid, quotas: Set) -> Result<(), StoreError> {
    sqlx::query!(
        "update tenants set quota_control_planes = $2, quota_tokens = $3 where id = $1",
        tenant,
        quotas.control_planes,
        quotas.tokens
    )
    .execute(db)
    .await?;
    Ok(())
}

/// What counts against the quotas now: `(live control planes, live tokens)`.
pub async fn used(db: impl PgExecutor<'_>, tenant: Uuid) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query!(
        r#"select (select count(*) from control_planes where tenant_id = $1 and deleted_at is null) as "control_planes!",
                  (select count(*) from api_tokens where tenant_id = $1 and revoked_at is null and expires_at > now()) as "tokens!""#,
        tenant
    )
    .fetch_one(db)
    .await?;
    Ok((row.control_planes, row.tokens))
}
