//! NATS JetStream: each tenant gets a KV bucket for kine, and kine connects with the DataStore's own
//! credentials (as in Kamaji: NATS has no per-tenant users here). Because of that shared login, a NATS
//! DataStore serves **one** tenant.
//!
//! - Bucket name: [`bucket_name`] of the schema, i.e. the schema with every character outside
//!   `[A-Za-z0-9_-]` (NATS's bucket alphabet) replaced by `_`. A UID maps to itself, so kine's
//!   `bucket=$(DB_SCHEMA)` from Kamaji still names the same bucket.
//! - Bucket config: exactly what kine 0.17 creates (description [`KINE_BUCKET_DESCRIPTION`], history 10,
//!   one replica), because kine calls `CreateKeyValue` on start and fails on a bucket whose config differs.
//! - Ownership marker: key `<bucket>` in the registry bucket [`REGISTRY_BUCKET`] (reserved), value
//!   [`super::Owner::marker`], claimed with a create-if-absent. A bucket marked with another UID is
//!   refused ([`DatastoreError::NameTaken`]); an unmarked kine bucket (made by a kine on its own, or by
//!   an older version) is never adopted or deleted ([`DatastoreError::ForeignObject`]).
//! - "Another tenant's bucket": a KV bucket (stream `KV_<name>`) with kine's description, which kine
//!   itself and this driver give every kine bucket. Other streams and KV buckets on the server (the
//!   registry included) are not tenants and are ignored. Provisioning refuses with [`DatastoreError::NatsInUse`] when such a bucket
//!   with another name exists, before creating anything. Two tenants provisioned at the same moment are
//!   settled after creation: the older bucket (by creation time, then name) stays, and the newer one is
//!   deleted again and refused.
//! - A stream `KV_<bucket>` without kine's description belongs to something else: provisioning and
//!   deprovisioning leave it alone and fail with [`DatastoreError::ForeignObject`].

use std::time::Duration;

use async_nats::{
    ConnectErrorKind, ConnectOptions, ServerAddr,
    jetstream::{self, ErrorCode, context::GetStreamErrorKind},
};
use futures_util::StreamExt as _;

use super::{
    Claim, ClientTls, DEFAULT_TIMEOUT, DatastoreError, Deprovisioned, Driver, NatsCredentials, Owner,
    TenantCredentials, TenantSpace, refuse_reserved, split_host_port, with_timeout,
};
use crate::k8s::crd;
use crate::secret::Secret;

const KIND: crd::Driver = crd::Driver::Nats;

/// The description kine 0.17 gives its bucket; it marks a bucket as a tenant's.
pub const KINE_BUCKET_DESCRIPTION: &str = "Holds kine key/values";

/// kine's default revision history (`revHistory`).
pub const KINE_BUCKET_HISTORY: i64 = 10;

/// How to reach a NATS DataStore.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// Endpoints, bare `host:port` (all are used).
    pub endpoints: Vec<String>,
    /// Basic-auth user, if any.
    pub username: Option<String>,
    /// Basic-auth password.
    pub password: Option<Secret<String>>,
    /// TLS, if the DataStore has a `tlsConfig`.
    pub tls: Option<ClientTls>,
    /// Time allowed to connect and for each request.
    pub timeout: Duration,
}

impl NatsSettings {
    /// Plain settings for `endpoints` with the default timeout.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            username: None,
            password: None,
            tls: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The NATS driver.
#[derive(Debug)]
pub struct NatsDriver {
    settings: NatsSettings,
    addrs: Vec<ServerAddr>,
    endpoint_label: String,
}

/// The bucket of a schema: characters outside `[A-Za-z0-9_-]` become `_`.
pub fn bucket_name(schema: &str) -> String {
    schema
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The KV bucket holding the ownership markers of this server's kine buckets (key = bucket name).
pub const REGISTRY_BUCKET: &str = "tenantplane-owners";

/// The registry key of the server's identity (a dot: no bucket name has one).
const SERVER_IDENTITY_KEY: &str = "tenantplane.server";

/// Whether a stream description is a kine bucket's.
fn is_kine(description: Option<&str>) -> bool {
    description == Some(KINE_BUCKET_DESCRIPTION)
}

/// What stream `KV_<bucket>` is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BucketState {
    Absent,
    /// A kine bucket, with its marker (if any) judged against the caller.
    Kine(Claim),
    Foreign,
}

fn is_not_found(kind: GetStreamErrorKind) -> bool {
    matches!(kind, GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND)
}

/// A tenant's kine bucket found on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KineBucket {
    name: String,
    created: time::OffsetDateTime,
}

