//! The TenantControlPlane **datastore phase** (I/O): the tenant's space and user on the primary
//! DataStore and on every override, the `<tcp>-datastore-config` and `<tcp>-datastore-certificate`
//! Secrets; `status.storage` and the conditions `DataStoreReady`, `OverridesApplied` and
//! `DataStoreExclusive` are computed by [`build`]. On deletion, [`cleanup`] removes the tenant from
//! every DataStore it used.

use k8s_openapi::{api::core::v1::Secret, jiff::Timestamp};
use kube::ResourceExt as _;

use super::{
    apply,
    build::{self, StorageOutcome, StorageRecord},
    fetch::{self as tcp_fetch, DatastoreInputs},
};
use crate::{
    Context, Error, Phase, Provisioned,
    build::Conditions,
    datastore::{AnyDriver, Driver as _, TenantSpace},
    fetch,
    k8s::crd::{OverrideStorageStatus, StorageStatus, TenantControlPlane},
    migration_plan,
};

/// The datastore phase: provisions and writes the Secrets; returns the outcome and what to record in
/// status and conditions, also on failure (the error, in [`Phase::Datastore`], then goes on to the
/// Event, the metric and the requeue).
pub async fn datastore_phase(
    tcp: &TenantControlPlane,
    ctx: &Context,
) -> (Result<StorageOutcome, Error>, StorageRecord) {
    let previous = tcp
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let mut conditions = Conditions::new(&previous, tcp.metadata.generation, Timestamp::now());
    let mut storage = build::initial_storage(tcp);
    // Which DataStore serves, and whether its source is frozen, follow the controller's migration
    // record, not `status.migration` (which others may write).
    let result = match crate::migration_journal::recorded_view(ctx, tcp).await {
        Ok(view) => provision(&view, ctx, &mut storage, &mut conditions).await,
        Err(err) => Err(err),
    };
    if let Err(err) = &result {
        build::datastore_failure_conditions(&mut conditions, err);
    }
    let record = StorageRecord {
        storage: (storage != StorageStatus::default()).then_some(storage),
        conditions: conditions.into_vec(),
    };
    (result.map_err(|e| e.in_phase(Phase::Datastore)), record)
}

/// The primary DataStore: the one the tenant serves from ([`migration_plan::serving`]: the recorded
/// one until a migration to `spec.dataStore` switches), else the spec's, else the default (recorded in
/// the spec first, like upstream's defaulting webhook, so that every later reconcile, usedBy and the
/// CRD's "cannot unset" rule see the same DataStore).
async fn primary_datastore(
    tcp: &TenantControlPlane,
    ctx: &Context,
    namespace: &str,
) -> Result<String, Error> {
    let default = ctx.settings.default_datastore.clone();
    let named = tcp.spec.data_store.clone().filter(|n| !n.is_empty());
    if named.is_none()
        && let Some(default) = &default
    {
        apply::default_datastore(ctx, tcp, namespace, default).await?;
    }
    if let Some(serving) = migration_plan::serving(tcp) {
        return Ok(serving);
    }
    default.ok_or_else(|| Error::Invalid {
        reason: "NoDataStore",
        message: "spec.dataStore is empty: name the DataStore that holds this control plane".into(),
    })
}

