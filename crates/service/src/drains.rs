//! Drains and rebalances (platform admin): a DataStore emptied, or a pool's tenants spread, as one parent
//! operation whose children are control-plane operations the worker starts a few at a time
//! ([`super::drive`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{Ctx, FieldError, Result, ServiceError, migrations::OverridesPolicy, platform_admin};
use crate::auth::Principal;
use crate::domain::{OperationKind, OperationStage, OperationState};
use tenantplane_core::placement::{
    self as placement, Assignment, OverrideDecision, PlacementError, SizeClass, SummaryText, Usage,
};
use tenantplane_store::{
    self as store,
    parent_operations::{ChildRow, NewChild, NewParent, ParentRow},
};

/// Why a tenant on NATS never moves live.
const NATS_CANNOT_MOVE: &str =
    "NATS DataStores cannot be drained: a NATS bucket's revisions cannot be carried to another server";

/// The children running at once when the request does not say.
pub const DEFAULT_CONCURRENCY: i64 = 2;

/// The most children running at once.
pub const MAX_CONCURRENCY: i64 = 10;

/// What a parent operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParentKind {
    /// Empties a DataStore: `POST /datastores/{name}/drain`.
    Drain,
    /// Spreads a pool's tenants: `POST /pools/{name}/rebalance`.
    Rebalance,
}

impl ParentKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::Rebalance => "rebalance",
        }
    }
}

/// What a child moves off its source DataStore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChildUsage {
    /// The control plane's primary state: a live `migrate` operation.
    Primary,
    /// Offloaded resources (events, leases): re-placed empty by an `update` operation.
    Overrides,
}

/// Body of `POST /datastores/{name}/drain` (optional).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainDataStore {
    /// Children running at once, 1–10 (default 2).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub concurrency: Option<i64>,
    /// What happens to override data: `drop` (default; the only one supported), as for a migration.
    #[serde(default)]
    pub overrides: OverridesPolicy,
}

/// Body of `POST /pools/{name}/rebalance` (optional).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RebalancePool {
    /// Children running at once, 1–10 (default 2).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub concurrency: Option<i64>,
}

/// How many children are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildCounts {
    /// Not started yet.
    pub pending: i64,
    /// Started, not ended.
    pub running: i64,
    /// Ended with their goal reached.
    pub succeeded: i64,
    /// Ended without it (or never started: `reason` says why).
    pub failed: i64,
}

/// One child of a parent operation: a control plane and what moves where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildOperation {
    /// The control plane's tenant (slug).
    pub tenant: String,
    /// The control plane's id.
    pub control_plane_id: Uuid,
    /// The control plane's name.
    pub control_plane: String,
    /// What moves.
    pub usage: ChildUsage,
    /// The offloaded resources that move (usage `overrides`).
    pub resources: Vec<String>,
    /// The DataStore it leaves.
    pub from: String,
    /// The DataStore the plan chose; null when nothing fits.
    pub to: Option<String>,
    /// `pending` until started, then its operation's (`running` while that is pending or running).
    pub state: OperationState,
    /// Its operation's last stage.
    pub stage: Option<OperationStage>,
    /// Its operation (in the control plane's tenant), once started.
    pub operation_id: Option<Uuid>,
    /// Its operation's kind: `migrate` (primary) or `update` (overrides).
    pub operation_kind: Option<OperationKind>,
    /// Why it failed, machine-readable: its operation's reason, or `NoCandidate`, `AlreadyMigrating`,
    /// `OperationOpen`, `Refused`, `ControlPlaneDeleted` when it never started.
    pub reason: Option<String>,
    /// Why it failed, for people.
    pub error: Option<String>,
}

/// A drain or rebalance: `running` while any child is pending or running, then `succeeded` when every
/// child did, `failed` when any failed (`error` names which and why).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentOperation {
    /// Id (`GET /operations/{id}`).
    pub id: Uuid,
    /// What it does.
    pub kind: ParentKind,
    /// The drained DataStore or the rebalanced pool.
    pub subject: String,
    /// Children running at once, at most.
    pub concurrency: i32,
    /// Where it is (never `pending`).
    pub state: OperationState,
    /// Whether it has ended.
    pub done: bool,
    /// Children per state.
    pub counts: ChildCounts,
    /// The children in the order they start.
    pub children: Vec<ChildOperation>,
    /// Why it failed, machine-readable (`ChildrenFailed`).
    pub reason: Option<String>,
    /// Which children failed and why.
    pub error: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
}

