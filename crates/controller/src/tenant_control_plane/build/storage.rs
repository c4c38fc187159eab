//! What the datastore phase decides: the NATS holder, the overrides, the provisioning fingerprint.

use crate::datastore::nats::HeldBucket;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;

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

/// For a NATS DataStore: the other TenantControlPlane that holds it, if any. A server that holds a
/// tenant bucket is held by the bucket's marked owner (`held`, read from the server, which only the
/// controller writes; an unmarked bucket names no one, and provisioning refuses it by its markers).
/// A server that holds none goes to the oldest of those naming it in the spec (then by
/// `namespace/name`), so two new ones agree on who wins. No status is read: any TenantControlPlane
/// writer can forge one.
pub fn nats_holder(
    tcp: &TenantControlPlane,
    data_store: &str,
    held: Option<&HeldBucket>,
    tcps: &[TenantControlPlane],
) -> Option<String> {
    if let Some(held) = held {
        let owner = held.owner.as_ref()?;
        return (tcp.uid().as_deref() != Some(owner.uid())).then(|| owner.tcp().to_string());
    }
    let key = |t: &TenantControlPlane| format!("{}/{}", t.namespace().unwrap_or_default(), t.name_any());
    let me = key(tcp);
    let oldest = tcps
        .iter()
        .chain(std::iter::once(tcp))
        .filter(|t| t.metadata.deletion_timestamp.is_none() || key(t) == me)
        .filter(|t| t.spec.data_store.as_deref() == Some(data_store))
        .min_by_key(|t| (t.metadata.creation_timestamp.clone().map(|c| c.0), key(t)))?;
    (key(oldest) != me).then(|| key(oldest))
}

/// Checks the overrides against the primary: the primary and each override must be etcd, sharing the
/// primary's CA certificate (kube-apiserver has one etcd CA and one client certificate for all).
pub fn validate_overrides(
    primary: &ResolvedDataStore,
    overrides: &[(DataStoreOverride, Option<ResolvedDataStore>)],
) -> Result<(), Error> {
    if overrides.is_empty() {
        return Ok(());
    }
    let problem = |reason: &'static str, message: String| Error::Overrides { reason, message };
    if primary.driver != Driver::Etcd {
        return Err(problem(
            "PrimaryNotEtcd",
            format!(
                "dataStoreOverrides need an etcd primary; DataStore {} is {}",
                primary.name, primary.driver
            ),
        ));
    }
    for (o, ds) in overrides {
        let Some(ds) = ds else {
            return Err(problem(
                "OverrideDataStoreNotFound",
                format!("override {}: DataStore {} not found", o.resource, o.data_store),
            ));
        };
        if ds.driver != Driver::Etcd {
            return Err(problem(
                "OverrideNotEtcd",
                format!(
                    "override {}: DataStore {} is {}, overrides must be etcd",
                    o.resource, ds.name, ds.driver
                ),
            ));
        }
        if ds.ca_cert().map(str::trim) != primary.ca_cert().map(str::trim) {
            return Err(problem(
                "OverrideCANotShared",
                format!(
                    "override {}: DataStore {} has a different CA certificate than the primary DataStore {}; \
                     kube-apiserver uses one etcd CA and client certificate, so every override must share the primary's CA",
                    o.resource, ds.name, primary.name
                ),
            ));
        }
    }
    Ok(())
}

/// The recorded overrides that the spec no longer asks for (removed, or moved to another DataStore):
/// they are deprovisioned, then dropped from status.
pub fn stale_overrides<'a>(
    recorded: &'a [OverrideStorageStatus],
    spec: &[DataStoreOverride],
) -> Vec<&'a OverrideStorageStatus> {
    recorded
        .iter()
        .filter(|r| {
            !spec
                .iter()
                .any(|s| s.resource == r.resource && Some(&s.data_store) == r.data_store_name.as_ref())
        })
        .collect()
}

/// What a TenantControlPlane's datastore provisioning depends on: the TCP (uid, schema, user,
/// overrides) and every resolved DataStore with its credentials, as a SHA-256 hex digest. The same
/// fingerprint with untouched Secrets lets a reconcile skip provisioning it did moments ago.
pub fn provision_fingerprint(
    tcp: &TenantControlPlane,
    schema: &str,
    user: &str,
    primary: &ResolvedDataStore,
    overrides: &[(DataStoreOverride, Option<ResolvedDataStore>)],
) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [tcp.metadata.uid.as_deref().unwrap_or_default(), schema, user] {
        digest.update(&(part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    primary.digest_into(&mut digest);
    for (o, ds) in overrides {
        digest.update(o.resource.as_bytes());
        digest.update(b"\0");
        digest.update(o.data_store.as_bytes());
        digest.update(b"\0");
        if let Some(ds) = ds {
            ds.digest_into(&mut digest);
        }
    }
    digest
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
