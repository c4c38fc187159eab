//! Control planes, their operations and outbox rows.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

pub use super::operations::OperationRow;
use super::{StoreError, placements::PlacementRow, tenants::TenantRow};
pub use crate::domain::ControlPlaneRow;

/// The requested spec of a new control plane.
#[derive(Debug, Clone)]
pub struct NewControlPlane {
    /// Name.
    pub name: String,
    /// Version.
    pub kubernetes_version: String,
    /// Replicas.
    pub replicas: i32,
    /// Service type.
    pub service_type: String,
    /// Port.
    pub port: i32,
    /// Size class.
    pub size_class: String,
    /// Pool.
    pub datastore_pool: Option<String>,
    /// DataStore labels.
    pub datastore_labels: serde_json::Value,
    /// Explicit DataStore.
    pub datastore_name: Option<String>,
    /// Offload.
    pub offload: String,
    /// Addons.
    pub addons: serde_json::Value,
    /// Labels.
    pub labels: serde_json::Value,
}

/// Records a new control plane with its `create` operation (stage `placed`, failing after `deadline_seconds`), the outbox row that applies it and the audit
/// entry of `actor`, in one statement (one round trip of the create's transaction).
pub async fn insert_created(
    tx: &mut PgConnection,
    tenant: Uuid,
    cp: &NewControlPlane,
    actor: &str,
    request_id: Option<&str>,
    deadline_seconds: i64,
) -> Result<(ControlPlaneRow, OperationRow), StoreError> {
    let operation = Uuid::new_v4();
    let row = sqlx::query_as!(
        ControlPlaneRow,
        r#"with cp as (
             insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port,
                                         size_class, datastore_pool, datastore_labels, datastore_name, offload,
                                         addons, labels)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             returning *
           ), op as (
             insert into operations (id, tenant_id, control_plane_id, kind, request_id, generation, stages, deadline_at)
             select $15, cp.tenant_id, cp.id, 'create', $16, cp.generation,
                    jsonb_build_array(jsonb_build_object('stage', 'placed', 'at', now())),
                    now() + make_interval(secs => $18)
             from cp
             returning id
           ), queued as (
             insert into outbox (tenant_id, control_plane_id, operation_id, kind, payload)
             select cp.tenant_id, cp.id, op.id, 'apply', jsonb_build_object('generation', cp.generation)
             from cp, op
           ), audited as (
             insert into audit_log (tenant_id, actor, action, target_kind, target_id, request_id, details)
             select cp.tenant_id, $17, 'control-plane.create', 'control-plane', cp.id::text, $16,
                    jsonb_build_object('name', cp.name)
             from cp
           )
           select id as "id!", tenant_id as "tenant_id!", name as "name!",
                  kubernetes_version as "kubernetes_version!", replicas as "replicas!",
                  service_type as "service_type!", port as "port!", size_class as "size_class!", datastore_pool,
                  datastore_labels as "datastore_labels!", datastore_name, offload as "offload!",
                  addons as "addons!", labels as "labels!", phase as "phase!", status as "status!",
                  generation as "generation!", deleted_at, created_at as "created_at!",
                  updated_at as "updated_at!"
           from cp"#,
        Uuid::new_v4(),
        tenant,
        cp.name,
        cp.kubernetes_version,
        cp.replicas,
        cp.service_type,
        cp.port,
        cp.size_class,
        cp.datastore_pool,
        cp.datastore_labels,
        cp.datastore_name,
        cp.offload,
        cp.addons,
        cp.labels,
        operation,
        request_id,
        actor,
        deadline_seconds as f64
    )
    .fetch_one(&mut *tx)
    .await?;
    // The operation's other columns are its defaults; `now()` is the transaction's start, as for the row.
    let op = OperationRow {
        id: operation,
        tenant_id: tenant,
        control_plane_id: row.id,
        kind: "create".into(),
        state: "pending".into(),
        error: None,
        request_id: request_id.map(str::to_string),
        generation: row.generation,
        stages: serde_json::json!([{"stage": "placed", "at": row.created_at}]),
        reason: None,
        deadline_at: row.created_at + chrono::Duration::seconds(deadline_seconds),
        created_at: row.created_at,
        updated_at: row.created_at,
    };
    Ok((row, op))
}

/// A live or deleting control plane of `tenant`.
pub async fn get(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<ControlPlaneRow>, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes where tenant_id = $1 and id = $2 and deleted_at is null",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?)
}

/// A control plane recorded gone (`deleted_at` set).
pub async fn get_gone(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<ControlPlaneRow>, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes where tenant_id = $1 and id = $2 and deleted_at is not null",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?)
}

/// How a request names a control plane: by id, by name, or by a string that may be both (a name can look
/// like a UUID); the live control plane with that id wins over the one with that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPlaneKey<'a> {
    /// The id, when the string parses as one.
    pub id: Option<Uuid>,
    /// The name, when the string is a valid control-plane name.
    pub name: Option<&'a str>,
}

