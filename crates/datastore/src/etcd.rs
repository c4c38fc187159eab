//! etcd: each tenant is an etcd user authenticated by certificate (CN = user, no password) holding one
//! role, `<schema>`, with READWRITE on exactly the keys under `/<schema>/` (the trailing slash keeps
//! `/cp-a/` from covering `/cp-aa/...`). The tenant's kube-apiserver runs with `--etcd-prefix=/<schema>`
//! and a client certificate this driver mints with the DataStore's CA key.
//!
//! Ownership markers live under `tenantplane.io/owner/{schema,user}/<name>` (no leading `/`, so outside
//! every tenant's range, readable and writable by root only) and are claimed with a put-if-absent
//! transaction. A newly claimed schema must have no role and no keys yet, a newly claimed user no etcd
//! user: an existing, unmarked one is never adopted.
//!
//! The driver talks gRPC with the DataStore's client certificate (etcd's JSON gateway ignores
//! certificate CNs). Provisioning converges: it revokes permissions of the role other than the tenant's
//! range and roles of the user other than `<schema>`, and changes nothing when nothing differs (etcd
//! rebuilds every user's permissions on each auth change). Deprovisioning removes access first (user, then
//! role) and then deletes every key under `/<schema>/`, so a still-running apiserver cannot write keys
//! back after they were deleted.

use std::{fmt, time::Duration};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity, Permission,
    PermissionType, RoleRevokePermissionOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, UserAddOptions,
};

use super::{
    Claim, DEFAULT_TIMEOUT, DatastoreError, Deprovisioned, Driver, EtcdCredentials, Owner, TenantCredentials,
    TenantSpace, refuse_reserved, split_host_port, with_timeout,
};
use crate::k8s::crd;
use crate::{
    pki::{Ca, CertKey, KeyAlgorithm},
    secret::Secret,
};

const KIND: crd::Driver = crd::Driver::Etcd;

/// Default validity of minted tenant client certificates.
pub const DEFAULT_CERTIFICATE_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// How to reach an etcd DataStore (Kamaji requires TLS with a client certificate and the CA key).
#[derive(Clone)]
pub struct EtcdSettings {
    /// Endpoints, bare `host:port` (all are used).
    pub endpoints: Vec<String>,
    /// The CA certificate (PEM) that signed the servers' and clients' certificates.
    pub ca_cert_pem: String,
    /// The CA private key (PEM), to mint tenant client certificates.
    pub ca_key_pem: Secret<String>,
    /// The DataStore's client certificate (PEM); its CN must be an etcd user with the root role.
    pub client_cert_pem: String,
    /// The DataStore's client key (PEM).
    pub client_key_pem: Secret<String>,
    /// Time allowed to connect and for each request.
    pub timeout: Duration,
    /// Validity of minted tenant certificates.
    pub certificate_validity: Duration,
    /// The key type of minted tenant certificates.
    pub key_algorithm: KeyAlgorithm,
}

impl EtcdSettings {
    /// Settings with the default timeout and certificate validity.
    pub fn new(
        endpoints: Vec<String>,
        ca: CertKey,
        client_cert_pem: String,
        client_key_pem: Secret<String>,
    ) -> Self {
        Self {
            endpoints,
            ca_cert_pem: ca.cert_pem,
            ca_key_pem: Secret::new(ca.key_pem),
            client_cert_pem,
            client_key_pem,
            timeout: DEFAULT_TIMEOUT,
            certificate_validity: DEFAULT_CERTIFICATE_VALIDITY,
            key_algorithm: KeyAlgorithm::default(),
        }
    }
}

impl fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("ca_cert_pem", &"<pem>")
            .field("ca_key_pem", &self.ca_key_pem)
            .field("client_cert_pem", &"<pem>")
            .field("client_key_pem", &self.client_key_pem)
            .field("timeout", &self.timeout)
            .field("certificate_validity", &self.certificate_validity)
            .field("key_algorithm", &self.key_algorithm)
            .finish()
    }
}

