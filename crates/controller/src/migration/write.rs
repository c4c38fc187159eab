//! The migration manager's status writes: `status.migration` and the `Migrating` condition, applied
//! with a field manager of their own so the reconciler's status writes never drop them.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use serde_json::json;

use super::plan;
use crate::{
    Context, Error,
    k8s::crd::{MigrationStatus, TenantControlPlane},
};

pub use crate::migration_journal::MIGRATION_MANAGER;

/// The condition type the migration manager owns.
pub const CONDITION: &str = "Migrating";

/// Records `m` in the controller's journal, then applies it as `status.migration`, with the
/// `Migrating` condition it implies.
pub async fn status(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    super::journal::write(ctx, tcp, m).await?;
    publish(ctx, tcp, m).await
}

/// Applies the journal's record `m` as `status.migration` (status only: the journal has it already).
pub async fn publish(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    let body = json!({"migration": m, "conditions": [condition(tcp, m, Timestamp::now())]});
    let written = crate::apply::control_plane_status(&ctx.client, tcp, MIGRATION_MANAGER, &body).await?;
    ctx.caches.wrote_control_plane(written);
    Ok(())
}

/// The `Migrating` condition for `m`, keeping the last transition time while the status holds.
fn condition(tcp: &TenantControlPlane, m: &MigrationStatus, now: Timestamp) -> Condition {
    let (status, reason, message) = plan::condition(m);
    let previous = tcp
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION));
    let last_transition_time = previous
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: CONDITION.into(),
        status: status.into(),
        reason,
        message: message.chars().take(2000).collect(),
        last_transition_time,
        observed_generation: tcp.metadata.generation,
    }
}
