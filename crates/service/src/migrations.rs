//! Moving a control plane to another DataStore, live (platform admin): the guard rails, the target's
//! reservation, the `migrate` operation and the spec change the worker renders.

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Ctx, FieldError, Result, ServiceError, model::Accepted, platform_admin};
use crate::auth::Principal;
use crate::domain::{Name, OperationKind, Role};
use tenantplane_core::placement::{self as placement, OverrideDecision, PlacementConfig, SizeClass};
use tenantplane_store::{self as store, placements::LoadRow};

/// A migration's deadline: long enough for a large copy (the controller reports every stage meanwhile).
pub const DEADLINE_SECONDS: i64 = 86_400;

/// The message of a refused cross-driver migration.
pub const CROSS_DRIVER: &str =
    "etcd ↔ SQL migration is not supported: resourceVersions cannot be carried across";

/// What a migration does with the override DataStores' data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverridesPolicy {
    /// The new override spaces start empty (default).
    #[default]
    Drop,
    /// Each override space is copied to its new DataStore during the freeze (422 naming `overrides`
    /// when the re-placement would split or merge spaces).
    Move,
}

impl OverridesPolicy {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Move => "move",
        }
    }
}

/// Body of `POST /tenants/{tenant}/control-planes/{id}/migrate`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrateControlPlane {
    /// The DataStore to move to: same driver as the current one, ready, uncordoned, with capacity.
    pub target: String,
    /// What happens to the override DataStores' data when they are re-placed (a target with another etcd
    /// CA): `drop` (default) or `move`.
    #[serde(default)]
    pub overrides: OverridesPolicy,
}

/// Starts moving control plane `id` of tenant `slug` to `input.target` (platform admin): 202 with the
/// `migrate` operation, recorded with the target's reservation in the caller's transaction.
pub async fn start(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    (slug, id): (&str, &str),
    input: MigrateControlPlane,
    request_id: Option<&str>,
) -> Result<Accepted> {
    let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantViewer).await?;
    platform_admin(who)?;
    check(&input)?;
    let key = super::stored::control_plane_key(id);
    let cp = store::control_planes::get_for_update(tx, tenant.id, key)
        .await?
        .ok_or(ServiceError::NotFound("control plane"))?;
    let actor = who.actor();
    let how = Begin {
        placement: &ctx.placement,
        deadline_seconds: DEADLINE_SECONDS.max(ctx.limits.operation_deadline_seconds),
        actor: &actor,
        request_id,
        parent: None,
    };
    let (op, row) = begin(tx, &how, &cp, &input).await?;
    accepted(tx, op, row).await
}

/// The answer of a migration write: the operation and the control plane as recorded.
async fn accepted(
    tx: &mut PgConnection,
    op: store::operations::OperationRow,
    row: store::control_planes::ControlPlaneRow,
) -> Result<Accepted> {
    let models = super::stored::with_placements_in(&mut *tx, row.tenant_id, vec![row]).await?;
    Ok(Accepted {
        operation: super::stored::operation_model(op),
        control_plane: models
            .into_iter()
            .next()
            .ok_or(ServiceError::NotFound("control plane"))?,
    })
}

/// The checks of a migration request that need no state: a DataStore name.
pub fn check(input: &MigrateControlPlane) -> Result<()> {
    Name::parse("target", &input.target)?;
    Ok(())
}

/// How a migration starts: the placement settings, its deadline, who asked, and the drain or rebalance it
/// belongs to.
#[derive(Debug, Clone, Copy)]
pub struct Begin<'a> {
    /// Placement settings (override re-placement).
    pub placement: &'a PlacementConfig,
    /// Seconds until the operation fails unless done.
    pub deadline_seconds: i64,
    /// Who asked (audited).
    pub actor: &'a str,
    /// Request id of the call that asked.
    pub request_id: Option<&'a str>,
    /// The parent operation, for a drain's or rebalance's child.
    pub parent: Option<Uuid>,
}

