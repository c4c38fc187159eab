//! Status back (pure part): what a `TenantControlPlane`'s status means for its `control_planes` row.

use uuid::Uuid;

use crate::{
    k8s::crd::TenantControlPlane,
    translate::{LABEL_CONTROL_PLANE, LABEL_TENANT},
};

/// The row a TCP belongs to, and what to write there.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// Tenant id (label).
    pub tenant_id: Uuid,
    /// Control-plane id (label).
    pub control_plane_id: Uuid,
    /// Phase: `status.kubernetesResources.version.status`, default `Provisioning`.
    pub phase: String,
    /// `control_planes.status`: `observedGeneration`, `conditions`, `endpoint`, `installedVersion`,
    /// `dataStore` and `kubeconfigSecret` (`{namespace, name}`), each only when known.
    pub status: serde_json::Value,
}

/// Reads the labels and status of `tcp`; `None` when it does not carry our labels.
pub fn observe(tcp: &TenantControlPlane) -> Option<Observed> {
    let labels = tcp.metadata.labels.as_ref()?;
    let tenant_id = Uuid::parse_str(labels.get(LABEL_TENANT)?).ok()?;
    let control_plane_id = Uuid::parse_str(labels.get(LABEL_CONTROL_PLANE)?).ok()?;
    let status = tcp.status.clone().unwrap_or_default();
    let version = status
        .kubernetes_resources
        .as_ref()
        .and_then(|k| k.version.as_ref());
    let phase = version
        .and_then(|v| v.status)
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "Provisioning".to_string());
    let mut out = serde_json::Map::new();
    if let Some(g) = status.observed_generation {
        out.insert("observedGeneration".into(), g.into());
    }
    if !status.conditions.is_empty()
        && let Ok(conditions) = serde_json::to_value(&status.conditions)
    {
        out.insert("conditions".into(), conditions);
    }
    if let Some(endpoint) = &status.control_plane_endpoint {
        out.insert("endpoint".into(), endpoint.clone().into());
    }
    if let Some(installed) = version.and_then(|v| v.version.clone()) {
        out.insert("installedVersion".into(), installed.into());
    }
    if let Some(store) = status.storage.as_ref().and_then(|s| s.data_store_name.clone()) {
        out.insert("dataStore".into(), store.into());
    }
    let secret = status
        .kubeconfig
        .as_ref()
        .and_then(|k| k.admin.as_ref())
        .and_then(|a| a.secret_name.clone());
    if let (Some(name), Some(namespace)) = (secret, tcp.metadata.namespace.clone()) {
        out.insert(
            "kubeconfigSecret".into(),
            serde_json::json!({"namespace": namespace, "name": name}),
        );
    }
    Some(Observed {
        tenant_id,
        control_plane_id,
        phase,
        status: serde_json::Value::Object(out),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn tcp(status: serde_json::Value) -> TenantControlPlane {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": "prod", "namespace": "tp-acme", "labels": {
                "tenantplane.io/tenant": "0193a3c0-0000-7000-8000-0000000000a1",
                "tenantplane.io/control-plane-id": "0193a3c0-0000-7000-8000-0000000000c1"}},
            "spec": {"controlPlane": {"service": {"serviceType": "ClusterIP"}},
                     "kubernetes": {"version": "v1.33.2", "kubelet": {}}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn without_status_the_phase_is_provisioning() {
        let seen = observe(&tcp(serde_json::json!({}))).unwrap();
        assert_eq!(seen.phase, "Provisioning");
        assert_eq!(seen.status, serde_json::json!({}));
    }

    #[test]
    fn a_ready_status_carries_endpoint_version_and_kubeconfig_secret() {
        let seen = observe(&tcp(serde_json::json!({
            "controlPlaneEndpoint": "10.0.0.1:6443",
            "kubeconfig": {"admin": {"secretName": "prod-admin-kubeconfig"}},
            "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
        })))
        .unwrap();
        assert_eq!(seen.phase, "Ready");
        assert_eq!(
            seen.status,
            serde_json::json!({
                "endpoint": "10.0.0.1:6443",
                "installedVersion": "v1.33.2",
                "kubeconfigSecret": {"namespace": "tp-acme", "name": "prod-admin-kubeconfig"}
            })
        );
    }

    #[test]
    fn objects_without_our_labels_are_ignored() {
        let mut foreign = tcp(serde_json::json!({}));
        foreign.metadata.labels = None;
        assert_eq!(observe(&foreign), None);
    }
}
