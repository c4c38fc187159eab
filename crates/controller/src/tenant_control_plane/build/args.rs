//! The components' command-line args: managed flags, defaults and the user's extraArgs.

use super::*;

pub(super) fn flag_name(arg: &str) -> &str {
    let bare = arg.trim_start_matches('-');
    bare.split_once('=').map(|(k, _)| k).unwrap_or(bare)
}

pub(super) fn render(flags: &BTreeMap<String, String>) -> Vec<String> {
    flags.iter().map(|(k, v)| format!("--{k}={v}")).collect()
}

/// The merged args of a component and the user flags that were dropped because they collide with a
/// managed flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// Final args.
    pub args: Vec<String>,
    /// User flags dropped (verbatim).
    pub dropped: Vec<String>,
}

/// Managed flags always win (a user duplicate is dropped and reported), defaults yield to a user flag,
/// the managed and default segment is sorted and user flags follow verbatim.
pub fn merge_args(
    managed: &BTreeMap<String, String>,
    defaults: &BTreeMap<String, String>,
    user: &[String],
) -> Args {
    let mut dropped = Vec::new();
    let mut extras = Vec::new();
    let user_names: BTreeSet<&str> = user.iter().map(|a| flag_name(a)).collect();
    for arg in user {
        if managed.contains_key(flag_name(arg)) {
            dropped.push(arg.clone());
        } else {
            extras.push(arg.clone());
        }
    }
    let mut base = managed.clone();
    for (k, v) in defaults {
        if !user_names.contains(k.as_str()) && !base.contains_key(k) {
            base.insert(k.clone(), v.clone());
        }
    }
    let mut args = render(&base);
    args.extend(extras);
    Args { args, dropped }
}

fn with_scheme(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("https://{endpoint}")
    }
}

