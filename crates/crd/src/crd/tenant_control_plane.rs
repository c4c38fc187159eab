//! The namespaced `TenantControlPlane` (short name `tcp`): one tenant's Kubernetes control plane.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::DeploymentStrategy,
        core::v1::{Affinity, ResourceRequirements, Toleration},
    },
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The desired control plane of one tenant cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kamaji.clastix.io",
    version = "v1alpha1",
    kind = "TenantControlPlane",
    plural = "tenantcontrolplanes",
    namespaced,
    status = "TenantControlPlaneStatus",
    shortname = "tcp",
    category = "kamaji",
    doc = "TenantControlPlane is the control plane (kube-apiserver, controller-manager, scheduler) of one tenant cluster.",
    scale(
        spec_replicas_path = ".spec.controlPlane.deployment.replicas",
        status_replicas_path = ".status.kubernetesResources.deployment.replicas",
        label_selector_path = ".status.kubernetesResources.deployment.selector"
    ),
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.kubernetes.version","description":"Kubernetes version"}"#,
    printcolumn = r#"{"name":"Installed Version","type":"string","jsonPath":".status.kubernetesResources.version.version","description":"The actual installed Kubernetes version from status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.kubernetesResources.version.status","description":"Status"}"#,
    printcolumn = r#"{"name":"Control-Plane endpoint","type":"string","jsonPath":".status.controlPlaneEndpoint","description":"Tenant Control Plane Endpoint (API server)"}"#,
    printcolumn = r#"{"name":"Kubeconfig","type":"string","jsonPath":".status.kubeconfig.admin.secretName","description":"Secret which contains admin kubeconfig"}"#,
    printcolumn = r#"{"name":"Datastore","type":"string","jsonPath":".status.storage.dataStoreName","description":"DataStore actually used"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Age"}"#
)]
#[x_kube(validation = Rule::new("!has(oldSelf.dataStore) || has(self.dataStore)").message("unsetting the dataStore is not supported: set it to another DataStore to migrate"))]
#[x_kube(validation = Rule::new("!has(oldSelf.dataStoreSchema) || has(self.dataStoreSchema)").message("unsetting the dataStoreSchema is not supported: keep the value it has"))]
#[x_kube(validation = Rule::new("!has(oldSelf.dataStoreUsername) || has(self.dataStoreUsername)").message("unsetting the dataStoreUsername is not supported: keep the value it has"))]
#[x_kube(validation = Rule::new("!has(self.dataStoreOverrides) || !has(self.dataStore) || self.dataStoreOverrides.all(o, o.dataStore != self.dataStore)").message("a dataStoreOverrides entry points at spec.dataStore: an override must name a different etcd DataStore, or be removed"))]
#[x_kube(validation = Rule::new("!has(self.networkProfile) || !has(self.networkProfile.loadBalancerSourceRanges) || size(self.networkProfile.loadBalancerSourceRanges) == 0 || self.controlPlane.service.serviceType == 'LoadBalancer'").message("networkProfile.loadBalancerSourceRanges needs controlPlane.service.serviceType LoadBalancer"))]
#[x_kube(validation = Rule::new("!has(self.networkProfile) || !has(self.networkProfile.loadBalancerClass) || self.controlPlane.service.serviceType == 'LoadBalancer'").message("networkProfile.loadBalancerClass needs controlPlane.service.serviceType LoadBalancer"))]
#[x_kube(validation = Rule::new("!has(self.networkProfile) || !has(self.networkProfile.port) || !(self.networkProfile.port in [10257, 10259])").message("networkProfile.port must not be 10257 or 10259: kube-controller-manager and kube-scheduler listen there in the control-plane pod"))]
#[x_kube(validation = Rule::new("!has(self.addons) || !has(self.addons.konnectivity) || !has(self.networkProfile) || !has(self.networkProfile.port) || !(self.networkProfile.port in [8133, 8134])").message("with Konnectivity, networkProfile.port must not be 8133 or 8134: the konnectivity-server sidecar's admin and health ports"))]
#[x_kube(validation = Rule::new("!has(self.addons) || !has(self.addons.konnectivity) || !(self.addons.konnectivity.server.port in [has(self.networkProfile) && has(self.networkProfile.port) ? self.networkProfile.port : 6443, 8133, 8134, 10257, 10259])").message("addons.konnectivity.server.port must differ from networkProfile.port (default 6443) and from 8133, 8134, 10257 and 10259: every port of the control-plane pod is its own"))]
#[serde(rename_all = "camelCase")]
pub struct TenantControlPlaneSpec {
    /// Name of the DataStore that holds this control plane's state. Can be changed (a migration), never unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_store: Option<String>,
    /// The tenant's database (SQL), key prefix (etcd) or bucket (NATS). Defaults to the TCP UID; immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("changing the dataStoreSchema is not supported: it names the tenant's database, key prefix or bucket"))]
    pub data_store_schema: Option<String>,
    /// The tenant's datastore user. Defaults to the TCP UID; immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("changing the dataStoreUsername is not supported: it names the tenant's datastore user"))]
    pub data_store_username: Option<String>,
    /// Built-in resources stored in other etcd DataStores (kube-apiserver `--etcd-servers-overrides`), in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["resource".into()]))]
    #[x_kube(validation = Rule::new("size(self) <= 16").message("at most 16 dataStoreOverrides are supported: offload fewer resources"))]
    #[x_kube(validation = Rule::new("self.all(o, self.exists_one(p, p.resource == o.resource))").message("each resource may be overridden once: merge the duplicate dataStoreOverrides entries"))]
    pub data_store_overrides: Option<Vec<DataStoreOverride>>,
    /// The control-plane Deployment and its Service.
    pub control_plane: ControlPlane,
    /// Kubernetes version and kubelet settings of the tenant.
    pub kubernetes: KubernetesSpec,
    /// Network settings of the tenant API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_profile: Option<NetworkProfile>,
    /// Addons installed in the tenant cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<Addons>,
    /// Tenantplane extension: the JWT issuers the tenant kube-apiserver trusts (`--authentication-config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<super::AuthenticationSpec>,
    /// Tenantplane extension: how a migration to another `dataStore` treats the tenant's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_store_migration: Option<super::DataStoreMigrationPolicy>,
}