impl NatsDriver {
    /// Checks the endpoints.
    pub fn new(settings: NatsSettings) -> Result<Self, DatastoreError> {
        if settings.endpoints.is_empty() {
            return Err(DatastoreError::InvalidConfig {
                driver: KIND,
                message: "no endpoints".into(),
            });
        }
        let scheme = if settings.tls.is_some() { "tls" } else { "nats" };
        let mut addrs = Vec::new();
        for endpoint in &settings.endpoints {
            split_host_port(KIND, endpoint)?;
            let addr = format!("{scheme}://{endpoint}")
                .parse::<ServerAddr>()
                .map_err(|e| DatastoreError::InvalidConfig {
                    driver: KIND,
                    message: format!("endpoint {endpoint:?}: {e}"),
                })?;
            addrs.push(addr);
        }
        let endpoint_label = settings.endpoints.join(",");
        Ok(Self {
            settings,
            addrs,
            endpoint_label,
        })
    }

    fn invalid(message: String) -> DatastoreError {
        DatastoreError::InvalidConfig {
            driver: KIND,
            message,
        }
    }

    fn backend(&self, operation: &'static str, error: &dyn std::error::Error) -> DatastoreError {
        DatastoreError::Backend {
            driver: KIND,
            endpoint: self.endpoint_label.clone(),
            operation,
            message: error_chain(error),
        }
    }

