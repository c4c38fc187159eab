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