/// One resource moved to another etcd DataStore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStoreOverride {
    /// `<group>/<resource>` of a built-in resource, with an empty core group: `/events`, `coordination.k8s.io/leases`.
    #[schemars(length(max = 317))]
    #[x_kube(validation = Rule::new("self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("resource must be <group>/<resource> with an empty core group, e.g. /events or coordination.k8s.io/leases"))]
    pub resource: String,
    /// Name of the etcd DataStore that stores this resource.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self != ''").message("dataStore must name an etcd DataStore"))]
    pub data_store: String,
}

/// The control-plane workload and how it is exposed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlane {
    /// The Deployment running kube-apiserver, kube-controller-manager and kube-scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentSpec>,
    /// The Service exposing the API server.
    pub service: ServiceSpec,
}

fn default_replicas() -> Option<i32> {
    Some(2)
}

/// Settings of the control-plane Deployment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// Number of control-plane pods (default 2). 0 puts the tenant to sleep.
    #[serde(default = "default_replicas", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Where the control-plane images come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_settings: Option<RegistrySettings>,
    /// Resource requirements per component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ComponentResources>,
    /// Extra command-line flags per component; managed flags win over these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<ComponentExtraArgs>,
    /// Node selector of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Affinity of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Rollout strategy (default RollingUpdate with maxSurge 100% and maxUnavailable 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentStrategy>,
    /// Labels and annotations of the Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
    /// Labels and annotations of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_additional_metadata: Option<AdditionalMetadata>,
    /// Service account of the control-plane pods (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

fn default_registry() -> Option<String> {
    Some("registry.k8s.io".into())
}
fn default_apiserver_image() -> Option<String> {
    Some("kube-apiserver".into())
}
fn default_controller_manager_image() -> Option<String> {
    Some("kube-controller-manager".into())
}
fn default_scheduler_image() -> Option<String> {
    Some("kube-scheduler".into())
}

