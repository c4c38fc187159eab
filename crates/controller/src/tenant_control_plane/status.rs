//! Writes a TenantControlPlane's status as [`build`](super::build) computed it: the datastore phase's
//! [`StorageRecord`] and the workload phase's `observedGeneration`, `controlPlaneEndpoint`,
//! `kubeconfig`, `certificates`, `kubernetesResources` and conditions, in one server-side apply under
//! [`STATUS_MANAGER`].

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;

use super::build::{self, Owned, StorageRecord};
use crate::{Context, Error, k8s::crd::TenantControlPlane};

/// Field manager of every TenantControlPlane status field the controller writes. One manager, so that
/// a reconcile writes its status in one request (and each apply sends every field it owns).
pub const STATUS_MANAGER: &str = "tenantplane-status";

/// Applies `owned` as the status, unless it is what the status holds already.
pub async fn write(ctx: &Context, tcp: &TenantControlPlane, mut owned: Owned) -> Result<(), Error> {
    owned.conditions = build::mine(&owned.conditions);
    if owned == build::current(tcp) {
        return Ok(());
    }
    let written = crate::apply::control_plane_status(&ctx.client, tcp, STATUS_MANAGER, &owned).await?;
    ctx.caches.wrote_control_plane(written);
    Ok(())
}

/// `namespace/name`.
pub fn key(tcp: &TenantControlPlane) -> String {
    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any())
}

/// After a failed datastore phase: its record, `Ready=False` with the reason, every other field as it
/// was.
pub async fn record_failure(
    ctx: &Context,
    tcp: &TenantControlPlane,
    err: &Error,
    record: StorageRecord,
) -> Result<(), Error> {
    write(
        ctx,
        tcp,
        build::datastore_failure_status(tcp, err, record, Timestamp::now()),
    )
    .await
}
