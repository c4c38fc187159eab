//! Wire types of the GraphQL schema, kept apart from the service's shapes (which they wrap).

use std::collections::BTreeMap;

use async_graphql::{
    ComplexObject, Context, Enum, ID, InputObject, InputValueError, InputValueResult, Json, Object, Result,
    Scalar, ScalarType, SimpleObject, Value,
};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::loader;
use crate::domain;
use tenantplane_service::model;

/// A Relay global id: `base64url("<Type>:<key>")`.
pub fn global_id(kind: &str, key: &str) -> ID {
    ID(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{key}")))
}

/// Splits a global id into its type and key; `None` for anything this API did not hand out.
pub fn parse_global_id(id: &str) -> Option<(String, String)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(id).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (kind, key) = text.split_once(':')?;
    Some((kind.to_string(), key.to_string()))
}

/// The key of a control plane's global id: `<tenant slug>:<uuid>`.
pub fn control_plane_key(id: &str) -> Option<(String, String)> {
    match parse_global_id(id)? {
        (kind, key) if kind == "ControlPlane" => {
            let (slug, uuid) = key.split_once(':')?;
            Some((slug.to_string(), uuid.to_string()))
        }
        _ => None,
    }
}

/// What a token may do.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
#[graphql(name = "Role")]
pub enum GqlRole {
    /// Everything, across tenants.
    PlatformAdmin,
    /// Everything in its own tenant, including tokens.
    TenantAdmin,
    /// Create, read and update control planes of its tenant.
    TenantMember,
    /// Read its tenant.
    TenantViewer,
}

impl From<domain::Role> for GqlRole {
    fn from(role: domain::Role) -> Self {
        match role {
            domain::Role::PlatformAdmin => GqlRole::PlatformAdmin,
            domain::Role::TenantAdmin => GqlRole::TenantAdmin,
            domain::Role::TenantMember => GqlRole::TenantMember,
            domain::Role::TenantViewer => GqlRole::TenantViewer,
        }
    }
}

impl From<GqlRole> for domain::Role {
    fn from(role: GqlRole) -> Self {
        match role {
            GqlRole::PlatformAdmin => domain::Role::PlatformAdmin,
            GqlRole::TenantAdmin => domain::Role::TenantAdmin,
            GqlRole::TenantMember => domain::Role::TenantMember,
            GqlRole::TenantViewer => domain::Role::TenantViewer,
        }
    }
}

/// A 64-bit integer (byte counts), written as a decimal string: JSON numbers are exact only up to 2^53,
/// and GraphQL's `Int` is 32-bit. Input takes the string or a whole JSON number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int64(pub i64);

#[Scalar(name = "Int64")]
impl ScalarType for Int64 {
    fn parse(value: Value) -> InputValueResult<Self> {
        let parsed = match &value {
            Value::String(s) => s.parse().ok(),
            Value::Number(n) => n.as_i64(),
            _ => None,
        };
        parsed
            .map(Int64)
            .ok_or_else(|| InputValueError::custom("expected a 64-bit integer as a decimal string"))
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.to_string())
    }
}

/// A control plane's observed phase (what runs, as the worker last saw it).
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ControlPlanePhase {
    /// Recorded; not applied to the cluster yet.
    Pending,
    /// Being created.
    Provisioning,
    /// Rotating its certificate authority.
    CertificateAuthorityRotating,
    /// Rolling to another version.
    Upgrading,
    /// Moving to another DataStore.
    Migrating,
    /// Serving, at its current spec.
    Ready,
    /// Has served, but does not now.
    NotReady,
    /// Scaled to zero replicas.
    Sleeping,
    /// Its datastore refuses writes.
    WriteLimited,
    /// Being deleted: its datastore space is being removed.
    Deleting,
    /// Gone, with its data.
    Deleted,
    /// Failed permanently.
    Failed,
    /// A phase this server does not know (the raw one is in `status.raw`).
    Unknown,
}

/// Every phase with its recorded spelling (the REST API's `phase` and `status` filter).
const PHASES: [(ControlPlanePhase, &str); 13] = [
    (ControlPlanePhase::Pending, "Pending"),
    (ControlPlanePhase::Provisioning, "Provisioning"),
    (
        ControlPlanePhase::CertificateAuthorityRotating,
        "CertificateAuthorityRotating",
    ),
    (ControlPlanePhase::Upgrading, "Upgrading"),
    (ControlPlanePhase::Migrating, "Migrating"),
    (ControlPlanePhase::Ready, "Ready"),
    (ControlPlanePhase::NotReady, "NotReady"),
    (ControlPlanePhase::Sleeping, "Sleeping"),
    (ControlPlanePhase::WriteLimited, "WriteLimited"),
    (ControlPlanePhase::Deleting, "Deleting"),
    (ControlPlanePhase::Deleted, "Deleted"),
    (ControlPlanePhase::Failed, "Failed"),
    (ControlPlanePhase::Unknown, "Unknown"),
];

impl ControlPlanePhase {
    /// The phase recorded as `phase`; `Unknown` for a spelling this server does not know.
    pub fn of(phase: &str) -> Self {
        PHASES
            .iter()
            .find(|(_, s)| *s == phase)
            .map_or(ControlPlanePhase::Unknown, |(p, _)| *p)
    }

    /// Its recorded spelling.
    pub fn as_str(self) -> &'static str {
        PHASES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("Unknown", |(_, s)| s)
    }
}

