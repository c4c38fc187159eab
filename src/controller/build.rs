//! The pure middle of both reconcilers: drivers from resolved DataStores, the Secrets of a tenant,
//! conditions and status. No I/O here; everything is unit-tested below.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, OwnerReference, Time},
    jiff::Timestamp,
};
use kube::{Resource as _, ResourceExt as _};

use super::{Error, MANAGED_BY_LABEL};
use crate::{
    datastore::{
        AnyDriver, ClientTls, DatastoreError, DriverKind, Owner, SqlSettings, TenantCredentials, TenantSpace,
        etcd::{EtcdDriver, EtcdSettings},
        mysql::MySqlDriver,
        nats::{NatsDriver, NatsSettings},
        postgres::PostgresDriver,
    },
    k8s::crd::{
        ContentRef, DataStore, DataStoreOverride, Driver, OverrideStorageStatus, SetupStatus, StorageStatus,
        TenantControlPlane,
    },
    pki::{Ca, CertKey, KeyAlgorithm, PkiError},
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

/// Condition types the TenantControlPlane datastore phase owns.
pub mod tcp_conditions {
    /// The tenant's space and user exist on the primary DataStore and the Secrets are written.
    pub const DATASTORE_READY: &str = "DataStoreReady";
    /// Every `spec.dataStoreOverrides` entry is provisioned.
    pub const OVERRIDES_APPLIED: &str = "OverridesApplied";
    /// (NATS only) the DataStore serves this TenantControlPlane alone.
    pub const DATASTORE_EXCLUSIVE: &str = "DataStoreExclusive";
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

/// Every DataStore a TenantControlPlane uses or used: spec primary and overrides, and what status
/// recorded (so overrides removed from the spec but not cleaned up yet still count).
pub fn referenced_datastores(tcp: &TenantControlPlane) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    names.extend(tcp.spec.data_store.clone());
    for o in tcp.spec.data_store_overrides.iter().flatten() {
        names.insert(o.data_store.clone());
    }
    if let Some(storage) = tcp.status.as_ref().and_then(|s| s.storage.as_ref()) {
        names.extend(storage.data_store_name.clone());
        for o in &storage.overrides {
            names.extend(o.data_store_name.clone());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// `namespace/name` of every TenantControlPlane using DataStore `name`, sorted.
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
    fn digest_into(&self, digest: &mut ring::digest::Context) {
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

fn invalid_config(kind: DriverKind, message: impl Into<String>) -> DatastoreError {
    DatastoreError::InvalidConfig {
        driver: kind,
        message: message.into(),
    }
}

fn driver_kind(driver: Driver) -> DriverKind {
    match driver {
        Driver::Etcd => DriverKind::Etcd,
        Driver::MySQL => DriverKind::MySql,
        Driver::PostgreSQL => DriverKind::PostgreSql,
        Driver::Nats => DriverKind::Nats,
    }
}

/// The driver for a resolved DataStore; validates the settings without connecting.
/// Tenant client certificates it mints get keys of `alg`.
pub fn driver(ds: &ResolvedDataStore, alg: KeyAlgorithm) -> Result<AnyDriver, DatastoreError> {
    let kind = driver_kind(ds.driver);
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
            Ok(AnyDriver::Etcd(Box::new(EtcdDriver::new(settings)?)))
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

// === tenant ===

/// Schema and user of the tenant: what status recorded for the primary (names never change under a
/// running tenant), else `spec.dataStoreSchema`/`dataStoreUsername`, else the UID.
pub fn tenant_names(tcp: &TenantControlPlane) -> Result<(String, String), Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let setup = tcp
        .status
        .as_ref()
        .and_then(|s| s.storage.as_ref())
        .and_then(|s| s.setup.as_ref());
    let pick = |recorded: Option<&String>, spec: Option<&String>| {
        recorded
            .or(spec)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| uid.clone())
    };
    Ok((
        pick(
            setup.and_then(|s| s.schema.as_ref()),
            tcp.spec.data_store_schema.as_ref(),
        ),
        pick(
            setup.and_then(|s| s.user.as_ref()),
            tcp.spec.data_store_username.as_ref(),
        ),
    ))
}

/// Schema and user as the spec names them (else the UID), ignoring status.
pub fn spec_names(tcp: &TenantControlPlane) -> Result<(String, String), Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let pick = |spec: Option<&String>| {
        spec.filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| uid.clone())
    };
    Ok((
        pick(tcp.spec.data_store_schema.as_ref()),
        pick(tcp.spec.data_store_username.as_ref()),
    ))
}

/// The owner of the tenant's datastore names: the TenantControlPlane's UID and `namespace/name`.
pub fn datastore_owner(tcp: &TenantControlPlane) -> Result<Owner, Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    Ok(Owner::new(&uid, &namespace, &tcp.name_any())?)
}

/// For a NATS DataStore: the other TenantControlPlane that holds it, if any. The holder is one whose
/// status records the DataStore (it was provisioned there); else, among those naming it in the spec,
/// the oldest (then by `namespace/name`), so two new ones agree on who wins.
pub fn nats_holder(
    tcp: &TenantControlPlane,
    data_store: &str,
    tcps: &[TenantControlPlane],
) -> Option<String> {
    let key = |t: &TenantControlPlane| format!("{}/{}", t.namespace().unwrap_or_default(), t.name_any());
    let me = key(tcp);
    let recorded = |t: &TenantControlPlane| {
        t.status
            .as_ref()
            .and_then(|s| s.storage.as_ref())
            .and_then(|s| s.data_store_name.as_deref())
            == Some(data_store)
    };
    if recorded(tcp) {
        return None;
    }
    if let Some(holder) = tcps.iter().filter(|t| key(t) != me).find(|t| recorded(t)) {
        return Some(key(holder));
    }
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

/// Name of the kine environment Secret.
pub fn config_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-datastore-config", tcp.name_any())
}

/// Name of the datastore certificate Secret.
pub fn certificate_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-datastore-certificate", tcp.name_any())
}

