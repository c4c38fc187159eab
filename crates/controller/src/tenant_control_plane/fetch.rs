//! Reads of the TenantControlPlane reconciler (the shared reads are in [`crate::fetch`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, Service};
use kube::Api;

use super::build::{self, Readyz};
use crate::{
    Context, Error,
    build::ResolvedDataStore,
    datastore::AnyDriver,
    fetch,
    k8s::crd::{DataStore, DataStoreOverride, Driver, TenantControlPlane},
};

/// A DataStore by name that exists and is ready, resolved, with its driver.
pub async fn ready_datastore(
    ctx: &Context,
    name: &str,
) -> Result<(ResolvedDataStore, Arc<AnyDriver>), Error> {
    let Some(ds) = fetch::datastore(ctx, name).await? else {
        return Err(Error::Invalid {
            reason: "DataStoreNotFound",
            message: format!("DataStore {name} not found"),
        });
    };
    let ready = ds.status.as_ref().is_some_and(|s| s.ready);
    if !ready {
        let why = ds
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.message.clone())
            .unwrap_or_else(|| "not checked yet".into());
        return Err(Error::NotReady {
            reason: "DataStoreNotReady",
            message: format!("DataStore {name} is not ready: {why}"),
        });
    }
    fetch::driver(ctx, &ds).await
}

/// What the datastore phase reads before it provisions.
#[derive(Debug)]
pub struct DatastoreInputs {
    /// The TenantControlPlane's namespace.
    pub namespace: String,
    /// The primary DataStore's name.
    pub primary_name: String,
    /// The primary, resolved.
    pub primary: ResolvedDataStore,
    /// Its driver.
    pub driver: Arc<AnyDriver>,
    /// The tenant's schema.
    pub schema: String,
    /// The tenant's user.
    pub user: String,
    /// `spec.dataStoreOverrides`.
    pub spec_overrides: Vec<DataStoreOverride>,
    /// Each override with its DataStore resolved (`None`: not found).
    pub overrides: Vec<(DataStoreOverride, Option<ResolvedDataStore>)>,
    /// Each override's DataStore.
    pub override_datastores: Vec<Option<DataStore>>,
    /// Why the overrides cannot be applied, if they cannot.
    pub overrides_problem: Option<Error>,
    /// The `<tcp>-datastore-config` Secret, if it exists.
    pub existing_config: Option<Secret>,
    /// The `<tcp>-datastore-certificate` Secret, if it exists.
    pub existing_certificate: Option<Secret>,
}

/// Reads the primary (ready), the tenant's names, (NATS) who holds the DataStore, the overrides'
/// DataStores and the existing datastore Secrets.
pub async fn datastore_inputs(
    ctx: &Context,
    tcp: &TenantControlPlane,
    namespace: &str,
    primary_name: String,
) -> Result<DatastoreInputs, Error> {
    let (primary, driver) = ready_datastore(ctx, &primary_name).await?;
    let (schema, user) = build::tenant_names(tcp)?;
    if let AnyDriver::Nats(nats) = driver.as_ref() {
        let held = nats.held_bucket().await?;
        let tcps = fetch::control_planes(ctx).await?;
        if let Some(holder) = build::nats_holder(tcp, &primary_name, held.as_ref(), &tcps) {
            return Err(Error::NotExclusive {
                data_store: primary_name,
                holder,
            });
        }
    }
    // Until a migration switches, the overrides recorded with the source's CA.
    let spec_overrides: Vec<DataStoreOverride> = crate::migration_plan::overrides(tcp);
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
                fetch::owned_secret_cached(ctx, namespace, &config_name),
                fetch::owned_secret_cached(ctx, namespace, &certificate_name),
            )
            .await?
        }
        _ => {
            futures_util::future::try_join(
                fetch::owned_secret(ctx, namespace, &config_name),
                fetch::owned_secret(ctx, namespace, &certificate_name),
            )
            .await?
        }
    };
    Ok(DatastoreInputs {
        namespace: namespace.to_string(),
        primary_name,
        primary,
        driver,
        schema,
        user,
        spec_overrides,
        overrides,
        override_datastores,
        overrides_problem,
        existing_config,
        existing_certificate,
    })
}

/// What the egress NetworkPolicy is built from: every DataStore the TenantControlPlane names (that
/// exists) with its endpoints, and the in-cluster Services those endpoints and the credential issuer
/// name (read live: they are not the controller's own).
pub async fn egress_inputs(ctx: &Context, tcp: &TenantControlPlane) -> Result<build::EgressInputs, Error> {
    let mut datastores = Vec::new();
    for name in crate::build::referenced_datastores(tcp) {
        if let Some(ds) = fetch::datastore(ctx, &name).await? {
            datastores.push((name, ds.spec.endpoints));
        }
    }
    let keys = build::egress_services(&datastores, &ctx.settings.workload);
    let services = futures_util::future::try_join_all(keys.into_iter().map(|(namespace, name)| async move {
        let found = Api::<Service>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(&name)
            .await?;
        Ok::<_, Error>(((namespace, name), found))
    }))
    .await?;
    Ok(build::EgressInputs {
        datastores,
        services: services.into_iter().collect(),
    })
}

/// `GET https://<endpoint>/readyz` trusting only the tenant CA (anonymous: `/readyz` is public by
/// default), within 2 s.
pub async fn readyz(endpoint: &str, ca_pem: &str) -> Readyz {
    if endpoint.is_empty() {
        return Readyz::Unreachable;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let Ok(ca) = reqwest::Certificate::from_pem(ca_pem.as_bytes()) else {
        return Readyz::Unreachable;
    };
    let Ok(client) = reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(std::time::Duration::from_secs(2))
        .build()
    else {
        return Readyz::Unreachable;
    };
    match client.get(format!("https://{endpoint}/readyz")).send().await {
        Ok(r) if r.status().is_success() => Readyz::Ok,
        Ok(r) => Readyz::NotReady(r.status().as_u16()),
        Err(err) => {
            tracing::debug!(endpoint, "tenant /readyz unreachable: {err}");
            Readyz::Unreachable
        }
    }
}
