//! The sync worker: PostgreSQL intent → `TenantControlPlane`s through the transactional outbox, and status
//! back.
//!
//! Seven loops run side by side ([`Worker::run`]):
//! - **outbox**: claim due rows (`FOR UPDATE SKIP LOCKED`, oldest row per control plane), apply or delete,
//!   and record the result in the transaction that holds the claim. A crash rolls the claim back and the
//!   rows are applied again (server-side apply is idempotent); the committed audit row
//!   `control-plane.applied` per outbox row makes every counted apply visible.
//! - **status**: a watcher on our TCPs writes phase and status into `control_planes` and `NOTIFY`s
//!   `control_plane_status` in the same statement. It starts from a fresh list, so restarts lose nothing.
//!   Only the TCP the worker made counts: in the namespace from the template, with the row's name, and
//!   with the UID pinned in `control_planes.tcp_uid` (set from every apply's answer, or on first sight;
//!   cleared when that TCP is deleted). Any other TCP with the same labels is ignored and counted.
//! - **datastores**: a watcher on DataStores mirrors `status.ready` into `datastores.ready`, so
//!   placement skips DataStores the controller found unready.
//! - **operations**: an apply stamps `applied` on the operations it carries; every status event of a
//!   control plane's own TCP moves its open creates and updates through `datastoreReady`, `certificates`,
//!   `deployed` to `ready` ([`progress`]), succeeding them when it is Ready at their generation and failing
//!   them on a fresh `Stalled=True`; a delete succeeds when the TCP (and so its datastore space) is gone;
//!   every [`DEADLINE_SWEEP`] the operations past their deadline fail.
//! - **drains**: every [`PARENT_SWEEP`], the open drains and rebalances start their next children (each
//!   parent under its row lock, so replicas never exceed its concurrency) and end when all children have
//!   ([`tenantplane_service::drive`]).
//! - **retention**: every `retention.interval_seconds`, delete the idempotency keys, processed outbox rows
//!   and audit rows past their retention, in batches ([`store::retention`]).
//! - **resync**: every `resync_interval`, re-apply every live control plane (drift repair). Server-side apply
//!   under the field manager `tenantplane` with force takes back only fields in our object; fields other
//!   managers own and we never send are left alone.

use tenantplane_core::{domain, placement, translate};
use tenantplane_crd as k8s;

pub mod metrics;
pub mod migration;
pub mod progress;
pub mod status;

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures_util::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, ResourceExt as _,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams},
    runtime::{WatchStreamExt as _, watcher},
};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

pub use metrics::WorkerMetrics;

use crate::{
    k8s::crd::{DataStore, JwtAuthenticator, MigrationStatus, TenantControlPlane},
    translate::{FIELD_MANAGER, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY, Placement},
};
use tenantplane_store::{
    self as store, StoreError,
    control_planes::ControlPlaneRow,
    operations::{Advance, End},
    outbox::OutboxRow,
};

