//! PostgreSQL repositories (sqlx, compile-time checked). Every tenant-scoped query filters by tenant id.

use tenantplane_core::{domain, translate};

pub mod authenticators;
pub mod control_planes;
pub mod datastores;
pub mod idempotency;
pub mod join_tokens;
pub mod migrations;
pub mod operations;
pub mod outbox;
pub mod parent_operations;
pub mod placements;
pub mod quotas;
pub mod retention;
pub mod tenants;
pub mod tokens;

use uuid::Uuid;

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// PostgreSQL session limits of every connection of the server's pools (`serve`, `worker`): a statement
/// that waits longer for a lock, or runs longer, fails with a retryable error instead of holding a request
/// (and its connection) for as long as another transaction keeps its lock, e.g. across Kubernetes calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct SessionTimeouts {
    /// Milliseconds a statement may wait for a lock before it fails (PostgreSQL `lock_timeout`; the API
    /// answers 503, the worker retries); 0: no limit.
    #[arg(
        long = "db-lock-timeout-ms",
        env = "TENANTPLANE_DB_LOCK_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub lock_timeout_ms: u64,
    /// Milliseconds a statement may run before it is cancelled (PostgreSQL `statement_timeout`; the API
    /// answers 503, the worker retries); 0: no limit. Migrations run without it.
    #[arg(
        long = "db-statement-timeout-ms",
        env = "TENANTPLANE_DB_STATEMENT_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub statement_timeout_ms: u64,
}

impl Default for SessionTimeouts {
    /// 5 s for a lock, 30 s for a statement.
    fn default() -> Self {
        Self {
            lock_timeout_ms: 5_000,
            statement_timeout_ms: 30_000,
        }
    }
}

impl SessionTimeouts {
    /// `options` with these limits set at connection start (so `RESET` keeps them).
    pub fn apply(&self, options: sqlx::postgres::PgConnectOptions) -> sqlx::postgres::PgConnectOptions {
        options.options([
            ("lock_timeout", format!("{}ms", self.lock_timeout_ms)),
            ("statement_timeout", format!("{}ms", self.statement_timeout_ms)),
        ])
    }
}

/// Runs the embedded migrations on a connection of `pool` without the session limits (a migration may
/// wait for another replica's, or rewrite a large table), then closes that connection.
pub async fn migrate(pool: &sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    let mut conn = pool.acquire().await?;
    conn.close_on_drop();
    sqlx::query("set lock_timeout = 0").execute(&mut *conn).await?;
    sqlx::query("set statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    MIGRATOR.run(&mut *conn).await
}

/// Whether `err` is PostgreSQL giving up on a statement: a lock wait past `lock_timeout` (55P03) or a
/// statement past `statement_timeout` (57014). Nothing changed; the same work may be retried.
pub fn timed_out(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("55P03" | "57014")))
}

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

/// An audit row.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// Id (ascending in time).
    pub id: i64,
    /// Who did it (`role:subject(jti)`).
    pub actor: String,
    /// What, e.g. `control-plane.create`.
    pub action: String,
    /// The target's id.
    pub target_id: String,
    /// Request id of the call.
    pub request_id: Option<String>,
    /// Details.
    pub details: serde_json::Value,
    /// When.
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// The `per` newest audit rows of `tenant` about each target in `target_ids` of `target_kind`, newest
/// first (one query for a whole page).
pub async fn audit_for(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    target_kind: &str,
    target_ids: &[String],
    per: i64,
) -> Result<Vec<AuditRow>, StoreError> {
    Ok(sqlx::query_as!(
        AuditRow,
        r#"select id as "id!", actor as "actor!", action as "action!", target_id as "target_id!", request_id,
                  details as "details!", created_at as "created_at!"
           from (select a.*, row_number() over (partition by target_id order by id desc) as n
                 from audit_log a where tenant_id = $1 and target_kind = $2 and target_id = any($3)) r
           where n <= $4
           order by target_id, id desc"#,
        tenant,
        target_kind,
        target_ids,
        per
    )
    .fetch_all(db)
    .await?)
}

/// An audit row of a tenant's log, as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditLogRow {
    /// Id (ascending in time).
    pub id: i64,
    /// Who did it (`role:subject(jti)`).
    pub actor: String,
    /// What, e.g. `control-plane.create`.
    pub action: String,
    /// The target's kind.
    pub target_kind: String,
    /// The target's id.
    pub target_id: String,
    /// Request id of the call.
    pub request_id: Option<String>,
    /// Details.
    pub details: serde_json::Value,
    /// When.
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// Filters and position of an audit page.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only this action.
    pub action: Option<String>,
    /// Only rows written at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only rows older than this id (the previous page's last).
    pub before: Option<i64>,
    /// Page size.
    pub limit: i64,
}

/// A page of `tenant`'s audit log, newest first (by id).
pub async fn audit_page(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    q: &AuditQuery,
) -> Result<Vec<AuditLogRow>, StoreError> {
    Ok(sqlx::query_as!(
        AuditLogRow,
        "select id, actor, action, target_kind, target_id, request_id, details, created_at
         from audit_log
         where tenant_id = $1
           and ($2::text is null or action = $2)
           and ($3::timestamptz is null or created_at >= $3)
           and ($4::bigint is null or id < $4)
         order by id desc
         limit $5",
        tenant,
        q.action,
        q.since,
        q.before,
        q.limit
    )
    .fetch_all(db)
    .await?)
}
