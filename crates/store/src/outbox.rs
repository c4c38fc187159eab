//! The worker's side of the outbox: claim, finish, retry; placements; status written back.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::{StoreError, control_planes::ControlPlaneRow};

/// An outbox row claimed by a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// Id (also the order rows of one control plane are applied in).
    pub id: i64,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Control plane.
    pub control_plane_id: Option<Uuid>,
    /// Operation to finish.
    pub operation_id: Option<Uuid>,
    /// `apply` or `delete`.
    pub kind: String,
    /// `{"generation": n}` for applies.
    pub payload: serde_json::Value,
    /// Failed attempts so far.
    pub attempts: i32,
}

/// Locks up to `limit` due rows (`FOR UPDATE SKIP LOCKED`), at most one per control plane: the oldest
/// unprocessed one, so that a control plane's rows apply in order and never on two workers at once.
pub async fn claim(tx: &mut PgConnection, limit: i64) -> Result<Vec<OutboxRow>, StoreError> {
    Ok(sqlx::query_as!(
        OutboxRow,
        "select o.id, o.tenant_id, o.control_plane_id, o.operation_id, o.kind, o.payload, o.attempts
         from outbox o
         where o.processed_at is null and o.next_attempt_at <= now()
           and not exists (select 1 from outbox p
                           where p.control_plane_id = o.control_plane_id and p.processed_at is null and p.id < o.id)
         order by o.id
         limit $1
         for update of o skip locked",
        limit
    )
    .fetch_all(&mut *tx)
    .await?)
}

