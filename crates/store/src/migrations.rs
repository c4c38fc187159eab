//! Migrations between DataStores: the DataStores a migration reserved at its start, what it renders while
//! open, and how its end moves or releases the load.

use sqlx::{PgConnection, PgExecutor, Row as _};
use uuid::Uuid;

use super::StoreError;

/// An open migration as the worker renders it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenMigration {
    /// Its operation.
    pub operation_id: Uuid,
    /// The source DataStore's name.
    pub source: String,
    /// The target DataStore's name.
    pub target: String,
    /// `drop` or `move`.
    pub overrides_policy: String,
    /// `(resource, DataStore name)` rendered with the target.
    pub overrides: Vec<(String, String)>,
    /// An abort was asked for: the source is rendered again until the migration ends.
    pub aborted: bool,
}

/// A migration to record.
#[derive(Debug, Clone)]
pub struct NewMigration<'a> {
    /// Its operation.
    pub operation: Uuid,
    /// Tenant.
    pub tenant: Uuid,
    /// Control plane.
    pub control_plane: Uuid,
    /// Source DataStore.
    pub source: Uuid,
    /// Target DataStore.
    pub target: Uuid,
    /// `drop` or `move`.
    pub overrides_policy: &'a str,
    /// `(resource, DataStore id)` rendered with the target.
    pub overrides: &'a [(String, Uuid)],
    /// DataStores whose load the start raised.
    pub reserved: &'a [Uuid],
}

/// Locks `ids` (id order, as placement locks) and raises the load of each one; the caller has checked them
/// under that lock ([`lock`]).
pub async fn reserve(tx: &mut PgConnection, ids: &[Uuid]) -> Result<(), StoreError> {
    sqlx::query("update datastores set load_tenants = load_tenants + 1 where id = any($1)")
        .bind(ids)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Locks the DataStore rows `ids` in id order (the order every placement path takes).
pub async fn lock(tx: &mut PgConnection, ids: &[Uuid]) -> Result<(), StoreError> {
    let mut sorted = ids.to_vec();
    sorted.sort();
    sqlx::query("select id from datastores where id = any($1) order by id for update")
        .bind(&sorted)
        .fetch_all(&mut *tx)
        .await?;
    Ok(())
}

/// Records a migration (open).
pub async fn insert(tx: &mut PgConnection, m: &NewMigration<'_>) -> Result<(), StoreError> {
    let overrides: Vec<serde_json::Value> = m
        .overrides
        .iter()
        .map(|(r, id)| serde_json::json!({"resource": r, "datastoreId": id}))
        .collect();
    sqlx::query(
        "insert into migrations (operation_id, tenant_id, control_plane_id, source_id, target_id, overrides_policy,
                                 overrides, reserved)
         values ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(m.operation)
    .bind(m.tenant)
    .bind(m.control_plane)
    .bind(m.source)
    .bind(m.target)
    .bind(m.overrides_policy)
    .bind(serde_json::Value::Array(overrides))
    .bind(m.reserved)
    .execute(&mut *tx)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(db) if db.constraint() == Some("migrations_one_open_idx") => {
            StoreError::Conflict("migrations_one_open_idx".into())
        }
        _ => e.into(),
    })?;
    Ok(())
}

/// Whether `control_plane` has an open operation (any kind): its operation id and kind.
pub async fn open_operation(
    db: impl PgExecutor<'_>,
    control_plane: Uuid,
) -> Result<Option<(Uuid, String)>, StoreError> {
    let row = sqlx::query(
        "select id, kind from operations where control_plane_id = $1 and state in ('pending', 'running')
         order by created_at limit 1",
    )
    .bind(control_plane)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|r| (r.get("id"), r.get("kind"))))
}

/// The open migration of a control plane, with DataStore names.
pub async fn open(db: impl PgExecutor<'_>, control_plane: Uuid) -> Result<Option<OpenMigration>, StoreError> {
    let row = sqlx::query(
        "select m.operation_id, s.name as source, t.name as target, m.overrides_policy,
                m.aborted_at is not null as aborted,
                coalesce((select jsonb_agg(jsonb_build_array(o ->> 'resource', d.name) order by o ->> 'resource')
                          from jsonb_array_elements(m.overrides) o
                          join datastores d on d.id = (o ->> 'datastoreId')::uuid), '[]'::jsonb) as overrides
         from migrations m join datastores s on s.id = m.source_id join datastores t on t.id = m.target_id
         where m.control_plane_id = $1 and m.open",
    )
    .bind(control_plane)
    .fetch_optional(db)
    .await?;
    let Some(r) = row else { return Ok(None) };
    let overrides: Vec<(String, String)> =
        serde_json::from_value(r.get::<serde_json::Value, _>("overrides")).unwrap_or_default();
    Ok(Some(OpenMigration {
        operation_id: r.get("operation_id"),
        source: r.get("source"),
        target: r.get("target"),
        overrides_policy: r.get("overrides_policy"),
        overrides,
        aborted: r.get("aborted"),
    }))
}

/// The open migration of a control plane, locked, with its raw ids: `(operation, target id, reserved)`.
async fn lock_open(
    tx: &mut PgConnection,
    control_plane: Uuid,
) -> Result<Option<(Uuid, Uuid, Vec<Uuid>, serde_json::Value)>, StoreError> {
    let row = sqlx::query(
        "select operation_id, target_id, reserved, overrides from migrations
         where control_plane_id = $1 and open for update",
    )
    .bind(control_plane)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|r| {
        (
            r.get("operation_id"),
            r.get("target_id"),
            r.get("reserved"),
            r.get("overrides"),
        )
    }))
}

