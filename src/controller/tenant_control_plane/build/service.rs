//! The Service `<tcp>`.

use super::*;

/// The Service `<tcp>` on `networkProfile.port`.
pub fn service(tcp: &TenantControlPlane) -> Result<Service, Error> {
    let port = port(tcp);
    let type_ = tcp.spec.control_plane.service.service_type;
    let mut svc_port = json!({"name": "kube-apiserver", "port": port, "targetPort": port, "protocol": "TCP"});
    if type_ == ServiceType::NodePort {
        svc_port["nodePort"] = json!(port);
    }
    let mut spec = json!({
        "type": serde_json::to_value(type_).map_err(|e| invalid("ServiceInvalid", e.to_string()))?,
        "selector": {TCP_NAME_LABEL: tcp.name_any()},
        "ports": [svc_port],
    });
    if type_ == ServiceType::LoadBalancer
        && let Some(np) = &tcp.spec.network_profile
    {
        if let Some(class) = &np.load_balancer_class {
            spec["loadBalancerClass"] = json!(class);
        }
        if let Some(ranges) = np.load_balancer_source_ranges.as_ref().filter(|r| !r.is_empty()) {
            spec["loadBalancerSourceRanges"] = json!(ranges);
        }
    }
    let meta = tcp
        .spec
        .control_plane
        .service
        .additional_metadata
        .clone()
        .unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(TCP_NAME_LABEL.into(), tcp.name_any());
    labels.insert(MANAGED_BY_LABEL.0.into(), MANAGED_BY_LABEL.1.into());
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": tcp.name_any(),
            "namespace": tcp.namespace(),
            "labels": labels,
            "annotations": meta.annotations.unwrap_or_default(),
            "ownerReferences": [owner(tcp)?],
        },
        "spec": spec,
    }))
    .map_err(|e| invalid("ServiceInvalid", format!("the Service does not serialize: {e}")))
}
