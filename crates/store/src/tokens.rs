//! API tokens (the revocation list is the table itself).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// A token row (never the token itself).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    /// Token id.
    pub jti: Uuid,
    /// Tenant (None = platform admin).
    pub tenant_id: Option<Uuid>,
    /// Role.
    pub role: String,
    /// Description.
    pub description: String,
    /// Who minted it.
    pub created_by: String,
    /// Minted at.
    pub created_at: DateTime<Utc>,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Revoked at.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Records a minted token.
pub async fn insert(
    db: impl PgExecutor<'_>,
    jti: Uuid,
    tenant: Option<Uuid>,
    role: &str,
    description: &str,
    created_by: &str,
    expires_at: DateTime<Utc>,
) -> Result<TokenRow, StoreError> {
    Ok(sqlx::query_as!(
        TokenRow,
        "insert into api_tokens (jti, tenant_id, role, description, created_by, expires_at) values ($1, $2, $3, $4, $5, $6)
         returning jti, tenant_id, role, description, created_by, created_at, expires_at, revoked_at",
        jti,
        tenant,
        role,
        description,
        created_by,
        expires_at
    )
    .fetch_one(db)
    .await?)
}

/// A token by jti (for verification).
pub async fn get(db: impl PgExecutor<'_>, jti: Uuid) -> Result<Option<TokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        TokenRow,
        "select jti, tenant_id, role, description, created_by, created_at, expires_at, revoked_at from api_tokens where jti = $1",
        jti
    )
    .fetch_optional(db)
    .await?)
}

/// What authentication checks of a token: its row and its tenant's state.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenCheck {
    /// Tenant (None = platform admin).
    pub tenant_id: Option<Uuid>,
    /// Role.
    pub role: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Revoked at.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The tenant's state (`active`, `suspended`, `deleting`); None for platform tokens.
    pub tenant_state: Option<String>,
}

/// The token `jti` with its tenant's state, in one query (every request runs it).
pub async fn check(db: impl PgExecutor<'_>, jti: Uuid) -> Result<Option<TokenCheck>, StoreError> {
    Ok(sqlx::query_as!(
        TokenCheck,
        r#"select k.tenant_id, k.role, k.expires_at, k.revoked_at, t.state as "tenant_state?"
           from api_tokens k left join tenants t on t.id = k.tenant_id where k.jti = $1"#,
        jti
    )
    .fetch_optional(db)
    .await?)
}

/// Filters and position of a token page.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only revoked (true) or unrevoked (false) tokens.
    pub revoked: Option<bool>,
    /// Only this role.
    pub role: Option<String>,
    /// Before this `(created_at, jti)` (newest first).
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// A page of a tenant's tokens, newest first (`(created_at, jti)` descending).
pub async fn page(db: impl PgExecutor<'_>, tenant: Uuid, q: &ListQuery) -> Result<Vec<TokenRow>, StoreError> {
    let (before_ts, before_id) = q.before.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        TokenRow,
        "select jti, tenant_id, role, description, created_by, created_at, expires_at, revoked_at
         from api_tokens
         where tenant_id = $1
           and ($2::bool is null or (revoked_at is not null) = $2)
           and ($3::text is null or role = $3)
           and ($4::timestamptz is null or (created_at, jti) < ($4, $5::uuid))
         order by created_at desc, jti desc
         limit $6",
        tenant,
        q.revoked,
        q.role,
        before_ts,
        before_id,
        q.limit
    )
    .fetch_all(db)
    .await?)
}

/// A tenant's tokens, newest first.
pub async fn list(db: impl PgExecutor<'_>, tenant: Uuid) -> Result<Vec<TokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        TokenRow,
        "select jti, tenant_id, role, description, created_by, created_at, expires_at, revoked_at
         from api_tokens where tenant_id = $1 order by created_at desc, jti",
        tenant
    )
    .fetch_all(db)
    .await?)
}

/// Revokes a tenant's token; returns the row, or None if the tenant has no such token.
pub async fn revoke(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    jti: Uuid,
) -> Result<Option<TokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        TokenRow,
        "update api_tokens set revoked_at = coalesce(revoked_at, now()) where tenant_id = $1 and jti = $2
         returning jti, tenant_id, role, description, created_by, created_at, expires_at, revoked_at",
        tenant,
        jti
    )
    .fetch_optional(db)
    .await?)
}

/// Locks the tenant's row (so its rotations run one at a time) and counts its live signing keys: active,
/// or retired but still verifying.
pub async fn lock_live_signing_keys(tx: &mut PgConnection, tenant: Uuid) -> Result<i64, StoreError> {
    sqlx::query_scalar!("select id from tenants where id = $1 for update", tenant)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(sqlx::query_scalar!(
        r#"select count(*) as "n!" from signing_keys
           where tenant_id = $1 and (retired_at is null or verify_until > now())"#,
        tenant
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// Announces a revocation (`NOTIFY token_revoked, '<jti>'`), so that open connections using the token close.
pub async fn announce_revoked(db: impl PgExecutor<'_>, jti: Uuid) -> Result<(), StoreError> {
    sqlx::query!("select pg_notify('token_revoked', $1::uuid::text)", jti)
        .execute(db)
        .await?;
    Ok(())
}