/// Image locations: `<registry>/<image>:<version><tagSuffix>`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySettings {
    /// The registry (default `registry.k8s.io`).
    #[serde(default = "default_registry", skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    /// A suffix appended to every tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_suffix: Option<String>,
    /// The kube-apiserver image name (default `kube-apiserver`).
    #[serde(default = "default_apiserver_image", skip_serializing_if = "Option::is_none")]
    pub api_server_image: Option<String>,
    /// The kube-controller-manager image name (default `kube-controller-manager`).
    #[serde(
        default = "default_controller_manager_image",
        skip_serializing_if = "Option::is_none"
    )]
    pub controller_manager_image: Option<String>,
    /// The kube-scheduler image name (default `kube-scheduler`).
    #[serde(default = "default_scheduler_image", skip_serializing_if = "Option::is_none")]
    pub scheduler_image: Option<String>,
}

/// Resource requirements of each container.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentResources {
    /// kube-apiserver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ResourceRequirements>,
    /// kube-controller-manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ResourceRequirements>,
    /// kube-scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<ResourceRequirements>,
    /// The kine sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kine: Option<ResourceRequirements>,
}

/// Extra flags of each container (`--flag=value`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentExtraArgs {
    /// kube-apiserver flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub api_server: Option<Vec<String>>,
    /// kube-controller-manager flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub controller_manager: Option<Vec<String>>,
    /// kube-scheduler flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub scheduler: Option<Vec<String>>,
    /// kine flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub kine: Option<Vec<String>>,
}

/// Extra labels and annotations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalMetadata {
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The Service in front of the API server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `ClusterIP`, `NodePort` or `LoadBalancer`.
    pub service_type: ServiceType,
    /// Labels and annotations of the Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
}

/// How the API server is exposed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ServiceType {
    /// Reachable inside the management cluster only.
    ClusterIP,
    /// On a port of every node.
    NodePort,
    /// Through a cloud load balancer.
    LoadBalancer,
}

/// Kubernetes version and component settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesSpec {
    /// The Kubernetes version, `vMAJOR.MINOR.PATCH` (e.g. `v1.34.4`).
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^v[0-9]+[.][0-9]+[.][0-9]+$')").message("version must have the form vMAJOR.MINOR.PATCH, e.g. v1.34.4"))]
    pub version: String,
    /// Settings handed to the tenant's kubelets.
    pub kubelet: KubeletSpec,
    /// Admission plugins enabled on the API server (default: Kamaji's list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub admission_controllers: Option<Vec<String>>,
}

/// Kubelet settings published to joining nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSpec {
    /// RFC 6902 patches applied to the kubelet configuration.
    #[serde(
        rename = "configurationJSONPatches",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub configuration_json_patches: Option<Vec<JsonPatch>>,
    /// Address types used to reach kubelets, in order (default InternalIP, ExternalIP, Hostname).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    #[x_kube(merge_strategy = ListMerge::Set)]
    pub preferred_address_types: Option<Vec<AddressType>>,
    /// Deprecated: the kubelet cgroup driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroupfs: Option<CgroupDriver>,
}

/// One JSON patch operation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatch {
    /// The operation.
    pub op: JsonPatchOp,
    /// The JSON pointer it applies to.
    pub path: String,
    /// The source pointer of `move` and `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The value of `add`, `replace` and `test`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::any_json")]
    pub value: Option<serde_json::Value>,
}

/// RFC 6902 operations.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JsonPatchOp {
    /// add
    Add,
    /// remove
    Remove,
    /// replace
    Replace,
    /// move
    Move,
    /// copy
    Copy,
    /// test
    Test,
}

/// A node address type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AddressType {
    /// The node's hostname.
    Hostname,
    /// An internal IP.
    InternalIP,
    /// An external IP.
    ExternalIP,
    /// An internal DNS name.
    InternalDNS,
    /// An external DNS name.
    ExternalDNS,
}

/// A cgroup driver.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// systemd
    Systemd,
    /// cgroupfs
    Cgroupfs,
}

fn default_port() -> Option<i32> {
    Some(6443)
}
fn default_cluster_domain() -> Option<String> {
    Some("cluster.local".into())
}

