//! Parent operations (drains and rebalances): a platform operation and its children, the control-plane
//! operations it starts. The worker drives an open parent only under its row lock (`FOR UPDATE SKIP
//! LOCKED`), so two workers never start children of one parent at once.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor, Row as _};
use uuid::Uuid;

use super::StoreError;

/// The unique index that allows one open parent per kind and subject.
pub const ONE_OPEN: &str = "parent_operations_one_open_idx";

/// A parent operation row.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentRow {
    /// Id.
    pub id: Uuid,
    /// `drain` or `rebalance`.
    pub kind: String,
    /// The drained DataStore's or the rebalanced pool's name.
    pub subject: String,
    /// Children running at once, at most.
    pub concurrency: i32,
    /// `running`, `succeeded` or `failed`.
    pub state: String,
    /// Why it failed, machine-readable.
    pub reason: Option<String>,
    /// Which children failed and why.
    pub error: Option<String>,
    /// Who asked.
    pub actor: String,
    /// Request id of the call that started it.
    pub request_id: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A child as read back, with its control plane and its operation's state and last stage.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRow {
    /// Its place in the start order.
    pub position: i32,
    /// Tenant id.
    pub tenant_id: Uuid,
    /// Tenant slug.
    pub tenant: String,
    /// Control plane id.
    pub control_plane_id: Uuid,
    /// Control plane name.
    pub control_plane: String,
    /// `primary` or `overrides`.
    pub usage: String,
    /// The offloaded resources that move (usage `overrides`).
    pub resources: Vec<String>,
    /// The DataStore it leaves.
    pub source: String,
    /// The DataStore the plan chose, if any.
    pub target: Option<String>,
    /// `pending`, `running`, `succeeded` or `failed` (the child's own record).
    pub state: String,
    /// Its operation, once started.
    pub operation_id: Option<Uuid>,
    /// Its operation's kind.
    pub operation_kind: Option<String>,
    /// Its operation's last stage.
    pub stage: Option<String>,
    /// Why it failed, machine-readable.
    pub reason: Option<String>,
    /// Why it failed, for people.
    pub error: Option<String>,
}

/// A parent to record.
#[derive(Debug, Clone)]
pub struct NewParent<'a> {
    /// `drain` or `rebalance`.
    pub kind: &'a str,
    /// The DataStore's or pool's name.
    pub subject: &'a str,
    /// Children running at once, at most.
    pub concurrency: i32,
    /// Who asked.
    pub actor: &'a str,
    /// Request id.
    pub request_id: Option<&'a str>,
}

/// A child to record: pending, or already failed with `(reason, error)`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChild {
    /// Tenant id.
    pub tenant: Uuid,
    /// Control plane id.
    pub control_plane: Uuid,
    /// `primary` or `overrides`.
    pub usage: &'static str,
    /// The offloaded resources that move.
    pub resources: Vec<String>,
    /// The DataStore it leaves.
    pub source: String,
    /// The DataStore the plan chose.
    pub target: Option<String>,
    /// Ended before it started: `(reason, error)`.
    pub failed: Option<(String, String)>,
}

fn parent(r: &sqlx::postgres::PgRow) -> ParentRow {
    ParentRow {
        id: r.get("id"),
        kind: r.get("kind"),
        subject: r.get("subject"),
        concurrency: r.get("concurrency"),
        state: r.get("state"),
        reason: r.get("reason"),
        error: r.get("error"),
        actor: r.get("actor"),
        request_id: r.get("request_id"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
        finished_at: r.get("finished_at"),
    }
}

/// Records a parent (running) and its children in order; a second open parent of the same kind and
/// subject is a [`StoreError::Conflict`] on [`ONE_OPEN`].
pub async fn insert(
    tx: &mut PgConnection,
    new: &NewParent<'_>,
    children: &[NewChild],
) -> Result<Uuid, StoreError> {
    let id = Uuid::new_v4();
    sqlx::query(
        "insert into parent_operations (id, kind, subject, concurrency, actor, request_id)
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(new.kind)
    .bind(new.subject)
    .bind(new.concurrency)
    .bind(new.actor)
    .bind(new.request_id)
    .execute(&mut *tx)
    .await?;
    for (position, c) in children.iter().enumerate() {
        let (reason, error) = c.failed.clone().unzip();
        sqlx::query(
            "insert into parent_operation_children (parent_id, position, tenant_id, control_plane_id, usage,
                                                    resources, source, target, state, reason, error, finished_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, case when $9::text is null then 'pending' else 'failed' end,
                     $9, $10, case when $9::text is null then null else now() end)",
        )
        .bind(id)
        .bind(i32::try_from(position).unwrap_or(i32::MAX))
        .bind(c.tenant)
        .bind(c.control_plane)
        .bind(c.usage)
        .bind(&c.resources)
        .bind(&c.source)
        .bind(&c.target)
        .bind(reason)
        .bind(error)
        .execute(&mut *tx)
        .await?;
    }
    Ok(id)
}

/// The open parent of `kind` on `subject`, if any.
pub async fn open_on(db: impl PgExecutor<'_>, kind: &str, subject: &str) -> Result<Option<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "select id from parent_operations where kind = $1 and subject = $2 and state = 'running'",
    )
    .bind(kind)
    .bind(subject)
    .fetch_optional(db)
    .await?)
}