/// The etcd driver. It keeps one gRPC client (one TLS connection, multiplexed) from its first
/// request on, and drops it after a transient failure.
pub struct EtcdDriver {
    settings: EtcdSettings,
    ca: Ca,
    urls: Vec<String>,
    endpoint_label: String,
    client: std::sync::Mutex<Option<Client>>,
}

impl fmt::Debug for EtcdDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdDriver")
            .field("settings", &self.settings)
            .field("endpoint_label", &self.endpoint_label)
            .finish_non_exhaustive()
    }
}

/// The etcd role of a tenant: named after its schema.
pub fn role_name(tenant: &TenantSpace) -> &str {
    tenant.schema()
}

/// The key prefix of a schema, `/<schema>/`.
pub fn prefix(schema: &str) -> String {
    format!("/{schema}/")
}

/// The ownership marker key of a schema (`field` = `schema`) or user (`field` = `user`).
pub fn marker_key(field: &str, name: &str) -> String {
    format!("tenantplane.io/owner/{field}/{name}")
}

/// The end of the key range that starts with `prefix` (etcd's `range_end`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl EtcdDriver {
    /// Checks the settings (endpoints, PEMs, that the CA key belongs to the CA certificate).
    pub fn new(settings: EtcdSettings) -> Result<Self, DatastoreError> {
        let invalid = |message: String| DatastoreError::InvalidConfig {
            driver: KIND,
            message,
        };
        if settings.endpoints.is_empty() {
            return Err(invalid("no endpoints".into()));
        }
        for endpoint in &settings.endpoints {
            split_host_port(KIND, endpoint)?;
        }
        ensure_key_matches_certificate(&settings.ca_cert_pem, settings.ca_key_pem.expose())?;
        let ca = Ca::from_pem(CertKey {
            cert_pem: settings.ca_cert_pem.clone(),
            key_pem: settings.ca_key_pem.expose().clone(),
        })
        .map_err(|e| invalid(format!("cannot sign with the CA certificate and key: {e}")))?
        .with_key_algorithm(settings.key_algorithm);
        let urls = settings
            .endpoints
            .iter()
            .map(|e| format!("https://{e}"))
            .collect();
        let endpoint_label = settings.endpoints.join(",");
        Ok(Self {
            settings,
            ca,
            urls,
            endpoint_label,
            client: std::sync::Mutex::new(None),
        })
    }

    /// A connected client as the DataStore's root user (the kept one, or a new connection).
    pub(crate) async fn client(&self) -> Result<Client, DatastoreError> {
        self.connect().await
    }

    /// Runs `future`, a few requests to this etcd, within twice the request timeout.
    pub(crate) async fn within_deadline<T>(
        &self,
        operation: &'static str,
        future: impl Future<Output = Result<T, DatastoreError>>,
    ) -> Result<T, DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            operation,
            self.settings.timeout * 2,
            future,
        )
        .await
    }

    /// The endpoints as `host:port,host:port`, for error messages.
    pub(crate) fn endpoint_label(&self) -> &str {
        &self.endpoint_label
    }

    /// Maps an etcd-client error of `operation` to a [`DatastoreError`] (dropping the kept client
    /// after a transient one).
    pub(crate) fn map(&self, operation: &'static str, error: etcd_client::Error) -> DatastoreError {
        self.error(operation, error)
    }

    /// The kept client, or a new connection (kept for the next request).
    async fn connect(&self) -> Result<Client, DatastoreError> {
        if let Some(client) = self.kept_client().clone() {
            return Ok(client);
        }
        let client = self.connect_new().await?;
        *self.kept_client() = Some(client.clone());
        Ok(client)
    }

    fn kept_client(&self) -> std::sync::MutexGuard<'_, Option<Client>> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn connect_new(&self) -> Result<Client, DatastoreError> {
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&self.settings.ca_cert_pem))
            .identity(Identity::from_pem(
                &self.settings.client_cert_pem,
                self.settings.client_key_pem.expose(),
            ))
            .timeout(self.settings.timeout);
        let options = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(self.settings.timeout)
            .with_timeout(self.settings.timeout);
        Client::connect(&self.urls, Some(options))
            .await
            .map_err(|e| self.error("connect", e))
    }

    /// Maps an etcd-client error to a [`DatastoreError`], and drops the kept client after a transient
    /// one, so that the next request reconnects (a permanent one needs new settings, hence a new driver).
    fn error(&self, operation: &'static str, error: etcd_client::Error) -> DatastoreError {
        let mapped = self.map_error(operation, error);
        if mapped.is_transient() {
            *self.kept_client() = None;
        }
        mapped
    }

    fn map_error(&self, operation: &'static str, error: etcd_client::Error) -> DatastoreError {
        use etcd_client::Error as E;
        use tonic::Code;
        let endpoint = self.endpoint_label.clone();
        match error {
            E::GRpcStatus(status) => {
                // The message alone says "tcp connect error"; the sources say why.
                let mut message = status.message().to_string();
                if let Some(source) = std::error::Error::source(&status) {
                    message.push_str(": ");
                    message.push_str(&error_chain(source));
                }
                match status.code() {
                    Code::Unavailable if is_tls_failure(&message) => DatastoreError::InvalidConfig {
                        driver: KIND,
                        message: format!("TLS with {endpoint} failed: {message}"),
                    },
                    Code::Unavailable | Code::Cancelled | Code::Aborted => DatastoreError::Unreachable {
                        driver: KIND,
                        endpoint,
                        message,
                    },
                    Code::DeadlineExceeded => DatastoreError::Timeout {
                        driver: KIND,
                        endpoint,
                        operation,
                        timeout: self.settings.timeout,
                    },
                    Code::Unauthenticated => DatastoreError::Unauthorized {
                        driver: KIND,
                        endpoint,
                        message,
                    },
                    Code::PermissionDenied => DatastoreError::PermissionDenied {
                        driver: KIND,
                        endpoint,
                        operation,
                        message,
                    },
                    _ => DatastoreError::Backend {
                        driver: KIND,
                        endpoint,
                        operation,
                        message,
                    },
                }
            }
            E::TransportError(e) => DatastoreError::Unreachable {
                driver: KIND,
                endpoint,
                message: error_chain(&e),
            },
            E::IoError(e) => DatastoreError::Unreachable {
                driver: KIND,
                endpoint,
                message: e.to_string(),
            },
            E::InvalidArgs(m) | E::EndpointError(m) => DatastoreError::InvalidConfig {
                driver: KIND,
                message: m,
            },
            E::InvalidUri(e) => DatastoreError::InvalidConfig {
                driver: KIND,
                message: e.to_string(),
            },
            other => DatastoreError::Backend {
                driver: KIND,
                endpoint,
                operation,
                message: other.to_string(),
            },
        }
    }

    fn check_names(tenant: &TenantSpace) -> Result<(), DatastoreError> {
        refuse_reserved("schema", tenant.schema(), &["root"], &[])?;
        refuse_reserved("user", tenant.user(), &["root"], &[])
    }

    /// Claims `field` `name` for `owner` in one put-if-absent transaction: a concurrent claim by
    /// another owner wins, and this one is refused.
    async fn claim(
        &self,
        client: &Client,
        field: &'static str,
        name: &str,
        owner: &Owner,
    ) -> Result<(), DatastoreError> {
        let key = marker_key(field, name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), owner.marker(), None)])
            .or_else([TxnOp::get(key, None)]);
        let response = resending_stale_auth(client, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map_err(|e| self.error("claim the tenant name", e))?;
        if response.succeeded() {
            return Ok(());
        }
        match owner.judge(marker_value(&response).as_deref()) {
            Claim::Ours => Ok(()),
            Claim::Other(other) => Err(self.taken(field, name, &other)),
            Claim::Unmarked => Err(self.foreign(format!(
                "the ownership marker of {field} {name:?} is not readable"
            ))),
        }
    }

    /// The owner recorded for `field` `name`, as a [`Claim`] of `owner`; `None` when unclaimed.
    async fn read_claim(
        &self,
        client: &Client,
        field: &'static str,
        name: &str,
        owner: &Owner,
    ) -> Result<Option<Claim>, DatastoreError> {
        let key = marker_key(field, name);
        let response = resending_stale_auth(client, |mut c| {
            let key = key.clone();
            async move { c.get(key, None).await }
        })
        .await
        .map_err(|e| self.error("read the ownership marker", e))?;
        let Some(kv) = response.kvs().first() else {
            return Ok(None);
        };
        Ok(Some(owner.judge(kv.value_str().ok())))
    }

    fn taken(&self, field: &'static str, name: &str, owner: &Owner) -> DatastoreError {
        DatastoreError::NameTaken {
            driver: KIND,
            endpoint: self.endpoint_label.clone(),
            field,
            name: name.to_string(),
            owner: owner.tcp().to_string(),
        }
    }

    fn foreign(&self, message: String) -> DatastoreError {
        DatastoreError::ForeignObject {
            driver: KIND,
            endpoint: self.endpoint_label.clone(),
            message,
        }
    }

    /// Claims the schema and the user for the tenant's owner. A name nobody claimed yet must not exist
    /// (no role and no keys for the schema, no etcd user for the user): an unmarked existing one is never
    /// adopted. The check comes before the claim, so a claim always means "checked".
    async fn claim_names(&self, client: &Client, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let (schema, user, owner) = (tenant.schema(), tenant.user(), tenant.owner());
        let names = [("schema", schema), ("user", user)];
        for (field, name) in names {
            match self.read_claim(client, field, name, owner).await? {
                Some(Claim::Ours) => continue,
                Some(Claim::Other(other)) => return Err(self.taken(field, name, &other)),
                Some(Claim::Unmarked) => {
                    return Err(self.foreign(format!(
                        "the ownership marker of {field} {name:?} is not readable"
                    )));
                }
                None => {}
            }
            if let Some(what) = self.unmarked_existing(client, field, name).await?
                && !self.possessed(tenant).await?
            {
                return Err(self.foreign(format!(
                    "{what} exists but was not created for this TenantControlPlane"
                )));
            }
            self.claim(client, field, name, owner).await?;
        }
        Ok(())
    }

    /// Refuses `tenant` unless both of its names carry this owner's marker: a space a migration reads,
    /// freezes or thaws must be the owner's own, whatever status names it.
    async fn check_owned_inner(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let client = self.connect().await?;
        for (field, name) in [("schema", tenant.schema()), ("user", tenant.user())] {
            self.read_claim(&client, field, name, tenant.owner())
                .await?
                .ok_or_else(|| crate::missing(KIND, &self.endpoint_label, field, name))?
                .accept(KIND, &self.endpoint_label, (field, field), name)?;
        }
        Ok(())
    }

    /// Whether the tenant already holds its names from before ownership markers: etcd accepts the
    /// client certificate it kept (CN = its user) for a read of its prefix.
    async fn possessed(&self, tenant: &TenantSpace) -> Result<bool, DatastoreError> {
        let Some((cert, key)) = tenant.client_certificate() else {
            return Ok(false);
        };
        // Checked here first: etcd closes the connection of a foreign certificate, which looks like an
        // outage from this side.
        if common_names(cert) != [tenant.user()] || !issued_by(cert, &self.settings.ca_cert_pem) {
            return Ok(false);
        }
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&self.settings.ca_cert_pem))
            .identity(Identity::from_pem(cert, key.expose()))
            .timeout(self.settings.timeout);
        let options = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(self.settings.timeout)
            .with_timeout(self.settings.timeout);
        let read = async {
            let client = Client::connect(&self.urls, Some(options)).await?;
            let options = GetOptions::new().with_prefix().with_count_only();
            let key = prefix(tenant.schema());
            resending_stale_auth(&client, |mut c| {
                let (key, options) = (key.clone(), options.clone());
                async move { c.get(key, Some(options)).await }
            })
            .await
        };
        match read
            .await
            .map_err(|e| self.map_error("read the prefix as the tenant", e))
        {
            Ok(_) => Ok(true),
            Err(e) if e.is_transient() => Err(e),
            Err(_) => Ok(false),
        }
    }

    /// What already exists under an unclaimed name: the etcd role or keys of a schema, the etcd user.
    async fn unmarked_existing(
        &self,
        client: &Client,
        field: &'static str,
        name: &str,
    ) -> Result<Option<String>, DatastoreError> {
        if field == "user" {
            let found = ignore(
                resending_stale_auth(client, |mut c| async move { c.user_get(name).await }).await,
                "etcdserver: user name not found",
            )
            .map_err(|e| self.error("look up the tenant user", e))?;
            return Ok(found.then(|| format!("etcd user {name:?}")));
        }
        let found = ignore(
            resending_stale_auth(client, |mut c| async move { c.role_get(name).await }).await,
            "etcdserver: role name not found",
        )
        .map_err(|e| self.error("look up the tenant role", e))?;
        if found {
            return Ok(Some(format!("etcd role {name:?}")));
        }
        Ok(self
            .has_keys(client, name)
            .await?
            .then(|| format!("data under {}", prefix(name))))
    }

    /// Whether any key exists under the schema's prefix.
    async fn has_keys(&self, client: &Client, schema: &str) -> Result<bool, DatastoreError> {
        let options = GetOptions::new().with_prefix().with_count_only();
        let key = prefix(schema);
        let response = resending_stale_auth(client, |mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, Some(options)).await }
        })
        .await
        .map_err(|e| self.error("count the keys under the tenant prefix", e))?;
        Ok(response.count() > 0)
    }

    async fn provision_inner(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        let (schema, user) = (tenant.schema(), tenant.user());
        let prefix = prefix(schema);
        let end = prefix_end(prefix.as_bytes());
        let client = self.connect().await?;

        // A user or role this call created holds nothing yet, so only existing ones are read back
        // (etcd serializes auth reads through raft too).
        self.claim_names(&client, tenant).await?;
        let user_is_new = ignore(
            resending_stale_auth(&client, |mut c| async move {
                c.user_add(user, "", Some(UserAddOptions::new().with_no_pwd()))
                    .await
            })
            .await,
            "etcdserver: user name already exists",
        )
        .map_err(|e| self.error("add the tenant user", e))?;
        let role_is_new = ignore(
            resending_stale_auth(&client, |mut c| async move { c.role_add(schema).await }).await,
            "etcdserver: role name already exists",
        )
        .map_err(|e| self.error("add the tenant role", e))?;

        // The role holds exactly one permission: READWRITE on [prefix, prefix_end).
        let wanted = Permission::read_write(prefix.as_bytes()).with_range_end(end.clone());
        let current = if role_is_new {
            Vec::new()
        } else {
            resending_stale_auth(&client, |mut c| async move { c.role_get(schema).await })
                .await
                .map_err(|e| self.error("read the tenant role", e))?
                .permissions()
        };
        let is_wanted = |perm: &Permission| {
            perm.key() == prefix.as_bytes()
                && perm.range_end() == end.as_slice()
                && perm.get_type() == PermissionType::Readwrite as i32
        };
        for perm in current.iter().filter(|p| !is_wanted(p)) {
            let options = RoleRevokePermissionOptions::new().with_range_end(perm.range_end().to_vec());
            ignore(
                resending_stale_auth(&client, |mut c| {
                    let options = options.clone();
                    let key = perm.key().to_vec();
                    async move { c.role_revoke_permission(schema, key, Some(options)).await }
                })
                .await,
                "etcdserver: permission is not granted to the role",
            )
            .map_err(|e| self.error("revoke a foreign permission of the tenant role", e))?;
        }
        // etcd rebuilds its permission cache for every user on each grant, even an unchanged one, so
        // a tenant that already holds its range is not granted it again.
        if !current.iter().any(is_wanted) {
            resending_stale_auth(&client, |mut c| {
                let wanted = wanted.clone();
                async move { c.role_grant_permission(schema, wanted).await }
            })
            .await
            .map_err(|e| self.error("grant the tenant role its key range", e))?;
        }

        // The user holds exactly one role: `<schema>`.
        let roles = if user_is_new {
            Vec::new()
        } else {
            resending_stale_auth(&client, |mut c| async move { c.user_get(user).await })
                .await
                .map_err(|e| self.error("read the tenant user", e))?
                .roles()
                .to_vec()
        };
        for role in roles.iter().filter(|r| r.as_str() != schema) {
            ignore(
                resending_stale_auth(&client, |mut c| async move {
                    c.user_revoke_role(user, role.as_str()).await
                })
                .await,
                "etcdserver: role is not granted to the user",
            )
            .map_err(|e| self.error("revoke a foreign role of the tenant user", e))?;
        }
        if !roles.iter().any(|r| r.as_str() == schema) {
            resending_stale_auth(
                &client,
                |mut c| async move { c.user_grant_role(user, schema).await },
            )
            .await
            .map_err(|e| self.error("grant the tenant role to the tenant user", e))?;
        }

        let cert = self
            .ca
            .client_valid_for(user, &[], self.settings.certificate_validity)
            .map_err(|e| DatastoreError::InvalidConfig {
                driver: KIND,
                message: format!("cannot mint the tenant certificate: {e}"),
            })?;
        Ok(TenantCredentials::Etcd(EtcdCredentials {
            user: user.to_string(),
            prefix,
            client_cert_pem: cert.cert_pem,
            client_key_pem: Secret::new(cert.key_pem),
            ca_cert_pem: self.settings.ca_cert_pem.clone(),
        }))
    }

    /// Removes the user (if marked with the owner's UID), then the role and the keys (if the schema
    /// is), then the markers: access goes first, so a running apiserver cannot write keys back.
    async fn deprovision_inner(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        let (schema, user, owner) = (tenant.schema(), tenant.user(), tenant.owner());
        let client = self.connect().await?;
        let mut outcome = Deprovisioned::default();
        let user_claim = self.read_claim(&client, "user", user, owner).await?;
        let schema_claim = self.read_claim(&client, "schema", schema, owner).await?;
        match &user_claim {
            Some(Claim::Ours) => {
                ignore(
                    resending_stale_auth(&client, |mut c| async move { c.user_delete(user).await }).await,
                    "etcdserver: user name not found",
                )
                .map_err(|e| self.error("delete the tenant user", e))?;
            }
            Some(other) => outcome.note("user", user, other),
            None => {}
        }
        match &schema_claim {
            Some(Claim::Ours) => {
                ignore(
                    resending_stale_auth(&client, |mut c| async move { c.role_delete(schema).await }).await,
                    "etcdserver: role name not found",
                )
                .map_err(|e| self.error("delete the tenant role", e))?;
                resending_stale_auth(&client, |mut c| async move {
                    c.delete(prefix(schema), Some(DeleteOptions::new().with_prefix()))
                        .await
                })
                .await
                .map_err(|e| self.error("delete the tenant keys", e))?;
            }
            Some(other) => outcome.note("schema", schema, other),
            None => {}
        }
        for (field, name, claim) in [("user", user, &user_claim), ("schema", schema, &schema_claim)] {
            if claim == &Some(Claim::Ours) {
                self.drop_marker(&client, field, name, owner).await?;
            }
        }
        Ok(outcome)
    }

    /// Deletes the owner's marker of `field` `name` (only while it is the owner's).
    async fn drop_marker(
        &self,
        client: &Client,
        field: &'static str,
        name: &str,
        owner: &Owner,
    ) -> Result<(), DatastoreError> {
        let key = marker_key(field, name);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, owner.marker())])
            .and_then([TxnOp::delete(key, None)]);
        resending_stale_auth(client, |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map_err(|e| self.error("delete the ownership marker", e))?;
        Ok(())
    }
}

