//! `tenantplane kubeconfig get NAME [--merge]`: a control plane's admin kubeconfig, printed or merged
//! into the user's kubeconfig file. The server names its cluster, user and context
//! `tenantplane_<tenant>_<control plane>`, so merging replaces only that control plane's own entries.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_yaml::{Mapping, Value};

use super::{
    config::Session,
    error::{ClientError, Result},
};

/// `tenantplane kubeconfig …`.
#[derive(Debug, clap::Args)]
pub struct KubeconfigArgs {
    /// Tenant slug (default: the one saved by `login`).
    #[arg(long, env = "TENANTPLANE_TENANT", global = true)]
    tenant: Option<String>,
    #[command(subcommand)]
    command: KubeconfigCommand,
}

/// The kubeconfig subcommands.
#[derive(Debug, Subcommand)]
enum KubeconfigCommand {
    /// Print a control plane's admin kubeconfig, or merge it into your kubeconfig file.
    Get {
        /// Name or id of the control plane.
        name: String,
        /// Merge it into the first file of KUBECONFIG (else ~/.kube/config), replacing only entries of
        /// the same names, instead of printing it.
        #[arg(long)]
        merge: bool,
    },
}

impl KubeconfigArgs {
    /// Runs the subcommand.
    pub async fn run(self) -> Result<()> {
        let session = Session::load(self.tenant)?;
        let tenant = session.tenant()?;
        let KubeconfigCommand::Get {
            name,
            merge: into_file,
        } = self.command;
        let incoming = session.api.kubeconfig(tenant, &name).await?;
        if !into_file {
            print!("{incoming}");
            return Ok(());
        }
        let path = target_from(|k| std::env::var(k).ok())
            .ok_or_else(|| ClientError::Other("no kubeconfig location: set KUBECONFIG or HOME".into()))?;
        let _held = super::fs::lock(&path, super::fs::LOCK_WAIT)
            .map_err(|e| ClientError::Other(format!("lock {}: {e}", path.display())))?;
        let existing = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ClientError::Other(format!("read {}: {e}", path.display()))),
        };
        let (merged, context) = merge(existing.as_deref(), &incoming, &path)?;
        super::fs::write_private(&path, merged.as_bytes())
            .map_err(|e| ClientError::Other(format!("write {}: {e}", path.display())))?;
        println!(
            "context {context} merged into {}; use it with: kubectl --context {context} get namespaces",
            path.display()
        );
        Ok(())
    }
}

/// The file to merge into, from the environment `env`: KUBECONFIG's first entry, else
/// `$HOME/.kube/config`.
pub fn target_from(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(first) = env("KUBECONFIG")
        .as_deref()
        .and_then(|list| list.split(':').find(|p| !p.is_empty()))
    {
        return Some(PathBuf::from(first));
    }
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".kube").join("config"))
}

