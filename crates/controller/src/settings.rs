//! What the controllers are configured with (`src/config.rs` maps the CLI flags into these).

use std::time::Duration;

use crate::pki::KeyAlgorithm;

/// Default kine image (upstream's `--kine-image` default).
pub const DEFAULT_KINE_IMAGE: &str = "rancher/kine:v0.11.10-amd64";
const DAY: i64 = 24 * 3600;

/// What the controllers watch and how many objects they reconcile at once.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// Reconciles of each controller that may run at once.
    pub concurrency: u16,
    /// Only TenantControlPlanes of this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Only DataStores matching this label selector (all when `None`).
    pub datastore_selector: Option<String>,
    /// Only TenantControlPlanes matching this label selector are reconciled (all when `None`). `usedBy`
    /// (from the controller's cache) then counts only those; NATS exclusivity still lists every one in scope.
    pub control_plane_selector: Option<String>,
    /// Identity in Events (`reportingInstance`) and in the Lease.
    pub identity: String,
    /// Requeue interval of a healthy object (re-checks DataStores, re-provisions tenants).
    pub resync: Duration,
    /// DataStore written into TenantControlPlanes that name none (Kamaji's `--datastore`).
    pub default_datastore: Option<String>,
    /// How long one reconcile may take.
    pub reconcile_timeout: Duration,
    /// Certificates, kine image.
    pub workload: WorkloadSettings,
    /// Whether the in-tenant phase runs (kubeadm's bootstrap objects in each serving tenant).
    pub in_tenant: bool,
    /// How often the in-tenant phase checks a serving tenant for deleted or edited objects.
    pub in_tenant_resync: Duration,
    /// The controller's own namespace, where it keeps what only it may write (the migration
    /// journal); TenantControlPlane writers must have no write access there.
    pub state_namespace: String,
}

/// The default [`ControllerSettings::state_namespace`] (also the leader Lease's default namespace).
pub use tenantplane_crd::DEFAULT_STATE_NAMESPACE;

impl ControllerSettings {
    /// Defaults: concurrency 16, every namespace and DataStore, resync every 5 minutes, 30 s per
    /// reconcile, the in-tenant phase on with a check every 60 s, state in `tenantplane-system`.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            concurrency: 16,
            reconcile_timeout: Duration::from_secs(30),
            workload: WorkloadSettings::default(),
            namespace: None,
            datastore_selector: None,
            control_plane_selector: None,
            identity: identity.into(),
            resync: Duration::from_secs(300),
            default_datastore: None,
            in_tenant: true,
            in_tenant_resync: Duration::from_secs(60),
            state_namespace: DEFAULT_STATE_NAMESPACE.into(),
        }
    }
}

/// Settings of the workload build.
#[derive(Debug, Clone)]
pub struct WorkloadSettings {
    /// Certificates expiring within this many seconds are regenerated.
    pub rotation_threshold_secs: i64,
    /// The kine sidecar image.
    pub kine_image: String,
    /// Key type of new certificates and of the service-account key.
    pub key_algorithm: KeyAlgorithm,
    /// Tenantplane's credential issuer URL (`--credential-issuer-url`): its authenticator is not a
    /// tenant's own identity provider in the egress NetworkPolicy.
    pub credential_issuer_url: Option<String>,
    /// `host:port` where tenant kube-apiservers reach the credential issuer, allowed by their egress
    /// NetworkPolicy (`--credential-issuer-endpoint`; default: the URL's host and port).
    pub credential_issuer_endpoint: Option<String>,
}

impl Default for WorkloadSettings {
    /// 30 days, upstream's kine image, no credential issuer.
    fn default() -> Self {
        Self {
            rotation_threshold_secs: 30 * DAY,
            kine_image: DEFAULT_KINE_IMAGE.into(),
            key_algorithm: KeyAlgorithm::default(),
            credential_issuer_url: None,
            credential_issuer_endpoint: None,
        }
    }
}
