//! Typed configuration from flags and environment variables (`TENANTPLANE_*`, `DATABASE_URL`).

use std::{net::SocketAddr, path::PathBuf};

pub use crate::{runtime::telemetry::LogFormat, secret::Secret};

/// Settings shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// Log format; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, env = "TENANTPLANE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Pretty, global = true)]
    pub log_format: LogFormat,
}

/// Database settings shared by `serve`, `migrate` and `token`.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// PostgreSQL URL. When unset, `serve` starts a local PostgreSQL in `--local-dir`.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<Secret<String>>,
    /// Directory of the local PostgreSQL started when `DATABASE_URL` is unset (kept across runs).
    #[arg(long, env = "TENANTPLANE_LOCAL_DIR", default_value_os_t = default_local_dir())]
    pub local_dir: PathBuf,
    /// Maximum PostgreSQL connections in the pool.
    #[arg(long, env = "TENANTPLANE_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
    #[command(flatten)]
    /// `lock_timeout` and `statement_timeout` of every connection.
    pub db_timeouts: crate::store::SessionTimeouts,
}

/// Token settings shared by `serve` and `token`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthArgs {
    /// `iss` of minted tokens and the only issuer accepted.
    #[arg(long, env = "TENANTPLANE_ISSUER", default_value = "tenantplane")]
    pub issuer: String,
    /// `aud` of minted tokens and the only audience accepted.
    #[arg(long, env = "TENANTPLANE_AUDIENCE", default_value = "tenantplane")]
    pub audience: String,
    /// Base64 32-byte key that seals signing keys at rest. Required with DATABASE_URL; a local run
    /// generates one in `--local-dir`.
    #[arg(long, env = "TENANTPLANE_ENCRYPTION_KEY")]
    pub encryption_key: Option<Secret<String>>,
    /// YAML or JSON file listing external OIDC issuers whose tokens are accepted too (issuer, JWKS
    /// URL, audience, algorithms, tenant and role claims, role map); see the README.
    #[arg(long, env = "TENANTPLANE_OIDC_ISSUERS_FILE")]
    pub oidc_issuers_file: Option<PathBuf>,
}

/// Tenantplane's credential issuer, which every tenant kube-apiserver trusts: `serve` signs cluster
/// credentials as it and serves its discovery; the worker writes it into each TenantControlPlane.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct IssuerArgs {
    /// `https://` URL of the credential issuer as tenant kube-apiservers reach it, with a path
    /// (discovery is served at `<url>/.well-known/openid-configuration`). Default with `--tls-listen`:
    /// `https://<tls-listen>/credentials`. Unset: no cluster credentials.
    #[arg(long, env = "TENANTPLANE_CREDENTIAL_ISSUER_URL")]
    pub credential_issuer_url: Option<String>,
    /// PEM file of the CA that verifies the issuer's TLS certificate (given to tenant kube-apiservers);
    /// unset: their system roots.
    #[arg(long, env = "TENANTPLANE_CREDENTIAL_ISSUER_CA_FILE")]
    pub credential_issuer_ca_file: Option<PathBuf>,
}

impl IssuerArgs {
    /// The issuer, with `default_url` when none is set; checks the URL.
    pub fn issuer(
        &self,
        default_url: Option<String>,
    ) -> Result<Option<crate::translate::ClusterIssuer>, String> {
        let Some(url) = self.credential_issuer_url.clone().or(default_url) else {
            return Ok(None);
        };
        check_issuer_url(&url)?;
        let certificate_authority = match &self.credential_issuer_ca_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--credential-issuer-ca-file {}: {e}", path.display()))?,
            ),
            None => None,
        };
        Ok(Some(crate::translate::ClusterIssuer {
            url,
            certificate_authority,
        }))
    }
}

/// An issuer URL kube-apiserver accepts and that does not shadow the API's own discovery: `https://`,
/// a host, a path other than `/`, no query or fragment.
pub fn check_issuer_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("https://").ok_or_else(|| {
        format!("--credential-issuer-url {url:?} must start with https:// (kube-apiserver requires it)")
    })?;
    let path = crate::api::credential_issuer_path(url);
    if rest.split('/').next().is_none_or(str::is_empty) || path.is_empty() || url.contains(['?', '#']) {
        return Err(format!(
            "--credential-issuer-url {url:?} needs a host and a path (e.g. https://tenantplane.example.com/credentials), and no query or fragment"
        ));
    }
    Ok(())
}

