//! Placements: which DataStores hold each control plane, reserved under row locks.

use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use super::StoreError;

/// A DataStore with its pool and current load, as the placement engine reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadRow {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Pool name.
    pub pool: String,
    /// Pool policy.
    pub policy: String,
    /// Driver.
    pub driver: String,
    /// Labels.
    pub labels: serde_json::Value,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub cordoned: bool,
    /// Capacity in tenants.
    pub capacity_tenants: i32,
    /// Capacity in bytes.
    pub capacity_bytes: Option<i64>,
    /// CA identity.
    pub ca_id: Option<String>,
    /// Control planes using it as primary or override.
    pub load_tenants: i64,
}

/// Every pooled DataStore with its load, after locking every DataStore row (`FOR UPDATE`, in id order) so
/// that concurrent placements serialize and never oversubscribe one. The load is read by a second
/// statement: under READ COMMITTED it gets a fresh snapshot that includes placements committed while
/// this transaction waited for the locks (a subquery of the locking statement would not).
pub async fn lock_snapshot(tx: &mut PgConnection) -> Result<Vec<LoadRow>, StoreError> {
    sqlx::query!("select id from datastores order by id for update")
        .fetch_all(&mut *tx)
        .await?;
    snapshot(&mut *tx).await
}

/// The same without locks (simulations and drain plans).
pub async fn snapshot(db: impl PgExecutor<'_>) -> Result<Vec<LoadRow>, StoreError> {
    Ok(sqlx::query_as!(
        LoadRow,
        r#"select d.id, d.name, p.name as pool, p.policy, d.driver, d.labels, d.ready, d.cordoned, d.capacity_tenants,
                  d.capacity_bytes, d.ca_id,
                  d.load_tenants::bigint as "load_tenants!"
           from datastores d join pools p on p.id = d.pool_id
           order by p.name, d.name"#
    )
    .fetch_all(db)
    .await?)
}

/// A placement to reserve without the all-rows lock (see [`try_reserve`]).
#[derive(Debug)]
pub struct Reservation<'a> {
    /// Tenant of the control plane.
    pub tenant: Uuid,
    /// The control plane.
    pub control_plane: Uuid,
    /// Primary DataStore.
    pub datastore: Uuid,
    /// Its driver.
    pub driver: &'a str,
    /// `(resource, DataStore)` overrides.
    pub overrides: &'a [(String, Uuid)],
    /// Chosen DataStores that must hold no tenant yet (NATS, `Dedicated` pools).
    pub exclusive: &'a [Uuid],
    /// The engine's decision, stored with the placement.
    pub decision: &'a serde_json::Value,
}

/// Reserves a placement decided on an unlocked snapshot, in one statement: locks the chosen DataStore
/// rows (id order, like every other path), raises their load only where each is still ready, uncordoned,
/// below capacity and, if exclusive, empty (READ COMMITTED re-checks those conditions on the latest
/// committed row), and records the placement only if every chosen row passed. Returns false when one
/// did not, after rolling back to a savepoint taken first: that releases the chosen rows' locks, so the
/// caller's all-rows lock (in id order) cannot deadlock with another create holding a row it wants.
/// `turn` is awaited after the savepoint and held over the locking statement only (a caller's queue).
pub async fn try_reserve<T>(
    tx: &mut PgConnection,
    r: &Reservation<'_>,
    turn: impl Future<Output = T>,
) -> Result<bool, StoreError> {
    sqlx::query("savepoint optimistic_placement")
        .execute(&mut *tx)
        .await?;
    let mut chosen: Vec<Uuid> = r
        .overrides
        .iter()
        .map(|(_, ds)| *ds)
        .chain(std::iter::once(r.datastore))
        .collect();
    chosen.sort();
    chosen.dedup();
    let (resources, override_ids): (Vec<String>, Vec<Uuid>) = r.overrides.iter().cloned().unzip();
    let turn = turn.await;
    let placed = sqlx::query_scalar!(
        r#"with locked as (
             select id from datastores where id = any($3) order by id for update
           ), reserved as (
             update datastores d set load_tenants = d.load_tenants + 1
             from locked
             where d.id = locked.id and d.ready and not d.cordoned and d.load_tenants < d.capacity_tenants
               and (d.load_tenants = 0 or not d.id = any($4))
             returning d.id
           ), placed as (
             insert into placements (control_plane_id, tenant_id, datastore_id, driver, decision)
             select $1, $2, $5, $6, $7
             where (select count(*) from reserved) = cardinality($3::uuid[])
             returning control_plane_id
           ), overridden as (
             insert into placement_overrides (control_plane_id, resource, datastore_id)
             select $1, o.resource, o.datastore_id from unnest($8::text[], $9::uuid[]) as o(resource, datastore_id)
             where exists (select 1 from placed)
           )
           select exists (select 1 from placed) as "placed!""#,
        r.control_plane,
        r.tenant,
        &chosen,
        r.exclusive,
        r.datastore,
        r.driver,
        r.decision,
        &resources,
        &override_ids
    )
    .fetch_one(&mut *tx)
    .await?;
    drop(turn);
    if !placed {
        sqlx::query("rollback to savepoint optimistic_placement")
            .execute(&mut *tx)
            .await?;
    }
    Ok(placed)
}