/// Converts a child row (unknown spellings, which the database's checks rule out, read as `failed`).
fn child(row: ChildRow) -> ChildOperation {
    ChildOperation {
        tenant: row.tenant,
        control_plane_id: row.control_plane_id,
        control_plane: row.control_plane,
        usage: if row.usage == "overrides" {
            ChildUsage::Overrides
        } else {
            ChildUsage::Primary
        },
        resources: row.resources,
        from: row.source,
        to: row.target,
        state: row.state.parse().unwrap_or(OperationState::Failed),
        stage: row.stage.and_then(|s| s.parse().ok()),
        operation_id: row.operation_id,
        operation_kind: row.operation_kind.and_then(|k| k.parse().ok()),
        reason: row.reason,
        error: row.error,
    }
}

/// Converts a parent row and its children.
pub fn model(row: ParentRow, children: Vec<ChildRow>) -> ParentOperation {
    let children: Vec<ChildOperation> = children.into_iter().map(child).collect();
    let mut counts = ChildCounts::default();
    for c in &children {
        match c.state {
            OperationState::Pending => counts.pending += 1,
            OperationState::Running => counts.running += 1,
            OperationState::Succeeded => counts.succeeded += 1,
            OperationState::Failed => counts.failed += 1,
        }
    }
    let state = row.state.parse().unwrap_or(OperationState::Failed);
    ParentOperation {
        id: row.id,
        kind: if row.kind == "rebalance" {
            ParentKind::Rebalance
        } else {
            ParentKind::Drain
        },
        subject: row.subject,
        concurrency: row.concurrency,
        state,
        done: state.is_done(),
        counts,
        children,
        reason: row.reason,
        error: row.error,
        created_at: row.created_at,
        updated_at: row.updated_at,
        finished_at: row.finished_at,
    }
}

/// Loads parent operation `id` with its children.
pub async fn load(
    db: impl sqlx::Acquire<'_, Database = sqlx::Postgres>,
    id: Uuid,
) -> Result<ParentOperation> {
    let mut conn = db.acquire().await?;
    let row = store::parent_operations::get(&mut *conn, id)
        .await?
        .ok_or(ServiceError::NotFound("operation"))?;
    let children = store::parent_operations::children(&mut *conn, id).await?;
    Ok(model(row, children))
}

/// One drain or rebalance with its children (platform admin).
pub async fn get(ctx: &Ctx, who: &Principal, id: &str) -> Result<ParentOperation> {
    platform_admin(who)?;
    let id = super::parse_id(id, "operation")?;
    load(&ctx.db, id).await
}

/// `concurrency` checked: 1–10, default 2.
fn concurrency(value: Option<i64>) -> Result<i32> {
    let value = value.unwrap_or(DEFAULT_CONCURRENCY);
    if !(1..=MAX_CONCURRENCY).contains(&value) {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "concurrency",
            format!("must be between 1 and {MAX_CONCURRENCY}"),
        )]));
    }
    i32::try_from(value).map_err(|e| ServiceError::Internal(e.to_string()))
}

/// 409 naming `name` when a parent of `kind` is open on `subject`.
async fn none_open(tx: &mut PgConnection, kind: ParentKind, subject: &str) -> Result<()> {
    match store::parent_operations::open_on(&mut *tx, kind.as_str(), subject).await? {
        Some(open) => Err(already_open(kind, subject, Some(open))),
        None => Ok(()),
    }
}

fn already_open(kind: ParentKind, subject: &str, open: Option<Uuid>) -> ServiceError {
    let what = match kind {
        ParentKind::Drain => format!("DataStore {subject} is already being drained"),
        ParentKind::Rebalance => format!("pool {subject} is already being rebalanced"),
    };
    let by = open.map(|id| format!(" by operation {id}")).unwrap_or_default();
    ServiceError::ConflictFields(vec![FieldError::new(
        "name",
        format!("{what}{by}; wait until it is done"),
    )])
}