/// Settings of `tenantplane serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address the HTTP API listens on.
    #[arg(long, env = "TENANTPLANE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address the same API listens on over HTTPS (needs `--tls-cert-file` and `--tls-key-file`): tenant
    /// kube-apiservers fetch the credential issuer's discovery and keys here.
    #[arg(long, env = "TENANTPLANE_TLS_LISTEN")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain of the HTTPS listener.
    #[arg(long, env = "TENANTPLANE_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of the HTTPS listener.
    #[arg(long, env = "TENANTPLANE_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// The program downloaded kubeconfigs run as their exec credential plugin (`tenantplane`, found on
    /// the user's PATH).
    #[arg(
        long,
        env = "TENANTPLANE_KUBECONFIG_EXEC_COMMAND",
        default_value = "tenantplane"
    )]
    pub kubeconfig_exec_command: String,
    #[command(flatten)]
    /// The credential issuer.
    pub issuer: IssuerArgs,
    /// Public base URL (for OIDC discovery); default `http://<listen>`.
    #[arg(long, env = "TENANTPLANE_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Supported Kubernetes versions, `vX.Y-vX.Z`.
    #[arg(long, env = "TENANTPLANE_KUBERNETES_VERSIONS", default_value = "v1.30-v1.34")]
    pub kubernetes_versions: crate::domain::VersionRange,
    /// Pool that `offload: auto` sends events (and, for large tenants, leases) to.
    #[arg(long, env = "TENANTPLANE_AUTO_OVERRIDE_POOL")]
    pub auto_override_pool: Option<String>,
    /// Run database migrations at start (else run `tenantplane migrate`).
    #[arg(long, env = "TENANTPLANE_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "TENANTPLANE_MAX_BODY_BYTES", default_value_t = 65536)]
    pub max_body_bytes: usize,
    /// Path of a kubeconfig for the management cluster (kubeconfig downloads); default: in-cluster or
    /// `KUBECONFIG` when available, else none.
    #[arg(long, env = "TENANTPLANE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The management cluster's NodePort range, `LOW-HIGH` (its kube-apiserver's
    /// `--service-node-port-range`); NodePort control planes outside it are refused.
    #[arg(long, env = "TENANTPLANE_NODE_PORT_RANGE", default_value = "30000-32767")]
    pub node_port_range: crate::domain::PortRange,
    /// Live signing keys (active, or retired but still verifying) a tenant may have; a rotation beyond
    /// answers 409.
    #[arg(long, env = "TENANTPLANE_MAX_SIGNING_KEYS", default_value_t = 10)]
    pub max_signing_keys: i64,
    /// Seconds a create, update or delete may take before its operation fails with `DeadlineExceeded`.
    #[arg(long, env = "TENANTPLANE_OPERATION_DEADLINE_SECONDS", default_value_t = 1800, value_parser = clap::value_parser!(i64).range(1..=604_800))]
    pub operation_deadline_seconds: i64,
    /// Live control planes a tenant may have unless a platform admin set its own quota
    /// (`PUT /api/v1/tenants/{t}/quotas`).
    #[arg(long, env = "TENANTPLANE_DEFAULT_QUOTA_CONTROL_PLANES", default_value_t = 50, value_parser = clap::value_parser!(i64).range(0..=100_000))]
    pub default_quota_control_planes: i64,
    /// Live tokens a tenant may have unless a platform admin set its own quota.
    #[arg(long, env = "TENANTPLANE_DEFAULT_QUOTA_TOKENS", default_value_t = 100, value_parser = clap::value_parser!(i64).range(0..=100_000))]
    pub default_quota_tokens: i64,
    /// Longest lifetime, in seconds, of a token minted by a caller signed in through an external OIDC
    /// issuer (platform or tenant admin): such a token outlives the caller's IdP session and account.
    /// Default 30 days.
    #[arg(long, env = "TENANTPLANE_EXTERNAL_MINT_MAX_TTL_SECONDS",
          default_value_t = crate::service::DEFAULT_EXTERNAL_MINT_MAX_TTL_SECONDS,
          value_parser = clap::value_parser!(i64).range(60..=crate::auth::MAX_TOKEN_TTL_SECONDS))]
    pub external_mint_max_ttl_seconds: i64,
    /// kube-apiserver's own check of a tenant's JWT authenticator before it is accepted
    /// (`tenantplane-authn-check`, built from tools/authn-check). Default: that program beside this
    /// binary, else on PATH; without one, authenticators get Tenantplane's own checks only (CEL parsed,
    /// not type-checked), and serve says so when it starts.
    #[arg(long, env = "TENANTPLANE_AUTHENTICATOR_CHECKER")]
    pub authenticator_checker: Option<PathBuf>,
    /// Origins of browser apps (a portal) allowed to call the API from another origin, comma-separated,
    /// exact match (`https://portal.example.com`); none: no CORS headers, same origin only.
    #[arg(long, env = "TENANTPLANE_CORS_ALLOWED_ORIGINS", value_delimiter = ',', value_parser = crate::api::parse_origin)]
    pub cors_allowed_origins: Vec<axum::http::HeaderValue>,
    /// Also run the sync worker in this process (needs a management cluster).
    #[arg(long, env = "TENANTPLANE_WITH_WORKER")]
    pub with_worker: bool,
    #[command(flatten)]
    /// Database settings.
    pub db: DbArgs,
    #[command(flatten)]
    /// Token settings.
    pub auth: AuthArgs,
    #[command(flatten)]
    /// Worker settings (with `--with-worker`).
    pub worker: crate::worker::WorkerSettings,
    #[command(flatten)]
    /// GraphQL limits and switches.
    pub graphql: crate::api::graphql::GraphqlSettings,
    #[command(flatten)]
    /// Per-token rate limits.
    pub rate_limits: crate::api::limits::RateLimitSettings,
    #[command(flatten)]
    /// How long a client may take to send a request (both listeners).
    pub http_timeouts: crate::api::serve::HttpTimeouts,
}