/// Starts moving the locked control plane `cp` to `input.target` (checked with [`check`]): the guard
/// rails, the reservation, the `migrate` operation, the outbox row and the audit entry. Returns the
/// operation and the control plane at its new generation.
pub async fn begin(
    tx: &mut PgConnection,
    how: &Begin<'_>,
    cp: &store::control_planes::ControlPlaneRow,
    input: &MigrateControlPlane,
) -> Result<(
    store::operations::OperationRow,
    store::control_planes::ControlPlaneRow,
)> {
    if cp.phase == "Deleting" {
        return Err(ServiceError::Conflict(
            "the control plane is being deleted".into(),
        ));
    }
    if let Some((op, kind)) = store::migrations::open_operation(&mut *tx, cp.id).await? {
        return Err(ServiceError::ConflictFields(vec![FieldError::new(
            "target",
            format!("the control plane has an open {kind} operation ({op}); wait until it is done"),
        )]));
    }
    let planned = plan(how.placement, tx, cp, input).await?;
    let row = bump(tx, cp.tenant_id, cp.id).await?;
    let op = record(how.deadline_seconds, tx, &row, how.request_id).await?;
    store::migrations::insert(
        tx,
        &store::migrations::NewMigration {
            operation: op.id,
            tenant: cp.tenant_id,
            control_plane: cp.id,
            source: planned.source,
            target: planned.target,
            overrides_policy: input.overrides.as_str(),
            overrides: &planned.overrides,
            reserved: &planned.reserved,
        },
    )
    .await
    .map_err(|e| match e {
        store::StoreError::Conflict(_) => ServiceError::ConflictFields(vec![FieldError::new(
            "target",
            "the control plane is already migrating",
        )]),
        e => e.into(),
    })?;
    let mut details = serde_json::json!({"source": planned.source_name, "target": input.target,
                                         "overrides": input.overrides.as_str(), "operation": op.id});
    if let Some(parent) = how.parent {
        details["parent"] = serde_json::json!(parent);
    }
    store::audit(
        &mut *tx,
        Some(cp.tenant_id),
        how.actor,
        "control-plane.migrate",
        "control-plane",
        &cp.id.to_string(),
        how.request_id,
        details,
    )
    .await?;
    Ok((op, row))
}

/// The stages after which a migration can no longer be aborted: the tenant serves from the target.
const SWITCHED: [&str; 3] = ["switching", "verifying", "done"];

/// Aborts the open migration of control plane `id` of tenant `slug` before its switch (platform admin):
/// the source is rendered again, the controller thaws it and removes the target space and reports
/// `Aborted`, and the `migrate` operation fails with reason `MigrationAborted`. A migration the controller
/// has not started copying ends here. 409 naming the stage once it reached `switching`.
pub async fn abort(
    tx: &mut PgConnection,
    who: &Principal,
    (slug, id): (&str, &str),
    request_id: Option<&str>,
) -> Result<Accepted> {
    let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantViewer).await?;
    platform_admin(who)?;
    let key = super::stored::control_plane_key(id);
    let cp = store::control_planes::get_for_update(tx, tenant.id, key)
        .await?
        .ok_or(ServiceError::NotFound("control plane"))?;
    let open = store::migrations::open(&mut *tx, cp.id)
        .await?
        .ok_or_else(|| ServiceError::Conflict("the control plane has no open migration to abort".into()))?;
    let reached = store::migrations::lock_stages(tx, open.operation_id)
        .await?
        .ok_or_else(|| ServiceError::Conflict("the control plane has no open migration to abort".into()))?;
    if let Some(stage) = reached.iter().rev().find(|s| SWITCHED.contains(&s.as_str())) {
        return Err(ServiceError::Conflict(format!(
            "the migration to {} has reached stage {stage}: the control plane serves from the target, so it can no longer be aborted",
            open.target
        )));
    }
    if !open.aborted {
        store::migrations::abort(tx, cp.id).await?;
        // Not copying yet: nothing to unwind on the DataStores, so it ends now (a controller that did
        // start meanwhile sees the source again and unwinds on its own).
        if !reached.iter().any(|s| s != "placed") {
            store::migrations::release(tx, cp.id).await?;
            let message = format!("aborted before copying to {} started", open.target);
            store::operations::end(
                tx,
                open.operation_id,
                store::operations::End::Failed("MigrationAborted", &message),
            )
            .await?;
        }
        let row = bump(tx, tenant.id, cp.id).await?;
        store::control_planes::enqueue(
            tx,
            tenant.id,
            cp.id,
            open.operation_id,
            "apply",
            &serde_json::json!({"generation": row.generation}),
        )
        .await?;
        store::audit(
            &mut *tx,
            Some(tenant.id),
            &who.actor(),
            "control-plane.migration-abort",
            "control-plane",
            &cp.id.to_string(),
            request_id,
            serde_json::json!({"operation": open.operation_id, "source": open.source, "target": open.target,
                               "stages": reached}),
        )
        .await?;
    }
    let op = store::operations::get(&mut *tx, tenant.id, open.operation_id)
        .await?
        .ok_or(ServiceError::NotFound("operation"))?;
    let row = store::control_planes::get_for_update(tx, tenant.id, key)
        .await?
        .ok_or(ServiceError::NotFound("control plane"))?;
    accepted(tx, op, row).await
}

