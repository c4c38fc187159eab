//! Carrying out drains and rebalances (the worker calls [`drive`]): each pass takes every open parent
//! under its row lock (`FOR UPDATE SKIP LOCKED`: another worker's parent is left alone), records the
//! children whose operations ended, starts pending ones while fewer than `concurrency` run, and ends the
//! parent once none is pending or running. A child whose start is refused ends `failed` with the reason,
//! and the others go on.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{
    Limits, Result, ServiceError,
    migrations::{self, Begin, MigrateControlPlane, OverridesPolicy},
};
use crate::domain::OperationKind;
use tenantplane_core::placement::PlacementConfig;
use tenantplane_store::{
    self as store,
    control_planes::{ControlPlaneKey, ControlPlaneRow},
    parent_operations::{ChildRow, ParentRow},
};

/// How many failed children a parent's error names.
const NAMED: usize = 10;

/// Why a child did not start: `(reason, message)`.
type Refusal = (&'static str, String);

/// One pass over the open parents; returns how many children started.
pub async fn drive(db: &PgPool, placement: &PlacementConfig) -> Result<usize> {
    let mut started = 0;
    for id in store::parent_operations::open_ids(db).await? {
        let mut tx = db.begin().await?;
        let Some(parent) = store::parent_operations::lock(&mut tx, id).await? else {
            continue;
        };
        store::parent_operations::settle(&mut tx, id).await?;
        let running = store::parent_operations::running(&mut tx, id).await?;
        let mut free = i64::from(parent.concurrency) - running;
        let pending: Vec<ChildRow> = store::parent_operations::children(&mut *tx, id)
            .await?
            .into_iter()
            .filter(|c| c.state == "pending")
            .collect();
        for child in &pending {
            if free <= 0 {
                break;
            }
            if start_child(&mut tx, placement, &parent, child).await? {
                free -= 1;
                started += 1;
            }
        }
        finish_if_done(&mut tx, id).await?;
        tx.commit().await?;
    }
    Ok(started)
}

/// Starts `child` in a savepoint: records its operation, or its refusal (and undoes whatever the start
/// wrote). Returns whether it runs now. Errors other than a refusal (the database) end the pass.
async fn start_child(
    tx: &mut PgConnection,
    placement: &PlacementConfig,
    parent: &ParentRow,
    child: &ChildRow,
) -> Result<bool> {
    let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
    let outcome = start(&mut savepoint, placement, parent, child).await;
    match outcome {
        Ok(Ok(op)) => {
            savepoint.commit().await?;
            store::parent_operations::started(tx, parent.id, child.position, op).await?;
            tracing::info!(parent = %parent.id, control_plane = %child.control_plane_id, operation = %op, "child started");
            Ok(true)
        }
        Ok(Err((reason, message))) => {
            savepoint.rollback().await?;
            store::parent_operations::refused(tx, parent.id, child.position, (reason, &message)).await?;
            tracing::info!(parent = %parent.id, control_plane = %child.control_plane_id, reason, %message, "child refused");
            Ok(false)
        }
        Err(err) => Err(err),
    }
}

/// Starts `child`'s operation: its id, or why it cannot start.
async fn start(
    tx: &mut PgConnection,
    placement: &PlacementConfig,
    parent: &ParentRow,
    child: &ChildRow,
) -> Result<std::result::Result<Uuid, Refusal>> {
    let Some(target) = child.target.clone() else {
        return Ok(Err(("NoCandidate", "no DataStore fits".into())));
    };
    let key = ControlPlaneKey {
        id: Some(child.control_plane_id),
        name: None,
    };
    let Some(cp) = store::control_planes::get_for_update(tx, child.tenant_id, key).await? else {
        return Ok(Err((
            "ControlPlaneDeleted",
            "the control plane was deleted".into(),
        )));
    };
    if let Some((op, kind)) = store::migrations::open_operation(&mut *tx, cp.id).await? {
        return Ok(Err(if kind == "migrate" {
            (
                "AlreadyMigrating",
                format!("the control plane is already migrating (operation {op}): skipped"),
            )
        } else {
            (
                "OperationOpen",
                format!("the control plane has an open {kind} operation ({op})"),
            )
        }));
    }
    let started = if child.usage == "overrides" {
        replace_overrides(tx, parent, child, &cp, &target).await
    } else {
        let input = MigrateControlPlane {
            target,
            overrides: OverridesPolicy::Drop,
        };
        let how = Begin {
            placement,
            deadline_seconds: migrations::DEADLINE_SECONDS,
            actor: &parent.actor,
            request_id: parent.request_id.as_deref(),
            parent: Some(parent.id),
        };
        migrations::begin(tx, &how, &cp, &input)
            .await
            .map(|(op, _)| op.id)
    };
    match started {
        Ok(op) => Ok(Ok(op)),
        Err(err) => refusal(err).map(Err),
    }
}

/// A refused start as `(reason, message)`; errors that are not about the request stay errors.
fn refusal(err: ServiceError) -> Result<Refusal> {
    let joined = |errors: Vec<crate::domain::FieldError>| {
        errors
            .into_iter()
            .map(|e| e.message)
            .collect::<Vec<_>>()
            .join("; ")
    };
    match err {
        ServiceError::Invalid(errors) | ServiceError::ConflictFields(errors) => {
            Ok(("Refused", joined(errors)))
        }
        ServiceError::Conflict(message) | ServiceError::NotReady(message) => Ok(("Refused", message)),
        ServiceError::NotFound(what) => Ok(("Refused", format!("{what} not found"))),
        other => Err(other),
    }
}

/// Re-places the overrides `child` names onto `target` (their data is dropped: events and leases are
/// disposable): checks the target under the DataStore row locks (etcd, the source's CA, ready,
/// uncordoned, room), moves the placement and the loads, and records an `update` operation that renders
/// the new overrides. Returns the operation's id.
async fn replace_overrides(
    tx: &mut PgConnection,
    parent: &ParentRow,
    child: &ChildRow,
    cp: &ControlPlaneRow,
    target: &str,
) -> Result<Uuid> {
    let rows = store::placements::snapshot(&mut *tx).await?;
    let find = |name: &str| rows.iter().find(|r| r.name == name);
    let (Some(from), Some(to)) = (find(&child.source), find(target)) else {
        return Err(ServiceError::Conflict(format!(
            "DataStore {target} or {} is gone",
            child.source
        )));
    };
    let (from_id, to_id) = (from.id, to.id);
    store::migrations::lock(tx, &[from_id, to_id]).await?;
    let fresh = store::placements::snapshot(&mut *tx).await?;
    let (Some(from), Some(to)) = (
        fresh.iter().find(|r| r.id == from_id),
        fresh.iter().find(|r| r.id == to_id),
    ) else {
        return Err(ServiceError::Conflict(format!("DataStore {target} is gone")));
    };
    if to.driver != "etcd" || to.ca_id.is_none() || to.ca_id != from.ca_id {
        return Err(ServiceError::Conflict(format!(
            "DataStore {target} is not an etcd DataStore under {}'s CA",
            child.source
        )));
    }
    let (_, overrides) = store::outbox::placement(tx, cp.id)
        .await?
        .ok_or_else(|| ServiceError::Conflict("the control plane has no placement".into()))?;
    let resources: Vec<String> = overrides
        .into_iter()
        .filter(|(_, ds)| *ds == child.source)
        .map(|(resource, _)| resource)
        .collect();
    if resources.is_empty() {
        return Err(ServiceError::Conflict(format!(
            "the control plane keeps nothing on {} any more",
            child.source
        )));
    }
    migrations::check_room(to, false)?;
    store::parent_operations::replace_overrides(tx, cp.id, &resources, (from_id, to_id)).await?;
    let row = store::control_planes::update_spec(
        tx,
        cp.tenant_id,
        cp.id,
        &cp.kubernetes_version,
        cp.replicas,
        &cp.labels,
    )
    .await?;
    let new = store::operations::NewOperation {
        kind: OperationKind::Update.as_str(),
        generation: row.generation,
        first_stage: super::operations::first_stage(OperationKind::Update).as_str(),
        deadline_seconds: Limits::default().operation_deadline_seconds as f64,
    };
    let op = store::operations::insert(tx, cp.tenant_id, cp.id, new, parent.request_id.as_deref()).await?;
    let payload = serde_json::json!({"generation": row.generation});
    store::control_planes::enqueue(tx, cp.tenant_id, cp.id, op.id, "apply", &payload).await?;
    store::audit(
        &mut *tx,
        Some(cp.tenant_id),
        &parent.actor,
        "control-plane.overrides-replaced",
        "control-plane",
        &cp.id.to_string(),
        parent.request_id.as_deref(),
        serde_json::json!({"parent": parent.id, "operation": op.id, "from": child.source, "to": target,
                           "resources": resources}),
    )
    .await?;
    Ok(op.id)
}

/// Ends parent `id` once none of its children is pending or running: `succeeded` when all succeeded,
/// `failed` naming the failed ones otherwise.
pub async fn finish_if_done(tx: &mut PgConnection, id: Uuid) -> Result<()> {
    let children = store::parent_operations::children(&mut *tx, id).await?;
    if children
        .iter()
        .any(|c| c.state == "pending" || c.state == "running")
    {
        store::parent_operations::touch(tx, id).await?;
        return Ok(());
    }
    let failed: Vec<&ChildRow> = children.iter().filter(|c| c.state == "failed").collect();
    if failed.is_empty() {
        store::parent_operations::end(tx, id, None).await?;
        return Ok(());
    }
    let mut named: Vec<String> = failed
        .iter()
        .take(NAMED)
        .map(|c| {
            format!(
                "{}/{} ({}: {})",
                c.tenant,
                c.control_plane,
                c.reason.as_deref().unwrap_or("Failed"),
                c.error.as_deref().unwrap_or("no message")
            )
        })
        .collect();
    if failed.len() > NAMED {
        named.push(format!("and {} more", failed.len() - NAMED));
    }
    let error = format!(
        "{} of {} children failed: {}",
        failed.len(),
        children.len(),
        named.join("; ")
    );
    store::parent_operations::end(tx, id, Some(("ChildrenFailed", &error))).await?;
    Ok(())
}