async fn provision(
    tcp: &TenantControlPlane,
    ctx: &Context,
    storage: &mut StorageStatus,
    conditions: &mut Conditions<'_>,
) -> Result<StorageOutcome, Error> {
    let now = Timestamp::now();
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let primary_name = primary_datastore(tcp, ctx, &namespace).await?;
    let inputs = tcp_fetch::datastore_inputs(ctx, tcp, &namespace, primary_name).await?;
    let primary = provision_primary(ctx, tcp, &inputs).await?;
    build::record_primary(
        storage,
        (&inputs.primary_name, inputs.primary.driver),
        &primary.space,
        &primary.config,
        primary.certificate.as_ref(),
        now,
    );
    build::primary_conditions(
        conditions,
        &inputs.primary_name,
        inputs.primary.driver,
        &primary.space,
    );

    // overrides the spec no longer asks for: deprovision, then forget
    let stale: Vec<OverrideStorageStatus> =
        build::stale_overrides(&storage.overrides, &inputs.spec_overrides)
            .into_iter()
            .cloned()
            .collect();
    for o in stale {
        deprovision_override(ctx, tcp, &o).await?;
        storage
            .overrides
            .retain(|r| !(r.resource == o.resource && r.data_store_name == o.data_store_name));
    }

    // overrides the spec asks for
    if let Some(problem) = inputs.overrides_problem {
        return Err(problem);
    }
    provision_overrides(ctx, tcp, &inputs, primary.skip, storage, now).await?;
    build::sort_overrides(storage, &inputs.spec_overrides);
    build::overrides_condition(conditions, &inputs.spec_overrides);
    // A skipped run left the entry as it was: same inputs, same Secrets, and the time of the real
    // provisioning, so the resync interval still repairs.
    if !primary.skip {
        ctx.record_provisioned(
            &primary.cache_key,
            Some(Provisioned {
                fingerprint: primary.fingerprint,
                config_version: primary.config.metadata.resource_version.clone(),
                certificate_version: primary
                    .certificate
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone()),
                at: std::time::Instant::now(),
            }),
        );
    }
    Ok(StorageOutcome {
        config: primary.config,
        certificate: primary.certificate,
        storage: storage.clone(),
        driver: inputs.primary.driver,
        schema: primary.space.schema().to_string(),
        endpoints: inputs.primary.endpoints.clone(),
        overrides: inputs
            .overrides
            .iter()
            .filter_map(|(o, ds)| Some((o.resource.clone(), ds.as_ref()?.endpoints.clone())))
            .collect(),
    })
}

/// The provisioned primary.
struct Primary {
    /// The tenant's space (with the kept password and client certificate).
    space: TenantSpace,
    /// The `<tcp>-datastore-config` Secret as applied.
    config: Secret,
    /// The `<tcp>-datastore-certificate` Secret as applied.
    certificate: Option<Secret>,
    /// Whether provisioning was skipped (done moments ago from the same inputs).
    skip: bool,
    /// `namespace/name`.
    cache_key: String,
    /// [`build::provision_fingerprint`] of the inputs.
    fingerprint: String,
}

