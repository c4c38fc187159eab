//! The pure middle shared by both reconcilers, and the DataStore reconciler's: references, drivers
//! from resolved DataStores, conditions, Secret checksums and owner references. No I/O here;
//! everything is unit-tested below. The TenantControlPlane's own builders are in
//! [`tenant_control_plane::build`](super::tenant_control_plane::build).

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{Resource as _, ResourceExt as _};

use super::Error;
use crate::{
    datastore::{
        AnyDriver, ClientTls, DatastoreError, SqlSettings,
        etcd::{EtcdDriver, EtcdSettings},
        mysql::MySqlDriver,
        nats::{NatsDriver, NatsSettings},
        postgres::PostgresDriver,
    },
    k8s::crd::{ContentRef, DataStore, Driver, TenantControlPlane},
    pki::{CertKey, KeyAlgorithm},
    secret::Secret as Sealed,
};

/// Condition types of a DataStore.
pub mod ds_conditions {
    /// Every credential resolved and the driver settings are usable.
    pub const VALIDATED: &str = "Validated";
    /// The datastore answered a check with the DataStore's credentials.
    pub const REACHABLE: &str = "Reachable";
    /// Validated and reachable: TenantControlPlanes can be provisioned on it.
    pub const READY: &str = "Ready";
    /// Deletion waits until no TenantControlPlane uses it.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
}

/// Annotation with the checksum of a Secret's data (upstream's name).
pub const CHECKSUM_ANNOTATION: &str = "kamaji.clastix.io/checksum";

/// Label naming the TenantControlPlane a Secret belongs to (upstream's name).
pub const TCP_NAME_LABEL: &str = "kamaji.clastix.io/name";

/// Exponential backoff after `failures` consecutive transient failures: 1 s, 2 s, 4 s … at most 5 min.
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(9);
    Duration::from_secs((1u64 << exponent).min(300))
}

// === references ===

/// Every DataStore a TenantControlPlane names anywhere: spec primary and overrides, what status
/// recorded, and a running migration's. Only for triggers and egress: `usedBy` follows [`users_of`].
pub fn referenced_datastores(tcp: &TenantControlPlane) -> BTreeSet<String> {
    let mut names = named_datastores(tcp);
    names.extend(status_datastores(tcp));
    names
}