/// One parent.
pub async fn get(db: impl PgExecutor<'_>, id: Uuid) -> Result<Option<ParentRow>, StoreError> {
    let row = sqlx::query(
        "select id, kind, subject, concurrency, state, reason, error, actor, request_id, created_at, updated_at,
                finished_at
         from parent_operations where id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await?;
    Ok(row.as_ref().map(parent))
}

/// The children of parent `id` in start order. A started child's state is its operation's (`pending`
/// there reads `running` here), so it is current before the worker's next pass records it.
pub async fn children(db: impl PgExecutor<'_>, id: Uuid) -> Result<Vec<ChildRow>, StoreError> {
    let rows = sqlx::query(
        "select c.position, c.tenant_id, t.slug, c.control_plane_id, cp.name, c.usage, c.resources, c.source,
                c.target, c.operation_id, o.kind as operation_kind, o.stages -> -1 ->> 'stage' as stage,
                case when c.state = 'running' and o.state = 'succeeded' then 'succeeded'
                     when c.state = 'running' and o.state = 'failed' then 'failed'
                     else c.state end as state,
                case when c.state = 'running' and o.state = 'failed' then o.reason else c.reason end as reason,
                case when c.state = 'running' and o.state = 'failed' then o.error else c.error end as error
         from parent_operation_children c
         join tenants t on t.id = c.tenant_id
         join control_planes cp on cp.id = c.control_plane_id
         left join operations o on o.id = c.operation_id
         where c.parent_id = $1
         order by c.position",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    Ok(rows
        .iter()
        .map(|r| ChildRow {
            position: r.get("position"),
            tenant_id: r.get("tenant_id"),
            tenant: r.get("slug"),
            control_plane_id: r.get("control_plane_id"),
            control_plane: r.get("name"),
            usage: r.get("usage"),
            resources: r.get("resources"),
            source: r.get("source"),
            target: r.get("target"),
            state: r.get("state"),
            operation_id: r.get("operation_id"),
            operation_kind: r.get("operation_kind"),
            stage: r.get("stage"),
            reason: r.get("reason"),
            error: r.get("error"),
        })
        .collect())
}

/// The open parents, oldest first.
pub async fn open_ids(db: impl PgExecutor<'_>) -> Result<Vec<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar(
            "select id from parent_operations where state = 'running' order by created_at, id",
        )
        .fetch_all(db)
        .await?,
    )
}

/// Open parent `id`, locked for this transaction; `None` when it ended or another worker holds it.
pub async fn lock(tx: &mut PgConnection, id: Uuid) -> Result<Option<ParentRow>, StoreError> {
    let row = sqlx::query(
        "select id, kind, subject, concurrency, state, reason, error, actor, request_id, created_at, updated_at,
                finished_at
         from parent_operations where id = $1 and state = 'running'
         for update skip locked",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.as_ref().map(parent))
}

/// Records the end of every running child of `parent` whose operation ended (its reason and error), or
/// whose operation or control plane is gone. Returns how many ended.
pub async fn settle(tx: &mut PgConnection, parent: Uuid) -> Result<u64, StoreError> {
    let ended = sqlx::query(
        "update parent_operation_children c
         set state = o.state, reason = o.reason, error = o.error, finished_at = now()
         from operations o
         where c.parent_id = $1 and c.state = 'running' and o.id = c.operation_id
           and o.state in ('succeeded', 'failed')",
    )
    .bind(parent)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    let gone = sqlx::query(
        "update parent_operation_children c
         set state = 'failed', reason = 'ControlPlaneDeleted', finished_at = now(),
             error = 'the control plane was deleted before its move ended'
         from control_planes cp
         where c.parent_id = $1 and c.state = 'running' and cp.id = c.control_plane_id
           and (cp.deleted_at is not null or c.operation_id is null)",
    )
    .bind(parent)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(ended + gone)
}

/// How many of `parent`'s children run.
pub async fn running(tx: &mut PgConnection, parent: Uuid) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "select count(*) from parent_operation_children where parent_id = $1 and state = 'running'",
    )
    .bind(parent)
    .fetch_one(&mut *tx)
    .await?)
}

