//! Which Kubernetes version runs, and its state from the applied Deployment.

use super::*;

/// `(major, minor, patch)` of `vX.Y.Z`.
pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// The version to run: the spec's, unless it is a downgrade or skips a minor vs `installed`; then the
/// installed one with the reason and message of the refusal.
pub fn version_to_run(spec: &str, installed: Option<&str>) -> (String, Option<(&'static str, String)>) {
    let Some(installed) = installed.filter(|i| !i.is_empty()) else {
        return (spec.to_string(), None);
    };
    let (Some(want), Some(have)) = (parse_version(spec), parse_version(installed)) else {
        return (spec.to_string(), None);
    };
    if want < have {
        return (
            installed.to_string(),
            Some((
                "VersionDowngradeRefused",
                format!("unable to downgrade from {installed} to {spec}: {installed} keeps running"),
            )),
        );
    }
    if want.0 != have.0 || want.1 > have.1 + 1 {
        return (
            installed.to_string(),
            Some((
                "VersionSkipRefused",
                format!(
                    "unable to upgrade from {installed} to {spec}: upgrade one minor version at a time; {installed} keeps running"
                ),
            )),
        );
    }
    (spec.to_string(), None)
}

/// The version state from the applied Deployment (upstream's order) and whether the rollout is complete.
pub fn version_state(
    deployment: &Deployment,
    running: &str,
    installed: Option<&str>,
) -> (KubernetesVersionState, bool) {
    let desired = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let complete = status.observed_generation.is_some()
        && status.observed_generation == deployment.metadata.generation
        && status.unavailable_replicas.unwrap_or(0) == 0
        && status.updated_replicas.unwrap_or(0) == desired
        && status.ready_replicas.unwrap_or(0) == desired
        && status.available_replicas.unwrap_or(0) == desired
        && status.replicas.unwrap_or(0) == desired;
    let state = if desired == 0 {
        KubernetesVersionState::Sleeping
    } else if complete {
        KubernetesVersionState::Ready
    } else if installed.is_some_and(|i| i != running) {
        KubernetesVersionState::Upgrading
    } else if installed.is_none() {
        KubernetesVersionState::Provisioning
    } else {
        KubernetesVersionState::NotReady
    };
    (state, complete && desired > 0)
}

/// `status.kubernetesResources.deployment` from the applied Deployment.
pub fn deployment_summary(deployment: &Deployment, now: &str) -> DeploymentStatusSummary {
    let status = deployment.status.clone().unwrap_or_default();
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    DeploymentStatusSummary {
        name: deployment.metadata.name.clone(),
        namespace: deployment.metadata.namespace.clone(),
        selector: Some(selector),
        replicas: Some(status.replicas.unwrap_or(0)),
        ready_replicas: Some(status.ready_replicas.unwrap_or(0)),
        available_replicas: Some(status.available_replicas.unwrap_or(0)),
        updated_replicas: Some(status.updated_replicas.unwrap_or(0)),
        last_update: Some(now.to_string()),
    }
}