/// Records a placement and its overrides.
pub async fn insert(
    tx: &mut PgConnection,
    tenant: Uuid,
    control_plane: Uuid,
    datastore: Uuid,
    driver: &str,
    overrides: &[(String, Uuid)],
    decision: &serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query!(
        "insert into placements (control_plane_id, tenant_id, datastore_id, driver, decision) values ($1, $2, $3, $4, $5)",
        control_plane,
        tenant,
        datastore,
        driver,
        decision
    )
    .execute(&mut *tx)
    .await?;
    let mut used: Vec<Uuid> = overrides
        .iter()
        .map(|(_, ds)| *ds)
        .chain(std::iter::once(datastore))
        .collect();
    used.sort();
    used.dedup();
    sqlx::query!(
        "update datastores set load_tenants = load_tenants + 1 where id = any($1)",
        &used
    )
    .execute(&mut *tx)
    .await?;
    for (resource, ds) in overrides {
        sqlx::query!(
            "insert into placement_overrides (control_plane_id, resource, datastore_id) values ($1, $2, $3)",
            control_plane,
            resource,
            ds
        )
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// A control plane's placement as shown in the API.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementRow {
    /// Control plane.
    pub control_plane_id: Uuid,
    /// Primary DataStore name.
    pub datastore: String,
    /// `[{resource, dataStore}]` in order.
    pub overrides: serde_json::Value,
    /// The decision with its reasons.
    pub decision: serde_json::Value,
}

/// Placements of a tenant's control planes (one query for a whole page).
pub async fn for_control_planes(
    db: impl PgExecutor<'_>,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<Vec<PlacementRow>, StoreError> {
    Ok(sqlx::query_as!(
        PlacementRow,
        r#"select p.control_plane_id, d.name as datastore,
                  coalesce((select jsonb_agg(jsonb_build_object('resource', o.resource, 'dataStore', od.name)
                                             order by case o.resource when '/events' then 0 else 1 end, o.resource)
                            from placement_overrides o join datastores od on od.id = o.datastore_id
                            where o.control_plane_id = p.control_plane_id), '[]'::jsonb) as "overrides!",
                  p.decision
           from placements p join datastores d on d.id = p.datastore_id
           where p.tenant_id = $1 and p.control_plane_id = any($2)"#,
        tenant,
        ids
    )
    .fetch_all(db)
    .await?)
}

/// Every placement on a DataStore (primary or override): `(control plane id, size class, role)`.
pub async fn on_datastore(
    db: impl PgExecutor<'_>,
    datastore: Uuid,
) -> Result<Vec<(Uuid, String, String, Option<String>, serde_json::Value)>, StoreError> {
    let rows = sqlx::query!(
        r#"select c.id, c.size_class, d.name as primary_name, o.resource as "resource?", c.datastore_labels
           from control_planes c
           join placements p on p.control_plane_id = c.id
           join datastores d on d.id = p.datastore_id
           left join placement_overrides o on o.control_plane_id = c.id and o.datastore_id = $1
           where c.deleted_at is null and (p.datastore_id = $1 or o.datastore_id = $1)
           order by c.created_at, c.id"#,
        datastore
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.id, r.size_class, r.primary_name, r.resource, r.datastore_labels))
        .collect())
}

/// Releases a deleted control plane's placement: its DataStores' load goes down (locks taken in id order,
/// as placement takes them) and its placement rows are removed. Idempotent.
pub async fn release(tx: &mut PgConnection, tenant: Uuid, control_plane: Uuid) -> Result<(), StoreError> {
    // An open migration's reservation goes with it.
    super::migrations::release(tx, control_plane).await?;
    let used: Vec<Uuid> = sqlx::query_scalar!(
        r#"select d.id as "id!" from datastores d
           where d.id in (select datastore_id from placements where control_plane_id = $1 and tenant_id = $2
                          union select datastore_id from placement_overrides where control_plane_id = $1)
           order by d.id for update"#,
        control_plane,
        tenant
    )
    .fetch_all(&mut *tx)
    .await?;
    if used.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        "update datastores set load_tenants = greatest(load_tenants - 1, 0) where id = any($1)",
        &used
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "delete from placement_overrides where control_plane_id = $1",
        control_plane
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "delete from placements where control_plane_id = $1 and tenant_id = $2",
        control_plane,
        tenant
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