impl Driver for EtcdDriver {
    fn kind(&self) -> crd::Driver {
        KIND
    }

    /// Lists the users: etcd allows that only to the root role, so it proves the client certificate is
    /// root's (etcd-client 0.21 has no AuthStatus call).
    async fn check(&self) -> Result<(), DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            "check",
            self.settings.timeout * 2,
            async {
                let client = self.connect().await?;
                resending_stale_auth(&client, |mut c| async move { c.user_list().await })
                    .await
                    .map_err(|e| self.error("list users (root only)", e))?;
                Ok(())
            },
        )
        .await
    }

    async fn provision(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        Self::check_names(tenant)?;
        with_timeout(
            KIND,
            &self.endpoint_label,
            "provision",
            self.settings.timeout * 4,
            self.provision_inner(tenant),
        )
        .await
    }

    /// The cluster ID every response header carries.
    async fn server_identity(&self) -> Result<String, DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            "read the cluster ID",
            self.settings.timeout,
            async {
                let mut client = self.connect().await?;
                let status = client
                    .status()
                    .await
                    .map_err(|e| self.error("read the cluster ID", e))?;
                let id = status.header().map(|h| h.cluster_id()).unwrap_or_default();
                Ok(format!("etcd cluster {id:x}"))
            },
        )
        .await
    }

    async fn check_owned(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        Self::check_names(tenant)?;
        with_timeout(
            KIND,
            &self.endpoint_label,
            "check ownership",
            self.settings.timeout * 2,
            self.check_owned_inner(tenant),
        )
        .await
    }

    async fn deprovision(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        Self::check_names(tenant)?;
        with_timeout(
            KIND,
            &self.endpoint_label,
            "deprovision",
            self.settings.timeout * 4,
            self.deprovision_inner(tenant),
        )
        .await
    }
}

