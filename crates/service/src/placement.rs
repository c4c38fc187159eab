//! Placement in the store: decide on a snapshot, reserve the chosen DataStores in the same transaction
//! (optimistically, with the all-rows lock as fallback). Also the read-only simulation and drain plans.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Ctx, OnConflict, Result, ServiceError, model::CreateControlPlane, platform_admin};
use crate::auth::Principal;
use crate::{
    domain::{FieldError, Name, Offload},
    k8s::crd::Driver,
};
use tenantplane_core::placement::{
    self as placement, Assignment, DataStoreSnapshot, OffloadMode, OverrideDecision, PlacementError,
    PlacementRequest, Policy, PoolSnapshot, SizeClass, Snapshot,
};
use tenantplane_store::{self as store, control_planes::ControlPlaneRow, placements::LoadRow};

fn driver(text: &str) -> Option<Driver> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).ok()
}

fn policy(text: &str) -> Policy {
    serde_json::from_value(serde_json::Value::String(text.to_string())).unwrap_or(Policy::Spread)
}

/// Builds the engine's snapshot from store rows (pools in name order).
pub fn snapshot_of(rows: &[LoadRow]) -> Snapshot {
    let mut pools: Vec<PoolSnapshot> = Vec::new();
    for row in rows {
        let Some(driver) = driver(&row.driver) else {
            continue;
        };
        let ds = DataStoreSnapshot {
            driver,
            ready: row.ready,
            cordoned: row.cordoned,
            capacity_tenants: u32::try_from(row.capacity_tenants).unwrap_or(0),
            load_tenants: u32::try_from(row.load_tenants).unwrap_or(u32::MAX),
            capacity_bytes: row.capacity_bytes.and_then(|b| u64::try_from(b).ok()),
            load_bytes: 0,
            name: row.name.clone(),
            ca_id: row.ca_id.clone(),
            labels: serde_json::from_value(row.labels.clone()).unwrap_or_default(),
            pool: row.pool.clone(),
        };
        match pools.iter_mut().find(|p| p.name == row.pool) {
            Some(pool) => pool.datastores.push(ds),
            None => pools.push(PoolSnapshot {
                name: row.pool.clone(),
                policy: policy(&row.policy),
                datastores: vec![ds],
            }),
        }
    }
    Snapshot { pools }
}

fn offload_mode(text: &str) -> OffloadMode {
    match text.parse::<Offload>() {
        Ok(Offload::Auto) => OffloadMode::Auto,
        Ok(Offload::Pool(name)) => OffloadMode::Pool(name.to_string()),
        _ => OffloadMode::None,
    }
}

/// The engine request for a recorded control plane.
fn request_for(tenant: Uuid, row: &ControlPlaneRow) -> PlacementRequest {
    let mut request = PlacementRequest::new(
        tenant,
        row.id.to_string(),
        row.size_class.parse().unwrap_or(SizeClass::Small),
    );
    request.label_selector = serde_json::from_value(row.datastore_labels.clone()).unwrap_or_default();
    request.pool = row.datastore_pool.clone();
    request.offload = offload_mode(&row.offload);
    request
}

/// The id a preview hashes with under `rendezvous` (the real create hashes the new control plane's id).
const PREVIEW_ID: &str = "preview";

/// The engine request for a control plane that is only asked for (a preview).
fn request_of(tenant: Uuid, input: &CreateControlPlane) -> PlacementRequest {
    let mut request = PlacementRequest::new(tenant, PREVIEW_ID.to_string(), input.size_class);
    request.label_selector = input.datastore.labels.clone();
    request.pool = input.datastore.pool.clone();
    request.offload = offload_mode(&input.offload);
    request
}

fn no_fit(err: PlacementError) -> ServiceError {
    match err {
        PlacementError::UnknownPool { pool } => ServiceError::ConflictFields(vec![FieldError::new(
            "datastore.pool",
            format!("there is no pool named {pool:?}"),
        )]),
        err => ServiceError::Conflict(err.to_string()),
    }
}

/// A decision with the DataStore ids and drivers the store needs to reserve it.
#[derive(Debug)]
struct Choice {
    decision: placement::Decision,
    primary: Uuid,
    primary_driver: String,
    overrides: Vec<(String, Uuid)>,
    /// Chosen DataStores that take one tenant only (NATS, or in a `Dedicated` pool).
    exclusive: Vec<Uuid>,
}

