//! The TenantControlPlane controller, a pipeline: [`fetch`] (I/O: DataStores, Secrets) → [`build`]
//! (pure: Secrets, the Deployment, the Service, status and conditions) → [`apply`] (I/O: server-side
//! apply) → [`status`] (I/O: the status subresource, as `build` computed it). Two phases run it: the
//! **datastore phase** ([`provision`]: the tenant's space and user on its DataStores and the datastore
//! Secrets), then the **workload phase** ([`workload_phase`]: the Service, the PKI and kubeconfig
//! Secrets, the authentication ConfigMap, the egress NetworkPolicy, the Deployment). A failure carries
//! its [`Phase`], which names it in the `Ready` condition, the log and the `phase` metric.

pub mod apply;
pub mod build;
pub mod fetch;
pub mod provision;
pub mod status;

use std::{sync::Arc, time::Instant};

use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt as _, runtime::controller::Action};

use self::build::{Owned, Pki};
pub use self::build::{StorageOutcome, StorageRecord};
use super::{Context, Error, Phase, TCP_FINALIZER, apply as shared_apply, build::Conditions};
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
    ctx.migrations.ensure(&ctx, &tcp);
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
            ctx.metrics.phase_failed(Phase::Datastore.as_str(), err.reason());
            if let Err(write) = status::record_failure(ctx, tcp, &err, record).await {
                tracing::warn!(object = %tcp.name_any(), "recording Ready=False failed: {write}");
            }
            return Err(err);
        }
    };
    workload_phase(tcp, ctx, &storage, record).await?;
    Ok(Action::requeue(ctx.settings.resync))
}

/// The workload phase, then the status of both phases in one write, also on failure.
pub async fn workload_phase(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &StorageOutcome,
    record: StorageRecord,
) -> Result<(), Error> {
    let now = Timestamp::now();
    let previous = tcp
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut conditions = Conditions::new(&previous, tcp.metadata.generation, now);
    let mut owned = build::current(tcp);
    let result = workload(tcp, ctx, storage, &mut conditions, &mut owned, now).await;
    if let Err(err) = &result {
        let phase = err.phase().unwrap_or(Phase::Service);
        ctx.metrics.phase_failed(phase.as_str(), err.reason());
    }
    let owned = build::workload_status(
        tcp,
        &previous,
        conditions,
        owned,
        result.as_ref().copied(),
        record,
    );
    let started = Instant::now();
    let written = status::write(ctx, tcp, owned.clone())
        .await
        .map_err(|e| e.in_phase(Phase::Status));
    ctx.metrics.phase("status", started.elapsed().as_secs_f64());
    if let Some(state) = owned
        .kubernetes_resources
        .as_ref()
        .and_then(|k| k.version.as_ref())
        .and_then(|v| v.status)
    {
        ctx.metrics
            .set_status(&status::key(tcp), Some(&format!("{state:?}")));
    }
    result.and(written)
}

/// The Service, the PKI and kubeconfig Secrets, the authentication ConfigMap, the egress
/// NetworkPolicy, the Deployment; each step's error names its phase.
async fn workload(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &StorageOutcome,
    conditions: &mut Conditions<'_>,
    owned: &mut Owned,
    now: Timestamp,
) -> Result<(), Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))
        .map_err(|e| e.in_phase(Phase::Service))?;

    // Service first: its cluster IP goes into the apiserver certificate.
    let started = Instant::now();
    let service = apply::service(ctx, tcp, &namespace)
        .await
        .map_err(|e| e.in_phase(Phase::Service))?;
    ctx.metrics.phase("service", started.elapsed().as_secs_f64());
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .filter(|ip| ip != "None" && !ip.is_empty());
    owned.control_plane_endpoint = build::control_plane_endpoint(tcp, Some(&service));

    // Certificates and kubeconfigs.
    let started = Instant::now();
    let pki = apply::write_pki(tcp, ctx, &namespace, cluster_ip.as_deref(), now)
        .await
        .map_err(|e| e.in_phase(Phase::Certificates))?;
    ctx.metrics.phase("certificates", started.elapsed().as_secs_f64());
    build::pki_conditions(conditions, tcp, &pki);
    build::pki_status(owned, tcp, &pki, now);
    apply::prune_konnectivity(tcp, ctx, &namespace)
        .await
        .map_err(|e| e.in_phase(Phase::Certificates))?;

    // The authentication ConfigMap before the Deployment that mounts it; removed after the Deployment
    // that no longer does.
    authentication(tcp, ctx, &namespace, conditions)
        .await
        .map_err(|e| e.in_phase(Phase::Authentication))?;
    // The egress NetworkPolicy before the Deployment whose pods it restricts: no pod runs without it.
    egress(tcp, ctx, &namespace, conditions)
        .await
        .map_err(|e| e.in_phase(Phase::Egress))?;
    deployment(tcp, ctx, storage, &pki, conditions, owned, now)
        .await
        .map_err(|e| e.in_phase(Phase::Deployment))?;
    apply::prune_authentication(tcp, ctx, &namespace)
        .await
        .map_err(|e| e.in_phase(Phase::Authentication))
}