    fn tls_config(tls: &ClientTls) -> Result<rustls::ClientConfig, DatastoreError> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(tls.ca_cert_pem.as_bytes()) {
            let cert = cert.map_err(|_| Self::invalid("the CA certificate is not PEM".into()))?;
            roots
                .add(cert)
                .map_err(|e| Self::invalid(format!("the CA certificate is not usable: {e}")))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Self::invalid(format!("TLS setup: {e}")))?
            .with_root_certificates(roots);
        match (&tls.client_cert_pem, &tls.client_key_pem) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| Self::invalid("the client certificate is not PEM".into()))?;
                let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                    .map_err(|_| Self::invalid("the client key is not a PEM private key".into()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Self::invalid(format!("the client certificate is not usable: {e}")))
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }

    async fn connect(&self) -> Result<jetstream::Context, DatastoreError> {
        let mut options = ConnectOptions::new()
            .name("tenantplane")
            .connection_timeout(self.settings.timeout)
            .request_timeout(Some(self.settings.timeout));
        if let (Some(user), Some(password)) = (&self.settings.username, &self.settings.password) {
            options = options.user_and_password(user.clone(), password.expose().clone());
        }
        if let Some(tls) = &self.settings.tls {
            options = options
                .tls_client_config(Self::tls_config(tls)?)
                .require_tls(true);
        }
        let client = options.connect(self.addrs.clone()).await.map_err(|e| {
            let endpoint = self.endpoint_label.clone();
            let message = error_chain(&e);
            match e.kind() {
                ConnectErrorKind::Io | ConnectErrorKind::Dns | ConnectErrorKind::MaxReconnects => {
                    DatastoreError::Unreachable {
                        driver: KIND,
                        endpoint,
                        message,
                    }
                }
                ConnectErrorKind::TimedOut => DatastoreError::Timeout {
                    driver: KIND,
                    endpoint,
                    operation: "connect",
                    timeout: self.settings.timeout,
                },
                ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
                    DatastoreError::Unauthorized {
                        driver: KIND,
                        endpoint,
                        message,
                    }
                }
                ConnectErrorKind::Tls | ConnectErrorKind::ServerParse => Self::invalid(message),
            }
        })?;
        Ok(jetstream::new(client))
    }

    /// Every tenant (kine) bucket on the server, oldest first.
    async fn kine_buckets(&self, js: &jetstream::Context) -> Result<Vec<KineBucket>, DatastoreError> {
        let mut streams = js.streams();
        let mut buckets = Vec::new();
        while let Some(info) = streams.next().await {
            let info = info.map_err(|e| self.backend("list the JetStream streams", &e))?;
            let Some(name) = info.config.name.strip_prefix("KV_") else {
                continue;
            };
            if is_kine(info.config.description.as_deref()) {
                buckets.push(KineBucket {
                    name: name.to_string(),
                    created: info.created,
                });
            }
        }
        buckets.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        Ok(buckets)
    }

    fn in_use(&self, holder: &str, requested: &str) -> DatastoreError {
        DatastoreError::NatsInUse {
            endpoint: self.endpoint_label.clone(),
            holder: holder.to_string(),
            requested: requested.to_string(),
        }
    }

    /// Whether stream `KV_<bucket>` exists, whether it is a kine bucket, and whose.
    async fn bucket_state(
        &self,
        js: &jetstream::Context,
        bucket: &str,
        owner: &Owner,
    ) -> Result<BucketState, DatastoreError> {
        match js.get_stream(format!("KV_{bucket}")).await {
            Ok(stream) => {
                let description = stream.cached_info().config.description.clone();
                if !is_kine(description.as_deref()) {
                    return Ok(BucketState::Foreign);
                }
                let marker = self.marker(js, bucket).await?;
                Ok(BucketState::Kine(owner.judge(marker.as_deref())))
            }
            Err(e) if is_not_found(e.kind()) => Ok(BucketState::Absent),
            Err(e) => Err(self.backend("look up the tenant bucket", &e)),
        }
    }

    fn foreign(&self, bucket: &str) -> DatastoreError {
        DatastoreError::ForeignObject {
            driver: KIND,
            endpoint: self.endpoint_label.clone(),
            message: format!(
                "stream KV_{bucket} exists but is not a kine bucket (its description is not {KINE_BUCKET_DESCRIPTION:?})"
            ),
        }
    }

    fn refused(&self, bucket: &str, claim: Claim) -> DatastoreError {
        match claim {
            Claim::Other(owner) => DatastoreError::NameTaken {
                driver: KIND,
                endpoint: self.endpoint_label.clone(),
                field: "schema",
                name: bucket.to_string(),
                owner: owner.tcp().to_string(),
            },
            _ => DatastoreError::ForeignObject {
                driver: KIND,
                endpoint: self.endpoint_label.clone(),
                message: format!(
                    "kine bucket {bucket:?} exists but was not created for this TenantControlPlane"
                ),
            },
        }
    }

    /// The registry bucket, created on first use.
    async fn registry(&self, js: &jetstream::Context) -> Result<jetstream::kv::Store, DatastoreError> {
        match js.get_key_value(REGISTRY_BUCKET).await {
            Ok(kv) => Ok(kv),
            Err(_) => js
                .create_key_value(jetstream::kv::Config {
                    bucket: REGISTRY_BUCKET.into(),
                    description: "Tenantplane: the owner of each kine bucket".into(),
                    num_replicas: 1,
                    ..Default::default()
                })
                .await
                .map_err(|e| self.backend("create the ownership registry", &e)),
        }
    }

    /// The marker recorded for `bucket`, if any.
    async fn marker(&self, js: &jetstream::Context, bucket: &str) -> Result<Option<String>, DatastoreError> {
        let kv = self.registry(js).await?;
        let value = kv
            .get(bucket)
            .await
            .map_err(|e| self.backend("read the ownership registry", &e))?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Claims `bucket` for `owner` (create-if-absent); a concurrent claim by another owner wins.
    async fn claim(
        &self,
        js: &jetstream::Context,
        bucket: &str,
        owner: &Owner,
    ) -> Result<(), DatastoreError> {
        let kv = self.registry(js).await?;
        match kv.create(bucket, owner.marker().into()).await {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == jetstream::kv::CreateErrorKind::AlreadyExists => {}
            Err(e) => return Err(self.backend("claim the tenant bucket", &e)),
        }
        match owner.judge(self.marker(js, bucket).await?.as_deref()) {
            Claim::Ours => Ok(()),
            claim => Err(self.refused(bucket, claim)),
        }
    }

    /// Deletes the owner's marker of `bucket`.
    async fn drop_marker(&self, js: &jetstream::Context, bucket: &str) -> Result<(), DatastoreError> {
        let kv = self.registry(js).await?;
        kv.purge(bucket)
            .await
            .map_err(|e| self.backend("delete the ownership marker", &e))
    }

    /// Deletes the kine bucket `bucket`; a missing bucket is fine.
    async fn delete_bucket(&self, js: &jetstream::Context, bucket: &str) -> Result<(), DatastoreError> {
        match js.delete_stream(format!("KV_{bucket}")).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(e.kind()) => Ok(()),
            Err(e) => Err(self.backend("delete the tenant bucket", &e)),
        }
    }

    async fn provision_inner(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        let bucket = bucket_name(tenant.schema());
        let js = self.connect().await?;
        let before = self.kine_buckets(&js).await?;
        if let Some(holder) = before.iter().find(|b| b.name != bucket) {
            return Err(self.in_use(&holder.name, &bucket));
        }
        let created_now = match self.bucket_state(&js, &bucket, tenant.owner()).await? {
            BucketState::Kine(Claim::Ours) => false,
            BucketState::Kine(claim) => return Err(self.refused(&bucket, claim)),
            BucketState::Absent => true,
            BucketState::Foreign => return Err(self.foreign(&bucket)),
        };
        if created_now {
            self.claim(&js, &bucket, tenant.owner()).await?;
            js.create_key_value(jetstream::kv::Config {
                bucket: bucket.clone(),
                description: KINE_BUCKET_DESCRIPTION.into(),
                history: KINE_BUCKET_HISTORY,
                num_replicas: 1,
                ..Default::default()
            })
            .await
            .map_err(|e| self.backend("create the tenant bucket", &e))?;
            // Settle a race with another tenant provisioned at the same moment: the oldest bucket stays.
            let after = self.kine_buckets(&js).await?;
            if let Some(oldest) = after.first()
                && oldest.name != bucket
            {
                self.delete_bucket(&js, &bucket).await?;
                self.drop_marker(&js, &bucket).await?;
                return Err(self.in_use(&oldest.name, &bucket));
            }
        }
        Ok(TenantCredentials::Nats(NatsCredentials {
            bucket,
            endpoints: self.settings.endpoints.clone(),
            username: self.settings.username.clone(),
            password: self.settings.password.clone(),
        }))
    }

    async fn deprovision_inner(&self, tenant: &TenantSpace) -> Result<Deprovisioned, DatastoreError> {
        let js = self.connect().await?;
        let bucket = bucket_name(tenant.schema());
        let mut outcome = Deprovisioned::default();
        match self.bucket_state(&js, &bucket, tenant.owner()).await? {
            BucketState::Absent => {}
            BucketState::Foreign => outcome.note("schema", &bucket, &Claim::Unmarked),
            BucketState::Kine(Claim::Ours) => {
                self.delete_bucket(&js, &bucket).await?;
                self.drop_marker(&js, &bucket).await?;
            }
            BucketState::Kine(claim) => outcome.note("schema", &bucket, &claim),
        }
        Ok(outcome)
    }
}

