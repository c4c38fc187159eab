//! The DataStore controller: resolves credentials, checks the datastore, records who uses it, and
//! holds deletion while any TenantControlPlane does.

use std::{sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt as _, runtime::controller::Action};

use super::{
    Context, DATASTORE_FINALIZER, Error, apply,
    build::{self, Conditions, DataStoreHealth},
    fetch, status,
};
use crate::{
    datastore::Driver as _,
    k8s::crd::{DataStore, DataStoreStatus},
};

/// The controller's name in metrics.
pub const CONTROLLER: &str = "datastore";
/// How long a passed health check of an unchanged DataStore is trusted.
pub const HEALTH_TTL: Duration = Duration::from_secs(30);

/// Reconciles one DataStore and records the outcome (Event, metrics).
pub async fn reconcile(ds: Arc<DataStore>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_inner(&ds, &ctx).await;
    ctx.observe(CONTROLLER, ds.as_ref(), &result).await;
    result
}

/// Backoff for transient errors; permanent ones wait for a change.
pub fn error_policy(ds: Arc<DataStore>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.error_action(CONTROLLER, ds.as_ref(), err)
}

async fn reconcile_inner(ds: &DataStore, ctx: &Context) -> Result<Action, Error> {
    let name = ds.name_any();
    let api = Api::<DataStore>::all(ctx.client.clone());
    let deleting = ds.metadata.deletion_timestamp.is_some();
    if !deleting {
        apply::add_finalizer(&api, ds, DATASTORE_FINALIZER).await?;
    }

    // fetch: `usedBy` from the controller's index (its cache until the index has listed); the health
    // check at most every HEALTH_TTL while it passes (a change of users re-triggers this reconcile,
    // and must not cost a connection)
    let used_by = match ctx.used_by.used_by(&name) {
        Some(used_by) => used_by,
        None => build::used_by(&name, &ctx.control_planes_cached().await?),
    };
    let generation = ds.metadata.generation;
    let was_ready = ds.status.as_ref().is_some_and(|s| s.ready);
    let health = if was_ready && ctx.recently_healthy(&name, generation, HEALTH_TTL) {
        DataStoreHealth {
            validated: Ok(()),
            reachable: Some(Ok(())),
        }
    } else {
        let health = match fetch::driver(ctx, ds).await {
            Ok((_, driver)) => DataStoreHealth {
                validated: Ok(()),
                reachable: Some(driver.check().await),
            },
            Err(err) => DataStoreHealth {
                validated: Err(err),
                reachable: None,
            },
        };
        let passed = health.validated.is_ok() && matches!(health.reachable, Some(Ok(())));
        ctx.record_health(&name, generation, passed);
        health
    };

    // build
    let previous = ds.status.clone().unwrap_or_default();
    let mut conditions = Conditions::new(&previous.conditions, ds.metadata.generation, Timestamp::now());
    let ready = build::datastore_conditions(&mut conditions, &health, deleting, &used_by);
    let new_status = DataStoreStatus {
        ready,
        used_by: used_by.clone(),
        conditions: conditions.into_vec(),
        observed_generation: ds.metadata.generation,
    };

    // status (at most once per DATASTORE_STATUS_INTERVAL unless deleting), then the finalizer
    if new_status != previous {
        match ctx.datastore_status_wait(&name) {
            Some(wait) if !deleting => return Ok(Action::requeue(wait)),
            _ => {
                status::datastore(&ctx.client, &name, &new_status).await?;
                ctx.datastore_status_written(&name);
            }
        }
    }
    if deleting {
        if used_by.is_empty() {
            apply::remove_finalizer(&api, ds, DATASTORE_FINALIZER).await?;
            // closes the kept driver's connection and drops the credentials
            ctx.caches.forget_resolved(&name);
            return Ok(Action::await_change());
        }
        // A TenantControlPlane change re-triggers; the requeue is a safety net.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    match (health.validated, health.reachable) {
        (Err(err), _) => Err(err),
        (Ok(()), Some(Err(err))) => Err(err.into()),
        _ => Ok(Action::requeue(ctx.settings.resync)),
    }
}
