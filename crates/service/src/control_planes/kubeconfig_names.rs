//! Kubeconfig names unique per tenant and control plane, so that the kubeconfigs of many control planes
//! merge into one file (Kamaji names every one `kubernetes-admin@kubernetes`).

use std::collections::HashMap;

use serde_yaml::{Mapping, Value};

/// The admin kubeconfig held by the Secret is not a kubeconfig document (its content is never quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the admin kubeconfig Secret does not hold a kubeconfig document")]
pub struct NotAKubeconfig;

/// The cluster, user and context name of control plane `control_plane` of tenant `tenant`:
/// `tenantplane_<tenant>_<control plane>` (neither slugs nor names hold `_`, so no two pairs share one).
pub fn context_name(tenant: &str, control_plane: &str) -> String {
    format!("tenantplane_{tenant}_{control_plane}")
}

/// Renames the clusters, users and contexts of `kubeconfig` to `name` (with several entries of a kind,
/// each becomes `<name>_<old name>`), points the contexts at the renamed clusters and users, and makes
/// the renamed current context (else the first context, else `name`) the current context.
pub fn rename(kubeconfig: &[u8], name: &str) -> Result<Vec<u8>, NotAKubeconfig> {
    let mut doc: Value = serde_yaml::from_slice(kubeconfig).map_err(|_| NotAKubeconfig)?;
    let map = doc.as_mapping_mut().ok_or(NotAKubeconfig)?;
    let clusters = rename_entries(map, "clusters", name);
    let users = rename_entries(map, "users", name);
    let contexts = rename_entries(map, "contexts", name);
    if let Some(list) = map.get_mut("contexts").and_then(Value::as_sequence_mut) {
        for entry in list {
            if let Some(context) = entry.get_mut("context").and_then(Value::as_mapping_mut) {
                remap(context, "cluster", &clusters);
                remap(context, "user", &users);
            }
        }
    }
    let current = map
        .get("current-context")
        .and_then(Value::as_str)
        .and_then(|c| contexts.get(c).cloned())
        .or_else(|| first_name(map, "contexts"))
        .unwrap_or_else(|| name.to_string());
    map.insert("current-context".into(), current.into());
    serde_yaml::to_string(&doc)
        .map(String::into_bytes)
        .map_err(|_| NotAKubeconfig)
}

/// Renames every named entry of list `key`; returns old name → new name.
fn rename_entries(map: &mut Mapping, key: &str, name: &str) -> HashMap<String, String> {
    let mut renamed = HashMap::new();
    let Some(list) = map.get_mut(key).and_then(Value::as_sequence_mut) else {
        return renamed;
    };
    let single = list.len() == 1;
    for entry in list {
        let Some(old) = entry.get("name").and_then(Value::as_str).map(str::to_string) else {
            continue;
        };
        let new = if single {
            name.to_string()
        } else {
            format!("{name}_{old}")
        };
        if let Some(fields) = entry.as_mapping_mut() {
            fields.insert("name".into(), new.clone().into());
        }
        renamed.insert(old, new);
    }
    renamed
}

/// Replaces the reference `key` of a context by its new name.
fn remap(context: &mut Mapping, key: &str, renamed: &HashMap<String, String>) {
    let new = context
        .get(key)
        .and_then(Value::as_str)
        .and_then(|old| renamed.get(old));
    if let Some(new) = new.cloned() {
        context.insert(key.into(), new.into());
    }
}

/// The name of the first entry of list `key`.
fn first_name(map: &Mapping, key: &str) -> Option<String> {
    map.get(key)?
        .as_sequence()?
        .first()?
        .get("name")?
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An admin.conf as Kamaji writes it (data shortened).
    const KAMAJI: &str = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://10.0.0.1:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
preferences: {}
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
";

    fn parsed(bytes: &[u8]) -> Value {
        serde_yaml::from_slice(bytes).unwrap()
    }

    #[test]
    fn the_name_is_tenantplane_tenant_control_plane() {
        assert_eq!(context_name("acme", "prod"), "tenantplane_acme_prod");
    }

    #[test]
    fn kamajis_names_become_the_one_unique_name_and_everything_else_stays() {
        let out = parsed(&rename(KAMAJI.as_bytes(), "tenantplane_acme_prod").unwrap());
        let expected = parsed(
            KAMAJI
                .replace("name: kubernetes-admin@kubernetes", "name: tenantplane_acme_prod")
                .replace(
                    "current-context: kubernetes-admin@kubernetes",
                    "current-context: tenantplane_acme_prod",
                )
                .replace("cluster: kubernetes\n", "cluster: tenantplane_acme_prod\n")
                .replace("user: kubernetes-admin\n", "user: tenantplane_acme_prod\n")
                .replace("- name: kubernetes-admin\n", "- name: tenantplane_acme_prod\n")
                .replace("  name: kubernetes\n", "  name: tenantplane_acme_prod\n")
                .as_bytes(),
        );
        assert_eq!(out, expected);
        assert_eq!(out["clusters"][0]["cluster"]["server"], "https://10.0.0.1:6443");
        assert_eq!(out["users"][0]["user"]["client-key-data"], "S0VZ");
    }

    #[test]
    fn two_control_planes_get_two_different_names() {
        let a = parsed(&rename(KAMAJI.as_bytes(), &context_name("acme", "prod")).unwrap());
        let b = parsed(&rename(KAMAJI.as_bytes(), &context_name("beta", "prod")).unwrap());
        assert_eq!(a["contexts"][0]["name"], "tenantplane_acme_prod");
        assert_eq!(b["contexts"][0]["name"], "tenantplane_beta_prod");
    }

    #[test]
    fn several_entries_keep_their_old_names_as_suffixes_and_references_follow() {
        let input = "clusters:
- {name: a, cluster: {server: https://a}}
- {name: b, cluster: {server: https://b}}
users:
- {name: u, user: {token: t}}
contexts:
- {name: ca, context: {cluster: a, user: u}}
- {name: cb, context: {cluster: b, user: u}}
current-context: cb
";
        let out = parsed(&rename(input.as_bytes(), "n").unwrap());
        let expected = parsed(
            b"clusters:
- {name: n_a, cluster: {server: https://a}}
- {name: n_b, cluster: {server: https://b}}
users:
- {name: n, user: {token: t}}
contexts:
- {name: n_ca, context: {cluster: n_a, user: n}}
- {name: n_cb, context: {cluster: n_b, user: n}}
current-context: n_cb
",
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn without_a_known_current_context_the_first_context_becomes_current() {
        let input = "contexts:\n- {name: x, context: {cluster: c, user: u}}\ncurrent-context: gone\n";
        let out = parsed(&rename(input.as_bytes(), "n").unwrap());
        assert_eq!(out["current-context"], "n");
        let empty = parsed(&rename(b"apiVersion: v1\nkind: Config\n", "n").unwrap());
        assert_eq!(
            empty,
            parsed(b"apiVersion: v1\nkind: Config\ncurrent-context: n\n")
        );
    }

    #[test]
    fn a_secret_that_is_not_a_kubeconfig_is_refused_without_quoting_it() {
        assert_eq!(rename(b"- a list", "n"), Err(NotAKubeconfig));
        assert_eq!(rename(b"key: [unclosed secret", "n"), Err(NotAKubeconfig));
        assert_eq!(
            NotAKubeconfig.to_string(),
            "the admin kubeconfig Secret does not hold a kubeconfig document"
        );
    }
}