/// Child `position` of `parent` started operation `operation`.
pub async fn started(
    tx: &mut PgConnection,
    parent: Uuid,
    position: i32,
    operation: Uuid,
) -> Result<(), StoreError> {
    sqlx::query(
        "update parent_operation_children set state = 'running', operation_id = $3, started_at = now()
         where parent_id = $1 and position = $2",
    )
    .bind(parent)
    .bind(position)
    .bind(operation)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Child `position` of `parent` ended without starting: `(reason, error)`.
pub async fn refused(
    tx: &mut PgConnection,
    parent: Uuid,
    position: i32,
    (reason, error): (&str, &str),
) -> Result<(), StoreError> {
    sqlx::query(
        "update parent_operation_children set state = 'failed', reason = $3, error = $4, finished_at = now()
         where parent_id = $1 and position = $2",
    )
    .bind(parent)
    .bind(position)
    .bind(reason)
    .bind(error)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Ends parent `id` (`succeeded`, or `failed` with `(reason, error)`).
pub async fn end(tx: &mut PgConnection, id: Uuid, failed: Option<(&str, &str)>) -> Result<(), StoreError> {
    let (reason, error) = failed.unzip();
    sqlx::query(
        "update parent_operations
         set state = case when $2::text is null then 'succeeded' else 'failed' end, reason = $2, error = $3,
             updated_at = now(), finished_at = now()
         where id = $1 and state = 'running'",
    )
    .bind(id)
    .bind(reason)
    .bind(error)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Marks parent `id` as changed (a child started or ended).
pub async fn touch(tx: &mut PgConnection, id: Uuid) -> Result<(), StoreError> {
    sqlx::query("update parent_operations set updated_at = now() where id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// `(control plane, tenant)` of each of `ids` that is not deleted.
pub async fn tenants_of(db: impl PgExecutor<'_>, ids: &[Uuid]) -> Result<Vec<(Uuid, Uuid)>, StoreError> {
    let rows =
        sqlx::query("select id, tenant_id from control_planes where id = any($1) and deleted_at is null")
            .bind(ids)
            .fetch_all(db)
            .await?;
    Ok(rows.iter().map(|r| (r.get("id"), r.get("tenant_id"))).collect())
}

/// A control plane placed in a pool, as a rebalance plans it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedRow {
    /// Control plane id.
    pub control_plane_id: Uuid,
    /// Tenant id.
    pub tenant_id: Uuid,
    /// Size class.
    pub size_class: String,
    /// The label selector it was placed with.
    pub labels: serde_json::Value,
    /// Its primary DataStore.
    pub primary: String,
    /// `(resource, DataStore name)` of its overrides.
    pub overrides: Vec<(String, String)>,
}

/// Every live control plane whose primary DataStore is in pool `pool`.
pub async fn assignments_in_pool(db: impl PgExecutor<'_>, pool: Uuid) -> Result<Vec<PlacedRow>, StoreError> {
    let rows = sqlx::query(
        "select c.id, c.tenant_id, c.size_class, c.datastore_labels, d.name as primary_name,
                coalesce((select jsonb_agg(jsonb_build_array(o.resource, od.name) order by o.resource)
                          from placement_overrides o join datastores od on od.id = o.datastore_id
                          where o.control_plane_id = c.id), '[]'::jsonb) as overrides
         from control_planes c
         join placements p on p.control_plane_id = c.id
         join datastores d on d.id = p.datastore_id
         where c.deleted_at is null and d.pool_id = $1
         order by c.created_at, c.id",
    )
    .bind(pool)
    .fetch_all(db)
    .await?;
    Ok(rows
        .iter()
        .map(|r| PlacedRow {
            control_plane_id: r.get("id"),
            tenant_id: r.get("tenant_id"),
            size_class: r.get("size_class"),
            labels: r.get("datastore_labels"),
            primary: r.get("primary_name"),
            overrides: serde_json::from_value(r.get::<serde_json::Value, _>("overrides")).unwrap_or_default(),
        })
        .collect())
}

/// Moves control plane `control_plane`'s overrides `resources` from DataStore `from` to `to`, and the
/// loads with them: `to` counts it once more unless it already did, `from` once less unless it still
/// holds another of its resources. The caller holds both DataStore rows' locks.
pub async fn replace_overrides(
    tx: &mut PgConnection,
    control_plane: Uuid,
    resources: &[String],
    (from, to): (Uuid, Uuid),
) -> Result<(), StoreError> {
    let uses = "select exists (select 1 from placements where control_plane_id = $1 and datastore_id = $2
                               union all
                               select 1 from placement_overrides where control_plane_id = $1 and datastore_id = $2)";
    let used_to: bool = sqlx::query_scalar(uses)
        .bind(control_plane)
        .bind(to)
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query(
        "update placement_overrides set datastore_id = $3
         where control_plane_id = $1 and resource = any($2) and datastore_id = $4",
    )
    .bind(control_plane)
    .bind(resources)
    .bind(to)
    .bind(from)
    .execute(&mut *tx)
    .await?;
    let uses_from: bool = sqlx::query_scalar(uses)
        .bind(control_plane)
        .bind(from)
        .fetch_one(&mut *tx)
        .await?;
    if !used_to {
        sqlx::query("update datastores set load_tenants = load_tenants + 1 where id = $1")
            .bind(to)
            .execute(&mut *tx)
            .await?;
    }
    if !uses_from {
        sqlx::query("update datastores set load_tenants = greatest(load_tenants - 1, 0) where id = $1")
            .bind(from)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}