/// Merges kubeconfig `incoming` into `existing` (the text of the file at `path`, if any): each cluster,
/// user and context of `incoming` replaces the entry of the same name or is added; everything else stays.
/// The file's current context stays, unless it has none: then it is `incoming`'s. Returns the merged
/// YAML and `incoming`'s current context.
pub fn merge(existing: Option<&str>, incoming: &str, path: &Path) -> Result<(String, String)> {
    let not_kubeconfig =
        |what: &str| ClientError::Other(format!("{what} is not a kubeconfig; nothing was written"));
    let incoming: Value =
        serde_yaml::from_str(incoming).map_err(|_| not_kubeconfig("the server's answer"))?;
    let incoming = incoming
        .as_mapping()
        .ok_or_else(|| not_kubeconfig("the server's answer"))?;
    let context = incoming
        .get("current-context")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let file = path.display().to_string();
    let mut base: Value = match existing.filter(|t| !t.trim().is_empty()) {
        Some(text) => serde_yaml::from_str(text).map_err(|_| not_kubeconfig(&file))?,
        None => Value::Mapping(Mapping::new()),
    };
    let map = base.as_mapping_mut().ok_or_else(|| not_kubeconfig(&file))?;
    for (key, value) in [("apiVersion", "v1"), ("kind", "Config")] {
        if !map.contains_key(key) {
            map.insert(key.into(), value.into());
        }
    }
    for key in ["clusters", "users", "contexts"] {
        let new: Vec<Value> = incoming
            .get(key)
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        let names: Vec<&Value> = new.iter().filter_map(|e| e.get("name")).collect();
        let mut list: Vec<Value> = map
            .get(key)
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        list.retain(|e| e.get("name").is_none_or(|n| !names.contains(&n)));
        list.extend(new.iter().cloned());
        map.insert(key.into(), Value::Sequence(list));
    }
    let has_current = map
        .get("current-context")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    if !has_current && !context.is_empty() {
        map.insert("current-context".into(), context.clone().into());
    }
    let text = serde_yaml::to_string(&base).map_err(|e| ClientError::Other(format!("kubeconfig: {e}")))?;
    Ok((text, context))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(name: &str, server: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster: {{server: '{server}'}}\nusers:\n- name: {name}\n  user: {{token: t}}\ncontexts:\n- name: {name}\n  context: {{cluster: {name}, user: {name}}}\ncurrent-context: {name}\n"
        )
    }

    fn names(text: &str, key: &str) -> Vec<String> {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        doc[key]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_target_is_kubeconfigs_first_file_else_home_kube_config() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            target_from(env(&[("KUBECONFIG", ":/a/one:/b/two"), ("HOME", "/h")])),
            Some(PathBuf::from("/a/one"))
        );
        assert_eq!(
            target_from(env(&[("KUBECONFIG", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.kube/config"))
        );
        assert_eq!(target_from(env(&[])), None);
    }

    #[test]
    fn two_control_planes_merge_into_two_contexts_and_other_entries_stay() {
        let path = Path::new("/k/config");
        let mine = "apiVersion: v1\nkind: Config\nclusters:\n- {name: work, cluster: {server: 'https://w'}}\nusers:\n- {name: me, user: {token: x}}\ncontexts:\n- {name: work, context: {cluster: work, user: me}}\ncurrent-context: work\n";
        let (once, ctx_a) = merge(Some(mine), &kubeconfig("tenantplane_a_prod", "https://a"), path).unwrap();
        let (twice, ctx_b) =
            merge(Some(&once), &kubeconfig("tenantplane_b_prod", "https://b"), path).unwrap();
        assert_eq!(
            (ctx_a.as_str(), ctx_b.as_str()),
            ("tenantplane_a_prod", "tenantplane_b_prod")
        );
        assert_eq!(
            names(&twice, "contexts"),
            vec!["work", "tenantplane_a_prod", "tenantplane_b_prod"]
        );
        assert_eq!(
            names(&twice, "clusters"),
            vec!["work", "tenantplane_a_prod", "tenantplane_b_prod"]
        );
        assert_eq!(
            names(&twice, "users"),
            vec!["me", "tenantplane_a_prod", "tenantplane_b_prod"]
        );
        let doc: Value = serde_yaml::from_str(&twice).unwrap();
        assert_eq!(doc["current-context"], "work", "the user's current context stays");
    }

    #[test]
    fn merging_again_replaces_the_entries_of_the_same_name_only() {
        let path = Path::new("/k/config");
        let (once, _) = merge(None, &kubeconfig("tenantplane_a_prod", "https://old"), path).unwrap();
        let (again, _) = merge(
            Some(&once),
            &kubeconfig("tenantplane_a_prod", "https://new"),
            path,
        )
        .unwrap();
        let doc: Value = serde_yaml::from_str(&again).unwrap();
        assert_eq!(names(&again, "clusters"), vec!["tenantplane_a_prod"]);
        assert_eq!(doc["clusters"][0]["cluster"]["server"], "https://new");
        assert_eq!(
            doc["current-context"], "tenantplane_a_prod",
            "a new file takes its context"
        );
        assert_eq!(
            (doc["apiVersion"].as_str(), doc["kind"].as_str()),
            (Some("v1"), Some("Config"))
        );
    }

    #[test]
    fn a_file_that_is_not_a_kubeconfig_is_left_alone() {
        let err = merge(
            Some("- a list"),
            &kubeconfig("n", "https://a"),
            Path::new("/k/config"),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "/k/config is not a kubeconfig; nothing was written"
        );
    }
}