/// Whether a tenant may work.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum TenantState {
    /// Its tokens work.
    Active,
    /// Suspended by a platform admin: its tokens are refused.
    Suspended,
    /// Being deleted with its control planes.
    Deleting,
    /// A state this server does not know.
    Unknown,
}

impl TenantState {
    /// The state recorded as `state` (`active`, `suspended`, `deleting`).
    pub fn of(state: &str) -> Self {
        match state {
            "active" => TenantState::Active,
            "suspended" => TenantState::Suspended,
            "deleting" => TenantState::Deleting,
            _ => TenantState::Unknown,
        }
    }
}

/// A label.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct Label {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

/// A label to set.
#[derive(InputObject, Clone, Debug)]
pub struct LabelInput {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

/// Labels in key order.
pub fn labels(map: &BTreeMap<String, String>) -> Vec<Label> {
    map.iter()
        .map(|(key, value)| Label {
            key: key.clone(),
            value: value.clone(),
        })
        .collect()
}

/// Input labels as a map (a repeated key keeps the last value).
pub fn label_map(list: &[LabelInput]) -> BTreeMap<String, String> {
    list.iter().map(|l| (l.key.clone(), l.value.clone())).collect()
}

/// The caller.
#[derive(SimpleObject, Clone, Debug)]
pub struct Viewer {
    /// Token id (`jti`).
    pub token_id: Uuid,
    /// Tenant slug; none for platform admins.
    pub tenant: Option<String>,
    /// Role.
    pub role: GqlRole,
    /// When the token expires.
    pub expires_at: DateTime<Utc>,
}

impl From<model::Viewer> for Viewer {
    fn from(v: model::Viewer) -> Self {
        Self {
            token_id: v.token_id,
            tenant: v.tenant,
            role: v.role.into(),
            expires_at: v.expires_at,
        }
    }
}

/// A tenant.
#[derive(Clone, Debug)]
pub struct Tenant(pub model::Tenant);

/// A tenant.
#[Object]
impl Tenant {
    /// Global id.
    async fn id(&self) -> ID {
        global_id("Tenant", &self.0.slug)
    }
    /// Database id.
    async fn tenant_id(&self) -> Uuid {
        self.0.id
    }
    /// URL slug.
    async fn slug(&self) -> &str {
        &self.0.slug
    }
    /// Display name.
    async fn display_name(&self) -> &str {
        &self.0.display_name
    }
    /// Labels.
    async fn labels(&self) -> Vec<Label> {
        labels(&self.0.labels)
    }
    /// Whether it may work.
    async fn state(&self) -> TenantState {
        TenantState::of(&self.0.state)
    }
    /// Created.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
    /// Its quotas and what it uses of them (tenant-viewer of it, or platform admin).
    async fn quotas(&self, ctx: &Context<'_>) -> Result<TenantQuotas> {
        let (c, who) = super::caller(ctx)?;
        Ok(tenantplane_service::quotas::get(c, who, &self.0.slug)
            .await
            .map_err(super::gql_error)?
            .into())
    }
}

/// One quota: the limit and what is in use.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct QuotaUsage {
    /// How many the tenant may have.
    pub limit: i64,
    /// How many it has now.
    pub used: i64,
    /// Whether `limit` is the server's default (no quota of its own is set).
    pub default: bool,
}

impl From<model::QuotaUsage> for QuotaUsage {
    fn from(q: model::QuotaUsage) -> Self {
        Self {
            limit: q.limit,
            used: q.used,
            default: q.default,
        }
    }
}

/// A tenant's quotas.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct TenantQuotas {
    /// Live control planes (being deleted ones count until they are gone).
    pub control_planes: QuotaUsage,
    /// Live tokens (neither revoked nor expired).
    pub tokens: QuotaUsage,
}

impl From<model::Quotas> for TenantQuotas {
    fn from(q: model::Quotas) -> Self {
        Self {
            control_planes: q.control_planes.into(),
            tokens: q.tokens.into(),
        }
    }
}

/// One move of a drain plan.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct DrainMove {
    /// The control plane that would move (its database id).
    pub control_plane_id: String,
    /// What it keeps on the drained DataStore.
    pub usage: DrainUsage,
    /// The drained DataStore.
    pub from: String,
    /// Where it would go; null when nothing fits.
    pub to: Option<String>,
    /// Why nothing fits: each hard constraint and how many DataStores it ruled out, most first.
    pub blocked_by: Vec<BlockedBy>,
}

/// What a control plane keeps on a drained DataStore: its primary state, or offloaded resources.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct DrainUsage {
    /// Its primary state.
    pub primary: bool,
    /// The offloaded resources (`<group>/<resource>`) it keeps there; empty for a primary.
    pub overrides: Vec<String>,
}

/// A hard constraint that ruled DataStores out of a move.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct BlockedBy {
    /// The constraint, as the placement decision spells it (e.g. `at_capacity`, `cordoned`).
    pub reason: String,
    /// How many DataStores it ruled out.
    pub count: i64,
}