fn data_value(secret: Option<&Secret>, key: &str) -> Option<String> {
    secret
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
}

/// Whether a Secret's data still matches its checksum annotation (no one edited it).
pub fn untampered(secret: &Secret) -> bool {
    let data = secret.data.clone().unwrap_or_default();
    secret.annotations().get(CHECKSUM_ANNOTATION) == Some(&checksum(&data))
}

/// The SQL password to keep: the one in the existing config Secret, if it is for `user` and untampered
/// (as upstream: an edited Secret gets a fresh password).
pub fn reusable_password(existing: Option<&Secret>, user: &str) -> Option<Sealed<String>> {
    let secret = existing.filter(|s| untampered(s))?;
    if data_value(Some(secret), "DB_USER").as_deref() != Some(user) {
        return None;
    }
    data_value(Some(secret), "DB_PASSWORD")
        .filter(|p| !p.is_empty())
        .map(Sealed::new)
}

/// The etcd client certificate to keep: the existing Secret's, when it is untampered, for the same CA
/// and user, and valid for at least 30 more days. Keeping it keeps the Secret (and the pods) stable.
pub fn reusable_certificate(
    existing: Option<&Secret>,
    ca_cert: &str,
    user: &str,
) -> Option<(String, String)> {
    let secret = existing.filter(|s| untampered(s))?;
    if data_value(Some(secret), "ca.crt")?.trim() != ca_cert.trim() {
        return None;
    }
    let cert = data_value(Some(secret), "server.crt")?;
    let key = data_value(Some(secret), "server.key")?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).ok()?;
    let parsed = pem.parse_x509().ok()?;
    let cn_matches = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .eq([user]);
    let remaining = parsed.validity().not_after.timestamp() - Timestamp::now().as_second();
    (cn_matches && remaining > 30 * 24 * 3600).then_some((cert, key))
}

