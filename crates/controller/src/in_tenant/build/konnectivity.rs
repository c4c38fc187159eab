//! The Konnectivity addon's tenant side: the agents' ServiceAccount, the binding that lets the
//! server (`system:konnectivity-server`) review their tokens, and the agents as a DaemonSet or a
//! Deployment (`agent.mode`). Each agent dials the server's port on the tenant's endpoint and proves
//! itself with a projected ServiceAccount token for the server's audience.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Facts, KUBE_SYSTEM, Kind, TenantObject, binding};
use crate::{
    k8s::crd::{KonnectivityAgent, KonnectivityAgentMode, KonnectivitySpec},
    tenant_control_plane::build::{
        AGENT_SERVICE_ACCOUNT, AUDIENCE, IMAGE_REPOSITORY, SERVER_USER, default_proxy_version, merge_args,
    },
};

/// The agents' workload name.
pub const AGENT: &str = "konnectivity-agent";
/// The agent's health port (`/healthz`, `/readyz`).
pub const AGENT_HEALTH_PORT: i32 = 8134;
/// The agent's admin port.
pub const AGENT_ADMIN_PORT: i32 = 8133;
/// Where the projected token is mounted in the agent.
pub const TOKEN_DIR: &str = "/var/run/secrets/tokens";
/// The projected token's file name.
pub const TOKEN_FILE: &str = "konnectivity-agent-token";

/// The addon's objects.
pub fn objects(facts: &Facts<'_>, spec: &KonnectivitySpec) -> Vec<TenantObject> {
    let agent = spec.agent.clone().unwrap_or_default();
    let workload = workload(facts, spec, &agent);
    vec![
        TenantObject::new(
            Kind::ServiceAccount,
            KUBE_SYSTEM,
            AGENT_SERVICE_ACCOUNT,
            json!({}),
            &[],
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            SERVER_USER,
            "system:auth-delegator",
            &[("User", SERVER_USER)],
        ),
        TenantObject::new(mode_kind(&agent), KUBE_SYSTEM, AGENT, workload, &[]),
    ]
}

/// `DaemonSet` (the default) or `Deployment`.
pub fn mode_kind(agent: &KonnectivityAgent) -> Kind {
    match agent.mode {
        Some(KonnectivityAgentMode::Deployment) => Kind::Deployment,
        _ => Kind::DaemonSet,
    }
}

/// The agent image: `agent.image` (a repository) at `agent.version`, else upstream's at the server's
/// version.
pub fn image(facts: &Facts<'_>, spec: &KonnectivitySpec, agent: &KonnectivityAgent) -> String {
    let repository = agent
        .image
        .clone()
        .unwrap_or_else(|| format!("{IMAGE_REPOSITORY}/proxy-agent"));
    let version = agent
        .version
        .clone()
        .or_else(|| spec.server.version.clone())
        .or_else(|| default_proxy_version(facts.version))
        .unwrap_or_else(|| "v0.34.0".into());
    format!("{repository}:{version}")
}

/// The host part of `host:port` (`[v6]:port` → `v6`).
pub fn endpoint_host(endpoint: &str) -> &str {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// The agent's args: the managed flags win over `agent.extraArgs` (a duplicate is dropped).
pub fn args(facts: &Facts<'_>, spec: &KonnectivitySpec, agent: &KonnectivityAgent) -> Vec<String> {
    let managed: BTreeMap<String, String> = [
        (
            "ca-cert",
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".to_string(),
        ),
        ("proxy-server-host", endpoint_host(facts.endpoint).to_string()),
        ("proxy-server-port", spec.server.port.to_string()),
        ("admin-server-port", AGENT_ADMIN_PORT.to_string()),
        ("health-server-port", AGENT_HEALTH_PORT.to_string()),
        ("service-account-token-path", format!("{TOKEN_DIR}/{TOKEN_FILE}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    merge_args(
        &managed,
        &BTreeMap::new(),
        agent.extra_args.as_deref().unwrap_or_default(),
    )
    .args
}

fn workload(facts: &Facts<'_>, spec: &KonnectivitySpec, agent: &KonnectivityAgent) -> Value {
    let labels = json!({"k8s-app": AGENT});
    let tolerations = agent
        .tolerations
        .as_ref()
        .map(|t| json!(t))
        .unwrap_or_else(|| json!([{"key": "CriticalAddonsOnly", "operator": "Exists"}]));
    let pod = json!({
        "metadata": {"labels": labels},
        "spec": {
            "priorityClassName": "system-cluster-critical",
            "serviceAccountName": AGENT_SERVICE_ACCOUNT,
            "hostNetwork": agent.host_network.unwrap_or(false),
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": tolerations,
            "containers": [{
                "name": AGENT,
                "image": image(facts, spec, agent),
                "imagePullPolicy": "IfNotPresent",
                "command": ["/proxy-agent"],
                "args": args(facts, spec, agent),
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": AGENT_HEALTH_PORT, "scheme": "HTTP"},
                    "initialDelaySeconds": 15,
                    "timeoutSeconds": 15,
                },
                "volumeMounts": [{"name": TOKEN_FILE, "mountPath": TOKEN_DIR}],
            }],
            "volumes": [{
                "name": TOKEN_FILE,
                "projected": {"sources": [{"serviceAccountToken": {
                    "path": TOKEN_FILE,
                    "audience": AUDIENCE,
                    "expirationSeconds": 3600,
                }}]},
            }],
        },
    });
    let mut spec_body = json!({"selector": {"matchLabels": labels}, "template": pod});
    match mode_kind(agent) {
        Kind::Deployment => spec_body["replicas"] = json!(agent.replicas.unwrap_or(1)),
        _ => spec_body["updateStrategy"] = json!({"type": "RollingUpdate"}),
    }
    json!({"metadata": {"labels": labels}, "spec": spec_body})
}
