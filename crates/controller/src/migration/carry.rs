//! `overrides: move`: the tenant's override spaces go with it when a migration re-places them (a
//! target under another etcd CA). Each old space is frozen with the primary and copied whole to its
//! new DataStore by the etcd mover, then both are compared key by key, all before `Switching`; the
//! datastore phase removes the old spaces after the switch, as with `drop`.
//!
//! Which spaces move is decided by [`carried_overrides`] from the overrides recorded in
//! `status.storage` (served until the switch) and the spec's: a split or merge of spaces is refused
//! (permanent, before copying), because the mover copies a space whole and would mix or overwrite data.

use std::{sync::Arc, time::Instant};

use kube::ResourceExt as _;
use tenantplane_core::placement::{CarriedOverride, OverrideDecision, carried_overrides};

use super::movers::{self, AnyMover};
use crate::{
    Context, Error,
    datastore::{AnyDriver, Driver as _, TenantSpace, migrate::Checkpoint, migrate::Step},
    fetch,
    k8s::crd::{CarriedOverrideStatus, MigrationStatus, OverridesPolicy, TenantControlPlane},
    tenant_control_plane::build,
};

/// The override spaces `m` carries: none under `drop`; `Err` (permanent) when they cannot move whole.
pub fn planned(tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<Vec<CarriedOverride>, Error> {
    if m.overrides != OverridesPolicy::Move {
        return Ok(Vec::new());
    }
    let current: Vec<OverrideDecision> = recorded(tcp)
        .iter()
        .filter_map(|o| {
            Some(OverrideDecision {
                resource: o.resource.clone(),
                data_store: o.data_store_name.clone()?,
            })
        })
        .collect();
    let next: Vec<OverrideDecision> = tcp
        .spec
        .data_store_overrides
        .iter()
        .flatten()
        .map(|o| OverrideDecision {
            resource: o.resource.clone(),
            data_store: o.data_store.clone(),
        })
        .collect();
    carried_overrides(&current, &next, &m.source, &m.target).map_err(|message| Error::Invalid {
        reason: "OverridesCannotMove",
        message,
    })
}

/// The carries as `status.migration` records them.
pub fn recorded_carries(planned: Vec<CarriedOverride>) -> Vec<CarriedOverrideStatus> {
    planned
        .into_iter()
        .map(|c| CarriedOverrideStatus {
            from: c.from,
            to: c.to,
        })
        .collect()
}

/// Frozen: freezes every carried space and copies it whole to its new DataStore; fails (transient,
/// the stage runs again) unless both sides are then equal.
pub async fn carry(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    for c in &m.carried_overrides {
        let started = Instant::now();
        let (mover, target, target_space) = mover_for(ctx, tcp, c).await?;
        target.provision(&target_space).await?;
        crate::served::provisioned(ctx, tcp, &c.to, &target_space).await?;
        mover.freeze().await?;
        let mut checkpoint = Checkpoint::default();
        while mover.finish_step(&mut checkpoint).await? == Step::More {}
        let verification = mover.verify().await?;
        tracing::info!(
            object = %tcp.name_any(), from = %c.from, to = %c.to, keys = verification.keys,
            ms = started.elapsed().as_millis() as u64, "carried the override space"
        );
        if !verification.equal() {
            return Err(Error::NotReady {
                reason: "MigrationVerificationFailed",
                message: format!(
                    "the override space carried from {} to {}: {} of {} keys differ (e.g. {}); copying again",
                    c.from,
                    c.to,
                    verification.mismatch_count,
                    verification.keys,
                    verification.mismatches.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// Before the switch (abort or failure after the freeze): the old spaces are writable again and the
/// new ones removed (only what is marked with this TenantControlPlane's UID).
pub async fn uncarry(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    for c in &m.carried_overrides {
        let (mover, target, target_space) = match mover_for(ctx, tcp, c).await {
            Ok(found) => found,
            // Not the owner's (or gone): `carry` checks first, so it never froze or copied it.
            Err(err) if !err.is_transient() => continue,
            Err(err) => return Err(err),
        };
        mover.thaw().await?;
        target.deprovision(&target_space).await?;
        crate::served::deprovisioned(ctx, tcp, &c.to, &target_space).await?;
    }
    Ok(())
}

/// The etcd mover of carry `c`, with the new DataStore's driver and the tenant's space there.
async fn mover_for(
    ctx: &Context,
    tcp: &TenantControlPlane,
    c: &CarriedOverrideStatus,
) -> Result<(AnyMover, Arc<AnyDriver>, TenantSpace), Error> {
    let owner = build::datastore_owner(tcp)?;
    let setup = recorded(tcp)
        .iter()
        .find(|o| o.data_store_name.as_deref() == Some(c.from.as_str()))
        .and_then(|o| o.setup.as_ref());
    let (schema, user) = build::tenant_names(tcp)?;
    let source_space = TenantSpace::new(
        setup
            .and_then(|s| s.schema.clone())
            .unwrap_or_else(|| schema.clone()),
        setup.and_then(|s| s.user.clone()).unwrap_or_else(|| user.clone()),
        owner.clone(),
    )?;
    let target_space = TenantSpace::new(schema, user, owner)?;
    let Some(source) = fetch::datastore(ctx, &c.from).await? else {
        return Err(Error::Invalid {
            reason: "DataStoreNotFound",
            message: format!("the override DataStore {} is gone: its data cannot move", c.from),
        });
    };
    let (_, source) = fetch::driver(ctx, &source).await?;
    // Status names the space, and status has more writers than the datastore: only the owner's own
    // space is frozen, read or thawed.
    let AnyDriver::Etcd(etcd) = source.as_ref() else {
        return Err(Error::Invalid {
            reason: "OverridesCannotMove",
            message: format!("the override DataStore {} is not an etcd", c.from),
        });
    };
    etcd.check_owned(&source_space).await?;
    let (_, target) = crate::tenant_control_plane::fetch::ready_datastore(ctx, &c.to).await?;
    let mover = movers::mover(&source, &target, &source_space, &target_space)?;
    Ok((mover, target, target_space))
}

/// The overrides recorded in `status.storage` (served until the switch).
fn recorded(tcp: &TenantControlPlane) -> &[crate::k8s::crd::OverrideStorageStatus] {
    tcp.status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .map(|s| s.overrides.as_slice())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    /// A TCP serving `/events` and leases from `recorded`, whose spec asks for `spec` (resource,
    /// DataStore), migrating a → b with `policy`.
    fn migrating(
        recorded: &[(&str, &str)],
        spec: &[(&str, &str)],
        policy: &str,
    ) -> (TenantControlPlane, MigrationStatus) {
        let recorded: Vec<_> = recorded
            .iter()
            .map(|(r, d)| json!({"resource": r, "dataStoreName": d}))
            .collect();
        let spec: Vec<_> = spec
            .iter()
            .map(|(r, d)| json!({"resource": r, "dataStore": d}))
            .collect();
        let m = json!({"source": "a", "target": "b", "stage": "Copying", "overrides": policy,
                       "startedAt": "2026-12-06T00:00:00Z", "stageStartedAt": "2026-12-06T00:00:00Z"});
        let tcp: TenantControlPlane = serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": "cp", "namespace": "ns", "uid": "u-1"},
            "spec": {"dataStore": "b", "dataStoreOverrides": spec,
                     "controlPlane": {"service": {"serviceType": "ClusterIP"}}, "kubernetes": {"version": "v1.34.4", "kubelet": {}}},
            "status": {"storage": {"dataStoreName": "a", "overrides": recorded}, "migration": m},
        }))
        .unwrap();
        let m = tcp.status.as_ref().unwrap().migration.clone().unwrap();
        (tcp, m)
    }

    #[test]
    fn drop_carries_nothing_and_move_carries_each_space_that_moves_whole() {
        let old = [("/events", "ev-1"), ("coordination.k8s.io/leases", "ev-1")];
        let new = [("/events", "ev-2"), ("coordination.k8s.io/leases", "ev-2")];
        let (tcp, m) = migrating(&old, &new, "Drop");
        assert_eq!(planned(&tcp, &m).unwrap(), vec![]);
        let (tcp, m) = migrating(&old, &new, "Move");
        let carried = recorded_carries(planned(&tcp, &m).unwrap());
        assert_eq!(
            carried,
            vec![CarriedOverrideStatus {
                from: "ev-1".into(),
                to: "ev-2".into()
            }]
        );
    }

    #[test]
    fn a_spec_that_merges_spaces_or_writes_into_the_source_is_a_permanent_refusal() {
        for spec in [
            [("/events", "ev-2"), ("coordination.k8s.io/leases", "ev-2")],
            [("/events", "a"), ("coordination.k8s.io/leases", "le-2")],
        ] {
            let (tcp, m) = migrating(
                &[("/events", "ev-1"), ("coordination.k8s.io/leases", "le-1")],
                &spec,
                "Move",
            );
            let err = planned(&tcp, &m).unwrap_err();
            assert!(!err.is_transient(), "{err}");
            assert!(
                matches!(
                    err,
                    Error::Invalid {
                        reason: "OverridesCannotMove",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }
}