fn owned_secret(
    tcp: &TenantControlPlane,
    owner: OwnerReference,
    name: String,
    data: BTreeMap<String, ByteString>,
) -> Secret {
    let annotations = BTreeMap::from([(CHECKSUM_ANNOTATION.to_string(), checksum(&data))]);
    let labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), tcp.name_any()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: tcp.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

fn bytes(value: impl Into<String>) -> ByteString {
    ByteString(value.into().into_bytes())
}

/// The owner reference of the Secrets.
pub fn owner(tcp: &TenantControlPlane) -> Result<OwnerReference, Error> {
    tcp.controller_owner_ref(&())
        .ok_or(Error::MissingObjectKey(".metadata.uid"))
}

/// `<tcp>-datastore-config`: upstream's kine environment (`DB_CONNECTION_STRING`, `DB_SCHEMA`,
/// `DB_USER`, `DB_PASSWORD`). For etcd the connection string and password are empty, as upstream.
pub fn config_secret(
    tcp: &TenantControlPlane,
    space: &TenantSpace,
    credentials: &TenantCredentials,
) -> Result<Secret, Error> {
    let (connection, user, password) = match credentials {
        TenantCredentials::Etcd(c) => (String::new(), c.user.clone(), String::new()),
        TenantCredentials::Sql(c) => (c.endpoint.clone(), c.user.clone(), c.password.expose().clone()),
        TenantCredentials::Nats(c) => (
            c.endpoints.first().cloned().unwrap_or_default(),
            c.username.clone().unwrap_or_default(),
            c.password
                .as_ref()
                .map(|p| p.expose().clone())
                .unwrap_or_default(),
        ),
    };
    let schema = match credentials {
        TenantCredentials::Nats(c) => c.bucket.clone(),
        _ => space.schema().to_string(),
    };
    let data = BTreeMap::from([
        ("DB_CONNECTION_STRING".to_string(), bytes(connection)),
        ("DB_SCHEMA".to_string(), bytes(schema)),
        ("DB_USER".to_string(), bytes(user)),
        ("DB_PASSWORD".to_string(), bytes(password)),
    ]);
    Ok(owned_secret(tcp, owner(tcp)?, config_secret_name(tcp), data))
}

/// `<tcp>-datastore-certificate` with upstream's keys `ca.crt`, `server.crt`, `server.key`: for etcd the
/// tenant's client certificate (`cert` overrides the freshly minted one to keep it stable); for SQL and
/// NATS the CA certificate and, when the DataStore gives its CA key, a client certificate of the
/// tenant's own (CN = the tenant user). The DataStore's own client certificate and key never leave
/// the DataStore. `None` when the DataStore has no TLS.
pub fn certificate_secret(
    tcp: &TenantControlPlane,
    space: &TenantSpace,
    ds: &ResolvedDataStore,
    credentials: &TenantCredentials,
    cert: Option<(String, String)>,
    alg: KeyAlgorithm,
) -> Result<Option<Secret>, Error> {
    let mut data = BTreeMap::new();
    match credentials {
        TenantCredentials::Etcd(c) => {
            let (cert, key) =
                cert.unwrap_or_else(|| (c.client_cert_pem.clone(), c.client_key_pem.expose().clone()));
            data.insert("ca.crt".to_string(), bytes(c.ca_cert_pem.clone()));
            data.insert("server.crt".to_string(), bytes(cert));
            data.insert("server.key".to_string(), bytes(key));
        }
        _ => {
            let Some(tls) = &ds.tls else {
                return Ok(None);
            };
            data.insert("ca.crt".to_string(), bytes(tls.ca_cert.clone()));
            if let Some(ca_key) = &tls.ca_key {
                let (cert, key) = match cert {
                    Some(kept) => kept,
                    None => tenant_client_certificate(ds, &tls.ca_cert, ca_key, space.user(), alg)?,
                };
                data.insert("server.crt".to_string(), bytes(cert));
                data.insert("server.key".to_string(), bytes(key));
            }
        }
    }
    Ok(Some(owned_secret(
        tcp,
        owner(tcp)?,
        certificate_secret_name(tcp),
        data,
    )))
}

