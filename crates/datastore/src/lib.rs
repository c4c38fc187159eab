//! Datastore drivers: provision and remove each tenant's user and space on a shared datastore.
//!
//! One [`Driver`] per backend, each built from plain connection settings (no Kubernetes types: resolving
//! a DataStore's Secrets is the controller's job):
//! - [`etcd::EtcdDriver`]: a certificate-auth user, a role with read-write on exactly `/<schema>/`, and a
//!   client certificate minted with the DataStore's CA key;
//! - [`postgres::PostgresDriver`]: a LOGIN role owning a database that `PUBLIC` cannot connect to;
//! - [`mysql::MySqlDriver`]: a database and a user with the privileges kine needs on it only;
//! - [`nats::NatsDriver`]: a JetStream KV bucket for kine; one tenant per NATS server.
//!
//! Every operation is idempotent. Errors are [`DatastoreError`]s that tell transient from permanent
//! failures and never carry passwords or keys.
//!
//! **Ownership.** Every name a tenant holds (schema and user) is owned by exactly one
//! TenantControlPlane UID ([`Owner`]), recorded in the datastore itself next to the name: an etcd key
//! outside every tenant's range, `COMMENT ON ROLE/DATABASE` in PostgreSQL, a registry table in
//! MySQL/MariaDB, the `tenantplane-owners` KV bucket in NATS (key = the kine bucket's name).
//! Provisioning claims a free name atomically, works on a name marked with the caller's UID, and refuses a
//! name marked with another UID ([`DatastoreError::NameTaken`]) or an existing name without a marker
//! ([`DatastoreError::ForeignObject`]: never adopted). Deprovisioning removes only what is marked with
//! the caller's UID.

use tenantplane_core::secret;
use tenantplane_crd as k8s;
use tenantplane_pki as pki;

pub mod etcd;
pub mod migrate;
pub mod mysql;
pub mod nats;
pub mod postgres;
mod sql;

use std::{fmt, future::Future, time::Duration};

use crate::{k8s::crd, secret::Secret};

/// Default time allowed to connect and for each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest schema or user name accepted (the CRD's limit, and PostgreSQL's identifier length).
pub const MAX_NAME_LEN: usize = 63;

/// Provisions tenants on one datastore. Every operation is idempotent.
pub trait Driver: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> crd::Driver;

    /// Connects with the root credentials and proves that they work.
    fn check(&self) -> impl Future<Output = Result<(), DatastoreError>> + Send;

    /// Creates the tenant's user and space, or brings existing ones back to the expected state, and
    /// returns credentials that work now.
    fn provision(
        &self,
        tenant: &TenantSpace,
    ) -> impl Future<Output = Result<TenantCredentials, DatastoreError>> + Send;

    /// Removes this tenant's space and user where they are marked with the tenant's owner; what is
    /// already gone is fine, and what belongs to anybody else is left alone and reported.
    fn deprovision(
        &self,
        tenant: &TenantSpace,
    ) -> impl Future<Output = Result<Deprovisioned, DatastoreError>> + Send;

    /// Refuses `tenant` unless its names exist here and carry its owner's marker: a space named by
    /// anything but this datastore (a status field, a journal) is acted on only after this check.
    fn check_owned(&self, tenant: &TenantSpace) -> impl Future<Output = Result<(), DatastoreError>> + Send;

    /// What identifies the server behind the endpoints, whatever they are called (two DataStore objects
    /// naming one server answer the same): etcd's cluster ID, PostgreSQL's system identifier, a random
    /// identity recorded once in the MySQL/MariaDB and NATS ownership registries.
    fn server_identity(&self) -> impl Future<Output = Result<String, DatastoreError>> + Send;
}

/// The TenantControlPlane that owns a tenant's names on a datastore: its UID decides, its
/// `namespace/name` is recorded for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    uid: String,
    tcp: String,
}

/// The start of every ownership marker.
const MARKER_PREFIX: &str = "tenantplane.io/owner";

