//! The TenantControlPlane controller: `fetch -> build -> apply -> status`. The **datastore phase**
//! ([`provision`]) provisions the tenant's space and user on the primary DataStore and on every
//! override and writes the `<tcp>-datastore-config` and `<tcp>-datastore-certificate` Secrets; the
//! **workload phase** ([`apply`]) writes the Service, the PKI and kubeconfig Secrets and the Deployment
//! (built by [`build`]); [`status`] records both in one server-side apply.

pub mod apply;
pub mod build;
pub mod fetch;
pub mod provision;
pub mod status;

use std::sync::Arc;

use kube::{Api, ResourceExt as _, runtime::controller::Action};

pub use self::provision::{StorageOutcome, StorageRecord};
use super::{Context, Error, TCP_FINALIZER, apply as shared_apply};
use crate::k8s::crd::TenantControlPlane;

/// The controller's name in metrics.
pub const CONTROLLER: &str = "tenantcontrolplane";

/// Reconciles one TenantControlPlane and records the outcome (Event, metrics).
pub async fn reconcile(tcp: Arc<TenantControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    // A reconcile that follows this controller's status write at once may get the object from before it.
    let tcp = ctx.caches.newer_control_plane(tcp);
    ctx.metrics.in_flight(CONTROLLER, 1);
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(ctx.settings.reconcile_timeout, reconcile_inner(&tcp, &ctx)).await
    {
        Ok(result) => result,
        Err(_) => Err(Error::NotReady {
            reason: "ReconcileTimeout",
            message: format!(
                "the reconcile did not finish within {:?}; it is retried",
                ctx.settings.reconcile_timeout
            ),
        }),
    };
    ctx.metrics.phase("total", started.elapsed().as_secs_f64());
    ctx.metrics.in_flight(CONTROLLER, -1);
    if tcp.metadata.deletion_timestamp.is_some() && result.is_ok() {
        ctx.metrics.set_status(
            &format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any()),
            None,
        );
    }
    ctx.observe(CONTROLLER, tcp.as_ref(), &result).await;
    result
}

/// Backoff for transient errors; permanent ones wait for a change.
pub fn error_policy(tcp: Arc<TenantControlPlane>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.error_action(CONTROLLER, tcp.as_ref(), err)
}

async fn reconcile_inner(tcp: &TenantControlPlane, ctx: &Context) -> Result<Action, Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let api = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace);
    if tcp.metadata.deletion_timestamp.is_some() {
        let key = format!("{namespace}/{}", tcp.name_any());
        ctx.record_provisioned(&key, None);
        ctx.caches.forget_control_plane(&key);
        if shared_apply::has_finalizer(tcp, TCP_FINALIZER) {
            provision::cleanup(tcp, ctx).await?;
            shared_apply::remove_finalizer(&api, tcp, TCP_FINALIZER).await?;
        }
        return Ok(Action::await_change());
    }
    shared_apply::add_finalizer(&api, tcp, TCP_FINALIZER).await?;

    let started = std::time::Instant::now();
    let (storage, record) = provision::datastore_phase(tcp, ctx).await;
    ctx.metrics.phase("datastore", started.elapsed().as_secs_f64());
    let storage: StorageOutcome = match storage {
        Ok(storage) => storage,
        Err(err) => {
            ctx.metrics.phase_failed("datastore", err.reason());
            if let Err(write) = status::record_failure(ctx, tcp, &err, record).await {
                tracing::warn!(object = %tcp.name_any(), "recording Ready=False failed: {write}");
            }
            return Err(err);
        }
    };
    apply::workload_phase(tcp, ctx, &storage, record).await?;
    Ok(Action::requeue(ctx.settings.resync))
}
