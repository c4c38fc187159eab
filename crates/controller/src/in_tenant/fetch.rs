//! I/O: what the in-tenant phase builds from (the endpoint, the CA and the admin kubeconfig the
//! controller made), the tenant client, and what the tenant cluster holds.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::{ConfigMap, Namespace, Secret},
};
use kube::{
    Api, ResourceExt as _,
    api::{DynamicObject, ListParams},
    config::{KubeConfigOptions, Kubeconfig},
};

use super::build::{
    KUBE_PUBLIC, KUBE_SYSTEM, Kind, ObjectKey, PHASE_LABEL, authentication_status,
    bootstrap_token::{CLUSTER_INFO, JWS_PREFIX},
    coredns, konnectivity, kube_proxy,
    status::{Found, Rollout, SigningToken},
};
use crate::{
    Context, Error, MANAGED_BY_LABEL,
    build::untampered,
    fetch::owned_secret,
    k8s::crd::TenantControlPlane,
    secret::Secret as Sealed,
    tenant_control_plane::build::{admin_kubeconfig_name, ca_secret_name},
};

/// How long a call into a tenant cluster may take.
pub const TENANT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The controller-made inputs of one tenant.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The tenant CA certificate (PEM).
    pub ca_cert: String,
    /// The admin kubeconfig (`admin.conf` of `<tcp>-admin-kubeconfig`).
    pub admin_kubeconfig: Sealed<String>,
    /// That Secret's `resourceVersion`: a new one means a new client.
    pub admin_version: String,
}

/// A key of an owned Secret as text; a missing or edited Secret is not ready (the TenantControlPlane
/// reconcile restores it, and its watch wakes this phase).
async fn owned_key(ctx: &Context, namespace: &str, name: &str, key: &str) -> Result<(String, String), Error> {
    let not_ready = |what: &str| Error::NotReady {
        reason: "TenantCredentialsNotReady",
        message: format!("Secret {namespace}/{name} {what}; the TenantControlPlane reconcile writes it"),
    };
    let secret = owned_secret(ctx, namespace, name)
        .await?
        .ok_or_else(|| not_ready("does not exist yet"))?;
    if !untampered(&secret) {
        return Err(not_ready("was edited"));
    }
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .ok_or_else(|| not_ready(&format!("has no {key}")))?;
    Ok((value, secret.resource_version().unwrap_or_default()))
}

/// The CA and the admin kubeconfig of `tcp`.
pub async fn inputs(ctx: &Context, tcp: &TenantControlPlane) -> Result<Inputs, Error> {
    let namespace = tcp
        .namespace()
        .ok_or(Error::MissingObjectKey(".metadata.namespace"))?;
    let (ca_cert, _) = owned_key(ctx, &namespace, &ca_secret_name(tcp), "ca.crt").await?;
    let (admin, admin_version) =
        owned_key(ctx, &namespace, &admin_kubeconfig_name(tcp), "admin.conf").await?;
    Ok(Inputs {
        ca_cert,
        admin_kubeconfig: Sealed::new(admin),
        admin_version,
    })
}

/// How long a watch in a tenant cluster may go without a byte: beyond the 290 s after which the
/// tenant kube-apiserver ends a watch (kube's watcher default), so only a silent connection trips it.
pub const WATCH_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(295);

/// A client of the tenant cluster from its admin kubeconfig, with [`TENANT_TIMEOUT`] per call.
pub async fn client(inputs: &Inputs) -> Result<kube::Client, Error> {
    client_reading_within(inputs, TENANT_TIMEOUT).await
}

/// A client of the tenant cluster for a watch: [`TENANT_TIMEOUT`] to connect and write, and
/// [`WATCH_READ_TIMEOUT`] to read.
pub async fn watch_client(inputs: &Inputs) -> Result<kube::Client, Error> {
    client_reading_within(inputs, WATCH_READ_TIMEOUT).await
}

/// A client from the admin kubeconfig whose reads time out after `read_timeout`.
async fn client_reading_within(
    inputs: &Inputs,
    read_timeout: std::time::Duration,
) -> Result<kube::Client, Error> {
    let invalid = |e: &dyn std::fmt::Display| Error::Invalid {
        reason: "TenantKubeconfigInvalid",
        message: format!("the admin kubeconfig cannot be used: {e}"),
    };
    let kubeconfig = Kubeconfig::from_yaml(inputs.admin_kubeconfig.expose()).map_err(|e| invalid(&e))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(&e))?;
    config.connect_timeout = Some(TENANT_TIMEOUT);
    config.read_timeout = Some(read_timeout);
    config.write_timeout = Some(TENANT_TIMEOUT);
    kube::Client::try_from(config).map_err(|e| invalid(&e))
}

