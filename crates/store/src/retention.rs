//! Retention of the tables that only grow: `Idempotency-Key` records, processed outbox rows and audit
//! rows older than their retention are deleted in batches (the worker runs [`purge`] periodically).

use super::StoreError;

/// How long rows are kept, and how they are purged (worker flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct Retention {
    /// Hours an `Idempotency-Key` and its stored answer are kept: a retry after that runs anew. 0: forever.
    #[arg(
        id = "retention-idempotency-hours",
        long = "retention-idempotency-hours",
        env = "TENANTPLANE_RETENTION_IDEMPOTENCY_HOURS",
        default_value_t = 24
    )]
    pub idempotency_hours: i32,
    /// Days a processed (applied, deleted or given-up) outbox row is kept. 0: forever.
    #[arg(
        id = "retention-outbox-days",
        long = "retention-outbox-days",
        env = "TENANTPLANE_RETENTION_OUTBOX_DAYS",
        default_value_t = 7
    )]
    pub outbox_days: i32,
    /// Days an audit row is kept (a year of audits, and a month to review them). 0: forever.
    #[arg(
        id = "retention-audit-days",
        long = "retention-audit-days",
        env = "TENANTPLANE_RETENTION_AUDIT_DAYS",
        default_value_t = 400
    )]
    pub audit_days: i32,
    /// Seconds between two purges.
    #[arg(
        id = "retention-interval-seconds",
        long = "retention-interval-seconds",
        env = "TENANTPLANE_RETENTION_INTERVAL_SECONDS",
        default_value_t = 600
    )]
    pub interval_seconds: u64,
    /// Rows one delete statement removes at most (each table is purged batch by batch).
    #[arg(
        id = "retention-batch-size",
        long = "retention-batch-size",
        env = "TENANTPLANE_RETENTION_BATCH_SIZE",
        default_value_t = 1000
    )]
    pub batch_size: i64,
}

impl Default for Retention {
    /// Idempotency keys 24 h, processed outbox rows 7 days, audit rows 400 days; every 10 minutes, by
    /// 1000 rows.
    fn default() -> Self {
        Self {
            idempotency_hours: 24,
            outbox_days: 7,
            audit_days: 400,
            interval_seconds: 600,
            batch_size: 1000,
        }
    }
}

impl Retention {
    /// Checks what clap cannot: no negative retention, a positive batch and interval.
    pub fn validate(&self) -> Result<(), String> {
        if self.idempotency_hours < 0 || self.outbox_days < 0 || self.audit_days < 0 {
            return Err("a retention cannot be negative (0 keeps rows forever)".into());
        }
        if self.batch_size < 1 || self.interval_seconds < 1 {
            return Err("the retention batch size and interval must be at least 1".into());
        }
        Ok(())
    }
}

/// Rows one purge deleted, by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// `idempotency_keys`.
    pub idempotency_keys: u64,
    /// `outbox` (processed rows).
    pub outbox: u64,
    /// `audit_log`.
    pub audit_log: u64,
}

/// Deletes every row older than its retention, `batch_size` rows per statement, each batch in its own
/// transaction (no long lock, no long statement).
pub async fn purge(db: &sqlx::PgPool, retention: &Retention) -> Result<Purged, StoreError> {
    let batch = retention.batch_size.max(1);
    let mut purged = Purged::default();
    if retention.idempotency_hours > 0 {
        purged.idempotency_keys = batches(batch, || {
            idempotency_batch(db, retention.idempotency_hours, batch)
        })
        .await?;
    }
    if retention.outbox_days > 0 {
        purged.outbox = batches(batch, || outbox_batch(db, retention.outbox_days, batch)).await?;
    }
    if retention.audit_days > 0 {
        purged.audit_log = batches(batch, || audit_batch(db, retention.audit_days, batch)).await?;
    }
    Ok(purged)
}

/// Runs `delete` until a batch deletes fewer than `batch` rows; the rows deleted in all.
async fn batches<F, Fut>(batch: i64, delete: F) -> Result<u64, StoreError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<u64, StoreError>>,
{
    let mut total = 0;
    loop {
        let deleted = delete().await?;
        total += deleted;
        if deleted < batch.unsigned_abs() {
            return Ok(total);
        }
    }
}

async fn idempotency_batch(db: &sqlx::PgPool, hours: i32, batch: i64) -> Result<u64, StoreError> {
    Ok(sqlx::query!(
        "delete from idempotency_keys where (scope, key) in (
             select scope, key from idempotency_keys
             where created_at < now() - make_interval(hours => $1) limit $2)",
        hours,
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

async fn outbox_batch(db: &sqlx::PgPool, days: i32, batch: i64) -> Result<u64, StoreError> {
    Ok(sqlx::query!(
        "delete from outbox where id in (
             select id from outbox
             where processed_at < now() - make_interval(days => $1) order by id limit $2)",
        days,
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}

async fn audit_batch(db: &sqlx::PgPool, days: i32, batch: i64) -> Result<u64, StoreError> {
    Ok(sqlx::query!(
        "delete from audit_log where id in (
             select id from audit_log
             where created_at < now() - make_interval(days => $1) order by id limit $2)",
        days,
        batch
    )
    .execute(db)
    .await?
    .rows_affected())
}