impl From<tenantplane_service::placement::DrainMove> for DrainMove {
    fn from(m: tenantplane_service::placement::DrainMove) -> Self {
        use tenantplane_service::placement::DrainUsage as U;
        let usage = match m.usage {
            U::Primary => DrainUsage {
                primary: true,
                overrides: Vec::new(),
            },
            U::Overrides(resources) => DrainUsage {
                primary: false,
                overrides: resources,
            },
        };
        Self {
            control_plane_id: m.control_plane_id,
            usage,
            from: m.from,
            to: m.to,
            blocked_by: m
                .blocked_by
                .into_iter()
                .map(|b| BlockedBy {
                    reason: serde_json::to_value(b.reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    count: i64::from(b.count),
                })
                .collect(),
        }
    }
}

/// A control plane: the tenant's request (spec) and what runs (status).
#[derive(Clone, Debug)]
pub struct ControlPlane {
    /// Tenant slug (part of the global id).
    pub slug: String,
    /// Tenant id (for batch loads).
    pub tenant_id: Uuid,
    /// The service's shape.
    pub cp: model::ControlPlane,
}

/// What the tenant asked for.
#[derive(SimpleObject, Clone, Debug)]
pub struct ControlPlaneSpec {
    /// Requested Kubernetes version.
    pub kubernetes_version: String,
    /// Requested replicas (0 = asleep).
    pub replicas: i32,
    /// `ClusterIP`, `NodePort` or `LoadBalancer`.
    pub service_type: String,
    /// API server port.
    pub port: i32,
    /// `small`, `medium` or `large`.
    pub size_class: String,
    /// Datastore preference.
    pub datastore: DataStorePreference,
    /// `none`, `auto` or `pool:<name>`.
    pub offload: String,
    /// Addons.
    pub addons: Addons,
    /// Labels.
    pub labels: Vec<Label>,
}

/// Where the tenant wants its state.
#[derive(SimpleObject, Clone, Debug)]
pub struct DataStorePreference {
    /// Pool.
    pub pool: Option<String>,
    /// Labels the DataStore must have.
    pub labels: Vec<Label>,
    /// An explicit DataStore (platform admins).
    pub name: Option<String>,
}

/// Addons the tenant asked for (what runs is `status.addons`).
#[derive(SimpleObject, Clone, Debug)]
pub struct Addons {
    /// CoreDNS.
    #[graphql(name = "coreDNS")]
    pub core_dns: bool,
    /// kube-proxy.
    pub kube_proxy: bool,
    /// Konnectivity.
    pub konnectivity: bool,
}

/// A status condition as the cluster reports it (`metav1.Condition`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct Condition {
    /// Type, e.g. `Ready`.
    #[graphql(name = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: Option<String>,
    /// Human-readable message.
    pub message: Option<String>,
    /// Last transition (RFC 3339).
    pub last_transition_time: Option<String>,
    /// Generation the condition was set for.
    pub observed_generation: Option<i64>,
}

impl From<model::Condition> for Condition {
    fn from(c: model::Condition) -> Self {
        Self {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
            message: c.message,
            last_transition_time: c.last_transition_time,
            observed_generation: c.observed_generation,
        }
    }
}

fn conditions(status: &serde_json::Value) -> Vec<Condition> {
    model::Condition::all_in(status)
        .into_iter()
        .map(Into::into)
        .collect()
}

/// One addon as the tenant cluster holds it.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct AddonStatus {
    /// The addon's objects (workload, RBAC, configuration) are in the tenant cluster, as the controller
    /// last reported; false until reported. Its pods run once the tenant has nodes (see `ready`).
    pub installed: bool,
    /// When the controller last wrote the addon's objects.
    pub last_update: Option<DateTime<Utc>>,
}

impl From<&model::AddonState> for AddonStatus {
    fn from(a: &model::AddonState) -> Self {
        Self {
            installed: a.installed,
            last_update: a.last_update,
        }
    }
}

/// The addons as they run in the tenant cluster (what was asked for is `spec.addons`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct AddonsStatus {
    /// CoreDNS.
    #[graphql(name = "coreDNS")]
    pub core_dns: AddonStatus,
    /// kube-proxy.
    pub kube_proxy: AddonStatus,
    /// Konnectivity: the server beside each kube-apiserver and the agents in the tenant cluster.
    pub konnectivity: AddonStatus,
    /// The `AddonsReady` condition: `True` when every requested addon is fully available; null until
    /// reported.
    pub ready: Option<Condition>,
}

impl From<&model::ControlPlaneAddons> for AddonsStatus {
    fn from(a: &model::ControlPlaneAddons) -> Self {
        Self {
            core_dns: (&a.core_dns).into(),
            kube_proxy: (&a.kube_proxy).into(),
            konnectivity: (&a.konnectivity).into(),
            ready: a.ready.clone().map(Into::into),
        }
    }
}

/// Whether nodes can join (`kubeadm join`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct NodeJoinStatus {
    /// The `NodeJoinReady` condition: `True` (reason `JoinObjectsPresent`) when kubeadm's bootstrap objects
    /// are in the tenant cluster; null until reported.
    pub ready: Option<Condition>,
}

/// What the cluster reports.
#[derive(SimpleObject, Clone, Debug)]
pub struct ControlPlaneStatus {
    /// The observed phase.
    pub phase: ControlPlanePhase,
    /// API server endpoint, once known.
    pub endpoint: Option<String>,
    /// Installed Kubernetes version, once Ready.
    pub installed_version: Option<String>,
    /// Generation the cluster has seen.
    pub observed_generation: Option<i64>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// The addons as they run in the tenant cluster, and `AddonsReady`.
    pub addons: AddonsStatus,
    /// Whether nodes can join: `NodeJoinReady`.
    pub node_join: NodeJoinStatus,
    /// The whole status document.
    pub raw: Json<serde_json::Value>,
}