/// A client certificate for `user` (CN), signed with the DataStore's CA key, valid for a year.
fn tenant_client_certificate(
    ds: &ResolvedDataStore,
    ca_cert: &str,
    ca_key: &Sealed<String>,
    user: &str,
    alg: KeyAlgorithm,
) -> Result<(String, String), Error> {
    let invalid = |e: PkiError| {
        Error::Datastore(invalid_config(
            driver_kind(ds.driver),
            format!("cannot mint the tenant's client certificate with the DataStore's CA: {e}"),
        ))
    };
    let ca = Ca::from_pem(CertKey {
        cert_pem: ca_cert.to_string(),
        key_pem: ca_key.expose().clone(),
    })
    .map_err(invalid)?
    .with_key_algorithm(alg);
    let cert = ca
        .client_valid_for(user, &[], crate::datastore::etcd::DEFAULT_CERTIFICATE_VALIDITY)
        .map_err(invalid)?;
    Ok((cert.cert_pem, cert.key_pem))
}

// === status ===

fn now_rfc3339(now: Timestamp) -> String {
    now.to_string()
}

/// A `SecretStatus` for an applied Secret; `lastUpdate` moves only when the checksum changes, so an
/// unchanged reconcile writes an identical status (and triggers no watch event).
pub fn secret_status(
    secret: &Secret,
    previous: Option<&crate::k8s::crd::SecretStatus>,
    now: Timestamp,
) -> crate::k8s::crd::SecretStatus {
    let checksum = secret.annotations().get(CHECKSUM_ANNOTATION).cloned();
    let last_update = match previous {
        Some(p) if p.checksum == checksum && p.last_update.is_some() => p.last_update.clone(),
        _ => Some(now_rfc3339(now)),
    };
    crate::k8s::crd::SecretStatus {
        secret_name: secret.metadata.name.clone(),
        checksum,
        last_update,
    }
}

