//! The migration manager: moves a serving TenantControlPlane to the DataStore its `spec.dataStore`
//! names, live, through `Copying → CatchingUp → Frozen → Switching → Verifying → Done`.
//!
//! One task per migrating TenantControlPlane ([`Migrations::ensure`], called after each reconcile)
//! reads the object, runs one stage ([`stages`]) and records it in `status.migration` with its own
//! field manager, with the `Migrating` condition and an Event per stage. Everything it needs to go on
//! is in that status, so a restarted controller resumes at the stage it stopped in. The datastore
//! phase serves from the source until the stage is `Switching` ([`plan::serving`]); then it writes the
//! target's datastore Secrets and the Deployment rolls, old pods serving reads until new ones are
//! ready.

mod carry;
pub mod guard;
pub use crate::migration_journal as journal;
pub mod movers;
pub use crate::migration_plan as plan;
pub mod stages;
mod write;

use std::{collections::HashMap, sync::Arc, time::Duration};

use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt as _};

use crate::{Context, Error, k8s::crd::TenantControlPlane};

pub use write::MIGRATION_MANAGER;

/// The running migration tasks, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Migrations {
    running: std::sync::Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Migrations {
    /// Starts the task of `tcp`'s migration unless it runs or there is nothing to do.
    pub fn ensure(&self, ctx: &Arc<Context>, tcp: &TenantControlPlane) {
        if tcp.metadata.deletion_timestamp.is_some() || plan::next(tcp) == plan::Next::Idle {
            return;
        }
        let Some(namespace) = tcp.namespace() else {
            return;
        };
        let key = format!("{namespace}/{}", tcp.name_any());
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.get(&key).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let task = tokio::spawn(drive(ctx.clone(), namespace, tcp.name_any()));
        running.insert(key, task);
    }

    /// Stops every task (the controllers stop; the next leader resumes from status).
    pub fn stop_all(&self) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for (_, task) in running.drain() {
            task.abort();
        }
    }

    /// Whether a task runs for `namespace/name`.
    pub fn is_running(&self, key: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.get(key).is_some_and(|t| !t.is_finished())
    }
}

/// Stops every migration task of a [`Context`] when dropped.
#[derive(Debug)]
pub struct StopOnDrop(pub Arc<Context>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.migrations.stop_all();
    }
}

/// Runs stages until the migration ends, the spec stops asking for one, or the object goes.
async fn drive(ctx: Arc<Context>, namespace: String, name: String) {
    let api = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace);
    loop {
        let tcp = match api.get_opt(&name).await {
            Ok(Some(tcp)) if tcp.metadata.deletion_timestamp.is_none() => tcp,
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(object = %name, "reading the TenantControlPlane failed: {err}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        // From here on `status.migration` is the controller's own record, not what others wrote.
        let tcp = match guard::trusted(&ctx, tcp).await {
            Ok(tcp) => tcp,
            Err(err) => {
                tracing::warn!(object = %name, "reading the migration journal failed: {err}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let outcome = match plan::next(&tcp) {
            plan::Next::Idle => return,
            plan::Next::Start { source, target } => match stages::start(&ctx, &tcp, &source, &target).await {
                // Refused (a forged source): nothing runs until the TenantControlPlane changes.
                Ok(false) => return,
                outcome => outcome.map(|_| ()),
            },
            plan::Next::Abort => stages::abort(&ctx, &tcp).await,
            plan::Next::Run(stage) => stages::run(&ctx, &tcp, stage).await,
        };
        if let Err(err) = outcome {
            failed(&ctx, &tcp, err).await;
        }
    }
}

/// Records a failed stage: retried with backoff, except a permanent failure before the switch, which
/// ends the migration (`Failed`, the tenant serving on the source, writable again).
async fn failed(ctx: &Context, tcp: &TenantControlPlane, err: Error) {
    let Some(m) = plan::active(tcp).cloned() else {
        tracing::warn!(object = %tcp.name_any(), "starting the migration failed: {err}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        return;
    };
    let message = err.to_string();
    if !err.is_transient() && !m.stage.switched() {
        if let Err(cleanup) = stages::unwind(ctx, tcp, &m).await {
            tracing::warn!(object = %tcp.name_any(), "unwinding the failed migration: {cleanup}");
        }
        let mut ended = plan::advance(&m, crate::k8s::crd::MigrationStage::Failed, Timestamp::now());
        ended.message = Some(message.clone());
        ctx.warn(
            tcp,
            "MigrationFailed",
            &format!("{} → {}: {message}", m.source, m.target),
        )
        .await;
        if let Err(write) = write::status(ctx, tcp, &ended).await {
            tracing::warn!(object = %tcp.name_any(), "recording the failed migration: {write}");
        }
        return;
    }
    let mut retry = m.clone();
    retry.retries = m.retries.saturating_add(1);
    retry.message = Some(format!("{} (attempt {}, retrying)", message, retry.retries));
    ctx.warn(
        tcp,
        "MigrationRetrying",
        &format!("{} → {} in {}: {message}", m.source, m.target, m.stage.as_str()),
    )
    .await;
    if let Err(write) = write::status(ctx, tcp, &retry).await {
        tracing::warn!(object = %tcp.name_any(), "recording the migration's retry: {write}");
    }
    tokio::time::sleep(crate::build::backoff(retry.retries.max(1) as u32).min(Duration::from_secs(30))).await;
}