/// Where a control plane's state lives.
#[derive(SimpleObject, Clone, Debug)]
pub struct Placement {
    /// The primary DataStore.
    pub data_store: String,
    /// Offloaded resources and their DataStores, in order.
    pub overrides: Vec<PlacementOverride>,
    /// The placement engine's decision: every candidate with its score or the constraint it failed.
    pub decision: Json<serde_json::Value>,
}

impl From<model::Placement> for Placement {
    fn from(p: model::Placement) -> Self {
        Self {
            data_store: p.data_store,
            overrides: p
                .overrides
                .into_iter()
                .map(|o| PlacementOverride {
                    resource: o.resource,
                    data_store: o.data_store,
                })
                .collect(),
            decision: Json(p.decision),
        }
    }
}

/// One offloaded resource.
#[derive(SimpleObject, Clone, Debug)]
pub struct PlacementOverride {
    /// `<group>/<resource>`.
    pub resource: String,
    /// The etcd DataStore holding it.
    pub data_store: String,
}

/// What an operation does.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum OperationKind {
    /// Makes the control plane.
    Create,
    /// Changes its spec.
    Update,
    /// Removes it and its datastore space.
    Delete,
    /// Moves it, live, to another DataStore.
    Migrate,
}

/// Where an operation is.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum OperationState {
    /// Recorded; the worker has not taken it yet.
    Pending,
    /// Being carried out.
    Running,
    /// Done: Ready at the requested generation, or gone.
    Succeeded,
    /// Ended without reaching its goal.
    Failed,
}

/// A step an operation reached (see the REST `OperationStage`).
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum OperationStage {
    /// Recorded with its placement.
    Placed,
    /// A delete is recorded.
    Requested,
    /// Applied to the management cluster.
    Applied,
    /// The datastore space is provisioned.
    DatastoreReady,
    /// Certificates and kubeconfigs are issued.
    Certificates,
    /// The Deployment is available.
    Deployed,
    /// Ready at the requested generation.
    Ready,
    /// Gone, with its datastore space.
    Deleted,
    /// A migration copies the source's space.
    Copying,
    /// A migration applies the source's later changes.
    CatchingUp,
    /// A migration froze writes on the source.
    Frozen,
    /// A migration moves the Deployment to the target.
    Switching,
    /// A migration compares both spaces.
    Verifying,
    /// A migration is done.
    Done,
}

impl From<domain::OperationKind> for OperationKind {
    fn from(k: domain::OperationKind) -> Self {
        match k {
            domain::OperationKind::Create => Self::Create,
            domain::OperationKind::Update => Self::Update,
            domain::OperationKind::Delete => Self::Delete,
            domain::OperationKind::Migrate => Self::Migrate,
        }
    }
}

impl From<domain::OperationState> for OperationState {
    fn from(s: domain::OperationState) -> Self {
        match s {
            domain::OperationState::Pending => Self::Pending,
            domain::OperationState::Running => Self::Running,
            domain::OperationState::Succeeded => Self::Succeeded,
            domain::OperationState::Failed => Self::Failed,
        }
    }
}

impl From<OperationState> for domain::OperationState {
    fn from(s: OperationState) -> Self {
        match s {
            OperationState::Pending => Self::Pending,
            OperationState::Running => Self::Running,
            OperationState::Succeeded => Self::Succeeded,
            OperationState::Failed => Self::Failed,
        }
    }
}

impl From<OperationKind> for domain::OperationKind {
    fn from(k: OperationKind) -> Self {
        match k {
            OperationKind::Create => Self::Create,
            OperationKind::Update => Self::Update,
            OperationKind::Delete => Self::Delete,
            OperationKind::Migrate => Self::Migrate,
        }
    }
}

impl From<domain::OperationStage> for OperationStage {
    fn from(s: domain::OperationStage) -> Self {
        use domain::OperationStage as S;
        match s {
            S::Placed => Self::Placed,
            S::Requested => Self::Requested,
            S::Applied => Self::Applied,
            S::DatastoreReady => Self::DatastoreReady,
            S::Certificates => Self::Certificates,
            S::Deployed => Self::Deployed,
            S::Ready => Self::Ready,
            S::Deleted => Self::Deleted,
            S::Copying => Self::Copying,
            S::CatchingUp => Self::CatchingUp,
            S::Frozen => Self::Frozen,
            S::Switching => Self::Switching,
            S::Verifying => Self::Verifying,
            S::Done => Self::Done,
        }
    }
}

/// A stage an operation reached, and when.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct StageReached {
    /// The stage.
    pub stage: OperationStage,
    /// When.
    pub at: DateTime<Utc>,
}

/// An asynchronous change carried to the cluster; done when the work is (see the REST `Operation`).
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct Operation {
    /// Id.
    pub id: Uuid,
    /// The control plane's id.
    pub control_plane_id: Uuid,
    /// What it does.
    pub kind: OperationKind,
    /// Where it is.
    pub state: OperationState,
    /// Whether it has ended.
    pub done: bool,
    /// The control plane generation it asks for.
    pub generation: i64,
    /// The last stage reached.
    pub stage: Option<OperationStage>,
    /// Every stage reached, in order.
    pub stages: Vec<StageReached>,
    /// Why it failed, machine-readable.
    pub reason: Option<String>,
    /// What went wrong, for people.
    pub error: Option<String>,
    /// When it fails unless done.
    pub deadline_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
}