/// Runs the engine on `request` (or checks an `explicit` DataStore choice) over `rows`.
fn decide(ctx: &Ctx, request: &PlacementRequest, explicit: Option<&str>, rows: &[LoadRow]) -> Result<Choice> {
    let snapshot = snapshot_of(rows);
    let decision = match explicit {
        // A platform admin's explicit choice skips scoring but not the hard constraints the store enforces.
        Some(name) => {
            let slot = snapshot.find(name).ok_or_else(|| {
                ServiceError::ConflictFields(vec![FieldError::new(
                    "datastore.name",
                    format!("no pooled DataStore named {name:?}"),
                )])
            })?;
            let ds = snapshot
                .data_store(slot)
                .ok_or(ServiceError::NotFound("datastore"))?;
            if ds.driver == Driver::Nats && ds.load_tenants > 0 {
                return Err(ServiceError::Conflict(format!(
                    "NATS DataStore {name:?} already holds a tenant: one tenant per NATS DataStore"
                )));
            }
            placement::Decision {
                primary: name.to_string(),
                overrides: Vec::new(),
                candidates: Vec::new(),
                override_candidates: Vec::new(),
            }
        }
        None => placement::place(request, &snapshot, &ctx.placement).map_err(no_fit)?,
    };
    let row_of = |name: &str| rows.iter().find(|r| r.name == name);
    let primary_row = row_of(&decision.primary).ok_or(ServiceError::NotFound("datastore"))?;
    let overrides: Vec<(String, Uuid)> = decision
        .overrides
        .iter()
        .filter_map(|o| row_of(&o.data_store).map(|r| (o.resource.clone(), r.id)))
        .collect();
    let exclusive = std::iter::once(decision.primary.as_str())
        .chain(decision.overrides.iter().map(|o| o.data_store.as_str()))
        .filter_map(row_of)
        .filter(|r| policy(&r.policy) == Policy::Dedicated || driver(&r.driver) == Some(Driver::Nats))
        .map(|r| r.id)
        .collect();
    Ok(Choice {
        primary: primary_row.id,
        primary_driver: primary_row.driver.clone(),
        overrides,
        exclusive,
        decision,
    })
}

/// A just-inserted control plane's placement, decided but maybe not reserved yet (see [`choose`]).
#[derive(Debug)]
pub struct Pending {
    tenant: Uuid,
    row: ControlPlaneRow,
    /// The optimistic choice still to reserve; `None` once reserved (the locked path reserves at once).
    choice: Option<Choice>,
    decision: placement::Decision,
}

impl Pending {
    /// The decision the create answers with, unless [`reserve`] has to change it.
    pub fn decision(&self) -> &placement::Decision {
        &self.decision
    }
}

/// Places a just-inserted control plane, leaving the optimistic reservation to [`reserve`].
///
/// Optimistic first: decide on an unlocked snapshot; [`reserve`] then locks only the chosen rows with one
/// statement and re-checks their hard constraints (ready, not cordoned, below capacity, exclusivity) on
/// the latest committed load. So concurrent creates serialize only on the rows they share, and only for
/// that statement and the commit when the caller makes it the transaction's last. When the unlocked
/// snapshot admits nothing, this falls back at once to locking every DataStore row and deciding again, so
/// "no DataStore fits" always comes from a consistent view.
pub async fn choose(
    ctx: &Ctx,
    tx: &mut PgConnection,
    tenant: Uuid,
    row: &ControlPlaneRow,
) -> Result<Pending> {
    let request = request_for(tenant, row);
    let rows = store::placements::snapshot(&mut *tx).await?;
    let (choice, decision) = match decide(ctx, &request, row.datastore_name.as_deref(), &rows) {
        Ok(choice) => {
            let decision = choice.decision.clone();
            (Some(choice), decision)
        }
        Err(_) => (None, place_locked(ctx, tx, tenant, row).await?),
    };
    Ok(Pending {
        tenant,
        row: row.clone(),
        choice,
        decision,
    })
}

/// Stripes of this process's reservation queue (a DataStore's id picks its stripe).
const QUEUE_STRIPES: usize = 64;

/// This process's reservations of one DataStore take turns here for their reserving statement, so that
/// at most one of them waits in PostgreSQL for the DataStore's row (held by the previous one until its
/// commit) instead of dozens, which the database would wake and re-queue at every commit. The row lock
/// stays the guarantee (other processes, the locked path).
static QUEUE: LazyLock<Vec<Arc<tokio::sync::Mutex<()>>>> =
    LazyLock::new(|| (0..QUEUE_STRIPES).map(|_| Arc::default()).collect());