/// What etcd answers a request whose auth revision predates a concurrent auth change (another tenant's
/// user or role written between the request's arrival and its apply); nothing of it was applied.
const STALE_AUTH: &str = "revision of auth store is old";

/// Sends `request` on a clone of `client` again while etcd refuses it for a stale auth revision, as etcd's own Go
/// client does: only the refused request, 5 ms to 100 ms apart with jitter. Not bounded by a count: the
/// caller's deadline ([`with_timeout`]) bounds it, so concurrent provisionings cannot exhaust it.
pub(crate) async fn resending_stale_auth<C: Clone, T, F: Future<Output = Result<T, etcd_client::Error>>>(
    client: &C,
    mut request: impl FnMut(C) -> F,
) -> Result<T, etcd_client::Error> {
    let mut pause = Duration::from_millis(5);
    loop {
        match request(client.clone()).await {
            Err(etcd_client::Error::GRpcStatus(status)) if status.message().contains(STALE_AUTH) => {
                let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % 5;
                tokio::time::sleep(pause + Duration::from_millis(jitter)).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            result => return result,
        }
    }
}

/// Whether `cert_pem` names `ca_pem`'s subject as its issuer (the TLS handshake checks the signature).
fn issued_by(cert_pem: &str, ca_pem: &str) -> bool {
    let parse = |pem: &str| {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
        Some(pem.contents)
    };
    let (Some(cert), Some(ca)) = (parse(cert_pem), parse(ca_pem)) else {
        return false;
    };
    match (
        x509_parser::parse_x509_certificate(&cert),
        x509_parser::parse_x509_certificate(&ca),
    ) {
        (Ok((_, cert)), Ok((_, ca))) => cert.issuer().as_raw() == ca.subject().as_raw(),
        _ => false,
    }
}

/// The common names of a PEM certificate's subject (none when it does not parse).
fn common_names(cert_pem: &str) -> Vec<String> {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else {
        return Vec::new();
    };
    let Ok(cert) = pem.parse_x509() else {
        return Vec::new();
    };
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect()
}

/// The value of the marker read by the `or_else` branch of a claim transaction.
fn marker_value(response: &etcd_client::TxnResponse) -> Option<String> {
    response.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get
            .kvs()
            .first()
            .and_then(|kv| kv.value_str().ok().map(str::to_string)),
        _ => None,
    })
}

