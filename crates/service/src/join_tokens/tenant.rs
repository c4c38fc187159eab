//! I/O in the tenant cluster, through the control plane's admin kubeconfig: the bootstrap token Secret
//! (kubeadm's format), its signature in `kube-public/cluster-info`, and whether the token authenticates.
//! The token's secret half only goes into the Secret and into the one authentication check; it is
//! scrubbed from every error these calls return.

use std::{collections::BTreeMap, time::Duration};

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::{
    authentication::v1::SelfSubjectReview,
    core::v1::{ConfigMap, Secret},
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::BootstrapToken;
use crate::{Result, ServiceError};

/// How long one call into a tenant cluster may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How often cluster-info is read while waiting for the bootstrapsigner.
const POLL: Duration = Duration::from_millis(100);
/// The namespace of bootstrap token Secrets.
const KUBE_SYSTEM: &str = "kube-system";
/// The namespace of cluster-info.
const KUBE_PUBLIC: &str = "kube-public";
/// kubeadm's discovery ConfigMap.
const CLUSTER_INFO: &str = "cluster-info";
/// The prefix of the bootstrapsigner's signatures in cluster-info.
const JWS_PREFIX: &str = "jws-kubeconfig-";
/// The group kubeadm gives its node bootstrap tokens (bound to the node-bootstrap RBAC).
const NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The label that marks the Secrets Tenantplane made.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "tenantplane");

/// The name of a bootstrap token's Secret.
pub fn secret_name(token_id: &str) -> String {
    format!("bootstrap-token-{token_id}")
}

/// The bootstrap token Secret of `token`, in kubeadm's format.
pub fn token_secret(token: &BootstrapToken, expires_at: DateTime<Utc>, description: &str) -> Secret {
    let data: BTreeMap<String, String> = [
        ("token-id", token.id.as_str()),
        ("token-secret", token.secret()),
        (
            "expiration",
            &expires_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        ),
        ("description", description),
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        ("auth-extra-groups", NODE_TOKEN_GROUP),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&token.id)),
            namespace: Some(KUBE_SYSTEM.into()),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// What became of a Secret create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Created.
    Yes,
    /// A Secret of that name exists already (a token made in the tenant cluster by other means).
    NameTaken,
}

/// A tenant cluster, reached with the admin kubeconfig.
pub struct TenantCluster {
    config: kube::Config,
    admin: kube::Client,
}

impl std::fmt::Debug for TenantCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantCluster")
            .field("cluster_url", &self.config.cluster_url)
            .finish()
    }
}

/// A failed call into the tenant cluster, as a service error with `secret` scrubbed from its text: the
/// API server did not answer (or failed) → `Unavailable`; any other refusal → `Internal` (logged only).
fn tenant_error(err: &kube::Error, doing: &str, secret: Option<&str>) -> ServiceError {
    let scrub = |text: String| match secret {
        Some(s) if !s.is_empty() => text.replace(s, "<redacted>"),
        _ => text,
    };
    match err {
        kube::Error::Api(status) if status.code < 500 && status.code != 429 => {
            ServiceError::Internal(scrub(format!(
                "{doing} in the tenant cluster failed: {} {}",
                status.code, status.reason
            )))
        }
        _ => {
            tracing::warn!(error = %scrub(err.to_string()), "{doing} in the tenant cluster failed");
            ServiceError::Unavailable(format!(
                "the tenant cluster's API server did not answer while {doing}; nothing was changed, retry shortly"
            ))
        }
    }
}

