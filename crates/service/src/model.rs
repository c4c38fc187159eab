//! The shapes the API speaks (JSON, camelCase), shared by REST and GraphQL.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::domain::{OperationKind, OperationStage, OperationState, Role, ServiceType, SizeClass};

/// A tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// Id.
    pub id: Uuid,
    /// URL slug (DNS-1123 label).
    pub slug: String,
    /// Display name.
    pub display_name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `active`, `suspended` (its tokens are refused) or `deleting` (its control planes are being deleted;
    /// the tenant is gone once the last one is).
    pub state: String,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// A page of tenants, oldest first, with an opaque cursor for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantPage {
    /// Items, ordered by creation time then id.
    pub items: Vec<Tenant>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// The answer to a cascading tenant delete: the tenant (`deleting`) and the delete operation of each of
/// its control planes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantDeletion {
    /// The tenant, in state `deleting` until its last control plane is gone; then `GET` answers 404.
    pub tenant: Tenant,
    /// The delete operation of each control plane, oldest control plane first.
    pub operations: Vec<Operation>,
}

/// Body of `POST /tenants`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTenant {
    /// URL slug (DNS-1123 label); with the namespace template, its namespace must fit 63 characters.
    pub slug: String,
    /// Display name (1–200 characters).
    pub display_name: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A token's record (never the token itself).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Token {
    /// Token id (`jti`).
    pub id: Uuid,
    /// Role.
    pub role: Role,
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

/// A page of tokens, newest first, with an opaque cursor for the next (older) page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenPage {
    /// Items, newest first.
    pub items: Vec<Token>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Body of `POST /tenants/{tenant}/tokens`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MintToken {
    /// Role of the new token (`tenant-admin`, `tenant-member` or `tenant-viewer`).
    pub role: Role,
    /// Lifetime in seconds (default 86400, at most 366 days).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub ttl_seconds: Option<i64>,
    /// Description.
    #[serde(default)]
    pub description: String,
}

/// A freshly minted token: the only time the JWT is shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MintedToken {
    /// The bearer token (JWT).
    pub token: String,
    /// Its record.
    pub record: Token,
}

/// Datastore preference of a control plane.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataStorePreference {
    /// Pool to place in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// Labels the DataStore must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// An explicit DataStore (platform admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Addons of the tenant cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonsSpec {
    /// CoreDNS (default on).
    #[serde(default = "yes", rename = "coreDNS")]
    pub core_dns: bool,
    /// kube-proxy (default on).
    #[serde(default = "yes")]
    pub kube_proxy: bool,
    /// Konnectivity (default off).
    #[serde(default)]
    pub konnectivity: bool,
}

fn yes() -> bool {
    true
}

impl Default for AddonsSpec {
    fn default() -> Self {
        Self {
            core_dns: true,
            kube_proxy: true,
            konnectivity: false,
        }
    }
}

/// Body of `POST /tenants/{tenant}/control-planes`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateControlPlane {
    /// Name (DNS-1035 label: starts with a letter; it names the control plane's Service), unique in the
    /// tenant.
    pub name: String,
    /// Kubernetes version `vX.Y.Z` within the supported range.
    pub kubernetes_version: String,
    /// Replicas, 0 (asleep) to 9 (default 2).
    #[serde(default = "two", deserialize_with = "super::whole::i32")]
    pub replicas: i32,
    /// Service type (default ClusterIP).
    #[serde(default = "cluster_ip")]
    pub service_type: ServiceType,
    /// API server port (default 6443); with `NodePort`, also the node port, so within the cluster's
    /// NodePort range and unique.
    #[serde(default = "port", deserialize_with = "super::whole::i32")]
    pub port: i32,
    /// Size class (default small).
    #[serde(default = "small")]
    pub size_class: SizeClass,
    /// Datastore preference.
    #[serde(default)]
    pub datastore: DataStorePreference,
    /// Events/leases offload: `none` (default), `auto` or `pool:<name>`.
    #[serde(default = "none")]
    pub offload: String,
    /// Addons.
    #[serde(default)]
    pub addons: AddonsSpec,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn two() -> i32 {
    2
}
fn cluster_ip() -> ServiceType {
    ServiceType::ClusterIp
}
fn port() -> i32 {
    6443
}
fn small() -> SizeClass {
    SizeClass::Small
}
fn none() -> String {
    "none".into()
}

