//! Status back (pure part): what a `TenantControlPlane`'s status means for its `control_planes` row.

use uuid::Uuid;

use crate::{
    k8s::crd::TenantControlPlane,
    translate::{LABEL_CONTROL_PLANE, LABEL_TENANT},
};

/// The row a TCP claims to belong to, which object it is, and what to write there.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    /// Tenant id (label).
    pub tenant_id: Uuid,
    /// Control-plane id (label).
    pub control_plane_id: Uuid,
    /// The TCP's namespace.
    pub namespace: String,
    /// The TCP's name.
    pub name: String,
    /// The TCP's UID.
    pub uid: String,
    /// Phase: see [`phase`].
    pub phase: String,
    /// `control_planes.status`: `observedGeneration`, `conditions` (all of them, `AddonsReady` and
    /// `NodeJoinReady` of the in-tenant phase too), `endpoint`, `installedVersion`, `addons` (the TCP's
    /// `status.addons` as it is: `{coreDNS, kubeProxy}`, each `{enabled, checksum, lastUpdate}`),
    /// `authentication` (the TCP's `status.authentication`: what its kube-apiserver loaded), `dataStore` and
    /// `kubeconfigSecret` (`{namespace, name}`), each only when known.
    pub status: serde_json::Value,
}

/// The labels a TCP claims its row with: `(tenant, control plane)`.
pub fn claimed_row(tcp: &TenantControlPlane) -> Option<(Uuid, Uuid)> {
    let labels = tcp.metadata.labels.as_ref()?;
    let tenant_id = Uuid::parse_str(labels.get(LABEL_TENANT)?).ok()?;
    let control_plane_id = Uuid::parse_str(labels.get(LABEL_CONTROL_PLANE)?).ok()?;
    Some((tenant_id, control_plane_id))
}

/// The API phase of a TCP. The version status names it (default `Provisioning`), except that `Ready` needs
/// a fresh `Ready=True` condition: with `Ready=False` it is `NotReady`; with no fresh Ready condition
/// (missing, `Unknown`, or an `observedGeneration` below `metadata.generation`) it is `Provisioning`.
pub fn phase(tcp: &TenantControlPlane) -> String {
    let status = tcp.status.as_ref();
    let state = status
        .and_then(|s| s.kubernetes_resources.as_ref())
        .and_then(|k| k.version.as_ref())
        .and_then(|v| v.status)
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "Provisioning".to_string());
    if state != "Ready" {
        return state;
    }
    let generation = tcp.metadata.generation;
    let ready = status.and_then(|s| {
        let condition = s.conditions.iter().find(|c| c.type_ == "Ready")?;
        let observed = condition.observed_generation.or(s.observed_generation);
        let stale = matches!((observed, generation), (Some(seen), Some(current)) if seen < current);
        (!stale).then_some(condition.status.as_str())
    });
    match ready {
        Some("True") => state,
        Some("False") => "NotReady".to_string(),
        _ => "Provisioning".to_string(),
    }
}

/// Why a TCP that is being deleted is still there: its first `DataStoreReady` or `Ready` condition that is
/// not `True` (`type=status (reason): message`), else the finalizers it waits for.
pub fn stuck_reason(tcp: &TenantControlPlane) -> String {
    let conditions = tcp
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for kind in ["DataStoreReady", "Ready"] {
        if let Some(c) = conditions.iter().find(|c| c.type_ == kind && c.status != "True") {
            return format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message);
        }
    }
    let finalizers = tcp.metadata.finalizers.clone().unwrap_or_default();
    format!("still waiting for the finalizers {}", finalizers.join(", "))
}