/// Records a `kind` parent on `subject` with its children in `tx`, audited (`datastore.drain` or
/// `pool.rebalance`), and commits; it ends at once when no child is left to start.
async fn record(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    kind: ParentKind,
    new: &NewParent<'_>,
    children: &[NewChild],
) -> Result<Uuid> {
    let id = store::parent_operations::insert(&mut tx, new, children)
        .await
        .map_err(|e| match e {
            store::StoreError::Conflict(c) if c == store::parent_operations::ONE_OPEN => {
                already_open(kind, new.subject, None)
            }
            e => e.into(),
        })?;
    super::drive::finish_if_done(&mut tx, id).await?;
    let (action, target) = match kind {
        ParentKind::Drain => ("datastore.drain", "datastore"),
        ParentKind::Rebalance => ("pool.rebalance", "pool"),
    };
    store::audit(
        &mut *tx,
        None,
        new.actor,
        action,
        target,
        new.subject,
        new.request_id,
        serde_json::json!({"operation": id, "concurrency": new.concurrency, "children": children.len()}),
    )
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// Drains DataStore `name` (platform admin): cordons it (as `POST …/cordon`, audited `datastore.cordon`),
/// plans where each control plane goes (`GET …/drain-plan`), and records a `drain` whose children the
/// worker starts, at most `concurrency` at once. A NATS DataStore with tenants (they can never move live)
/// is refused with 422 naming `name`; an open drain of it with 409 naming `name`.
pub async fn drain(
    ctx: &Ctx,
    who: &Principal,
    name: &str,
    input: DrainDataStore,
    request_id: Option<&str>,
) -> Result<ParentOperation> {
    platform_admin(who)?;
    let concurrency = concurrency(input.concurrency)?;
    if input.overrides == OverridesPolicy::Move {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "overrides",
            "a drain re-places override data with `drop` (each control plane's overrides start empty on their new DataStores); to keep it, migrate the control plane alone with `overrides: move`",
        )]));
    }
    let mut tx = ctx.db.begin().await?;
    let ds = store::datastores::get(&mut *tx, name)
        .await?
        .ok_or(ServiceError::NotFound("datastore"))?;
    none_open(&mut tx, ParentKind::Drain, name).await?;
    let moves = super::placement::drain_moves(&mut tx, &ctx.placement, name, ds.id).await?;
    if ds.driver == "NATS" && moves.iter().any(|m| m.usage == Usage::Primary) {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "name",
            NATS_CANNOT_MOVE,
        )]));
    }
    let children = drain_children(&mut tx, &moves).await?;
    store::datastores::set_cordoned(&mut *tx, name, true).await?;
    let actor = who.actor();
    store::audit(
        &mut *tx,
        None,
        &actor,
        "datastore.cordon",
        "datastore",
        name,
        request_id,
        serde_json::json!({}),
    )
    .await?;
    let new = NewParent {
        kind: ParentKind::Drain.as_str(),
        subject: name,
        concurrency,
        actor: &actor,
        request_id,
    };
    let id = record(tx, ParentKind::Drain, &new, &children).await?;
    load(&ctx.db, id).await
}

/// The children of a drain plan: one per move, failed at once when nothing fits (the plan's reasons) or
/// when the control plane is already migrating.
async fn drain_children(tx: &mut PgConnection, moves: &[placement::Move]) -> Result<Vec<NewChild>> {
    let ids: Vec<Uuid> = moves
        .iter()
        .filter_map(|m| Uuid::parse_str(&m.control_plane).ok())
        .collect();
    let tenants = store::parent_operations::tenants_of(&mut *tx, &ids).await?;
    let mut out = Vec::with_capacity(moves.len());
    for m in moves {
        let Some((cp, tenant)) = Uuid::parse_str(&m.control_plane)
            .ok()
            .and_then(|id| tenants.iter().find(|(c, _)| *c == id).copied())
        else {
            continue;
        };
        let (usage, resources) = match &m.usage {
            Usage::Primary => ("primary", Vec::new()),
            Usage::Overrides(resources) => {
                let mut resources = resources.clone();
                resources.sort();
                ("overrides", resources)
            }
        };
        let failed = match &m.to {
            None => Some((
                "NoCandidate".to_string(),
                format!("no DataStore fits: {}", SummaryText(&m.blocked_by)),
            )),
            Some(_) => already_migrating(tx, cp).await?,
        };
        out.push(NewChild {
            tenant,
            control_plane: cp,
            usage,
            resources,
            source: m.from.clone(),
            target: m.to.clone(),
            failed,
        });
    }
    Ok(out)
}

/// `(AlreadyMigrating, why)` when control plane `cp` has an open migration: it is skipped.
async fn already_migrating(tx: &mut PgConnection, cp: Uuid) -> Result<Option<(String, String)>> {
    Ok(store::migrations::open_operation(&mut *tx, cp)
        .await?
        .filter(|(_, kind)| kind == "migrate")
        .map(|(op, _)| {
            (
                "AlreadyMigrating".to_string(),
                format!("the control plane is already migrating (operation {op}): skipped"),
            )
        }))
}