/// Worker settings (flags of `tenantplane worker` and `serve --with-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerSettings {
    /// Outbox rows claimed per transaction.
    #[arg(
        long = "worker-batch-size",
        env = "TENANTPLANE_WORKER_BATCH_SIZE",
        default_value_t = 25
    )]
    pub batch_size: i64,
    /// Attempts before a row and its operation are marked failed.
    #[arg(
        long = "worker-max-attempts",
        env = "TENANTPLANE_WORKER_MAX_ATTEMPTS",
        default_value_t = 8
    )]
    pub max_attempts: i32,
    /// Seconds between drift resyncs (re-apply of every live control plane).
    #[arg(
        long = "worker-resync-seconds",
        env = "TENANTPLANE_WORKER_RESYNC_SECONDS",
        default_value_t = 300.0
    )]
    pub resync_seconds: f64,
    /// Namespace of a tenant's TCPs; `{tenant}` is the tenant slug.
    #[arg(long = "namespace-template", env = "TENANTPLANE_NAMESPACE_TEMPLATE", default_value = translate::DEFAULT_NAMESPACE_TEMPLATE)]
    pub namespace_template: String,
    /// Milliseconds between outbox polls when idle.
    #[arg(
        long = "worker-poll-ms",
        env = "TENANTPLANE_WORKER_POLL_MS",
        default_value_t = 200
    )]
    pub poll_ms: u64,
    /// First retry delay in milliseconds; doubles per attempt (with jitter).
    #[arg(
        long = "worker-backoff-ms",
        env = "TENANTPLANE_WORKER_BACKOFF_MS",
        default_value_t = 1000
    )]
    pub backoff_ms: u64,
    /// Largest retry delay in milliseconds.
    #[arg(
        long = "worker-backoff-max-ms",
        env = "TENANTPLANE_WORKER_BACKOFF_MAX_MS",
        default_value_t = 300_000
    )]
    pub backoff_max_ms: u64,
    /// `networkProfile.address` of the TenantControlPlanes: `none`, or `loopback` (a stable 127.128.0.0/9
    /// address per control plane, published by the pod-less runner).
    #[arg(long = "tenant-address", env = "TENANTPLANE_TENANT_ADDRESS", value_enum, default_value_t = translate::TenantAddress::None)]
    pub tenant_address: translate::TenantAddress,
    /// Seconds a delete may wait for its TenantControlPlane to go (finalizers) before its operation fails
    /// with the TCP's `DataStoreReady`/`Ready` condition as the error.
    #[arg(
        long = "worker-delete-timeout-seconds",
        env = "TENANTPLANE_WORKER_DELETE_TIMEOUT_SECONDS",
        default_value_t = 600.0
    )]
    pub delete_timeout_seconds: f64,
    /// The controller's state namespace (its `--state-namespace`): a migration moves the control plane's
    /// placement only as the controller's migration journal there records it, never on
    /// `status.migration` alone (any TenantControlPlane status writer can write that).
    #[arg(long = "state-namespace", env = "TENANTPLANE_STATE_NAMESPACE", default_value = crate::k8s::DEFAULT_STATE_NAMESPACE)]
    pub state_namespace: String,
    /// Tenantplane's credential issuer, written as each TenantControlPlane's first JWT authenticator
    /// (from `--credential-issuer-url`; none: no `spec.authentication`).
    #[arg(skip)]
    pub issuer: Option<translate::ClusterIssuer>,
    #[command(flatten)]
    /// How long idempotency keys, processed outbox rows and audit rows are kept.
    pub retention: store::retention::Retention,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            batch_size: 25,
            max_attempts: 8,
            resync_seconds: 300.0,
            namespace_template: translate::DEFAULT_NAMESPACE_TEMPLATE.into(),
            poll_ms: 200,
            backoff_ms: 1000,
            backoff_max_ms: 300_000,
            tenant_address: translate::TenantAddress::None,
            delete_timeout_seconds: 600.0,
            state_namespace: crate::k8s::DEFAULT_STATE_NAMESPACE.into(),
            issuer: None,
            retention: Default::default(),
        }
    }
}

impl WorkerSettings {
    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.batch_size < 1 {
            return Err("the worker batch size must be at least 1".into());
        }
        if self.max_attempts < 1 {
            return Err("the worker max attempts must be at least 1".into());
        }
        if !(self.resync_seconds.is_finite() && self.resync_seconds > 0.0) {
            return Err("the worker resync interval must be positive".into());
        }
        if !(self.delete_timeout_seconds.is_finite() && self.delete_timeout_seconds > 0.0) {
            return Err("the worker delete timeout must be positive".into());
        }
        if !self.namespace_template.contains("{tenant}") {
            return Err("the namespace template must contain {tenant}".into());
        }
        self.retention.validate()
    }
}

/// The retry delay after `attempt` failures (1-based): `base · 2^(attempt-1)`, capped at `max`, scaled by a
/// jitter factor in `[0.5, 1.0]` (`unit` in `[0, 1)`).
pub fn backoff(attempt: i32, base: Duration, max: Duration, unit: f64) -> Duration {
    let exp = attempt.clamp(1, 31) - 1;
    let raw = base.as_secs_f64() * f64::from(1u32 << exp);
    let capped = raw.min(max.as_secs_f64());
    Duration::from_secs_f64(capped * (0.5 + unit.clamp(0.0, 1.0) / 2.0))
}

fn jitter_unit() -> f64 {
    (Uuid::new_v4().as_u128() % 10_000) as f64 / 10_000.0
}

/// How often operations past their deadline are failed.
const DEADLINE_SWEEP: Duration = Duration::from_secs(2);

/// How often open drains and rebalances start children and end.
const PARENT_SWEEP: Duration = Duration::from_secs(1);

/// How long a delete waits before it checks again whether the TCP is gone (finalizers run meanwhile).
const DELETE_RECHECK: Duration = Duration::from_secs(1);

/// Worker errors.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// PostgreSQL.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// PostgreSQL (transaction control).
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// The management cluster.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The controller's migration journal is unreadable.
    #[error("{0}")]
    Journal(String),
}

impl WorkerError {
    /// Whether PostgreSQL gave up on a statement (`lock_timeout`, `statement_timeout`): nothing changed,
    /// and the same write may be tried again.
    pub fn timed_out(&self) -> bool {
        match self {
            WorkerError::Store(StoreError::Db(err)) | WorkerError::Db(err) => store::timed_out(err),
            _ => false,
        }
    }
}

/// What happened to one outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    Deleted,
    Waiting,
    Skipped,
    Retrying,
    Failed,
}

