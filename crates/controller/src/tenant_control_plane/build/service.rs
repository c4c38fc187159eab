//! The Service `<tcp>`, a typed `k8s-openapi` object.

use k8s_openapi::{
    api::core::v1::{ServicePort, ServiceSpec},
    apimachinery::pkg::util::intstr::IntOrString,
};

use super::*;

/// The Service `<tcp>` on `networkProfile.port`, plus the Konnectivity server's port with the addon.
pub fn service(tcp: &TenantControlPlane) -> Result<Service, Error> {
    let port = port(tcp);
    let type_ = tcp.spec.control_plane.service.service_type;
    let type_name = serde_json::to_value(type_)
        .map_err(|e| invalid("ServiceInvalid", e.to_string()))?
        .as_str()
        .map(String::from)
        .ok_or_else(|| {
            invalid(
                "ServiceInvalid",
                format!("service type {type_:?} is not a string"),
            )
        })?;
    let mut ports = vec![ServicePort {
        name: Some("kube-apiserver".into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        node_port: (type_ == ServiceType::NodePort).then_some(port),
        ..Default::default()
    }];
    if let Some(k) = konnectivity(tcp) {
        ports.push(ServicePort {
            name: Some("konnectivity-server".into()),
            port: k.server.port,
            target_port: Some(IntOrString::Int(k.server.port)),
            protocol: Some("TCP".into()),
            node_port: (type_ == ServiceType::NodePort).then_some(k.server.port),
            ..Default::default()
        });
    }
    let mut spec = ServiceSpec {
        type_: Some(type_name),
        selector: Some(BTreeMap::from([(TCP_NAME_LABEL.to_string(), tcp.name_any())])),
        ports: Some(ports),
        ..Default::default()
    };
    if type_ == ServiceType::LoadBalancer
        && let Some(np) = &tcp.spec.network_profile
    {
        spec.load_balancer_class = np.load_balancer_class.clone();
        spec.load_balancer_source_ranges = np.load_balancer_source_ranges.clone().filter(|r| !r.is_empty());
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
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(tcp.name_any()),
            namespace: tcp.namespace(),
            labels: Some(labels),
            annotations: Some(meta.annotations.unwrap_or_default()),
            owner_references: Some(vec![owner(tcp)?]),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    })
}
