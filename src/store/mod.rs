//! PostgreSQL repositories (sqlx, compile-time checked). Every tenant-scoped query filters by tenant id.

pub mod control_planes;
pub mod datastores;
pub mod idempotency;
pub mod outbox;
pub mod placements;
pub mod tenants;
pub mod tokens;

use uuid::Uuid;

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique constraint was violated; carries the constraint name.
    #[error("conflict on {0}")]
    Conflict(String),
    /// Any other database error.
    #[error(transparent)]
    Db(sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err
            && db.is_unique_violation()
        {
            return StoreError::Conflict(db.constraint().unwrap_or_default().to_string());
        }
        StoreError::Db(err)
    }
}

/// Writes one audit row.
#[expect(clippy::too_many_arguments, reason = "mirrors the audit_log columns")]
pub async fn audit(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Option<Uuid>,
    actor: &str,
    action: &str,
    target_kind: &str,
    target_id: &str,
    request_id: Option<&str>,
    details: serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query!(
        "insert into audit_log (tenant_id, actor, action, target_kind, target_id, request_id, details)
         values ($1, $2, $3, $4, $5, $6, $7)",
        tenant,
        actor,
        action,
        target_kind,
        target_id,
        request_id,
        details
    )
    .execute(db)
    .await?;
    Ok(())
}