impl From<model::Operation> for Operation {
    fn from(o: model::Operation) -> Self {
        Self {
            id: o.id,
            control_plane_id: o.control_plane_id,
            kind: o.kind.into(),
            state: o.state.into(),
            done: o.done,
            generation: o.generation,
            stage: o.stage.map(Into::into),
            stages: o
                .stages
                .into_iter()
                .map(|s| StageReached {
                    stage: s.stage.into(),
                    at: s.at,
                })
                .collect(),
            reason: o.reason,
            error: o.error,
            deadline_at: o.deadline_at,
            created_at: o.created_at,
            updated_at: o.updated_at,
        }
    }
}

/// A page of operations, newest first.
#[derive(SimpleObject, Clone, Debug)]
pub struct OperationConnection {
    /// Edges.
    pub edges: Vec<OperationEdge>,
    /// The nodes, without cursors.
    pub nodes: Vec<Operation>,
    /// Paging.
    pub page_info: PageInfo,
}

/// An operation and its cursor.
#[derive(SimpleObject, Clone, Debug)]
pub struct OperationEdge {
    /// Cursor of this edge (pass as `after` to continue after it).
    pub cursor: String,
    /// The operation.
    pub node: Operation,
}

/// What an operation event says.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum OperationEventKind {
    /// The operation was recorded (its first stage).
    Started,
    /// It reached another stage, or its state changed, and is not done.
    Progressed,
    /// It is done: succeeded or failed.
    Finished,
}

impl OperationEventKind {
    /// The kind of an event that shows `op` (with `stages` reached so far).
    pub fn of(op: &model::Operation) -> Self {
        if op.done {
            OperationEventKind::Finished
        } else if op.stages.len() <= 1 && op.state == domain::OperationState::Pending {
            OperationEventKind::Started
        } else {
            OperationEventKind::Progressed
        }
    }
}

/// A change of an operation (a stage reached, its state), as committed.
#[derive(SimpleObject, Clone, Debug)]
pub struct OperationEvent {
    /// What changed.
    pub kind: OperationEventKind,
    /// The operation after the change.
    pub operation: Operation,
}

