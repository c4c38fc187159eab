//! Pools and DataStores (platform-admin managed; Secret references only).

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::StoreError;

/// A pool row.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolRow {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Placement policy.
    pub policy: String,
    /// Labels.
    pub labels: serde_json::Value,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// A DataStore row.
#[derive(Debug, Clone, PartialEq)]
pub struct DataStoreRow {
    /// Id.
    pub id: Uuid,
    /// Name (also the Kubernetes DataStore name).
    pub name: String,
    /// Pool name.
    pub pool: Option<String>,
    /// Driver.
    pub driver: String,
    /// Endpoints.
    pub endpoints: Vec<String>,
    /// Secret references (never values).
    pub secret_refs: serde_json::Value,
    /// Labels.
    pub labels: serde_json::Value,
    /// Capacity in tenants.
    pub capacity_tenants: i32,
    /// Optional capacity in bytes.
    pub capacity_bytes: Option<i64>,
    /// CA identity.
    pub ca_id: Option<String>,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub cordoned: bool,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// Inserts a pool.
pub async fn insert_pool(
    db: impl PgExecutor<'_>,
    name: &str,
    policy: &str,
    labels: &serde_json::Value,
) -> Result<PoolRow, StoreError> {
    Ok(sqlx::query_as!(
        PoolRow,
        "insert into pools (id, name, policy, labels) values ($1, $2, $3, $4) returning id, name, policy, labels, created_at",
        Uuid::new_v4(),
        name,
        policy,
        labels
    )
    .fetch_one(db)
    .await?)
}

/// Every pool, by name.
pub async fn pools(db: impl PgExecutor<'_>) -> Result<Vec<PoolRow>, StoreError> {
    Ok(sqlx::query_as!(
        PoolRow,
        "select id, name, policy, labels, created_at from pools order by name"
    )
    .fetch_all(db)
    .await?)
}

/// A pool by name.
pub async fn pool(db: impl PgExecutor<'_>, name: &str) -> Result<Option<PoolRow>, StoreError> {
    if name.contains('\0') {
        return Ok(None);
    }
    Ok(sqlx::query_as!(
        PoolRow,
        "select id, name, policy, labels, created_at from pools where name = $1",
        name
    )
    .fetch_optional(db)
    .await?)
}

/// A new DataStore.
#[derive(Debug, Clone)]
pub struct NewDataStore {
    /// Name.
    pub name: String,
    /// Pool id.
    pub pool_id: Option<Uuid>,
    /// Driver.
    pub driver: String,
    /// Endpoints.
    pub endpoints: Vec<String>,
    /// Secret references.
    pub secret_refs: serde_json::Value,
    /// Labels.
    pub labels: serde_json::Value,
    /// Capacity in tenants.
    pub capacity_tenants: i32,
    /// Capacity in bytes.
    pub capacity_bytes: Option<i64>,
    /// CA identity.
    pub ca_id: Option<String>,
}

/// Inserts a DataStore.
pub async fn insert(db: impl PgExecutor<'_>, ds: &NewDataStore) -> Result<Uuid, StoreError> {
    Ok(sqlx::query_scalar!(
        "insert into datastores (id, name, pool_id, driver, endpoints, secret_refs, labels, capacity_tenants, capacity_bytes, ca_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) returning id",
        Uuid::new_v4(),
        ds.name,
        ds.pool_id,
        ds.driver,
        &ds.endpoints,
        ds.secret_refs,
        ds.labels,
        ds.capacity_tenants,
        ds.capacity_bytes,
        ds.ca_id
    )
    .fetch_one(db)
    .await?)
}

/// Every DataStore, by name.
pub async fn list(db: impl PgExecutor<'_>) -> Result<Vec<DataStoreRow>, StoreError> {
    Ok(sqlx::query_as!(
        DataStoreRow,
        r#"select d.id, d.name, p.name as "pool?", d.driver, d.endpoints, d.secret_refs, d.labels, d.capacity_tenants,
                  d.capacity_bytes, d.ca_id, d.ready, d.cordoned, d.created_at
           from datastores d left join pools p on p.id = d.pool_id order by d.name"#
    )
    .fetch_all(db)
    .await?)
}

/// A DataStore by name.
pub async fn get(db: impl PgExecutor<'_>, name: &str) -> Result<Option<DataStoreRow>, StoreError> {
    if name.contains('\0') {
        return Ok(None);
    }
    Ok(sqlx::query_as!(
        DataStoreRow,
        r#"select d.id, d.name, p.name as "pool?", d.driver, d.endpoints, d.secret_refs, d.labels, d.capacity_tenants,
                  d.capacity_bytes, d.ca_id, d.ready, d.cordoned, d.created_at
           from datastores d left join pools p on p.id = d.pool_id where d.name = $1"#,
        name
    )
    .fetch_optional(db)
    .await?)
}

/// Sets the cordoned flag; returns whether the DataStore exists.
pub async fn set_cordoned(db: impl PgExecutor<'_>, name: &str, cordoned: bool) -> Result<bool, StoreError> {
    let done = sqlx::query!(
        "update datastores set cordoned = $2, updated_at = now() where name = $1",
        name,
        cordoned
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// How many control planes use each named DataStore, as primary or override: `(name, count)`.
pub async fn used_by(db: impl PgExecutor<'_>, names: &[String]) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = sqlx::query!(
        r#"select d.name, count(distinct u.control_plane_id) as "used_by!"
           from datastores d
           left join (select datastore_id, control_plane_id from placements
                      union all select datastore_id, control_plane_id from placement_overrides) u
             on u.datastore_id = d.id
           where d.name = any($1)
           group by d.name"#,
        names
    )
    .fetch_all(db)
    .await?;
    Ok(rows.into_iter().map(|r| (r.name, r.used_by)).collect())
}

/// Per named pool: how many DataStores it has and how many control planes use them: `(name, datastores,
/// used by)`.
pub async fn pool_usage(
    db: impl PgExecutor<'_>,
    names: &[String],
) -> Result<Vec<(String, i64, i64)>, StoreError> {
    let rows = sqlx::query!(
        r#"select p.name, count(distinct d.id) as "datastores!", count(distinct u.control_plane_id) as "used_by!"
           from pools p
           left join datastores d on d.pool_id = p.id
           left join (select datastore_id, control_plane_id from placements
                      union all select datastore_id, control_plane_id from placement_overrides) u
             on u.datastore_id = d.id
           where p.name = any($1)
           group by p.name"#,
        names
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.name, r.datastores, r.used_by))
        .collect())
}

/// Mirrors the cluster's readiness of the DataStore `name` into its row; returns whether it changed.
pub async fn set_ready(db: impl PgExecutor<'_>, name: &str, ready: bool) -> Result<bool, StoreError> {
    let done = sqlx::query!(
        "update datastores set ready = $2, updated_at = now() where name = $1 and ready is distinct from $2",
        name,
        ready
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}
