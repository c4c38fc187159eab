//! Pure: the in-tenant phase's status fields (with [`super::authentication_status`]'s
//! `authentication`) and its conditions, from what it built and what the tenant holds.

use std::collections::BTreeSet;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};

use super::{Desired, TenantObject, authentication_status, objects_checksum, upload_config::KUBEADM_CONFIG};
use crate::{
    Error,
    build::Conditions,
    k8s::crd::{
        AddonStatus, AddonsStatus, AuthenticationStatus, KubeadmConfigStatus, KubeadmPhaseStatus,
        KubeadmPhasesStatus, TenantControlPlane,
    },
};

/// True when a node can join: cluster-info signed for every bootstrap token, and kubeadm-config,
/// kubelet-config and the node-bootstrap RBAC in place.
pub const NODE_JOIN_READY: &str = "NodeJoinReady";
/// True when every addon in `spec.addons` (CoreDNS, kube-proxy, Konnectivity's agents) is fully
/// available in the tenant.
pub const ADDONS_READY: &str = "AddonsReady";
/// The conditions the in-tenant phase owns.
pub const OWNED: &[&str] = &[ADDONS_READY, NODE_JOIN_READY];

/// A bootstrap token of the tenant that should sign cluster-info: live, with `usage-bootstrap-signing`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SigningToken {
    /// Its public id (`token-id`).
    pub id: String,
}

/// How far an addon's workload runs: available and desired replicas (a DaemonSet: nodes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rollout {
    /// Available replicas (pods).
    pub available: i32,
    /// Desired replicas (for a DaemonSet, the nodes that should run it).
    pub desired: i32,
}

impl Rollout {
    /// Whether something is desired and all of it is available.
    pub fn complete(self) -> bool {
        self.desired > 0 && self.available >= self.desired
    }
}

/// What the tenant holds, as the phase checked it after applying.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Token ids cluster-info carries a signature for.
    pub signed: BTreeSet<String>,
    /// The tokens that should have one.
    pub tokens: Vec<SigningToken>,
    /// The CoreDNS Deployment's rollout, if it exists.
    pub core_dns: Option<Rollout>,
    /// The kube-proxy DaemonSet's rollout, if it exists.
    pub kube_proxy: Option<Rollout>,
    /// The Konnectivity agents' rollout (DaemonSet or Deployment), if it exists.
    pub konnectivity: Option<Rollout>,
    /// The tenant kube-apiserver's `apiserver_authentication_config_controller_*` metric lines, when
    /// `spec.authentication` is set and they could be read.
    pub authentication_metrics: Option<String>,
}

impl Found {
    /// The ids of signing tokens cluster-info has no signature for.
    pub fn unsigned(&self) -> Vec<&str> {
        self.tokens
            .iter()
            .filter(|t| !self.signed.contains(&t.id))
            .map(|t| t.id.as_str())
            .collect()
    }
}

/// The in-tenant phase's part of the status.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `status.kubeadmconfig`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeadmconfig: Option<KubeadmConfigStatus>,
    /// `status.kubeadmPhase`.
    #[serde(rename = "kubeadmPhase", skip_serializing_if = "Option::is_none")]
    pub kubeadm_phase: Option<KubeadmPhasesStatus>,
    /// `status.addons`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addons: Option<AddonsStatus>,
    /// `status.authentication` (left out, so removed, without `spec.authentication`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationStatus>,
    /// Its conditions.
    pub conditions: Vec<Condition>,
}

/// The report as the TenantControlPlane holds it now.
pub fn current(tcp: &TenantControlPlane) -> Report {
    let status = tcp.status.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = status
        .conditions
        .into_iter()
        .filter(|c| OWNED.contains(&c.type_.as_str()))
        .collect();
    conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    Report {
        kubeadmconfig: status.kubeadmconfig,
        kubeadm_phase: status.kubeadm_phase,
        addons: status.addons,
        authentication: status.authentication,
        conditions,
    }
}

/// The report after a pass that built `desired` and either found `Ok(found)` in the tenant, or failed.
/// A failed pass changes no checksum: they describe what the tenant holds.
pub fn report(
    tcp: &TenantControlPlane,
    desired: &Desired,
    outcome: Result<&Found, &Error>,
    now: Timestamp,
) -> Report {
    let previous = current(tcp);
    let mut conditions = Conditions::new(&previous.conditions, tcp.metadata.generation, now);
    let mut report = Report {
        conditions: Vec::new(),
        ..previous.clone()
    };
    if tcp.spec.authentication.is_none() {
        report.authentication = None;
    }
    match outcome {
        Err(err) => {
            conditions.set(NODE_JOIN_READY, Some(false), err.reason(), err.to_string());
            conditions.set(ADDONS_READY, Some(false), err.reason(), err.to_string());
        }
        Ok(found) => {
            let kubeadm_config: Vec<TenantObject> = desired
                .upload_config
                .iter()
                .filter(|o| o.key.name == KUBEADM_CONFIG)
                .cloned()
                .collect();
            report.kubeadmconfig = Some(kubeadm_config_status(
                previous.kubeadmconfig.as_ref(),
                objects_checksum(&kubeadm_config),
                now,
            ));
            report.kubeadm_phase = Some(KubeadmPhasesStatus {
                bootstrap_token: Some(phase_status(
                    previous
                        .kubeadm_phase
                        .as_ref()
                        .and_then(|p| p.bootstrap_token.as_ref()),
                    objects_checksum(&desired.bootstrap_token),
                    now,
                )),
            });
            let previous_addons = previous.addons.clone().unwrap_or_default();
            report.addons = Some(AddonsStatus {
                core_dns: Some(addon_status(
                    previous_addons.core_dns.as_ref(),
                    desired.core_dns.as_deref(),
                    now,
                )),
                kube_proxy: Some(addon_status(
                    previous_addons.kube_proxy.as_ref(),
                    desired.kube_proxy.as_deref(),
                    now,
                )),
                konnectivity: Some(addon_status(
                    previous_addons.konnectivity.as_ref(),
                    desired.konnectivity.as_deref(),
                    now,
                )),
            });
            report.authentication =
                authentication_status::report(tcp, found.authentication_metrics.as_deref());
            let (ready, reason, message) = join_readiness(desired, found);
            conditions.set(NODE_JOIN_READY, Some(ready), reason, message);
            let (ready, reason, message) = addons_readiness(desired, found);
            conditions.set(ADDONS_READY, Some(ready), reason, message);
        }
    }
    report.conditions = conditions.into_vec();
    report.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    report
}