/// Treats the etcd error whose message is `benign` (e.g. "already exists") as success.
/// `Ok(true)` when the call succeeded, `Ok(false)` when it failed with the `benign` message.
fn ignore<T>(result: Result<T, etcd_client::Error>, benign: &str) -> Result<bool, etcd_client::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(etcd_client::Error::GRpcStatus(status)) if status.message() == benign => Ok(false),
        Err(e) => Err(e),
    }
}

fn is_tls_failure(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["certificate", "tls handshake", "unknownissuer", "invalid peer"]
        .iter()
        .any(|needle| lower.contains(needle))
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Fails unless `key_pem`'s public key is the one in `cert_pem`: certificates signed with another key
/// would not verify, and etcd would refuse every tenant.
fn ensure_key_matches_certificate(cert_pem: &str, key_pem: &str) -> Result<(), DatastoreError> {
    let invalid = |message: String| DatastoreError::InvalidConfig {
        driver: KIND,
        message,
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|_| invalid("the CA certificate is not PEM".into()))?;
    let cert = pem
        .parse_x509()
        .map_err(|_| invalid("the CA certificate is not a valid X.509 certificate".into()))?;
    let key = rcgen::KeyPair::from_pem(key_pem)
        .map_err(|_| invalid("the CA private key is not a PEM private key rcgen can sign with".into()))?;
    if cert.public_key().raw != rcgen::PublicKeyData::subject_public_key_info(&key).as_slice() {
        return Err(invalid(
            "the CA private key does not belong to the CA certificate".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_has_a_trailing_slash_and_its_end_excludes_longer_names() {
        assert_eq!(prefix("cp-a"), "/cp-a/");
        assert_eq!(prefix_end(prefix("cp-a").as_bytes()), b"/cp-a0".to_vec());
        assert_eq!(prefix_end(b"/abc/"), b"/abc0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
        // "/cp-aa/x" sorts after "/cp-a0"? No: 'a' > '0', so it is outside [/cp-a/, /cp-a0).
        assert!(b"/cp-aa/x".as_slice() >= b"/cp-a0".as_slice());
    }

    #[test]
    fn a_ca_key_from_another_ca_is_refused() {
        let ca = Ca::new("ca-one").unwrap();
        let other = Ca::new("ca-two").unwrap();
        ensure_key_matches_certificate(&ca.ca.cert_pem, &ca.ca.key_pem).unwrap();
        let err = ensure_key_matches_certificate(&ca.ca.cert_pem, &other.ca.key_pem).unwrap_err();
        assert_eq!(err.reason(), "DataStoreInvalidConfig");
        assert!(err.to_string().contains("does not belong"), "{err}");
        assert!(!err.to_string().contains("PRIVATE KEY"));
    }

    #[test]
    fn root_is_not_a_tenant_name() {
        let owner = crate::tests::owner;
        let err = EtcdDriver::check_names(&TenantSpace::new("root", "t", owner()).unwrap()).unwrap_err();
        assert_eq!(err.reason(), "TenantNameInvalid");
        assert!(EtcdDriver::check_names(&TenantSpace::new("t", "ROOT", owner()).unwrap()).is_err());
    }

    fn stale_auth() -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::invalid_argument(format!(
            "etcdserver: {STALE_AUTH}"
        )))
    }

    /// Sends through a counter standing in for the client: stale auth for the first `stale` sends.
    async fn send_counted(
        sent: &std::sync::Arc<std::sync::atomic::AtomicU32>,
        stale: u32,
    ) -> Result<u32, etcd_client::Error> {
        resending_stale_auth(sent, |sent| async move {
            match sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 {
                n if n <= stale => Err(stale_auth()),
                n => Ok(n),
            }
        })
        .await
    }

    #[tokio::test]
    async fn a_stale_auth_refusal_resends_only_that_request_past_any_count() {
        let sent = std::sync::Arc::default();
        assert_eq!(send_counted(&sent, 15).await.unwrap(), 16);
    }

    #[tokio::test]
    async fn other_errors_are_not_resent_and_the_deadline_bounds_stale_auth() {
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let err = resending_stale_auth(&sent, |sent| async move {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err::<(), _>(etcd_client::Error::GRpcStatus(tonic::Status::invalid_argument(
                "etcdserver: role name already exists",
            )))
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);

        let deadline = Duration::from_millis(300);
        let forever = send_counted(&sent, u32::MAX);
        let err = with_timeout(KIND, "etcd:2379", "provision", deadline, async {
            forever.await.map_err(|e| DatastoreError::Backend {
                driver: KIND,
                endpoint: "etcd:2379".into(),
                operation: "provision",
                message: e.to_string(),
            })
        })
        .await
        .unwrap_err();
        assert!(matches!(err, DatastoreError::Timeout { .. }), "{err}");
    }

    #[test]
    fn tls_failures_are_recognised() {
        assert!(is_tls_failure("invalid peer certificate: UnknownIssuer"));
        assert!(!is_tls_failure("tcp connect error: Connection refused"));
    }
}
