//! I/O: the in-tenant phase's own status fields (`kubeadmconfig`, `kubeadmPhase`, `addons`,
//! `authentication`, and the conditions `NodeJoinReady` and `AddonsReady`),
//! server-side applied under a field manager of its own, so the TenantControlPlane reconcile's status
//! writes and these never remove each other's fields (and a field it leaves out, such as
//! `authentication` once `spec.authentication` is gone, is removed).

use super::build::status::{Report, current};
use crate::{Context, Error, k8s::crd::TenantControlPlane};

/// The field manager of the in-tenant phase's status fields.
pub const STATUS_MANAGER: &str = "tenantplane-in-tenant";

/// Writes `report` unless the TenantControlPlane already holds it.
pub async fn write(ctx: &Context, tcp: &TenantControlPlane, report: &Report) -> Result<(), Error> {
    if *report == current(tcp) {
        return Ok(());
    }
    crate::apply::control_plane_status(&ctx.client, tcp, STATUS_MANAGER, report).await?;
    Ok(())
}