/// Reads the labels, identity and status of `tcp`; `None` when it does not carry our labels or has no UID.
pub fn observe(tcp: &TenantControlPlane) -> Option<Observed> {
    let (tenant_id, control_plane_id) = claimed_row(tcp)?;
    let status = tcp.status.clone().unwrap_or_default();
    let version = status
        .kubernetes_resources
        .as_ref()
        .and_then(|k| k.version.as_ref());
    let phase = phase(tcp);
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
    if let Some(addons) = &status.addons
        && let Ok(addons) = serde_json::to_value(addons)
    {
        out.insert("addons".into(), addons);
    }
    if let Some(authentication) = &status.authentication
        && let Ok(authentication) = serde_json::to_value(authentication)
    {
        out.insert("authentication".into(), authentication);
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
        namespace: tcp.metadata.namespace.clone()?,
        name: tcp.metadata.name.clone()?,
        uid: tcp.metadata.uid.clone()?,
        phase,
        status: serde_json::Value::Object(out),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn tcp(status: serde_json::Value) -> TenantControlPlane {
        tenantplane_testkit::tcp("tp-acme", "prod")
            .uid("u-1")
            .generation(2)
            .label("tenantplane.io/tenant", "0193a3c0-0000-7000-8000-0000000000a1")
            .label(
                "tenantplane.io/control-plane-id",
                "0193a3c0-0000-7000-8000-0000000000c1",
            )
            .version("v1.33.2")
            .status(status)
            .build()
    }

    #[test]
    fn without_status_the_phase_is_provisioning() {
        let seen = observe(&tcp(serde_json::json!({}))).unwrap();
        assert_eq!(seen.phase, "Provisioning");
        assert_eq!(seen.status, serde_json::json!({}));
    }

    fn ready(status: &str, generation: i64) -> serde_json::Value {
        serde_json::json!({"type": "Ready", "status": status, "reason": "R", "message": "m",
                           "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": generation})
    }

    fn with_ready(version_status: &str, condition: Option<serde_json::Value>) -> String {
        let conditions: Vec<serde_json::Value> = condition.into_iter().collect();
        observe(&tcp(serde_json::json!({
            "conditions": conditions,
            "kubernetesResources": {"version": {"version": "v1.33.2", "status": version_status}}
        })))
        .unwrap()
        .phase
    }

    #[test]
    fn a_ready_status_carries_endpoint_version_and_kubeconfig_secret() {
        let seen = observe(&tcp(serde_json::json!({
            "controlPlaneEndpoint": "10.0.0.1:6443",
            "conditions": [ready("True", 2)],
            "kubeconfig": {"admin": {"secretName": "prod-admin-kubeconfig"}},
            "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
        })))
        .unwrap();
        assert_eq!(seen.phase, "Ready");
        assert_eq!(
            (seen.namespace.as_str(), seen.name.as_str(), seen.uid.as_str()),
            ("tp-acme", "prod", "u-1")
        );
        assert_eq!(seen.status["endpoint"], "10.0.0.1:6443");
        assert_eq!(seen.status["installedVersion"], "v1.33.2");
        assert_eq!(
            seen.status["kubeconfigSecret"],
            serde_json::json!({"namespace": "tp-acme", "name": "prod-admin-kubeconfig"})
        );
    }

    #[test]
    fn the_in_tenant_phase_s_addons_and_conditions_are_mirrored_as_reported() {
        let node_join = serde_json::json!({"type": "NodeJoinReady", "status": "True", "reason": "JoinObjectsPresent",
            "message": "cluster-info is signed", "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": 2});
        let addons_ready = serde_json::json!({"type": "AddonsReady", "status": "False", "reason": "AddonNotAvailable",
            "message": "kube-proxy: 0 of 1 available", "lastTransitionTime": "2026-12-01T00:00:01Z", "observedGeneration": 2});
        let seen = observe(&tcp(serde_json::json!({
            "conditions": [ready("True", 2), node_join.clone(), addons_ready.clone()],
            "addons": {
                "coreDNS": {"enabled": true, "checksum": "sha256:c0", "lastUpdate": "2026-12-01T00:00:02Z"},
                "kubeProxy": {"enabled": false}
            },
            "kubernetesResources": {"version": {"version": "v1.33.2", "status": "Ready"}}
        })))
        .unwrap();
        assert_eq!(
            seen.status["addons"],
            serde_json::json!({
                "coreDNS": {"enabled": true, "checksum": "sha256:c0", "lastUpdate": "2026-12-01T00:00:02Z"},
                "kubeProxy": {"enabled": false}
            })
        );
        let types: Vec<&str> = seen.status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Ready", "NodeJoinReady", "AddonsReady"]);
        assert_eq!(seen.status["conditions"][1], node_join);
        assert_eq!(seen.status["conditions"][2], addons_ready);
        // No addons in the status: nothing mirrored, so the API reports none installed.
        let bare = observe(&tcp(serde_json::json!({"conditions": [ready("True", 2)]}))).unwrap();
        assert_eq!(bare.status.get("addons"), None);
    }

    #[test]
    fn ready_needs_a_fresh_true_ready_condition() {
        assert_eq!(with_ready("Ready", Some(ready("True", 2))), "Ready");
        assert_eq!(with_ready("Ready", Some(ready("False", 2))), "NotReady");
        assert_eq!(with_ready("Ready", Some(ready("Unknown", 2))), "Provisioning");
        assert_eq!(with_ready("Ready", None), "Provisioning");
        assert_eq!(
            with_ready("Ready", Some(ready("True", 1))),
            "Provisioning",
            "a condition about an older generation is not trusted"
        );
    }

    #[test]
    fn other_version_states_pass_through_whatever_the_condition() {
        assert_eq!(with_ready("Sleeping", Some(ready("False", 2))), "Sleeping");
        assert_eq!(with_ready("Upgrading", Some(ready("True", 2))), "Upgrading");
        assert_eq!(with_ready("NotReady", Some(ready("True", 2))), "NotReady");
    }

    #[test]
    fn a_stuck_delete_is_explained_by_the_datastore_condition_first() {
        let mut stuck = tcp(serde_json::json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "Deleting", "message": "being deleted",
             "lastTransitionTime": "2026-12-01T00:00:00Z"},
            {"type": "DataStoreReady", "status": "False", "reason": "Unreachable", "message": "etcd is down",
             "lastTransitionTime": "2026-12-01T00:00:00Z"}]}));
        assert_eq!(
            stuck_reason(&stuck),
            "DataStoreReady=False (Unreachable): etcd is down"
        );
        stuck.status = None;
        stuck.metadata.finalizers = Some(vec!["kamaji.clastix.io/finalizer".into()]);
        assert_eq!(
            stuck_reason(&stuck),
            "still waiting for the finalizers kamaji.clastix.io/finalizer"
        );
    }

    #[test]
    fn objects_without_our_labels_are_ignored() {
        let mut foreign = tcp(serde_json::json!({}));
        foreign.metadata.labels = None;
        assert_eq!(observe(&foreign), None);
    }
}
