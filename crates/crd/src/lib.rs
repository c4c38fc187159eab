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

/// A client for the management cluster: from `kubeconfig`, else in-cluster or `KUBECONFIG`.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The controller's state namespace by default (`--state-namespace`): what only the controller writes.
pub const DEFAULT_STATE_NAMESPACE: &str = "tenantplane-system";

/// The migration journal: one ConfigMap per TenantControlPlane UID in the controller's state namespace,
/// written by the controller's migration manager only. `status.migration` is its published copy.
pub mod migration_journal {
    use std::collections::BTreeMap;

    use crate::crd::MigrationStatus;

    /// The data key of the record the manager runs.
    pub const CURRENT: &str = "current";
    /// The data key of the record before it.
    pub const PREVIOUS: &str = "previous";

    /// The journal's ConfigMap name for the TenantControlPlane with UID `uid`.
    pub fn name(uid: &str) -> String {
        format!("tenantplane-migration-{uid}")
    }

    /// The record under `key` of a journal ConfigMap's `data`; `Err` names the unreadable record.
    pub fn record(data: &BTreeMap<String, String>, key: &str) -> Result<Option<MigrationStatus>, String> {
        data.get(key)
            .map(|text| serde_json::from_str(text))
            .transpose()
            .map_err(|e| format!("the controller's migration journal cannot be read ({key}): {e}"))
    }
}
