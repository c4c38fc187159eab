//! `tenantplane controller`: the DataStore controller and the TenantControlPlane controller.
//!
//! Each reconciler is a pipeline: [`fetch`] (I/O: objects, Secrets) → [`build`] (pure: drivers,
//! Secrets, conditions, status) → [`apply`] (I/O: server-side apply under [`FIELD_MANAGER`], finalizers,
//! datastore provisioning) → [`status`] (I/O: status subresource). Every failure becomes a condition,
//! a Warning Event on the object (reason = [`Error::reason`]) and a count in
//! `tenantplane_controller_reconcile_errors_total{controller,reason}`. Transient errors are retried
//! with exponential backoff; permanent ones wait for a change of the object or of what it watches.
//!
//! Only the holder of the leader Lease ([`leader`]) runs the controllers.

use tenantplane_core::secret;
use tenantplane_crd as k8s;
use tenantplane_datastore as datastore;
use tenantplane_pki as pki;

pub mod apply;
pub mod build;
pub mod cache;
pub mod datastores;
mod error;
pub mod fetch;
pub mod in_tenant;
pub mod leader;
pub mod metrics;
pub mod migration;
pub mod migration_journal;
pub mod migration_plan;
pub mod owners;
pub mod served;
pub mod settings;
pub mod state_records;
pub mod status;
pub mod tenant_control_plane;
pub mod used_by;

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use futures_util::StreamExt as _;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, ObjectReference, Secret, Service},
    networking::v1::NetworkPolicy,
};
use kube::{
    Api, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt as _,
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, ObjectRef},
        watcher,
    },
};

use crate::k8s::crd::{DataStore, TenantControlPlane};

pub use self::{
    error::{Error, Phase},
    settings::{ControllerSettings, DEFAULT_KINE_IMAGE, WorkloadSettings},
};
pub use crate::k8s::FIELD_MANAGER;
/// Finalizer on a DataStore while TenantControlPlanes use it (upstream's name).
pub const DATASTORE_FINALIZER: &str = "kamaji.clastix.io/TenantControlPlane";
/// Finalizer on a TenantControlPlane until its datastore spaces are removed (upstream's name).
pub const TCP_FINALIZER: &str = "finalizer.kamaji.clastix.io";
/// Trailing-edge debounce of TenantControlPlane reconciles: the burst of events one reconcile causes
/// (its finalizer, status writes, owned Secrets, Service and Deployment) becomes one follow-up
/// reconcile instead of several.
pub const TCP_DEBOUNCE: Duration = Duration::from_millis(500);
/// Least time between two `usedBy` writes of one DataStore: every TenantControlPlane change triggers
/// its reconcile, and a thousand tenants arriving must not mean a thousand rewrites of a growing list.
/// (A debounce would starve it instead: it keeps delaying while the tenants keep changing.)
pub const DATASTORE_STATUS_INTERVAL: Duration = Duration::from_secs(1);
/// Label on the Secrets the controller owns.
pub const MANAGED_BY_LABEL: (&str, &str) = (crate::k8s::LABEL_MANAGED_BY, crate::k8s::MANAGED_BY);

/// What every reconcile gets.
pub struct Context {
    /// The management cluster.
    pub client: kube::Client,
    /// Settings.
    pub settings: ControllerSettings,
    /// Metrics.
    pub metrics: Arc<metrics::Metrics>,
    recorder: Recorder,
    failures: std::sync::Mutex<HashMap<String, u32>>,
    /// The TenantControlPlane controller's cache, once it runs: the DataStore controller computes
    /// `usedBy` from it instead of listing every TenantControlPlane on each reconcile.
    tcp_store: std::sync::OnceLock<kube::runtime::reflector::Store<TenantControlPlane>>,
    /// When each DataStore (by name and generation) last passed its health check; cleared when a
    /// Secret it references changes.
    healthy: std::sync::Mutex<HashMap<String, (Option<i64>, std::time::Instant)>>,
    /// The last successful datastore provisioning of each TenantControlPlane (by `namespace/name`).
    provisioned: std::sync::Mutex<HashMap<String, Provisioned>>,
    /// When each DataStore's status was last written.
    status_written: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// Watch caches and what the controller last wrote.
    pub caches: cache::Caches,
    /// Which TenantControlPlanes use each DataStore (from the TenantControlPlane watch).
    pub used_by: used_by::UsedBy,
    /// Datastore names whose owner the datastore confirmed.
    pub owners: owners::Owners,
    /// The in-tenant phase's kept clients and what it applied.
    pub in_tenant: in_tenant::Tenants,
    /// The running migrations to other DataStores.
    pub migrations: migration::Migrations,
}