/// What a migration reserves and renders.
struct Planned {
    source: Uuid,
    source_name: String,
    target: Uuid,
    overrides: Vec<(String, Uuid)>,
    reserved: Vec<Uuid>,
}

/// Checks the target against the source under the DataStore row locks, and re-places the overrides when
/// the target's etcd CA differs from theirs (or the target holds one).
async fn plan(
    config: &PlacementConfig,
    tx: &mut PgConnection,
    cp: &store::control_planes::ControlPlaneRow,
    input: &MigrateControlPlane,
) -> Result<Planned> {
    let placed = store::outbox::placement(tx, cp.id)
        .await?
        .ok_or_else(|| ServiceError::Conflict("the control plane has no placement yet".into()))?;
    let (source_name, current_overrides) = placed;
    let field = |message: String| FieldError::new("target", message);
    if input.target == source_name {
        return Err(ServiceError::Invalid(vec![field(format!(
            "{source_name} is already the control plane's DataStore"
        ))]));
    }
    let rows = store::placements::snapshot(&mut *tx).await?;
    let find = |name: &str| rows.iter().find(|r| r.name == name);
    let target = find(&input.target)
        .ok_or_else(|| {
            ServiceError::Invalid(vec![field(format!(
                "there is no DataStore named {}",
                input.target
            ))])
        })?
        .clone();
    let source = find(&source_name)
        .ok_or(ServiceError::NotFound("datastore"))?
        .clone();
    if source.driver == "NATS" || target.driver == "NATS" {
        return Err(ServiceError::Invalid(vec![field(
            "NATS DataStores cannot be migrated: a NATS bucket's revisions cannot be carried to another server".into(),
        )]));
    }
    if (source.driver == "etcd") != (target.driver == "etcd") {
        return Err(ServiceError::Invalid(vec![field(CROSS_DRIVER.into())]));
    }
    if source.driver != target.driver {
        return Err(ServiceError::Invalid(vec![field(format!(
            "{} → {} migration is not supported: the target must use the source's driver ({})",
            source.driver, target.driver, source.driver
        ))]));
    }
    let overrides: Vec<OverrideDecision> = current_overrides
        .iter()
        .map(|(resource, data_store)| OverrideDecision {
            resource: resource.clone(),
            data_store: data_store.clone(),
        })
        .collect();
    let snapshot = super::placement::snapshot_of(&rows);
    let size = cp.size_class.parse().unwrap_or(SizeClass::Small);
    let new_overrides = placement::retarget_overrides(
        &snapshot,
        config,
        &cp.id.to_string(),
        size,
        &source_name,
        &input.target,
        &overrides,
    )
    .map_err(|e| ServiceError::ConflictFields(vec![field(e.to_string())]))?;
    if input.overrides == OverridesPolicy::Move {
        placement::carried_overrides(&overrides, &new_overrides, &source_name, &input.target)
            .map_err(|message| ServiceError::Invalid(vec![FieldError::new("overrides", message)]))?;
    }
    let id_of = |name: &str| find(name).map(|r| r.id);
    let new_ids: Vec<(String, Uuid)> = new_overrides
        .iter()
        .filter_map(|o| Some((o.resource.clone(), id_of(&o.data_store)?)))
        .collect();
    let used: Vec<Uuid> = std::iter::once(source.id)
        .chain(current_overrides.iter().filter_map(|(_, n)| id_of(n)))
        .collect();
    let mut reserved: Vec<Uuid> = std::iter::once(target.id)
        .chain(new_ids.iter().map(|(_, id)| *id))
        .filter(|id| !used.contains(id))
        .collect();
    reserved.sort();
    reserved.dedup();
    store::migrations::lock(tx, &reserved).await?;
    let fresh = store::placements::snapshot(&mut *tx).await?;
    for id in &reserved {
        if let Some(row) = fresh.iter().find(|r| r.id == *id) {
            check_room(row, *id == target.id)?;
        }
    }
    store::migrations::reserve(tx, &reserved).await?;
    Ok(Planned {
        source: source.id,
        source_name,
        target: target.id,
        overrides: new_ids,
        reserved,
    })
}

