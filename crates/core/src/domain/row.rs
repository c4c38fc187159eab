//! The stored record of a control-plane request, as the store reads it and `translate` renders it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A control-plane row.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPlaneRow {
    /// Id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Name, unique per tenant.
    pub name: String,
    /// Requested Kubernetes version.
    pub kubernetes_version: String,
    /// Replicas.
    pub replicas: i32,
    /// Service type.
    pub service_type: String,
    /// Port.
    pub port: i32,
    /// Size class.
    pub size_class: String,
    /// Preferred pool.
    pub datastore_pool: Option<String>,
    /// Required DataStore labels.
    pub datastore_labels: serde_json::Value,
    /// Explicit DataStore (platform admins).
    pub datastore_name: Option<String>,
    /// Offload mode.
    pub offload: String,
    /// Addons.
    pub addons: serde_json::Value,
    /// Labels.
    pub labels: serde_json::Value,
    /// Observed phase.
    pub phase: String,
    /// Observed status.
    pub status: serde_json::Value,
    /// Generation (bumped by every spec change).
    pub generation: i64,
    /// Deleted at.
    pub deleted_at: Option<DateTime<Utc>>,
    /// Created at.
    pub created_at: DateTime<Utc>,
    /// Updated at.
    pub updated_at: DateTime<Utc>,
}