/// Rebalances pool `name` (platform admin): plans primary moves from its fullest to its emptiest
/// DataStores until its spread imbalance is at most one tenant (`placement::rebalance_plan`), and records
/// a `rebalance` whose children (live migrations) the worker starts, at most `concurrency` at once. Only
/// a `spread` pool is rebalanced (409 naming `name` otherwise); an open rebalance of it is a 409 too.
pub async fn rebalance(
    ctx: &Ctx,
    who: &Principal,
    name: &str,
    input: RebalancePool,
    request_id: Option<&str>,
) -> Result<ParentOperation> {
    platform_admin(who)?;
    let concurrency = concurrency(input.concurrency)?;
    let mut tx = ctx.db.begin().await?;
    let pool = store::datastores::pool(&mut *tx, name)
        .await?
        .ok_or(ServiceError::NotFound("pool"))?;
    if pool.policy != "spread" {
        return Err(ServiceError::ConflictFields(vec![FieldError::new(
            "name",
            format!(
                "pool {name} places by {}: only a spread pool is rebalanced (spreading would undo its policy)",
                pool.policy
            ),
        )]));
    }
    none_open(&mut tx, ParentKind::Rebalance, name).await?;
    let rows = store::placements::snapshot(&mut *tx).await?;
    let snapshot = super::placement::snapshot_of(&rows);
    let placed = store::parent_operations::assignments_in_pool(&mut *tx, pool.id).await?;
    let assignments: Vec<Assignment> = placed.iter().map(assignment).collect();
    let moves = match placement::rebalance_plan(&snapshot, &ctx.placement, name, &assignments) {
        Ok(moves) => moves,
        // A pool without DataStores is balanced.
        Err(PlacementError::UnknownPool { .. }) => Vec::new(),
        Err(e) => return Err(ServiceError::Conflict(e.to_string())),
    };
    let mut children = Vec::new();
    for (cp, from, to) in collapse(&moves) {
        let Some(a) = placed.iter().find(|a| a.control_plane_id == cp) else {
            continue;
        };
        let driver_of = |name: &str| rows.iter().find(|r| r.name == name).map(|r| r.driver.as_str());
        let failed = match (driver_of(&from), driver_of(&to)) {
            (Some("NATS"), _) => Some(("Refused".to_string(), NATS_CANNOT_MOVE.to_string())),
            (Some(a), Some(b)) if a == b => already_migrating(&mut tx, cp).await?,
            _ => Some(("Refused".to_string(), super::migrations::CROSS_DRIVER.to_string())),
        };
        children.push(NewChild {
            tenant: a.tenant_id,
            control_plane: cp,
            usage: "primary",
            resources: Vec::new(),
            source: from,
            target: Some(to),
            failed,
        });
    }
    let actor = who.actor();
    let new = NewParent {
        kind: ParentKind::Rebalance.as_str(),
        subject: name,
        concurrency,
        actor: &actor,
        request_id,
    };
    let id = record(tx, ParentKind::Rebalance, &new, &children).await?;
    load(&ctx.db, id).await
}

/// The engine's view of a placed control plane.
fn assignment(a: &store::parent_operations::PlacedRow) -> Assignment {
    Assignment {
        control_plane_id: a.control_plane_id.to_string(),
        size_class: a.size_class.parse().unwrap_or(SizeClass::Small),
        label_selector: serde_json::from_value(a.labels.clone()).unwrap_or_default(),
        primary: a.primary.clone(),
        overrides: a
            .overrides
            .iter()
            .map(|(resource, data_store)| OverrideDecision {
                resource: resource.clone(),
                data_store: data_store.clone(),
            })
            .collect(),
    }
}

/// One `(control plane, from, to)` per control plane of a plan that may move one twice (first source,
/// last target); a control plane that would end where it started does not move.
fn collapse(moves: &[placement::Move]) -> Vec<(Uuid, String, String)> {
    let mut out: Vec<(Uuid, String, String)> = Vec::new();
    for m in moves {
        let (Ok(cp), Some(to)) = (Uuid::parse_str(&m.control_plane), m.to.clone()) else {
            continue;
        };
        match out.iter_mut().find(|(c, _, _)| *c == cp) {
            Some(entry) => entry.2 = to,
            None => out.push((cp, m.from.clone(), to)),
        }
    }
    out.retain(|(_, from, to)| from != to);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn mv(cp: u128, from: &str, to: Option<&str>) -> placement::Move {
        placement::Move {
            control_plane: Uuid::from_u128(cp).to_string(),
            usage: Usage::Primary,
            from: from.into(),
            to: to.map(str::to_string),
            blocked_by: Vec::new(),
        }
    }

    #[test]
    fn a_control_plane_moved_twice_moves_once_and_one_back_home_not_at_all() {
        let moves = [
            mv(1, "a", Some("b")),
            mv(2, "a", Some("c")),
            mv(1, "b", Some("c")),
            mv(3, "a", Some("b")),
            mv(3, "b", Some("a")),
            mv(4, "a", None),
        ];
        assert_eq!(
            collapse(&moves),
            vec![
                (Uuid::from_u128(1), "a".to_string(), "c".to_string()),
                (Uuid::from_u128(2), "a".to_string(), "c".to_string()),
            ]
        );
    }

    #[test]
    fn concurrency_is_one_to_ten_and_two_by_default() {
        assert_eq!(concurrency(None).unwrap(), 2);
        assert_eq!(concurrency(Some(10)).unwrap(), 10);
        for bad in [0, 11, -1] {
            match concurrency(Some(bad)) {
                Err(ServiceError::Invalid(errors)) => assert_eq!(errors[0].field, "concurrency"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