/// Body of `PATCH /tenants/{tenant}/control-planes/{id}`: only what may change.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateControlPlane {
    /// New version: same or next minor, never lower.
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// New replicas (0–9).
    #[serde(default, deserialize_with = "super::whole::option_i32")]
    pub replicas: Option<i32>,
    /// Replaces the labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Platform admins only, and alone: the DataStore to move to, live, as `POST …/migrate {target}`
    /// (the same checks, a `migrate` operation; problems name `datastore`). Other callers get the answer
    /// of an unknown field.
    #[serde(default)]
    pub datastore: Option<String>,
}

/// A control plane: the tenant's request and what runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Requested Kubernetes version.
    pub kubernetes_version: String,
    /// Requested replicas.
    pub replicas: i32,
    /// Service type.
    pub service_type: ServiceType,
    /// Port.
    pub port: i32,
    /// Size class.
    pub size_class: SizeClass,
    /// Datastore preference.
    pub datastore: DataStorePreference,
    /// Offload mode.
    pub offload: String,
    /// Each addon as requested and as installed in the tenant cluster, and the `AddonsReady` condition.
    pub addons: ControlPlaneAddons,
    /// Whether nodes can join: the `NodeJoinReady` condition.
    pub node_join: NodeJoin,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Observed phase: Pending, Provisioning, Ready, NotReady, Upgrading, Sleeping, Deleting, Failed.
    pub phase: String,
    /// Observed status (endpoint, conditions, installed version, …) as reported by the cluster.
    #[schema(value_type = Object)]
    pub status: serde_json::Value,
    /// Where its state lives: the DataStores chosen by placement, with the decision's reasons.
    pub placement: Option<Placement>,
    /// Spec generation; the ETag is `"<generation>"`.
    pub generation: i64,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Updated.
    pub updated_at: DateTime<Utc>,
}

impl ControlPlane {
    /// The ETag of this version of the resource.
    pub fn etag(&self) -> String {
        format!("\"{}\"", self.generation)
    }
}

/// One addon of a control plane: what the tenant asked for and what the tenant cluster holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonState {
    /// Asked for when the control plane was created (the create body's `addons.<addon>`).
    pub requested: bool,
    /// The addon's objects (workload, RBAC, configuration) are in the tenant cluster, as the controller
    /// last reported (`status.addons.<addon>.enabled` of the TenantControlPlane); false until reported.
    /// Its pods run once the tenant has nodes: `addons.ready` says when they are available.
    pub installed: bool,
    /// When the controller last wrote the addon's objects; null until it has.
    pub last_update: Option<DateTime<Utc>>,
}

/// The addons of a control plane. `installed` is what runs, `requested` what was asked for: they
/// differ while the controller catches up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneAddons {
    /// CoreDNS.
    #[serde(rename = "coreDNS")]
    pub core_dns: AddonState,
    /// kube-proxy.
    pub kube_proxy: AddonState,
    /// Konnectivity: the server beside each kube-apiserver and the agents in the tenant cluster.
    pub konnectivity: AddonState,
    /// The `AddonsReady` condition: `True` when every requested addon is fully available in the tenant
    /// cluster; null until the controller reports it.
    pub ready: Option<Condition>,
}

/// Whether nodes can join a control plane (`kubeadm join`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeJoin {
    /// The `NodeJoinReady` condition: `True` (reason `JoinObjectsPresent`) when kubeadm's bootstrap objects
    /// are in the tenant cluster (cluster-info signed by every bootstrap token, kubeadm-config,
    /// kubelet-config, the node-bootstrap RBAC); null until the controller reports it.
    pub ready: Option<Condition>,
}

