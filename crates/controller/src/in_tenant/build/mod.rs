//! Pure: the objects the in-tenant phase keeps in a tenant cluster, and its status.
//!
//! The objects are kubeadm's, by name and content: [`upload_config`] (`kube-system/kubeadm-config`,
//! `kube-system/kubelet-config` and the Roles that let nodes read them), [`bootstrap_token`]
//! (`kube-public/cluster-info`, its Role for `system:anonymous`, and the node-bootstrap bindings), and
//! the addons present in `spec.addons`: [`coredns`], [`kube_proxy`] and [`konnectivity`]'s agents, and
//! with `spec.authentication` the [`authentication`] roles and bindings, members' and viewers' in each
//! of the tenant's namespaces (and [`authentication_status`], what the tenant kube-apiserver loaded of
//! it). Each object carries [`PHASE_LABEL`] naming its phase, which is how an object left behind (an
//! addon removed from the spec, a binding no namespace wants) is found and deleted.

pub mod authentication;
pub mod authentication_status;
pub mod bootstrap_token;
pub mod coredns;
pub mod konnectivity;
pub mod kube_proxy;
pub mod kubelet;
pub mod status;
pub mod upload_config;

#[cfg(test)]
mod authentication_status_tests;
#[cfg(test)]
mod authentication_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{ConfigMap, ObjectReference, Service, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{ResourceExt as _, api::ApiResource};
use serde_json::{Value, json};

use crate::{MANAGED_BY_LABEL, k8s::crd::TenantControlPlane, pki::KeyAlgorithm};

/// `kube-system`.
pub const KUBE_SYSTEM: &str = "kube-system";
/// `kube-public`.
pub const KUBE_PUBLIC: &str = "kube-public";
/// `kube-node-lease`.
pub const KUBE_NODE_LEASE: &str = "kube-node-lease";
/// The group kubeadm's bootstrap tokens authenticate as.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The group of nodes with their own client certificate.
pub const NODES: &str = "system:nodes";
/// The label naming the phase an object of the in-tenant phase belongs to.
pub const PHASE_LABEL: &str = "tenantplane.io/in-tenant-phase";

/// The kinds the in-tenant phase writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// v1 ConfigMap.
    ConfigMap,
    /// rbac.authorization.k8s.io/v1 Role.
    Role,
    /// rbac.authorization.k8s.io/v1 RoleBinding.
    RoleBinding,
    /// rbac.authorization.k8s.io/v1 ClusterRole.
    ClusterRole,
    /// rbac.authorization.k8s.io/v1 ClusterRoleBinding.
    ClusterRoleBinding,
    /// v1 ServiceAccount.
    ServiceAccount,
    /// v1 Service.
    Service,
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

impl Kind {
    /// Every kind, in the order the tenant is checked.
    pub const ALL: [Kind; 9] = [
        Kind::ConfigMap,
        Kind::Role,
        Kind::RoleBinding,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
        Kind::ServiceAccount,
        Kind::Service,
        Kind::Deployment,
        Kind::DaemonSet,
    ];

    /// The kind's API resource.
    pub fn api_resource(self) -> ApiResource {
        match self {
            Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            Kind::Role => ApiResource::erase::<Role>(&()),
            Kind::RoleBinding => ApiResource::erase::<RoleBinding>(&()),
            Kind::ClusterRole => ApiResource::erase::<ClusterRole>(&()),
            Kind::ClusterRoleBinding => ApiResource::erase::<ClusterRoleBinding>(&()),
            Kind::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            Kind::Service => ApiResource::erase::<Service>(&()),
            Kind::Deployment => ApiResource::erase::<Deployment>(&()),
            Kind::DaemonSet => ApiResource::erase::<DaemonSet>(&()),
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::ClusterRole | Kind::ClusterRoleBinding)
    }
}

/// Which object: kind, namespace (empty for cluster-scoped kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The kind.
    pub kind: Kind,
    /// The namespace, empty for cluster-scoped kinds.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ObjectKey {
    /// A reference to the object (in the tenant cluster), for an Event's `related`.
    pub fn reference(&self) -> ObjectReference {
        let ar = self.kind.api_resource();
        ObjectReference {
            api_version: Some(ar.api_version),
            kind: Some(ar.kind),
            namespace: Some(self.namespace.clone()).filter(|ns| !ns.is_empty()),
            name: Some(self.name.clone()),
            ..Default::default()
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace.as_str() {
            "" => write!(f, "{:?} {}", self.kind, self.name),
            ns => write!(f, "{:?} {ns}/{}", self.kind, self.name),
        }
    }
}

/// One object to keep in the tenant cluster: its key and its server-side-apply body.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantObject {
    /// Which object.
    pub key: ObjectKey,
    /// The full apply body (apiVersion, kind, metadata, content).
    pub body: Value,
}

