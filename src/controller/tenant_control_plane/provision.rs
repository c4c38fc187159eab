//! The TenantControlPlane **datastore phase**: the tenant's space and user on the primary DataStore
//! and on every override, the `<tcp>-datastore-config` and `<tcp>-datastore-certificate` Secrets,
//! `status.storage` and the conditions `DataStoreReady`, `OverridesApplied` and `DataStoreExclusive`;
//! and, on deletion, the removal of the tenant from every DataStore it used.

use k8s_openapi::{api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::Condition, jiff::Timestamp};
use kube::ResourceExt as _;

use super::{
    build::{self, tcp_conditions::*},
    fetch::ready_datastore,
};
use crate::{
    controller::{
        Context, Error, apply,
        build::{CHECKSUM_ANNOTATION, Conditions},
        fetch,
    },
    datastore::{Driver as _, TenantSpace},
    k8s::crd::{DataStoreOverride, Driver, OverrideStorageStatus, StorageStatus, TenantControlPlane},
};

/// What the datastore phase hands to the next phases.
#[derive(Debug)]
pub struct StorageOutcome {
    /// The applied `<tcp>-datastore-config` Secret.
    pub config: Secret,
    /// The applied `<tcp>-datastore-certificate` Secret (etcd, or a DataStore with TLS).
    pub certificate: Option<Secret>,
    /// The recorded storage status.
    pub storage: StorageStatus,
    /// The primary's driver.
    pub driver: Driver,
    /// The tenant's schema (etcd key prefix, database, bucket).
    pub schema: String,
    /// The primary's endpoints.
    pub endpoints: Vec<String>,
    /// `(resource, endpoints)` of each override, in spec order.
    pub overrides: Vec<(String, Vec<String>)>,
}

/// What the datastore phase records in status (written together with the later phases' fields, in
/// one request): `storage`, and the conditions it set in this run.
#[derive(Debug, Clone, Default)]
pub struct StorageRecord {
    /// `status.storage` (`None`: nothing to record yet).
    pub storage: Option<StorageStatus>,
    /// `DataStoreReady`, `OverridesApplied` and `DataStoreExclusive`, as far as this run set them.
    pub conditions: Vec<Condition>,
}