/// Marks a row done.
pub async fn complete(tx: &mut PgConnection, id: i64) -> Result<(), StoreError> {
    sqlx::query!(
        "update outbox set processed_at = now(), last_error = null where id = $1",
        id
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Puts a row back for a later pass; `failed` counts an attempt and records the error.
pub async fn retry_later(
    tx: &mut PgConnection,
    id: i64,
    delay_seconds: f64,
    failed: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query!(
        "update outbox set next_attempt_at = now() + make_interval(secs => $2),
                           attempts = attempts + case when $3::text is null then 0 else 1 end,
                           last_error = coalesce($3, last_error)
         where id = $1",
        id,
        delay_seconds,
        failed
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Gives up on a row: done, with its last error.
pub async fn give_up(tx: &mut PgConnection, id: i64, error: &str) -> Result<(), StoreError> {
    sqlx::query!(
        "update outbox set processed_at = now(), attempts = attempts + 1, last_error = $2 where id = $1",
        id,
        error
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Unprocessed rows (the outbox depth).
pub async fn depth(db: impl PgExecutor<'_>) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar!(r#"select count(*) as "n!" from outbox where processed_at is null"#)
            .fetch_one(db)
            .await?,
    )
}

/// A control plane whatever its state (deleted ones too), with its tenant's slug.
pub async fn control_plane(
    tx: &mut PgConnection,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<(ControlPlaneRow, String)>, StoreError> {
    let row = sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes where tenant_id = $1 and id = $2",
        tenant,
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let slug = sqlx::query_scalar!("select slug from tenants where id = $1", tenant)
        .fetch_one(&mut *tx)
        .await?;
    Ok(Some((row, slug)))
}

/// Live control planes after `after` (by id), locked `FOR SHARE SKIP LOCKED` so that a delete cannot
/// commit while the resync re-applies them; with their tenants' slugs.
pub async fn live_page(
    tx: &mut PgConnection,
    after: Uuid,
    limit: i64,
) -> Result<Vec<(ControlPlaneRow, String)>, StoreError> {
    let rows = sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes
         where deleted_at is null and phase not in ('Deleting', 'Deleted') and id > $1
         order by id
         limit $2
         for share skip locked",
        after,
        limit
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let slug = sqlx::query_scalar!("select slug from tenants where id = $1", row.tenant_id)
            .fetch_one(&mut *tx)
            .await?;
        out.push((row, slug));
    }
    Ok(out)
}

/// The placement of a control plane: primary DataStore name and `(resource, datastore)` overrides; `None`
/// when placement has not run for it.
pub async fn placement(
    tx: &mut PgConnection,
    control_plane: Uuid,
) -> Result<Option<(String, Vec<(String, String)>)>, StoreError> {
    let primary = sqlx::query_scalar!(
        "select d.name from placements p join datastores d on d.id = p.datastore_id where p.control_plane_id = $1",
        control_plane
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(primary) = primary else { return Ok(None) };
    let overrides = sqlx::query!(
        "select o.resource, d.name from placement_overrides o join datastores d on d.id = o.datastore_id
         where o.control_plane_id = $1 order by o.resource",
        control_plane
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|r| (r.resource, r.name))
    .collect();
    Ok(Some((primary, overrides)))
}

/// Records that a control plane is gone from the cluster, and `NOTIFY control_plane_status,
/// '<tenant>:<id>:deleted'` (delivered when the transaction commits).
pub async fn mark_deleted(tx: &mut PgConnection, tenant: Uuid, id: Uuid) -> Result<(), StoreError> {
    sqlx::query!(
        "with gone as (
             update control_planes set deleted_at = coalesce(deleted_at, now()), phase = 'Deleted', updated_at = now()
             where tenant_id = $1 and id = $2
             returning tenant_id, id)
         select pg_notify('control_plane_status', tenant_id::text || ':' || id::text || ':deleted')::text as \"notified\"
         from gone",
        tenant,
        id
    )
    .fetch_all(&mut *tx)
    .await?;
    crate::placements::release(tx, tenant, id).await?;
    Ok(())
}

/// Writes the observed phase and status of a live control plane, and `NOTIFY control_plane_status,
/// '<tenant>:<id>'` in the same statement (so the same transaction). Writes and notifies only on a change;
/// a control plane being deleted keeps its phase. Returns whether anything changed. Trusts its caller: the
/// worker writes through [`write_tcp_status`], which checks the TCP is the row's own.
pub async fn write_status(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
    phase: &str,
    status: &serde_json::Value,
) -> Result<bool, StoreError> {
    let notified = sqlx::query_scalar!(
        r#"with changed as (
             update control_planes
             set phase = case when phase in ('Deleting', 'Deleted') then phase else $3 end,
                 status = $4, updated_at = now()
             where tenant_id = $1 and id = $2 and deleted_at is null
               and (status is distinct from $4 or (phase <> $3 and phase not in ('Deleting', 'Deleted')))
             returning tenant_id, id
           )
           select pg_notify('control_plane_status', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        tenant,
        id,
        phase,
        status
    )
    .fetch_optional(db)
    .await?;
    Ok(notified.is_some())
}

/// The status of one TCP, and which object it is.
#[derive(Debug, Clone, Copy)]
pub struct StatusWrite<'a> {
    /// Tenant (label).
    pub tenant: Uuid,
    /// Control plane (label).
    pub id: Uuid,
    /// The TCP's namespace.
    pub namespace: &'a str,
    /// The TCP's name.
    pub name: &'a str,
    /// The TCP's UID.
    pub uid: &'a str,
    /// Observed phase.
    pub phase: &'a str,
    /// Observed status.
    pub status: &'a serde_json::Value,
}

/// What became of a status write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusVerdict {
    /// Written (and notified).
    Written,
    /// The row already says so.
    Unchanged,
    /// Not the TCP the worker made for the row: `reason` is `unknown`, `namespace`, `name` or `uid`.
    Rejected(&'static str),
}

/// Writes the observed phase and status of a live control plane, and `NOTIFY control_plane_status,
/// '<tenant>:<id>'` in the same statement (so the same transaction), only when the TCP is the row's own:
/// in the namespace `namespace_template` gives for the tenant, with the row's name, and with the pinned
/// UID (pinned here on first sight). Writes and notifies only on a change; a control plane being deleted
/// keeps its phase.
pub async fn write_tcp_status(
    db: &sqlx::PgPool,
    namespace_template: &str,
    seen: &StatusWrite<'_>,
) -> Result<StatusVerdict, StoreError> {
    let notified = sqlx::query_scalar!(
        r#"with changed as (
             update control_planes c
             set phase = case when c.phase in ('Deleting', 'Deleted') then c.phase else $3 end,
                 status = $4, tcp_uid = coalesce(c.tcp_uid, $7), updated_at = now()
             from tenants t
             where c.tenant_id = $1 and c.id = $2 and c.deleted_at is null and t.id = c.tenant_id
               and c.name = $5 and replace($8, '{tenant}', t.slug) = $6
               and (c.tcp_uid is null or c.tcp_uid = $7)
               and (c.status is distinct from $4 or c.tcp_uid is null
                    or (c.phase <> $3 and c.phase not in ('Deleting', 'Deleted')))
             returning c.tenant_id, c.id
           )
           select pg_notify('control_plane_status', tenant_id::text || ':' || id::text)::text as "notified"
           from changed"#,
        seen.tenant,
        seen.id,
        seen.phase,
        seen.status,
        seen.name,
        seen.namespace,
        seen.uid,
        namespace_template
    )
    .fetch_optional(db)
    .await?;
    if notified.is_some() {
        return Ok(StatusVerdict::Written);
    }
    let row = sqlx::query!(
        "select c.name, c.tcp_uid, t.slug from control_planes c join tenants t on t.id = c.tenant_id
         where c.tenant_id = $1 and c.id = $2 and c.deleted_at is null",
        seen.tenant,
        seen.id
    )
    .fetch_optional(db)
    .await?;
    Ok(match row {
        None => StatusVerdict::Rejected("unknown"),
        Some(r) if crate::translate::namespace(namespace_template, &r.slug) != seen.namespace => {
            StatusVerdict::Rejected("namespace")
        }
        Some(r) if r.name != seen.name => StatusVerdict::Rejected("name"),
        Some(r) if r.tcp_uid.as_deref().is_some_and(|pinned| pinned != seen.uid) => {
            StatusVerdict::Rejected("uid")
        }
        Some(_) => StatusVerdict::Unchanged,
    })
}

/// Pins the UID of the TCP the worker just applied for a control plane (replacing an older pin).
pub async fn pin_tcp(tx: &mut PgConnection, tenant: Uuid, id: Uuid, uid: &str) -> Result<(), StoreError> {
    sqlx::query!(
        "update control_planes set tcp_uid = $3 where tenant_id = $1 and id = $2 and tcp_uid is distinct from $3",
        tenant,
        id,
        uid
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Clears the pin of a control plane whose pinned TCP was deleted; returns whether it was pinned to `uid`.
pub async fn unpin_tcp(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
    uid: &str,
) -> Result<bool, StoreError> {
    let done = sqlx::query!(
        "update control_planes set tcp_uid = null where tenant_id = $1 and id = $2 and tcp_uid = $3",
        tenant,
        id,
        uid
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The pinned TCP UID of a live control plane of `tenant`.
pub async fn tcp_uid(db: impl PgExecutor<'_>, tenant: Uuid, id: Uuid) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar!(
        "select tcp_uid from control_planes where tenant_id = $1 and id = $2 and deleted_at is null",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?
    .flatten())
}
