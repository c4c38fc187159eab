//! Translate (pure): a control-plane row, its placement and its tenant's slug → a `TenantControlPlane`.
//!
//! No I/O here. The worker fetches the inputs and server-side-applies the result; the status watcher uses
//! the label keys defined here to map a `TenantControlPlane` back to its row.

mod authentication;

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::ResourceRequirements, apimachinery::pkg::api::resource::Quantity};
use kube::api::ObjectMeta;
use uuid::Uuid;

use crate::{
    domain::ControlPlaneRow,
    k8s::crd::{
        AddonSpec, Addons, ComponentResources, ControlPlane, DataStoreOverride, DeploymentSpec,
        KonnectivityServer, KonnectivitySpec, KubeletSpec, KubernetesSpec, NetworkProfile, ServiceSpec,
        ServiceType, TenantControlPlane, TenantControlPlaneSpec,
    },
};

pub use crate::k8s::{FIELD_MANAGER, LABEL_MANAGED_BY, MANAGED_BY, SELECTOR};
pub use authentication::*;

/// Label: the owning tenant's id.
pub const LABEL_TENANT: &str = "tenantplane.io/tenant";
/// Label: the control plane's id.
pub const LABEL_CONTROL_PLANE: &str = "tenantplane.io/control-plane-id";
/// Annotation: which tenant owns the object, `tenant/<slug>`.
pub const ANNOTATION_OWNER: &str = "tenantplane.io/owner";
/// Annotation: the row generation the object was rendered from.
pub const ANNOTATION_GENERATION: &str = "tenantplane.io/generation";
/// Default namespace template; `{tenant}` is replaced with the tenant slug.
pub const DEFAULT_NAMESPACE_TEMPLATE: &str = "tp-{tenant}";

/// The order overridden resources are rendered in; any other resource follows, sorted.
const OVERRIDE_ORDER: [&str; 2] = ["/events", "coordination.k8s.io/leases"];

/// Where a control plane's state lives: the primary DataStore and `(resource, datastore)` overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The primary DataStore (none: the controller picks its default).
    pub data_store: Option<String>,
    /// Offloaded resources, `(resource, datastore)`, in any order.
    pub overrides: Vec<(String, String)>,
}

impl Placement {
    /// The placement of a control plane without a `placements` row: its explicit DataStore, no overrides.
    pub fn fallback(row: &ControlPlaneRow) -> Self {
        Self {
            data_store: row.datastore_name.clone(),
            overrides: Vec::new(),
        }
    }
}

/// The namespace of `slug`'s control planes: `template` with `{tenant}` replaced.
pub fn namespace(template: &str, slug: &str) -> String {
    template.replace("{tenant}", slug)
}

/// The kube-apiserver resource requests of a size class.
///
/// | class | cpu | memory |
/// |---|---|---|
/// | small | 250m | 512Mi |
/// | medium | 500m | 1Gi |
/// | large | 1 | 2Gi |
///
/// Requests only (no limits): the scheduler reserves what a class promises, and an API server may burst.
/// Unknown classes get `small`.
pub fn api_server_resources(size_class: &str) -> ResourceRequirements {
    let (cpu, memory) = match size_class {
        "large" => ("1", "2Gi"),
        "medium" => ("500m", "1Gi"),
        _ => ("250m", "512Mi"),
    };
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ])),
        ..ResourceRequirements::default()
    }
}

fn service_type(value: &str) -> ServiceType {
    match value {
        "NodePort" => ServiceType::NodePort,
        "LoadBalancer" => ServiceType::LoadBalancer,
        _ => ServiceType::ClusterIP,
    }
}

fn flag(addons: &serde_json::Value, key: &str, default: bool) -> bool {
    addons
        .get(key)
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(default)
}

fn addons(value: &serde_json::Value) -> Addons {
    Addons {
        core_dns: flag(value, "coreDNS", true).then(AddonSpec::default),
        kube_proxy: flag(value, "kubeProxy", true).then(AddonSpec::default),
        konnectivity: flag(value, "konnectivity", false).then_some(KonnectivitySpec {
            server: KonnectivityServer {
                port: 8132,
                version: None,
                image: None,
                resources: None,
                extra_args: None,
            },
            agent: None,
        }),
    }
}

fn overrides(placement: &Placement) -> Option<Vec<DataStoreOverride>> {
    if placement.overrides.is_empty() {
        return None;
    }
    let mut list: Vec<DataStoreOverride> = placement
        .overrides
        .iter()
        .map(|(resource, data_store)| DataStoreOverride {
            resource: resource.clone(),
            data_store: data_store.clone(),
        })
        .collect();
    let rank = |resource: &str| {
        OVERRIDE_ORDER
            .iter()
            .position(|r| *r == resource)
            .unwrap_or(OVERRIDE_ORDER.len())
    };
    list.sort_by(|a, b| {
        rank(&a.resource)
            .cmp(&rank(&b.resource))
            .then_with(|| a.resource.cmp(&b.resource))
    });
    Some(list)
}

