//! One stage of a migration (I/O): each reads what it needs, moves data with the [`movers`] mover,
//! and records the next stage (or its progress) in `status.migration`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::ObjectReference},
    jiff::Timestamp,
};
use kube::{Api, ResourceExt as _};

use super::{
    carry, guard,
    movers::{self, AnyMover},
    plan, write,
};
use crate::{
    Context, Error,
    datastore::{
        AnyDriver, Driver as _, TenantSpace,
        migrate::{Checkpoint, Step},
    },
    fetch,
    k8s::crd::{MigrationStage, MigrationStatus, TenantControlPlane},
    tenant_control_plane::build::{self, STORAGE_CONFIG_ANNOTATION},
};

/// How often a long stage records its progress (and looks for an abort).
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Longest wait, in one attempt, for the Deployment to run on the target.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(600);

/// Catch-up steps after which the freeze starts even if the lag stays above [`plan::FREEZE_LAG`]
/// (a source written faster than it can be copied would otherwise never freeze).
const MAX_CATCH_UP_STEPS: u32 = 120;

/// Records a new migration from `source` to `target` (stage `Copying`); `false` when refused.
pub async fn start(
    ctx: &Context,
    tcp: &TenantControlPlane,
    source: &str,
    target: &str,
) -> Result<bool, Error> {
    // The source is what `status.storage.dataStoreName` names: a migration starts from it only if the
    // controller's record says the tenant is served there (no record yet: as before it existed).
    // Otherwise its failure would unwind by removing the target: the space the tenant really uses.
    if let Some(served) = crate::served::read(ctx, tcp).await?
        && !served.data_stores().contains(source)
    {
        let message = format!(
            "status.storage.dataStoreName names DataStore {source}, where the controller provisioned nothing for this TenantControlPlane: no migration to {target} starts from it"
        );
        ctx.warn(tcp, "MigrationSourceNotServed", &message).await;
        return Ok(false);
    }
    let mut m = plan::start(tcp, source, target, Timestamp::now());
    // A refused carry is recorded as none; `Copying` then fails the migration with the reason.
    m.carried_overrides = carry::recorded_carries(carry::planned(tcp, &m).unwrap_or_default());
    write::status(ctx, tcp, &m).await?;
    announce(ctx, tcp, &m).await;
    Ok(true)
}

/// Runs `stage` to its end and records the next one.
pub async fn run(ctx: &Context, tcp: &TenantControlPlane, stage: MigrationStage) -> Result<(), Error> {
    let Some(m) = plan::active(tcp).cloned() else {
        return Ok(());
    };
    let next = match stage {
        MigrationStage::Copying => copying(ctx, tcp, &m).await?,
        MigrationStage::CatchingUp => catching_up(ctx, tcp, &m).await?,
        MigrationStage::Frozen => frozen(ctx, tcp, &m).await?,
        MigrationStage::Switching => switching(ctx, tcp, &m).await?,
        MigrationStage::Verifying => verifying(ctx, tcp, &m).await?,
        MigrationStage::Done | MigrationStage::Aborted | MigrationStage::Failed => return Ok(()),
    };
    let Some(next) = next else {
        // Interrupted to look at the spec again (an abort), nothing to record.
        return Ok(());
    };
    write::status(ctx, tcp, &next).await?;
    announce(ctx, tcp, &next).await;
    Ok(())
}

/// Stops the migration before its switch: the source is writable again, the target space is removed.
pub async fn abort(ctx: &Context, tcp: &TenantControlPlane) -> Result<(), Error> {
    let Some(m) = plan::active(tcp).cloned() else {
        return Ok(());
    };
    unwind(ctx, tcp, &m).await?;
    let mut ended = plan::advance(&m, MigrationStage::Aborted, Timestamp::now());
    if let Some(frozen) = &m.frozen_at {
        ended.freeze_millis = Some(plan::millis_since(frozen, Timestamp::now()));
    }
    ended.message = Some(format!(
        "spec.dataStore no longer names {}: aborted before the switch; the tenant serves from {}",
        m.target, m.source
    ));
    write::status(ctx, tcp, &ended).await?;
    announce(ctx, tcp, &ended).await;
    Ok(())
}

