//! kubeadm's upload-config phase: `kube-system/kubeadm-config` (the ClusterConfiguration nodes read
//! on `kubeadm join`), `kube-system/kubelet-config` (the KubeletConfiguration they run with) and the
//! Roles that let bootstrapping and joined nodes read both.

use serde_json::{Value, json};

use super::{
    BOOTSTRAPPERS, Facts, KUBE_SYSTEM, Kind, NODES, TenantObject, binding, checksum, config_map_reader,
    kubelet::{self, PatchFailure},
};
use crate::{
    pki::KeyAlgorithm,
    tenant_control_plane::build::{cluster_domain, pod_cidrs, service_cidrs},
};

/// `kube-system/kubeadm-config`.
pub const KUBEADM_CONFIG: &str = "kubeadm-config";
/// `kube-system/kubelet-config`.
pub const KUBELET_CONFIG: &str = "kubelet-config";
/// kubeadm's annotation with the checksum of a component configuration it generated.
pub const COMPONENT_CONFIG_HASH: &str = "kubeadm.kubernetes.io/component-config.hash";

/// The phase's objects, and the patch failure that kept `kubelet-config` out.
pub fn objects(facts: &Facts<'_>) -> (Vec<TenantObject>, Option<PatchFailure>) {
    let subjects = [("Group", BOOTSTRAPPERS), ("Group", NODES)];
    let mut objects = vec![
        kubeadm_config(facts),
        config_map_reader(KUBE_SYSTEM, "kubeadm:nodes-kubeadm-config", KUBEADM_CONFIG),
        binding(
            Kind::RoleBinding,
            KUBE_SYSTEM,
            "kubeadm:nodes-kubeadm-config",
            "kubeadm:nodes-kubeadm-config",
            &subjects,
        ),
        config_map_reader(KUBE_SYSTEM, "kubeadm:kubelet-config", KUBELET_CONFIG),
        binding(
            Kind::RoleBinding,
            KUBE_SYSTEM,
            "kubeadm:kubelet-config",
            "kubeadm:kubelet-config",
            &subjects,
        ),
    ];
    match kubelet::configuration(facts.tcp) {
        Ok(config) => {
            objects.push(kubelet_config(&config));
            (objects, None)
        }
        Err(failure) => (objects, Some(failure)),
    }
}

/// kubeadm's `encryptionAlgorithm` name of a key algorithm.
pub fn encryption_algorithm(alg: KeyAlgorithm) -> &'static str {
    match alg {
        KeyAlgorithm::EcdsaP256 => "ECDSA-P256",
        KeyAlgorithm::Rsa2048 => "RSA-2048",
    }
}

/// The ClusterConfiguration (kubeadm.k8s.io/v1beta4) of the tenant.
///
/// It names no etcd: a worker's `kubeadm join` does not read it, and the shared datastore's address is
/// not the tenant's to see (kubeadm defaults it to a local etcd).
pub fn cluster_configuration(facts: &Facts<'_>) -> Value {
    let tcp = facts.tcp;
    let addons = tcp.spec.addons.as_ref();
    let dns_disabled = addons.is_none_or(|a| a.core_dns.is_none());
    let proxy_disabled = addons.is_none_or(|a| a.kube_proxy.is_none());
    json!({
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "apiServer": {},
        "certificatesDir": "/etc/kubernetes/pki",
        "clusterName": facts.cluster_name(),
        "controlPlaneEndpoint": facts.endpoint,
        "controllerManager": {},
        "dns": if dns_disabled { json!({"disabled": true}) } else { json!({}) },
        "encryptionAlgorithm": encryption_algorithm(facts.key_algorithm),
        "imageRepository": "registry.k8s.io",
        "kubernetesVersion": facts.version,
        "networking": {
            "dnsDomain": cluster_domain(tcp),
            "podSubnet": pod_cidrs(tcp).join(","),
            "serviceSubnet": service_cidrs(tcp).join(","),
        },
        "proxy": if proxy_disabled { json!({"disabled": true}) } else { json!({}) },
        "scheduler": {},
    })
}

/// `kube-system/kubeadm-config`.
fn kubeadm_config(facts: &Facts<'_>) -> TenantObject {
    let yaml = to_yaml(&cluster_configuration(facts));
    TenantObject::new(
        Kind::ConfigMap,
        KUBE_SYSTEM,
        KUBEADM_CONFIG,
        json!({"data": {"ClusterConfiguration": yaml}}),
        &[],
    )
}

/// `kube-system/kubelet-config`, signed as kubeadm signs the configuration it generated.
fn kubelet_config(config: &Value) -> TenantObject {
    let yaml = to_yaml(config);
    let hash = checksum([yaml.as_str()]);
    TenantObject::new(
        Kind::ConfigMap,
        KUBE_SYSTEM,
        KUBELET_CONFIG,
        json!({"data": {"kubelet": yaml}}),
        &[(COMPONENT_CONFIG_HASH, &hash)],
    )
}

/// YAML of a JSON value (a `Value` always serializes).
pub fn to_yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_default()
}