/// An audit-log entry.
#[derive(SimpleObject, Clone, Debug)]
pub struct AuditEntry {
    /// Id (ascending in time).
    pub id: i64,
    /// Who (`role:subject(jti)`).
    pub actor: String,
    /// What, e.g. `control-plane.create`.
    pub action: String,
    /// Request id of the call.
    pub request_id: Option<String>,
    /// Details.
    pub details: Json<serde_json::Value>,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<model::AuditEntry> for AuditEntry {
    fn from(a: model::AuditEntry) -> Self {
        Self {
            id: a.id,
            actor: a.actor,
            action: a.action,
            request_id: a.request_id,
            details: Json(a.details),
            created_at: a.created_at,
        }
    }
}

/// A control plane.
#[Object]
impl ControlPlane {
    /// Global id (for `node`).
    async fn id(&self) -> ID {
        global_id("ControlPlane", &format!("{}:{}", self.slug, self.cp.id))
    }
    /// Database id (as in the REST API).
    async fn control_plane_id(&self) -> Uuid {
        self.cp.id
    }
    /// Tenant slug.
    async fn tenant(&self) -> &str {
        &self.slug
    }
    /// Name.
    async fn name(&self) -> &str {
        &self.cp.name
    }
    /// What the tenant asked for.
    async fn spec(&self) -> ControlPlaneSpec {
        let cp = &self.cp;
        ControlPlaneSpec {
            kubernetes_version: cp.kubernetes_version.clone(),
            replicas: cp.replicas,
            service_type: cp.service_type.as_str().to_string(),
            port: cp.port,
            size_class: cp.size_class.as_str().to_string(),
            datastore: DataStorePreference {
                pool: cp.datastore.pool.clone(),
                labels: labels(&cp.datastore.labels),
                name: cp.datastore.name.clone(),
            },
            offload: cp.offload.clone(),
            addons: Addons {
                core_dns: cp.addons.core_dns.requested,
                kube_proxy: cp.addons.kube_proxy.requested,
                konnectivity: cp.addons.konnectivity.requested,
            },
            labels: labels(&cp.labels),
        }
    }
    /// Observed phase (also in `status`).
    async fn phase(&self) -> ControlPlanePhase {
        ControlPlanePhase::of(&self.cp.phase)
    }
    /// What the cluster reports.
    async fn status(&self) -> ControlPlaneStatus {
        let s = &self.cp.status;
        ControlPlaneStatus {
            phase: ControlPlanePhase::of(&self.cp.phase),
            endpoint: s.get("endpoint").and_then(|v| v.as_str()).map(str::to_string),
            installed_version: s
                .get("installedVersion")
                .and_then(|v| v.as_str())
                .map(str::to_string),
            observed_generation: s.get("observedGeneration").and_then(|v| v.as_i64()),
            conditions: conditions(s),
            addons: (&self.cp.addons).into(),
            node_join: NodeJoinStatus {
                ready: self.cp.node_join.ready.clone().map(Into::into),
            },
            raw: Json(s.clone()),
        }
    }
    /// Status conditions (also in `status`).
    async fn conditions(&self) -> Vec<Condition> {
        conditions(&self.cp.status)
    }
    /// API server endpoint, once known (also in `status`).
    async fn endpoint(&self) -> Option<String> {
        self.cp
            .status
            .get("endpoint")
            .and_then(|v| v.as_str())
            .map(str::to_string)
    }
    /// The DataStores chosen by placement, with the decision's reasons (other DataStores' candidates only
    /// for platform admins).
    async fn placement(&self, ctx: &Context<'_>) -> Option<Placement> {
        let mut placement = self.cp.placement.clone()?;
        match ctx.data_opt::<super::Caller>() {
            Some(who) => tenantplane_service::control_planes::redact_placement(&who.0, &mut placement),
            None => return None,
        }
        let p = &placement;
        Some(Placement {
            data_store: p.data_store.clone(),
            overrides: p
                .overrides
                .iter()
                .map(|o| PlacementOverride {
                    resource: o.resource.clone(),
                    data_store: o.data_store.clone(),
                })
                .collect(),
            decision: Json(p.decision.clone()),
        })
    }
    /// The newest operation (batched: one query per page).
    async fn latest_operation(&self, ctx: &Context<'_>) -> Result<Option<Operation>> {
        Ok(loader::latest_operation(ctx, self.tenant_id, self.cp.id)
            .await?
            .map(Into::into))
    }
    /// The 20 newest operations, newest first (batched).
    async fn operations(&self, ctx: &Context<'_>) -> Result<Vec<Operation>> {
        let operations = loader::operations(ctx, self.tenant_id, self.cp.id).await?;
        Ok(operations.into_iter().map(Into::into).collect())
    }
    /// The 20 newest audit entries about it, newest first (batched).
    async fn audit_entries(&self, ctx: &Context<'_>) -> Result<Vec<AuditEntry>> {
        let entries = loader::audit_entries(ctx, self.tenant_id, self.cp.id).await?;
        Ok(entries.into_iter().map(Into::into).collect())
    }
    /// The kubeconfig (YAML) of a control plane that has served (tenant viewer or above), with context,
    /// cluster and user names unique to its tenant and name; its user runs `tenantplane credential` (an
    /// exec plugin exchanging the caller's token for a short-lived credential), so it holds no secret.
    /// Every read is in the audit log; it reads the management cluster, so it costs 50 of the complexity
    /// budget: a page of them is refused. `null` with a `CONFLICT` error until the control plane has
    /// served, or when the server has no credential issuer.
    #[graphql(complexity = 50)]
    async fn kubeconfig(&self, ctx: &Context<'_>) -> Result<Option<String>> {
        let (c, who) = super::caller(ctx)?;
        let id = self.cp.id.to_string();
        let yaml =
            tenantplane_service::control_planes::kubeconfig(c, super::cluster(ctx), who, &self.slug, &id)
                .await
                .map_err(super::gql_error)?;
        Ok(Some(String::from_utf8_lossy(&yaml).into_owned()))
    }
    /// The minor lines (`vX.Y`, ascending) `updateControlPlane` may move it to: any `vX.Y.Z` of a listed
    /// line not lower than the current version (inside the supported range, at most one minor up); empty
    /// while it is being deleted.
    async fn allowed_upgrades(&self, ctx: &Context<'_>) -> Result<Vec<String>> {
        let c = ctx.data::<tenantplane_service::Ctx>()?;
        Ok(tenantplane_service::control_planes::allowed_upgrades(c, &self.cp))
    }
    /// Spec generation.
    async fn generation(&self) -> i64 {
        self.cp.generation
    }
    /// ETag of this version (for `updateControlPlane(input: {ifMatch})`).
    async fn etag(&self) -> String {
        self.cp.etag()
    }
    /// Created.
    async fn created_at(&self) -> DateTime<Utc> {
        self.cp.created_at
    }
    /// Updated.
    async fn updated_at(&self) -> DateTime<Utc> {
        self.cp.updated_at
    }
}

/// A page of control planes (Relay connection).
#[derive(SimpleObject, Clone, Debug)]
pub struct ControlPlaneConnection {
    /// Edges.
    pub edges: Vec<ControlPlaneEdge>,
    /// The nodes, without cursors.
    pub nodes: Vec<ControlPlane>,
    /// Paging.
    pub page_info: PageInfo,
}

/// A control plane and its cursor.
#[derive(SimpleObject, Clone, Debug)]
pub struct ControlPlaneEdge {
    /// Cursor of this edge (pass as `after` to continue after it).
    pub cursor: String,
    /// The control plane.
    pub node: ControlPlane,
}

/// Paging information (Relay): forward paging with `first` and `after`.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct PageInfo {
    /// Whether another page follows.
    pub has_next_page: bool,
    /// Whether items come before this page: true when it was asked for `after` a cursor.
    pub has_previous_page: bool,
    /// The first edge's cursor; null on an empty page.
    pub start_cursor: Option<String>,
    /// The last edge's cursor (pass as `after` for the next page); null on an empty page.
    pub end_cursor: Option<String>,
}