/// `NodeJoinReady`'s status, reason and message after a pass that applied `desired`.
fn join_readiness(desired: &Desired, found: &Found) -> (bool, &'static str, String) {
    if let Some(failure) = &desired.kubelet_error {
        return (
            false,
            "KubeletConfigPatchInvalid",
            format!("{failure}; kube-system/kubelet-config keeps its last version"),
        );
    }
    let unsigned = found.unsigned();
    if !unsigned.is_empty() {
        return (
            false,
            "ClusterInfoNotSigned",
            format!(
                "kube-public/cluster-info has no signature yet for bootstrap token(s) {} (the tenant's bootstrapsigner controller adds it)",
                unsigned.join(", ")
            ),
        );
    }
    (
        true,
        "JoinObjectsPresent",
        format!(
            "kube-public/cluster-info (signed for {} bootstrap token(s)), kube-system/kubeadm-config, kube-system/kubelet-config and the node-bootstrap RBAC are in the tenant cluster",
            found.tokens.len()
        ),
    )
}

/// `AddonsReady`'s status, reason and message: each requested addon's rollout.
fn addons_readiness(desired: &Desired, found: &Found) -> (bool, &'static str, String) {
    let mut parts = Vec::new();
    let mut ready = true;
    if desired.core_dns.is_some() {
        let rollout = found.core_dns.unwrap_or_default();
        ready &= rollout.complete();
        parts.push(format!(
            "CoreDNS: {}/{} replicas available",
            rollout.available, rollout.desired
        ));
    }
    if desired.kube_proxy.is_some() {
        let rollout = found.kube_proxy.unwrap_or_default();
        ready &= rollout.complete();
        parts.push(format!(
            "kube-proxy: available on {}/{} nodes",
            rollout.available, rollout.desired
        ));
    }
    if desired.konnectivity.is_some() {
        let rollout = found.konnectivity.unwrap_or_default();
        ready &= rollout.complete();
        parts.push(format!(
            "Konnectivity: {}/{} agents available",
            rollout.available, rollout.desired
        ));
    }
    match (parts.is_empty(), ready) {
        (true, _) => (
            true,
            "NoAddons",
            "spec.addons requests none of CoreDNS, kube-proxy and Konnectivity".into(),
        ),
        (false, true) => (true, "AddonsAvailable", parts.join("; ")),
        (false, false) => (false, "AddonsNotAvailable", parts.join("; ")),
    }
}

/// An addon's status after a pass that applied `objects` (`None`: not requested, so not installed).
fn addon_status(
    previous: Option<&AddonStatus>,
    objects: Option<&[TenantObject]>,
    now: Timestamp,
) -> AddonStatus {
    let Some(objects) = objects else {
        return AddonStatus::default();
    };
    let checksum = objects_checksum(objects);
    let previous = previous.map(|p| (p.checksum.as_deref(), p.last_update.as_deref()));
    AddonStatus {
        enabled: true,
        last_update: Some(since(previous, &checksum, now)),
        checksum: Some(checksum),
    }
}

/// When what has `checksum` was last written: the previous time if it had the same checksum, else `now`.
fn since(previous: Option<(Option<&str>, Option<&str>)>, checksum: &str, now: Timestamp) -> String {
    previous
        .filter(|(c, _)| *c == Some(checksum))
        .and_then(|(_, at)| at.map(str::to_string))
        .unwrap_or_else(|| now.to_string())
}

fn kubeadm_config_status(
    previous: Option<&KubeadmConfigStatus>,
    checksum: String,
    now: Timestamp,
) -> KubeadmConfigStatus {
    let previous = previous.map(|p| (p.checksum.as_deref(), p.last_update.as_deref()));
    KubeadmConfigStatus {
        configmap_name: Some(KUBEADM_CONFIG.into()),
        last_update: Some(since(previous, &checksum, now)),
        checksum: Some(checksum),
    }
}

fn phase_status(
    previous: Option<&KubeadmPhaseStatus>,
    checksum: String,
    now: Timestamp,
) -> KubeadmPhaseStatus {
    let previous = previous.map(|p| (p.checksum.as_deref(), p.last_update.as_deref()));
    KubeadmPhaseStatus {
        last_update: Some(since(previous, &checksum, now)),
        checksum: Some(checksum),
    }
}