/// A switched migration is done: the placement moves to the target and its overrides, and the load of every
/// DataStore the control plane no longer uses goes down (the target's was raised at the start). Returns
/// the operation, or `None` when no migration was open.
pub async fn complete(tx: &mut PgConnection, control_plane: Uuid) -> Result<Option<Uuid>, StoreError> {
    let Some((operation, target, _reserved, overrides)) = lock_open(tx, control_plane).await? else {
        return Ok(None);
    };
    let before: Vec<Uuid> = sqlx::query_scalar(
        "select datastore_id from placements where control_plane_id = $1
         union select datastore_id from placement_overrides where control_plane_id = $1",
    )
    .bind(control_plane)
    .fetch_all(&mut *tx)
    .await?;
    let new: Vec<(String, Uuid)> = overrides
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|o| {
                    let resource = o.get("resource")?.as_str()?.to_string();
                    let id = Uuid::parse_str(o.get("datastoreId")?.as_str()?).ok()?;
                    Some((resource, id))
                })
                .collect()
        })
        .unwrap_or_default();
    let after: Vec<Uuid> = new.iter().map(|(_, id)| *id).chain([target]).collect();
    let freed: Vec<Uuid> = before.into_iter().filter(|id| !after.contains(id)).collect();
    lock(tx, &freed).await?;
    sqlx::query("update datastores set load_tenants = greatest(load_tenants - 1, 0) where id = any($1)")
        .bind(&freed)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "update placements p set datastore_id = $2, driver = d.driver from datastores d
         where p.control_plane_id = $1 and d.id = $2",
    )
    .bind(control_plane)
    .bind(target)
    .execute(&mut *tx)
    .await?;
    sqlx::query("delete from placement_overrides where control_plane_id = $1")
        .bind(control_plane)
        .execute(&mut *tx)
        .await?;
    let (resources, ids): (Vec<String>, Vec<Uuid>) = new.into_iter().unzip();
    sqlx::query(
        "insert into placement_overrides (control_plane_id, resource, datastore_id)
         select $1, r, d from unnest($2::text[], $3::uuid[]) as o(r, d)",
    )
    .bind(control_plane)
    .bind(&resources)
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    // An explicit DataStore choice follows the control plane to its new home.
    sqlx::query(
        "update control_planes c set datastore_name = d.name from datastores d
         where c.id = $1 and d.id = $2 and c.datastore_name is not null",
    )
    .bind(control_plane)
    .bind(target)
    .execute(&mut *tx)
    .await?;
    close(tx, operation).await?;
    Ok(Some(operation))
}

/// A migration that ended before the switch (failed, aborted): the DataStores it reserved are released.
/// Returns the operation, or `None` when no migration was open.
pub async fn release(tx: &mut PgConnection, control_plane: Uuid) -> Result<Option<Uuid>, StoreError> {
    let Some((operation, _, reserved, _)) = lock_open(tx, control_plane).await? else {
        return Ok(None);
    };
    lock(tx, &reserved).await?;
    sqlx::query("update datastores set load_tenants = greatest(load_tenants - 1, 0) where id = any($1)")
        .bind(&reserved)
        .execute(&mut *tx)
        .await?;
    close(tx, operation).await?;
    Ok(Some(operation))
}

async fn close(tx: &mut PgConnection, operation: Uuid) -> Result<(), StoreError> {
    sqlx::query("update migrations set open = false, finished_at = now() where operation_id = $1")
        .bind(operation)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The stages an open migrate operation has reached (`stage` names), locked for update.
pub async fn lock_stages(tx: &mut PgConnection, operation: Uuid) -> Result<Option<Vec<String>>, StoreError> {
    let row: Option<serde_json::Value> = sqlx::query_scalar(
        "select stages from operations where id = $1 and state in ('pending', 'running') for update",
    )
    .bind(operation)
    .fetch_optional(&mut *tx)
    .await?;
    Ok(row.map(|stages| {
        stages
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|x| x.get("stage")?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }))
}

/// Stamps `stages` (not yet reached, in order) on operation `id`, marks it running, and `NOTIFY`s.
pub async fn stamp(tx: &mut PgConnection, id: Uuid, stages: &[&str]) -> Result<(), StoreError> {
    let stages: Vec<String> = stages.iter().map(|s| (*s).to_string()).collect();
    sqlx::query(
        "with changed as (
           update operations o
           set stages = o.stages || coalesce((select jsonb_agg(jsonb_build_object('stage', s, 'at', now()) order by i)
                                              from unnest($2::text[]) with ordinality as t(s, i)), '[]'::jsonb),
               state = 'running', updated_at = now()
           where o.id = $1 and o.state in ('pending', 'running')
           returning o.tenant_id, o.id
         )
         select pg_notify('operation_progress', tenant_id::text || ':' || id::text) from changed",
    )
    .bind(id)
    .bind(&stages)
    .fetch_all(&mut *tx)
    .await?;
    Ok(())
}

/// The names of the control planes whose open migration moves from, to or reserved DataStore `id`.
pub async fn open_on(tx: &mut PgConnection, id: Uuid) -> Result<Vec<String>, StoreError> {
    let rows = sqlx::query(
        "select cp.name from migrations m join control_planes cp on cp.id = m.control_plane_id
         where m.open and (m.source_id = $1 or m.target_id = $1 or $1 = any(m.reserved))
         order by cp.name",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows.iter().map(|r| r.get::<String, _>("name")).collect())
}

/// Marks the open migration of `control_plane` aborted (once); returns whether one was open.
pub async fn abort(tx: &mut PgConnection, control_plane: Uuid) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "update migrations set aborted_at = coalesce(aborted_at, now()) where control_plane_id = $1 and open",
    )
    .bind(control_plane)
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
