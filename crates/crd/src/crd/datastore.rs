//! The cluster-scoped `DataStore`: a shared etcd, MySQL, PostgreSQL or NATS that hosts many tenants.

use k8s_openapi::{ByteString, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A shared datastore that holds the state of many tenant control planes, each in its own space.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kamaji.clastix.io",
    version = "v1alpha1",
    kind = "DataStore",
    plural = "datastores",
    status = "DataStoreStatus",
    doc = "DataStore is a shared etcd, MySQL, PostgreSQL or NATS that hosts the state of many tenant control planes.",
    printcolumn = r#"{"name":"Driver","type":"string","jsonPath":".spec.driver","description":"Kamaji data store driver"}"#,
    printcolumn = r#"{"name":"Ready","type":"boolean","jsonPath":".status.ready","description":"Whether the DataStore is ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp","description":"Age"}"#
)]
#[x_kube(validation = Rule::new("self.driver != 'etcd' || (has(self.tlsConfig) && has(self.tlsConfig.certificateAuthority.privateKey))").message("driver etcd needs tlsConfig.certificateAuthority.privateKey (content or secretReference): the CA key signs each tenant's etcd client certificate"))]
#[x_kube(validation = Rule::new("self.driver != 'etcd' || (has(self.tlsConfig) && has(self.tlsConfig.clientCertificate))").message("driver etcd needs tlsConfig.clientCertificate with certificate and privateKey: the client certificate of the etcd root user"))]
#[x_kube(validation = Rule::new("self.driver == 'etcd' || has(self.tlsConfig) || has(self.basicAuth)").message("drivers MySQL, PostgreSQL and NATS need credentials: set basicAuth (username and password) or tlsConfig"))]
#[serde(rename_all = "camelCase")]
pub struct DataStoreSpec {
    /// The driver of the datastore: `etcd`, `MySQL`, `PostgreSQL` or `NATS`. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("driver is immutable: create a new DataStore for another driver"))]
    pub driver: Driver,
    /// Endpoints of the datastore as bare `host:port` (no scheme), at least one.
    #[schemars(schema_with = "super::schema::endpoints")]
    pub endpoints: Vec<String>,
    /// Username and password for SQL drivers and NATS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// TLS settings: the CA (with its private key for etcd) and a client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<TlsConfig>,
}

/// The datastore driver, spelled exactly as Kamaji spells it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum Driver {
    /// etcd v3 with certificate authentication.
    #[serde(rename = "etcd")]
    Etcd,
    /// MySQL or MariaDB, through kine.
    MySQL,
    /// PostgreSQL, through kine.
    PostgreSQL,
    /// NATS JetStream, through kine. One tenant per DataStore.
    #[serde(rename = "NATS")]
    Nats,
}

impl Driver {
    /// The name as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Etcd => "etcd",
            Driver::MySQL => "MySQL",
            Driver::PostgreSQL => "PostgreSQL",
            Driver::Nats => "NATS",
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A username and a password, each given inline or by Secret reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The username.
    pub username: ContentRef,
    /// The password.
    pub password: ContentRef,
}

/// TLS settings of a datastore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// The CA that signed the datastore's server certificate. For etcd its private key is required too.
    pub certificate_authority: CertificateAuthority,
    /// A client certificate to authenticate to the datastore (the root user for etcd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
}

/// A CA certificate and, optionally, its private key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateAuthority {
    /// The CA certificate (PEM).
    pub certificate: ContentRef,
    /// The CA private key (PEM); required for etcd, where it signs per-tenant client certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<ContentRef>,
}

/// A client certificate and its private key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificate {
    /// The certificate (PEM).
    pub certificate: ContentRef,
    /// The private key (PEM).
    pub private_key: ContentRef,
}

/// A value given inline (`content`, base64 in YAML) or read from a key of a Secret; `content` wins.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.content) || has(self.secretReference)").message("set content or secretReference"))]
#[serde(rename_all = "camelCase")]
pub struct ContentRef {
    /// The value itself (base64 in YAML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::base64_bytes")]
    pub content: Option<ByteString>,
    /// A key of a Secret that holds the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_reference: Option<SecretReference>,
}

/// A key of a namespaced Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The Secret's namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// The key inside the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key_path: String,
}

/// Observed state of a DataStore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStoreStatus {
    /// Whether the DataStore is validated and reachable.
    #[serde(default)]
    pub ready: bool,
    /// `namespace/name` of every TenantControlPlane that uses it, as primary or as override.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_by: Vec<String>,
    /// Conditions: `Validated`, `Reachable`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