impl Owner {
    /// The owner with this UID and `namespace`/`name` (UIDs are `[A-Za-z0-9-]`, names DNS labels).
    pub fn new(uid: &str, namespace: &str, name: &str) -> Result<Self, DatastoreError> {
        let invalid = |field: &'static str, value: &str| DatastoreError::InvalidName {
            field,
            value: value.chars().take(80).collect(),
            reason: "an owner's UID, namespace and name are 1 to 253 characters of [a-z0-9.-]".into(),
        };
        let fits = |v: &str, extra: u8| {
            !v.is_empty()
                && v.len() <= 253
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == extra)
        };
        if !fits(uid, b'-') {
            return Err(invalid("owner uid", uid));
        }
        if !fits(namespace, b'.') || !fits(name, b'.') {
            return Err(invalid("owner name", &format!("{namespace}/{name}")));
        }
        Ok(Self {
            uid: uid.to_string(),
            tcp: format!("{namespace}/{name}"),
        })
    }

    /// The owning TenantControlPlane's UID.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The owning TenantControlPlane as `namespace/name`.
    pub fn tcp(&self) -> &str {
        &self.tcp
    }

    /// The marker text recorded with each owned name: `tenantplane.io/owner uid=<uid> tcp=<ns>/<name>`.
    pub fn marker(&self) -> String {
        format!("{MARKER_PREFIX} uid={} tcp={}", self.uid, self.tcp)
    }

    /// Parses a marker written by [`Owner::marker`]; `None` for any other text.
    pub fn from_marker(text: &str) -> Option<Self> {
        let rest = text.trim().strip_prefix(MARKER_PREFIX)?;
        let mut parts = rest.split_whitespace();
        let uid = parts.next()?.strip_prefix("uid=")?;
        let (namespace, name) = parts.next()?.strip_prefix("tcp=")?.split_once('/')?;
        if parts.next().is_some() {
            return None;
        }
        Self::new(uid, namespace, name).ok()
    }

    /// How a name whose recorded marker is `marker` (none: unmarked) stands towards this owner.
    pub fn judge(&self, marker: Option<&str>) -> Claim {
        match marker.and_then(Owner::from_marker) {
            Some(owner) if owner.uid == self.uid => Claim::Ours,
            Some(owner) => Claim::Other(owner),
            None => Claim::Unmarked,
        }
    }
}

/// How an existing name stands towards an [`Owner`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Marked with the owner's UID.
    Ours,
    /// Marked with another TenantControlPlane's UID.
    Other(Owner),
    /// Exists without a marker (or with one this code did not write): never adopted, never deleted.
    Unmarked,
}

impl Claim {
    /// `Ok` for [`Claim::Ours`]; else the refusal: [`DatastoreError::NameTaken`] naming the owner, or
    /// [`DatastoreError::ForeignObject`] saying that the `kind` (e.g. "database") exists unmarked.
    pub(crate) fn accept(
        self,
        driver: crd::Driver,
        endpoint: &str,
        (field, kind): (&'static str, &str),
        name: &str,
    ) -> Result<(), DatastoreError> {
        match self {
            Claim::Ours => Ok(()),
            Claim::Other(owner) => Err(DatastoreError::NameTaken {
                driver,
                endpoint: endpoint.to_string(),
                field,
                name: name.to_string(),
                owner: owner.tcp().to_string(),
            }),
            Claim::Unmarked => Err(DatastoreError::ForeignObject {
                driver,
                endpoint: endpoint.to_string(),
                message: format!("{kind} {name:?} exists but was not created for this TenantControlPlane"),
            }),
        }
    }
}

/// The refusal of a name that [`Driver::check_owned`] expected and found missing.
pub(crate) fn missing(driver: crd::Driver, endpoint: &str, kind: &str, name: &str) -> DatastoreError {
    DatastoreError::ForeignObject {
        driver,
        endpoint: endpoint.to_string(),
        message: format!("{kind} {name:?} does not exist, so it is not this TenantControlPlane's"),
    }
}

/// What deprovisioning left alone because it is not marked with the caller's UID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deprovisioned {
    /// One sentence per name left alone, e.g. `user "u" belongs to another TenantControlPlane` (never
    /// naming it: the sentences reach the caller's Events).
    pub left_alone: Vec<String>,
}