/// The DataStores the spec names (primary and overrides) and a running migration's source and target
/// (a running migration holds both spaces until it ends).
pub fn named_datastores(tcp: &TenantControlPlane) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    names.extend(tcp.spec.data_store.clone());
    for o in tcp.spec.data_store_overrides.iter().flatten() {
        names.insert(o.data_store.clone());
    }
    if let Some(m) = crate::migration_plan::active(tcp) {
        names.insert(m.source.clone());
        names.insert(m.target.clone());
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The DataStores `status.storage` names (primary and overrides); anyone who may patch status can
/// write them.
pub fn status_datastores(tcp: &TenantControlPlane) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    if let Some(storage) = tcp.status.as_ref().and_then(|s| s.storage.as_ref()) {
        names.extend(storage.data_store_name.clone());
        for o in &storage.overrides {
            names.extend(o.data_store_name.clone());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The DataStores a TenantControlPlane uses, for `usedBy`: what it `named` (spec, running migration)
/// and what the controller's record says it is served by ([`crate::served`]). A TenantControlPlane
/// without a record yet (provisioned before the record existed, or never provisioned) counts what
/// its `status` names instead: the first successful provisioning writes the record (the driver
/// then confirmed this UID's marker there), and from then on status names alone count nothing.
pub fn users_of(
    named: &BTreeSet<String>,
    recorded: Option<&BTreeSet<String>>,
    status: &BTreeSet<String>,
) -> BTreeSet<String> {
    let mut names = named.clone();
    names.extend(recorded.unwrap_or(status).iter().cloned());
    names.retain(|n| !n.is_empty());
    names
}

/// `namespace/name` of every TenantControlPlane naming DataStore `name` anywhere, sorted: the fallback
/// until the `usedBy` index has listed (status names count too: a pin, never a lost user).
pub fn used_by<T: std::borrow::Borrow<TenantControlPlane>>(name: &str, tcps: &[T]) -> Vec<String> {
    let mut users: Vec<String> = tcps
        .iter()
        .map(|t| t.borrow())
        .filter(|tcp| referenced_datastores(tcp).contains(name))
        .map(|tcp| format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any()))
        .collect();
    users.sort();
    users.dedup();
    users
}

/// Every ContentRef of a DataStore, with its path for messages.
pub fn content_refs(ds: &DataStore) -> Vec<(&'static str, &ContentRef)> {
    let mut refs = Vec::new();
    if let Some(auth) = &ds.spec.basic_auth {
        refs.push(("basicAuth.username", &auth.username));
        refs.push(("basicAuth.password", &auth.password));
    }
    if let Some(tls) = &ds.spec.tls_config {
        refs.push((
            "tlsConfig.certificateAuthority.certificate",
            &tls.certificate_authority.certificate,
        ));
        if let Some(key) = &tls.certificate_authority.private_key {
            refs.push(("tlsConfig.certificateAuthority.privateKey", key));
        }
        if let Some(client) = &tls.client_certificate {
            refs.push(("tlsConfig.clientCertificate.certificate", &client.certificate));
            refs.push(("tlsConfig.clientCertificate.privateKey", &client.private_key));
        }
    }
    refs
}

/// Whether the DataStore reads a key of Secret `namespace/name`.
pub fn references_secret(ds: &DataStore, namespace: &str, name: &str) -> bool {
    content_refs(ds).iter().any(|(_, r)| {
        r.content.is_none()
            && r.secret_reference
                .as_ref()
                .is_some_and(|s| s.namespace == namespace && s.name == name)
    })
}

// === drivers ===

/// A DataStore with every ContentRef resolved to its value.
#[derive(Debug, Clone)]
pub struct ResolvedDataStore {
    /// The DataStore's name.
    pub name: String,
    /// Its driver.
    pub driver: Driver,
    /// Its endpoints, `host:port`.
    pub endpoints: Vec<String>,
    /// basicAuth username.
    pub username: Option<String>,
    /// basicAuth password (`None` when empty).
    pub password: Option<Sealed<String>>,
    /// tlsConfig.
    pub tls: Option<ResolvedTls>,
}

/// A resolved `tlsConfig`.
#[derive(Debug, Clone)]
pub struct ResolvedTls {
    /// CA certificate, PEM.
    pub ca_cert: String,
    /// CA key, PEM.
    pub ca_key: Option<Sealed<String>>,
    /// Client certificate and key, PEM.
    pub client: Option<(String, Sealed<String>)>,
}

impl ResolvedDataStore {
    /// Feeds everything that decides provisioning, secrets included, into `digest` (never printed).
    pub(crate) fn digest_into(&self, digest: &mut ring::digest::Context) {
        let mut part = |bytes: &[u8]| {
            digest.update(&(bytes.len() as u64).to_be_bytes());
            digest.update(bytes);
        };
        part(self.name.as_bytes());
        part(self.driver.to_string().as_bytes());
        part(self.endpoints.join(",").as_bytes());
        part(self.username.as_deref().unwrap_or_default().as_bytes());
        part(
            self.password
                .as_ref()
                .map(|p| p.expose().as_str())
                .unwrap_or_default()
                .as_bytes(),
        );
        if let Some(tls) = &self.tls {
            part(tls.ca_cert.as_bytes());
            part(
                tls.ca_key
                    .as_ref()
                    .map(|k| k.expose().as_str())
                    .unwrap_or_default()
                    .as_bytes(),
            );
            if let Some((cert, key)) = &tls.client {
                part(cert.as_bytes());
                part(key.expose().as_bytes());
            }
        }
    }

    /// The CA certificate, if any.
    pub fn ca_cert(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_cert.as_str())
    }
}

pub(crate) fn invalid_config(kind: Driver, message: impl Into<String>) -> DatastoreError {
    DatastoreError::InvalidConfig {
        driver: kind,
        message: message.into(),
    }
}

/// The driver for a resolved DataStore; validates the settings without connecting.
/// Tenant client certificates it mints get keys of `alg`.
pub fn driver(ds: &ResolvedDataStore, alg: KeyAlgorithm) -> Result<AnyDriver, DatastoreError> {
    let kind = ds.driver;
    let client_tls = || {
        ds.tls.as_ref().map(|t| ClientTls {
            ca_cert_pem: t.ca_cert.clone(),
            client_cert_pem: t.client.as_ref().map(|c| c.0.clone()),
            client_key_pem: t.client.as_ref().map(|c| c.1.clone()),
        })
    };
    let first_endpoint = || {
        ds.endpoints
            .first()
            .cloned()
            .ok_or_else(|| invalid_config(kind, "no endpoints"))
    };
    match ds.driver {
        Driver::Etcd => {
            let tls = ds
                .tls
                .as_ref()
                .ok_or_else(|| invalid_config(kind, "etcd needs tlsConfig"))?;
            let ca_key = tls.ca_key.clone().ok_or_else(|| {
                invalid_config(kind, "etcd needs tlsConfig.certificateAuthority.privateKey")
            })?;
            let (cert, key) = tls
                .client
                .clone()
                .ok_or_else(|| invalid_config(kind, "etcd needs tlsConfig.clientCertificate"))?;
            let mut settings = EtcdSettings::new(
                ds.endpoints.clone(),
                CertKey {
                    cert_pem: tls.ca_cert.clone(),
                    key_pem: ca_key.expose().clone(),
                },
                cert,
                key,
            );
            settings.key_algorithm = alg;
            Ok(AnyDriver::Etcd(std::sync::Arc::new(EtcdDriver::new(settings)?)))
        }
        Driver::PostgreSQL | Driver::MySQL => {
            let mut settings = SqlSettings::new(
                first_endpoint()?,
                ds.username.clone().unwrap_or_default(),
                ds.password.clone(),
            );
            settings.tls = client_tls();
            if ds.driver == Driver::PostgreSQL {
                Ok(AnyDriver::Postgres(PostgresDriver::new(settings)?))
            } else {
                Ok(AnyDriver::MySql(MySqlDriver::new(settings)?))
            }
        }
        Driver::Nats => {
            let mut settings = NatsSettings::new(ds.endpoints.clone());
            settings.username = ds.username.clone();
            settings.password = ds.password.clone();
            settings.tls = client_tls();
            Ok(AnyDriver::Nats(NatsDriver::new(settings)?))
        }
    }
}

// === conditions ===

/// Builds conditions, keeping `lastTransitionTime` of those whose status did not change.
#[derive(Debug)]
pub struct Conditions<'a> {
    previous: &'a [Condition],
    generation: Option<i64>,
    now: Timestamp,
    out: Vec<Condition>,
}