impl TenantObject {
    /// An object of `kind` named `name` in `namespace` ("" for cluster-scoped), with `content` beside
    /// its metadata (labelled as managed by Tenantplane, annotated with `annotations`).
    pub fn new(
        kind: Kind,
        namespace: &str,
        name: &str,
        content: Value,
        annotations: &[(&str, &str)],
    ) -> Self {
        let ar = kind.api_resource();
        let mut metadata = json!({"name": name, "labels": {MANAGED_BY_LABEL.0: MANAGED_BY_LABEL.1}});
        if !namespace.is_empty() {
            metadata["namespace"] = json!(namespace);
        }
        if !annotations.is_empty() {
            let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
            metadata["annotations"] = json!(annotations);
        }
        let mut body = json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": metadata});
        if let Value::Object(content) = content {
            for (key, value) in content {
                match (key.as_str(), value) {
                    ("metadata", Value::Object(extra)) => merge_metadata(&mut body["metadata"], extra),
                    (_, value) => body[key.as_str()] = value,
                }
            }
        }
        Self {
            key: ObjectKey {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            },
            body,
        }
    }
}

/// Adds the labels and annotations of `extra` to `metadata`.
fn merge_metadata(metadata: &mut Value, extra: serde_json::Map<String, Value>) {
    for (field, values) in extra {
        if let Value::Object(values) = values {
            for (k, v) in values {
                metadata[field.as_str()][k.as_str()] = v;
            }
        }
    }
}

/// What the in-tenant phase builds from: the TenantControlPlane and what the controller made for it.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    /// The TenantControlPlane.
    pub tcp: &'a TenantControlPlane,
    /// `host:port` of its API server, as nodes reach it (`status.controlPlaneEndpoint`).
    pub endpoint: &'a str,
    /// The tenant CA certificate (PEM).
    pub ca_cert: &'a str,
    /// The Kubernetes version it runs.
    pub version: &'a str,
    /// The key algorithm of its certificates.
    pub key_algorithm: KeyAlgorithm,
    /// The tenant cluster's namespaces, but those being deleted (only read with `spec.authentication`).
    pub namespaces: &'a [String],
}

impl Facts<'_> {
    /// The TenantControlPlane's name (kubeadm's `clusterName`).
    pub fn cluster_name(&self) -> String {
        self.tcp.name_any()
    }
}

/// The objects of every phase, and what could not be built.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The upload-config phase's objects (the kubelet-config ConfigMap only when its patches apply).
    pub upload_config: Vec<TenantObject>,
    /// The bootstrap-token phase's objects.
    pub bootstrap_token: Vec<TenantObject>,
    /// CoreDNS's objects, when `spec.addons.coreDNS` is set.
    pub core_dns: Option<Vec<TenantObject>>,
    /// kube-proxy's objects, when `spec.addons.kubeProxy` is set.
    pub kube_proxy: Option<Vec<TenantObject>>,
    /// The Konnectivity agents' objects, when `spec.addons.konnectivity` is set.
    pub konnectivity: Option<Vec<TenantObject>>,
    /// The roles and role bindings of Tenantplane's groups, when `spec.authentication` is set.
    pub authentication: Option<Vec<TenantObject>>,
    /// Why `kube-system/kubelet-config` was left out: a configurationJSONPatches entry that does not apply.
    pub kubelet_error: Option<kubelet::PatchFailure>,
}