/// A status condition as the cluster reports it (`metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type, e.g. `AddonsReady`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: Option<String>,
    /// Human-readable message.
    pub message: Option<String>,
    /// Last transition (RFC 3339).
    pub last_transition_time: Option<String>,
    /// The generation the condition was set for.
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// The conditions of a mirrored status document (`status.conditions`), in order.
    pub fn all_in(status: &serde_json::Value) -> Vec<Condition> {
        let text = |c: &serde_json::Value, k: &str| c.get(k).and_then(|v| v.as_str()).map(str::to_string);
        status
            .get("conditions")
            .and_then(|c| c.as_array())
            .map(|list| {
                list.iter()
                    .map(|c| Condition {
                        type_: text(c, "type").unwrap_or_default(),
                        status: text(c, "status").unwrap_or_default(),
                        reason: text(c, "reason"),
                        message: text(c, "message"),
                        last_transition_time: text(c, "lastTransitionTime"),
                        observed_generation: c.get("observedGeneration").and_then(|v| v.as_i64()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The condition `type_` of a mirrored status document, if reported.
    pub fn find(status: &serde_json::Value, type_: &str) -> Option<Condition> {
        Self::all_in(status).into_iter().find(|c| c.type_ == type_)
    }
}

impl ControlPlaneAddons {
    /// The addons as requested (a row's `addons`) and as installed (its mirrored `status.addons`), with
    /// the `AddonsReady` condition. An addon the status does not name is not installed.
    pub fn observed(requested: &serde_json::Value, status: &serde_json::Value) -> Self {
        let spec: AddonsSpec = serde_json::from_value(requested.clone()).unwrap_or_default();
        let state = |key: &str, requested: bool| {
            let seen = status.get("addons").and_then(|a| a.get(key));
            AddonState {
                requested,
                installed: seen
                    .and_then(|s| s.get("enabled"))
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false),
                last_update: seen
                    .and_then(|s| s.get("lastUpdate"))
                    .and_then(|v| v.as_str())
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc)),
            }
        };
        Self {
            core_dns: state("coreDNS", spec.core_dns),
            kube_proxy: state("kubeProxy", spec.kube_proxy),
            konnectivity: state("konnectivity", spec.konnectivity),
            ready: Condition::find(status, "AddonsReady"),
        }
    }
}

impl NodeJoin {
    /// From a mirrored status document.
    pub fn observed(status: &serde_json::Value) -> Self {
        Self {
            ready: Condition::find(status, "NodeJoinReady"),
        }
    }
}

/// The DataStores of a control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The primary DataStore (`spec.dataStore`).
    pub data_store: String,
    /// Offloaded resources and their DataStores (`spec.dataStoreOverrides`), in order.
    pub overrides: Vec<PlacementOverride>,
    /// The engine's decision: every candidate with its score or the constraint it failed.
    #[schema(value_type = Object)]
    pub decision: serde_json::Value,
}

/// One offloaded resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementOverride {
    /// `<group>/<resource>`.
    pub resource: String,
    /// The etcd DataStore holding it.
    pub data_store: String,
}

/// An asynchronous operation on a control plane (after Google AIP-151): it is `done` when the work is,
/// not when the request is recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// Id.
    pub id: Uuid,
    /// Control plane.
    pub control_plane_id: Uuid,
    /// What it does.
    pub kind: OperationKind,
    /// Where it is.
    pub state: OperationState,
    /// Whether it has ended (`succeeded` or `failed`).
    pub done: bool,
    /// The control plane generation it asks for; a create or update succeeds when the control plane is
    /// Ready at this generation or a later one.
    pub generation: i64,
    /// The last stage reached.
    pub stage: Option<OperationStage>,
    /// Every stage reached, in order, with when.
    pub stages: Vec<StageReached>,
    /// Why it failed, machine-readable: the controller's reason (e.g. `ImageNotBuilt`), or
    /// `DeadlineExceeded`, `Superseded`, `ApplyFailed`, `DeleteTimeout`.
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

/// A stage an operation reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageReached {
    /// The stage.
    pub stage: OperationStage,
    /// When.
    pub at: DateTime<Utc>,
}

/// A page of operations, newest first, with an opaque cursor for the next (older) page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationPage {
    /// Items, newest first.
    pub items: Vec<Operation>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// The answer to a write: the operation and the resource as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The operation that carries the change to the cluster.
    pub operation: Operation,
    /// The control plane as recorded.
    pub control_plane: ControlPlane,
}