/// One worker process's state. Several workers (processes or tasks) may share a database.
pub struct Worker {
    db: PgPool,
    kube: kube::Client,
    settings: WorkerSettings,
    metrics: WorkerMetrics,
    id: String,
    namespaces: Mutex<HashSet<String>>,
    /// UIDs of foreign TCPs already refused, with the reason.
    rejected: Mutex<HashMap<String, &'static str>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker on `db` and the management cluster `kube`.
    pub fn new(db: PgPool, kube: kube::Client, settings: WorkerSettings, metrics: WorkerMetrics) -> Self {
        let id = format!(
            "worker:{}-{}",
            std::process::id(),
            &Uuid::new_v4().simple().to_string()[..8]
        );
        Self {
            db,
            kube,
            settings,
            metrics,
            id,
            namespaces: Mutex::new(HashSet::new()),
            rejected: Mutex::new(HashMap::new()),
        }
    }

    /// The actor name written to audit rows.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs the outbox, status and resync loops until the future is dropped (dropping mid-batch rolls the
    /// claim back). Returns only if a loop ends with an error it cannot retry.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        tracing::info!(worker = %self.id, settings = ?self.settings, "sync worker started");
        let outbox = self.clone().outbox_loop();
        let status = self.clone().status_loop();
        let resync = self.clone().resync_loop();
        let datastores = self.clone().datastore_loop();
        let deadlines = self.clone().deadline_loop();
        let parents = self.clone().parent_loop();
        let retention = self.clone().retention_loop();
        tokio::select! {
            r = outbox => r,
            r = status => r,
            r = resync => r,
            r = datastores => r,
            r = deadlines => r,
            r = parents => r,
            r = retention => r,
        }
    }

    /// Purges the rows past their retention, every `retention.interval_seconds`.
    async fn retention_loop(self: Arc<Self>) -> anyhow::Result<()> {
        let every = Duration::from_secs(self.settings.retention.interval_seconds.max(1));
        loop {
            tokio::time::sleep(every).await;
            if let Err(err) = self.purge_once().await {
                tracing::warn!(%err, "the retention purge failed; retrying at the next interval");
            }
        }
    }

    /// Deletes the idempotency keys, processed outbox rows and audit rows past their retention, and
    /// counts them in `worker_retention_purged{table}`.
    pub async fn purge_once(&self) -> Result<store::retention::Purged, WorkerError> {
        let purged = store::retention::purge(&self.db, &self.settings.retention).await?;
        for (table, rows) in [
            ("idempotency_keys", purged.idempotency_keys),
            ("outbox", purged.outbox),
            ("audit_log", purged.audit_log),
        ] {
            self.metrics.purged(table, rows);
        }
        if purged != store::retention::Purged::default() {
            tracing::info!(?purged, "rows past their retention purged");
        }
        Ok(purged)
    }

    async fn outbox_loop(self: Arc<Self>) -> anyhow::Result<()> {
        let idle = Duration::from_millis(self.settings.poll_ms);
        loop {
            let claimed = match self.process_batch().await {
                Ok(n) => n,
                Err(err) => {
                    tracing::warn!(%err, "outbox pass failed; retrying");
                    0
                }
            };
            if let Ok(depth) = store::outbox::depth(&self.db).await {
                self.metrics.outbox_depth.set(depth);
            }
            if (claimed as i64) < self.settings.batch_size {
                tokio::time::sleep(idle).await;
            }
        }
    }

    /// Fails the operations past their deadline, every [`DEADLINE_SWEEP`].
    async fn deadline_loop(self: Arc<Self>) -> anyhow::Result<()> {
        loop {
            tokio::time::sleep(DEADLINE_SWEEP).await;
            match store::operations::expire(&self.db).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(expired = n, "operations failed at their deadline"),
                Err(err) => tracing::warn!(%err, "the deadline sweep failed"),
            }
        }
    }

    /// Drives the open drains and rebalances, every [`PARENT_SWEEP`].
    async fn parent_loop(self: Arc<Self>) -> anyhow::Result<()> {
        // Override re-placement reads only the size classes' byte estimates, which `serve` does not change.
        let placement = crate::placement::PlacementConfig::default();
        loop {
            tokio::time::sleep(PARENT_SWEEP).await;
            match tenantplane_service::drive::drive(&self.db, &placement).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(started = n, "drain and rebalance children started"),
                Err(err) => tracing::warn!(%err, "a drain or rebalance pass failed"),
            }
        }
    }

    async fn resync_loop(self: Arc<Self>) -> anyhow::Result<()> {
        let every = Duration::from_secs_f64(self.settings.resync_seconds);
        loop {
            tokio::time::sleep(every).await;
            match self.resync_once().await {
                Ok(n) => tracing::debug!(applied = n, "drift resync done"),
                Err(err) => tracing::warn!(%err, "drift resync failed"),
            }
        }
    }

    async fn status_loop(self: Arc<Self>) -> anyhow::Result<()> {
        let api: Api<TenantControlPlane> = Api::all(self.kube.clone());
        let config = watcher::Config::default().labels(translate::SELECTOR);
        let mut events = watcher(api, config).default_backoff().boxed();
        loop {
            match events.try_next().await {
                Ok(Some(watcher::Event::Apply(tcp) | watcher::Event::InitApply(tcp))) => {
                    if let Err(err) = self.retrying(|| self.write_status(&tcp)).await {
                        tracing::warn!(%err, tcp = %tcp.name_any(), "status write failed");
                    }
                }
                Ok(Some(watcher::Event::Delete(tcp))) => {
                    if let Err(err) = self.retrying(|| self.forget_tcp(&tcp)).await {
                        tracing::warn!(%err, tcp = %tcp.name_any(), "unpinning a deleted TCP failed");
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(err) => tracing::warn!(%err, "TenantControlPlane watch failed; backing off"),
            }
        }
    }

    /// Runs `write` again, with the outbox's backoff, while PostgreSQL gives up on it for a lock or a slow
    /// statement (at most `max_attempts` times): a watch event is not sent again, so its write must land.
    async fn retrying<T, F, Fut>(&self, write: F) -> Result<T, WorkerError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, WorkerError>>,
    {
        let mut attempt = 1;
        loop {
            match write().await {
                Err(err) if err.timed_out() && attempt < self.settings.max_attempts => {
                    let delay = backoff(
                        attempt,
                        Duration::from_millis(self.settings.backoff_ms),
                        Duration::from_millis(self.settings.backoff_max_ms),
                        jitter_unit(),
                    );
                    tracing::info!(%err, attempt, ?delay, "a write timed out in PostgreSQL; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Mirrors every DataStore's `status.ready` into `datastores.ready`, so placement skips unready ones. A
    /// DataStore without a status yet leaves its row alone; a deleted one marks its row not ready.
    async fn datastore_loop(self: Arc<Self>) -> anyhow::Result<()> {
        let api: Api<DataStore> = Api::all(self.kube.clone());
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        loop {
            let (name, ready) = match events.try_next().await {
                Ok(Some(watcher::Event::Apply(ds) | watcher::Event::InitApply(ds))) => match &ds.status {
                    Some(status) => (ds.name_any(), status.ready),
                    None => continue,
                },
                Ok(Some(watcher::Event::Delete(ds))) => (ds.name_any(), false),
                Ok(Some(_)) => continue,
                Ok(None) => return Ok(()),
                Err(err) => {
                    tracing::warn!(%err, "DataStore watch failed; backing off");
                    continue;
                }
            };
            match store::datastores::set_ready(&self.db, &name, ready).await {
                Ok(true) => tracing::info!(datastore = %name, ready, "DataStore readiness changed"),
                Ok(false) => {}
                Err(err) => tracing::warn!(%err, datastore = %name, "DataStore readiness write failed"),
            }
        }
    }

    /// Writes the status of one TCP back (no-op when unchanged or not ours). Only the TCP the worker made
    /// for the row its labels name counts: in the namespace from the template, with the row's name and
    /// the pinned UID; any other is ignored and counted in `worker_status_rejected{reason}`. Returns whether
    /// it changed.
    pub async fn write_status(&self, tcp: &TenantControlPlane) -> Result<bool, WorkerError> {
        let Some(seen) = status::observe(tcp) else {
            return Ok(false);
        };
        // A TCP refused for its namespace or name stays foreign (both are immutable): no SQL for it again.
        if let Some(reason) = self.known_foreign(&seen.uid) {
            self.metrics.reject(reason);
            return Ok(false);
        }
        let verdict = store::outbox::write_tcp_status(
            &self.db,
            &self.settings.namespace_template,
            &store::outbox::StatusWrite {
                tenant: seen.tenant_id,
                id: seen.control_plane_id,
                namespace: &seen.namespace,
                name: &seen.name,
                uid: &seen.uid,
                phase: &seen.phase,
                status: &seen.status,
            },
        )
        .await?;
        match verdict {
            store::outbox::StatusVerdict::Written => {
                self.metrics.status_updates.inc();
                self.advance_operations(tcp, &seen).await?;
                self.advance_migration(tcp, &seen).await?;
                Ok(true)
            }
            store::outbox::StatusVerdict::Unchanged => {
                self.advance_operations(tcp, &seen).await?;
                self.advance_migration(tcp, &seen).await?;
                Ok(false)
            }
            store::outbox::StatusVerdict::Rejected(reason) => {
                // Once per foreign TCP at warn: a hostile writer's every status patch must not flood the log.
                if self.first_rejection(&seen.uid, reason) {
                    tracing::warn!(
                        tcp.namespace = %seen.namespace, tcp.name = %seen.name, control_plane = %seen.control_plane_id,
                        reason, "ignoring the status of a TCP that is not the control plane's own"
                    );
                } else {
                    tracing::debug!(tcp.namespace = %seen.namespace, tcp.name = %seen.name, reason, "status ignored again");
                }
                self.metrics.reject(reason);
                Ok(false)
            }
        }
    }

    /// Moves the open creates and updates of the TCP's control plane along what its status shows (only
    /// for the control plane's own TCP: the caller has checked it).
    async fn advance_operations(
        &self,
        tcp: &TenantControlPlane,
        seen: &status::Observed,
    ) -> Result<(), WorkerError> {
        let Some(progress) = progress::progress(tcp) else {
            return Ok(());
        };
        let stages: Vec<&str> = progress.stages.iter().map(|s| s.as_str()).collect();
        let advance = Advance {
            generation: progress.generation,
            stages: &stages,
            done: progress.done,
            failed: progress.stalled.as_ref().map(|(r, m)| (r.as_str(), m.as_str())),
        };
        let changed =
            store::operations::advance(&self.db, seen.tenant_id, seen.control_plane_id, &advance).await?;
        if changed > 0 {
            tracing::debug!(control_plane = %seen.control_plane_id, changed, ?progress, "operations advanced");
        }
        Ok(())
    }

    /// Moves the open migration of the TCP's control plane along the controller's migration journal (a
    /// status change with a `status.migration` is the cue; the journal is what counts): stamps the stages
    /// reached (each also an audit entry), and at its end moves the placement to the target (`Done`) or
    /// releases the target's reservation (`Failed`, `Aborted`), ends the operation and renders again. A
    /// record about another move (an older migration) counts for nothing.
    async fn advance_migration(
        &self,
        tcp: &TenantControlPlane,
        seen: &status::Observed,
    ) -> Result<(), WorkerError> {
        if tcp.status.as_ref().and_then(|s| s.migration.as_ref()).is_none() {
            return Ok(());
        }
        let Some(recorded) = self.recorded_migration(&seen.uid).await? else {
            return Ok(());
        };
        let progress = migration::progress(&recorded);
        let mut tx = self.db.begin().await?;
        let Some(open) = store::migrations::open(&mut *tx, seen.control_plane_id).await? else {
            return Ok(());
        };
        if (open.source.as_str(), open.target.as_str())
            != (progress.source.as_str(), progress.target.as_str())
        {
            return Ok(());
        }
        let Some(reached) = store::migrations::lock_stages(&mut tx, open.operation_id).await? else {
            return Ok(());
        };
        let missing: Vec<&str> = progress
            .stages
            .iter()
            .map(|s| s.as_str())
            .filter(|s| !reached.iter().any(|r| r == s))
            .collect();
        store::migrations::stamp(&mut tx, open.operation_id, &missing).await?;
        let target = seen.control_plane_id.to_string();
        for stage in &missing {
            let details = serde_json::json!({"operation": open.operation_id, "stage": stage,
                                             "source": open.source, "target": open.target});
            store::audit(
                &mut *tx,
                Some(seen.tenant_id),
                &self.id,
                "control-plane.migration-stage",
                "control-plane",
                &target,
                None,
                details,
            )
            .await?;
        }
        let end = match &progress.ended {
            None => None,
            Some(migration::Ended::Done) => {
                store::migrations::complete(&mut tx, seen.control_plane_id).await?;
                Some(End::Succeeded("done"))
            }
            Some(migration::Ended::Failed(reason, message)) => {
                store::migrations::release(&mut tx, seen.control_plane_id).await?;
                Some(End::Failed(reason, message))
            }
        };
        if let Some(end) = end {
            store::operations::end(&mut tx, open.operation_id, end).await?;
            if let Some((cp, _)) =
                store::outbox::control_plane(&mut tx, seen.tenant_id, seen.control_plane_id).await?
            {
                let payload = serde_json::json!({"generation": cp.generation});
                store::control_planes::enqueue(
                    &mut tx,
                    cp.tenant_id,
                    cp.id,
                    open.operation_id,
                    "apply",
                    &payload,
                )
                .await?;
            }
            tracing::info!(control_plane = %seen.control_plane_id, ?end, "migration ended");
        }
        tx.commit().await?;
        Ok(())
    }

    /// The migration the controller's journal records for the TCP with UID `uid` (none without a journal).
    async fn recorded_migration(&self, uid: &str) -> Result<Option<MigrationStatus>, WorkerError> {
        let journals: Api<ConfigMap> = Api::namespaced(self.kube.clone(), &self.settings.state_namespace);
        let Some(journal) = journals
            .get_opt(&crate::k8s::migration_journal::name(uid))
            .await?
        else {
            return Ok(None);
        };
        let data = journal.data.unwrap_or_default();
        crate::k8s::migration_journal::record(&data, crate::k8s::migration_journal::CURRENT)
            .map_err(WorkerError::Journal)
    }

    /// Whether `uid` is refused for the first time; remembers it with the reason (at most 10,000 UIDs,
    /// then starts over).
    fn first_rejection(&self, uid: &str, reason: &'static str) -> bool {
        let Ok(mut seen) = self.rejected.lock() else {
            return true;
        };
        if seen.len() >= 10_000 {
            seen.clear();
        }
        seen.insert(uid.to_string(), reason).is_none()
    }

    /// The reason `uid` was refused, when it can never become the row's own (wrong namespace or name).
    fn known_foreign(&self, uid: &str) -> Option<&'static str> {
        let seen = self.rejected.lock().ok()?;
        seen.get(uid)
            .copied()
            .filter(|r| matches!(*r, "namespace" | "name"))
    }

    /// A deleted TCP: if it was the pinned one of the row its labels name, clear the pin so the TCP made
    /// next (by the worker's next apply) is accepted.
    pub async fn forget_tcp(&self, tcp: &TenantControlPlane) -> Result<bool, WorkerError> {
        let (Some((tenant, id)), Some(uid)) = (status::claimed_row(tcp), tcp.metadata.uid.as_deref()) else {
            return Ok(false);
        };
        Ok(store::outbox::unpin_tcp(&self.db, tenant, id, uid).await?)
    }

    /// One outbox pass: claims up to `batch_size` due rows and handles them in one transaction. Returns how
    /// many rows it claimed.
    pub async fn process_batch(&self) -> Result<usize, WorkerError> {
        let mut tx = self.db.begin().await?;
        let rows = store::outbox::claim(&mut tx, self.settings.batch_size).await?;
        let claimed = rows.len();
        for row in rows {
            let outcome = self.handle(&mut tx, &row).await?;
            tracing::debug!(outbox = row.id, kind = %row.kind, ?outcome, "outbox row handled");
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn handle(&self, tx: &mut PgConnection, row: &OutboxRow) -> Result<Outcome, WorkerError> {
        let found = match row.control_plane_id {
            Some(id) => store::outbox::control_plane(tx, row.tenant_id, id).await?,
            None => None,
        };
        let Some((cp, slug)) = found else {
            store::outbox::complete(tx, row.id).await?;
            return Ok(Outcome::Skipped);
        };
        match row.kind.as_str() {
            "apply" => self.handle_apply(tx, row, &cp, &slug).await,
            "delete" => self.handle_delete(tx, row, &cp, &slug).await,
            other => {
                let error = format!("unknown outbox kind {other:?}");
                self.finish(tx, row, Some(End::Failed("UnknownWork", &error)))
                    .await?;
                Ok(Outcome::Failed)
            }
        }
    }

    /// Closes outbox `row` (given up when `end` is a failure) and ends its operation with `end`, if any.
    async fn finish(
        &self,
        tx: &mut PgConnection,
        row: &OutboxRow,
        end: Option<End<'_>>,
    ) -> Result<(), WorkerError> {
        match end {
            Some(End::Failed(_, message)) => store::outbox::give_up(tx, row.id, message).await?,
            _ => store::outbox::complete(tx, row.id).await?,
        }
        if let (Some(op), Some(end)) = (row.operation_id, end) {
            store::operations::end(tx, op, end).await?;
        }
        Ok(())
    }

    async fn handle_apply(
        &self,
        tx: &mut PgConnection,
        row: &OutboxRow,
        cp: &ControlPlaneRow,
        slug: &str,
    ) -> Result<Outcome, WorkerError> {
        if cp.deleted_at.is_some() || matches!(cp.phase.as_str(), "Deleting" | "Deleted") {
            let message = "the control plane was deleted before this change was applied";
            self.finish(tx, row, Some(End::Failed("Superseded", message)))
                .await?;
            return Ok(Outcome::Skipped);
        }
        let generation = row.payload.get("generation").and_then(serde_json::Value::as_i64);
        if generation.is_some_and(|g| g < cp.generation) {
            // A newer row carries this change too; it applies the current spec, and the operation is done
            // when the control plane is Ready at that (later) generation.
            self.finish(tx, row, None).await?;
            return Ok(Outcome::Skipped);
        }
        let placement = self.placement(tx, cp).await?;
        let started = Instant::now();
        match self.apply(cp, &placement, slug).await {
            Ok(uid) => {
                self.metrics
                    .apply_latency
                    .observe(started.elapsed().as_secs_f64());
                if let Some(uid) = uid {
                    store::outbox::pin_tcp(tx, cp.tenant_id, cp.id, &uid).await?;
                }
                // Applied is a stage, not the end: the status of the TCP finishes the operations.
                self.finish(tx, row, None).await?;
                store::operations::reach(tx, cp.id, &["create", "update"], cp.generation, "applied").await?;
                store::audit(
                    &mut *tx,
                    Some(cp.tenant_id),
                    &self.id,
                    "control-plane.applied",
                    "control-plane",
                    &cp.id.to_string(),
                    None,
                    serde_json::json!({"outboxId": row.id, "generation": cp.generation}),
                )
                .await?;
                self.metrics.applies.inc();
                Ok(Outcome::Applied)
            }
            Err(err) => self.failed_attempt(tx, row, &err.to_string()).await,
        }
    }

    async fn failed_attempt(
        &self,
        tx: &mut PgConnection,
        row: &OutboxRow,
        error: &str,
    ) -> Result<Outcome, WorkerError> {
        self.metrics.failures.inc();
        let attempt = row.attempts + 1;
        if attempt >= self.settings.max_attempts {
            tracing::warn!(outbox = row.id, attempt, %error, "giving up");
            let error = format!("gave up after {attempt} attempts: {error}");
            self.finish(tx, row, Some(End::Failed("ApplyFailed", &error)))
                .await?;
            return Ok(Outcome::Failed);
        }
        let delay = backoff(
            attempt,
            Duration::from_millis(self.settings.backoff_ms),
            Duration::from_millis(self.settings.backoff_max_ms),
            jitter_unit(),
        );
        tracing::info!(outbox = row.id, attempt, %error, ?delay, "apply failed; retrying later");
        store::outbox::retry_later(tx, row.id, delay.as_secs_f64(), Some(error)).await?;
        if let Some(op) = row.operation_id {
            store::operations::running(tx, op).await?;
        }
        Ok(Outcome::Retrying)
    }

    async fn handle_delete(
        &self,
        tx: &mut PgConnection,
        row: &OutboxRow,
        cp: &ControlPlaneRow,
        slug: &str,
    ) -> Result<Outcome, WorkerError> {
        let namespace = translate::namespace(&self.settings.namespace_template, slug);
        let api: Api<TenantControlPlane> = Api::namespaced(self.kube.clone(), &namespace);
        let gone = match api.get_opt(&cp.name).await {
            Ok(None) => true,
            Ok(Some(tcp)) if tcp.metadata.deletion_timestamp.is_some() => {
                let since = tcp.metadata.deletion_timestamp.as_ref().map(|t| t.0.as_second());
                let waited = since.map_or(0, |t| chrono::Utc::now().timestamp() - t) as f64;
                if waited > self.settings.delete_timeout_seconds {
                    let error = format!(
                        "the TenantControlPlane was not deleted within {} s: {}",
                        self.settings.delete_timeout_seconds,
                        status::stuck_reason(&tcp)
                    );
                    tracing::warn!(control_plane = %cp.id, %error, "giving up on a delete");
                    self.finish(tx, row, Some(End::Failed("DeleteTimeout", &error)))
                        .await?;
                    return Ok(Outcome::Failed);
                }
                false
            }
            Ok(Some(_)) => match api.delete(&cp.name, &DeleteParams::background()).await {
                Ok(either) => either.is_right(),
                Err(kube::Error::Api(status)) if status.code == 404 => true,
                Err(err) => return self.failed_attempt(tx, row, &err.to_string()).await,
            },
            Err(err) => return self.failed_attempt(tx, row, &err.to_string()).await,
        };
        if !gone {
            // Finalizers run first; look again on a later pass without holding up this batch.
            store::outbox::retry_later(tx, row.id, DELETE_RECHECK.as_secs_f64(), None).await?;
            store::operations::reach(tx, cp.id, &["delete"], i64::MAX, "applied").await?;
            return Ok(Outcome::Waiting);
        }
        store::outbox::mark_deleted(tx, cp.tenant_id, cp.id).await?;
        // Gone means its finalizer has removed the tenant's datastore space.
        store::operations::reach(tx, cp.id, &["delete"], i64::MAX, "applied").await?;
        self.finish(tx, row, Some(End::Succeeded("deleted"))).await?;
        store::audit(
            &mut *tx,
            Some(cp.tenant_id),
            &self.id,
            "control-plane.deleted",
            "control-plane",
            &cp.id.to_string(),
            None,
            serde_json::json!({"outboxId": row.id}),
        )
        .await?;
        // A tenant deleted with cascade goes with its last control plane (and with it, its log).
        if store::tenants::remove_if_drained(tx, cp.tenant_id).await? {
            tracing::info!(tenant = %cp.tenant_id, "tenant removed with its last control plane");
        }
        Ok(Outcome::Deleted)
    }

    async fn placement(&self, tx: &mut PgConnection, cp: &ControlPlaneRow) -> Result<Placement, WorkerError> {
        Ok(match store::outbox::placement(tx, cp.id).await? {
            Some((primary, overrides)) => Placement {
                data_store: Some(primary),
                overrides,
            },
            None => Placement::fallback(cp),
        })
    }

    /// Ensures the namespace and server-side applies the TCP of `cp`; returns the applied object's UID.
    async fn apply(
        &self,
        cp: &ControlPlaneRow,
        placement: &Placement,
        slug: &str,
    ) -> Result<Option<String>, kube::Error> {
        let rendering = translate::Rendering {
            address: self.settings.tenant_address,
            issuer: self.settings.issuer.clone(),
        };
        let open = store::migrations::open(&self.db, cp.id)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        let placement = migration::rendered(placement.clone(), open.as_ref());
        let mut tcp = translate::translate_with(
            cp,
            &placement,
            slug,
            &self.settings.namespace_template,
            &rendering,
        );
        tcp.spec.data_store_migration = migration::policy(open.as_ref());
        let own: Vec<JwtAuthenticator> = store::authenticators::list(&self.db, cp.tenant_id, cp.id)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?
            .into_iter()
            .filter_map(|row| serde_json::from_value(row.spec).ok())
            .collect();
        translate::add_tenant_authenticators(&mut tcp.spec, own);
        let namespace = tcp.metadata.namespace.clone().unwrap_or_default();
        self.ensure_namespace(&namespace, cp.tenant_id).await?;
        let api: Api<TenantControlPlane> = Api::namespaced(self.kube.clone(), &namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(&cp.name, &params, &Patch::Apply(&tcp)).await {
            Ok(applied) => Ok(applied.metadata.uid),
            Err(err) => {
                // The namespace may have been deleted behind our back: ensure it again next time.
                self.forget_namespace(&namespace);
                Err(err)
            }
        }
    }

    fn forget_namespace(&self, namespace: &str) {
        if let Ok(mut known) = self.namespaces.lock() {
            known.remove(namespace);
        }
    }

    async fn ensure_namespace(&self, name: &str, tenant: Uuid) -> Result<(), kube::Error> {
        if self.namespaces.lock().map(|k| k.contains(name)).unwrap_or(false) {
            return Ok(());
        }
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(
                    [
                        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
                        (LABEL_TENANT.to_string(), tenant.to_string()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let api: Api<Namespace> = Api::all(self.kube.clone());
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&ns),
        )
        .await?;
        if let Ok(mut known) = self.namespaces.lock() {
            known.insert(name.to_string());
        }
        Ok(())
    }

    /// Re-applies every live control plane (drift repair); returns how many were applied. Each page is
    /// locked `FOR SHARE` while it is applied, so a concurrent delete waits and cannot be resurrected.
    pub async fn resync_once(&self) -> Result<usize, WorkerError> {
        let mut after = Uuid::nil();
        let mut applied = 0;
        let mut slugs: HashMap<Uuid, String> = HashMap::new();
        loop {
            let mut tx = self.db.begin().await?;
            let page = store::outbox::live_page(&mut tx, after, 100).await?;
            let Some((last, _)) = page.last() else { break };
            after = last.id;
            for (cp, slug) in &page {
                slugs.insert(cp.tenant_id, slug.clone());
                let placement = self.placement(&mut tx, cp).await?;
                match self.apply(cp, &placement, slug).await {
                    Ok(uid) => {
                        if let Some(uid) = uid {
                            store::outbox::pin_tcp(&mut tx, cp.tenant_id, cp.id, &uid).await?;
                        }
                        applied += 1;
                        self.metrics.resync_applies.inc();
                    }
                    Err(err) => {
                        self.metrics.failures.inc();
                        tracing::warn!(%err, control_plane = %cp.id, "resync apply failed");
                    }
                }
            }
            tx.commit().await?;
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_between_half_and_full() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(60);
        assert_eq!(backoff(1, base, max, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(4, base, max, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(4, base, max, 0.0), Duration::from_secs(4));
        assert_eq!(backoff(20, base, max, 1.0), Duration::from_secs(60));
        assert_eq!(backoff(i32::MAX, base, max, 0.0), Duration::from_secs(30));
    }

    #[test]
    fn settings_need_the_tenant_placeholder() {
        let bad = WorkerSettings {
            namespace_template: "fixed".into(),
            ..WorkerSettings::default()
        };
        assert!(bad.validate().is_err());
        assert!(WorkerSettings::default().validate().is_ok());
    }
}
