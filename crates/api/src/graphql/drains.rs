//! GraphQL of live migrations, drains and rebalances (platform admin): the parent operation with its
//! children, and the mutations that start or abort them (REST `…/migrate`, `…/migrate/abort`,
//! `/datastores/{name}/drain`, `/pools/{name}/rebalance`).

use async_graphql::{Context, Enum, ID, InputObject, Result, SimpleObject};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    caller, gql_error,
    payload::{ControlPlanePayload, in_tx, user_errors},
    request_id,
    types::{self, OperationKind, OperationStage, OperationState},
};
use tenantplane_service::{
    self as service, ServiceError,
    drains::{self, DrainDataStore, RebalancePool},
    migrations::{self, MigrateControlPlane},
};

/// What a parent operation does.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ParentOperationKind {
    /// Empties a DataStore.
    Drain,
    /// Spreads a pool's tenants.
    Rebalance,
}

/// What a child moves off its source DataStore.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ChildUsage {
    /// The primary state: a live migration.
    Primary,
    /// Offloaded resources: re-placed empty.
    Overrides,
}

/// What a migration does with the override DataStores' data.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum OverridesPolicy {
    /// The new override spaces start empty (default).
    #[default]
    Drop,
    /// The override data is copied too (refused for now).
    Move,
}

impl From<OverridesPolicy> for migrations::OverridesPolicy {
    fn from(p: OverridesPolicy) -> Self {
        match p {
            OverridesPolicy::Drop => Self::Drop,
            OverridesPolicy::Move => Self::Move,
        }
    }
}

/// How many children are in each state.
#[derive(SimpleObject, Clone, Copy, Debug, PartialEq)]
pub struct ChildCounts {
    /// Not started yet.
    pub pending: i64,
    /// Started, not ended.
    pub running: i64,
    /// Ended with their goal reached.
    pub succeeded: i64,
    /// Ended without it, or never started.
    pub failed: i64,
}

/// One child of a drain or rebalance (see the REST `ChildOperation`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct ChildOperation {
    /// The control plane's tenant (slug).
    pub tenant: String,
    /// The control plane's database id.
    pub control_plane_id: Uuid,
    /// The control plane's name.
    pub control_plane: String,
    /// What moves.
    pub usage: ChildUsage,
    /// The offloaded resources that move.
    pub resources: Vec<String>,
    /// The DataStore it leaves.
    pub from: String,
    /// The DataStore the plan chose; null when nothing fits.
    pub to: Option<String>,
    /// `PENDING` until started, then its operation's.
    pub state: OperationState,
    /// Its operation's last stage.
    pub stage: Option<OperationStage>,
    /// Its operation (in the control plane's tenant), once started.
    pub operation_id: Option<Uuid>,
    /// Its operation's kind: `MIGRATE` or `UPDATE`.
    pub operation_kind: Option<OperationKind>,
    /// Why it failed, machine-readable.
    pub reason: Option<String>,
    /// Why it failed, for people.
    pub error: Option<String>,
}

/// A drain or rebalance with its children (see the REST `ParentOperation`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct ParentOperation {
    /// Id.
    pub id: Uuid,
    /// What it does.
    pub kind: ParentOperationKind,
    /// The drained DataStore or the rebalanced pool.
    pub subject: String,
    /// Children running at once, at most.
    pub concurrency: i32,
    /// Where it is: `RUNNING` while any child is pending or running.
    pub state: OperationState,
    /// Whether it has ended.
    pub done: bool,
    /// Children per state.
    pub counts: ChildCounts,
    /// The children in the order they start.
    pub children: Vec<ChildOperation>,
    /// Why it failed, machine-readable.
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

impl From<drains::ChildOperation> for ChildOperation {
    fn from(c: drains::ChildOperation) -> Self {
        Self {
            tenant: c.tenant,
            control_plane_id: c.control_plane_id,
            control_plane: c.control_plane,
            usage: match c.usage {
                drains::ChildUsage::Primary => ChildUsage::Primary,
                drains::ChildUsage::Overrides => ChildUsage::Overrides,
            },
            resources: c.resources,
            from: c.from,
            to: c.to,
            state: c.state.into(),
            stage: c.stage.map(Into::into),
            operation_id: c.operation_id,
            operation_kind: c.operation_kind.map(Into::into),
            reason: c.reason,
            error: c.error,
        }
    }
}

impl From<drains::ParentOperation> for ParentOperation {
    fn from(p: drains::ParentOperation) -> Self {
        Self {
            id: p.id,
            kind: match p.kind {
                drains::ParentKind::Drain => ParentOperationKind::Drain,
                drains::ParentKind::Rebalance => ParentOperationKind::Rebalance,
            },
            subject: p.subject,
            concurrency: p.concurrency,
            state: p.state.into(),
            done: p.done,
            counts: ChildCounts {
                pending: p.counts.pending,
                running: p.counts.running,
                succeeded: p.counts.succeeded,
                failed: p.counts.failed,
            },
            children: p.children.into_iter().map(Into::into).collect(),
            reason: p.reason,
            error: p.error,
            created_at: p.created_at,
            updated_at: p.updated_at,
            finished_at: p.finished_at,
        }
    }
}

