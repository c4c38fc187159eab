//! Kubernetes-facing types: the Kamaji-compatible custom resources, and the names Tenantplane writes
//! into every object it manages.

pub mod crd;

/// Field manager of every server-side apply (worker and controllers).
pub const FIELD_MANAGER: &str = "tenantplane";
/// Label: who manages the object (`tenantplane`); watchers select on it.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "tenantplane";
/// The label selector of every object Tenantplane manages.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=tenantplane";