impl Deprovisioned {
    /// Records that `field` `name` was left alone because of `claim` (nothing for [`Claim::Ours`]).
    pub(crate) fn note(&mut self, field: &str, name: &str, claim: &Claim) {
        match claim {
            Claim::Ours => {}
            Claim::Other(_) => self
                .left_alone
                .push(format!("{field} {name:?} belongs to another TenantControlPlane")),
            Claim::Unmarked => self.left_alone.push(format!(
                "{field} {name:?} has no ownership marker of this TenantControlPlane"
            )),
        }
    }
}

/// A tenant's space (SQL database, etcd key prefix `/<schema>/`, NATS bucket) and user on a datastore,
/// and the TenantControlPlane that owns both.
///
/// Both names default to the TenantControlPlane's UID (Kamaji's rule). Names are 1 to 63 characters of
/// `[A-Za-z0-9_.-]`: this covers UIDs and Kamaji's historical `<namespace>_<name>` names, and keeps `/`
/// (which would let `/a/` cover `/a/b/...` in etcd) and quoting characters out. Each driver also refuses
/// the names it reserves (`root`, `postgres`, `mysql`, ...).
#[derive(Clone, PartialEq, Eq)]
pub struct TenantSpace {
    schema: String,
    user: String,
    owner: Owner,
    password: Option<Secret<String>>,
    client_certificate: Option<(String, Secret<String>)>,
}