impl PageInfo {
    /// The page info of edges with `cursors`, asked for `after` a cursor or not, with a next page or not.
    pub fn of(cursors: &[String], after: bool, has_next_page: bool) -> Self {
        Self {
            has_next_page,
            has_previous_page: after,
            start_cursor: cursors.first().cloned(),
            end_cursor: cursors.last().cloned(),
        }
    }
}

/// A pool of DataStores.
#[derive(Clone, Debug)]
pub struct Pool(pub model::Pool);

/// A pool of DataStores.
#[Object]
impl Pool {
    /// Name.
    async fn name(&self) -> &str {
        &self.0.name
    }
    /// spread, binpack, rendezvous or dedicated.
    async fn policy(&self) -> &str {
        &self.0.policy
    }
    /// Labels.
    async fn labels(&self) -> Vec<Label> {
        labels(&self.0.labels)
    }
    /// How many DataStores it has (batched).
    async fn data_store_count(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loader::pool_usage(ctx, &self.0.name).await?.0)
    }
    /// How many control planes use its DataStores (batched).
    async fn used_by(&self, ctx: &Context<'_>) -> Result<i64> {
        Ok(loader::pool_usage(ctx, &self.0.name).await?.1)
    }
    /// Created.
    async fn created_at(&self) -> DateTime<Utc> {
        self.0.created_at
    }
}

/// A DataStore.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(complex)]
pub struct DataStore {
    /// Name.
    pub name: String,
    /// Pool.
    pub pool: Option<String>,
    /// etcd, MySQL, PostgreSQL or NATS.
    pub driver: String,
    /// Endpoints (`host:port`).
    pub endpoints: Vec<String>,
    /// Labels.
    pub labels: Vec<Label>,
    /// Capacity in tenants.
    pub capacity_tenants: i32,
    /// Capacity in bytes.
    pub capacity_bytes: Option<Int64>,
    /// Identity of the etcd CA.
    pub ca_id: Option<String>,
    /// Ready.
    pub ready: bool,
    /// Cordoned: takes no new tenants.
    pub cordoned: bool,
    /// Created.
    pub created_at: DateTime<Utc>,
}

#[ComplexObject]
impl DataStore {
    /// How many control planes use it, as primary or override (batched).
    async fn used_by(&self, ctx: &Context<'_>) -> Result<i64> {
        loader::used_by(ctx, &self.name).await
    }
}

impl From<model::DataStore> for DataStore {
    fn from(d: model::DataStore) -> Self {
        Self {
            labels: labels(&d.labels),
            name: d.name,
            pool: d.pool,
            driver: d.driver,
            endpoints: d.endpoints,
            capacity_tenants: d.capacity_tenants,
            capacity_bytes: d.capacity_bytes.map(Int64),
            ca_id: d.ca_id,
            ready: d.ready,
            cordoned: d.cordoned,
            created_at: d.created_at,
        }
    }
}

/// A token's record (never the token itself).
#[derive(SimpleObject, Clone, Debug)]
pub struct Token {
    /// Token id (`jti`).
    pub id: Uuid,
    /// Role.
    pub role: GqlRole,
    /// Description.
    pub description: String,
    /// Who minted it.
    pub created_by: String,
    /// Minted at.
    pub created_at: DateTime<Utc>,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Revoked at.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<model::Token> for Token {
    fn from(t: model::Token) -> Self {
        Self {
            id: t.id,
            role: t.role.into(),
            description: t.description,
            created_by: t.created_by,
            created_at: t.created_at,
            expires_at: t.expires_at,
            revoked_at: t.revoked_at,
        }
    }
}

/// Why a mutation did not apply: an input field and what is wrong with it, or a conflict.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct UserError {
    /// Path of the input field inside `input` (e.g. `kubernetesVersion`, `datastore.pool`); none when
    /// the error is about the request as a whole.
    pub field: Option<String>,
    /// What is wrong and how to fix it.
    pub message: String,
    /// Kind of error.
    pub code: UserErrorCode,
}

/// Kinds of user errors.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum UserErrorCode {
    /// A field is invalid.
    Invalid,
    /// The change conflicts with the current state (e.g. the name is taken).
    Conflict,
    /// `ifMatch` is not the current ETag.
    PreconditionFailed,
    /// A tenant quota is reached (`field` names it: `controlPlanes`, `tokens`).
    QuotaExceeded,
}

/// A Relay node.
#[derive(async_graphql::Interface, Clone, Debug)]
#[graphql(field(name = "id", ty = "ID", desc = "Global id."))]
#[expect(
    clippy::large_enum_variant,
    reason = "one per `node` call; the interface derive wants plain variants"
)]
pub enum Node {
    /// A control plane.
    ControlPlane(ControlPlane),
    /// A tenant.
    Tenant(Tenant),
}

/// What a control-plane event says.
#[derive(Enum, Copy, Clone, Debug, PartialEq, Eq)]
pub enum ControlPlaneEventKind {
    /// Its observed phase, status or conditions changed.
    Changed,
    /// It is gone, with its datastore space (the last event about it).
    Deleted,
}

/// A change of a control plane, as committed.
#[derive(SimpleObject, Clone, Debug)]
pub struct ControlPlaneEvent {
    /// What changed.
    pub kind: ControlPlaneEventKind,
    /// The control plane after the change.
    pub control_plane: ControlPlane,
}