/// Settings of `tenantplane worker`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// Path of a kubeconfig for the management cluster; default: in-cluster or `KUBECONFIG`.
    #[arg(long, env = "TENANTPLANE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Run database migrations at start.
    #[arg(long, env = "TENANTPLANE_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,
    #[command(flatten)]
    /// Database settings.
    pub db: DbArgs,
    #[command(flatten)]
    /// Worker settings.
    pub worker: crate::worker::WorkerSettings,
    #[command(flatten)]
    /// The credential issuer written into each TenantControlPlane.
    pub issuer: IssuerArgs,
}

/// Settings of `tenantplane controller`.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    /// Reconciles of each controller (DataStore, TenantControlPlane) that may run at once.
    #[arg(long, env = "TENANTPLANE_CONTROLLER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,
    /// Seconds one reconcile may take before it is abandoned (and retried with backoff).
    #[arg(long, env = "TENANTPLANE_RECONCILE_TIMEOUT", default_value_t = 30)]
    pub reconcile_timeout_secs: u64,
    /// Certificates expiring within this many days are regenerated.
    #[arg(long, env = "TENANTPLANE_CERTIFICATE_ROTATION_DAYS", default_value_t = 30)]
    pub certificate_rotation_days: u32,
    /// Image of the kine sidecar (SQL and NATS DataStores).
    #[arg(long, env = "TENANTPLANE_KINE_IMAGE", default_value = crate::controller::DEFAULT_KINE_IMAGE)]
    pub kine_image: String,
    /// Key type of new tenant certificates and service-account keys (`ecdsa-p256` or `rsa-2048`).
    #[arg(long, env = "TENANTPLANE_CERTIFICATE_KEY_ALGORITHM", value_enum, default_value_t = crate::pki::KeyAlgorithm::EcdsaP256)]
    pub certificate_key_algorithm: crate::pki::KeyAlgorithm,
    /// Keep kubeadm's bootstrap objects (cluster-info, kubeadm-config, kubelet-config, the node-bootstrap
    /// RBAC) in every serving tenant cluster, so nodes can join.
    #[arg(long, env = "TENANTPLANE_IN_TENANT", default_value_t = true, action = clap::ArgAction::Set)]
    pub in_tenant: bool,
    /// Seconds between two checks of a serving tenant for deleted or edited bootstrap objects.
    #[arg(long, env = "TENANTPLANE_IN_TENANT_RESYNC", default_value_t = 60)]
    pub in_tenant_resync_secs: u64,
    /// Run only while holding the leader Lease (turn off only for a single replica).
    #[arg(long, env = "TENANTPLANE_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "TENANTPLANE_LEADER_ELECTION_NAME",
        default_value = "tenantplane-controller"
    )]
    pub leader_election_name: String,
    /// Namespace of the leader Lease.
    #[arg(
        long,
        env = "TENANTPLANE_LEADER_ELECTION_NAMESPACE",
        default_value = "tenantplane-system"
    )]
    pub leader_election_namespace: String,
    /// The controller's own namespace, where it keeps what only it may write (the migration journal);
    /// give TenantControlPlane writers no access to it.
    #[arg(
        long,
        env = "TENANTPLANE_STATE_NAMESPACE",
        default_value = "tenantplane-system"
    )]
    pub state_namespace: String,
    /// Identity in the Lease and in Events; default `<hostname>-<pid>`.
    #[arg(long, env = "TENANTPLANE_IDENTITY")]
    pub identity: Option<String>,
    /// Only reconcile TenantControlPlanes of this namespace (default: all).
    #[arg(long, env = "TENANTPLANE_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Only reconcile DataStores matching this label selector (default: all).
    #[arg(long, env = "TENANTPLANE_DATASTORE_SELECTOR")]
    pub datastore_selector: Option<String>,
    /// Only reconcile TenantControlPlanes matching this label selector (default: all).
    #[arg(long, env = "TENANTPLANE_CONTROL_PLANE_SELECTOR")]
    pub control_plane_selector: Option<String>,
    /// DataStore written into TenantControlPlanes that name none (upstream Kamaji's `--datastore`).
    #[arg(long, env = "TENANTPLANE_DEFAULT_DATASTORE")]
    pub default_datastore: Option<String>,
    /// Address of the `/metrics` and `/healthz` endpoint.
    #[arg(long, env = "TENANTPLANE_METRICS_LISTEN", default_value = "0.0.0.0:8081")]
    pub metrics_listen: SocketAddr,
    /// Path of a kubeconfig for the management cluster; default: in-cluster or `KUBECONFIG`.
    #[arg(long, env = "TENANTPLANE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Tenantplane's credential issuer URL (as `serve` and the worker have it): tenant kube-apiservers
    /// may reach it through their egress NetworkPolicy.
    #[arg(long, env = "TENANTPLANE_CREDENTIAL_ISSUER_URL")]
    pub credential_issuer_url: Option<String>,
    /// `host:port` where tenant kube-apiservers' connections to the issuer go, when not the URL's own
    /// (e.g. `<serve service>.<namespace>.svc:8443`: an in-cluster Service becomes its pods).
    #[arg(long, env = "TENANTPLANE_CREDENTIAL_ISSUER_ENDPOINT")]
    pub credential_issuer_endpoint: Option<String>,
}