/// The spec of the `TenantControlPlane` of `row`.
///
/// Every field the CRD defaults is set explicitly, so the object the API server stores has exactly this
/// spec (compare with `serde_json::to_value`).
pub fn spec(row: &ControlPlaneRow, placement: &Placement) -> TenantControlPlaneSpec {
    TenantControlPlaneSpec {
        data_store: placement.data_store.clone(),
        data_store_schema: None,
        data_store_username: None,
        data_store_overrides: overrides(placement),
        control_plane: ControlPlane {
            deployment: Some(DeploymentSpec {
                replicas: Some(row.replicas),
                resources: Some(ComponentResources {
                    api_server: Some(api_server_resources(&row.size_class)),
                    ..ComponentResources::default()
                }),
                ..DeploymentSpec::default()
            }),
            service: ServiceSpec {
                service_type: service_type(&row.service_type),
                additional_metadata: None,
            },
        },
        kubernetes: KubernetesSpec {
            version: row.kubernetes_version.clone(),
            kubelet: KubeletSpec::default(),
            admission_controllers: None,
        },
        network_profile: Some(NetworkProfile {
            port: Some(row.port),
            cluster_domain: Some("cluster.local".into()),
            ..NetworkProfile::default()
        }),
        addons: Some(addons(&row.addons)),
        authentication: None,
        data_store_migration: None,
    }
}

/// How a TenantControlPlane's `networkProfile.address` is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TenantAddress {
    /// Not set: the controller's endpoint is the Service's (cluster IP or load balancer).
    #[default]
    None,
    /// A loopback address derived from the control-plane id ([`loopback_address`]), served by the
    /// pod-less runner on this machine (tests and `make run`).
    Loopback,
}

/// A stable loopback address of a control plane in 127.128.0.0/9 (`127.<128..255>.<0..255>.<1..254>`):
/// the pod-less runner publishes the tenant API there, and the certificates and admin kubeconfig name it.
pub fn loopback_address(control_plane: Uuid) -> std::net::Ipv4Addr {
    let b = control_plane.as_bytes();
    std::net::Ipv4Addr::new(127, 128 | b[0], b[1], 1 + b[2] % 254)
}

/// Labels of every object rendered for `row`.
pub fn labels(tenant: Uuid, control_plane: Uuid) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_TENANT.to_string(), tenant.to_string()),
        (LABEL_CONTROL_PLANE.to_string(), control_plane.to_string()),
    ])
}

/// The full `TenantControlPlane` of `row`: name = control-plane name, namespace from `namespace_template`.
pub fn translate(
    row: &ControlPlaneRow,
    placement: &Placement,
    tenant_slug: &str,
    namespace_template: &str,
) -> TenantControlPlane {
    translate_with(
        row,
        placement,
        tenant_slug,
        namespace_template,
        &Rendering::default(),
    )
}

/// What the worker's settings add to every rendered TenantControlPlane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendering {
    /// How `networkProfile.address` is chosen.
    pub address: TenantAddress,
    /// Tenantplane's credential issuer, written as the first JWT authenticator (none: no `spec.authentication`).
    pub issuer: Option<ClusterIssuer>,
}

/// [`translate`] with the worker's [`Rendering`] settings.
pub fn translate_with(
    row: &ControlPlaneRow,
    placement: &Placement,
    tenant_slug: &str,
    namespace_template: &str,
    rendering: &Rendering,
) -> TenantControlPlane {
    let mut spec = spec(row, placement);
    if rendering.address == TenantAddress::Loopback
        && let Some(np) = spec.network_profile.as_mut()
    {
        np.address = Some(loopback_address(row.id).to_string());
    }
    spec.authentication = authentication::authentication(rendering.issuer.as_ref(), row.tenant_id, row.id);
    let mut tcp = TenantControlPlane::new(&row.name, spec);
    tcp.metadata = ObjectMeta {
        name: Some(row.name.clone()),
        namespace: Some(namespace(namespace_template, tenant_slug)),
        labels: Some(labels(row.tenant_id, row.id)),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_OWNER.to_string(), format!("tenant/{tenant_slug}")),
            (ANNOTATION_GENERATION.to_string(), row.generation.to_string()),
        ])),
        ..ObjectMeta::default()
    };
    tcp
}

#[cfg(test)]
mod tests;
