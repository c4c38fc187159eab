//! The Konnectivity server of `spec.addons.konnectivity`: its sidecar in the apiserver pod, the
//! egress-selector configuration that sends the apiserver's cluster traffic (kubelet logs, exec, port
//! forwarding, node, pod and service proxy, webhooks through Services) into it, its client certificate
//! and kubeconfig Secrets, and the Service port agents dial. The agents are the in-tenant phase's.

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, Probe, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::k8s::crd::KonnectivitySpec;

/// Where the server's socket lives in the pod (an emptyDir shared with kube-apiserver).
pub const UDS_DIR: &str = "/run/konnectivity";
/// The server's socket, as the egress selector names it.
pub const UDS_NAME: &str = "/run/konnectivity/konnectivity-server.socket";
/// Where the `<tcp>-konnectivity-kubeconfig` Secret is mounted.
pub const CONFIG_DIR: &str = "/etc/kubernetes/konnectivity";
/// The server's kubeconfig key.
pub const KUBECONFIG_KEY: &str = "konnectivity-server.conf";
/// The egress selector configuration's key (beside the kubeconfig, so the addon needs no ConfigMap).
pub const EGRESS_KEY: &str = "egress-selector-configuration.yaml";
/// The server's user: bound to `system:auth-delegator` in the tenant so it can review agent tokens.
pub const SERVER_USER: &str = "system:konnectivity-server";
/// The audience of the agents' ServiceAccount tokens.
pub const AUDIENCE: &str = "system:konnectivity-server";
/// The agents' ServiceAccount in the tenant's `kube-system`.
pub const AGENT_SERVICE_ACCOUNT: &str = "konnectivity-agent";
/// The server's admin (metrics) port.
pub const ADMIN_PORT: i32 = 8133;
/// The server's health port (`/healthz`; `/readyz` fails until an agent connects).
pub const HEALTH_PORT: i32 = 8134;
/// Upstream's image repository.
pub const IMAGE_REPOSITORY: &str = "registry.k8s.io/kas-network-proxy";

/// The spec, when the addon is requested.
pub fn konnectivity(tcp: &TenantControlPlane) -> Option<&KonnectivitySpec> {
    tcp.spec.addons.as_ref()?.konnectivity.as_ref()
}

/// `<tcp>-konnectivity-certificate`: the server's client certificate.
pub fn konnectivity_certificate_name(tcp: &TenantControlPlane) -> String {
    format!("{}-konnectivity-certificate", tcp.name_any())
}

/// `<tcp>-konnectivity-kubeconfig`: the server's kubeconfig and the egress selector configuration.
pub fn konnectivity_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-konnectivity-kubeconfig", tcp.name_any())
}

/// The proxy version matching a Kubernetes version: `v1.34.4` → `v0.34.0`.
pub fn default_proxy_version(kubernetes: &str) -> Option<String> {
    parse_version(kubernetes).map(|(_, minor, _)| format!("v0.{minor}.0"))
}

/// The server image: `spec.server.image` (a repository, as upstream) or upstream's, at
/// `spec.server.version` or the version matching the tenant's.
pub fn server_image(spec: &KonnectivitySpec, kubernetes: &str) -> String {
    let repository = spec
        .server
        .image
        .clone()
        .unwrap_or_else(|| format!("{IMAGE_REPOSITORY}/proxy-server"));
    let version = spec
        .server
        .version
        .clone()
        .or_else(|| default_proxy_version(kubernetes))
        .unwrap_or_else(|| "v0.34.0".into());
    format!("{repository}:{version}")
}

/// kube-apiserver's EgressSelectorConfiguration: the `cluster` selection over the server's socket
/// (control-plane and etcd traffic stays direct).
pub fn egress_selector() -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: GRPC\n    transport:\n      uds:\n        udsName: {UDS_NAME}\n"
    )
}

/// The server's args: the managed flags win over `spec.server.extraArgs` (a duplicate is dropped).
pub fn server_args(tcp: &TenantControlPlane, spec: &KonnectivitySpec) -> Args {
    let managed = kv(&[
        ("uds-name", UDS_NAME.into()),
        ("delete-existing-uds-file", "true".into()),
        ("cluster-cert", format!("{PKI}/apiserver.crt")),
        ("cluster-key", format!("{PKI}/apiserver.key")),
        ("mode", "grpc".into()),
        ("server-port", "0".into()),
        ("agent-port", spec.server.port.to_string()),
        ("admin-port", ADMIN_PORT.to_string()),
        // Metrics and profiling stay inside the pod (upstream's default, kept against extraArgs).
        ("admin-bind-address", "127.0.0.1".into()),
        ("health-port", HEALTH_PORT.to_string()),
        ("agent-namespace", "kube-system".into()),
        ("agent-service-account", AGENT_SERVICE_ACCOUNT.into()),
        ("kubeconfig", format!("{CONFIG_DIR}/{KUBECONFIG_KEY}")),
        ("authentication-audience", AUDIENCE.into()),
        ("server-count", replicas(tcp).to_string()),
    ]);
    merge_args(
        &managed,
        &BTreeMap::new(),
        spec.server.extra_args.as_deref().unwrap_or_default(),
    )
}

/// The `konnectivity-server` container, running `args` ([`server_args`]).
pub fn server_container(spec: &KonnectivitySpec, kubernetes: &str, args: &Args) -> Container {
    Container {
        name: "konnectivity-server".into(),
        image: Some(server_image(spec, kubernetes)),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/proxy-server".into()]),
        args: Some(args.args.clone()),
        ports: Some(vec![
            ContainerPort {
                name: Some("konnectivity".into()),
                container_port: spec.server.port,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
            ContainerPort {
                name: Some("health".into()),
                container_port: HEALTH_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        // `/readyz` stays false until an agent connects, and agents come after the tenant is Ready.
        liveness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::Int(HEALTH_PORT),
                scheme: Some("HTTP".into()),
                ..Default::default()
            }),
            initial_delay_seconds: Some(30),
            timeout_seconds: Some(15),
            period_seconds: Some(10),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        resources: spec.server.resources.clone(),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "etc-kubernetes-pki".into(),
                mount_path: PKI.into(),
                read_only: Some(true),
                ..Default::default()
            },
            uds_mount(),
            config_mount(),
        ]),
        ..Default::default()
    }
}

/// The socket directory's mount (kube-apiserver and the server).
pub fn uds_mount() -> VolumeMount {
    VolumeMount {
        name: "konnectivity-uds".into(),
        mount_path: UDS_DIR.into(),
        ..Default::default()
    }
}

/// The kubeconfig Secret's mount (kube-apiserver reads the egress selector from it).
pub fn config_mount() -> VolumeMount {
    VolumeMount {
        name: "konnectivity-config".into(),
        mount_path: CONFIG_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The socket directory and the kubeconfig Secret.
pub fn volumes(tcp: &TenantControlPlane) -> Vec<Volume> {
    vec![
        Volume {
            name: "konnectivity-uds".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "konnectivity-config".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(konnectivity_kubeconfig_name(tcp)),
                default_mode: Some(420),
                ..Default::default()
            }),
            ..Default::default()
        },
    ]
}

/// The kube-apiserver flags the addon manages.
pub fn apiserver_flags() -> BTreeMap<String, String> {
    kv(&[(
        "egress-selector-config-file",
        format!("{CONFIG_DIR}/{EGRESS_KEY}"),
    )])
}