/// A reservation's turn in this process's queue.
#[derive(Debug)]
struct Turn {
    _stripes: Vec<tokio::sync::OwnedMutexGuard<()>>,
}

/// Waits for the queue stripes of `datastores` (in stripe order, so two reservations never wait on each
/// other in a cycle).
async fn turn_for(datastores: Vec<Uuid>) -> Turn {
    let mut stripes: Vec<usize> = datastores
        .iter()
        .map(|id| (id.as_u128() % QUEUE_STRIPES as u128) as usize)
        .collect();
    stripes.sort_unstable();
    stripes.dedup();
    let mut held = Vec::with_capacity(stripes.len());
    for stripe in stripes {
        held.push(QUEUE[stripe].clone().lock_owned().await);
    }
    Turn { _stripes: held }
}

/// Reserves what [`choose`] decided. `None` when the decision stands; `Some` with the new one when a chosen
/// DataStore filled up or changed meanwhile, so the create locked every DataStore row and decided again.
pub async fn reserve(
    ctx: &Ctx,
    tx: &mut PgConnection,
    pending: Pending,
) -> Result<Option<placement::Decision>> {
    let Some(choice) = pending.choice else {
        return Ok(None);
    };
    let stored = serde_json::to_value(&choice.decision).unwrap_or_default();
    let reservation = store::placements::Reservation {
        tenant: pending.tenant,
        control_plane: pending.row.id,
        datastore: choice.primary,
        driver: &choice.primary_driver,
        overrides: &choice.overrides,
        exclusive: &choice.exclusive,
        decision: &stored,
    };
    let chosen = std::iter::once(choice.primary)
        .chain(choice.overrides.iter().map(|(_, ds)| *ds))
        .collect();
    if store::placements::try_reserve(tx, &reservation, turn_for(chosen)).await? {
        return Ok(None);
    }
    let decision = place_locked(ctx, tx, pending.tenant, &pending.row).await?;
    Ok(Some(decision))
}

/// Places and reserves under the lock of every DataStore row (in id order): the consistent fallback.
async fn place_locked(
    ctx: &Ctx,
    tx: &mut PgConnection,
    tenant: Uuid,
    row: &ControlPlaneRow,
) -> Result<placement::Decision> {
    let request = request_for(tenant, row);
    let rows = store::placements::lock_snapshot(tx).await?;
    let choice = decide(ctx, &request, row.datastore_name.as_deref(), &rows)?;
    let stored = serde_json::to_value(&choice.decision).unwrap_or_default();
    store::placements::insert(
        tx,
        tenant,
        row.id,
        choice.primary,
        &choice.primary_driver,
        &choice.overrides,
        &stored,
    )
    .await
    .on_conflict(|| {
        format!(
            "NATS DataStore {:?} already holds a tenant: one tenant per NATS DataStore",
            choice.decision.primary
        )
    })?;
    Ok(choice.decision)
}

/// Where a control plane asked for with `input` in `tenant` would land now, and why: the decision the
/// create would take on the current loads (unlocked), reserving nothing. Under `rendezvous` the create
/// hashes the new control plane's id, so it may pick another DataStore of the same pool.
pub async fn preview(ctx: &Ctx, tenant: Uuid, input: &CreateControlPlane) -> Result<placement::Decision> {
    let rows = store::placements::snapshot(&ctx.db).await?;
    let choice = decide(
        ctx,
        &request_of(tenant, input),
        input.datastore.name.as_deref(),
        &rows,
    )?;
    Ok(choice.decision)
}

/// Body of `POST /placements:simulate`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimulateRequest {
    /// Size class (default small).
    #[serde(default = "small")]
    pub size_class: crate::domain::SizeClass,
    /// Restrict to this pool.
    #[serde(default)]
    pub pool: Option<String>,
    /// Labels the DataStore must have.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `none`, `auto` or `pool:<name>`.
    #[serde(default = "none")]
    pub offload: String,
    /// Control-plane id used for rendezvous hashing (default: a fixed example id).
    #[serde(default)]
    pub control_plane_id: Option<String>,
}

fn small() -> crate::domain::SizeClass {
    crate::domain::SizeClass::Small
}
fn none() -> String {
    "none".into()
}