/// Provisions the primary, unless this controller did so moments ago from the same inputs and its
/// Secrets are untouched (every TCP event triggers a reconcile; the resync interval still repairs),
/// and writes the datastore Secrets.
async fn provision_primary(
    ctx: &Context,
    tcp: &TenantControlPlane,
    inputs: &DatastoreInputs,
) -> Result<Primary, Error> {
    let DatastoreInputs {
        primary,
        driver,
        schema,
        user,
        ..
    } = inputs;
    let (existing_config, existing_certificate) = (&inputs.existing_config, &inputs.existing_certificate);
    let cache_key = format!("{}/{}", inputs.namespace, tcp.name_any());
    let fingerprint = build::provision_fingerprint(tcp, schema, user, primary, &inputs.overrides);
    let version = |s: &Option<Secret>| s.as_ref().and_then(|s| s.metadata.resource_version.clone());
    // A frozen migration source is never provisioned again: that would restore its write access.
    let skip = ctx.provisioned_recently(
        &cache_key,
        &fingerprint,
        version(existing_config).as_deref(),
        version(existing_certificate).as_deref(),
    ) || (existing_config.is_some() && migration_plan::source_frozen(tcp));
    let owner = build::datastore_owner(tcp)?;
    let mut space = TenantSpace::new(schema, user, owner)?;
    let endpoint = primary.endpoints.join(",");
    ctx.owners
        .check(&inputs.primary_name, driver.kind(), &endpoint, &space)?;
    if let Some(password) = build::reusable_password(existing_config.as_ref(), user) {
        space = space.with_password(password);
    }
    // What the tenant already holds proves names made for it before ownership markers existed.
    let kept_certificate = || {
        primary
            .ca_cert()
            .and_then(|ca| build::reusable_certificate(existing_certificate.as_ref(), ca, user))
    };
    if let Some((cert, key)) = kept_certificate() {
        space = space.with_client_certificate(cert, crate::secret::Secret::new(key));
    }
    // `skip` implies the config Secret exists (its version was compared).
    let (config, certificate) = match existing_config.clone().filter(|_| skip) {
        Some(config) => (config, existing_certificate.clone()),
        None => {
            ctx.record_provisioned(&cache_key, None);
            let named = named_by_spec(
                tcp,
                &inputs.primary_name,
                ctx.settings.default_datastore.as_deref(),
            );
            if !named {
                held_already(
                    driver,
                    &space,
                    "status.storage.dataStoreName",
                    &inputs.primary_name,
                )
                .await?;
            }
            let credentials = driver.provision(&space).await?;
            crate::served::provisioned(ctx, tcp, &inputs.primary_name, &space).await?;
            // The tenant's own client certificate (etcd's, or one minted for a SQL/NATS tenant) is
            // kept while it is valid for this user under the same CA.
            let config = build::config_secret(tcp, &space, &credentials)?;
            let certificate = build::certificate_secret(
                tcp,
                &space,
                primary,
                &credentials,
                kept_certificate(),
                ctx.settings.workload.key_algorithm,
            )?;
            apply::datastore_secrets(ctx, &config, certificate.as_ref(), inputs).await?
        }
    };
    Ok(Primary {
        space,
        config,
        certificate,
        skip,
        cache_key,
        fingerprint,
    })
}

/// Whether the spec names DataStore `name` as the primary (or names none and `name` is the default).
fn named_by_spec(tcp: &TenantControlPlane, name: &str, default: Option<&str>) -> bool {
    match tcp.spec.data_store.as_deref().filter(|n| !n.is_empty()) {
        Some(spec) => spec == name,
        None => default == Some(name),
    }
}

/// Refuses to provision on DataStore `name`, which only status (`field`) names, unless this
/// TenantControlPlane's space already exists there: status may be forged, and a fresh space on a
/// DataStore the spec never named would bypass placement (or hand out a NATS DataStore's login).
async fn held_already(driver: &AnyDriver, space: &TenantSpace, field: &str, name: &str) -> Result<(), Error> {
    driver.check_owned(space).await.map_err(|e| {
        if e.is_transient() {
            return Error::Datastore(e);
        }
        Error::Invalid {
            reason: "RecordedDataStoreNotHeld",
            message: format!(
                "{field} names DataStore {name}, which the spec does not name and where this TenantControlPlane holds no space of its own, so nothing was provisioned there ({})",
                e.reason()
            ),
        }
    })
}

/// Provisions the tenant on every override's DataStore (unless `skip`) and records each in
/// `storage`.
async fn provision_overrides(
    ctx: &Context,
    tcp: &TenantControlPlane,
    inputs: &DatastoreInputs,
    skip: bool,
    storage: &mut StorageStatus,
    now: Timestamp,
) -> Result<(), Error> {
    let owner = build::datastore_owner(tcp)?;
    for ((o, ds), datastore) in inputs.overrides.iter().zip(&inputs.override_datastores) {
        let (Some(ds), Some(datastore)) = (ds, datastore) else {
            continue;
        };
        let override_space = TenantSpace::new(&inputs.schema, &inputs.user, owner.clone())?;
        if !skip {
            // the DataStore's kept driver, as for the primary
            let (_, driver) = fetch::driver(ctx, datastore).await?;
            ctx.owners
                .check(&ds.name, driver.kind(), &ds.endpoints.join(","), &override_space)?;
            if !inputs.spec_overrides.contains(o) {
                held_already(&driver, &override_space, "status.storage.overrides", &ds.name).await?;
            }
            driver.provision(&override_space).await?;
            crate::served::provisioned(ctx, tcp, &ds.name, &override_space).await?;
        }
        build::record_override(storage, &o.resource, &ds.name, &override_space, now);
    }
    Ok(())
}