/// A tenant by slug and, in the same statement, its live control plane `key` with the placement: one
/// round trip for a GET. `None` when no tenant has the slug; the caller authorizes on the tenant before
/// answering anything about the control plane.
pub async fn get_with_tenant(
    db: impl PgExecutor<'_>,
    slug: &str,
    key: ControlPlaneKey<'_>,
) -> Result<Option<(TenantRow, Option<(ControlPlaneRow, Option<PlacementRow>)>)>, StoreError> {
    if slug.contains('\0') {
        return Ok(None);
    }
    let Some(r) = sqlx::query!(
        r#"select t.id, t.slug, t.display_name, t.labels, t.state, t.created_at,
                  c.id as "cp_id?", c.name as "name?", c.kubernetes_version as "kubernetes_version?",
                  c.replicas as "replicas?", c.service_type as "service_type?", c.port as "port?",
                  c.size_class as "size_class?", c.datastore_pool as "datastore_pool?",
                  c.datastore_labels as "datastore_labels?", c.datastore_name as "datastore_name?",
                  c.offload as "offload?", c.addons as "addons?", c.labels as "cp_labels?", c.phase as "phase?",
                  c.status as "status?", c.generation as "generation?", c.deleted_at as "deleted_at?",
                  c.created_at as "cp_created_at?", c.updated_at as "updated_at?",
                  d.name as "datastore?", p.decision as "decision?",
                  (select jsonb_agg(jsonb_build_object('resource', o.resource, 'dataStore', od.name)
                                    order by case o.resource when '/events' then 0 else 1 end, o.resource)
                   from placement_overrides o join datastores od on od.id = o.datastore_id
                   where o.control_plane_id = p.control_plane_id) as "overrides?"
           from tenants t
           left join control_planes c on c.tenant_id = t.id and c.deleted_at is null
                                         and (c.id = $2 or c.name = $3)
           left join placements p on p.control_plane_id = c.id
           left join datastores d on d.id = p.datastore_id
           where t.slug = $1
           order by c.id = $2 desc nulls last
           limit 1"#,
        slug,
        key.id,
        key.name
    )
    .fetch_optional(db)
    .await?
    else {
        return Ok(None);
    };
    let tenant = TenantRow {
        id: r.id,
        slug: r.slug,
        display_name: r.display_name,
        labels: r.labels,
        state: r.state,
        created_at: r.created_at,
    };
    // Every column of the left-joined row is NULL when the tenant has no such live control plane.
    let row = (|| {
        Some(ControlPlaneRow {
            id: r.cp_id?,
            tenant_id: r.id,
            name: r.name?,
            kubernetes_version: r.kubernetes_version?,
            replicas: r.replicas?,
            service_type: r.service_type?,
            port: r.port?,
            size_class: r.size_class?,
            datastore_pool: r.datastore_pool,
            datastore_labels: r.datastore_labels?,
            datastore_name: r.datastore_name,
            offload: r.offload?,
            addons: r.addons?,
            labels: r.cp_labels?,
            phase: r.phase?,
            status: r.status?,
            generation: r.generation?,
            deleted_at: r.deleted_at,
            created_at: r.cp_created_at?,
            updated_at: r.updated_at?,
        })
    })();
    let found = row.map(|row| {
        let placement = r.datastore.map(|datastore| PlacementRow {
            control_plane_id: row.id,
            datastore,
            overrides: r.overrides.unwrap_or_else(|| serde_json::json!([])),
            decision: r.decision.unwrap_or(serde_json::Value::Null),
        });
        (row, placement)
    });
    Ok(Some((tenant, found)))
}

/// The live control plane `key` of `tenant` (the id wins over the name), locked for update.
pub async fn get_for_update(
    tx: &mut PgConnection,
    tenant: Uuid,
    key: ControlPlaneKey<'_>,
) -> Result<Option<ControlPlaneRow>, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes where tenant_id = $1 and deleted_at is null and (id = $2 or name = $3)
         order by id = $2 desc nulls last
         limit 1
         for update",
        tenant,
        key.id,
        key.name
    )
    .fetch_optional(&mut *tx)
    .await?)
}

/// Filters and a keyset cursor for listing.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only this phase.
    pub phase: Option<String>,
    /// Only this version.
    pub version: Option<String>,
    /// Only control planes whose labels contain these.
    pub labels: Option<serde_json::Value>,
    /// Start after this `(created_at, id)`.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// A page of `tenant`'s control planes ordered by `(created_at, id)`.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    q: &ListQuery,
) -> Result<Vec<ControlPlaneRow>, StoreError> {
    let (after_ts, after_id) = q.after.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes
         where tenant_id = $1 and deleted_at is null
           and ($2::text is null or phase = $2)
           and ($3::text is null or kubernetes_version = $3)
           and ($4::jsonb is null or labels @> $4)
           and ($5::timestamptz is null or (created_at, id) > ($5, $6::uuid))
         order by created_at, id
         limit $7",
        tenant,
        q.phase,
        q.version,
        q.labels,
        after_ts,
        after_id,
        q.limit
    )
    .fetch_all(db)
    .await?)
}

/// Writes a new spec (version, replicas, labels) and bumps the generation.
pub async fn update_spec(
    tx: &mut PgConnection,
    tenant: Uuid,
    id: Uuid,
    version: &str,
    replicas: i32,
    labels: &serde_json::Value,
) -> Result<ControlPlaneRow, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "update control_planes set kubernetes_version = $3, replicas = $4, labels = $5, generation = generation + 1,
                                   updated_at = now()
         where tenant_id = $1 and id = $2
         returning id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                   datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                   created_at, updated_at",
        tenant,
        id,
        version,
        replicas,
        labels
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// Sets the phase (e.g. `Deleting`) without touching the spec.
pub async fn set_phase(
    tx: &mut PgConnection,
    tenant: Uuid,
    id: Uuid,
    phase: &str,
) -> Result<ControlPlaneRow, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "update control_planes set phase = $3, updated_at = now() where tenant_id = $1 and id = $2
         returning id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                   datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                   created_at, updated_at",
        tenant,
        id,
        phase
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// Queues work for the worker.
pub async fn enqueue(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
    operation: Uuid,
    kind: &str,
    payload: &serde_json::Value,
) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar!(
        "insert into outbox (tenant_id, control_plane_id, operation_id, kind, payload) values ($1, $2, $3, $4, $5) returning id",
        tenant,
        control_plane,
        operation,
        kind,
        payload
    )
    .fetch_one(&mut *tx)
    .await?)
}