impl Desired {
    /// Every object of every phase.
    pub fn objects(&self) -> impl Iterator<Item = &TenantObject> {
        self.upload_config
            .iter()
            .chain(&self.bootstrap_token)
            .chain(self.core_dns.iter().flatten())
            .chain(self.kube_proxy.iter().flatten())
            .chain(self.konnectivity.iter().flatten())
            .chain(self.authentication.iter().flatten())
    }

    /// Whether an object the tenant holds but no phase wants now is still to be kept: the last good
    /// kubelet-config while the patches do not apply.
    pub fn keeps(&self, key: &ObjectKey) -> bool {
        self.kubelet_error.is_some()
            && key.kind == Kind::ConfigMap
            && key.namespace == KUBE_SYSTEM
            && key.name == upload_config::KUBELET_CONFIG
    }
}

/// The objects of every phase for `facts`.
pub fn desired(facts: &Facts<'_>) -> Desired {
    let (upload_config, kubelet_error) = upload_config::objects(facts);
    let addons = facts.tcp.spec.addons.as_ref();
    let core_dns = addons.and_then(|a| a.core_dns.as_ref());
    let kube_proxy = addons.and_then(|a| a.kube_proxy.as_ref());
    let konnectivity = addons.and_then(|a| a.konnectivity.as_ref());
    Desired {
        upload_config: labelled(upload_config, "upload-config"),
        bootstrap_token: labelled(bootstrap_token::objects(facts), "bootstrap-token"),
        core_dns: core_dns.map(|spec| labelled(coredns::objects(facts, spec), "coredns")),
        kube_proxy: kube_proxy.map(|spec| labelled(kube_proxy::objects(facts, spec), "kube-proxy")),
        konnectivity: konnectivity.map(|spec| labelled(konnectivity::objects(facts, spec), "konnectivity")),
        authentication: facts
            .tcp
            .spec
            .authentication
            .as_ref()
            .map(|_| labelled(authentication::objects(facts.namespaces), "authentication")),
        kubelet_error,
    }
}

/// `objects`, each labelled with [`PHASE_LABEL`] = `phase`.
fn labelled(mut objects: Vec<TenantObject>, phase: &str) -> Vec<TenantObject> {
    for object in &mut objects {
        object.body["metadata"]["labels"][PHASE_LABEL] = json!(phase);
    }
    objects
}

/// A Role granting `get` on the ConfigMap `config_map` of its namespace.
pub fn config_map_reader(namespace: &str, name: &str, config_map: &str) -> TenantObject {
    TenantObject::new(
        Kind::Role,
        namespace,
        name,
        json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [config_map], "verbs": ["get"]}]}),
        &[],
    )
}

/// A (Cluster)RoleBinding of `role` (a Role for a RoleBinding, else a ClusterRole) to `subjects`
/// (kind, name; a ServiceAccount's name is `namespace/name`).
pub fn binding(
    kind: Kind,
    namespace: &str,
    name: &str,
    role: &str,
    subjects: &[(&str, &str)],
) -> TenantObject {
    let role_kind = match kind {
        Kind::RoleBinding => "Role",
        _ => "ClusterRole",
    };
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| match (*kind, name.split_once('/')) {
            ("ServiceAccount", Some((namespace, name))) => {
                json!({"kind": "ServiceAccount", "namespace": namespace, "name": name})
            }
            _ => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}),
        })
        .collect();
    TenantObject::new(
        kind,
        namespace,
        name,
        json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": subjects,
        }),
        &[],
    )
}

/// `sha256:<hex>` of the values of `data`, in key order: kubeadm's `component-config.hash` and the
/// status checksums.
pub fn checksum<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for value in values {
        ctx.update(value.as_bytes());
    }
    let digest = ctx.finish();
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The checksum of a set of objects (their apply bodies, in key order).
pub fn objects_checksum(objects: &[TenantObject]) -> String {
    let mut sorted: Vec<&TenantObject> = objects.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let bodies: Vec<String> = sorted.iter().map(|o| o.body.to_string()).collect();
    checksum(bodies.iter().map(String::as_str))
}
