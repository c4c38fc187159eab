//! Ports, CIDRs, the apiserver certificate's SANs and the control-plane endpoint.

use super::*;

/// The API server's port (default 6443).
pub fn port(tcp: &TenantControlPlane) -> i32 {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.port)
        .unwrap_or(6443)
}

/// The tenant's DNS domain (default `cluster.local`).
pub fn cluster_domain(tcp: &TenantControlPlane) -> String {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.cluster_domain.clone())
        .unwrap_or_else(|| "cluster.local".into())
}

/// The tenant's Service CIDRs (default 10.96.0.0/16).
pub fn service_cidrs(tcp: &TenantControlPlane) -> Vec<String> {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.service_cidrs.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["10.96.0.0/16".into()])
}

/// The tenant's pod CIDRs (default 10.244.0.0/16).
pub fn pod_cidrs(tcp: &TenantControlPlane) -> Vec<String> {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.pod_cidrs.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["10.244.0.0/16".into()])
}

/// The first address of a CIDR (the tenant's `kubernetes` Service IP), for IPv4 and IPv6.
pub fn first_service_ip(cidr: &str) -> Option<IpAddr> {
    indexed_ip(cidr, 1)
}

/// The address `index` places after the start of `cidr` (IPv4 or IPv6).
pub fn indexed_ip(cidr: &str, index: u32) -> Option<IpAddr> {
    let (addr, _) = cidr.split_once('/')?;
    match addr.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => Some(IpAddr::V4(u32::from(v4).checked_add(index)?.into())),
        IpAddr::V6(v6) => Some(IpAddr::V6(u128::from(v6).checked_add(index.into())?.into())),
    }
}

/// The apiserver certificate's SANs: (DNS names, IP addresses), sorted and deduplicated.
pub fn apiserver_sans(tcp: &TenantControlPlane, cluster_ip: Option<&str>) -> (Vec<String>, Vec<IpAddr>) {
    let name = tcp.name_any();
    let ns = tcp.namespace().unwrap_or_default();
    let domain = cluster_domain(tcp);
    let mut dns: BTreeSet<String> = [
        name.clone(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.{domain}"),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        format!("kubernetes.default.svc.{domain}"),
        "localhost".into(),
    ]
    .into();
    let mut ips: BTreeSet<IpAddr> = BTreeSet::from([IpAddr::from([127, 0, 0, 1])]);
    let mut add = |value: &str| match value.parse::<IpAddr>() {
        Ok(ip) => {
            ips.insert(ip);
        }
        Err(_) if !value.is_empty() => {
            dns.insert(value.to_string());
        }
        Err(_) => {}
    };
    if let Some(np) = &tcp.spec.network_profile {
        for v in np.address.iter().chain(np.advertise_address.iter()) {
            add(v);
        }
        for v in np.cert_sans.iter().flatten() {
            add(v);
        }
    }
    if let Some(ip) = cluster_ip {
        add(ip);
    }
    if let Some(ip) = service_cidrs(tcp).first().and_then(|c| first_service_ip(c)) {
        ips.insert(ip);
    }
    (dns.into_iter().collect(), ips.into_iter().collect())
}

/// `host:port` of the tenant API: `networkProfile.address`, else the LoadBalancer ingress, else the
/// Service's cluster IP. `None` until one is known.
pub fn control_plane_endpoint(tcp: &TenantControlPlane, service: Option<&Service>) -> Option<String> {
    let port = port(tcp);
    let address = tcp
        .spec
        .network_profile
        .as_ref()
        .and_then(|n| n.address.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| {
            let svc = service?;
            if tcp.spec.control_plane.service.service_type == ServiceType::LoadBalancer {
                let ingress = svc.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref()?;
                ingress
                    .iter()
                    .find_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
            } else {
                svc.spec.as_ref()?.cluster_ip.clone().filter(|ip| ip != "None")
            }
        })?;
    Some(if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    })
}
