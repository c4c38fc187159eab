//! The CoreDNS addon, as kubeadm v1.34 installs it: its ServiceAccount and RBAC, the Corefile, the
//! Deployment, and the `kube-dns` Service at the cluster DNS address.

use serde_json::{Value, json};

use super::{Facts, KUBE_SYSTEM, Kind, TenantObject, binding, kubelet::cluster_dns};
use crate::{k8s::crd::AddonSpec, tenant_control_plane::build::cluster_domain};

/// The CoreDNS Deployment's name.
pub const DEPLOYMENT: &str = "coredns";
/// kubeadm v1.34's CoreDNS image repository and tag.
pub const DEFAULT_IMAGE: (&str, &str) = ("registry.k8s.io/coredns", "v1.12.1");

/// The addon's objects.
pub fn objects(facts: &Facts<'_>, spec: &AddonSpec) -> Vec<TenantObject> {
    let domain = cluster_domain(facts.tcp);
    vec![
        TenantObject::new(Kind::ServiceAccount, KUBE_SYSTEM, "coredns", json!({}), &[]),
        TenantObject::new(
            Kind::ClusterRole,
            "",
            "system:coredns",
            json!({"rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ]}),
            &[],
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "system:coredns",
            "system:coredns",
            &[("ServiceAccount", "kube-system/coredns")],
        ),
        TenantObject::new(
            Kind::ConfigMap,
            KUBE_SYSTEM,
            "coredns",
            json!({"data": {"Corefile": corefile(&domain)}}),
            &[],
        ),
        TenantObject::new(
            Kind::Deployment,
            KUBE_SYSTEM,
            DEPLOYMENT,
            deployment(&image(spec)),
            &[],
        ),
        TenantObject::new(Kind::Service, KUBE_SYSTEM, "kube-dns", service(facts), &[]),
    ]
}

/// The image: `imageRepository`/`imageTag` of the spec, else kubeadm's.
pub fn image(spec: &AddonSpec) -> String {
    let repository = spec.image_repository.as_deref().unwrap_or(DEFAULT_IMAGE.0);
    let tag = spec.image_tag.as_deref().unwrap_or(DEFAULT_IMAGE.1);
    format!("{repository}/coredns:{tag}")
}

/// kubeadm's Corefile for `domain`.
pub fn corefile(domain: &str) -> String {
    format!(
        ".:53 {{\n    errors\n    health {{\n       lameduck 5s\n    }}\n    ready\n    kubernetes {domain} in-addr.arpa ip6.arpa {{\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }}\n    prometheus :9153\n    forward . /etc/resolv.conf {{\n       max_concurrent 1000\n    }}\n    cache 30 {{\n       disable success {domain}\n       disable denial {domain}\n    }}\n    loop\n    reload\n    loadbalance\n}}\n"
    )
}

fn deployment(image: &str) -> Value {
    let labels = json!({"k8s-app": "kube-dns"});
    json!({"spec": {
        "replicas": 2,
        "selector": {"matchLabels": labels},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "priorityClassName": "system-cluster-critical",
                "serviceAccountName": "coredns",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                ],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchExpressions": [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }]}},
                "containers": [{
                    "name": "coredns",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["-conf", "/etc/coredns/Corefile"],
                    "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                    "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true}],
                    "ports": [
                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                        {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
                    ],
                    "livenessProbe": {"httpGet": {"path": "/health", "port": 8080, "scheme": "HTTP"}, "initialDelaySeconds": 60, "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 5},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181, "scheme": "HTTP"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                        "readOnlyRootFilesystem": true,
                    },
                }],
                "dnsPolicy": "Default",
                "volumes": [{"name": "config-volume", "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
            },
        },
    }})
}

/// `kube-dns` at the cluster DNS addresses (the tenth Service address unless `dnsServiceIPs` says).
fn service(facts: &Facts<'_>) -> Value {
    let ips = cluster_dns(facts.tcp);
    let mut spec = json!({
        "selector": {"k8s-app": "kube-dns"},
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
        ],
    });
    if let Some(first) = ips.first() {
        spec["clusterIP"] = json!(first);
        spec["clusterIPs"] = json!(ips);
    }
    json!({
        "metadata": {
            "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        },
        "spec": spec,
    })
}
