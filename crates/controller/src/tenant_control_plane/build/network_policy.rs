//! The NetworkPolicy `<tcp>-egress`: where the control-plane pods (kube-apiserver, kine, the
//! Konnectivity server, the controller-manager and the scheduler) may connect to. One per
//! TenantControlPlane, selecting its pods by the Deployment's selector label, owned by it; egress only
//! (`policyTypes: [Egress]`), so ingress stays as the Service makes it.
//!
//! Allowed: DNS (kube-dns, UDP and TCP 53); every endpoint of every DataStore the TenantControlPlane
//! names (primary and overrides, in spec and status, both ends of a running migration); Tenantplane's
//! credential issuer; HTTPS (443) to public addresses only when the tenant has identity providers of its
//! own; without Konnectivity, kubelets (TCP 10250) at any address. With Konnectivity the apiserver's
//! traffic to nodes, webhooks and aggregated APIs goes through the tunnel its agents opened inwards,
//! and the server reaches its apiserver on loopback, so neither needs a rule.
//!
//! An endpoint's host decides its peer: an IP address is an `ipBlock` /32 (/128); an in-cluster Service
//! name (`<service>.<namespace>.svc…`, or a StatefulSet pod's `<pod>.<service>.<namespace>.svc…`) is
//! the pods its selector picks, on the port the Service sends to; any other host name (and a Service
//! without a selector) is its port at any address, because a NetworkPolicy cannot name hosts.

use std::net::IpAddr;

use k8s_openapi::{
    api::networking::v1::{
        IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
        NetworkPolicySpec,
    },
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};

use super::{conditions::EGRESS_RESTRICTED, *};

/// The kubelet's port, the only one open towards nodes without Konnectivity.
pub const KUBELET_PORT: i32 = 10250;
/// DNS, over UDP and TCP.
pub const DNS_PORT: i32 = 53;
/// The port of identity providers of the tenant's own.
pub const HTTPS_PORT: i32 = 443;
/// The label every namespace carries with its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Addresses that are not public: the tenant's own identity providers are not reached there.
pub const PRIVATE_V4: [&str; 7] = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
];
/// The IPv6 addresses that are not public: loopback, NAT64 (which reaches IPv4 addresses), unique
/// local, link-local. (IPv4-mapped ranges are IPv4 to the API server, not within `::/0`.)
pub const PRIVATE_V6: [&str; 5] = [
    "::1/128",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "fc00::/7",
    "fe80::/10",
];

/// `<tcp>-egress`.
pub fn egress_policy_name(tcp: &TenantControlPlane) -> String {
    format!("{}-egress", tcp.name_any())
}

/// An endpoint's host, as its peer is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointHost {
    /// An IP address.
    Ip(IpAddr),
    /// An in-cluster Service, `(namespace, name)`.
    Service(String, String),
    /// Any other host name.
    External(String),
}

/// A bare `host:port` (`[v6]:port` for IPv6), as the CRD requires of DataStore endpoints.
pub fn parse_endpoint(endpoint: &str) -> Option<(EndpointHost, u16)> {
    if let Ok(addr) = endpoint.parse::<std::net::SocketAddr>() {
        // An IPv4-mapped IPv6 address is the IPv4 address on the wire (and to the API server).
        return Some((EndpointHost::Ip(addr.ip().to_canonical()), addr.port()));
    }
    let (host, port) = endpoint.rsplit_once(':')?;
    let port = port.parse().ok()?;
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() || host.contains([':', '/', '[', ']']) {
        return None;
    }
    let labels: Vec<&str> = host.split('.').collect();
    // `<service>.<namespace>.svc…`, or `<pod>.<service>.<namespace>.svc…` (a headless Service's pod).
    let service = labels
        .iter()
        .position(|l| *l == "svc")
        .filter(|i| (2..=3).contains(i))
        .map(|i| EndpointHost::Service(labels[i - 1].to_string(), labels[i - 2].to_string()));
    Some((service.unwrap_or(EndpointHost::External(host)), port))
}

/// `host:port` of an `https://` URL (443 when it names no port).
pub fn url_endpoint(url: &str) -> Option<String> {
    let authority = url.strip_prefix("https://")?.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rsplit_once(':') {
        Some((host, port)) => (!host.contains(':') || host.ends_with(']')) && port.parse::<u16>().is_ok(),
        None => false,
    };
    Some(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{HTTPS_PORT}")
    })
}

/// Where tenant kube-apiservers reach the credential issuer: the configured endpoint, else the URL's.
pub fn issuer_endpoint(settings: &WorkloadSettings) -> Option<String> {
    settings
        .credential_issuer_endpoint
        .clone()
        .filter(|e| !e.is_empty())
        .or_else(|| url_endpoint(settings.credential_issuer_url.as_deref()?))
}

