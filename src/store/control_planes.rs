//! Control planes, their operations and outbox rows.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// A control-plane row.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPlaneRow {
    /// Id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Name, unique per tenant.
    pub name: String,
    /// Requested Kubernetes version.
    pub kubernetes_version: String,
    /// Replicas.
    pub replicas: i32,
    /// Service type.
    pub service_type: String,
    /// Port.
    pub port: i32,
    /// Size class.
    pub size_class: String,
    /// Preferred pool.
    pub datastore_pool: Option<String>,
    /// Required DataStore labels.
    pub datastore_labels: serde_json::Value,
    /// Explicit DataStore (platform admins).
    pub datastore_name: Option<String>,
    /// Offload mode.
    pub offload: String,
    /// Addons.
    pub addons: serde_json::Value,
    /// Labels.
    pub labels: serde_json::Value,
    /// Observed phase.
    pub phase: String,
    /// Observed status.
    pub status: serde_json::Value,
    /// Generation (bumped by every spec change).
    pub generation: i64,
    /// Deleted at.
    pub deleted_at: Option<DateTime<Utc>>,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Updated at.
    pub updated_at: DateTime<Utc>,
}

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

/// An operation row.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationRow {
    /// Id.
    pub id: Uuid,
    /// Tenant.
    pub tenant_id: Uuid,
    /// Control plane.
    pub control_plane_id: Uuid,
    /// `create`, `update` or `delete`.
    pub kind: String,
    /// `pending`, `running`, `succeeded` or `failed`.
    pub state: String,
    /// Error of a failed operation.
    pub error: Option<String>,
    /// Request id of the call that started it.
    pub request_id: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
}

/// Inserts a control plane (phase Pending).
pub async fn insert(
    tx: &mut PgConnection,
    tenant: Uuid,
    cp: &NewControlPlane,
) -> Result<ControlPlaneRow, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "insert into control_planes (id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class,
                                     datastore_pool, datastore_labels, datastore_name, offload, addons, labels)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         returning id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                   datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                   created_at, updated_at",
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
        cp.labels
    )
    .fetch_one(&mut *tx)
    .await?)
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

/// The same, locked for update.
pub async fn get_for_update(
    tx: &mut PgConnection,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<ControlPlaneRow>, StoreError> {
    Ok(sqlx::query_as!(
        ControlPlaneRow,
        "select id, tenant_id, name, kubernetes_version, replicas, service_type, port, size_class, datastore_pool,
                datastore_labels, datastore_name, offload, addons, labels, phase, status, generation, deleted_at,
                created_at, updated_at
         from control_planes where tenant_id = $1 and id = $2 and deleted_at is null for update",
        tenant,
        id
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

/// Inserts an operation (pending).
pub async fn insert_operation(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
    kind: &str,
    request_id: Option<&str>,
) -> Result<OperationRow, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "insert into operations (id, tenant_id, control_plane_id, kind, request_id) values ($1, $2, $3, $4, $5)
         returning id, tenant_id, control_plane_id, kind, state, error, request_id, created_at, updated_at",
        Uuid::new_v4(),
        tenant,
        control_plane,
        kind,
        request_id
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// An operation of `tenant`.
pub async fn operation(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select id, tenant_id, control_plane_id, kind, state, error, request_id, created_at, updated_at
         from operations where tenant_id = $1 and id = $2",
        tenant,
        id
    )
    .fetch_optional(db)
    .await?)
}

/// The pending or running delete of a control plane, if any.
pub async fn open_delete(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
) -> Result<Option<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select id, tenant_id, control_plane_id, kind, state, error, request_id, created_at, updated_at
         from operations where tenant_id = $1 and control_plane_id = $2 and kind = 'delete'
           and state in ('pending', 'running')
         order by created_at desc limit 1",
        tenant,
        control_plane
    )
    .fetch_optional(&mut *tx)
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

/// The newest operation of each of `tenant`'s control planes in `ids` (one query for a whole page).
pub async fn latest_operations(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<Vec<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        "select distinct on (control_plane_id)
                id, tenant_id, control_plane_id, kind, state, error, request_id, created_at, updated_at
         from operations where tenant_id = $1 and control_plane_id = any($2)
         order by control_plane_id, created_at desc, id desc",
        tenant,
        ids
    )
    .fetch_all(db)
    .await?)
}

/// The `per` newest operations of each of `tenant`'s control planes in `ids`, newest first (one query).
pub async fn recent_operations(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[Uuid],
    per: i64,
) -> Result<Vec<OperationRow>, StoreError> {
    Ok(sqlx::query_as!(
        OperationRow,
        r#"select id as "id!", tenant_id as "tenant_id!", control_plane_id as "control_plane_id!", kind as "kind!",
                  state as "state!", error, request_id, created_at as "created_at!", updated_at as "updated_at!"
           from (select o.*, row_number() over (partition by control_plane_id order by created_at desc, id desc) as n
                 from operations o where tenant_id = $1 and control_plane_id = any($2)) r
           where n <= $3
           order by control_plane_id, created_at desc, id desc"#,
        tenant,
        ids,
        per
    )
    .fetch_all(db)
    .await?)
}
