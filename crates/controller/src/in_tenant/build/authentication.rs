//! Structured authentication's tenant side: what the groups Tenantplane's own issuer maps its roles to
//! (`tenantplane:admins`, `tenantplane:members`, `tenantplane:viewers`) may do in the tenant cluster.
//! Admins get Kubernetes' built-in `cluster-admin` cluster-wide. Members and viewers get `edit` and
//! `view` through a RoleBinding in each of the tenant's own namespaces (every namespace but
//! [`SYSTEM_NAMESPACES`]), and at cluster scope only [`NAMESPACE_READER`]: so no Secrets, impersonation,
//! tokens or RBAC writes in the system namespaces. Kept while `spec.authentication` is set.

use serde_json::json;

use super::{KUBE_NODE_LEASE, KUBE_PUBLIC, KUBE_SYSTEM, Kind, TenantObject, binding};

/// The group of a tenant's admins, bound to `cluster-admin`.
pub const ADMINS: &str = "tenantplane:admins";
/// The group of a tenant's members, bound to `edit` in the tenant's namespaces.
pub const MEMBERS: &str = "tenantplane:members";
/// The group of a tenant's viewers, bound to `view` in the tenant's namespaces.
pub const VIEWERS: &str = "tenantplane:viewers";
/// The cluster's own namespaces, where members and viewers get nothing.
pub const SYSTEM_NAMESPACES: [&str; 3] = [KUBE_SYSTEM, KUBE_PUBLIC, KUBE_NODE_LEASE];
/// The ClusterRole letting members and viewers get, list and watch namespaces, and its ClusterRoleBinding.
pub const NAMESPACE_READER: &str = "tenantplane:namespace-reader";

/// `(RoleBinding and group, ClusterRole)` bound in each of the tenant's namespaces.
pub const NAMESPACED: [(&str, &str); 2] = [(MEMBERS, "edit"), (VIEWERS, "view")];

/// The phase's objects for a cluster with `namespaces`: admins' ClusterRoleBinding, the namespace
/// reader, and members' and viewers' RoleBindings in each of [`tenant_namespaces`].
pub fn objects(namespaces: &[String]) -> Vec<TenantObject> {
    let mut objects = vec![
        binding(
            Kind::ClusterRoleBinding,
            "",
            ADMINS,
            "cluster-admin",
            &[("Group", ADMINS)],
        ),
        namespace_reader(),
        binding(
            Kind::ClusterRoleBinding,
            "",
            NAMESPACE_READER,
            NAMESPACE_READER,
            &[("Group", MEMBERS), ("Group", VIEWERS)],
        ),
    ];
    for namespace in tenant_namespaces(namespaces) {
        objects.extend(
            NAMESPACED
                .iter()
                .map(|(group, role)| cluster_role_in(namespace, group, role)),
        );
    }
    objects
}

/// The namespaces of `namespaces` that are the tenant's own: all but [`SYSTEM_NAMESPACES`].
pub fn tenant_namespaces(namespaces: &[String]) -> impl Iterator<Item = &str> {
    namespaces
        .iter()
        .map(String::as_str)
        .filter(|ns| !SYSTEM_NAMESPACES.contains(ns))
}

/// The ClusterRole [`NAMESPACE_READER`]: get, list and watch namespaces, nothing else.
fn namespace_reader() -> TenantObject {
    TenantObject::new(
        Kind::ClusterRole,
        "",
        NAMESPACE_READER,
        json!({"rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]}),
        &[],
    )
}

/// A RoleBinding in `namespace`, named after `group`, of the ClusterRole `cluster_role` to `group`.
fn cluster_role_in(namespace: &str, group: &str, cluster_role: &str) -> TenantObject {
    let mut object = binding(
        Kind::RoleBinding,
        namespace,
        group,
        cluster_role,
        &[("Group", group)],
    );
    object.body["roleRef"]["kind"] = json!("ClusterRole");
    object
}