impl fmt::Debug for TenantSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantSpace")
            .field("schema", &self.schema)
            .field("user", &self.user)
            .field("owner", &self.owner)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field(
                "client_certificate",
                &self.client_certificate.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl TenantSpace {
    /// A tenant with the given schema and user names, owned by `owner`.
    pub fn new(
        schema: impl Into<String>,
        user: impl Into<String>,
        owner: Owner,
    ) -> Result<Self, DatastoreError> {
        let schema = schema.into();
        let user = user.into();
        validate_name("schema", &schema)?;
        validate_name("user", &user)?;
        Ok(Self {
            schema,
            user,
            owner,
            password: None,
            client_certificate: None,
        })
    }

    /// A tenant whose schema and user are both the owner's UID (Kamaji's default).
    pub fn from_owner(owner: Owner) -> Result<Self, DatastoreError> {
        let uid = owner.uid().to_string();
        Self::new(uid.clone(), uid, owner)
    }

    /// The TenantControlPlane that owns the schema and the user.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Keeps the SQL password stable: [`Driver::provision`] sets this password (also on an existing
    /// user) instead of generating a new one. Pass the password stored from an earlier provisioning.
    pub fn with_password(mut self, password: Secret<String>) -> Self {
        self.password = Some(password);
        self
    }

    /// The etcd client certificate and key the tenant already holds (from its own Secret). With it,
    /// names made for the tenant before ownership markers existed are adopted — but only if etcd
    /// accepts the certificate for the tenant's prefix (proof of possession: it grants nothing new).
    /// SQL drivers use the password given with [`TenantSpace::with_password`] the same way.
    pub fn with_client_certificate(mut self, cert_pem: String, key_pem: Secret<String>) -> Self {
        self.client_certificate = Some((cert_pem, key_pem));
        self
    }

    /// The client certificate given with [`TenantSpace::with_client_certificate`], if any.
    pub fn client_certificate(&self) -> Option<&(String, Secret<String>)> {
        self.client_certificate.as_ref()
    }

    /// The space: SQL database, etcd prefix `/<schema>/`, NATS bucket (see [`nats::bucket_name`]).
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password given with [`TenantSpace::with_password`], if any.
    pub fn password(&self) -> Option<&Secret<String>> {
        self.password.as_ref()
    }

    /// The given password, or a new random one (32 alphanumeric characters).
    pub(crate) fn password_or_random(&self) -> Secret<String> {
        self.password.clone().unwrap_or_else(random_password)
    }
}

fn validate_name(field: &'static str, value: &str) -> Result<(), DatastoreError> {
    let invalid = |reason: &str| DatastoreError::InvalidName {
        field,
        value: value.chars().take(80).collect(),
        reason: reason.to_string(),
    };
    if value.is_empty() {
        return Err(invalid("it is empty"));
    }
    if value.len() > MAX_NAME_LEN {
        return Err(invalid("it is longer than 63 characters"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(invalid("only letters, digits, '_', '.' and '-' are allowed"));
    }
    Ok(())
}

/// Refuses a name that a driver reserves (compared case-insensitively).
pub(crate) fn refuse_reserved(
    field: &'static str,
    value: &str,
    reserved: &[&str],
    reserved_prefixes: &[&str],
) -> Result<(), DatastoreError> {
    let lower = value.to_ascii_lowercase();
    if reserved.contains(&lower.as_str()) || reserved_prefixes.iter().any(|p| lower.starts_with(p)) {
        return Err(DatastoreError::InvalidName {
            field,
            value: value.to_string(),
            reason: "the datastore reserves this name".into(),
        });
    }
    Ok(())
}

/// A random password of 32 characters from `[A-Za-z0-9]` (about 190 bits), from two v4 UUIDs.
pub(crate) fn random_password() -> Secret<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 32];
    bytes[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    // 62 does not divide 256, so a plain modulo is slightly biased; the bias is negligible here.
    let password = bytes
        .iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    Secret::new(password)
}

/// TLS towards a SQL or NATS DataStore: the server certificate is verified against `ca_cert_pem` and
/// the endpoint's host name (PostgreSQL `verify-full`, MySQL `VERIFY_IDENTITY`).
#[derive(Clone)]
pub struct ClientTls {
    /// The CA certificate, PEM.
    pub ca_cert_pem: String,
    /// A client certificate, PEM, if the server wants one.
    pub client_cert_pem: Option<String>,
    /// The client certificate's key, PEM.
    pub client_key_pem: Option<Secret<String>>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca_cert_pem", &"<pem>")
            .field("client_cert_pem", &self.client_cert_pem.as_ref().map(|_| "<pem>"))
            .field("client_key_pem", &self.client_key_pem)
            .finish()
    }
}

/// How to reach a SQL DataStore as its root user. Like Kamaji, only the first DataStore endpoint is used.
#[derive(Debug, Clone)]
pub struct SqlSettings {
    /// The server, bare `host:port`.
    pub endpoint: String,
    /// The root user.
    pub username: String,
    /// The root user's password, if it has one.
    pub password: Option<Secret<String>>,
    /// TLS, if the DataStore has a `tlsConfig`; plain TCP otherwise.
    pub tls: Option<ClientTls>,
    /// Time allowed to connect and for each operation.
    pub timeout: Duration,
}

impl SqlSettings {
    /// Settings for `endpoint` as `username`/`password`, without TLS, with the default timeout.
    pub fn new(
        endpoint: impl Into<String>,
        username: impl Into<String>,
        password: Option<Secret<String>>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            username: username.into(),
            password,
            tls: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// What a tenant's kube-apiserver (etcd) or kine (SQL, NATS) needs to reach its space.
#[derive(Debug, Clone)]
pub enum TenantCredentials {
    /// etcd: a client certificate whose CN is the user, and the key prefix.
    Etcd(EtcdCredentials),
    /// PostgreSQL or MySQL: user, password and database.
    Sql(SqlCredentials),
    /// NATS: the bucket and the DataStore's own connection credentials.
    Nats(NatsCredentials),
}

/// etcd credentials for `--etcd-servers`, `--etcd-prefix`, `--etcd-certfile`/`--etcd-keyfile`.
#[derive(Clone)]
pub struct EtcdCredentials {
    /// The etcd user (the certificate's CN).
    pub user: String,
    /// The key prefix with a trailing slash, `/<schema>/`. kube-apiserver's `--etcd-prefix` is `/<schema>`.
    pub prefix: String,
    /// Client certificate, PEM, signed by the DataStore's CA.
    pub client_cert_pem: String,
    /// The certificate's private key, PEM (PKCS#8).
    pub client_key_pem: Secret<String>,
    /// The DataStore's CA certificate, PEM.
    pub ca_cert_pem: String,
}

impl fmt::Debug for EtcdCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCredentials")
            .field("user", &self.user)
            .field("prefix", &self.prefix)
            .field("client_cert_pem", &"<pem>")
            .field("client_key_pem", &self.client_key_pem)
            .field("ca_cert_pem", &"<pem>")
            .finish()
    }
}

/// SQL credentials for kine's `--endpoint` (Kamaji's `DB_USER`, `DB_PASSWORD`, `DB_SCHEMA`).
#[derive(Debug, Clone)]
pub struct SqlCredentials {
    /// The tenant's user.
    pub user: String,
    /// The tenant's password.
    pub password: Secret<String>,
    /// The tenant's database.
    pub database: String,
    /// The endpoint kine connects to, `host:port` (the first DataStore endpoint).
    pub endpoint: String,
}

/// NATS credentials for kine's `--endpoint`: like Kamaji, these are the DataStore's own credentials
/// (NATS has no per-tenant users here; see the module docs of [`nats`]).
#[derive(Debug, Clone)]
pub struct NatsCredentials {
    /// The tenant's KV bucket (kine's `bucket=`).
    pub bucket: String,
    /// The endpoints, `host:port`.
    pub endpoints: Vec<String>,
    /// The DataStore's user, if it uses basic auth.
    pub username: Option<String>,
    /// The DataStore's password, if it uses basic auth.
    pub password: Option<Secret<String>>,
}

/// Why a datastore operation failed; [`DatastoreError::is_transient`] says whether a retry may help.
/// Messages never contain passwords or private keys.
#[derive(Debug, thiserror::Error)]
pub enum DatastoreError {
    /// The server could not be reached (connection refused, reset, DNS). Transient.
    #[error("{driver} datastore at {endpoint} is unreachable: {message}")]
    Unreachable {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint(s) tried.
        endpoint: String,
        /// What failed.
        message: String,
    },
    /// The server did not answer in time. Transient.
    #[error("{driver} datastore at {endpoint} did not answer within {}s while trying to {operation}", .timeout.as_secs())]
    Timeout {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint(s) tried.
        endpoint: String,
        /// What was being done.
        operation: &'static str,
        /// The time allowed.
        timeout: Duration,
    },
    /// The server refused the DataStore's credentials. Permanent until the DataStore changes.
    #[error("{driver} datastore at {endpoint} rejected the DataStore's credentials: {message}")]
    Unauthorized {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint(s) tried.
        endpoint: String,
        /// The server's answer.
        message: String,
    },
    /// The DataStore's user may not do what provisioning needs. Permanent until it gets the privilege.
    #[error(
        "{driver} datastore at {endpoint} denied the DataStore's user the right to {operation}: {message}"
    )]
    PermissionDenied {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint(s) tried.
        endpoint: String,
        /// What was being done.
        operation: &'static str,
        /// The server's answer.
        message: String,
    },
    /// The connection settings cannot work (endpoint syntax, PEM, CA key, TLS setup). Permanent.
    #[error("invalid {driver} datastore configuration: {message}")]
    InvalidConfig {
        /// The backend.
        driver: crd::Driver,
        /// What is wrong.
        message: String,
    },
    /// A tenant's schema or user name cannot be used. Permanent.
    #[error("invalid tenant {field} {value:?}: {reason}")]
    InvalidName {
        /// `schema` or `user`.
        field: &'static str,
        /// The name (at most 80 characters of it).
        value: String,
        /// Why.
        reason: String,
    },
    /// A NATS server holds one tenant, and another tenant's kine bucket is already there. Permanent
    /// until that tenant is removed.
    #[error(
        "NATS datastore at {endpoint} already holds the kine bucket {holder:?} of another tenant; \
         a NATS DataStore serves one TenantControlPlane, so bucket {requested:?} was not created"
    )]
    NatsInUse {
        /// The endpoint(s).
        endpoint: String,
        /// The other tenant's bucket.
        holder: String,
        /// The bucket this tenant would get.
        requested: String,
    },
    /// Another TenantControlPlane owns the tenant's schema or user on this datastore (its ownership
    /// marker says so), so this one gets no credentials for it. Permanent.
    #[error(
        "{driver} datastore at {endpoint}: {field} {name:?} belongs to another TenantControlPlane; \
         this TenantControlPlane gets no access to it (choose another spec.dataStoreSchema/dataStoreUsername)"
    )]
    NameTaken {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint.
        endpoint: String,
        /// `schema` or `user`.
        field: &'static str,
        /// The name.
        name: String,
        /// `namespace/name` of the owner: for the controller's log only, never in a tenant-visible
        /// message (another tenant's name is not this tenant's business).
        owner: String,
    },
    /// An object with the tenant's name exists but does not belong to the tenant (no ownership marker
    /// of its TenantControlPlane: another application's, or the DataStore's own), so it was left alone.
    /// Permanent until someone looks.
    #[error("{driver} datastore at {endpoint}: {message}; left it alone")]
    ForeignObject {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint.
        endpoint: String,
        /// What was found.
        message: String,
    },
    /// Any other failure reported by the server. Treated as transient.
    #[error("{driver} datastore at {endpoint} failed to {operation}: {message}")]
    Backend {
        /// The backend.
        driver: crd::Driver,
        /// The endpoint(s).
        endpoint: String,
        /// What was being done.
        operation: &'static str,
        /// The server's answer.
        message: String,
    },
}