/// A `SetupStatus`; `lastUpdate` moves only when something else changed.
pub fn setup_status(
    space: &TenantSpace,
    checksum: Option<String>,
    previous: Option<&SetupStatus>,
    now: Timestamp,
) -> SetupStatus {
    let mut setup = SetupStatus {
        schema: Some(space.schema().to_string()),
        user: Some(space.user().to_string()),
        last_update: None,
        checksum,
    };
    setup.last_update = match previous {
        Some(p) if p.schema == setup.schema && p.user == setup.user && p.checksum == setup.checksum => {
            p.last_update.clone().or_else(|| Some(now_rfc3339(now)))
        }
        _ => Some(now_rfc3339(now)),
    };
    setup
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

/// Storage status with everything recorded so far; the datastore phase fills it step by step.
pub fn initial_storage(tcp: &TenantControlPlane) -> StorageStatus {
    tcp.status
        .as_ref()
        .and_then(|s| s.storage.clone())
        .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::{
        datastore::{EtcdCredentials, NatsCredentials, SqlCredentials},
        k8s::crd::TenantControlPlaneStatus,
        pki::{Ca, KeyAlgorithm},
    };

    fn tcp(ns: &str, name: &str, uid: &str) -> TenantControlPlane {
        serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "dataStore": "primary",
                "controlPlane": {"service": {"serviceType": "ClusterIP"}},
                "kubernetes": {"version": "v1.34.0", "kubelet": {}}
            }
        }))
        .unwrap()
    }

    fn resolved(name: &str, driver: Driver, ca: Option<&str>) -> ResolvedDataStore {
        ResolvedDataStore {
            name: name.into(),
            driver,
            endpoints: vec!["127.0.0.1:2379".into()],
            username: None,
            password: None,
            tls: ca.map(|ca| ResolvedTls {
                ca_cert: ca.into(),
                ca_key: None,
                client: None,
            }),
        }
    }

    #[test]
    fn provision_fingerprint_changes_with_credentials_and_overrides_only() {
        let t = tcp("ns", "a", "u1");
        let mut ds = resolved("primary", Driver::PostgreSQL, None);
        ds.password = Some(Sealed::new("one".to_string()));
        let base = provision_fingerprint(&t, "s", "u", &ds, &[]);
        assert_eq!(base.len(), 64);
        assert_eq!(base, provision_fingerprint(&t, "s", "u", &ds.clone(), &[]));
        let mut rotated = ds.clone();
        rotated.password = Some(Sealed::new("two".to_string()));
        assert_ne!(base, provision_fingerprint(&t, "s", "u", &rotated, &[]));
        assert_ne!(base, provision_fingerprint(&t, "s", "other", &ds, &[]));
        assert_ne!(
            base,
            provision_fingerprint(&tcp("ns", "a", "u2"), "s", "u", &ds, &[])
        );
        let events = DataStoreOverride {
            resource: "/events".into(),
            data_store: "events".into(),
        };
        let with_override = provision_fingerprint(&t, "s", "u", &ds, &[(events.clone(), None)]);
        assert_ne!(base, with_override);
        let target = resolved("events", Driver::Etcd, Some("ca"));
        assert_ne!(
            with_override,
            provision_fingerprint(&t, "s", "u", &ds, &[(events, Some(target))])
        );
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
    fn tenant_names_prefer_status_then_spec_then_uid() {
        let mut t = tcp("ns", "a", "the-uid");
        assert_eq!(tenant_names(&t).unwrap(), ("the-uid".into(), "the-uid".into()));
        t.spec.data_store_schema = Some("schema".into());
        assert_eq!(tenant_names(&t).unwrap(), ("schema".into(), "the-uid".into()));
        t.status = Some(TenantControlPlaneStatus {
            storage: Some(StorageStatus {
                setup: Some(SetupStatus {
                    schema: Some("old".into()),
                    user: Some("olduser".into()),
                    ..SetupStatus::default()
                }),
                ..StorageStatus::default()
            }),
            ..TenantControlPlaneStatus::default()
        });
        assert_eq!(tenant_names(&t).unwrap(), ("old".into(), "olduser".into()));
    }

    #[test]
    fn the_older_tcp_holds_a_nats_datastore_unless_the_other_is_already_provisioned() {
        let first = tcp("ns", "first", "u1");
        let mut second = tcp("ns", "second", "u2");
        second.metadata.creation_timestamp = Some(Time("2026-02-01T00:00:00Z".parse().unwrap()));
        let all = vec![first.clone(), second.clone()];
        assert_eq!(nats_holder(&first, "primary", &all), None);
        assert_eq!(nats_holder(&second, "primary", &all), Some("ns/first".into()));
        // Whoever status says was provisioned there keeps it.
        second.status = Some(TenantControlPlaneStatus {
            storage: Some(StorageStatus {
                data_store_name: Some("primary".into()),
                ..StorageStatus::default()
            }),
            ..TenantControlPlaneStatus::default()
        });
        let all = vec![first.clone(), second.clone()];
        assert_eq!(nats_holder(&first, "primary", &all), Some("ns/second".into()));
        assert_eq!(nats_holder(&second, "primary", &all), None);
    }

    #[test]
    fn overrides_must_be_etcd_sharing_the_primarys_ca() {
        let o = |ds: &str| DataStoreOverride {
            resource: "/events".into(),
            data_store: ds.into(),
        };
        let primary = resolved("p", Driver::Etcd, Some("CA1\n"));
        assert!(validate_overrides(&primary, &[]).is_ok());
        assert!(
            validate_overrides(
                &primary,
                &[(o("s"), Some(resolved("s", Driver::Etcd, Some("CA1"))))]
            )
            .is_ok()
        );
        let err = validate_overrides(
            &primary,
            &[(o("s"), Some(resolved("s", Driver::Etcd, Some("CA2"))))],
        )
        .unwrap_err();
        assert_eq!(err.reason(), "OverrideCANotShared");
        assert!(err.to_string().contains("different CA certificate"), "{err}");
        let err = validate_overrides(
            &primary,
            &[(o("m"), Some(resolved("m", Driver::MySQL, Some("CA1"))))],
        )
        .unwrap_err();
        assert_eq!(err.reason(), "OverrideNotEtcd");
        let err = validate_overrides(&primary, &[(o("x"), None)]).unwrap_err();
        assert_eq!(err.to_string(), "override /events: DataStore x not found");
        let pg = resolved("pg", Driver::PostgreSQL, None);
        let err = validate_overrides(&pg, &[(o("s"), Some(resolved("s", Driver::Etcd, None)))]).unwrap_err();
        assert_eq!(err.reason(), "PrimaryNotEtcd");
        assert!(!err.is_transient());
    }

    #[test]
    fn config_secret_carries_upstreams_kine_environment_and_is_owned_by_the_tcp() {
        let t = tcp("ns", "cp", "uid-1");
        let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
        let creds = TenantCredentials::Sql(SqlCredentials {
            user: "uid-1".into(),
            password: Sealed::new("pw".into()),
            database: "uid-1".into(),
            endpoint: "db:5432".into(),
        });
        let secret = config_secret(&t, &space, &creds).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("cp-datastore-config"));
        let data = secret.data.clone().unwrap();
        let get = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(get("DB_CONNECTION_STRING"), "db:5432");
        assert_eq!(get("DB_SCHEMA"), "uid-1");
        assert_eq!(get("DB_USER"), "uid-1");
        assert_eq!(get("DB_PASSWORD"), "pw");
        let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.uid.as_str(), owner.controller), ("uid-1", Some(true)));
        assert!(untampered(&secret));
        assert_eq!(reusable_password(Some(&secret), "uid-1").unwrap().expose(), "pw");
        assert!(reusable_password(Some(&secret), "someone-else").is_none());
        let mut edited = secret.clone();
        edited
            .data
            .as_mut()
            .unwrap()
            .insert("DB_PASSWORD".into(), ByteString(b"x".to_vec()));
        assert!(reusable_password(Some(&edited), "uid-1").is_none());

        let nats = TenantCredentials::Nats(NatsCredentials {
            bucket: "uid-1".into(),
            endpoints: vec!["n:4222".into(), "m:4222".into()],
            username: Some("root".into()),
            password: Some(Sealed::new("rootpw".into())),
        });
        let data = config_secret(&t, &space, &nats).unwrap().data.unwrap();
        assert_eq!(data["DB_CONNECTION_STRING"].0, b"n:4222");
        assert_eq!(data["DB_USER"].0, b"root");
    }

    #[test]
    fn etcd_certificate_secret_is_kept_while_it_fits_and_replaced_when_the_ca_changes() {
        let t = tcp("ns", "cp", "uid-1");
        let ca = Ca::new("ca").unwrap();
        let client = ca.client("uid-1", &["system:masters"]).unwrap();
        let creds = TenantCredentials::Etcd(EtcdCredentials {
            user: "uid-1".into(),
            prefix: "/uid-1/".into(),
            client_cert_pem: client.cert_pem.clone(),
            client_key_pem: Sealed::new(client.key_pem.clone()),
            ca_cert_pem: ca.ca.cert_pem.clone(),
        });
        let ds = resolved("p", Driver::Etcd, Some(&ca.ca.cert_pem));
        let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
        let secret = certificate_secret(&t, &space, &ds, &creds, None, KeyAlgorithm::EcdsaP256)
            .unwrap()
            .unwrap();
        let keys: Vec<_> = secret.data.as_ref().unwrap().keys().cloned().collect();
        assert_eq!(keys, vec!["ca.crt", "server.crt", "server.key"]);
        let kept = reusable_certificate(Some(&secret), &ca.ca.cert_pem, "uid-1").unwrap();
        assert_eq!(kept.0, client.cert_pem);
        assert!(reusable_certificate(Some(&secret), &ca.ca.cert_pem, "other").is_none());
        let other = Ca::new("other").unwrap();
        assert!(reusable_certificate(Some(&secret), &other.ca.cert_pem, "uid-1").is_none());
        // SQL without TLS: no certificate Secret.
        let sql = TenantCredentials::Sql(SqlCredentials {
            user: "u".into(),
            password: Sealed::new("p".into()),
            database: "d".into(),
            endpoint: "e:1".into(),
        });
        assert!(
            certificate_secret(
                &t,
                &space,
                &resolved("pg", Driver::PostgreSQL, None),
                &sql,
                None,
                KeyAlgorithm::EcdsaP256
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn a_sql_tenant_gets_its_own_client_certificate_never_the_datastores() {
        let t = tcp("ns", "cp", "uid-1");
        let space = TenantSpace::from_owner(Owner::new("uid-1", "ns", "cp").unwrap()).unwrap();
        let ca = Ca::new("sql-ca").unwrap();
        let admin = ca.client("postgres", &[]).unwrap();
        let mut ds = resolved("pg", Driver::PostgreSQL, Some(&ca.ca.cert_pem));
        ds.tls.as_mut().unwrap().client = Some((admin.cert_pem.clone(), Sealed::new(admin.key_pem.clone())));
        let sql = TenantCredentials::Sql(SqlCredentials {
            user: "uid-1".into(),
            password: Sealed::new("p".into()),
            database: "uid-1".into(),
            endpoint: "e:1".into(),
        });
        let text = |secret: &Secret| -> BTreeMap<String, String> {
            secret
                .data
                .clone()
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
                .collect()
        };
        // Without the CA key: the CA certificate only.
        let secret = certificate_secret(&t, &space, &ds, &sql, None, KeyAlgorithm::EcdsaP256)
            .unwrap()
            .unwrap();
        assert_eq!(
            text(&secret),
            BTreeMap::from([("ca.crt".to_string(), ca.ca.cert_pem.clone())])
        );
        // With it: a certificate for the tenant user, signed by the CA; the DataStore's pair is absent.
        ds.tls.as_mut().unwrap().ca_key = Some(Sealed::new(ca.ca.key_pem.clone()));
        let data = text(
            &certificate_secret(&t, &space, &ds, &sql, None, KeyAlgorithm::EcdsaP256)
                .unwrap()
                .unwrap(),
        );
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ca.crt", "server.crt", "server.key"]
        );
        assert_ne!(data["server.crt"], admin.cert_pem);
        assert_ne!(data["server.key"], admin.key_pem);
        let (_, pem) = x509_parser::pem::parse_x509_pem(data["server.crt"].as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let cns: Vec<&str> = cert
            .subject()
            .iter_common_name()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(cns, ["uid-1"]);
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.ca.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            cert.issuer().as_raw(),
            ca_pem.parse_x509().unwrap().subject().as_raw()
        );
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
                driver: DriverKind::PostgreSql,
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
    fn stale_overrides_are_those_removed_or_moved() {
        let rec = |r: &str, ds: &str| OverrideStorageStatus {
            resource: r.into(),
            data_store_name: Some(ds.into()),
            setup: None,
        };
        let recorded = vec![rec("/events", "a"), rec("/leases", "b"), rec("/pods", "c")];
        let spec = vec![
            DataStoreOverride {
                resource: "/events".into(),
                data_store: "a".into(),
            },
            DataStoreOverride {
                resource: "/leases".into(),
                data_store: "z".into(),
            },
        ];
        let stale: Vec<_> = stale_overrides(&recorded, &spec)
            .iter()
            .map(|o| o.resource.clone())
            .collect();
        assert_eq!(stale, vec!["/leases", "/pods"]);
    }

    #[test]
    fn checksums_depend_on_keys_and_values() {
        let a = BTreeMap::from([("k".to_string(), ByteString(b"v".to_vec()))]);
        let b = BTreeMap::from([("kv".to_string(), ByteString(b"".to_vec()))]);
        assert_ne!(checksum(&a), checksum(&b));
        assert_eq!(checksum(&a).len(), 64);
    }
}
