//! Structured authentication's tenant side: the ClusterRoleBindings that give the groups Tenantplane's
//! own issuer maps its roles to (`tenantplane:admins`, `tenantplane:members`, `tenantplane:viewers`)
//! Kubernetes' built-in `cluster-admin`, `edit` and `view`. Kept while `spec.authentication` is set.

use super::{Kind, TenantObject, binding};

/// The group of a tenant's admins, bound to `cluster-admin`.
pub const ADMINS: &str = "tenantplane:admins";
/// The group of a tenant's members, bound to `edit`.
pub const MEMBERS: &str = "tenantplane:members";
/// The group of a tenant's viewers, bound to `view`.
pub const VIEWERS: &str = "tenantplane:viewers";

/// `(binding and group, ClusterRole)` of each role.
pub const BINDINGS: [(&str, &str); 3] = [(ADMINS, "cluster-admin"), (MEMBERS, "edit"), (VIEWERS, "view")];

/// The phase's objects: one ClusterRoleBinding per role, named after its group.
pub fn objects() -> Vec<TenantObject> {
    BINDINGS
        .iter()
        .map(|(group, role)| binding(Kind::ClusterRoleBinding, "", group, role, &[("Group", group)]))
        .collect()
}
