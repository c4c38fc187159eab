//! Control planes and operations as stored, in the API's shapes: the row conversions and the loads by id
//! (or a control plane's name) that check no authorization (their callers do, or hand the result only to
//! subscribers authorized for the tenant). Of its siblings it uses only `model`: `control_planes`,
//! `operations`, `migrations` and the event hub in `events` all load through it, and the hub uses none of
//! the use-cases that subscribe to it.

use uuid::Uuid;

use super::{
    Result, ServiceError,
    model::{
        ControlPlane, ControlPlaneAddons, DataStorePreference, NodeJoin, Operation, Placement, StageReached,
    },
};
use crate::domain::{OperationKind, OperationState, check_dns1035};
use tenantplane_store::{
    self as store,
    control_planes::{ControlPlaneKey, ControlPlaneRow},
    operations::OperationRow,
    placements::PlacementRow,
};

/// Converts a control-plane row to the API shape (without placement).
pub fn control_plane_model(row: ControlPlaneRow) -> ControlPlane {
    ControlPlane {
        id: row.id,
        name: row.name,
        kubernetes_version: row.kubernetes_version,
        replicas: row.replicas,
        service_type: row
            .service_type
            .parse()
            .unwrap_or(crate::domain::ServiceType::ClusterIp),
        port: row.port,
        size_class: row.size_class.parse().unwrap_or(crate::domain::SizeClass::Small),
        datastore: DataStorePreference {
            pool: row.datastore_pool,
            labels: serde_json::from_value(row.datastore_labels).unwrap_or_default(),
            name: row.datastore_name,
        },
        offload: row.offload,
        addons: ControlPlaneAddons::observed(&row.addons, &row.status),
        node_join: NodeJoin::observed(&row.status),
        labels: serde_json::from_value(row.labels).unwrap_or_default(),
        phase: row.phase,
        status: row.status,
        placement: None,
        generation: row.generation,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// Converts a control-plane row and its placement to the API shape.
pub fn control_plane_model_with(row: ControlPlaneRow, placement: Option<Placement>) -> ControlPlane {
    let mut cp = control_plane_model(row);
    cp.placement = placement;
    cp
}

/// Converts a placement row to the API shape.
pub(crate) fn placement_model(row: PlacementRow) -> Placement {
    Placement {
        data_store: row.datastore,
        overrides: serde_json::from_value(row.overrides).unwrap_or_default(),
        decision: row.decision,
    }
}

/// Loads the placements of `rows` (one query, on a pool or inside a write's transaction) and converts them.
pub(crate) async fn with_placements_in(
    db: impl sqlx::PgExecutor<'_>,
    tenant: Uuid,
    rows: Vec<ControlPlaneRow>,
) -> Result<Vec<ControlPlane>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let mut placements: std::collections::HashMap<Uuid, PlacementRow> =
        store::placements::for_control_planes(db, tenant, &ids)
            .await?
            .into_iter()
            .map(|p| (p.control_plane_id, p))
            .collect();
    Ok(rows
        .into_iter()
        .map(|row| {
            let placement = placements.remove(&row.id).map(placement_model);
            control_plane_model_with(row, placement)
        })
        .collect())
}

/// How the path segment `id` names a control plane: by id when it parses as one, by name when it is a
/// valid name (a name may look like a UUID: the store prefers the id); neither means it names none.
pub(crate) fn control_plane_key(id: &str) -> ControlPlaneKey<'_> {
    ControlPlaneKey {
        id: Uuid::parse_str(id).ok(),
        name: check_dns1035("id", id).is_ok().then_some(id),
    }
}

/// A live control plane with its placement, without an authorization check: for the event hub, which
/// only hands it to subscribers authorized for `tenant`.
pub(crate) async fn load_control_plane(
    db: &sqlx::PgPool,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<ControlPlane>> {
    let Some(row) = store::control_planes::get(db, tenant, id).await? else {
        return Ok(None);
    };
    Ok(with_placements_in(db, tenant, vec![row])
        .await?
        .into_iter()
        .next())
}

/// A control plane recorded gone (`deleted_at` set), with what it last held; `None` when there is no
/// such row. For the last event about it only: nothing else reads deleted control planes.
pub(crate) async fn load_gone_control_plane(
    db: &sqlx::PgPool,
    tenant: Uuid,
    id: Uuid,
) -> Result<Option<ControlPlane>> {
    let Some(row) = store::control_planes::get_gone(db, tenant, id).await? else {
        return Ok(None);
    };
    Ok(with_placements_in(db, tenant, vec![row])
        .await?
        .into_iter()
        .next())
}

/// Converts an operation row (an unknown kind, state or stage, which the database's checks rule out, reads
/// as `failed`, `update` and is skipped).
pub fn operation_model(row: OperationRow) -> Operation {
    let state = row.state.parse().unwrap_or(OperationState::Failed);
    let stages: Vec<StageReached> = row
        .stages
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|s| serde_json::from_value(s.clone()).ok())
                .collect()
        })
        .unwrap_or_default();
    Operation {
        id: row.id,
        control_plane_id: row.control_plane_id,
        kind: row.kind.parse().unwrap_or(OperationKind::Update),
        state,
        done: state.is_done(),
        generation: row.generation,
        stage: stages.last().map(|s: &StageReached| s.stage),
        stages,
        reason: row.reason,
        error: row.error,
        deadline_at: row.deadline_at,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

/// Loads one operation of a tenant (`NotFound` when it has none with that id).
pub async fn load_operation(db: &sqlx::PgPool, tenant: Uuid, id: Uuid) -> Result<Operation> {
    store::operations::get(db, tenant, id)
        .await?
        .map(operation_model)
        .ok_or(ServiceError::NotFound("operation"))
}
