//! The pure middle of the TenantControlPlane reconciler: names, network, the PKI and kubeconfig
//! Secrets, the datastore Secrets, args, the Deployment and the Service, versions and status, from the
//! TenantControlPlane, what the datastore phase produced and the Secrets that already exist. No I/O:
//! key generation is the only source of randomness, and time comes in as `now`.

mod args;
mod authentication;
mod deployment;
mod konnectivity;
mod names;
mod network;
mod network_policy;
mod pki;
mod secrets;
mod service;
mod status;
mod storage;
mod version;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{Secret, Service},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
    jiff::Timestamp,
};
use kube::ResourceExt as _;
use serde_json::json;

pub use self::{
    args::*, authentication::*, deployment::*, konnectivity::*, names::*, network::*, network_policy::*,
    pki::*, secrets::*, service::*, status::*, storage::*, version::*,
};
use crate::{
    Error, MANAGED_BY_LABEL, WorkloadSettings,
    build::{
        CHECKSUM_ANNOTATION, ResolvedDataStore, TCP_NAME_LABEL, checksum, invalid_config, owner, untampered,
    },
    datastore::{Owner, TenantCredentials, TenantSpace},
    k8s::crd::{
        DataStoreOverride, DeploymentStatusSummary, Driver, KubernetesVersionState, OverrideStorageStatus,
        ServiceType, SetupStatus, StorageStatus, TenantControlPlane,
    },
    pki::{Ca, CertKey, KeyAlgorithm, PkiError, Usage, Validity},
    secret::Secret as Sealed,
};

/// Condition types the TenantControlPlane datastore phase owns.
pub mod tcp_conditions {
    /// The tenant's space and user exist on the primary DataStore and the Secrets are written.
    pub const DATASTORE_READY: &str = "DataStoreReady";
    /// Every `spec.dataStoreOverrides` entry is provisioned.
    pub const OVERRIDES_APPLIED: &str = "OverridesApplied";
    /// (NATS only) the DataStore serves this TenantControlPlane alone.
    pub const DATASTORE_EXCLUSIVE: &str = "DataStoreExclusive";
}

/// Annotation that asks for a Secret's material to be regenerated (upstream's name).
pub const ROTATE_ANNOTATION: &str = "certs.kamaji.clastix.io/rotate";

/// Annotation holding a digest of what a Secret was generated from (CA, SANs, server URL).
pub const INPUTS_ANNOTATION: &str = "tenantplane.io/inputs";

/// Annotation holding the earliest `notAfter` (Unix seconds) of a Secret's certificates.
pub const NOT_AFTER_ANNOTATION: &str = "tenantplane.io/not-after";

/// Pod-template annotation: a digest over every certificate, kubeconfig and datastore Secret.
pub const POD_CHECKSUM_ANNOTATION: &str = "tenantplane.io/checksum";

/// Pod-template annotation: the datastore config Secret's checksum (upstream's name).
pub const STORAGE_CONFIG_ANNOTATION: &str = "storage.kamaji.clastix.io/config";

/// Pod-template annotation: the datastore certificate Secret's checksum (upstream's name).
pub const STORAGE_CERTIFICATE_ANNOTATION: &str = "storage.kamaji.clastix.io/certificate";

/// Upstream's default admission plugins.
pub const DEFAULT_ADMISSION_PLUGINS: &[&str] = &[
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "PersistentVolumeClaimResize",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionWebhook",
];

const PKI: &str = "/etc/kubernetes/pki";

/// What the datastore phase produced, as the Deployment needs it.
#[derive(Debug, Clone)]
pub struct StorageView {
    /// The primary's driver.
    pub driver: Driver,
    /// `<schema>` (the etcd prefix).
    pub schema: String,
    /// The primary's endpoints.
    pub endpoints: Vec<String>,
    /// `(resource, endpoints)` of each override, in spec order.
    pub overrides: Vec<(String, Vec<String>)>,
    /// The `<tcp>-datastore-config` Secret's checksum.
    pub config_checksum: String,
    /// The `<tcp>-datastore-certificate` Secret: its checksum and whether it holds a client pair.
    pub certificate: Option<(String, bool)>,
}

fn invalid(reason: &'static str, message: impl Into<String>) -> Error {
    Error::Invalid {
        reason,
        message: message.into(),
    }
}

fn pki_err(e: PkiError) -> Error {
    invalid("CertificateGenerationFailed", e.to_string())
}

fn sha(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p.as_bytes());
    }
    ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod storage_tests;

#[cfg(test)]
mod konnectivity_tests;

#[cfg(test)]
mod authentication_tests;

#[cfg(test)]
mod network_policy_tests;