/// A TenantControlPlane deleted while migrating holds a space on both DataStores: removes the one the
/// primary cleanup does not see (the target before the switch, the source after it).
async fn cleanup_migration(tcp: &TenantControlPlane, ctx: &Context) -> Result<(), Error> {
    // The controller's own record, not status (which others may write); the journal goes with it.
    let journal = crate::migration_journal::read(ctx, tcp).await?;
    let Some(m) = journal.current.as_ref().filter(|m| !m.stage.ended()) else {
        return crate::migration_journal::forget(ctx, tcp).await;
    };
    let recorded = migration_plan::recorded(tcp);
    let (schema, user) = build::tenant_names(tcp)?;
    let owner = build::datastore_owner(tcp)?;
    for (store, schema, user) in [
        (&m.target, schema.clone(), user.clone()),
        (
            &m.source,
            m.source_schema.clone().unwrap_or(schema),
            m.source_user.clone().unwrap_or(user),
        ),
    ] {
        if recorded == Some(store.as_str()) {
            continue;
        }
        if let Ok(space) = TenantSpace::new(schema, user, owner.clone()) {
            deprovision_on(ctx, tcp, store, &space).await?;
        }
    }
    crate::migration_journal::forget(ctx, tcp).await
}

/// The names recorded in `setup`, owned by `tcp`. Status is writable by more people than the
/// datastore is, so these are only candidates: the drivers remove what their markers attribute to
/// this TenantControlPlane's UID, nothing else.
fn space_of(tcp: &TenantControlPlane, setup: Option<&crate::k8s::crd::SetupStatus>) -> Option<TenantSpace> {
    let setup = setup?;
    let owner = build::datastore_owner(tcp).ok()?;
    TenantSpace::new(setup.schema.clone()?, setup.user.clone()?, owner).ok()
}

async fn deprovision_override(
    ctx: &Context,
    tcp: &TenantControlPlane,
    o: &OverrideStorageStatus,
) -> Result<(), Error> {
    let (Some(name), Some(space)) = (o.data_store_name.as_deref(), space_of(tcp, o.setup.as_ref())) else {
        return Ok(());
    };
    deprovision_on(ctx, tcp, name, &space).await
}

async fn deprovision_on(
    ctx: &Context,
    tcp: &TenantControlPlane,
    name: &str,
    space: &TenantSpace,
) -> Result<(), Error> {
    let Some(ds) = fetch::datastore(ctx, name).await? else {
        // Nothing to clean up against; the DataStore's finalizer normally prevents this.
        crate::served::deprovisioned(ctx, tcp, name, space).await?;
        ctx.warn(
            tcp,
            "DataStoreGone",
            &format!(
                "DataStore {name} no longer exists: schema {} and user {} could not be removed from it",
                space.schema(),
                space.user()
            ),
        )
        .await;
        return Ok(());
    };
    let (_, driver) = fetch::driver(ctx, &ds).await?;
    let outcome = match driver.deprovision(space).await {
        // A name the driver refuses was never provisioned: there is nothing to remove.
        Err(crate::datastore::DatastoreError::InvalidName { .. }) => {
            return crate::served::deprovisioned(ctx, tcp, name, space).await;
        }
        outcome => outcome?,
    };
    crate::served::deprovisioned(ctx, tcp, name, space).await?;
    if !outcome.left_alone.is_empty() {
        ctx.warn(
            tcp,
            "DataStoreNamesLeftAlone",
            &format!(
                "on DataStore {name}, left alone what this TenantControlPlane does not own: {}",
                outcome.left_alone.join("; ")
            ),
        )
        .await;
    }
    Ok(())
}