/// The datastore phase: provisions and writes the Secrets; returns the outcome and what to record in
/// status and conditions, also on failure (the error then goes on to the Event, the metric and the
/// requeue).
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
    let result = provision(tcp, ctx, &mut storage, &mut conditions).await;
    if let Err(err) = &result {
        let type_ = match err {
            Error::Overrides { .. } => OVERRIDES_APPLIED,
            Error::NotExclusive { .. } => DATASTORE_EXCLUSIVE,
            _ => DATASTORE_READY,
        };
        conditions.set(type_, Some(false), err.reason(), err.to_string());
        if type_ == DATASTORE_EXCLUSIVE {
            conditions.set(
                DATASTORE_READY,
                Some(false),
                err.reason(),
                "the NATS DataStore serves another TenantControlPlane",
            );
        }
    }
    let record = StorageRecord {
        storage: (storage != StorageStatus::default()).then_some(storage),
        conditions: conditions.into_vec(),
    };
    (result, record)
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
    let default = ctx.settings.default_datastore.clone();
    let named = tcp.spec.data_store.clone().filter(|n| !n.is_empty());
    if named.is_none()
        && let Some(default) = &default
    {
        // Like upstream's defaulting webhook: record the default in the spec, so that every later
        // reconcile, usedBy and the CRD's "cannot unset" rule see the same DataStore.
        let api: kube::Api<TenantControlPlane> = kube::Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({"spec": {"dataStore": default}});
        api.patch(
            &tcp.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(Error::Kube)?;
    }
    let Some(primary_name) = named.or(default) else {
        return Err(Error::Invalid {
            reason: "NoDataStore",
            message: "spec.dataStore is empty: name the DataStore that holds this control plane".into(),
        });
    };
    if let Some(recorded) = storage.data_store_name.as_deref()
        && recorded != primary_name
    {
        return Err(Error::Invalid {
            reason: "DataStoreMigrationUnsupported",
            message: format!(
                "spec.dataStore changed from {recorded} to {primary_name}: moving a tenant between DataStores is not supported yet"
            ),
        });
    }

    // fetch
    let (primary, driver) = ready_datastore(ctx, &primary_name).await?;
    let (schema, user) = build::tenant_names(tcp)?;
    if primary.driver == Driver::Nats {
        let tcps = fetch::control_planes(ctx).await?;
        if let Some(holder) = build::nats_holder(tcp, &primary_name, &tcps) {
            return Err(Error::NotExclusive {
                data_store: primary_name,
                holder,
            });
        }
    }
    let spec_overrides: Vec<DataStoreOverride> = tcp.spec.data_store_overrides.clone().unwrap_or_default();
    let mut overrides = Vec::new();
    let mut override_datastores = Vec::new();
    for o in &spec_overrides {
        let ds = fetch::datastore(ctx, &o.data_store).await?;
        let resolved = match &ds {
            Some(ds) => Some(fetch::resolve(ctx, ds).await?),
            None => None,
        };
        overrides.push((o.clone(), resolved));
        override_datastores.push(ds);
    }
    let overrides_problem = build::validate_overrides(&primary, &overrides).err();
    let config_name = build::config_secret_name(tcp);
    let certificate_name = build::certificate_secret_name(tcp);
    // An etcd tenant's Secrets hold nothing that must survive (no password; a new client certificate
    // is as good), so a cached miss is trusted there: the write is a create, and one that finds the
    // Secret after all applies over it. A SQL password must never be replaced by mistake, so for the
    // other drivers a miss is confirmed live.
    let (existing_config, existing_certificate) = match primary.driver {
        Driver::Etcd => {
            futures_util::future::try_join(
                fetch::owned_secret_cached(ctx, &namespace, &config_name),
                fetch::owned_secret_cached(ctx, &namespace, &certificate_name),
            )
            .await?
        }
        _ => {
            futures_util::future::try_join(
                fetch::owned_secret(ctx, &namespace, &config_name),
                fetch::owned_secret(ctx, &namespace, &certificate_name),
            )
            .await?
        }
    };

    // provision the primary, unless this controller did so moments ago from the same inputs and its
    // Secrets are untouched (every TCP event triggers a reconcile; the resync interval still repairs)
    let cache_key = format!("{namespace}/{}", tcp.name_any());
    let fingerprint = build::provision_fingerprint(tcp, &schema, &user, &primary, &overrides);
    let version = |s: &Option<Secret>| s.as_ref().and_then(|s| s.metadata.resource_version.clone());
    let skip = ctx.provisioned_recently(
        &cache_key,
        &fingerprint,
        version(&existing_config).as_deref(),
        version(&existing_certificate).as_deref(),
    );
    let owner = build::datastore_owner(tcp)?;
    let mut space = TenantSpace::new(&schema, &user, owner.clone())?;
    let endpoint = primary.endpoints.join(",");
    ctx.owners
        .check(&primary_name, driver.kind(), &endpoint, &space)?;
    if let Some(password) = build::reusable_password(existing_config.as_ref(), &user) {
        space = space.with_password(password);
    }
    // What the tenant already holds proves names made for it before ownership markers existed.
    if let Some((cert, key)) = primary
        .ca_cert()
        .and_then(|ca| build::reusable_certificate(existing_certificate.as_ref(), ca, &user))
    {
        space = space.with_client_certificate(cert, crate::secret::Secret::new(key));
    }
    // `skip` implies the config Secret exists (its version was compared).
    let config_exists = existing_config.is_some();
    let (config, certificate) = match existing_config.filter(|_| skip) {
        Some(config) => (config, existing_certificate),
        None => {
            ctx.record_provisioned(&cache_key, None);
            let credentials = driver.provision(&space).await?;
            ctx.owners.record(&primary_name, &space);
            // The tenant's own client certificate (etcd's, or one minted for a SQL/NATS tenant) is
            // kept while it is valid for this user under the same CA.
            let keep_certificate = primary
                .ca_cert()
                .and_then(|ca| build::reusable_certificate(existing_certificate.as_ref(), ca, &user));
            let config = build::config_secret(tcp, &space, &credentials)?;
            let certificate = build::certificate_secret(
                tcp,
                &space,
                &primary,
                &credentials,
                keep_certificate,
                ctx.settings.workload.key_algorithm,
            )?;
            let (config, certificate) =
                futures_util::future::try_join(apply::write_secret(ctx, &config, config_exists), async {
                    match &certificate {
                        Some(secret) => apply::write_secret(ctx, secret, existing_certificate.is_some())
                            .await
                            .map(Some),
                        None => Ok(None),
                    }
                })
                .await?;
            (config, certificate)
        }
    };
    let checksum = config.annotations().get(CHECKSUM_ANNOTATION).cloned();
    storage.driver = Some(primary.driver.to_string());
    storage.data_store_name = Some(primary_name.clone());
    storage.setup = Some(build::setup_status(&space, checksum, storage.setup.as_ref(), now));
    storage.config = Some(build::secret_status(&config, storage.config.as_ref(), now));
    storage.certificate = certificate
        .as_ref()
        .map(|c| build::secret_status(c, storage.certificate.as_ref(), now));
    conditions.set(
        DATASTORE_READY,
        Some(true),
        "DataStoreReady",
        format!(
            "schema {} and user {} are provisioned on DataStore {primary_name}",
            space.schema(),
            space.user()
        ),
    );
    if primary.driver == Driver::Nats {
        conditions.set(
            DATASTORE_EXCLUSIVE,
            Some(true),
            "DataStoreExclusive",
            format!("NATS DataStore {primary_name} serves this TenantControlPlane only"),
        );
    }

    // overrides the spec no longer asks for: deprovision, then forget
    let stale: Vec<OverrideStorageStatus> = build::stale_overrides(&storage.overrides, &spec_overrides)
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
    if let Some(problem) = overrides_problem {
        return Err(problem);
    }
    for ((o, ds), datastore) in overrides.iter().zip(&override_datastores) {
        let (Some(ds), Some(datastore)) = (ds, datastore) else {
            continue;
        };
        let override_space = TenantSpace::new(&schema, &user, owner.clone())?;
        if !skip {
            // the DataStore's kept driver, as for the primary
            let (_, driver) = fetch::driver(ctx, datastore).await?;
            ctx.owners
                .check(&ds.name, driver.kind(), &ds.endpoints.join(","), &override_space)?;
            driver.provision(&override_space).await?;
            ctx.owners.record(&ds.name, &override_space);
        }
        let previous = storage.overrides.iter().find(|r| r.resource == o.resource);
        let entry = OverrideStorageStatus {
            resource: o.resource.clone(),
            data_store_name: Some(ds.name.clone()),
            setup: Some(build::setup_status(
                &override_space,
                None,
                previous.and_then(|p| p.setup.as_ref()),
                now,
            )),
        };
        storage.overrides.retain(|r| r.resource != o.resource);
        storage.overrides.push(entry);
    }
    storage
        .overrides
        .sort_by_key(|r| spec_overrides.iter().position(|s| s.resource == r.resource));
    if !spec_overrides.is_empty() {
        conditions.set(
            OVERRIDES_APPLIED,
            Some(true),
            "OverridesApplied",
            format!(
                "{} override(s) provisioned: {}",
                spec_overrides.len(),
                spec_overrides
                    .iter()
                    .map(|o| format!("{}→{}", o.resource, o.data_store))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    // A skipped run left the entry as it was: same inputs, same Secrets, and the time of the real
    // provisioning, so the resync interval still repairs.
    if !skip {
        ctx.record_provisioned(
            &cache_key,
            Some(crate::controller::Provisioned {
                fingerprint,
                config_version: config.metadata.resource_version.clone(),
                certificate_version: certificate
                    .as_ref()
                    .and_then(|c| c.metadata.resource_version.clone()),
                at: std::time::Instant::now(),
            }),
        );
    }
    Ok(StorageOutcome {
        config,
        certificate,
        storage: storage.clone(),
        driver: primary.driver,
        schema: space.schema().to_string(),
        endpoints: primary.endpoints.clone(),
        overrides: overrides
            .iter()
            .filter_map(|(o, ds)| Some((o.resource.clone(), ds.as_ref()?.endpoints.clone())))
            .collect(),
    })
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
        Err(crate::datastore::DatastoreError::InvalidName { .. }) => return Ok(()),
        outcome => outcome?,
    };
    ctx.owners.forget(name, space);
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

/// On deletion: removes the tenant from every override recorded in status (including those removed
/// from the spec) and from the primary.
pub async fn cleanup(tcp: &TenantControlPlane, ctx: &Context) -> Result<(), Error> {
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
            // Not recorded. If the config Secret exists, provisioning succeeded but the status write did
            // not: clean what it would be. A provisioning refused half-way (e.g. its user was taken)
            // may have claimed a name of its own on a ready DataStore: clean that too (markers keep it to
            // this UID's names). Otherwise nothing was ever provisioned (the DataStore was never ready),
            // and deletion must not wait for a DataStore it never used.
            let namespace = tcp
                .namespace()
                .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
            let ready = |ds: &Option<crate::k8s::crd::DataStore>| {
                ds.as_ref()
                    .and_then(|d| d.status.as_ref())
                    .is_some_and(|s| s.ready)
            };
            if fetch::secret(ctx, &namespace, &build::config_secret_name(tcp))
                .await?
                .is_none()
                && !ready(&fetch::datastore(ctx, &primary).await?)
            {
                return Ok(());
            }
            let (schema, user) = build::tenant_names(tcp)?;
            let Ok(space) = TenantSpace::new(schema, user, build::datastore_owner(tcp)?) else {
                return Ok(());
            };
            // A NATS DataStore held by another TenantControlPlane has nothing of this one's.
            if let Some(ds) = fetch::datastore(ctx, &primary).await?
                && ds.spec.driver == Driver::Nats
            {
                let tcps = fetch::control_planes(ctx).await?;
                if build::nats_holder(tcp, &primary, &tcps).is_some() {
                    return Ok(());
                }
            }
            space
        }
    };
    deprovision_on(ctx, tcp, &primary, &space).await
}