/// The names of the tenant cluster's namespaces, but those being deleted (no binding can be created
/// in one): one metadata-only list.
pub async fn namespaces(client: &kube::Client) -> Result<Vec<String>, Error> {
    let list = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .map(|ns| ns.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// The in-tenant phase's objects in the tenant (labelled with a phase), with their `resourceVersion`:
/// one metadata-only list per kind.
pub async fn present(client: &kube::Client) -> Result<HashMap<ObjectKey, String>, Error> {
    let selector = format!("{}={},{PHASE_LABEL}", MANAGED_BY_LABEL.0, MANAGED_BY_LABEL.1);
    let lists = Kind::ALL.map(|kind| {
        let api = Api::<DynamicObject>::all_with(client.clone(), &kind.api_resource());
        let params = ListParams::default().labels(&selector);
        async move { api.list_metadata(&params).await.map(|list| (kind, list)) }
    });
    let mut present = HashMap::new();
    for (kind, list) in futures_util::future::try_join_all(lists).await? {
        for item in list.items {
            let key = ObjectKey {
                kind,
                namespace: item.namespace().unwrap_or_default(),
                name: item.name_any(),
            };
            present.insert(key, item.resource_version().unwrap_or_default());
        }
    }
    Ok(present)
}

/// What the tenant runs: the bootstrap tokens that should sign cluster-info and the signatures it
/// carries, and the addons' rollouts. Only a token's id and usages are read from its Secret; its secret
/// half is never kept.
pub async fn observed(client: &kube::Client, konnectivity_agent: Option<Kind>) -> Result<Found, Error> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), KUBE_PUBLIC);
    let cluster_info = config_maps.get_opt(CLUSTER_INFO);
    let params = ListParams::default().fields("type=bootstrap.kubernetes.io/token");
    let secrets = Api::<Secret>::namespaced(client.clone(), KUBE_SYSTEM);
    let tokens = secrets.list(&params);
    let deployments = Api::<Deployment>::namespaced(client.clone(), KUBE_SYSTEM);
    let daemon_sets = Api::<DaemonSet>::namespaced(client.clone(), KUBE_SYSTEM);
    let (cluster_info, tokens, core_dns, kube_proxy) = futures_util::future::try_join4(
        cluster_info,
        tokens,
        deployments.get_opt(coredns::DEPLOYMENT),
        daemon_sets.get_opt(kube_proxy::DAEMON_SET),
    )
    .await?;
    let konnectivity = match konnectivity_agent {
        Some(kind) => konnectivity_rollout(client, kind).await?,
        None => None,
    };
    let signed: BTreeSet<String> = cluster_info
        .and_then(|cm| cm.data)
        .unwrap_or_default()
        .into_keys()
        .filter_map(|k| k.strip_prefix(JWS_PREFIX).map(str::to_string))
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut tokens: Vec<SigningToken> = tokens
        .items
        .iter()
        .filter_map(|secret| signing_token(secret, now))
        .collect();
    tokens.sort();
    Ok(Found {
        signed,
        tokens,
        core_dns: core_dns.and_then(|d| d.status).map(|s| Rollout {
            available: s.available_replicas.unwrap_or_default(),
            desired: s.replicas.unwrap_or_default(),
        }),
        kube_proxy: kube_proxy.and_then(|d| d.status).map(|s| Rollout {
            available: s.number_available.unwrap_or_default(),
            desired: s.desired_number_scheduled,
        }),
        konnectivity,
        authentication_metrics: None,
    })
}

/// The tenant kube-apiserver's authentication-config metric lines
/// ([`authentication_status::METRIC_PREFIX`]) of one `GET /metrics`, streamed so the rest (about a
/// megabyte) is never held; `None` (logged at debug) when they cannot be read.
pub async fn authentication_metrics(client: &kube::Client) -> Option<String> {
    use futures_util::{AsyncBufReadExt as _, TryStreamExt as _};
    let read = async {
        // `GET /metrics`: a get of the name `metrics` under the empty path.
        let request = kube::core::Request::new("")
            .get("metrics", &Default::default())
            .map_err(|e| e.to_string())?;
        let body = client.request_stream(request).await.map_err(|e| e.to_string())?;
        let kept: Vec<String> = body
            .lines()
            .try_filter(|line| std::future::ready(line.starts_with(authentication_status::METRIC_PREFIX)))
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(kept.join("\n"))
    };
    match read.await {
        Ok(lines) => Some(lines),
        Err(error) => {
            tracing::debug!(%error, "the tenant kube-apiserver's /metrics could not be read");
            None
        }
    }
}

/// The Konnectivity agents' rollout, of their DaemonSet or Deployment (`kind`, per `agent.mode`).
async fn konnectivity_rollout(client: &kube::Client, kind: Kind) -> Result<Option<Rollout>, Error> {
    Ok(match kind {
        Kind::Deployment => Api::<Deployment>::namespaced(client.clone(), KUBE_SYSTEM)
            .get_opt(konnectivity::AGENT)
            .await?
            .and_then(|d| d.status)
            .map(|s| Rollout {
                available: s.available_replicas.unwrap_or_default(),
                desired: s.replicas.unwrap_or_default(),
            }),
        _ => Api::<DaemonSet>::namespaced(client.clone(), KUBE_SYSTEM)
            .get_opt(konnectivity::AGENT)
            .await?
            .and_then(|d| d.status)
            .map(|s| Rollout {
                available: s.number_available.unwrap_or_default(),
                desired: s.desired_number_scheduled,
            }),
    })
}

/// A live bootstrap token Secret with signing usage, as its id.
fn signing_token(secret: &Secret, now: k8s_openapi::jiff::Timestamp) -> Option<SigningToken> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| data.get(key).and_then(|v| std::str::from_utf8(&v.0).ok());
    if text("usage-bootstrap-signing") != Some("true") {
        return None;
    }
    let expired = text("expiration")
        .and_then(|e| e.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_some_and(|at| at <= now);
    let id = text("token-id")?.to_string();
    (!expired).then_some(SigningToken { id })
}