/// On deletion: removes the tenant from every space the controller's record lists ([`crate::served`])
/// and, as the markers decide, from what the spec names; a TenantControlPlane without a record (not
/// provisioned since the record was introduced) is cleaned from what status recorded, as before.
pub async fn cleanup(tcp: &TenantControlPlane, ctx: &Context) -> Result<(), Error> {
    cleanup_migration(tcp, ctx).await?;
    match crate::served::read(ctx, tcp).await? {
        Some(served) => cleanup_served(tcp, ctx, &served).await?,
        None => cleanup_from_status(tcp, ctx).await?,
    }
    crate::served::forget(ctx, tcp).await
}

/// Removes every recorded space, then the spec's names on the spec's primary (a provisioning whose
/// record write failed); never a DataStore only status names.
async fn cleanup_served(
    tcp: &TenantControlPlane,
    ctx: &Context,
    served: &crate::served::Served,
) -> Result<(), Error> {
    let owner = build::datastore_owner(tcp)?;
    for recorded in &served.spaces {
        if let Ok(space) = TenantSpace::new(recorded.schema.clone(), recorded.user.clone(), owner.clone()) {
            deprovision_on(ctx, tcp, &recorded.data_store, &space).await?;
        }
    }
    let Some(primary) = tcp.spec.data_store.clone().filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    let (schema, user) = build::spec_names(tcp)?;
    let done = served
        .spaces
        .iter()
        .any(|s| s.data_store == primary && s.schema == schema && s.user == user);
    let Ok(space) = TenantSpace::new(schema, user, owner) else {
        return Ok(());
    };
    if done || !maybe_provisioned(tcp, ctx, &primary).await? {
        return Ok(());
    }
    deprovision_on(ctx, tcp, &primary, &space).await
}

/// Whether anything may have been provisioned for `tcp` on DataStore `primary` without being recorded:
/// its config Secret exists (provisioning succeeded, a later write did not), or the DataStore is ready
/// (a provisioning refused half-way may have claimed a name of its own). Otherwise deletion must not
/// wait for a DataStore it never used.
async fn maybe_provisioned(tcp: &TenantControlPlane, ctx: &Context, primary: &str) -> Result<bool, Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    if fetch::secret(ctx, &namespace, &build::config_secret_name(tcp))
        .await?
        .is_some()
    {
        return Ok(true);
    }
    Ok(fetch::datastore(ctx, primary)
        .await?
        .and_then(|d| d.status)
        .is_some_and(|s| s.ready))
}

/// Cleanup of a TenantControlPlane without a record: every override recorded in status (including
/// those removed from the spec) and the primary status records, else the spec's (markers decide).
async fn cleanup_from_status(tcp: &TenantControlPlane, ctx: &Context) -> Result<(), Error> {
    let storage = build::initial_storage(tcp);
    for o in &storage.overrides {
        deprovision_override(ctx, tcp, o).await?;
    }
    let primary = storage
        .data_store_name
        .clone()
        .or_else(|| tcp.spec.data_store.clone())
        .filter(|n| !n.is_empty());
    let Some(primary) = primary else {
        return Ok(());
    };
    let space = match space_of(tcp, storage.setup.as_ref()) {
        Some(recorded) => {
            // Status may have been edited: also remove what the spec names (markers decide, so
            // neither list can reach another tenant's names).
            let (schema, user) = build::spec_names(tcp)?;
            if let Ok(named) = TenantSpace::new(schema, user, build::datastore_owner(tcp)?)
                && named != recorded
            {
                deprovision_on(ctx, tcp, &primary, &named).await?;
            }
            recorded
        }
        None => {
            // Not recorded: clean what provisioning would have made, if it may have run.
            if !maybe_provisioned(tcp, ctx, &primary).await? {
                return Ok(());
            }
            let (schema, user) = build::tenant_names(tcp)?;
            let Ok(space) = TenantSpace::new(schema, user, build::datastore_owner(tcp)?) else {
                return Ok(());
            };
            space
        }
    };
    deprovision_on(ctx, tcp, &primary, &space).await
}