/// `--etcd-servers-overrides`: `<resource>#https://ep1;https://ep2`, joined with `,`, in spec order.
pub fn etcd_servers_overrides(overrides: &[(String, Vec<String>)]) -> Option<String> {
    (!overrides.is_empty()).then(|| {
        overrides
            .iter()
            .map(|(resource, eps)| {
                format!(
                    "{resource}#{}",
                    eps.iter().map(|e| with_scheme(e)).collect::<Vec<_>>().join(";")
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    })
}

pub(super) fn kv(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// kube-apiserver's storage flags: etcd's servers, prefix and client certificate, or kine's socket;
/// and the overrides.
fn storage_flags(storage: &StorageView) -> BTreeMap<String, String> {
    let mut managed = BTreeMap::new();
    match storage.driver {
        Driver::Etcd => {
            managed.insert(
                "etcd-servers".into(),
                storage
                    .endpoints
                    .iter()
                    .map(|e| with_scheme(e))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            managed.insert("etcd-prefix".into(), format!("/{}", storage.schema));
            managed.insert("etcd-cafile".into(), format!("{PKI}/etcd/ca.crt"));
            managed.insert("etcd-certfile".into(), format!("{PKI}/etcd/server.crt"));
            managed.insert("etcd-keyfile".into(), format!("{PKI}/etcd/server.key"));
            managed.insert("etcd-compaction-interval".into(), "0".into());
        }
        _ => {
            managed.insert("etcd-servers".into(), "unix:///uds/kine".into());
        }
    }
    if let Some(o) = etcd_servers_overrides(&storage.overrides) {
        managed.insert("etcd-servers-overrides".into(), o);
    }
    managed
}

/// kube-apiserver's args.
pub fn apiserver_args(tcp: &TenantControlPlane, storage: &StorageView) -> Args {
    let np = tcp.spec.network_profile.clone().unwrap_or_default();
    let admission = tcp
        .spec
        .kubernetes
        .admission_controllers
        .clone()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_ADMISSION_PLUGINS.iter().map(|s| s.to_string()).collect());
    let address_types = tcp
        .spec
        .kubernetes
        .kubelet
        .preferred_address_types
        .as_ref()
        .map(|t| {
            t.iter()
                .map(|a| {
                    serde_json::to_value(a)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                })
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default()
        })
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| default_address_types(tcp));
    let mut managed = kv(&[
        ("client-ca-file", format!("{PKI}/ca.crt")),
        ("enable-admission-plugins", admission.join(",")),
        ("service-cluster-ip-range", service_cidrs(tcp).join(",")),
        (
            "kubelet-client-certificate",
            format!("{PKI}/apiserver-kubelet-client.crt"),
        ),
        (
            "kubelet-client-key",
            format!("{PKI}/apiserver-kubelet-client.key"),
        ),
        ("kubelet-preferred-address-types", address_types.join(",")),
        ("proxy-client-cert-file", format!("{PKI}/front-proxy-client.crt")),
        ("proxy-client-key-file", format!("{PKI}/front-proxy-client.key")),
        ("requestheader-allowed-names", "front-proxy-client".into()),
        (
            "requestheader-client-ca-file",
            format!("{PKI}/front-proxy-ca.crt"),
        ),
        ("secure-port", port(tcp).to_string()),
        ("service-account-key-file", format!("{PKI}/sa.pub")),
        ("service-account-signing-key-file", format!("{PKI}/sa.key")),
        ("tls-cert-file", format!("{PKI}/apiserver.crt")),
        ("tls-private-key-file", format!("{PKI}/apiserver.key")),
    ]);
    if let Some(address) = np
        .advertise_address
        .clone()
        .filter(|a| !a.is_empty())
        .or_else(|| np.address.clone().filter(|a| a.parse::<IpAddr>().is_ok()))
    {
        managed.insert("advertise-address".into(), address);
    }
    managed.extend(storage_flags(storage));
    if konnectivity(tcp).is_some() {
        managed.extend(apiserver_flags());
    }
    if authentication(tcp).is_some() {
        managed.extend(authentication_flags());
    }
    // kube-apiserver refuses `--oidc-*` beside `--authentication-config`: they are dropped (and
    // reported by `AuthenticationConfigured`).
    let oidc = oidc_flags(tcp);
    let user: Vec<String> = user_args(tcp, |e| e.api_server.clone())
        .into_iter()
        .filter(|a| !oidc.contains(a))
        .collect();
    let mut defaults = kv(&[
        ("allow-privileged", "true".into()),
        ("enable-bootstrap-token-auth", "true".into()),
        ("requestheader-extra-headers-prefix", "X-Remote-Extra-".into()),
        ("requestheader-group-headers", "X-Remote-Group".into()),
        ("requestheader-username-headers", "X-Remote-User".into()),
        ("service-account-issuer", default_service_account_issuer(tcp)),
    ]);
    if !user.iter().any(|a| flag_name(a) == "authorization-config") {
        defaults.insert("authorization-mode".into(), "Node,RBAC".into());
    }
    // Overrides are always Tenantplane's: a user value is dropped, with or without overrides.
    let (own, user): (Vec<String>, Vec<String>) = user
        .into_iter()
        .partition(|a| flag_name(a) == "etcd-servers-overrides" && !managed.contains_key(flag_name(a)));
    let mut merged = merge_args(&managed, &defaults, &user);
    merged.dropped.extend(own);
    merged
}

/// `https://kubernetes.default.svc.<clusterDomain>`: kube-apiserver's `--service-account-issuer` unless
/// `extraArgs.apiServer` sets one.
pub fn default_service_account_issuer(tcp: &TenantControlPlane) -> String {
    format!("https://kubernetes.default.svc.{}", cluster_domain(tcp))
}

/// The effective `--service-account-issuer` values: each one of `extraArgs.apiServer` (the flag may
/// repeat; the first signs, all are accepted), else the default. No JWT issuer may equal one.
pub fn service_account_issuers(tcp: &TenantControlPlane) -> Vec<String> {
    let user: Vec<String> = user_args(tcp, |e| e.api_server.clone())
        .iter()
        .filter(|a| flag_name(a) == "service-account-issuer")
        .filter_map(|a| a.split_once('=').map(|(_, v)| v.to_string()))
        .collect();
    if user.is_empty() {
        vec![default_service_account_issuer(tcp)]
    } else {
        user
    }
}

/// Upstream's `Hostname,InternalIP,ExternalIP`; with Konnectivity, InternalIP first: kube-apiserver
/// resolves a node's host name itself, on the management side, before the tunnel sees the dial, and
/// tenant node names rarely resolve there.
fn default_address_types(tcp: &TenantControlPlane) -> Vec<String> {
    let order: &[&str] = match konnectivity(tcp) {
        Some(_) => &["InternalIP", "ExternalIP", "Hostname"],
        None => &["Hostname", "InternalIP", "ExternalIP"],
    };
    order.iter().map(|t| t.to_string()).collect()
}

pub(super) fn user_args(
    tcp: &TenantControlPlane,
    pick: impl Fn(&crate::k8s::crd::ComponentExtraArgs) -> Option<Vec<String>>,
) -> Vec<String> {
    tcp.spec
        .control_plane
        .deployment
        .as_ref()
        .and_then(|d| d.extra_args.as_ref())
        .and_then(pick)
        .unwrap_or_default()
}

/// kube-controller-manager's args: the user's extraArgs override these (map merge, sorted).
pub fn controller_manager_args(tcp: &TenantControlPlane) -> Vec<String> {
    let conf = "/etc/kubernetes/controller-manager.conf".to_string();
    let mut flags = kv(&[
        ("allocate-node-cidrs", "true".into()),
        ("authentication-kubeconfig", conf.clone()),
        ("authorization-kubeconfig", conf.clone()),
        ("bind-address", "0.0.0.0".into()),
        ("client-ca-file", format!("{PKI}/ca.crt")),
        ("cluster-cidr", pod_cidrs(tcp).join(",")),
        ("cluster-name", tcp.name_any()),
        ("cluster-signing-cert-file", format!("{PKI}/ca.crt")),
        ("cluster-signing-key-file", format!("{PKI}/ca.key")),
        ("controllers", "*,bootstrapsigner,tokencleaner".into()),
        ("kubeconfig", conf),
        ("leader-elect", "true".into()),
        (
            "requestheader-client-ca-file",
            format!("{PKI}/front-proxy-ca.crt"),
        ),
        ("root-ca-file", format!("{PKI}/ca.crt")),
        ("service-account-private-key-file", format!("{PKI}/sa.key")),
        ("service-cluster-ip-range", service_cidrs(tcp).join(",")),
        ("use-service-account-credentials", "true".into()),
    ]);
    for arg in user_args(tcp, |e| e.controller_manager.clone()) {
        let bare = arg.trim_start_matches('-');
        let (k, v) = bare.split_once('=').unwrap_or((bare, "true"));
        flags.insert(k.to_string(), v.to_string());
    }
    render(&flags)
}

/// kube-scheduler's args: the user's extraArgs, then the forced kubeconfig, bind and leader flags.
pub fn scheduler_args(tcp: &TenantControlPlane) -> Vec<String> {
    let conf = "/etc/kubernetes/scheduler.conf".to_string();
    let mut flags = BTreeMap::new();
    for arg in user_args(tcp, |e| e.scheduler.clone()) {
        let bare = arg.trim_start_matches('-');
        let (k, v) = bare.split_once('=').unwrap_or((bare, "true"));
        flags.insert(k.to_string(), v.to_string());
    }
    for (k, v) in [
        ("authentication-kubeconfig", conf.clone()),
        ("authorization-kubeconfig", conf.clone()),
        ("kubeconfig", conf),
        ("bind-address", "0.0.0.0".into()),
        ("leader-elect", "true".into()),
    ] {
        flags.insert(k.to_string(), v);
    }
    render(&flags)
}

/// kine's flag for [`KINE_MAX_OPEN_CONNECTIONS`]; not the tenant's to change.
const MAX_OPEN_FLAG: &str = "datastore-max-open-connections";

/// Most connections one kine opens to a SQL server (`--datastore-max-open-connections`; kine's
/// default is unlimited). Uncapped, every write waiting in a migration's freeze holds a connection of
/// its own until the server refuses new ones, and kine v0.17.5 answers a create whose insert failed
/// *and whose key then reads as absent* as a success: writes were acknowledged and lost. Capped, a
/// write waits for a pooled connection instead (reads wait too, while frozen), and one tenant can
/// never exhaust a shared server's connections: size `max_connections` as tenants × replicas × this.
pub const KINE_MAX_OPEN_CONNECTIONS: u32 = 64;

/// kine's args: listen address, TLS files and (SQL) the connection cap, the user's extraArgs over the
/// others. Never `--endpoint`: it carries the password, and a process's arguments are readable by every
/// user of its node (`/proc/<pid>/cmdline`); kine reads it from [`KINE_ENDPOINT_ENV`] instead.
pub fn kine_args(tcp: &TenantControlPlane, storage: &StorageView) -> Vec<String> {
    let mut flags = kv(&[("listen-address", "unix:///uds/kine".into())]);
    if let Some((_, client)) = &storage.certificate {
        flags.insert("ca-file".into(), "/certs/ca.crt".into());
        if *client {
            flags.insert("cert-file".into(), "/certs/server.crt".into());
            flags.insert("key-file".into(), "/certs/server.key".into());
        }
    }
    for arg in user_args(tcp, |e| e.kine.clone()) {
        let bare = arg.trim_start_matches('-');
        let (k, v) = bare.split_once('=').unwrap_or((bare, "true"));
        if k != "endpoint" && k != MAX_OPEN_FLAG {
            flags.insert(k.to_string(), v.to_string());
        }
    }
    if matches!(storage.driver, Driver::MySQL | Driver::PostgreSQL) {
        flags.insert(MAX_OPEN_FLAG.into(), KINE_MAX_OPEN_CONNECTIONS.to_string());
    }
    render(&flags)
}

/// The environment variable kine reads its endpoint from (the `--endpoint` flag's twin).
pub const KINE_ENDPOINT_ENV: &str = "KINE_ENDPOINT";

/// kine's endpoint for `driver`, from the config Secret's `DB_*` variables by Kubernetes' `$(VAR)`
/// expansion: the pod spec never holds the password, only the container's environment does.
pub fn kine_endpoint(driver: Driver) -> &'static str {
    match driver {
        Driver::MySQL => "mysql://$(DB_USER):$(DB_PASSWORD)@tcp($(DB_CONNECTION_STRING))/$(DB_SCHEMA)",
        Driver::PostgreSQL => "postgres://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)/$(DB_SCHEMA)",
        _ => "nats://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)?bucket=$(DB_SCHEMA)&noEmbed",
    }
}