/// Network settings of the tenant API server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProfile {
    /// The address the API server is reached at (optional for LoadBalancer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The address the API server advertises (an IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self == '' || isIP(self)").message("advertiseAddress must be an IP address"))]
    pub advertise_address: Option<String>,
    /// The API server's secure port, also the Service port (default 6443).
    #[serde(default = "default_port", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Extra subject alternative names of the API server certificate.
    #[serde(rename = "certSANs", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::cert_sans")]
    pub cert_sans: Option<Vec<String>>,
    /// Service CIDRs (default 10.96.0.0/16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::cidrs")]
    pub service_cidrs: Option<Vec<String>>,
    /// Pod CIDRs (default 10.244.0.0/16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::cidrs")]
    pub pod_cidrs: Option<Vec<String>>,
    /// Cluster DNS service IPs.
    #[serde(rename = "dnsServiceIPs", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::ips")]
    pub dns_service_ips: Option<Vec<String>>,
    /// The cluster domain (default `cluster.local`). Immutable.
    #[serde(default = "default_cluster_domain", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.contains('.')").message("clusterDomain must contain a dot, e.g. cluster.local"))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("clusterDomain is immutable"))]
    pub cluster_domain: Option<String>,
    /// Source ranges allowed through the LoadBalancer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::source_ranges")]
    pub load_balancer_source_ranges: Option<Vec<String>>,
    /// The LoadBalancer class. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("loadBalancerClass cannot be changed"))]
    pub load_balancer_class: Option<String>,
}

/// Addons installed in the tenant cluster; presence enables an addon.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Addons {
    /// CoreDNS.
    #[serde(rename = "coreDNS", default, skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<AddonSpec>,
    /// kube-proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<AddonSpec>,
    /// Konnectivity (server sidecar and agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub konnectivity: Option<KonnectivitySpec>,
}

/// Image overrides of a simple addon.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonSpec {
    /// Image repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_repository: Option<String>,
    /// Image tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
}

/// The Konnectivity addon.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KonnectivitySpec {
    /// The server sidecar.
    pub server: KonnectivityServer,
    /// The agents in the tenant cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<KonnectivityAgent>,
}

fn default_konnectivity_port() -> i32 {
    8132
}

/// The Konnectivity server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KonnectivityServer {
    /// The port agents connect to (default 8132).
    #[serde(default = "default_konnectivity_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// The version (default `v0.<tenant minor>.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Resources of the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub extra_args: Option<Vec<String>>,
}

/// The Konnectivity agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[x_kube(validation = Rule::new("!has(self.mode) || self.mode != 'DaemonSet' || !has(self.replicas) || self.replicas == 0").message("replicas applies to mode Deployment only"))]
#[serde(rename_all = "camelCase")]
pub struct KonnectivityAgent {
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Tolerations of the agent pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::flags")]
    pub extra_args: Option<Vec<String>>,
    /// Run the agents on the host network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// `DaemonSet` (default) or `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<KonnectivityAgentMode>,
    /// Replicas when mode is `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
}

/// How Konnectivity agents run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum KonnectivityAgentMode {
    /// One agent per node.
    DaemonSet,
    /// A fixed number of agents.
    Deployment,
}

/// Observed state of a TenantControlPlane.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantControlPlaneStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: DataStoreReady, CertificatesReady, KubeconfigsReady, DeploymentAvailable, OverridesApplied, Ready; NodeJoinReady and AddonsReady from the in-tenant phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// `host:port` of the tenant API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<String>,
    /// Kubeconfig Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<KubeconfigsStatus>,
    /// Certificate Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<CertificatesStatus>,
    /// Where the tenant's state lives: primary DataStore and overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageStatus>,
    /// The Kubernetes objects that run the control plane, and the version they run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_resources: Option<KubernetesResourcesStatus>,
    /// The `kube-system/kubeadm-config` ConfigMap in the tenant cluster, as last uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadmconfig: Option<KubeadmConfigStatus>,
    /// The kubeadm phases run in the tenant cluster.
    #[serde(rename = "kubeadmPhase", default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_phase: Option<KubeadmPhasesStatus>,
    /// The addons running in the tenant cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<AddonsStatus>,
    /// Tenantplane extension: the authentication configuration the tenant kube-apiserver runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<super::AuthenticationStatus>,
    /// Tenantplane extension: the migration to another DataStore, while it runs and after it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<super::MigrationStatus>,
}