/// What a successful datastore provisioning left behind, to recognise a reconcile with nothing new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// [`tenant_control_plane::build::provision_fingerprint`] of its inputs.
    pub fingerprint: String,
    /// `resourceVersion` of the applied `<tcp>-datastore-config` Secret.
    pub config_version: Option<String>,
    /// `resourceVersion` of the applied `<tcp>-datastore-certificate` Secret, if any.
    pub certificate_version: Option<String>,
    /// When.
    pub at: std::time::Instant,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client`.
    pub fn new(client: kube::Client, settings: ControllerSettings, metrics: Arc<metrics::Metrics>) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "tenantplane".into(),
                instance: Some(settings.identity.clone()),
            },
        );
        Self {
            client,
            settings,
            metrics,
            recorder,
            failures: std::sync::Mutex::new(HashMap::new()),
            tcp_store: std::sync::OnceLock::new(),
            healthy: std::sync::Mutex::new(HashMap::new()),
            provisioned: std::sync::Mutex::new(HashMap::new()),
            status_written: std::sync::Mutex::new(HashMap::new()),
            caches: cache::Caches::default(),
            used_by: used_by::UsedBy::default(),
            owners: owners::Owners::default(),
            in_tenant: in_tenant::Tenants::default(),
            migrations: migration::Migrations::default(),
        }
    }

    /// How long DataStore `name` must still wait before its status may be written again (`None`: now).
    pub fn datastore_status_wait(&self, name: &str) -> Option<Duration> {
        let written = self.status_written.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = written.get(name)?.elapsed();
        DATASTORE_STATUS_INTERVAL
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())
    }

    /// Records a status write of DataStore `name`.
    pub fn datastore_status_written(&self, name: &str) {
        self.status_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), std::time::Instant::now());
    }

    /// Whether `key` was provisioned from `fingerprint` less than the resync interval ago and its
    /// Secrets are still the ones applied then (an edit or a deletion makes this false).
    pub fn provisioned_recently(
        &self,
        key: &str,
        fingerprint: &str,
        config_version: Option<&str>,
        certificate_version: Option<&str>,
    ) -> bool {
        self.provisioned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .is_some_and(|p| {
                p.fingerprint == fingerprint
                    && p.at.elapsed() < self.settings.resync
                    && config_version.is_some()
                    && p.config_version.as_deref() == config_version
                    && p.certificate_version.as_deref() == certificate_version
            })
    }

    /// Records a successful provisioning of `key` (or forgets it with `None`).
    pub fn record_provisioned(&self, key: &str, provisioned: Option<Provisioned>) {
        let mut map = self.provisioned.lock().unwrap_or_else(|e| e.into_inner());
        match provisioned {
            Some(p) => {
                map.insert(key.to_string(), p);
            }
            None => {
                map.remove(key);
            }
        }
    }

    /// Every TenantControlPlane in scope: from the controller's cache once it has synced, else listed.
    pub async fn control_planes_cached(&self) -> Result<Vec<Arc<TenantControlPlane>>, Error> {
        if let Some(store) = self.tcp_store.get()
            && tokio::time::timeout(Duration::from_secs(5), store.wait_until_ready())
                .await
                .is_ok_and(|r| r.is_ok())
        {
            return Ok(store.state());
        }
        Ok(fetch::control_planes(self)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    /// Whether DataStore `name` at `generation` passed its health check less than `within` ago.
    pub fn recently_healthy(&self, name: &str, generation: Option<i64>, within: Duration) -> bool {
        self.healthy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .is_some_and(|(g, at)| *g == generation && at.elapsed() < within)
    }

    /// Records the health check of DataStore `name`: passed (remembered) or not (forgotten).
    pub fn record_health(&self, name: &str, generation: Option<i64>, passed: bool) {
        let mut healthy = self.healthy.lock().unwrap_or_else(|e| e.into_inner());
        if passed {
            healthy.insert(name.to_string(), (generation, std::time::Instant::now()));
        } else {
            healthy.remove(name);
        }
    }

    /// TenantControlPlanes in scope.
    pub fn control_planes(&self) -> Api<TenantControlPlane> {
        match &self.settings.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// Records the outcome of a reconcile: metrics, a Warning Event on failure, the backoff counter.
    pub async fn observe<K>(&self, controller: &str, obj: &K, result: &Result<Action, Error>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.metrics.reconciled(controller);
        let key = format!(
            "{controller}/{}/{}",
            obj.namespace().unwrap_or_default(),
            obj.name_any()
        );
        {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(_) => {
                    failures.remove(&key);
                }
                Err(_) => *failures.entry(key).or_default() += 1,
            }
        }
        let Err(err) = result else {
            return;
        };
        self.metrics.failed(controller, err.reason());
        tracing::warn!(
            controller,
            object = %obj.name_any(),
            namespace = obj.namespace().unwrap_or_default(),
            reason = err.reason(),
            phase = err.phase().map(Phase::as_str),
            transient = err.is_transient(),
            "reconcile failed: {err}"
        );
        self.warn(obj, err.reason(), &err.to_string()).await;
    }

    /// Publishes a Warning Event on `obj` (errors are logged: an Event is best effort).
    pub async fn warn<K>(&self, obj: &K, reason: &str, message: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event(obj, EventType::Warning, reason, message, None).await;
    }

    /// Publishes a Normal Event on `obj` about `related` (best effort, like [`Context::warn`]). Events
    /// of one reason on one object are counted as a series that keeps its first note, so `related`
    /// tells the objects apart.
    pub async fn note<K>(&self, obj: &K, related: ObjectReference, reason: &str, message: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        self.event(obj, EventType::Normal, reason, message, Some(related))
            .await;
    }

    async fn event<K>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        message: &str,
        secondary: Option<ObjectReference>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let note: String = message.chars().take(1000).collect();
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary,
        };
        if let Err(err) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(object = %obj.name_any(), "publishing an Event failed: {err}");
        }
    }

    /// The requeue after a failure: exponential backoff (1 s doubling, at most 5 min) for transient
    /// errors, none for permanent ones (a change of the object or of a watched object re-triggers).
    pub fn error_action<K>(&self, controller: &str, obj: &K, err: &Error) -> Action
    where
        K: Resource<DynamicType = ()>,
    {
        if !err.is_transient() {
            return Action::await_change();
        }
        let key = format!(
            "{controller}/{}/{}",
            obj.namespace().unwrap_or_default(),
            obj.name_any()
        );
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
            .unwrap_or(1);
        Action::requeue(build::backoff(failures))
    }
}

fn watcher_config(selector: Option<&str>) -> watcher::Config {
    let config = watcher::Config::default();
    match selector {
        Some(selector) => config.labels(selector),
        None => config,
    }
}

/// What of a TenantControlPlane triggers its reconcile: everything but `status` (and the bookkeeping
/// `resourceVersion` and `managedFields`).
fn trigger_fingerprint(tcp: &TenantControlPlane) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let meta = &tcp.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.uid.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    // A migration's new stage moves the datastore phase (e.g. to the target at `Switching`).
    migration_plan::migration(tcp)
        .map(|m| (m.stage.as_str(), m.target.as_str()))
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// What of a DataStore its TenantControlPlanes depend on: generation, readiness and conditions (not
/// `usedBy`).
pub fn datastore_fingerprint(ds: &DataStore) -> String {
    let status = ds.status.as_ref();
    let conditions: Vec<String> = status
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={}/{}/{}", c.type_, c.status, c.reason, c.message))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{:?}|{:?}|{}|{}",
        ds.metadata.generation,
        ds.metadata.deletion_timestamp,
        status.is_some_and(|s| s.ready),
        conditions.join(";")
    )
}

/// A watch of `api` feeding a cache of its objects, without their managed fields (nothing reads them)
/// and trimmed by `trim`; its events come after the cache has applied them.
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    mut trim: impl FnMut(&mut K) + Send + 'static,
) -> (
    reflector::Store<K>,
    impl futures_util::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let events = watcher(api, config)
        .default_backoff()
        .modify(move |obj: &mut K| {
            obj.managed_fields_mut().clear();
            trim(obj);
        })
        .reflect(writer);
    (store, events)
}

/// Runs both controllers until `shutdown` resolves (no leader election: see [`run`]).
pub async fn run_controllers(ctx: Arc<Context>, shutdown: impl Future<Output = ()> + Send + 'static) {
    // Migration tasks live only as long as the controllers do (also when this future is dropped).
    let _migrations = migration::StopOnDrop(ctx.clone());
    let tcp_selector = ctx.settings.control_plane_selector.clone();
    let (shutdown_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let signal = |mut rx: tokio::sync::broadcast::Receiver<()>| async move {
        let _ = rx.recv().await;
    };

    // The TenantControlPlane controller is created first: its watch also keeps the DataStore
    // controller's `usedBy` index, which triggers a DataStore exactly when its users change. A TCP's
    // own changes trigger it, not status writes (the controller is the status's only writer: its own
    // writes would each cost one more, no-op, reconcile).
    let (users_changed, datastores_to_check) = tokio::sync::mpsc::unbounded_channel::<String>();
    let records = served_records(ctx.clone(), users_changed.clone());
    let (in_tenant_due, in_tenant_wakeups) = tokio::sync::mpsc::unbounded_channel();
    ctx.in_tenant.wake_through(in_tenant_due.clone());
    let (tcp_store, tcp_events) = cached_watch(
        ctx.control_planes(),
        watcher_config(tcp_selector.as_deref()),
        |_| {},
    );
    let tcp_changes = tcp_events
        .inspect({
            let ctx = ctx.clone();
            move |event| {
                if let Ok(event) = event {
                    ctx.caches.observe_control_plane(event);
                    for name in ctx.used_by.observe(event) {
                        let _ = users_changed.send(name);
                    }
                    for tcp in ctx.in_tenant.observe(event) {
                        let _ = in_tenant_due.send(tcp);
                    }
                    // Status writes too: a forged `status.migration` is refused as soon as it lands.
                    if let watcher::Event::Apply(tcp) | watcher::Event::InitApply(tcp) = event {
                        ctx.migrations.ensure(&ctx, tcp);
                    }
                }
            }
        })
        .touched_objects()
        .predicate_filter(trigger_fingerprint, Default::default());
    let control_planes = Controller::for_stream(tcp_changes, tcp_store.clone());
    let _ = ctx.tcp_store.set(tcp_store.clone());

    let datastores = datastore_controller(ctx.clone(), datastores_to_check, signal(shutdown_tx.subscribe()));
    let in_tenant = in_tenant_controller(
        ctx.clone(),
        tcp_store.clone(),
        in_tenant_wakeups,
        signal(shutdown_tx.subscribe()),
    );
    let control_planes =
        control_plane_controller(ctx, control_planes, tcp_store, signal(shutdown_tx.subscribe()));
    let stop = async move {
        shutdown.await;
        let _ = shutdown_tx.send(());
    };
    tokio::select! {
        _ = async { tokio::join!(datastores, control_planes, in_tenant, stop) } => {}
        () = records => {}
    }
}

/// Feeds the `usedBy` index from the watch of the served records in the state namespace
/// ([`served`]), sending each DataStore whose users changed to `users_changed`; runs until dropped.
async fn served_records(ctx: Arc<Context>, users_changed: tokio::sync::mpsc::UnboundedSender<String>) {
    let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.settings.state_namespace);
    let selector = format!("{}={}", served::RECORD_LABEL.0, served::RECORD_LABEL.1);
    watcher(api, watcher::Config::default().labels(&selector))
        .default_backoff()
        .for_each(|event| {
            match event {
                Ok(event) => {
                    for name in ctx.used_by.observe_record(&event) {
                        let _ = users_changed.send(name);
                    }
                }
                Err(err) => tracing::warn!("watching the served records failed: {err}"),
            }
            std::future::ready(())
        })
        .await;
}

/// The in-tenant phase over the TenantControlPlane cache, woken by `wakeups` (a changed
/// [`in_tenant::fingerprint`], a new namespace in a tenant) and by its own periodic check, until
/// `shutdown`; nothing when it is off.
fn in_tenant_controller(
    ctx: Arc<Context>,
    tcp_store: reflector::Store<TenantControlPlane>,
    wakeups: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<TenantControlPlane>>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send {
    let enabled = ctx.settings.in_tenant;
    let concurrency = ctx.settings.concurrency;
    async move {
        if !enabled {
            return;
        }
        let nothing = futures_util::stream::pending::<Result<TenantControlPlane, watcher::Error>>();
        Controller::for_stream(nothing, tcp_store)
            .reconcile_on(futures_util::stream::unfold(wakeups, |mut wakeups| async move {
                let tcp = wakeups.recv().await?;
                Some((tcp, wakeups))
            }))
            .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
            .graceful_shutdown_on(shutdown)
            .run(in_tenant::reconcile, in_tenant::error_policy, ctx)
            .for_each(|_| std::future::ready(()))
            .await;
    }
}

/// The DataStore controller, until `shutdown`.
fn datastore_controller(
    ctx: Arc<Context>,
    datastores_to_check: tokio::sync::mpsc::UnboundedReceiver<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send {
    let client = ctx.client.clone();
    let selector = ctx.settings.datastore_selector.clone();
    let concurrency = ctx.settings.concurrency;
    // DataStores: re-reconciled when a TenantControlPlane starts or stops using one, and when a Secret
    // one references changes (which also forgets its last health check).
    let datastores = Controller::new(
        Api::<DataStore>::all(client.clone()),
        watcher_config(selector.as_deref()),
    );
    let ds_store = datastores.store();
    ctx.caches.set_datastores(ds_store.clone());
    datastores
        .reconcile_on(futures_util::stream::unfold(
            datastores_to_check,
            |mut names| async move {
                let name = names.recv().await?;
                Some((ObjectRef::<DataStore>::new(&name), names))
            },
        ))
        // Only metadata, and not the Secrets this controller owns: a DataStore references its own.
        .watches_stream(
            watcher(
                Api::<PartialObjectMeta<Secret>>::all(client.clone()),
                watcher::Config::default().labels(&format!("{}!={}", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1)),
            )
            .default_backoff()
            .touched_objects(),
            {
                let ctx = ctx.clone();
                move |secret| {
                    let ns = secret.namespace().unwrap_or_default();
                    let name = secret.name_any();
                    let affected: Vec<_> = ds_store
                        .state()
                        .iter()
                        .filter(|ds| build::references_secret(ds, &ns, &name))
                        .map(|ds| ObjectRef::from_obj(&**ds))
                        .collect();
                    for ds in &affected {
                        ctx.record_health(&ds.name, None, false);
                        ctx.caches.forget_resolved(&ds.name);
                    }
                    affected
                }
            },
        )
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(datastores::reconcile, datastores::error_policy, ctx.clone())
        .for_each(|_| std::future::ready(()))
}

/// Objects of kind `K` in the watched namespace, else in all.
fn scoped<K>(ctx: &Context) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match &ctx.settings.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    }
}

/// The TenantControlPlane controller over `control_planes` (fed by the watch that also keeps
/// `usedBy`), until `shutdown`.
fn control_plane_controller(
    ctx: Arc<Context>,
    control_planes: Controller<TenantControlPlane>,
    tcp_store: reflector::Store<TenantControlPlane>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send {
    let client = ctx.client.clone();
    let selector = ctx.settings.datastore_selector.clone();
    let concurrency = ctx.settings.concurrency;
    // TenantControlPlanes: re-reconciled when a DataStore they use changes (e.g. becomes ready) and
    // when an object they own (Secret, Deployment, Service, ConfigMap, NetworkPolicy) changes.
    let managed = format!("{}={}", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1);
    let seen = Arc::new(std::sync::Mutex::new(HashMap::<String, String>::new()));
    // The owned objects' watches fill the caches the reconciles read. A Secret event first updates the
    // cache, then drops the controller's own pending write.
    let owned = || watcher::Config::default().labels(&managed);
    let (secret_store, secret_events) = cached_watch(scoped::<Secret>(&ctx), owned(), |_| {});
    ctx.caches.set_secrets(secret_store);
    let secrets = secret_events
        .inspect({
            let ctx = ctx.clone();
            move |event| {
                if let Ok(event) = event {
                    ctx.caches.observe_secret(event);
                }
            }
        })
        .touched_objects();
    // Reconciles read a Deployment's metadata, replicas, selector and status; the pod template is most
    // of its size, so the cache does not keep it.
    let (deployment_store, deployment_events) =
        cached_watch(scoped::<Deployment>(&ctx), owned(), |d: &mut Deployment| {
            if let Some(spec) = d.spec.as_mut() {
                spec.template = Default::default();
            }
        });
    ctx.caches.set_deployments(deployment_store);
    let deployments = deployment_events.touched_objects();
    let (service_store, service_events) = cached_watch(scoped::<Service>(&ctx), owned(), |_| {});
    ctx.caches.set_services(service_store);
    let services = service_events.touched_objects();
    // The authentication ConfigMaps: an edit or a deletion is repaired by the reconcile it triggers.
    let (config_map_store, config_map_events) = cached_watch(scoped::<ConfigMap>(&ctx), owned(), |_| {});
    ctx.caches.set_config_maps(config_map_store);
    let config_maps = config_map_events.touched_objects();
    // The egress NetworkPolicies: likewise repaired by the reconcile an edit or a deletion triggers.
    let (policy_store, policy_events) = cached_watch(scoped::<NetworkPolicy>(&ctx), owned(), |_| {});
    ctx.caches.set_network_policies(policy_store);
    let policies = policy_events.touched_objects();
    control_planes
        .owns_stream(secrets)
        .owns_stream(deployments)
        .owns_stream(services)
        .owns_stream(config_maps)
        .owns_stream(policies)
        .watches(
            Api::<DataStore>::all(client.clone()),
            watcher_config(selector.as_deref()),
            move |ds| {
                let name = ds.name_any();
                // Only a change TenantControlPlanes care about (spec, readiness, conditions) fans out to
                // them: `status.usedBy` grows with every new tenant, and re-triggering every tenant of a
                // shared DataStore on each of those updates is quadratic.
                let key = datastore_fingerprint(&ds);
                {
                    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    if seen.get(&name) == Some(&key) {
                        return Vec::new();
                    }
                    seen.insert(name.clone(), key);
                }
                tcp_store
                    .state()
                    .iter()
                    .filter(|tcp| build::referenced_datastores(tcp).contains(&name))
                    .map(|tcp| ObjectRef::from_obj(&**tcp))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(concurrency)
                .debounce(TCP_DEBOUNCE),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            tenant_control_plane::reconcile,
            tenant_control_plane::error_policy,
            ctx,
        )
        .for_each(|_| std::future::ready(()))
}

/// Runs the controllers: with `lease`, only while holding it (returns [`leader::LeaderError`] when the
/// Lease is lost); without, right away. Returns after `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    settings: ControllerSettings,
    lease: Option<leader::LeaseSettings>,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), leader::LeaderError> {
    let ctx = Arc::new(Context::new(client.clone(), settings, metrics));
    match lease {
        None => {
            run_controllers(ctx, shutdown).await;
            Ok(())
        }
        Some(lease) => {
            let elector = leader::LeaderElector::new(client, lease);
            tokio::select! {
                result = elector.run(run_controllers(ctx, std::future::pending())) => result,
                () = shutdown => {
                    // In-flight reconciles are dropped: every step is idempotent and is redone by the next leader.
                    if let Err(err) = elector.release().await {
                        tracing::warn!("releasing the lease failed: {err}");
                    }
                    Ok(())
                }
            }
        }
    }
}