impl DatastoreError {
    /// A stable CamelCase reason, usable as a condition reason and as a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            DatastoreError::Unreachable { .. } => "DataStoreUnreachable",
            DatastoreError::Timeout { .. } => "DataStoreTimeout",
            DatastoreError::Unauthorized { .. } => "DataStoreUnauthorized",
            DatastoreError::PermissionDenied { .. } => "DataStorePermissionDenied",
            DatastoreError::InvalidConfig { .. } => "DataStoreInvalidConfig",
            DatastoreError::InvalidName { .. } => "TenantNameInvalid",
            DatastoreError::NatsInUse { .. } => "NatsDataStoreInUse",
            DatastoreError::NameTaken { .. } => "DataStoreNameTaken",
            DatastoreError::ForeignObject { .. } => "DataStoreForeignObject",
            DatastoreError::Backend { .. } => "DataStoreError",
        }
    }

    /// Whether retrying later may succeed without anyone changing the DataStore or the tenant.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            DatastoreError::Unreachable { .. }
                | DatastoreError::Timeout { .. }
                | DatastoreError::Backend { .. }
        )
    }
}

/// Replaces every occurrence of `secret` in `message` (servers may echo SQL text, e.g. in syntax errors).
pub(crate) fn redact(message: String, secret: &str) -> String {
    if secret.is_empty() || !message.contains(secret) {
        message
    } else {
        message.replace(secret, "<redacted>")
    }
}

