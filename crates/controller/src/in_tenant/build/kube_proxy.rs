//! The kube-proxy addon, as kubeadm v1.34 installs it: its ServiceAccount, the `system:node-proxier`
//! binding, the ConfigMap with `config.conf` and `kubeconfig.conf` (pointing at the endpoint), the
//! Role that lets joining nodes read it, and the DaemonSet.

use serde_json::{Value, json};

use super::{
    BOOTSTRAPPERS, Facts, KUBE_SYSTEM, Kind, TenantObject, binding, config_map_reader, upload_config::to_yaml,
};
use crate::{k8s::crd::AddonSpec, tenant_control_plane::build::pod_cidrs};

/// The kube-proxy DaemonSet's name (and its ConfigMap's, ServiceAccount's and Role's).
pub const DAEMON_SET: &str = "kube-proxy";
/// kubeadm's kube-proxy image repository.
pub const DEFAULT_REPOSITORY: &str = "registry.k8s.io";

/// The addon's objects.
pub fn objects(facts: &Facts<'_>, spec: &AddonSpec) -> Vec<TenantObject> {
    vec![
        TenantObject::new(Kind::ServiceAccount, KUBE_SYSTEM, DAEMON_SET, json!({}), &[]),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "kubeadm:node-proxier",
            "system:node-proxier",
            &[("ServiceAccount", "kube-system/kube-proxy")],
        ),
        config_map_reader(KUBE_SYSTEM, DAEMON_SET, DAEMON_SET),
        binding(
            Kind::RoleBinding,
            KUBE_SYSTEM,
            DAEMON_SET,
            DAEMON_SET,
            &[("Group", BOOTSTRAPPERS)],
        ),
        TenantObject::new(
            Kind::ConfigMap,
            KUBE_SYSTEM,
            DAEMON_SET,
            json!({
                "metadata": {"labels": {"app": "kube-proxy"}},
                "data": {"config.conf": to_yaml(&configuration(facts)), "kubeconfig.conf": kubeconfig(facts.endpoint)},
            }),
            &[],
        ),
        TenantObject::new(
            Kind::DaemonSet,
            KUBE_SYSTEM,
            DAEMON_SET,
            daemon_set(&image(facts, spec)),
            &[],
        ),
    ]
}

/// The image: `imageRepository`/`imageTag` of the spec, else kubeadm's at the tenant's version.
pub fn image(facts: &Facts<'_>, spec: &AddonSpec) -> String {
    let repository = spec.image_repository.as_deref().unwrap_or(DEFAULT_REPOSITORY);
    let tag = spec.image_tag.as_deref().unwrap_or(facts.version);
    format!("{repository}/kube-proxy:{tag}")
}

/// The KubeProxyConfiguration: the pod CIDRs and the kubeconfig of the ConfigMap.
pub fn configuration(facts: &Facts<'_>) -> Value {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "bindAddress": "0.0.0.0",
        "clientConnection": {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
        "clusterCIDR": pod_cidrs(facts.tcp).join(","),
        "mode": "",
    })
}

/// kube-proxy's kubeconfig: the endpoint, the cluster CA and the ServiceAccount token of its pod.
pub fn kubeconfig(endpoint: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n    server: https://{endpoint}\n  name: default\ncontexts:\n- context:\n    cluster: default\n    namespace: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n- name: default\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"
    )
}

fn daemon_set(image: &str) -> Value {
    let labels = json!({"k8s-app": "kube-proxy"});
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "kube-proxy",
                    "hostNetwork": true,
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "kube-proxy",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": [
                            "/usr/local/bin/kube-proxy",
                            "--config=/var/lib/kube-proxy/config.conf",
                            "--hostname-override=$(NODE_NAME)",
                        ],
                        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "securityContext": {"privileged": true},
                        "volumeMounts": [
                            {"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"},
                            {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                            {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "kube-proxy", "configMap": {"name": "kube-proxy"}},
                        {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                    ],
                },
            },
        },
    })
}
