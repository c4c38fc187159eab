//! The in-tenant phase: what kubeadm's upload-config and bootstrap-token phases leave in a cluster, and
//! the CoreDNS and kube-proxy addons, kept in each tenant cluster through its admin kubeconfig so that
//! nodes can `kubeadm join` it and run. A pipeline
//! like the TenantControlPlane reconciler: [`fetch`] (the inputs, the tenant client, what the tenant
//! holds) → [`build`] (pure: the objects, the status and the `NodeJoinReady` condition) → [`apply`]
//! (server-side apply into the tenant of only what is missing or changed) → [`status`] (its own
//! status fields, under a field manager of its own).
//!
//! It runs while the tenant serves ([`serving`]) and forgets the tenant otherwise. Cost at scale: one
//! kept client per tenant, and with `spec.authentication` one metadata-only watch of the tenant's
//! namespaces ([`namespace_watch`]); a pass is woken by a change of what it depends on in the
//! TenantControlPlane ([`fingerprint`]), by a new namespace in the tenant, or by the periodic check
//! (which also restores what was deleted or edited), and a pass with nothing to restore is nine
//! metadata-only lists, three GETs and one list (and with `spec.authentication` a metadata-only list
//! of the namespaces and a `GET /metrics`, whose reload lines give `status.authentication`).

pub mod apply;
pub mod build;
pub mod fetch;
pub mod namespace_watch;
pub mod status;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::jiff::Timestamp;
use kube::{
    ResourceExt as _,
    runtime::{controller::Action, reflector::ObjectRef, watcher},
};
use tokio::sync::mpsc::UnboundedSender;

use self::{
    apply::{Applied, Restored},
    build::{Facts, ObjectKey, status::NODE_JOIN_READY},
    namespace_watch::NamespaceWatch,
};
use crate::{
    Context, Error,
    k8s::crd::{KubernetesVersionState, TenantControlPlane},
};

/// The phase's name in metrics and Events.
pub const CONTROLLER: &str = "in-tenant";
/// How soon a pass that found an unsigned token looks again (the bootstrapsigner takes a moment).
pub const UNSIGNED_RECHECK: Duration = Duration::from_secs(2);

/// What the phase keeps per tenant (`namespace/name`): its client, what it last applied there and its
/// namespace watch, and the last [`fingerprint`] seen of each TenantControlPlane.
#[derive(Default)]
pub struct Tenants {
    inner: std::sync::Mutex<Inner>,
    /// Where namespace watches send the TenantControlPlane to pass over (the phase's queue).
    wakeups: std::sync::OnceLock<UnboundedSender<ObjectRef<TenantControlPlane>>>,
}

#[derive(Default)]
struct Inner {
    kept: HashMap<String, Kept>,
    seen: HashMap<String, String>,
    /// The keys listed since the watch (re)started its list, while it lists.
    listing: Option<HashSet<String>>,
}

struct Kept {
    admin_version: String,
    client: kube::Client,
    applied: HashMap<ObjectKey, Applied>,
    /// The watch of the tenant's namespaces, while `spec.authentication` is set (stopped when dropped).
    namespace_watch: Option<NamespaceWatch>,
}

/// A serving tenant as a pass finds it: its client, what was last applied through it, and its
/// namespaces (only read with `spec.authentication`).
struct Tenant {
    client: kube::Client,
    applied: HashMap<ObjectKey, Applied>,
    namespaces: Vec<String>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants").field("kept", &self.len()).finish()
    }
}

impl Tenants {
    /// Forgets a tenant's client and what was applied (a later pass applies everything again).
    pub fn forget(&self, key: &str) {
        self.lock().kept.remove(key);
    }

    /// Sends the wakeups of the tenants' namespace watches to `wakeups`: without it none is started.
    pub fn wake_through(&self, wakeups: UnboundedSender<ObjectRef<TenantControlPlane>>) {
        let _ = self.wakeups.set(wakeups);
    }