impl<'a> Conditions<'a> {
    /// Conditions for an object of `generation` whose current conditions are `previous`.
    pub fn new(previous: &'a [Condition], generation: Option<i64>, now: Timestamp) -> Self {
        Self {
            previous,
            generation,
            now,
            out: Vec::new(),
        }
    }

    /// Sets condition `type_` (replacing an earlier one of the same type).
    pub fn set(&mut self, type_: &str, status: Option<bool>, reason: &str, message: impl Into<String>) {
        let status = match status {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        };
        let last_transition_time = self
            .previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or(Time(self.now));
        self.out.retain(|c| c.type_ != type_);
        self.out.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: self.generation,
            last_transition_time,
        });
    }

    /// The condition of `type_` set so far.
    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.out.iter().find(|c| c.type_ == type_)
    }

    /// The conditions, in the order they were first set.
    pub fn into_vec(self) -> Vec<Condition> {
        self.out
    }
}

/// The outcome of validating and checking a DataStore.
#[derive(Debug)]
pub struct DataStoreHealth {
    /// `Err` when a ContentRef or the driver settings are wrong.
    pub validated: Result<(), Error>,
    /// `None` when not checked (not validated); else the check's result.
    pub reachable: Option<Result<(), DatastoreError>>,
}

/// The DataStore's conditions; the first failure, if any, is returned for the Event and the requeue.
pub fn datastore_conditions(
    conditions: &mut Conditions<'_>,
    health: &DataStoreHealth,
    deleting: bool,
    used_by: &[String],
) -> bool {
    use ds_conditions::*;
    match &health.validated {
        Ok(()) => conditions.set(
            VALIDATED,
            Some(true),
            "DataStoreIsValid",
            "every credential resolved",
        ),
        Err(e) => conditions.set(VALIDATED, Some(false), e.reason(), e.to_string()),
    }
    match &health.reachable {
        Some(Ok(())) => conditions.set(
            REACHABLE,
            Some(true),
            "DataStoreReachable",
            "the datastore accepted the DataStore's credentials",
        ),
        Some(Err(e)) => conditions.set(REACHABLE, Some(false), e.reason(), e.to_string()),
        None => conditions.set(
            REACHABLE,
            None,
            "NotValidated",
            "not checked: the DataStore is not valid",
        ),
    }
    let ready = health.validated.is_ok() && matches!(health.reachable, Some(Ok(())));
    if ready {
        conditions.set(READY, Some(true), "DataStoreReady", "validated and reachable");
    } else {
        let failing = [VALIDATED, REACHABLE]
            .into_iter()
            .filter_map(|t| conditions.get(t))
            .find(|c| c.status != "True")
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap_or_default();
        conditions.set(READY, Some(false), &failing.0, failing.1);
    }
    if deleting && !used_by.is_empty() {
        conditions.set(
            DELETION_BLOCKED,
            Some(true),
            "DataStoreStillUsed",
            format!(
                "deletion waits until no TenantControlPlane uses this DataStore; used by {}",
                used_by.join(", ")
            ),
        );
    }
    ready
}

// === Secrets ===

/// SHA-256 (hex) of a Secret's data, in key order.
pub fn checksum(data: &BTreeMap<String, ByteString>) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for (key, value) in data {
        ctx.update(&(key.len() as u64).to_be_bytes());
        ctx.update(key.as_bytes());
        ctx.update(&(value.0.len() as u64).to_be_bytes());
        ctx.update(&value.0);
    }
    ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a Secret's data still matches its checksum annotation (no one edited it).