/// The in-cluster Services the endpoints of `datastores` and the issuer name, `(namespace, name)`.
pub fn egress_services(
    datastores: &[(String, Vec<String>)],
    settings: &WorkloadSettings,
) -> BTreeSet<(String, String)> {
    datastores
        .iter()
        .flat_map(|(_, endpoints)| endpoints.iter().cloned())
        .chain(issuer_endpoint(settings))
        .filter_map(|e| match parse_endpoint(&e)?.0 {
            EndpointHost::Service(namespace, name) => Some((namespace, name)),
            _ => None,
        })
        .collect()
}

/// What the egress policy is built from: what the fetch step read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EgressInputs {
    /// `(name, endpoints)` of every DataStore the TenantControlPlane names that exists, by name.
    pub datastores: Vec<(String, Vec<String>)>,
    /// The in-cluster Services those endpoints and the issuer name, as read (`None`: not found).
    pub services: BTreeMap<(String, String), Option<Service>>,
}

/// What [`egress_policy`] built: the NetworkPolicy and the `EgressRestricted` condition's message.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltEgress {
    /// `<tcp>-egress`.
    pub policy: NetworkPolicy,
    /// What is allowed, and what is open at any address.
    pub message: String,
}

/// Where one endpoint's traffic may go: the peer (`None`: any address) and the port.
#[derive(Debug, Clone, PartialEq)]
struct Target {
    peer: Option<NetworkPolicyPeer>,
    port: IntOrString,
}

fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn ip_block(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: (!except.is_empty()).then(|| except.iter().map(ToString::to_string).collect()),
        }),
        ..Default::default()
    }
}

fn pods(namespace: &str, selector: BTreeMap<String, String>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(labels(&[(NAMESPACE_NAME_LABEL, namespace)])),
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(protocol: &str, port: IntOrString) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(port),
        ..Default::default()
    }
}

/// A rule to `peers` (`None`: any address) on `ports`.
fn rule(peers: Option<Vec<NetworkPolicyPeer>>, ports: Vec<NetworkPolicyPort>) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: peers,
        ports: Some(ports),
    }
}

/// The port an in-cluster Service sends `port` to: the pod's own port behind a headless Service, else
/// the `targetPort` (a number or a container port's name); `None` for a port it does not have.
fn service_port(service: &Service, port: u16) -> Option<IntOrString> {
    let spec = service.spec.as_ref()?;
    if spec.cluster_ip.as_deref() == Some("None") {
        return Some(IntOrString::Int(port.into()));
    }
    let p = spec.ports.iter().flatten().find(|p| p.port == i32::from(port))?;
    Some(p.target_port.clone().unwrap_or(IntOrString::Int(p.port)))
}

/// Where `endpoint`'s traffic may go; an unparsable endpoint is an error naming `what`.
fn target(endpoint: &str, what: &str, inputs: &EgressInputs) -> Result<Target, Error> {
    let (host, number) = parse_endpoint(endpoint).ok_or_else(|| {
        invalid(
            "EgressEndpointInvalid",
            format!("{what}: endpoint {endpoint:?} is not host:port"),
        )
    })?;
    let any = Target {
        peer: None,
        port: IntOrString::Int(number.into()),
    };
    Ok(match host {
        EndpointHost::Ip(ip) => Target {
            peer: Some(ip_block(
                &format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }),
                &[],
            )),
            port: any.port,
        },
        EndpointHost::Service(namespace, name) => {
            let service = inputs.services.get(&(namespace.clone(), name)).cloned().flatten();
            let selector = service
                .as_ref()
                .filter(|s| s.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("ExternalName"))
                .and_then(|s| s.spec.as_ref()?.selector.clone())
                .filter(|s| !s.is_empty());
            match (selector, service.as_ref().and_then(|s| service_port(s, number))) {
                (Some(selector), Some(port)) => Target {
                    peer: Some(pods(&namespace, selector)),
                    port,
                },
                _ => any,
            }
        }
        EndpointHost::External(_) => any,
    })
}

/// The rule of one target.
fn target_rule(target: &Target) -> NetworkPolicyEgressRule {
    rule(
        target.peer.clone().map(|p| vec![p]),
        vec![port("TCP", target.port.clone())],
    )
}

/// DNS: kube-dns in kube-system, UDP and TCP 53.
fn dns_rule() -> NetworkPolicyEgressRule {
    let peer = NetworkPolicyPeer {
        pod_selector: Some(labels(&[("k8s-app", "kube-dns")])),
        ..pods("kube-system", BTreeMap::new())
    };
    rule(
        Some(vec![peer]),
        vec![
            port("UDP", IntOrString::Int(DNS_PORT)),
            port("TCP", IntOrString::Int(DNS_PORT)),
        ],
    )
}