/// Undoes a migration that has not switched: lifts the freeze, removes the target space (only what
/// is marked with this TenantControlPlane's UID).
pub async fn unwind(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    let (source, target) = drivers(ctx, m).await?;
    guard::distinct(m, &source, &target).await?;
    let (source_space, target_space) = spaces(ctx, tcp, m).await?;
    if m.frozen_at.is_some() || m.stage == MigrationStage::Frozen {
        // Thawing grants the source's user its space back: only where both are this tenant's own.
        guard::owned(&source, &source_space, "source").await?;
        movers::mover(&source, &target, &source_space, &target_space)?
            .thaw()
            .await?;
        carry::uncarry(ctx, tcp, m).await?;
    }
    // Removes only what the target's markers attribute to this TenantControlPlane.
    target.deprovision(&target_space).await?;
    crate::served::deprovisioned(ctx, tcp, &m.target, &target_space).await?;
    Ok(())
}

/// Copying: provisions the target space and copies the source's, as of one revision, page by page.
async fn copying(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<Option<MigrationStatus>, Error> {
    carry::planned(tcp, m)?;
    let (source, target) = drivers(ctx, m).await?;
    guard::distinct(m, &source, &target).await?;
    let (source_space, target_space) = spaces(ctx, tcp, m).await?;
    guard::owned(&source, &source_space, "source").await?;
    let mover = movers::mover(&source, &target, &source_space, &target_space)?;
    // Provisioning claims the target's names, refusing another tenant's.
    target.provision(&target_space).await?;
    crate::served::provisioned(ctx, tcp, &m.target, &target_space).await?;
    let mut checkpoint = checkpoint(m);
    let mut reported = Instant::now();
    while mover.copy_step(&mut checkpoint).await? == Step::More {
        if reported.elapsed() >= PROGRESS_INTERVAL {
            if !progress(ctx, tcp, m, &checkpoint, None).await? {
                return Ok(None);
            }
            reported = Instant::now();
        }
    }
    Ok(Some(with_checkpoint(
        plan::advance(m, MigrationStage::CatchingUp, Timestamp::now()),
        &checkpoint,
    )))
}

/// CatchingUp: applies the source's changes until the lag is small, then records the freeze time.
async fn catching_up(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<Option<MigrationStatus>, Error> {
    let mover = mover_of(ctx, tcp, m).await?;
    let mut checkpoint = checkpoint(m);
    let mut lag = u64::MAX;
    for _ in 0..MAX_CATCH_UP_STEPS {
        lag = mover.catch_up_step(&mut checkpoint).await?;
        if lag <= plan::FREEZE_LAG {
            break;
        }
        if !progress(ctx, tcp, m, &checkpoint, Some(lag)).await? {
            return Ok(None);
        }
    }
    let now = Timestamp::now();
    let mut next = with_checkpoint(plan::advance(m, MigrationStage::Frozen, now), &checkpoint);
    next.lag = Some(lag.min(i64::MAX as u64) as i64);
    // Recorded before the freeze itself, so that an abort after a crash knows to lift it.
    next.frozen_at = Some(now.to_string());
    Ok(Some(next))
}

/// Frozen: the source is read-only for the tenant; the rest is applied, and both spaces must be
/// equal key by key before the switch (after it, the tenant writes to the target).
async fn frozen(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<Option<MigrationStatus>, Error> {
    let mover = mover_of(ctx, tcp, m).await?;
    let started = Instant::now();
    mover.freeze().await?;
    mover.seal().await?;
    let frozen_in = started.elapsed();
    let mut checkpoint = checkpoint(m);
    while mover.finish_step(&mut checkpoint).await? == Step::More {}
    let finished_in = started.elapsed();
    let verification = mover.verify().await?;
    tracing::info!(
        object = %tcp.name_any(),
        freeze.ms = frozen_in.as_millis() as u64,
        finish.ms = (finished_in - frozen_in).as_millis() as u64,
        verify.ms = (started.elapsed() - finished_in).as_millis() as u64,
        verify.keys = verification.keys,
        "the source is frozen and the target holds its final state"
    );
    if !verification.equal() {
        return Err(Error::NotReady {
            reason: "MigrationVerificationFailed",
            message: format!(
                "{} of {} keys differ after the final catch-up (e.g. {}); catching up again",
                verification.mismatch_count,
                verification.keys,
                verification.mismatches.join(", ")
            ),
        });
    }
    carry::carry(ctx, tcp, m).await?;
    let mut next = with_checkpoint(
        plan::advance(m, MigrationStage::Switching, Timestamp::now()),
        &checkpoint,
    );
    next.lag = Some(0);
    next.message = None;
    Ok(Some(next))
}

/// Switching: the datastore phase now writes the target's Secrets; waits until the Deployment runs
/// on them only (old pods serve reads until then), which ends the write freeze.
async fn switching(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<Option<MigrationStatus>, Error> {
    checked(ctx, tcp, m).await?;
    wait_for_rollout(ctx, tcp, m, ROLLOUT_TIMEOUT).await?;
    let now = Timestamp::now();
    let mut next = plan::advance(m, MigrationStage::Verifying, now);
    next.freeze_millis = m.frozen_at.as_deref().map(|f| plan::millis_since(f, now));
    Ok(Some(next))
}

/// Verifying: the tenant serves from the target (its Deployment runs the target's Secrets and is
/// available); then the source space is removed, only what is marked with this UID.
async fn verifying(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<Option<MigrationStatus>, Error> {
    wait_for_rollout(ctx, tcp, m, Duration::from_secs(60)).await?;
    let (source, _, source_space, _) = checked(ctx, tcp, m).await?;
    let outcome = source.deprovision(&source_space).await?;
    crate::served::deprovisioned(ctx, tcp, &m.source, &source_space).await?;
    if !outcome.left_alone.is_empty() {
        ctx.warn(tcp, "DataStoreNamesLeftAlone", &outcome.left_alone.join("; "))
            .await;
    }
    Ok(Some(plan::advance(m, MigrationStage::Done, Timestamp::now())))
}

/// Waits until `status.storage` records the target and the Deployment runs its config only, all
/// replicas updated and available; a timeout is transient (retried).
async fn wait_for_rollout(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
    timeout: Duration,
) -> Result<(), Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let tcps = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace);
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), &namespace);
    let deadline = Instant::now() + timeout;
    let mut why = String::from("not looked at yet");
    while Instant::now() < deadline {
        let current = tcps.get_opt(&tcp.name_any()).await?;
        let deployment = deployments.get_opt(&tcp.name_any()).await?;
        match current
            .as_ref()
            .map(|t| rolled_out(t, deployment.as_ref(), &m.target))
        {
            Some(Ok(())) => return Ok(()),
            Some(Err(reason)) => why = reason,
            None => why = "the TenantControlPlane is gone".into(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::NotReady {
        reason: "MigrationRolloutPending",
        message: format!(
            "the control plane does not run on DataStore {} yet: {why}",
            m.target
        ),
    })
}

/// Whether `tcp` serves from `target` only: `Ok`, or what is still missing (pure).
pub fn rolled_out(
    tcp: &TenantControlPlane,
    deployment: Option<&Deployment>,
    target: &str,
) -> Result<(), String> {
    let storage = tcp.status.as_ref().and_then(|s| s.storage.as_ref());
    if storage.and_then(|s| s.data_store_name.as_deref()) != Some(target) {
        return Err("status.storage does not record the target yet".into());
    }
    let checksum = storage
        .and_then(|s| s.config.as_ref())
        .and_then(|c| c.checksum.as_deref())
        .ok_or("the target's datastore-config is not written yet")?;
    let deployment = deployment.ok_or("the Deployment does not exist")?;
    let template = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(STORAGE_CONFIG_ANNOTATION));
    if template.map(String::as_str) != Some(checksum) {
        return Err("the Deployment's pod template has not moved to the target's config".into());
    }
    let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let observed = status.observed_generation >= deployment.metadata.generation;
    let all = |n: Option<i32>| n.unwrap_or(0) == wanted;
    if !(observed
        && all(status.updated_replicas)
        && all(status.available_replicas)
        && status.replicas.unwrap_or(0) == wanted)
    {
        return Err(format!(
            "{} of {wanted} replicas updated, {} available, {} in all",
            status.updated_replicas.unwrap_or(0),
            status.available_replicas.unwrap_or(0),
            status.replicas.unwrap_or(0)
        ));
    }
    Ok(())
}

/// Records progress; `false` when the spec no longer asks for this migration (stop and re-read).
async fn progress(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
    checkpoint: &Checkpoint,
    lag: Option<u64>,
) -> Result<bool, Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let api = Api::<TenantControlPlane>::namespaced(ctx.client.clone(), &namespace);
    let Some(current) = api.get_opt(&tcp.name_any()).await? else {
        return Ok(false);
    };
    if plan::next(&current) != plan::Next::Run(m.stage) || current.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let mut now = with_checkpoint(m.clone(), checkpoint);
    now.lag = lag.map(|l| l.min(i64::MAX as u64) as i64).or(m.lag);
    write::status(ctx, &current, &now).await?;
    Ok(true)
}

/// The source's and the target's drivers (the target must be ready; the source is used as it is).
async fn drivers(ctx: &Context, m: &MigrationStatus) -> Result<(Arc<AnyDriver>, Arc<AnyDriver>), Error> {
    let Some(source) = fetch::datastore(ctx, &m.source).await? else {
        return Err(Error::Invalid {
            reason: "DataStoreNotFound",
            message: format!("the source DataStore {} is gone", m.source),
        });
    };
    let (_, source) = fetch::driver(ctx, &source).await?;
    let (_, target) = crate::tenant_control_plane::fetch::ready_datastore(ctx, &m.target).await?;
    Ok((source, target))
}

/// The tenant's space on the source (as recorded when the migration started) and on the target (the
/// same names, the kept SQL password).
async fn spaces(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<(TenantSpace, TenantSpace), Error> {
    let owner = build::datastore_owner(tcp)?;
    let (schema, user) = build::tenant_names(tcp)?;
    let source = TenantSpace::new(
        m.source_schema.clone().unwrap_or_else(|| schema.clone()),
        m.source_user.clone().unwrap_or_else(|| user.clone()),
        owner.clone(),
    )?;
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let config = fetch::owned_secret(ctx, &namespace, &build::config_secret_name(tcp)).await?;
    let mut target = TenantSpace::new(schema, user.clone(), owner)?;
    if let Some(password) = build::reusable_password(config.as_ref(), &user) {
        target = target.with_password(password);
    }
    Ok((source, target))
}

/// The mover of `m`, once both spaces are checked.
async fn mover_of(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<AnyMover, Error> {
    let (source, target, source_space, target_space) = checked(ctx, tcp, m).await?;
    movers::mover(&source, &target, &source_space, &target_space)
}

/// Both drivers and spaces of a migration past `Copying`, refused unless the source and the target
/// are distinct and both spaces carry this TenantControlPlane's ownership markers.
async fn checked(
    ctx: &Context,
    tcp: &TenantControlPlane,
    m: &MigrationStatus,
) -> Result<(Arc<AnyDriver>, Arc<AnyDriver>, TenantSpace, TenantSpace), Error> {
    let (source, target) = drivers(ctx, m).await?;
    guard::distinct(m, &source, &target).await?;
    let (source_space, target_space) = spaces(ctx, tcp, m).await?;
    guard::owned(&source, &source_space, "source").await?;
    guard::owned(&target, &target_space, "target").await?;
    Ok((source, target, source_space, target_space))
}

/// The checkpoint recorded in `m`.
fn checkpoint(m: &MigrationStatus) -> Checkpoint {
    Checkpoint {
        snapshot_revision: m.snapshot_revision,
        cursor: m.cursor.clone(),
        applied_through: m.applied_through,
        copied: u64::try_from(m.copied).unwrap_or(0),
    }
}

/// `m` with `checkpoint` recorded.
fn with_checkpoint(mut m: MigrationStatus, checkpoint: &Checkpoint) -> MigrationStatus {
    m.snapshot_revision = checkpoint.snapshot_revision;
    m.cursor = checkpoint.cursor.clone();
    m.applied_through = checkpoint.applied_through;
    m.copied = i64::try_from(checkpoint.copied).unwrap_or(i64::MAX);
    m
}

/// The Event of a new stage: Normal, about the target DataStore (Warning for Failed).
async fn announce(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) {
    let (_, reason, message) = plan::condition(m);
    let reason = format!("Migration{reason}");
    if m.stage == MigrationStage::Failed {
        ctx.warn(tcp, &reason, &message).await;
        return;
    }
    let related = ObjectReference {
        api_version: Some(format!("{}/{}", crate::k8s::crd::GROUP, crate::k8s::crd::VERSION)),
        kind: Some("DataStore".into()),
        name: Some(m.target.clone()),
        ..ObjectReference::default()
    };
    ctx.note(tcp, related, &reason, &message).await;
}