/// A node join token's record: never its secret half.
#[derive(SimpleObject, Clone, Debug, PartialEq)]
pub struct JoinToken {
    /// The token's public id (`[a-z0-9]{6}`, the part before the dot).
    pub id: String,
    /// Description.
    pub description: Option<String>,
    /// Expiry: the tenant cluster refuses the token from then on.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
}

impl From<model::JoinToken> for JoinToken {
    fn from(t: model::JoinToken) -> Self {
        Self {
            id: t.id,
            description: t.description,
            expires_at: t.expires_at,
            created_at: t.created_at,
        }
    }
}

/// A new join token: the only time its secret half is shown. It is usable when the mutation answers.
#[derive(SimpleObject, Clone)]
pub struct CreatedJoinToken {
    /// The token's public id (`[a-z0-9]{6}`).
    pub id: String,
    /// The bootstrap token, `<id>.<secret>`: shown only here, once.
    pub token: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Description.
    pub description: Option<String>,
    /// `host:port` of the control plane's API server.
    pub endpoint: String,
    /// `sha256:<hex>` of the tenant CA's SubjectPublicKeyInfo: kubeadm's `--discovery-token-ca-cert-hash`.
    pub discovery_token_ca_cert_hash: String,
    /// `kubeadm join <endpoint> --token <token> --discovery-token-ca-cert-hash <hash>`.
    pub join_command: String,
}

/// Redacts the secret half.
impl std::fmt::Debug for CreatedJoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedJoinToken")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl From<model::CreatedJoinToken> for CreatedJoinToken {
    fn from(t: model::CreatedJoinToken) -> Self {
        Self {
            id: t.id,
            token: t.token,
            expires_at: t.expires_at,
            created_at: t.created_at,
            description: t.description,
            endpoint: t.endpoint,
            discovery_token_ca_cert_hash: t.discovery_token_ca_cert_hash,
            join_command: t.join_command,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn every_phase_round_trips_and_a_strange_one_is_unknown() {
        for (phase, spelling) in PHASES {
            assert_eq!(ControlPlanePhase::of(spelling), phase);
            assert_eq!(phase.as_str(), spelling);
        }
        assert_eq!(ControlPlanePhase::of("ready"), ControlPlanePhase::Unknown);
        assert_eq!(TenantState::of("suspended"), TenantState::Suspended);
        assert_eq!(TenantState::of("gone"), TenantState::Unknown);
    }

    #[test]
    fn int64_is_a_decimal_string_and_takes_strings_or_whole_numbers() {
        let big = 9_007_199_254_740_993_i64;
        assert_eq!(Int64(big).to_value(), Value::String(big.to_string()));
        assert_eq!(Int64::parse(Value::String(big.to_string())).unwrap(), Int64(big));
        assert_eq!(Int64::parse(Value::Number(42.into())).unwrap(), Int64(42));
        assert!(Int64::parse(Value::String("1.5".into())).is_err());
        assert!(Int64::parse(Value::Boolean(true)).is_err());
    }

    #[test]
    fn page_info_names_both_ends_of_the_page() {
        let cursors = ["a".to_string(), "b".to_string()];
        assert_eq!(
            PageInfo::of(&cursors, true, false),
            PageInfo {
                has_next_page: false,
                has_previous_page: true,
                start_cursor: Some("a".into()),
                end_cursor: Some("b".into()),
            }
        );
        assert_eq!(PageInfo::of(&[], false, false).end_cursor, None);
    }
}

/// A short-lived credential for one tenant cluster: the only time its token is shown.
#[derive(SimpleObject, Clone)]
pub struct ClusterCredential {
    /// The bearer token (ES256 JWT) for the tenant API server.
    pub token: String,
    /// When the tenant API server stops accepting it.
    pub expires_at: DateTime<Utc>,
    /// Its audience, `tenantplane:cp:<control plane id>`.
    pub audience: String,
    /// The user name the tenant API server sees.
    pub username: String,
    /// The groups it sees.
    pub groups: Vec<String>,
}

/// Redacts the token.
impl std::fmt::Debug for ClusterCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCredential")
            .field("token", &"<redacted>")
            .field("audience", &self.audience)
            .finish_non_exhaustive()
    }
}

impl From<model::ClusterCredential> for ClusterCredential {
    fn from(c: model::ClusterCredential) -> Self {
        Self {
            token: c.token,
            expires_at: c.expires_at,
            audience: c.audience,
            username: c.username,
            groups: c.groups,
        }
    }
}

/// A tenant's own identity provider that a control plane's API server trusts.
#[derive(SimpleObject, Clone, Debug)]
pub struct Authenticator {
    /// Id.
    pub id: Uuid,
    /// The JWT authenticator, in the tenant kube-apiserver's own fields (`apiserver.config.k8s.io/v1`).
    pub spec: Json<serde_json::Value>,
    /// `pending`, `active` or `failed`, as the tenant API server reports.
    pub state: String,
    /// Why it is pending or failed.
    pub message: Option<String>,
    /// Who added it.
    pub created_by: String,
    /// Added.
    pub created_at: DateTime<Utc>,
}

impl From<model::Authenticator> for Authenticator {
    fn from(a: model::Authenticator) -> Self {
        let state = serde_json::to_value(a.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        Self {
            id: a.id,
            spec: Json(serde_json::to_value(&a.spec).unwrap_or_default()),
            state,
            message: a.message,
            created_by: a.created_by,
            created_at: a.created_at,
        }
    }
}
