//! Writes a TenantControlPlane's status: the datastore phase's [`StorageRecord`] and the workload
//! phase's `observedGeneration`, `controlPlaneEndpoint`, `kubeconfig`, `certificates`,
//! `kubernetesResources` and conditions, in one server-side apply under [`STATUS_MANAGER`].

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
};
use serde::Serialize;
use serde_json::json;

use super::{
    StorageRecord,
    build::tcp_conditions::{DATASTORE_EXCLUSIVE, DATASTORE_READY, OVERRIDES_APPLIED},
};
use crate::{
    controller::{Context, Error, build::Conditions},
    k8s::crd::{
        CertificatesStatus, KubeconfigsStatus, KubernetesResourcesStatus, StorageStatus, TenantControlPlane,
    },
};

/// Field manager of every TenantControlPlane status field the controller writes. One manager, so that
/// a reconcile writes its status in one request (and each apply sends every field it owns).
pub const STATUS_MANAGER: &str = "tenantplane-status";

/// Condition types this phase owns.
pub mod conditions {
    /// Every certificate Secret is present and valid.
    pub const CERTIFICATES_READY: &str = "CertificatesReady";
    /// Every kubeconfig Secret is present and valid.
    pub const KUBECONFIGS_READY: &str = "KubeconfigsReady";
    /// The Deployment has rolled out completely.
    pub const DEPLOYMENT_AVAILABLE: &str = "DeploymentAvailable";
    /// `spec.kubernetes.version` is running (False: refused, the installed version keeps running).
    pub const VERSION_ACCEPTED: &str = "KubernetesVersionAccepted";
    /// Every user `extraArgs.apiServer` flag made it to the container.
    pub const EXTRA_ARGS_APPLIED: &str = "ExtraArgsApplied";
    /// The control plane serves.
    pub const READY: &str = "Ready";
    /// All of the above.
    pub const OWNED: [&str; 6] = [
        CERTIFICATES_READY,
        KUBECONFIGS_READY,
        DEPLOYMENT_AVAILABLE,
        VERSION_ACCEPTED,
        EXTRA_ARGS_APPLIED,
        READY,
    ];
}

use conditions::*;

/// Condition types the datastore phase sets.
const DATASTORE_OWNED: [&str; 3] = [DATASTORE_READY, OVERRIDES_APPLIED, DATASTORE_EXCLUSIVE];

/// The status fields the controller writes: the datastore phase's record and this phase's fields.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Owned {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) storage: Option<StorageStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) control_plane_endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) kubeconfig: Option<KubeconfigsStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) certificates: Option<CertificatesStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) kubernetes_resources: Option<KubernetesResourcesStatus>,
    pub(super) conditions: Vec<Condition>,
}

/// The conditions the controller writes: this phase's and the datastore phase's.
pub(super) fn mine(conditions: &[Condition]) -> Vec<Condition> {
    let mut out: Vec<Condition> = conditions
        .iter()
        .filter(|c| OWNED.contains(&c.type_.as_str()) || DATASTORE_OWNED.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

pub(super) fn current(tcp: &TenantControlPlane) -> Owned {
    let status = tcp.status.clone().unwrap_or_default();
    Owned {
        storage: status.storage,
        observed_generation: status.observed_generation,
        control_plane_endpoint: status.control_plane_endpoint,
        kubeconfig: status.kubeconfig,
        certificates: status.certificates,
        kubernetes_resources: status.kubernetes_resources,
        conditions: mine(&status.conditions),
    }
}

pub(super) async fn write(ctx: &Context, tcp: &TenantControlPlane, mut owned: Owned) -> Result<(), Error> {
    owned.conditions = mine(&owned.conditions);
    if owned == current(tcp) {
        return Ok(());
    }
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let patch = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "status": owned,
    });
    let written = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace)
        .patch_status(
            &tcp.name_any(),
            &PatchParams::apply(STATUS_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    ctx.caches.wrote_control_plane(written);
    Ok(())
}

pub(super) fn key(tcp: &TenantControlPlane) -> String {
    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any())
}

/// The datastore phase's record in place of the last one: its `storage`, and its conditions instead
/// of every earlier datastore-phase condition (one it did not set this run is gone).
pub(super) fn with_storage(mut owned: Owned, record: StorageRecord) -> Owned {
    owned.storage = record.storage;
    owned
        .conditions
        .retain(|c| !DATASTORE_OWNED.contains(&c.type_.as_str()));
    owned.conditions.extend(record.conditions);
    owned
}

/// After a failed datastore phase: its record, `Ready=False` with the reason, every other field as it
/// was.
pub async fn record_failure(
    ctx: &Context,
    tcp: &TenantControlPlane,
    err: &Error,
    record: StorageRecord,
) -> Result<(), Error> {
    let mut owned = current(tcp);
    let previous = owned.conditions.clone();
    let mut conditions = Conditions::new(&previous, tcp.metadata.generation, Timestamp::now());
    for c in previous.iter().filter(|c| OWNED.contains(&c.type_.as_str())) {
        if c.type_ != READY {
            conditions.set(
                &c.type_,
                match c.status.as_str() {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => None,
                },
                &c.reason,
                c.message.clone(),
            );
        }
    }
    conditions.set(
        READY,
        Some(false),
        err.reason(),
        format!("the datastore phase failed: {err}"),
    );
    owned.conditions = conditions.into_vec();
    write(ctx, tcp, with_storage(owned, record)).await
}