/// Splits `host:port` (IPv6 as `[::1]:5432`).
pub(crate) fn split_host_port(driver: crd::Driver, endpoint: &str) -> Result<(String, u16), DatastoreError> {
    let invalid = || DatastoreError::InvalidConfig {
        driver,
        message: format!("endpoint {endpoint:?} is not host:port"),
    };
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(invalid)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = port.parse::<u16>().map_err(|_| invalid())?;
    if host.is_empty() || port == 0 || host.contains('/') {
        return Err(invalid());
    }
    Ok((host.to_string(), port))
}

/// Runs `future` with `timeout`, turning the elapsed timer into [`DatastoreError::Timeout`].
pub(crate) async fn with_timeout<T>(
    driver: crd::Driver,
    endpoint: &str,
    operation: &'static str,
    timeout: Duration,
    future: impl Future<Output = Result<T, DatastoreError>>,
) -> Result<T, DatastoreError> {
    tokio::time::timeout(timeout, future).await.unwrap_or_else(|_| {
        Err(DatastoreError::Timeout {
            driver,
            endpoint: endpoint.to_string(),
            operation,
            timeout,
        })
    })
}

/// Any driver, for callers that pick the backend at run time (the trait is not object-safe).
#[derive(Debug)]
pub enum AnyDriver {
    /// etcd (shared: it holds the CA signing key and TLS material, and a migration uses it too).
    Etcd(std::sync::Arc<etcd::EtcdDriver>),
    /// PostgreSQL.
    Postgres(postgres::PostgresDriver),
    /// MySQL / MariaDB.
    MySql(mysql::MySqlDriver),
    /// NATS.
    Nats(nats::NatsDriver),
}