/// Whether DataStore `row` can take one more tenant now: ready, uncordoned, below capacity, and empty in a
/// `dedicated` pool; 409 naming `target` (or `overrides` for a new override DataStore) otherwise.
pub(crate) fn check_room(row: &LoadRow, is_target: bool) -> Result<()> {
    let name = if is_target { "target" } else { "overrides" };
    let problem = if !row.ready {
        Some(format!("DataStore {} is not ready", row.name))
    } else if row.cordoned {
        Some(format!("DataStore {} is cordoned", row.name))
    } else if row.load_tenants >= i64::from(row.capacity_tenants) {
        Some(format!(
            "DataStore {} is at capacity ({} of {} tenants)",
            row.name, row.load_tenants, row.capacity_tenants
        ))
    } else if row.policy == "dedicated" && row.load_tenants > 0 {
        Some(format!(
            "DataStore {} is in a dedicated pool and holds a tenant",
            row.name
        ))
    } else {
        None
    };
    match problem {
        Some(message) => Err(ServiceError::ConflictFields(vec![FieldError::new(name, message)])),
        None => Ok(()),
    }
}

/// Bumps the control plane's generation: the TCP's spec changes (a new `spec.dataStore`).
async fn bump(
    tx: &mut PgConnection,
    tenant: Uuid,
    id: Uuid,
) -> Result<store::control_planes::ControlPlaneRow> {
    let row = store::control_planes::get_for_update(
        tx,
        tenant,
        store::control_planes::ControlPlaneKey {
            id: Some(id),
            name: None,
        },
    )
    .await?
    .ok_or(ServiceError::NotFound("control plane"))?;
    let labels = row.labels.clone();
    Ok(
        store::control_planes::update_spec(tx, tenant, id, &row.kubernetes_version, row.replicas, &labels)
            .await?,
    )
}

/// Records the `migrate` operation and the outbox row that renders the target.
async fn record(
    deadline_seconds: i64,
    tx: &mut PgConnection,
    row: &store::control_planes::ControlPlaneRow,
    request_id: Option<&str>,
) -> Result<store::operations::OperationRow> {
    let new = store::operations::NewOperation {
        kind: OperationKind::Migrate.as_str(),
        generation: row.generation,
        first_stage: super::operations::first_stage(OperationKind::Migrate).as_str(),
        deadline_seconds: deadline_seconds as f64,
    };
    let op = store::operations::insert(tx, row.tenant_id, row.id, new, request_id).await?;
    store::control_planes::enqueue(
        tx,
        row.tenant_id,
        row.id,
        op.id,
        "apply",
        &serde_json::json!({"generation": row.generation}),
    )
    .await?;
    Ok(op)
}
