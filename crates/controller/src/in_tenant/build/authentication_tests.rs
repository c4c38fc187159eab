use serde_json::json;
use tenantplane_testkit::tcp;

use super::{
    authentication::{ADMINS, MEMBERS, NAMESPACE_READER, VIEWERS},
    *,
};
use crate::k8s::crd::TenantControlPlane;

/// A tenant cluster's namespaces: the three system ones and two of the tenant's own.
fn cluster_namespaces() -> Vec<String> {
    [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "team-a",
    ]
    .map(String::from)
    .to_vec()
}

fn facts<'a>(tcp: &'a TenantControlPlane, namespaces: &'a [String]) -> Facts<'a> {
    Facts {
        tcp,
        endpoint: "192.0.2.10:6443",
        ca_cert: "",
        version: "v1.34.4",
        key_algorithm: KeyAlgorithm::EcdsaP256,
        namespaces,
    }
}

/// A binding as (kind, namespace, name, roleRef kind, roleRef name, subjects as `kind/name`).
type Row = (Kind, String, String, String, String, Vec<String>);

/// Every (Cluster)RoleBinding among `objects`, sorted.
fn bindings<'a>(objects: impl IntoIterator<Item = &'a TenantObject>) -> Vec<Row> {
    let text = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let mut rows: Vec<Row> = objects
        .into_iter()
        .filter(|o| matches!(o.key.kind, Kind::RoleBinding | Kind::ClusterRoleBinding))
        .map(|o| {
            let subjects = o.body["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| format!("{}/{}", text(&s["kind"]), text(&s["name"])))
                .collect();
            let role = &o.body["roleRef"];
            let (namespace, name) = (o.key.namespace.clone(), o.key.name.clone());
            (
                o.key.kind,
                namespace,
                name,
                text(&role["kind"]),
                text(&role["name"]),
                subjects,
            )
        })
        .collect();
    rows.sort();
    rows
}

fn row(kind: Kind, namespace: &str, name: &str, role: (&str, &str), subjects: &[&str]) -> Row {
    let subjects = subjects.iter().map(|s| format!("Group/{s}")).collect();
    (
        kind,
        namespace.into(),
        name.into(),
        role.0.into(),
        role.1.into(),
        subjects,
    )
}

/// Members' and viewers' RoleBindings in `namespace`.
fn namespace_rows(namespace: &str) -> [Row; 2] {
    [
        row(
            Kind::RoleBinding,
            namespace,
            MEMBERS,
            ("ClusterRole", "edit"),
            &[MEMBERS],
        ),
        row(
            Kind::RoleBinding,
            namespace,
            VIEWERS,
            ("ClusterRole", "view"),
            &[VIEWERS],
        ),
    ]
}

#[test]
fn members_and_viewers_get_edit_and_view_in_each_tenant_namespace_and_nothing_in_system_ones() {
    let with = tcp("tenants", "cp").spec("authentication", json!({})).build();
    let namespaces = cluster_namespaces();
    let objects = desired(&facts(&with, &namespaces)).authentication.unwrap();
    let mut expected = vec![
        row(
            Kind::ClusterRoleBinding,
            "",
            ADMINS,
            ("ClusterRole", "cluster-admin"),
            &[ADMINS],
        ),
        row(
            Kind::ClusterRoleBinding,
            "",
            NAMESPACE_READER,
            ("ClusterRole", NAMESPACE_READER),
            &[MEMBERS, VIEWERS],
        ),
    ];
    expected.extend(namespace_rows("default"));
    expected.extend(namespace_rows("team-a"));
    expected.sort();
    assert_eq!(bindings(&objects), expected);
    for o in &objects {
        assert_eq!(o.body["metadata"]["labels"][PHASE_LABEL], "authentication");
        assert_eq!(
            o.body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "tenantplane"
        );
        let namespace = o.body["metadata"]["namespace"].as_str().unwrap_or_default();
        assert_eq!(namespace, o.key.namespace);
    }
    // A cluster with only the system namespaces gets no RoleBinding at all.
    let system: Vec<String> = ["kube-node-lease", "kube-public", "kube-system"]
        .map(String::from)
        .to_vec();
    let objects = desired(&facts(&with, &system)).authentication.unwrap();
    assert!(
        bindings(&objects).iter().all(|r| r.0 == Kind::ClusterRoleBinding),
        "{objects:#?}"
    );
    // Without `spec.authentication`, none of it (so the prune deletes what a tenant has of it).
    let without = tcp("tenants", "cp").build();
    let desired = desired(&facts(&without, &namespaces));
    assert_eq!(desired.authentication, None);
    assert!(desired.objects().all(|o| !o.key.name.starts_with("tenantplane:")));
}

#[test]
fn the_namespace_reader_may_get_list_and_watch_namespaces_and_nothing_else() {
    let tcp = tcp("tenants", "cp").spec("authentication", json!({})).build();
    let namespaces = cluster_namespaces();
    let objects = desired(&facts(&tcp, &namespaces)).authentication.unwrap();
    let roles: Vec<&TenantObject> = objects
        .iter()
        .filter(|o| matches!(o.key.kind, Kind::ClusterRole | Kind::Role))
        .collect();
    assert_eq!(roles.len(), 1, "{roles:#?}");
    assert_eq!(roles[0].key.kind, Kind::ClusterRole);
    assert_eq!(roles[0].key.name, NAMESPACE_READER);
    assert_eq!(
        roles[0].body["rules"],
        json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}])
    );
}

#[test]
fn no_cluster_role_binding_gives_members_or_viewers_edit_or_view_and_the_old_ones_are_pruned() {
    let tcp = tcp("tenants", "cp").spec("authentication", json!({})).build();
    let namespaces = cluster_namespaces();
    let desired = desired(&facts(&tcp, &namespaces));
    let cluster_wide: Vec<Row> = bindings(desired.objects())
        .into_iter()
        .filter(|r| r.0 == Kind::ClusterRoleBinding)
        .filter(|r| {
            r.5.iter()
                .any(|s| *s == format!("Group/{MEMBERS}") || *s == format!("Group/{VIEWERS}"))
        })
        .collect();
    assert_eq!(
        cluster_wide,
        vec![row(
            Kind::ClusterRoleBinding,
            "",
            NAMESPACE_READER,
            ("ClusterRole", NAMESPACE_READER),
            &[MEMBERS, VIEWERS]
        )]
    );
    // The ClusterRoleBindings of an older version, named after the groups, are wanted by no phase and
    // kept by none: the prune deletes them from a tenant that has them.
    for group in [MEMBERS, VIEWERS] {
        let old = ObjectKey {
            kind: Kind::ClusterRoleBinding,
            namespace: String::new(),
            name: group.into(),
        };
        assert!(desired.objects().all(|o| o.key != old), "{old}");
        assert!(!desired.keeps(&old));
    }
}