/// A page of results with an opaque cursor for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlanePage {
    /// Items, ordered by creation time then id.
    pub items: Vec<ControlPlane>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A pool of DataStores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// Row id: the tiebreak of its list position (not part of the REST shape).
    #[serde(skip)]
    #[schema(ignore)]
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Placement policy: spread, binpack, rendezvous or dedicated.
    pub policy: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /pools`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePool {
    /// Name (DNS-1123 label).
    pub name: String,
    /// Policy (default spread).
    #[serde(default = "spread")]
    pub policy: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A page of pools, oldest first, with an opaque cursor for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolPage {
    /// Items, ordered by creation time then id.
    pub items: Vec<Pool>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Body of `PATCH /pools/{name}`: what is given changes (the name does not).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdatePool {
    /// Policy: spread, binpack, rendezvous or dedicated (applies to the next placements); not `null`.
    #[serde(default, deserialize_with = "present")]
    pub policy: Option<String>,
    /// Labels (replace all).
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
}

/// A field that may be left out, but not given as `null`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(de: D) -> Result<Option<T>, D::Error> {
    T::deserialize(de).map(Some)
}

fn spread() -> String {
    "spread".into()
}

/// A reference to a key of a Secret (the value never passes through Tenantplane).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
    /// Key in the Secret.
    pub key_path: String,
}

/// Credentials of a DataStore, as Secret references.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataStoreSecrets {
    /// Username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<SecretKeyRef>,
    /// Password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretKeyRef>,
    /// CA certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificate: Option<SecretKeyRef>,
    /// CA private key (etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_private_key: Option<SecretKeyRef>,
    /// Client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<SecretKeyRef>,
    /// Client private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_private_key: Option<SecretKeyRef>,
}

/// A DataStore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStore {
    /// Row id: the tiebreak of its list position (not part of the REST shape).
    #[serde(skip)]
    #[schema(ignore)]
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Pool.
    pub pool: Option<String>,
    /// Driver: etcd, MySQL, PostgreSQL or NATS.
    pub driver: String,
    /// Endpoints (`host:port`).
    pub endpoints: Vec<String>,
    /// Secret references.
    pub secrets: DataStoreSecrets,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Capacity in tenants.
    pub capacity_tenants: i32,
    /// Capacity in bytes.
    pub capacity_bytes: Option<i64>,
    /// Identity of the etcd CA (override targets must share the primary's).
    pub ca_id: Option<String>,
    /// Ready.
    pub ready: bool,
    /// Cordoned: takes no new tenants.
    pub cordoned: bool,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /datastores`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateDataStore {
    /// Name (DNS-1123 label).
    pub name: String,
    /// Pool name.
    #[serde(default)]
    pub pool: Option<String>,
    /// Driver: etcd, MySQL, PostgreSQL or NATS.
    pub driver: String,
    /// Endpoints (`host:port`, 1–32).
    pub endpoints: Vec<String>,
    /// Secret references.
    #[serde(default)]
    pub secrets: DataStoreSecrets,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Capacity in tenants (NATS: always 1).
    #[serde(deserialize_with = "super::whole::i32")]
    pub capacity_tenants: i32,
    /// Capacity in bytes.
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub capacity_bytes: Option<i64>,
    /// CA identity (etcd).
    #[serde(default)]
    pub ca_id: Option<String>,
}

/// A page of DataStores, oldest first, with an opaque cursor for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStorePage {
    /// Items, ordered by creation time then id.
    pub items: Vec<DataStore>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Body of `PATCH /datastores/{name}`: what can change under tenants already placed (the name, driver,
/// endpoints, credentials and CA identity cannot: tenants' control planes are configured with them).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateDataStore {
    /// Pool name (for the next placements; tenants placed stay where they are).
    #[serde(default)]
    pub pool: Option<String>,
    /// Labels (replace all).
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Capacity in tenants (NATS: at most 1); below what is placed, it only stops new placements.
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub capacity_tenants: Option<i64>,
    /// Capacity in bytes.
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub capacity_bytes: Option<i64>,
}

/// Caller identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Viewer {
    /// Token id.
    pub token_id: Uuid,
    /// Tenant slug (none for platform admins).
    pub tenant: Option<String>,
    /// Role.
    pub role: Role,
    /// Token expiry.
    pub expires_at: DateTime<Utc>,
}

/// An audit-log entry about a resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
    pub details: serde_json::Value,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// An entry of a tenant's audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Id (ascending in time).
    pub id: i64,
    /// Who: `role:subject(tokenId)` (never a secret).
    pub actor: String,
    /// What, e.g. `control-plane.create`, `control-plane.kubeconfig`, `token.mint`.
    pub action: String,
    /// The kind of its target, e.g. `control-plane`.
    pub target_kind: String,
    /// The target's id.
    pub target_id: String,
    /// Request id of the call.
    pub request_id: Option<String>,
    /// Details.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// A page of audit entries, newest first, with an opaque cursor for the next (older) page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    /// Items, newest first.
    pub items: Vec<AuditRecord>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// Body of `POST /tenants/{tenant}/control-planes/{id}/join-tokens`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateJoinToken {
    /// Lifetime in seconds, 1 to 604800 (7 days); default 86400 (one day).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub ttl_seconds: Option<i64>,
    /// What the token is for: at most 256 characters, no control characters. Also the bootstrap token
    /// Secret's `description` in the tenant cluster.
    #[serde(default)]
    pub description: Option<String>,
}

/// A node join token's record: never its secret half.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
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