impl Driver for AnyDriver {
    fn kind(&self) -> crd::Driver {
        match self {
            AnyDriver::Etcd(d) => d.kind(),
            AnyDriver::Postgres(d) => d.kind(),
            AnyDriver::MySql(d) => d.kind(),
            AnyDriver::Nats(d) => d.kind(),
        }
    }

    async fn check(&self) -> Result<(), DatastoreError> {
        match self {
            AnyDriver::Etcd(d) => d.check().await,
            AnyDriver::Postgres(d) => d.check().await,
            AnyDriver::MySql(d) => d.check().await,
            AnyDriver::Nats(d) => d.check().await,
        }
    }

    async fn provision(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        match self {
            AnyDriver::Etcd(d) => d.provision(tenant).await,
            AnyDriver::Postgres(d) => d.provision(tenant).await,
            AnyDriver::MySql(d) => d.provision(tenant).await,
            AnyDriver::Nats(d) => d.provision(tenant).await,
        }
    }

    async fn deprovision(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        match self {
            AnyDriver::Etcd(d) => d.deprovision(tenant).await,
            AnyDriver::Postgres(d) => d.deprovision(tenant).await,
            AnyDriver::MySql(d) => d.deprovision(tenant).await,
            AnyDriver::Nats(d) => d.deprovision(tenant).await,
        }
    }

    async fn check_owned(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        match self {
            AnyDriver::Etcd(d) => d.check_owned(tenant).await,
            AnyDriver::Postgres(d) => d.check_owned(tenant).await,
            AnyDriver::MySql(d) => d.check_owned(tenant).await,
            AnyDriver::Nats(d) => d.check_owned(tenant).await,
        }
    }