/// The uploaded kubeadm configuration.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmConfigStatus {
    /// The ConfigMap's name in the tenant's `kube-system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configmap_name: Option<String>,
    /// Checksum of what was uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// When it was last written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}

/// The kubeadm phases run in the tenant cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmPhasesStatus {
    /// The bootstrap-token phase: `kube-public/cluster-info` and the node-bootstrap RBAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<KubeadmPhaseStatus>,
}

/// One kubeadm phase.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeadmPhaseStatus {
    /// Checksum of the objects the phase keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// When they were last written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}

/// The addons in the tenant cluster, as they run (not as requested).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonsStatus {
    /// CoreDNS.
    #[serde(rename = "coreDNS", default, skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<AddonStatus>,
    /// kube-proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<AddonStatus>,
    /// The Konnectivity agents (the server runs in the control-plane pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub konnectivity: Option<AddonStatus>,
}

/// One addon.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonStatus {
    /// Whether the addon's objects are in the tenant cluster.
    #[serde(default)]
    pub enabled: bool,
    /// Checksum of those objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// When they were last written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}

/// A Secret the controller manages, with its checksum.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretStatus {
    /// The Secret's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Checksum of its content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// When it was last written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}

/// Kubeconfig Secrets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigsStatus {
    /// The admin kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<SecretStatus>,
    /// The controller-manager kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<SecretStatus>,
    /// The scheduler kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SecretStatus>,
}

/// Certificate Secrets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificatesStatus {
    /// The cluster CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretStatus>,
    /// The API server serving certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<SecretStatus>,
    /// The API server's kubelet client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_kubelet_client: Option<SecretStatus>,
    /// The front-proxy CA.
    #[serde(rename = "frontProxyCA", default, skip_serializing_if = "Option::is_none")]
    pub front_proxy_ca: Option<SecretStatus>,
    /// The front-proxy client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_proxy_client: Option<SecretStatus>,
    /// The service-account key pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sa: Option<SecretStatus>,
}

/// What was provisioned in a DataStore for this tenant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetupStatus {
    /// The database, key prefix or bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The datastore user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When it was last provisioned (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
    /// Checksum of the provisioned configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// The tenant's storage: primary DataStore and overrides.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageStatus {
    /// The primary DataStore's driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The primary DataStore's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_store_name: Option<String>,
    /// The datastore-config Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<SecretStatus>,
    /// What was provisioned in the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupStatus>,
    /// The datastore-certificate Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<SecretStatus>,
    /// Every override DataStore provisioned for this tenant, kept until cleaned up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["resource".into()]))]
    pub overrides: Vec<OverrideStorageStatus>,
}

/// One provisioned override.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideStorageStatus {
    /// The overridden resource.
    pub resource: String,
    /// The override DataStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_store_name: Option<String>,
    /// What was provisioned there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupStatus>,
}

/// The objects running the control plane.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesResourcesStatus {
    /// The version and its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<KubernetesVersionStatus>,
    /// The Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentStatusSummary>,
}

/// The installed version and the control plane's state.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesVersionStatus {
    /// The running version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<KubernetesVersionState>,
}

/// The control plane's state, as upstream's status enum.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum KubernetesVersionState {
    /// Unknown.
    Unknown,
    /// Being created.
    Provisioning,
    /// Rotating its CA.
    CertificateAuthorityRotating,
    /// Rolling to a new version.
    Upgrading,
    /// Moving to another DataStore.
    Migrating,
    /// Serving.
    Ready,
    /// Not serving.
    NotReady,
    /// Scaled to zero.
    Sleeping,
    /// Writes are blocked.
    WriteLimited,
}

/// The control-plane Deployment's state (also the scale subresource's source).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatusSummary {
    /// The Deployment's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The Deployment's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The label selector of its pods, as a string (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Total pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Available pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Pods on the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// When it was last observed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<String>,
}