/// With `spec.authentication`: the ConfigMap `<tcp>-authentication-config` and
/// `AuthenticationConfigured` (a Warning Event when it newly turns False).
async fn authentication(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
    conditions: &mut Conditions<'_>,
) -> Result<(), Error> {
    let Some(built) = build::authentication_config(tcp)? else {
        return Ok(());
    };
    let started = Instant::now();
    apply::authentication_config(ctx, tcp, namespace, &built.config_map).await?;
    ctx.metrics
        .phase("authentication", started.elapsed().as_secs_f64());
    if let Some((reason, message)) = build::authentication_condition(conditions, tcp, &built) {
        ctx.warn(tcp, reason, &message).await;
    }
    Ok(())
}

/// The NetworkPolicy `<tcp>-egress` (what the control-plane pods may connect to) and
/// `EgressRestricted`.
async fn egress(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
    conditions: &mut Conditions<'_>,
) -> Result<(), Error> {
    let started = Instant::now();
    let inputs = fetch::egress_inputs(ctx, tcp).await?;
    let built = build::egress_policy(tcp, &inputs, &ctx.settings.workload)?;
    apply::network_policy(ctx, tcp, namespace, &built.policy).await?;
    ctx.metrics.phase("egress", started.elapsed().as_secs_f64());
    build::egress_condition(conditions, &built);
    Ok(())
}

/// The Deployment, then what its rollout says: the version's state, `DeploymentAvailable`, `Ready`.
async fn deployment(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &StorageOutcome,
    pki: &Pki,
    conditions: &mut Conditions<'_>,
    owned: &mut Owned,
    now: Timestamp,
) -> Result<(), Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let started = Instant::now();
    let previous_resources = owned.kubernetes_resources.clone().unwrap_or_default();
    let installed = previous_resources
        .version
        .as_ref()
        .and_then(|v| v.version.clone());
    let (running, refused) = build::version_to_run(&tcp.spec.kubernetes.version, installed.as_deref());
    build::version_condition(conditions, &running, refused.as_ref());
    if let Some((reason, message)) = &refused {
        ctx.warn(tcp, reason, message).await;
    }
    let view = build::storage_view(storage);
    let built = build::deployment(tcp, &view, pki, &running, &ctx.settings.workload)?;
    build::extra_args_condition(
        conditions,
        &built.apiserver_args,
        built.konnectivity_args.as_ref(),
        &built.oidc_dropped,
    );
    let applied = apply::deployment(ctx, tcp, &namespace, &built.deployment).await?;
    ctx.metrics.phase("deployment", started.elapsed().as_secs_f64());

    // Status from the applied Deployment.
    let (state, available) = build::version_state(&applied, &running, installed.as_deref());
    owned.kubernetes_resources = Some(build::kubernetes_resources(
        &previous_resources,
        &applied,
        &running,
        state,
        now,
    ));
    let replicas = build::replicas(tcp);
    if available {
        let endpoint = owned.control_plane_endpoint.clone().unwrap_or_default();
        let ca = pki
            .get(&build::ca_secret_name(tcp))
            .and_then(|s| s.data.as_ref()?.get("ca.crt").cloned())
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        let readyz = fetch::readyz(&endpoint, &ca).await;
        build::available_conditions(conditions, &applied, replicas, &running, &endpoint, readyz);
    } else {
        build::rollout_conditions(conditions, &applied, replicas, state);
    }
    Ok(())
}