    async fn server_identity(&self) -> Result<String, DatastoreError> {
        match self {
            AnyDriver::Etcd(d) => d.server_identity().await,
            AnyDriver::Postgres(d) => d.server_identity().await,
            AnyDriver::MySql(d) => d.server_identity().await,
            AnyDriver::Nats(d) => d.server_identity().await,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An owner for unit tests.
    pub(crate) fn owner() -> Owner {
        Owner::new("3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7", "tp-acme", "prod").unwrap()
    }

    #[test]
    fn a_uid_is_a_valid_schema_and_user() {
        let tenant = TenantSpace::from_owner(owner()).unwrap();
        assert_eq!(tenant.schema(), "3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7");
        assert_eq!(tenant.user(), "3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7");
        assert!(TenantSpace::new("default_my-cp.v2", "default_my-cp", owner()).is_ok());
    }

    #[test]
    fn markers_round_trip_and_judge_by_uid_only() {
        let mine = owner();
        assert_eq!(
            mine.marker(),
            "tenantplane.io/owner uid=3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7 tcp=tp-acme/prod"
        );
        assert_eq!(Owner::from_marker(&mine.marker()), Some(mine.clone()));
        // Same namespace/name, another UID (a re-created TenantControlPlane): not ours.
        let again = Owner::new("9b1d0000-0000-4000-8000-000000000001", "tp-acme", "prod").unwrap();
        assert_eq!(mine.judge(Some(&again.marker())), Claim::Other(again.clone()));
        assert_eq!(mine.judge(Some(&mine.marker())), Claim::Ours);
        for unmarked in [
            None,
            Some(""),
            Some("my database"),
            Some("tenantplane.io/owner uid=x"),
            Some("tenantplane.io/owner uid=a b tcp=ns/n"),
            Some("tenantplane.io/owner uid=a tcp=ns/n extra"),
        ] {
            assert_eq!(mine.judge(unmarked), Claim::Unmarked, "{unmarked:?}");
        }
        assert!(Owner::new("a'b", "ns", "n").is_err());
        assert!(Owner::new("a", "ns/x", "n").is_err());
    }

    #[test]
    fn names_with_slashes_quotes_or_too_many_characters_are_refused() {
        for bad in [
            "",
            "a/b",
            "a\"b",
            "a`b",
            "a'b",
            "a b",
            "é",
            "a\0b",
            &"x".repeat(64),
        ] {
            let err = TenantSpace::new(bad, "user", owner()).unwrap_err();
            assert_eq!(err.reason(), "TenantNameInvalid", "{bad:?}");
            assert!(!err.is_transient());
            let err = TenantSpace::new("schema", bad, owner()).unwrap_err();
            assert!(err.to_string().starts_with("invalid tenant user"), "{err}");
        }
        assert!(TenantSpace::new("x".repeat(63), "u", owner()).is_ok());
    }

    #[test]
    fn debug_output_hides_the_password() {
        let tenant = TenantSpace::new("t1", "t1", owner())
            .unwrap()
            .with_password(Secret::new("hunter2-secret".into()));
        let debug = format!("{tenant:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        let creds = TenantCredentials::Sql(SqlCredentials {
            user: "t1".into(),
            password: Secret::new("hunter2-secret".into()),
            database: "t1".into(),
            endpoint: "127.0.0.1:5432".into(),
        });
        assert!(!format!("{creds:?}").contains("hunter2"));
        let etcd = EtcdCredentials {
            user: "t1".into(),
            prefix: "/t1/".into(),
            client_cert_pem: "CERT".into(),
            client_key_pem: Secret::new("-----BEGIN PRIVATE KEY-----".into()),
            ca_cert_pem: "CA".into(),
        };
        assert!(!format!("{etcd:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn random_passwords_are_32_alphanumerics_and_differ() {
        let a = random_password();
        let b = random_password();
        assert_eq!(a.expose().len(), 32);
        assert!(a.expose().bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn reasons_and_transience_classify_errors() {
        let unreachable = DatastoreError::Unreachable {
            driver: crd::Driver::PostgreSQL,
            endpoint: "127.0.0.1:1".into(),
            message: "connection refused".into(),
        };
        assert_eq!(unreachable.reason(), "DataStoreUnreachable");
        assert!(unreachable.is_transient());
        let denied = DatastoreError::Unauthorized {
            driver: crd::Driver::MySQL,
            endpoint: "127.0.0.1:3306".into(),
            message: "access denied".into(),
        };
        assert_eq!(denied.reason(), "DataStoreUnauthorized");
        assert!(!denied.is_transient());
        assert_eq!(
            denied.to_string(),
            "MySQL datastore at 127.0.0.1:3306 rejected the DataStore's credentials: access denied"
        );
    }

    #[test]
    fn endpoints_split_into_host_and_port() {
        let kind = crd::Driver::PostgreSQL;
        assert_eq!(
            split_host_port(kind, "db.example:5432").unwrap(),
            ("db.example".into(), 5432)
        );
        assert_eq!(split_host_port(kind, "[::1]:3306").unwrap(), ("::1".into(), 3306));
        for bad in ["db", "db:", ":5432", "db:70000", "db:0", "postgres://db:5432"] {
            assert_eq!(
                split_host_port(kind, bad).unwrap_err().reason(),
                "DataStoreInvalidConfig",
                "{bad}"
            );
        }
    }

    #[test]
    fn redact_removes_every_occurrence_of_the_secret() {
        assert_eq!(
            redact("near 'pw' at 'pw'".into(), "pw"),
            "near '<redacted>' at '<redacted>'"
        );
        assert_eq!(redact("nothing".into(), ""), "nothing");
    }
}