/// Moves a control plane, live, to another etcd DataStore (platform admin).
#[derive(InputObject, Debug, Clone)]
pub struct MigrateControlPlaneInput {
    /// The control plane's global id.
    pub id: ID,
    /// The DataStore to move to: same driver, ready, uncordoned, with room.
    pub target: String,
    /// What happens to the override DataStores' data when they are re-placed: `DROP` (default) or `MOVE`.
    pub overrides: Option<OverridesPolicy>,
}

/// Aborts a control plane's live migration before its switch (platform admin).
#[derive(InputObject, Debug, Clone)]
pub struct AbortMigrationInput {
    /// The control plane's global id.
    pub id: ID,
}

/// Drains a DataStore (platform admin).
#[derive(InputObject, Debug, Clone)]
pub struct DrainDataStoreInput {
    /// The DataStore's name.
    pub name: String,
    /// Children running at once, 1–10 (default 2).
    pub concurrency: Option<i64>,
    /// What happens to override data: `DROP` only (default); migrate one control plane with `MOVE` to keep it.
    pub overrides: Option<OverridesPolicy>,
}

/// Rebalances a `spread` pool (platform admin).
#[derive(InputObject, Debug, Clone)]
pub struct RebalancePoolInput {
    /// The pool's name.
    pub name: String,
    /// Children running at once, 1–10 (default 2).
    pub concurrency: Option<i64>,
}

/// The result of `drainDataStore` and `rebalancePool`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct ParentOperationPayload {
    /// The drain or rebalance; none when there are user errors.
    pub operation: Option<ParentOperation>,
    /// Why nothing started (each field named).
    pub user_errors: Vec<types::UserError>,
}

/// The tenant and uuid of a control plane's global id; anything else is not found.
fn control_plane_id(id: &ID) -> Result<(String, String)> {
    types::control_plane_key(id).ok_or_else(|| gql_error(ServiceError::NotFound("control plane")))
}

/// A parent operation, or user errors for what the request got wrong.
fn parent_payload(
    result: std::result::Result<drains::ParentOperation, ServiceError>,
) -> Result<ParentOperationPayload> {
    match result {
        Ok(op) => Ok(ParentOperationPayload {
            operation: Some(op.into()),
            user_errors: Vec::new(),
        }),
        Err(err) => Ok(ParentOperationPayload {
            user_errors: user_errors(err)?,
            ..Default::default()
        }),
    }
}

/// `Query.parentOperation`: one drain or rebalance (platform admin).
pub(super) async fn parent_operation(ctx: &Context<'_>, id: Uuid) -> Result<ParentOperation> {
    let (c, who) = caller(ctx)?;
    service::drains::get(c, who, &id.to_string())
        .await
        .map(Into::into)
        .map_err(gql_error)
}

/// `Mutation.migrateControlPlane` (platform admin).
pub(super) async fn migrate_control_plane(
    ctx: &Context<'_>,
    input: MigrateControlPlaneInput,
) -> Result<ControlPlanePayload> {
    let (c, who) = caller(ctx)?;
    let rid = request_id(ctx);
    let (slug, id) = control_plane_id(&input.id)?;
    let body = MigrateControlPlane {
        target: input.target,
        overrides: input.overrides.unwrap_or_default().into(),
    };
    in_tx(ctx, slug.clone(), async |tx| {
        service::migrations::start(c, tx, who, (&slug, &id), body, rid.as_deref()).await
    })
    .await
}

/// `Mutation.abortMigration` (platform admin).
pub(super) async fn abort_migration(
    ctx: &Context<'_>,
    input: AbortMigrationInput,
) -> Result<ControlPlanePayload> {
    let (_, who) = caller(ctx)?;
    let rid = request_id(ctx);
    let (slug, id) = control_plane_id(&input.id)?;
    in_tx(ctx, slug.clone(), async |tx| {
        service::migrations::abort(tx, who, (&slug, &id), rid.as_deref()).await
    })
    .await
}

/// `Mutation.drainDataStore` (platform admin).
pub(super) async fn drain_data_store(
    ctx: &Context<'_>,
    input: DrainDataStoreInput,
) -> Result<ParentOperationPayload> {
    let (c, who) = caller(ctx)?;
    let rid = request_id(ctx);
    let body = DrainDataStore {
        concurrency: input.concurrency,
        overrides: input.overrides.unwrap_or_default().into(),
    };
    parent_payload(service::drains::drain(c, who, &input.name, body, rid.as_deref()).await)
}

/// `Mutation.rebalancePool` (platform admin).
pub(super) async fn rebalance_pool(
    ctx: &Context<'_>,
    input: RebalancePoolInput,
) -> Result<ParentOperationPayload> {
    let (c, who) = caller(ctx)?;
    let rid = request_id(ctx);
    let body = RebalancePool {
        concurrency: input.concurrency,
    };
    parent_payload(service::drains::rebalance(c, who, &input.name, body, rid.as_deref()).await)
}