/// HTTPS to public addresses only (no private, loopback, link-local or shared range).
fn public_https_rule() -> NetworkPolicyEgressRule {
    rule(
        Some(vec![
            ip_block("0.0.0.0/0", &PRIVATE_V4),
            ip_block("::/0", &PRIVATE_V6),
        ]),
        vec![port("TCP", IntOrString::Int(HTTPS_PORT))],
    )
}

/// Whether `spec.authentication` has an identity provider other than Tenantplane's issuer.
fn own_identity_providers(tcp: &TenantControlPlane, settings: &WorkloadSettings) -> bool {
    let issuer = settings.credential_issuer_url.as_deref();
    authentication(tcp).is_some_and(|a| a.jwt.iter().any(|j| Some(j.issuer.url.as_str()) != issuer))
}

/// The NetworkPolicy `<tcp>-egress` and what it allows, in rule order: DNS, the DataStores' endpoints,
/// the credential issuer, public HTTPS (with identity providers of the tenant's own), kubelets
/// (without Konnectivity). Identical rules are kept once.
pub fn egress_policy(
    tcp: &TenantControlPlane,
    inputs: &EgressInputs,
    settings: &WorkloadSettings,
) -> Result<BuiltEgress, Error> {
    let mut rules = vec![dns_rule()];
    let mut gaps = Vec::new();
    let mut count = 0;
    let mut add = |rules: &mut Vec<NetworkPolicyEgressRule>, endpoint: &str, target: Target| {
        if target.peer.is_none() && !gaps.iter().any(|g| g == endpoint) {
            gaps.push(endpoint.to_string());
        }
        let rule = target_rule(&target);
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    };
    for (name, endpoints) in &inputs.datastores {
        for endpoint in endpoints {
            count += 1;
            add(
                &mut rules,
                endpoint,
                target(endpoint, &format!("DataStore {name}"), inputs)?,
            );
        }
    }
    let mut allowed = vec!["DNS (kube-system/k8s-app=kube-dns)".to_string()];
    if !inputs.datastores.is_empty() {
        let names: Vec<&str> = inputs.datastores.iter().map(|(n, _)| n.as_str()).collect();
        let plural = if count == 1 { "" } else { "s" };
        allowed.push(format!(
            "DataStores {} ({count} endpoint{plural})",
            names.join(", ")
        ));
    }
    if let Some(issuer) = issuer_endpoint(settings) {
        add(
            &mut rules,
            &issuer,
            target(&issuer, "the credential issuer", inputs)?,
        );
        allowed.push(format!("the credential issuer ({issuer})"));
    }
    if own_identity_providers(tcp, settings) {
        rules.push(public_https_rule());
        allowed.push(format!(
            "TCP {HTTPS_PORT} at public addresses (the tenant's own identity providers)"
        ));
    }
    if konnectivity(tcp).is_none() {
        rules.push(rule(None, vec![port("TCP", IntOrString::Int(KUBELET_PORT))]));
        allowed.push(format!(
            "kubelets on TCP {KUBELET_PORT} at any address (no Konnectivity)"
        ));
    }
    let mut message = format!("egress limited to {}", allowed.join(", "));
    if !gaps.is_empty() {
        message.push_str(&format!(
            "; open at any address (a NetworkPolicy cannot name hosts): {}",
            gaps.join(", ")
        ));
    }
    Ok(BuiltEgress {
        policy: policy_object(tcp, rules)?,
        message,
    })
}

/// The object: `<tcp>-egress` selecting the pods of the Deployment `<tcp>`, owned by the TCP.
fn policy_object(
    tcp: &TenantControlPlane,
    egress: Vec<NetworkPolicyEgressRule>,
) -> Result<NetworkPolicy, Error> {
    let name = tcp.name_any();
    Ok(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(egress_policy_name(tcp)),
            namespace: tcp.namespace(),
            labels: Some(BTreeMap::from([
                (TCP_NAME_LABEL.to_string(), name.clone()),
                (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
            ])),
            owner_references: Some(vec![owner(tcp)?]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(labels(&[(TCP_NAME_LABEL, &name)])),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(egress),
            ingress: None,
        }),
    })
}

/// `EgressRestricted=True` with what the policy allows.
pub fn egress_condition(conditions: &mut crate::build::Conditions<'_>, built: &BuiltEgress) {
    conditions.set(
        EGRESS_RESTRICTED,
        Some(true),
        "NetworkPolicyApplied",
        built.message.clone(),
    );
}