impl TenantCluster {
    /// A client of the tenant cluster from its admin kubeconfig (YAML), with a timeout per call.
    pub async fn connect(kubeconfig: &[u8]) -> Result<Self> {
        let invalid = |e: &dyn std::fmt::Display| {
            ServiceError::Internal(format!("the admin kubeconfig cannot be used: {e}"))
        };
        let text = std::str::from_utf8(kubeconfig).map_err(|e| invalid(&e))?;
        let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| invalid(&e))?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| invalid(&e))?;
        config.connect_timeout = Some(CALL_TIMEOUT);
        config.read_timeout = Some(CALL_TIMEOUT);
        config.write_timeout = Some(CALL_TIMEOUT);
        let admin = kube::Client::try_from(config.clone()).map_err(|e| invalid(&e))?;
        Ok(Self { config, admin })
    }

    /// The token ids cluster-info carries a signature for; `None` when cluster-info does not exist (the
    /// controller's in-tenant phase has not written it yet).
    pub async fn signed(&self) -> Result<Option<Vec<String>>> {
        let api = Api::<ConfigMap>::namespaced(self.admin.clone(), KUBE_PUBLIC);
        let info = api
            .get_opt(CLUSTER_INFO)
            .await
            .map_err(|e| tenant_error(&e, "reading kube-public/cluster-info", None))?;
        Ok(info.map(|cm| {
            cm.data
                .unwrap_or_default()
                .into_keys()
                .filter_map(|k| k.strip_prefix(JWS_PREFIX).map(str::to_string))
                .collect()
        }))
    }

    /// Creates the bootstrap token Secret of `token`.
    pub async fn create(
        &self,
        token: &BootstrapToken,
        expires_at: DateTime<Utc>,
        description: &str,
    ) -> Result<Created> {
        let api = Api::<Secret>::namespaced(self.admin.clone(), KUBE_SYSTEM);
        let secret = token_secret(token, expires_at, description);
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(Created::Yes),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Created::NameTaken),
            Err(e) => Err(tenant_error(
                &e,
                "creating the bootstrap token Secret",
                Some(token.secret()),
            )),
        }
    }

    /// Deletes the bootstrap token Secret of `token_id`; one that is gone already counts.
    pub async fn delete(&self, token_id: &str) -> Result<()> {
        let api = Api::<Secret>::namespaced(self.admin.clone(), KUBE_SYSTEM);
        match api.delete(&secret_name(token_id), &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(tenant_error(&e, "deleting the bootstrap token Secret", None)),
        }
    }

    /// Whether the tenant's API server authenticates `token` (a SelfSubjectReview with it: answered, or
    /// refused by authorization, means authenticated; 401 means not yet).
    async fn authenticates(&self, token: &BootstrapToken) -> Result<bool> {
        let mut config = self.config.clone();
        config.auth_info =
            serde_json::from_value(serde_json::json!({"token": token.expose()})).map_err(|_| {
                ServiceError::Internal("a bootstrap token could not be set as credentials".into())
            })?;
        let client = kube::Client::try_from(config).map_err(|e| {
            tenant_error(
                &e,
                "authenticating with the bootstrap token",
                Some(token.secret()),
            )
        })?;
        let api = Api::<SelfSubjectReview>::all(client);
        match api
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 403 => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 401 => Ok(false),
            Err(e) => Err(tenant_error(
                &e,
                "authenticating with the bootstrap token",
                Some(token.secret()),
            )),
        }
    }

    /// Waits until `token` is usable for `kubeadm join`: cluster-info carries its signature (the tenant's
    /// bootstrapsigner adds it) and the API server authenticates it. `false` when `deadline` passes first.
    pub async fn wait_usable(&self, token: &BootstrapToken, deadline: tokio::time::Instant) -> Result<bool> {
        loop {
            let signed = self.signed().await?.is_some_and(|ids| ids.contains(&token.id));
            if signed && self.authenticates(token).await? {
                return Ok(true);
            }
            if tokio::time::Instant::now() + POLL > deadline {
                return Ok(false);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until cluster-info no longer carries a signature of `token_id` (the bootstrapsigner removes it
    /// once the Secret is gone). `false` when `deadline` passes first.
    pub async fn wait_unsigned(&self, token_id: &str, deadline: tokio::time::Instant) -> Result<bool> {
        loop {
            let signed = self
                .signed()
                .await?
                .is_some_and(|ids| ids.iter().any(|id| id == token_id));
            if !signed {
                return Ok(true);
            }
            if tokio::time::Instant::now() + POLL > deadline {
                return Ok(false);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo (DER) of the first certificate in `pem`: kubeadm's
/// `--discovery-token-ca-cert-hash`.
pub fn ca_cert_hash(pem: &[u8]) -> Result<String> {
    let bad = |e: &dyn std::fmt::Display| {
        ServiceError::Internal(format!("the tenant CA certificate cannot be read: {e}"))
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| bad(&e))?;
    let cert = pem.parse_x509().map_err(|e| bad(&e))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("sha256:{hex}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn the_secret_is_kubeadm_s_bootstrap_token_format() {
        let token = BootstrapToken::from_parts("abc123", "0123456789abcdef");
        let at = DateTime::parse_from_rfc3339("2026-12-15T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let secret = serde_json::to_value(token_secret(&token, at, "rack 4")).unwrap();
        assert_eq!(
            secret,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bootstrap-token-abc123", "namespace": "kube-system",
                             "labels": {"app.kubernetes.io/managed-by": "tenantplane"}},
                "type": "bootstrap.kubernetes.io/token",
                "stringData": {
                    "token-id": "abc123", "token-secret": "0123456789abcdef",
                    "expiration": "2026-12-15T10:00:00Z", "description": "rack 4",
                    "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
                    "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
                },
            })
        );
    }

    #[test]
    fn the_ca_hash_is_the_sha256_of_the_subject_public_key_info() {
        // `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`, as kubeadm documents.
        assert_eq!(
            ca_cert_hash(include_bytes!("testdata/ca.crt")).unwrap(),
            "sha256:4c0d06b9594fe7a19d49e587817850580afaebbfb6c6d105de5f7d580055989d"
        );
        assert!(ca_cert_hash(b"not a certificate").is_err());
    }
}