/// The tenant bucket a NATS server holds, as the server itself records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBucket {
    /// The kine bucket's name.
    pub bucket: String,
    /// Its owner, from the ownership registry (`None`: unmarked).
    pub owner: Option<Owner>,
}

impl NatsDriver {
    /// The tenant bucket this server holds (the oldest kine bucket, with its registry owner); `None`
    /// while it holds none. A NATS DataStore serves one tenant, and this is the one: unlike a
    /// TenantControlPlane's status, only the controller writes it.
    pub async fn held_bucket(&self) -> Result<Option<HeldBucket>, DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            "read which tenant bucket it holds",
            self.settings.timeout * 2,
            async {
                let js = self.connect().await?;
                let Some(oldest) = self.kine_buckets(&js).await?.into_iter().next() else {
                    return Ok(None);
                };
                let marker = self.marker(&js, &oldest.name).await?;
                Ok(Some(HeldBucket {
                    owner: marker.as_deref().and_then(Owner::from_marker),
                    bucket: oldest.name,
                }))
            },
        )
        .await
    }

    /// Refuses `tenant` unless its bucket is a kine bucket marked with its owner.
    async fn check_owned_inner(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        let js = self.connect().await?;
        let bucket = bucket_name(tenant.schema());
        match self.bucket_state(&js, &bucket, tenant.owner()).await? {
            BucketState::Kine(Claim::Ours) => Ok(()),
            BucketState::Kine(claim) => Err(self.refused(&bucket, claim)),
            BucketState::Foreign => Err(self.foreign(&bucket)),
            BucketState::Absent => Err(crate::missing(KIND, &self.endpoint_label, "kine bucket", &bucket)),
        }
    }
}

