//! What the migration manager trusts before it acts with a DataStore's admin identity: the
//! controller's own record of the migration (the [`journal`]), never `status.migration` as written
//! by others; and, before every stage, abort and unwind, the ownership markers of both spaces.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::journal::{self, Verdict, with_migration};
use crate::{
    Context, Error,
    datastore::{AnyDriver, Driver as _, TenantSpace},
    k8s::crd::{MigrationStatus, TenantControlPlane},
};

/// The field manager of the refusal condition (apart from the manager's own, whose fields it keeps).
const GUARD_MANAGER: &str = "tenantplane-migration-guard";

/// The condition type set when a forged `status.migration` was refused.
pub const REFUSED_CONDITION: &str = "MigrationStatusRefused";

/// `tcp` as the migration manager may act on it: `status.migration` replaced by the journal's
/// record. A status that lags the journal is published again; one the controller did not write is
/// refused (a Warning Event, the [`REFUSED_CONDITION`] condition) and put back.
pub async fn trusted(ctx: &Context, tcp: TenantControlPlane) -> Result<TenantControlPlane, Error> {
    let recorded = journal::read(ctx, &tcp).await?;
    let shown = tcp.status.as_ref().and_then(|s| s.migration.as_ref());
    match journal::judge(shown, &recorded) {
        Verdict::Agrees => return Ok(tcp),
        Verdict::Behind => restore(ctx, &tcp, recorded.current.as_ref()).await?,
        Verdict::Forged(why) => {
            tracing::warn!(object = %tcp.name_any(), "refused a forged status.migration: {why}");
            let message = format!("{why}; the controller ignored it and restored its own record");
            ctx.warn(&tcp, "MigrationStatusRefused", &message).await;
            refusal_condition(ctx, &tcp, &message).await?;
            restore(ctx, &tcp, recorded.current.as_ref()).await?;
        }
    }
    Ok(with_migration(tcp, recorded.current))
}

/// Replaces `status.migration` whole (fields another writer added go too) with `m`, or removes it.
async fn restore(ctx: &Context, tcp: &TenantControlPlane, m: Option<&MigrationStatus>) -> Result<(), Error> {
    let has_status = tcp.status.is_some();
    let has_migration = tcp.status.as_ref().is_some_and(|s| s.migration.is_some());
    let ops = match (m, has_status, has_migration) {
        (Some(m), true, _) => json!([{"op": "add", "path": "/status/migration", "value": m}]),
        (Some(m), false, _) => json!([{"op": "add", "path": "/status", "value": {"migration": m}}]),
        (None, _, true) => json!([{"op": "remove", "path": "/status/migration"}]),
        (None, _, false) => return Ok(()),
    };
    let patch: json_patch::Patch = serde_json::from_value(ops).map_err(|e| Error::Invalid {
        reason: "MigrationRestoreFailed",
        message: format!("the restoring patch cannot be built: {e}"),
    })?;
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let written = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace)
        .patch_status(
            &tcp.name_any(),
            &PatchParams::default().validation_strict(),
            &Patch::<()>::Json(patch),
        )
        .await?;
    ctx.caches.wrote_control_plane(written);
    Ok(())
}

/// Applies the [`REFUSED_CONDITION`] condition with `message`.
async fn refusal_condition(ctx: &Context, tcp: &TenantControlPlane, message: &str) -> Result<(), Error> {
    let condition = Condition {
        type_: REFUSED_CONDITION.into(),
        status: "True".into(),
        reason: "ForgedMigrationStatus".into(),
        message: message.chars().take(2000).collect(),
        last_transition_time: Time(Timestamp::now()),
        observed_generation: tcp.metadata.generation,
    };
    let body = json!({"conditions": [condition]});
    crate::apply::control_plane_status(&ctx.client, tcp, GUARD_MANAGER, &body).await?;
    Ok(())
}

/// Refuses a migration whose source and target are the same DataStore, or two DataStore objects of
/// one server (a copy onto itself, then the removal of the source, would delete the data the tenant
/// serves from).
pub async fn distinct(m: &MigrationStatus, source: &AnyDriver, target: &AnyDriver) -> Result<(), Error> {
    let same = |why: String| Error::Invalid {
        reason: "MigrationSourceIsTarget",
        message: format!(
            "the migration's source and target are {why}: nothing would move, and removing the source would delete the data the tenant serves from"
        ),
    };
    if m.source == m.target {
        return Err(same(format!("both DataStore {}", m.source)));
    }
    if source.kind() == target.kind() && source.server_identity().await? == target.server_identity().await? {
        return Err(same(format!(
            "DataStores {} and {}, which name one server",
            m.source, m.target
        )));
    }
    Ok(())
}

/// Refuses unless `space` on `driver` carries this TenantControlPlane's ownership markers; `side`
/// ("source", "target") names it in the message.
pub async fn owned(driver: &AnyDriver, space: &TenantSpace, side: &str) -> Result<(), Error> {
    driver.check_owned(space).await.map_err(|e| {
        if e.is_transient() {
            return Error::Datastore(e);
        }
        Error::Invalid {
            reason: "MigrationSpaceNotOwned",
            message: format!(
                "the migration's {side} space is not this TenantControlPlane's, so it is not touched ({}): {e}",
                e.reason()
            ),
        }
    })
}
