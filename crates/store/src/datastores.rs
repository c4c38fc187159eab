//! Pools and DataStores (platform-admin managed; Secret references only).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
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

/// A page of pools ordered by `(created_at, id)`.
pub async fn pools_page(
    db: impl PgExecutor<'_>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> Result<Vec<PoolRow>, StoreError> {
    let (after_ts, after_id) = after.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        PoolRow,
        "select id, name, policy, labels, created_at from pools
         where ($1::timestamptz is null or (created_at, id) > ($1, $2::uuid))
         order by created_at, id
         limit $3",
        after_ts,
        after_id,
        limit
    )
    .fetch_all(db)
    .await?)
}

/// Filters and position of a DataStore page.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only DataStores in this pool.
    pub pool: Option<String>,
    /// Only this driver.
    pub driver: Option<String>,
    /// Only cordoned (true) or uncordoned (false) DataStores.
    pub cordoned: Option<bool>,
    /// After this `(created_at, id)`.
    pub after: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// A page of DataStores ordered by `(created_at, id)`.
pub async fn page(db: impl PgExecutor<'_>, q: &ListQuery) -> Result<Vec<DataStoreRow>, StoreError> {
    let (after_ts, after_id) = q.after.map(|(t, i)| (Some(t), Some(i))).unwrap_or((None, None));
    Ok(sqlx::query_as!(
        DataStoreRow,
        r#"select d.id, d.name, p.name as "pool?", d.driver, d.endpoints, d.secret_refs, d.labels, d.capacity_tenants,
                  d.capacity_bytes, d.ca_id, d.ready, d.cordoned, d.created_at
           from datastores d left join pools p on p.id = d.pool_id
           where ($1::text is null or p.name = $1)
             and ($2::text is null or d.driver = $2)
             and ($3::bool is null or d.cordoned = $3)
             and ($4::timestamptz is null or (d.created_at, d.id) > ($4, $5::uuid))
           order by d.created_at, d.id
           limit $6"#,
        q.pool,
        q.driver,
        q.cordoned,
        after_ts,
        after_id,
        q.limit
    )
    .fetch_all(db)
    .await?)
}

/// Changes a pool's policy and labels (what is given); returns the row, or None without such a pool.
pub async fn update_pool(
    db: impl PgExecutor<'_>,
    name: &str,
    policy: Option<&str>,
    labels: Option<&serde_json::Value>,
) -> Result<Option<PoolRow>, StoreError> {
    if name.contains('\0') {
        return Ok(None);
    }
    Ok(sqlx::query_as!(
        PoolRow,
        "update pools set policy = coalesce($2, policy), labels = coalesce($3, labels), updated_at = now()
         where name = $1 returning id, name, policy, labels, created_at",
        name,
        policy,
        labels
    )
    .fetch_optional(db)
    .await?)
}

/// Who uses something, for a refused delete: how many, and the first few names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Users {
    /// How many.
    pub count: i64,
    /// The first names, ordered.
    pub names: Vec<String>,
}

/// Locks pool `name` until the transaction ends and names its DataStores (at most `cap`); None without
/// such a pool.
pub async fn lock_pool_users(
    tx: &mut PgConnection,
    name: &str,
    cap: i64,
) -> Result<Option<(Uuid, Users)>, StoreError> {
    if name.contains('\0') {
        return Ok(None);
    }
    let Some(id) = sqlx::query_scalar!("select id from pools where name = $1 for update", name)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let count = sqlx::query_scalar!(
        r#"select count(*) as "n!" from datastores where pool_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    let names = sqlx::query_scalar!(
        "select name from datastores where pool_id = $1 order by name limit $2",
        id,
        cap
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(Some((id, Users { count, names })))
}

/// Removes pool `id`.
pub async fn delete_pool(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), StoreError> {
    sqlx::query!("delete from pools where id = $1", id)
        .execute(db)
        .await?;
    Ok(())
}

/// A DataStore's changeable settings (what is `Some` changes).
#[derive(Debug, Clone, Default)]
pub struct DataStoreChange {
    /// Pool id.
    pub pool_id: Option<Uuid>,
    /// Labels.
    pub labels: Option<serde_json::Value>,
    /// Capacity in tenants.
    pub capacity_tenants: Option<i32>,
    /// Capacity in bytes.
    pub capacity_bytes: Option<i64>,
}

/// Changes a DataStore; returns whether it exists.
pub async fn update(db: impl PgExecutor<'_>, name: &str, c: &DataStoreChange) -> Result<bool, StoreError> {
    if name.contains('\0') {
        return Ok(false);
    }
    let done = sqlx::query!(
        "update datastores set pool_id = coalesce($2, pool_id), labels = coalesce($3, labels),
                capacity_tenants = coalesce($4, capacity_tenants), capacity_bytes = coalesce($5, capacity_bytes),
                updated_at = now()
         where name = $1",
        name,
        c.pool_id,
        c.labels,
        c.capacity_tenants,
        c.capacity_bytes
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Locks DataStore `name` until the transaction ends (placement takes the same lock) and names the
/// control planes placed on it, as primary or override (`tenant/name`, at most `cap`); None without such
/// a DataStore.
pub async fn lock_datastore_users(
    tx: &mut PgConnection,
    name: &str,
    cap: i64,
) -> Result<Option<(Uuid, Users)>, StoreError> {
    if name.contains('\0') {
        return Ok(None);
    }
    let Some(id) = sqlx::query_scalar!("select id from datastores where name = $1 for update", name)
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let rows = sqlx::query!(
        r#"with u as (select control_plane_id from placements where datastore_id = $1
                      union select control_plane_id from placement_overrides where datastore_id = $1)
           select t.slug || '/' || c.name as "name!", count(*) over () as "count!"
           from u join control_planes c on c.id = u.control_plane_id join tenants t on t.id = c.tenant_id
           order by 1 limit $2"#,
        id,
        cap
    )
    .fetch_all(&mut *tx)
    .await?;
    let count = rows.first().map_or(0, |r| r.count);
    let names = rows.into_iter().map(|r| r.name).collect();
    Ok(Some((id, Users { count, names })))
}

/// Removes DataStore `id`.
pub async fn delete(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), StoreError> {
    sqlx::query!("delete from datastores where id = $1", id)
        .execute(db)
        .await?;
    Ok(())
}