impl Driver for NatsDriver {
    fn kind(&self) -> crd::Driver {
        KIND
    }

    /// Connects and reads the JetStream account info.
    async fn check(&self) -> Result<(), DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            "check",
            self.settings.timeout * 2,
            async {
                let js = self.connect().await?;
                js.query_account()
                    .await
                    .map_err(|e| self.backend("read the JetStream account info", &e))?;
                Ok(())
            },
        )
        .await
    }

    async fn provision(&self, tenant: &TenantSpace) -> Result<TenantCredentials, DatastoreError> {
        refuse_reserved("schema", &bucket_name(tenant.schema()), &[REGISTRY_BUCKET], &[])?;
        with_timeout(
            KIND,
            &self.endpoint_label,
            "provision",
            self.settings.timeout * 4,
            self.provision_inner(tenant),
        )
        .await
    }

    /// A random identity recorded once in the registry bucket, under a key no bucket name can be.
    async fn server_identity(&self) -> Result<String, DatastoreError> {
        with_timeout(
            KIND,
            &self.endpoint_label,
            "read the server identity",
            self.settings.timeout * 2,
            async {
                let js = self.connect().await?;
                let kv = self.registry(&js).await?;
                let fresh = crate::random_password();
                match kv
                    .create(SERVER_IDENTITY_KEY, fresh.expose().clone().into())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.kind() == jetstream::kv::CreateErrorKind::AlreadyExists => {}
                    Err(e) => return Err(self.backend("record the server identity", &e)),
                }
                let id = self.marker(&js, SERVER_IDENTITY_KEY).await?.unwrap_or_default();
                Ok(format!("NATS server {id}"))
            },
        )
        .await
    }

    async fn check_owned(&self, tenant: &TenantSpace) -> Result<(), DatastoreError> {
        refuse_reserved("schema", &bucket_name(tenant.schema()), &[REGISTRY_BUCKET], &[])?;
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
        refuse_reserved("schema", &bucket_name(tenant.schema()), &[REGISTRY_BUCKET], &[])?;
        with_timeout(
            KIND,
            &self.endpoint_label,
            "deprovision",
            self.settings.timeout * 2,
            self.deprovision_inner(tenant),
        )
        .await
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_keep_the_nats_alphabet_and_map_the_rest_to_underscores() {
        assert_eq!(
            bucket_name("3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7"),
            "3f8a1c2e-5b7d-4e9f-a0b1-c2d3e4f5a6b7"
        );
        assert_eq!(bucket_name("default_my-cp.v2"), "default_my-cp_v2");
        assert_eq!(bucket_name("a.b/c d"), "a_b_c_d");
    }

    #[test]
    fn endpoints_become_nats_or_tls_urls() {
        let driver = NatsDriver::new(NatsSettings::new(vec!["127.0.0.1:4222".into()])).unwrap();
        assert_eq!(driver.addrs.len(), 1);
        assert_eq!(driver.addrs[0].port(), 4222);
        let err = NatsDriver::new(NatsSettings::new(vec!["nats://x:1".into()])).unwrap_err();
        assert_eq!(err.reason(), "DataStoreInvalidConfig");
        assert!(NatsDriver::new(NatsSettings::new(vec![])).is_err());
    }
}