/// The live (neither revoked nor expired) join tokens of a control plane, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinTokenList {
    /// The tokens.
    pub items: Vec<JoinToken>,
}

/// A new join token: the only time its secret half is shown. It is usable when this answer arrives.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedJoinToken {
    /// The token's public id (`[a-z0-9]{6}`).
    pub id: String,
    /// The bootstrap token, `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`): shown only here, once.
    pub token: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Description.
    pub description: Option<String>,
    /// `host:port` of the control plane's API server (its reported endpoint).
    pub endpoint: String,
    /// `sha256:<hex>` of the tenant CA certificate's SubjectPublicKeyInfo (DER): kubeadm's
    /// `--discovery-token-ca-cert-hash`.
    pub discovery_token_ca_cert_hash: String,
    /// `kubeadm join <endpoint> --token <token> --discovery-token-ca-cert-hash <hash>`.
    pub join_command: String,
}

/// Redacts the secret half (the token and the join command that carries it).
impl std::fmt::Debug for CreatedJoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedJoinToken")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("created_at", &self.created_at)
            .field("description", &self.description)
            .field("endpoint", &self.endpoint)
            .field("discovery_token_ca_cert_hash", &self.discovery_token_ca_cert_hash)
            .field("join_command", &"<redacted>")
            .finish()
    }
}

/// One quota of a tenant: its limit, what is in use, and whether the limit is the server's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUsage {
    /// How many the tenant may have.
    pub limit: i64,
    /// How many it has now.
    pub used: i64,
    /// Whether `limit` is the server's default (no quota of its own is set).
    pub default: bool,
}

/// A tenant's quotas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quotas {
    /// Live control planes (being deleted ones count until they are gone).
    pub control_planes: QuotaUsage,
    /// Live tokens (neither revoked nor expired).
    pub tokens: QuotaUsage,
}

/// Body of `PUT /tenants/{tenant}/quotas`: each limit, or `null`/absent for the server's default.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetQuotas {
    /// Live control planes the tenant may have (0–100,000).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub control_planes: Option<i64>,
    /// Live tokens the tenant may have (0–100,000).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub tokens: Option<i64>,
}

/// Body of `POST /tenants/{tenant}/control-planes/{id}/credentials`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCredential {
    /// Lifetime in seconds, 60 to 3600; default 900 (15 minutes).
    #[serde(default, deserialize_with = "super::whole::option_i64")]
    pub ttl_seconds: Option<i64>,
}

/// A short-lived credential for one tenant cluster: a JWT its API server accepts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCredential {
    /// The bearer token (ES256 JWT) for the tenant API server: shown only here.
    pub token: String,
    /// When the tenant API server stops accepting it.
    pub expires_at: DateTime<Utc>,
    /// Its audience, `tenantplane:cp:<control plane id>`: no other control plane accepts it.
    pub audience: String,
    /// The user name the tenant API server sees, `tenantplane:<subject>`.
    pub username: String,
    /// The groups it sees: `tenantplane:admins`, `tenantplane:members` or `tenantplane:viewers`.
    pub groups: Vec<String>,
}

/// Redacts the token.
impl std::fmt::Debug for ClusterCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCredential")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("audience", &self.audience)
            .field("username", &self.username)
            .field("groups", &self.groups)
            .finish()
    }
}

/// A tenant's own identity provider that a control plane's API server trusts, and whether it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Authenticator {
    /// Id.
    pub id: Uuid,
    /// The control plane.
    pub control_plane_id: Uuid,
    /// The JWT authenticator, in the tenant kube-apiserver's own fields.
    #[schema(value_type = crate::k8s::crd::JwtAuthenticator)]
    pub spec: crate::k8s::crd::JwtAuthenticator,
    /// `pending` (not loaded yet), `active` (its tokens are accepted) or `failed` (the API server
    /// refused it; see `message`), as the tenant API server reports.
    pub state: AuthenticatorState,
    /// Why it is pending or failed.
    pub message: Option<String>,
    /// Who added it (`role:subject(tokenId)`).
    pub created_by: String,
    /// Added.
    pub created_at: DateTime<Utc>,
}

/// Whether a tenant API server runs an authenticator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuthenticatorState {
    /// Written, not loaded yet.
    Pending,
    /// Loaded: its tokens are accepted.
    Active,
    /// Refused by the API server, which keeps serving the previous configuration.
    Failed,
}

/// A control plane's authenticators, oldest first (the order its API server tries them in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticatorList {
    /// The authenticators.
    pub items: Vec<Authenticator>,
}