pub fn untampered(secret: &Secret) -> bool {
    let data = secret.data.clone().unwrap_or_default();
    secret.annotations().get(CHECKSUM_ANNOTATION) == Some(&checksum(&data))
}

/// The owner reference of the Secrets.
pub fn owner(tcp: &TenantControlPlane) -> Result<OwnerReference, Error> {
    tcp.controller_owner_ref(&())
        .ok_or(Error::MissingObjectKey(".metadata.uid"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::k8s::crd::{
        DataStoreOverride, OverrideStorageStatus, StorageStatus, TenantControlPlaneStatus,
    };

    fn tcp(ns: &str, name: &str, uid: &str) -> TenantControlPlane {
        tenantplane_testkit::tcp(ns, name)
            .uid(uid)
            .created("2026-01-01T00:00:00Z")
            .datastore("primary")
            .build()
    }

    #[test]
    fn backoff_doubles_from_one_second_up_to_five_minutes() {
        assert_eq!(backoff(0), Duration::from_secs(1));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(40), Duration::from_secs(300));
    }

    #[test]
    fn used_by_counts_spec_and_status_overrides_and_the_primary() {
        let mut a = tcp("ns", "a", "u1");
        a.spec.data_store_overrides = Some(vec![DataStoreOverride {
            resource: "/events".into(),
            data_store: "events".into(),
        }]);
        let mut b = tcp("ns", "b", "u2");
        b.spec.data_store = Some("other".into());
        b.status = Some(TenantControlPlaneStatus {
            storage: Some(StorageStatus {
                overrides: vec![OverrideStorageStatus {
                    resource: "/leases".into(),
                    data_store_name: Some("events".into()),
                    setup: None,
                }],
                ..StorageStatus::default()
            }),
            ..TenantControlPlaneStatus::default()
        });
        let tcps = vec![b.clone(), a.clone()];
        assert_eq!(used_by("events", &tcps), vec!["ns/a", "ns/b"]);
        assert_eq!(used_by("primary", &tcps), vec!["ns/a"]);
        assert!(used_by("nothing", &tcps).is_empty());
    }

    #[test]
    fn conditions_keep_their_transition_time_while_the_status_holds() {
        let earlier: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let mut first = Conditions::new(&[], Some(1), earlier);
        first.set("Ready", Some(true), "DataStoreReady", "ok");
        let previous = first.into_vec();
        let mut second = Conditions::new(&previous, Some(2), later);
        second.set("Ready", Some(true), "DataStoreReady", "still ok");
        second.set("Reachable", Some(false), "DataStoreUnreachable", "refused");
        let out = second.into_vec();
        assert_eq!(out[0].last_transition_time, Time(earlier));
        assert_eq!(out[0].observed_generation, Some(2));
        assert_eq!(out[1].last_transition_time, Time(later));
    }

    #[test]
    fn datastore_conditions_name_the_failure_and_who_blocks_deletion() {
        let health = DataStoreHealth {
            validated: Ok(()),
            reachable: Some(Err(DatastoreError::Unreachable {
                driver: Driver::PostgreSQL,
                endpoint: "127.0.0.1:1".into(),
                message: "connection refused".into(),
            })),
        };
        let mut c = Conditions::new(&[], Some(1), Timestamp::now());
        let ready = datastore_conditions(&mut c, &health, true, &["ns/a".into()]);
        assert!(!ready);
        let ready = c.get("Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "DataStoreUnreachable")
        );
        assert!(ready.message.contains("is unreachable"), "{}", ready.message);
        let blocked = c.get("DeletionBlocked").unwrap();
        assert_eq!(blocked.status, "True");
        assert!(blocked.message.ends_with("used by ns/a"), "{}", blocked.message);

        let invalid = DataStoreHealth {
            validated: Err(Error::Invalid {
                reason: "SecretKeyMissing",
                message: "secret ns/s does not have key K".into(),
            }),
            reachable: None,
        };
        let mut c = Conditions::new(&[], Some(1), Timestamp::now());
        datastore_conditions(&mut c, &invalid, false, &[]);
        assert_eq!(c.get("Reachable").unwrap().status, "Unknown");
        assert_eq!(c.get("Ready").unwrap().message, "secret ns/s does not have key K");
        assert!(c.get("DeletionBlocked").is_none());
    }

    #[test]
    fn checksums_depend_on_keys_and_values() {
        let a = BTreeMap::from([("k".to_string(), ByteString(b"v".to_vec()))]);
        let b = BTreeMap::from([("kv".to_string(), ByteString(b"".to_vec()))]);
        assert_ne!(checksum(&a), checksum(&b));
        assert_eq!(checksum(&a).len(), 64);
    }
}