/// Where a control plane would go, without reserving anything (platform admin).
pub async fn simulate(ctx: &Ctx, who: &Principal, input: SimulateRequest) -> Result<placement::Decision> {
    platform_admin(who)?;
    let mut errors = Vec::new();
    if let Err(e) = input.offload.parse::<Offload>() {
        errors.push(FieldError::new("offload", e));
    }
    if let Some(pool) = &input.pool
        && let Err(e) = Name::parse("pool", pool)
    {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let snapshot = snapshot_of(&store::placements::snapshot(&ctx.db).await?);
    let mut request = PlacementRequest::new(
        Uuid::nil(),
        input.control_plane_id.unwrap_or_else(|| "simulation".into()),
        input.size_class,
    );
    request.label_selector = input.labels;
    request.pool = input.pool;
    request.offload = offload_mode(&input.offload);
    placement::place(&request, &snapshot, &ctx.placement).map_err(no_fit)
}

/// One move of a drain plan, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainMove {
    /// The control plane that would move.
    pub control_plane_id: String,
    /// What it keeps on the drained DataStore.
    pub usage: DrainUsage,
    /// The drained DataStore.
    pub from: String,
    /// Where it would go; absent when nothing fits.
    pub to: Option<String>,
    /// Why nothing fits: each hard constraint and how many DataStores it ruled out, most first.
    pub blocked_by: Vec<BlockedBy>,
}

/// What a control plane keeps on a drained DataStore: `"primary"`, or `{"overrides": [resources]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainUsage {
    /// Its primary state.
    Primary,
    /// These offloaded resources (`<group>/<resource>`).
    Overrides(Vec<String>),
}

/// A hard constraint that ruled DataStores out of a move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BlockedBy {
    /// The constraint.
    pub reason: placement::Reason,
    /// How many DataStores it ruled out.
    pub count: u32,
}

impl From<placement::Usage> for DrainUsage {
    fn from(usage: placement::Usage) -> Self {
        match usage {
            placement::Usage::Primary => Self::Primary,
            placement::Usage::Overrides(resources) => Self::Overrides(resources),
        }
    }
}

/// The moves that would empty a DataStore under its pool's policy (a plan only; platform admin).
pub async fn drain_plan(ctx: &Ctx, who: &Principal, name: &str) -> Result<Vec<DrainMove>> {
    platform_admin(who)?;
    let ds = store::datastores::get(&ctx.db, name)
        .await?
        .ok_or(ServiceError::NotFound("datastore"))?;
    let mut conn = ctx.db.acquire().await?;
    let moves = drain_moves(&mut conn, &ctx.placement, name, ds.id).await?;
    Ok(moves
        .into_iter()
        .map(|m| DrainMove {
            control_plane_id: m.control_plane,
            usage: m.usage.into(),
            from: m.from,
            to: m.to,
            blocked_by: m
                .blocked_by
                .into_iter()
                .map(|(reason, count)| BlockedBy { reason, count })
                .collect(),
        })
        .collect())
}

/// The engine's drain plan of DataStore `name` (id `id`) on the current loads: one move per control plane
/// that uses it. 409 when it holds tenants but is in no pool the engine can plan in.
pub async fn drain_moves(
    conn: &mut PgConnection,
    config: &placement::PlacementConfig,
    name: &str,
    id: Uuid,
) -> Result<Vec<placement::Move>> {
    let snapshot = snapshot_of(&store::placements::snapshot(&mut *conn).await?);
    let rows = store::placements::on_datastore(&mut *conn, id).await?;
    if rows.is_empty() {
        // Nothing to move (also for a DataStore the engine does not see, e.g. one in no pool).
        return Ok(Vec::new());
    }
    let mut assignments: Vec<Assignment> = Vec::new();
    for (id, size_class, primary, resource, labels) in rows {
        let id = id.to_string();
        let entry = match assignments.iter_mut().position(|a| a.control_plane_id == id) {
            Some(i) => &mut assignments[i],
            None => {
                assignments.push(Assignment {
                    control_plane_id: id.clone(),
                    size_class: size_class.parse().unwrap_or(SizeClass::Small),
                    label_selector: serde_json::from_value(labels).unwrap_or_default(),
                    primary,
                    overrides: Vec::new(),
                });
                assignments
                    .last_mut()
                    .ok_or(ServiceError::Internal("empty assignments".into()))?
            }
        };
        if let Some(resource) = resource {
            entry.overrides.push(OverrideDecision {
                resource,
                data_store: name.to_string(),
            });
        }
    }
    placement::drain_plan(&snapshot, config, name, &assignments).map_err(no_fit)
}