    /// Whether kept tenant `key` should have a namespace watch started: wakeups go somewhere, and it
    /// has none.
    fn lacks_namespace_watch(&self, key: &str) -> bool {
        self.wakeups.get().is_some()
            && self
                .lock()
                .kept
                .get(key)
                .is_some_and(|kept| kept.namespace_watch.is_none())
    }

    /// Starts watching the namespaces of kept tenant `key` (TenantControlPlane `tcp`) with `client`,
    /// having read `known`.
    fn watch_namespaces(&self, key: &str, tcp: &TenantControlPlane, client: kube::Client, known: &[String]) {
        let Some(wake) = self.wakeups.get() else {
            return;
        };
        if let Some(kept) = self.lock().kept.get_mut(key) {
            let watch = namespace_watch::start(client, ObjectRef::from_obj(tcp), known, wake.clone());
            kept.namespace_watch = Some(watch);
        }
    }

    /// Stops the namespace watch of kept tenant `key`, if any.
    fn stop_watching_namespaces(&self, key: &str) {
        if let Some(kept) = self.lock().kept.get_mut(key) {
            kept.namespace_watch = None;
        }
    }

    /// How many tenants have a kept client.
    pub fn len(&self) -> usize {
        self.lock().kept.len()
    }

    /// Whether no tenant has a kept client.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Called with every event of the TenantControlPlane watch: the TenantControlPlanes whose
    /// [`fingerprint`] changed. A deleted one (also one gone from a relist) is forgotten.
    pub fn observe(&self, event: &watcher::Event<TenantControlPlane>) -> Vec<ObjectRef<TenantControlPlane>> {
        let mut inner = self.lock();
        let changed = |inner: &mut Inner, tcp: &TenantControlPlane| {
            let key = key(tcp);
            let print = fingerprint(tcp);
            (inner.seen.insert(key, print.clone()).as_ref() != Some(&print)).then(|| ObjectRef::from_obj(tcp))
        };
        match event {
            watcher::Event::Apply(tcp) => changed(&mut inner, tcp).into_iter().collect(),
            watcher::Event::InitApply(tcp) => {
                if let Some(listing) = inner.listing.as_mut() {
                    listing.insert(key(tcp));
                }
                changed(&mut inner, tcp).into_iter().collect()
            }
            watcher::Event::Delete(tcp) => {
                let key = key(tcp);
                inner.seen.remove(&key);
                inner.kept.remove(&key);
                Vec::new()
            }
            watcher::Event::Init => {
                inner.listing = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = inner.listing.take().unwrap_or_default();
                inner.seen.retain(|k, _| listed.contains(k));
                inner.kept.retain(|k, _| listed.contains(k));
                Vec::new()
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `namespace/name`.
fn key(tcp: &TenantControlPlane) -> String {
    format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any())
}

/// Whether the tenant serves: it reports Ready, WriteLimited or Upgrading with an installed version and
/// an endpoint, and is not being deleted.
pub fn serving(tcp: &TenantControlPlane) -> bool {
    let status = tcp.status.as_ref();
    let version = status
        .and_then(|s| s.kubernetes_resources.as_ref())
        .and_then(|k| k.version.as_ref());
    let state_serves = matches!(
        version.and_then(|v| v.status),
        Some(
            KubernetesVersionState::Ready
                | KubernetesVersionState::WriteLimited
                | KubernetesVersionState::Upgrading
        )
    );
    tcp.metadata.deletion_timestamp.is_none()
        && state_serves
        && version.and_then(|v| v.version.as_ref()).is_some()
        && status.and_then(|s| s.control_plane_endpoint.as_ref()).is_some()
}

/// What of a TenantControlPlane wakes the phase: its spec, whether it serves, its endpoint and
/// version, and the checksums of its CA and admin kubeconfig (not the phase's own status fields).
pub fn fingerprint(tcp: &TenantControlPlane) -> String {
    let status = tcp.status.as_ref();
    let checksum = |s: Option<&crate::k8s::crd::SecretStatus>| s.and_then(|s| s.checksum.clone());
    format!(
        "{:?}|{:?}|{}|{:?}|{:?}|{:?}|{:?}",
        tcp.metadata.uid,
        tcp.metadata.generation,
        serving(tcp),
        status.and_then(|s| s.control_plane_endpoint.clone()),
        status
            .and_then(|s| s.kubernetes_resources.as_ref())
            .and_then(|k| k.version.as_ref())
            .and_then(|v| v.version.clone()),
        checksum(
            status
                .and_then(|s| s.certificates.as_ref())
                .and_then(|c| c.ca.as_ref())
        ),
        checksum(
            status
                .and_then(|s| s.kubeconfig.as_ref())
                .and_then(|k| k.admin.as_ref())
        ),
    )
}

/// One pass over one tenant, and its outcome recorded (metrics, an Event on failure).
pub async fn reconcile(tcp: Arc<TenantControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = match tokio::time::timeout(ctx.settings.reconcile_timeout, pass(&tcp, &ctx)).await {
        Ok(result) => result,
        Err(_) => Err(Error::NotReady {
            reason: "ReconcileTimeout",
            message: format!(
                "the in-tenant pass did not finish within {:?}; it is retried",
                ctx.settings.reconcile_timeout
            ),
        }),
    };
    ctx.metrics.phase(CONTROLLER, started.elapsed().as_secs_f64());
    ctx.observe(CONTROLLER, tcp.as_ref(), &result).await;
    result
}

/// Backoff for transient errors; permanent ones wait for a change.
pub fn error_policy(tcp: Arc<TenantControlPlane>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.error_action(CONTROLLER, tcp.as_ref(), err)
}

async fn pass(tcp: &TenantControlPlane, ctx: &Context) -> Result<Action, Error> {
    let key = key(tcp);
    if !serving(tcp) {
        ctx.in_tenant.forget(&key);
        not_serving(ctx, tcp).await?;
        return Ok(Action::await_change());
    }
    let inputs = fetch::inputs(ctx, tcp).await?;
    let tenant = connect(ctx, tcp, &key, &inputs).await;
    let namespaces = tenant
        .as_ref()
        .map(|t| t.namespaces.as_slice())
        .unwrap_or_default();
    let desired = build::desired(&facts(tcp, ctx, &inputs.ca_cert, namespaces));
    let outcome = match tenant {
        Ok(tenant) => sync(ctx, &key, tenant, &desired).await,
        Err(err) => Err(err),
    };
    let report = build::status::report(
        tcp,
        &desired,
        outcome.as_ref().map(|(found, _)| found),
        Timestamp::now(),
    );
    status::write(ctx, tcp, &report).await?;
    let (found, restored) = outcome?;
    for (object, why) in restored {
        let (reason, how) = match why {
            Restored::Deleted => ("TenantObjectRecreated", "was deleted; created again"),
            Restored::Changed => (
                "TenantObjectReverted",
                "was changed; its applied fields are restored",
            ),
        };
        let message = format!("{object} in the tenant cluster {how}");
        ctx.note(tcp, object.reference(), reason, &message).await;
    }
    if let Some(failure) = &desired.kubelet_error {
        ctx.warn(tcp, "KubeletConfigPatchInvalid", &failure.to_string())
            .await;
    }
    Ok(Action::requeue(if found.unsigned().is_empty() {
        ctx.settings.in_tenant_resync
    } else {
        UNSIGNED_RECHECK
    }))
}

/// What the build reads, for `tcp` (only called while it serves) with the tenant's `namespaces`.
fn facts<'a>(
    tcp: &'a TenantControlPlane,
    ctx: &Context,
    ca_cert: &'a str,
    namespaces: &'a [String],
) -> Facts<'a> {
    let status = tcp.status.as_ref();
    Facts {
        tcp,
        endpoint: status
            .and_then(|s| s.control_plane_endpoint.as_deref())
            .unwrap_or_default(),
        ca_cert,
        version: status
            .and_then(|s| s.kubernetes_resources.as_ref())
            .and_then(|k| k.version.as_ref())
            .and_then(|v| v.version.as_deref())
            .unwrap_or_default(),
        key_algorithm: ctx.settings.workload.key_algorithm,
        namespaces,
    }
}

/// The tenant's kept client and what was applied through it; with `spec.authentication` also its
/// namespaces (the only build input read from the tenant), watched from now on for new ones.
async fn connect(
    ctx: &Context,
    tcp: &TenantControlPlane,
    key: &str,
    inputs: &fetch::Inputs,
) -> Result<Tenant, Error> {
    let (client, applied) = kept_client(ctx, key, inputs).await?;
    if tcp.spec.authentication.is_none() {
        ctx.in_tenant.stop_watching_namespaces(key);
        return Ok(Tenant {
            client,
            applied,
            namespaces: Vec::new(),
        });
    }
    let namespaces = fetch::namespaces(&client).await?;
    if ctx.in_tenant.lacks_namespace_watch(key) {
        let watch_client = fetch::watch_client(inputs).await?;
        ctx.in_tenant
            .watch_namespaces(key, tcp, watch_client, &namespaces);
    }
    Ok(Tenant {
        client,
        applied,
        namespaces,
    })
}

/// Checks the tenant and applies what it lacks; what it then holds, and what was restored.
async fn sync(
    ctx: &Context,
    key: &str,
    tenant: Tenant,
    desired: &build::Desired,
) -> Result<(build::status::Found, Vec<(ObjectKey, Restored)>), Error> {
    let Tenant {
        client, mut applied, ..
    } = tenant;
    let present = fetch::present(&client).await?;
    let objects: Vec<&build::TenantObject> = desired.objects().collect();
    let result = match apply::objects(&client, &objects, &present, &mut applied).await {
        Ok(outcome) => apply::prune(&client, desired, &present, &mut applied)
            .await
            .map(|()| outcome),
        Err(err) => Err(err),
    };
    if let Some(kept) = ctx.in_tenant.lock().kept.get_mut(key) {
        kept.applied = applied;
    }
    let outcome = result?;
    let agent = desired
        .konnectivity
        .iter()
        .flatten()
        .find(|o| o.key.name == build::konnectivity::AGENT)
        .map(|o| o.key.kind);
    let mut found = fetch::observed(&client, agent).await?;
    if desired.authentication.is_some() {
        found.authentication_metrics = fetch::authentication_metrics(&client).await;
    }
    Ok((found, outcome.restored))
}

/// The tenant's kept client (a new one when its admin kubeconfig changed), and what was applied.
async fn kept_client(
    ctx: &Context,
    key: &str,
    inputs: &fetch::Inputs,
) -> Result<(kube::Client, HashMap<ObjectKey, Applied>), Error> {
    if let Some(kept) = ctx.in_tenant.lock().kept.get(key)
        && kept.admin_version == inputs.admin_version
    {
        return Ok((kept.client.clone(), kept.applied.clone()));
    }
    let client = fetch::client(inputs).await?;
    ctx.in_tenant.lock().kept.insert(
        key.to_string(),
        Kept {
            admin_version: inputs.admin_version.clone(),
            client: client.clone(),
            applied: HashMap::new(),
            namespace_watch: None,
        },
    );
    Ok((client, HashMap::new()))
}

/// A tenant that stopped serving can take no node: `NodeJoinReady` says so (once).
async fn not_serving(ctx: &Context, tcp: &TenantControlPlane) -> Result<(), Error> {
    if tcp.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let mut report = build::status::current(tcp);
    let Some(condition) = report.conditions.iter_mut().find(|c| c.type_ == NODE_JOIN_READY) else {
        return Ok(());
    };
    if condition.status == "False" && condition.reason == "ControlPlaneNotServing" {
        return Ok(());
    }
    condition.status = "False".into();
    condition.reason = "ControlPlaneNotServing".into();
    condition.message = "the control plane does not serve (sleeping, not ready or being deleted)".into();
    condition.last_transition_time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    condition.observed_generation = tcp.metadata.generation;
    status::write(ctx, tcp, &report).await
}
