//! The KubeletConfiguration joining nodes run with: kubeadm v1.34's defaults for the tenant's DNS,
//! then `spec.kubernetes.kubelet.configurationJSONPatches` applied as RFC 6902 patches.

use serde_json::{Value, json};

use crate::{
    k8s::crd::{CgroupDriver, TenantControlPlane},
    tenant_control_plane::build::{cluster_domain, indexed_ip, service_cidrs},
};

/// A configurationJSONPatches entry that does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchFailure {
    /// Its index in `spec.kubernetes.kubelet.configurationJSONPatches`.
    pub index: usize,
    /// Its `op`.
    pub op: String,
    /// Its `path`.
    pub path: String,
    /// Why it does not apply.
    pub why: String,
}

impl std::fmt::Display for PatchFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "spec.kubernetes.kubelet.configurationJSONPatches[{}] ({} {}) does not apply to the kubelet configuration: {}",
            self.index, self.op, self.path, self.why
        )
    }
}

/// The cluster DNS addresses: `networkProfile.dnsServiceIPs`, else the tenth address of the first
/// service CIDR (kubeadm's choice, and where the kube-dns Service goes).
pub fn cluster_dns(tcp: &TenantControlPlane) -> Vec<String> {
    let explicit = tcp
        .spec
        .network_profile
        .as_ref()
        .and_then(|n| n.dns_service_ips.clone())
        .filter(|ips| !ips.is_empty());
    explicit.unwrap_or_else(|| {
        service_cidrs(tcp)
            .first()
            .and_then(|cidr| indexed_ip(cidr, 10))
            .map(|ip| vec![ip.to_string()])
            .unwrap_or_default()
    })
}

/// kubeadm v1.34's KubeletConfiguration for the tenant, before the user's patches.
pub fn defaults(tcp: &TenantControlPlane) -> Value {
    let cgroup_driver = match tcp.spec.kubernetes.kubelet.cgroupfs {
        Some(CgroupDriver::Cgroupfs) => "cgroupfs",
        Some(CgroupDriver::Systemd) | None => "systemd",
    };
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"cacheTTL": "0s", "enabled": true},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
        },
        "cgroupDriver": cgroup_driver,
        "clusterDNS": cluster_dns(tcp),
        "clusterDomain": cluster_domain(tcp),
        "containerRuntimeEndpoint": "",
        "cpuManagerReconcilePeriod": "0s",
        "crashLoopBackOff": {},
        "evictionPressureTransitionPeriod": "0s",
        "fileCheckFrequency": "0s",
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "httpCheckFrequency": "0s",
        "imageMaximumGCAge": "0s",
        "imageMinimumGCAge": "0s",
        "logging": {
            "flushFrequency": 0,
            "options": {"json": {"infoBufferSize": "0"}, "text": {"infoBufferSize": "0"}},
            "verbosity": 0,
        },
        "memorySwap": {},
        "nodeStatusReportFrequency": "0s",
        "nodeStatusUpdateFrequency": "0s",
        "rotateCertificates": true,
        "runtimeRequestTimeout": "0s",
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "staticPodPath": "/etc/kubernetes/manifests",
        "streamingConnectionIdleTimeout": "0s",
        "syncFrequency": "0s",
        "volumeStatsAggPeriod": "0s",
    })
}

/// The KubeletConfiguration with the TenantControlPlane's patches applied, one after the other; the
/// first that does not apply is the error (and nothing of the patches is kept).
pub fn configuration(tcp: &TenantControlPlane) -> Result<Value, PatchFailure> {
    let mut config = defaults(tcp);
    let patches = tcp
        .spec
        .kubernetes
        .kubelet
        .configuration_json_patches
        .as_deref()
        .unwrap_or_default();
    for (index, patch) in patches.iter().enumerate() {
        let as_json = serde_json::to_value(patch).unwrap_or_default();
        let failure = |why: String| PatchFailure {
            index,
            op: as_json["op"].as_str().unwrap_or_default().to_string(),
            path: patch.path.clone(),
            why,
        };
        let operation: json_patch::PatchOperation =
            serde_json::from_value(as_json.clone()).map_err(|e| failure(e.to_string()))?;
        json_patch::patch(&mut config, std::slice::from_ref(&operation))
            .map_err(|e| failure(e.kind.to_string()))?;
    }
    Ok(config)
}