impl ControllerArgs {
    /// The credential issuer's URL and endpoint, checked (empty values are unset).
    pub fn credential_issuer(&self) -> Result<(Option<String>, Option<String>), String> {
        let url = self.credential_issuer_url.clone().filter(|u| !u.is_empty());
        if let Some(url) = &url {
            check_issuer_url(url)?;
        }
        let endpoint = self.credential_issuer_endpoint.clone().filter(|e| !e.is_empty());
        if let Some(endpoint) = &endpoint
            && crate::controller::tenant_control_plane::build::parse_endpoint(endpoint).is_none()
        {
            return Err(format!(
                "--credential-issuer-endpoint {endpoint:?} must be host:port (e.g. tenantplane-serve.tenantplane-system.svc:8443)"
            ));
        }
        Ok((url, endpoint))
    }

    /// The identity: `--identity`, else `<hostname>-<pid>`.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| {
                let host = std::env::var("HOSTNAME")
                    .ok()
                    .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "tenantplane".into());
                format!("{host}-{}", std::process::id())
            })
    }
}

/// `$TMPDIR/tenantplane-local`: readable by the `postgres` user when we run as root.
pub fn default_local_dir() -> PathBuf {
    std::env::temp_dir().join("tenantplane-local")
}

impl DbArgs {
    /// Checks settings that clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.database_url
            && !url.expose().is_empty()
            && !(url.expose().starts_with("postgres://") || url.expose().starts_with("postgresql://"))
        {
            return Err("DATABASE_URL must start with postgres:// or postgresql://".into());
        }
        if self.db_max_connections == 0 {
            return Err("TENANTPLANE_DB_MAX_CONNECTIONS must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Probe {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn debug_output_redacts_the_database_password() {
        let probe = Probe::parse_from(["x", "--database-url", "postgres://app:hunter2@db:5432/tp"]);
        let debug = format!("{probe:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("Secret(<redacted>)"), "{debug}");
        assert_eq!(
            probe.serve.db.database_url.unwrap().expose(),
            "postgres://app:hunter2@db:5432/tp"
        );
    }

    #[test]
    fn validate_rejects_a_non_postgres_url() {
        let probe = Probe::parse_from(["x", "--database-url", "mysql://x@y/z"]);
        assert_eq!(
            probe.serve.db.validate(),
            Err("DATABASE_URL must start with postgres:// or postgresql://".to_string())
        );
    }

    #[test]
    fn listen_defaults_to_loopback_8080() {
        let probe = Probe::parse_from(["x"]);
        assert_eq!(probe.serve.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(probe.serve.kubernetes_versions.to_string(), "v1.30-v1.34");
    }
}
