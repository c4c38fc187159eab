//! Pure build of a TenantControlPlane's workload: the PKI and kubeconfig Secrets, the Deployment
//! (kube-apiserver, kube-controller-manager, kube-scheduler, and a kine sidecar for SQL and NATS) and
//! the Service, from the TenantControlPlane, what the datastore phase produced and the Secrets that
//! already exist. No I/O: key generation is the only source of randomness, and time comes in as `now`.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{Secret, Service},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::ResourceExt as _;
use rcgen::KeyPair;
use serde_json::json;

use super::{
    Error, MANAGED_BY_LABEL,
    build::{CHECKSUM_ANNOTATION, TCP_NAME_LABEL, checksum, owner, untampered},
};
use crate::k8s::crd::{
    DeploymentStatusSummary, Driver, KubernetesVersionState, ServiceType, TenantControlPlane,
};
use crate::pki::{Ca, CertKey, Usage, Validity};

/// Annotation that asks for a Secret's material to be regenerated (upstream's name).
pub const ROTATE_ANNOTATION: &str = "certs.kamaji.clastix.io/rotate";
/// Annotation holding a digest of what a Secret was generated from (CA, SANs, server URL).
pub const INPUTS_ANNOTATION: &str = "tenantplane.io/inputs";
/// Annotation holding the earliest `notAfter` (Unix seconds) of a Secret's certificates.
pub const NOT_AFTER_ANNOTATION: &str = "tenantplane.io/not-after";
/// Pod-template annotation: a digest over every certificate, kubeconfig and datastore Secret.
pub const POD_CHECKSUM_ANNOTATION: &str = "tenantplane.io/checksum";
/// Pod-template annotation: the datastore config Secret's checksum (upstream's name).
pub const STORAGE_CONFIG_ANNOTATION: &str = "storage.kamaji.clastix.io/config";
/// Pod-template annotation: the datastore certificate Secret's checksum (upstream's name).
pub const STORAGE_CERTIFICATE_ANNOTATION: &str = "storage.kamaji.clastix.io/certificate";
/// Default kine image (upstream's `--kine-image` default).
pub const DEFAULT_KINE_IMAGE: &str = "rancher/kine:v0.11.10-amd64";
/// Upstream's default admission plugins.
pub const DEFAULT_ADMISSION_PLUGINS: &[&str] = &[
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "PersistentVolumeClaimResize",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionWebhook",
];

const PKI: &str = "/etc/kubernetes/pki";
const DAY: i64 = 24 * 3600;

/// Settings of the workload build.
#[derive(Debug, Clone)]
pub struct WorkloadSettings {
    /// Certificates expiring within this many seconds are regenerated.
    pub rotation_threshold_secs: i64,
    /// The kine sidecar image.
    pub kine_image: String,
    /// Key type of new certificates and of the service-account key.
    pub key_algorithm: KeyAlgorithm,
}

impl Default for WorkloadSettings {
    /// 30 days, upstream's kine image.
    fn default() -> Self {
        Self {
            rotation_threshold_secs: 30 * DAY,
            kine_image: DEFAULT_KINE_IMAGE.into(),
            key_algorithm: KeyAlgorithm::default(),
        }
    }
}

/// What the datastore phase produced, as the Deployment needs it.
#[derive(Debug, Clone)]
pub struct StorageView {
    /// The primary's driver.
    pub driver: Driver,
    /// `<schema>` (the etcd prefix).
    pub schema: String,
    /// The primary's endpoints.
    pub endpoints: Vec<String>,
    /// `(resource, endpoints)` of each override, in spec order.
    pub overrides: Vec<(String, Vec<String>)>,
    /// The `<tcp>-datastore-config` Secret's checksum.
    pub config_checksum: String,
    /// The `<tcp>-datastore-certificate` Secret: its checksum and whether it holds a client pair.
    pub certificate: Option<(String, bool)>,
}

fn invalid(reason: &'static str, message: impl Into<String>) -> Error {
    Error::Invalid {
        reason,
        message: message.into(),
    }
}

pub use crate::pki::KeyAlgorithm;

/// A new private key of `alg`.
pub fn new_key(alg: KeyAlgorithm) -> Result<KeyPair, Error> {
    crate::pki::new_key(alg).map_err(pki_err)
}

fn pki_err(e: crate::pki::PkiError) -> Error {
    invalid("CertificateGenerationFailed", e.to_string())
}

fn sha(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p.as_bytes());
    }
    ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

// ================================================================================================ names

/// `<tcp>-ca`.
pub fn ca_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-ca", tcp.name_any())
}
/// `<tcp>-api-server-certificate`.
pub fn apiserver_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-api-server-certificate", tcp.name_any())
}
/// `<tcp>-api-server-kubelet-client-certificate`.
pub fn kubelet_client_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-api-server-kubelet-client-certificate", tcp.name_any())
}
/// `<tcp>-front-proxy-ca-certificate`.
pub fn front_proxy_ca_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-front-proxy-ca-certificate", tcp.name_any())
}
/// `<tcp>-front-proxy-client-certificate`.
pub fn front_proxy_client_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-front-proxy-client-certificate", tcp.name_any())
}
/// `<tcp>-sa-certificate`.
pub fn sa_secret_name(tcp: &TenantControlPlane) -> String {
    format!("{}-sa-certificate", tcp.name_any())
}
/// `<tcp>-admin-kubeconfig`.
pub fn admin_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-admin-kubeconfig", tcp.name_any())
}
/// `<tcp>-controller-manager-kubeconfig`.
pub fn controller_manager_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-controller-manager-kubeconfig", tcp.name_any())
}
/// `<tcp>-scheduler-kubeconfig`.
pub fn scheduler_kubeconfig_name(tcp: &TenantControlPlane) -> String {
    format!("{}-scheduler-kubeconfig", tcp.name_any())
}

/// Every PKI and kubeconfig Secret name, in generation order.
pub fn pki_secret_names(tcp: &TenantControlPlane) -> Vec<String> {
    vec![
        ca_secret_name(tcp),
        front_proxy_ca_secret_name(tcp),
        sa_secret_name(tcp),
        apiserver_secret_name(tcp),
        kubelet_client_secret_name(tcp),
        front_proxy_client_secret_name(tcp),
        admin_kubeconfig_name(tcp),
        controller_manager_kubeconfig_name(tcp),
        scheduler_kubeconfig_name(tcp),
    ]
}

// ============================================================================================= network

fn port(tcp: &TenantControlPlane) -> i32 {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.port)
        .unwrap_or(6443)
}

fn cluster_domain(tcp: &TenantControlPlane) -> String {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.cluster_domain.clone())
        .unwrap_or_else(|| "cluster.local".into())
}

fn service_cidrs(tcp: &TenantControlPlane) -> Vec<String> {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.service_cidrs.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["10.96.0.0/16".into()])
}

fn pod_cidrs(tcp: &TenantControlPlane) -> Vec<String> {
    tcp.spec
        .network_profile
        .as_ref()
        .and_then(|n| n.pod_cidrs.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec!["10.244.0.0/16".into()])
}

/// The first address of a CIDR (the tenant's `kubernetes` Service IP), for IPv4 and IPv6.
pub fn first_service_ip(cidr: &str) -> Option<IpAddr> {
    let (addr, _) = cidr.split_once('/')?;
    match addr.parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => Some(IpAddr::V4((u32::from(v4).checked_add(1)?).into())),
        IpAddr::V6(v6) => Some(IpAddr::V6((u128::from(v6).checked_add(1)?).into())),
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

// ================================================================================================= PKI

/// The PKI and kubeconfig Secrets to apply, and which of them were (re)generated in this build.
#[derive(Debug)]
pub struct Pki {
    /// Every Secret, in [`pki_secret_names`] order.
    pub secrets: Vec<Secret>,
    /// Names of the Secrets whose material was generated now.
    pub generated: Vec<String>,
}

impl Pki {
    /// The Secret named `name`.
    pub fn get(&self, name: &str) -> Option<&Secret> {
        self.secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|v| !v.is_empty())
}

/// Whether a user asked to rotate `secret`: upstream's rotate annotation with an empty value (after
/// rotating, the controller sets it to the time of the rotation).
pub fn rotation_requested(secret: &Secret) -> bool {
    secret
        .annotations()
        .get(ROTATE_ANNOTATION)
        .is_some_and(|v| v.is_empty())
}

/// Whether `existing` can be kept: untampered, every key present, generated from `inputs`, not asked to
/// rotate, and not expiring within the threshold.
pub fn reusable(existing: Option<&Secret>, keys: &[&str], inputs: &str, threshold: i64, now: i64) -> bool {
    let Some(secret) = existing else {
        return false;
    };
    let annotations = secret.annotations();
    untampered(secret)
        && !rotation_requested(secret)
        && annotations.get(INPUTS_ANNOTATION).map(String::as_str) == Some(inputs)
        && annotations
            .get(NOT_AFTER_ANNOTATION)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|not_after| not_after - now > threshold)
        && keys.iter().all(|k| text(secret, k).is_some())
}

struct Material {
    data: BTreeMap<String, String>,
    not_after: i64,
}

fn new_ca(cn: &str, now: i64, alg: KeyAlgorithm) -> Result<(String, String, i64), Error> {
    let validity = Validity::days(now, 3650);
    let ca = Ca::generate(cn, alg, validity).map_err(pki_err)?;
    Ok((ca.ca.cert_pem, ca.ca.key_pem, validity.not_after()))
}

fn leaf(
    ca: (&str, &str),
    cn: &str,
    groups: &[&str],
    sans: Option<(&[String], &[IpAddr])>,
    now: i64,
    alg: KeyAlgorithm,
) -> Result<(String, String, i64), Error> {
    let issuer = Ca::from_pem(CertKey {
        cert_pem: ca.0.to_string(),
        key_pem: ca.1.to_string(),
    })
    .map_err(pki_err)?
    .with_key_algorithm(alg);
    let usage = match sans {
        Some((dns, ips)) => Usage::Server { dns, ips },
        None => Usage::Client,
    };
    let validity = Validity::days(now, 365);
    let cert = issuer.issue(cn, groups, usage, Some(validity)).map_err(pki_err)?;
    Ok((cert.cert_pem, cert.key_pem, validity.not_after()))
}

/// A kubeconfig for `user` (a client certificate signed by the cluster CA) against `server`.
fn kubeconfig(ca_cert: &str, server: &str, user: &str, cert: &str, key: &str) -> Result<String, Error> {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {"server": server, "certificate-authority-data": b64(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": format!("{user}@kubernetes"), "context": {"cluster": "kubernetes", "user": user}}],
        "current-context": format!("{user}@kubernetes"),
        "preferences": {},
    });
    serde_yaml::to_string(&config).map_err(|e| invalid("KubeconfigSerializationFailed", e.to_string()))
}

fn pki_secret(
    tcp: &TenantControlPlane,
    name: &str,
    component: &str,
    inputs: &str,
    material: &Material,
    rotated: Option<String>,
) -> Result<Secret, Error> {
    let data: BTreeMap<String, ByteString> = material
        .data
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect();
    let mut annotations = BTreeMap::from([
        (CHECKSUM_ANNOTATION.to_string(), checksum(&data)),
        (INPUTS_ANNOTATION.to_string(), inputs.to_string()),
        (NOT_AFTER_ANNOTATION.to_string(), material.not_after.to_string()),
    ]);
    if let Some(at) = rotated {
        annotations.insert(ROTATE_ANNOTATION.to_string(), at);
    }
    let labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), tcp.name_any()),
        ("kamaji.clastix.io/component".to_string(), component.to_string()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: tcp.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner(tcp)?]),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    })
}

fn kept(existing: &Secret, keys: &[&str]) -> Material {
    Material {
        data: keys
            .iter()
            .filter_map(|k| Some((k.to_string(), text(existing, k)?)))
            .collect(),
        not_after: existing
            .annotations()
            .get(NOT_AFTER_ANNOTATION)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default(),
    }
}

struct PkiBuilder<'a> {
    tcp: &'a TenantControlPlane,
    existing: &'a BTreeMap<String, Secret>,
    settings: &'a WorkloadSettings,
    now: i64,
    out: Pki,
}

impl PkiBuilder<'_> {
    /// Keeps the existing Secret `name` when reusable, else generates it; returns its data.
    fn secret(
        &mut self,
        name: String,
        component: &str,
        keys: &[&str],
        inputs: String,
        generate: impl FnOnce() -> Result<Material, Error>,
    ) -> Result<BTreeMap<String, String>, Error> {
        let existing = self.existing.get(&name);
        let material = if reusable(
            existing,
            keys,
            &inputs,
            self.settings.rotation_threshold_secs,
            self.now,
        ) && let Some(existing) = existing
        {
            kept(existing, keys)
        } else {
            self.out.generated.push(name.clone());
            generate()?
        };
        let data = material.data.clone();
        // A requested rotation is answered with its time; an earlier answer is kept.
        let rotated = match existing {
            Some(e) if rotation_requested(e) => Some(
                k8s_openapi::jiff::Timestamp::from_second(self.now)
                    .map_err(|e| invalid("CertificateGenerationFailed", e.to_string()))?
                    .to_string(),
            ),
            Some(e) => e.annotations().get(ROTATE_ANNOTATION).cloned(),
            None => None,
        };
        self.out.secrets.push(pki_secret(
            self.tcp, &name, component, &inputs, &material, rotated,
        )?);
        Ok(data)
    }
}

fn get(data: &BTreeMap<String, String>, key: &str) -> Result<String, Error> {
    data.get(key)
        .cloned()
        .ok_or_else(|| invalid("CertificateGenerationFailed", format!("{key} missing")))
}

/// Builds every PKI and kubeconfig Secret, reusing the existing material where [`reusable`].
/// A regenerated CA changes the inputs of every certificate it signs, so they are regenerated too.
pub fn pki(
    tcp: &TenantControlPlane,
    existing: &BTreeMap<String, Secret>,
    cluster_ip: Option<&str>,
    settings: &WorkloadSettings,
    now: i64,
) -> Result<Pki, Error> {
    let alg = settings.key_algorithm;
    let mut b = PkiBuilder {
        tcp,
        existing,
        settings,
        now,
        out: Pki {
            secrets: Vec::new(),
            generated: Vec::new(),
        },
    };
    let ca = b.secret(
        ca_secret_name(tcp),
        "ca",
        &["ca.crt", "ca.key", "tls.crt", "tls.key"],
        sha(&["ca", "v1"]),
        || {
            let (cert, key, not_after) = new_ca("kubernetes", now, alg)?;
            Ok(Material {
                data: BTreeMap::from([
                    ("ca.crt".into(), cert.clone()),
                    ("ca.key".into(), key.clone()),
                    ("tls.crt".into(), cert),
                    ("tls.key".into(), key),
                ]),
                not_after,
            })
        },
    )?;
    let (ca_cert, ca_key) = (get(&ca, "ca.crt")?, get(&ca, "ca.key")?);
    let fp = b.secret(
        front_proxy_ca_secret_name(tcp),
        "front-proxy-ca-certificate",
        &["front-proxy-ca.crt", "front-proxy-ca.key"],
        sha(&["front-proxy-ca", "v1"]),
        || {
            let (cert, key, not_after) = new_ca("front-proxy-ca", now, alg)?;
            Ok(Material {
                data: BTreeMap::from([
                    ("front-proxy-ca.crt".into(), cert),
                    ("front-proxy-ca.key".into(), key),
                ]),
                not_after,
            })
        },
    )?;
    let (fp_cert, fp_key) = (get(&fp, "front-proxy-ca.crt")?, get(&fp, "front-proxy-ca.key")?);
    b.secret(
        sa_secret_name(tcp),
        "sa-certificate",
        &["sa.pub", "sa.key"],
        sha(&["sa", "v1"]),
        || {
            let key = new_key(alg)?;
            Ok(Material {
                data: BTreeMap::from([
                    ("sa.pub".into(), key.public_key_pem()),
                    ("sa.key".into(), key.serialize_pem()),
                ]),
                // A key pair does not expire.
                not_after: i64::MAX / 2,
            })
        },
    )?;
    let (dns, ips) = apiserver_sans(tcp, cluster_ip);
    let ip_text: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    let mut inputs: Vec<&str> = vec!["apiserver", &ca_cert];
    inputs.extend(dns.iter().map(String::as_str));
    inputs.extend(ip_text.iter().map(String::as_str));
    b.secret(
        apiserver_secret_name(tcp),
        "api-server-certificate",
        &["apiserver.crt", "apiserver.key"],
        sha(&inputs),
        || {
            let (cert, key, not_after) = leaf(
                (&ca_cert, &ca_key),
                "kube-apiserver",
                &[],
                Some((&dns, &ips)),
                now,
                alg,
            )?;
            Ok(Material {
                data: BTreeMap::from([("apiserver.crt".into(), cert), ("apiserver.key".into(), key)]),
                not_after,
            })
        },
    )?;
    b.secret(
        kubelet_client_secret_name(tcp),
        "api-server-kubelet-client-certificate",
        &["apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"],
        sha(&["apiserver-kubelet-client", &ca_cert]),
        || {
            let (cert, key, not_after) = leaf(
                (&ca_cert, &ca_key),
                "kube-apiserver-kubelet-client",
                &["kubeadm:cluster-admins"],
                None,
                now,
                alg,
            )?;
            Ok(Material {
                data: BTreeMap::from([
                    ("apiserver-kubelet-client.crt".into(), cert),
                    ("apiserver-kubelet-client.key".into(), key),
                ]),
                not_after,
            })
        },
    )?;
    b.secret(
        front_proxy_client_secret_name(tcp),
        "front-proxy-client-certificate",
        &["front-proxy-client.crt", "front-proxy-client.key"],
        sha(&["front-proxy-client", &fp_cert]),
        || {
            let (cert, key, not_after) =
                leaf((&fp_cert, &fp_key), "front-proxy-client", &[], None, now, alg)?;
            Ok(Material {
                data: BTreeMap::from([
                    ("front-proxy-client.crt".into(), cert),
                    ("front-proxy-client.key".into(), key),
                ]),
                not_after,
            })
        },
    )?;
    let port = port(tcp);
    let local = format!("https://127.0.0.1:{port}");
    let admin_server = match tcp
        .spec
        .network_profile
        .as_ref()
        .and_then(|n| n.address.clone())
        .filter(|a| !a.is_empty())
    {
        Some(address) if address.contains(':') => format!("https://[{address}]:{port}"),
        Some(address) => format!("https://{address}:{port}"),
        None => format!(
            "https://{}.{}.svc:{port}",
            tcp.name_any(),
            tcp.namespace().unwrap_or_default()
        ),
    };
    // (Secret, component, key, user, groups, server)
    type KubeconfigSpec<'s> = (String, &'s str, &'s str, &'s str, &'s [&'s str], &'s str);
    let kubeconfigs: [KubeconfigSpec<'_>; 3] = [
        (
            admin_kubeconfig_name(tcp),
            "admin-kubeconfig",
            "admin.conf",
            "kubernetes-admin",
            &["system:masters"],
            &admin_server,
        ),
        (
            controller_manager_kubeconfig_name(tcp),
            "controller-manager-kubeconfig",
            "controller-manager.conf",
            "system:kube-controller-manager",
            &[],
            &local,
        ),
        (
            scheduler_kubeconfig_name(tcp),
            "scheduler-kubeconfig",
            "scheduler.conf",
            "system:kube-scheduler",
            &[],
            &local,
        ),
    ];
    for (name, component, key_name, user, groups, server) in kubeconfigs {
        b.secret(
            name,
            component,
            &[key_name],
            sha(&["kubeconfig", user, server, &ca_cert]),
            || {
                let (cert, key, not_after) = leaf((&ca_cert, &ca_key), user, groups, None, now, alg)?;
                Ok(Material {
                    data: BTreeMap::from([(
                        key_name.to_string(),
                        kubeconfig(&ca_cert, server, user, &cert, &key)?,
                    )]),
                    not_after,
                })
            },
        )?;
    }
    Ok(b.out)
}

// ============================================================================================== flags

fn flag_name(arg: &str) -> &str {
    let bare = arg.trim_start_matches('-');
    bare.split_once('=').map(|(k, _)| k).unwrap_or(bare)
}

fn render(flags: &BTreeMap<String, String>) -> Vec<String> {
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

fn kv(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
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
        .unwrap_or_else(|| vec!["Hostname".into(), "InternalIP".into(), "ExternalIP".into()]);
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
    let user = user_args(tcp, |e| e.api_server.clone());
    let mut defaults = kv(&[
        ("allow-privileged", "true".into()),
        ("enable-bootstrap-token-auth", "true".into()),
        ("requestheader-extra-headers-prefix", "X-Remote-Extra-".into()),
        ("requestheader-group-headers", "X-Remote-Group".into()),
        ("requestheader-username-headers", "X-Remote-User".into()),
        (
            "service-account-issuer",
            format!("https://kubernetes.default.svc.{}", cluster_domain(tcp)),
        ),
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

fn user_args(
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

/// kine's args: listen address and TLS files, the user's extraArgs over them, then `--endpoint` last.
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
        if k != "endpoint" {
            flags.insert(k.to_string(), v.to_string());
        }
    }
    let mut args = render(&flags);
    let endpoint = match storage.driver {
        Driver::MySQL => "mysql://$(DB_USER):$(DB_PASSWORD)@tcp($(DB_CONNECTION_STRING))/$(DB_SCHEMA)",
        Driver::PostgreSQL => "postgres://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)/$(DB_SCHEMA)",
        _ => "nats://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)?bucket=$(DB_SCHEMA)&noEmbed",
    };
    args.push(format!("--endpoint={endpoint}"));
    args
}

// ========================================================================================= Deployment

/// `<registry>/<image>:<version><tagSuffix>` for the three components.
pub fn images(tcp: &TenantControlPlane, version: &str) -> [String; 3] {
    let rs = tcp
        .spec
        .control_plane
        .deployment
        .as_ref()
        .and_then(|d| d.registry_settings.clone());
    let registry = rs
        .as_ref()
        .and_then(|r| r.registry.clone())
        .unwrap_or_else(|| "registry.k8s.io".into());
    let suffix = rs.as_ref().and_then(|r| r.tag_suffix.clone()).unwrap_or_default();
    let image = |name: Option<String>, default: &str| {
        format!(
            "{registry}/{}:{version}{suffix}",
            name.unwrap_or_else(|| default.to_string())
        )
    };
    [
        image(
            rs.as_ref().and_then(|r| r.api_server_image.clone()),
            "kube-apiserver",
        ),
        image(
            rs.as_ref().and_then(|r| r.controller_manager_image.clone()),
            "kube-controller-manager",
        ),
        image(
            rs.as_ref().and_then(|r| r.scheduler_image.clone()),
            "kube-scheduler",
        ),
    ]
}

/// Desired replicas (2 when the spec has no deployment section, as the CRD default).
pub fn replicas(tcp: &TenantControlPlane) -> i32 {
    tcp.spec
        .control_plane
        .deployment
        .as_ref()
        .map(|d| d.replicas.unwrap_or(2))
        .unwrap_or(2)
}

/// The pod template's checksum: over every PKI Secret's checksum and the datastore Secrets'.
pub fn pod_checksum(pki: &Pki, storage: &StorageView) -> String {
    let mut parts: Vec<String> = pki
        .secrets
        .iter()
        .map(|s| {
            s.annotations()
                .get(CHECKSUM_ANNOTATION)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    parts.push(storage.config_checksum.clone());
    parts.push(
        storage
            .certificate
            .as_ref()
            .map(|c| c.0.clone())
            .unwrap_or_default(),
    );
    sha(&parts.iter().map(String::as_str).collect::<Vec<_>>())
}

fn probe(path: &str, port: i32) -> serde_json::Value {
    json!({
        "httpGet": {"path": path, "port": port, "scheme": "HTTPS"},
        "initialDelaySeconds": 0, "timeoutSeconds": 1, "periodSeconds": 10,
        "successThreshold": 1, "failureThreshold": 3,
    })
}

/// The Deployment and the user flags dropped from kube-apiserver's args.
#[derive(Debug)]
pub struct BuiltDeployment {
    /// The Deployment to apply.
    pub deployment: Deployment,
    /// kube-apiserver's args.
    pub apiserver_args: Args,
}

/// The Deployment `<tcp>`.
pub fn deployment(
    tcp: &TenantControlPlane,
    storage: &StorageView,
    pki: &Pki,
    version: &str,
    settings: &WorkloadSettings,
) -> Result<BuiltDeployment, Error> {
    let name = tcp.name_any();
    let port = port(tcp);
    let spec = tcp.spec.control_plane.deployment.clone().unwrap_or_default();
    let [apiserver_image, cm_image, scheduler_image] = images(tcp, version);
    let apiserver = apiserver_args(tcp, storage);
    let kine = storage.driver != Driver::Etcd;
    let resources = spec.resources.clone().unwrap_or_default();

    let secret_items = |secret: String, keys: &[&str], prefix: &str| json!({"secret": {"name": secret, "items": keys.iter().map(|k| json!({"key": k, "path": format!("{prefix}{k}")})).collect::<Vec<_>>()}});
    let mut sources = vec![
        secret_items(ca_secret_name(tcp), &["ca.crt", "ca.key"], ""),
        secret_items(
            apiserver_secret_name(tcp),
            &["apiserver.crt", "apiserver.key"],
            "",
        ),
        secret_items(
            kubelet_client_secret_name(tcp),
            &["apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"],
            "",
        ),
        secret_items(
            front_proxy_ca_secret_name(tcp),
            &["front-proxy-ca.crt", "front-proxy-ca.key"],
            "",
        ),
        secret_items(
            front_proxy_client_secret_name(tcp),
            &["front-proxy-client.crt", "front-proxy-client.key"],
            "",
        ),
        secret_items(sa_secret_name(tcp), &["sa.pub", "sa.key"], ""),
    ];
    if !kine {
        sources.push(secret_items(
            super::build::certificate_secret_name(tcp),
            &["ca.crt", "server.crt", "server.key"],
            "etcd/",
        ));
    }
    let mut volumes = vec![
        json!({"name": "etc-kubernetes-pki", "projected": {"sources": sources, "defaultMode": 420}}),
        json!({"name": "controller-manager-kubeconfig", "secret": {"secretName": controller_manager_kubeconfig_name(tcp), "defaultMode": 420}}),
        json!({"name": "scheduler-kubeconfig", "secret": {"secretName": scheduler_kubeconfig_name(tcp), "defaultMode": 420}}),
    ];
    let mut apiserver_mounts =
        vec![json!({"name": "etc-kubernetes-pki", "mountPath": PKI, "readOnly": true})];
    let mut containers = vec![
        json!({
            "name": "kube-apiserver",
            "image": apiserver_image,
            "imagePullPolicy": "Always",
            "command": ["kube-apiserver"],
            "args": apiserver.args,
            "ports": [{"name": "kube-apiserver", "containerPort": port, "protocol": "TCP"}],
            "livenessProbe": probe("/livez", port),
            "readinessProbe": probe("/readyz", port),
            "startupProbe": probe("/livez", port),
            "resources": resources.api_server.clone().unwrap_or_default(),
        }),
        json!({
            "name": "kube-controller-manager",
            "image": cm_image,
            "command": ["kube-controller-manager"],
            "args": controller_manager_args(tcp),
            "volumeMounts": [
                {"name": "etc-kubernetes-pki", "mountPath": PKI, "readOnly": true},
                {"name": "controller-manager-kubeconfig", "mountPath": "/etc/kubernetes/controller-manager.conf", "subPath": "controller-manager.conf", "readOnly": true},
            ],
            "livenessProbe": probe("/healthz", 10257),
            "readinessProbe": probe("/healthz", 10257),
            "startupProbe": probe("/healthz", 10257),
            "resources": resources.controller_manager.clone().unwrap_or_default(),
        }),
        json!({
            "name": "kube-scheduler",
            "image": scheduler_image,
            "command": ["kube-scheduler"],
            "args": scheduler_args(tcp),
            "volumeMounts": [
                {"name": "scheduler-kubeconfig", "mountPath": "/etc/kubernetes/scheduler.conf", "subPath": "scheduler.conf", "readOnly": true},
            ],
            "livenessProbe": probe("/healthz", 10259),
            "readinessProbe": probe("/healthz", 10259),
            "startupProbe": probe("/healthz", 10259),
            "resources": resources.scheduler.clone().unwrap_or_default(),
        }),
    ];
    let mut init_containers = Vec::new();
    if kine {
        volumes.push(json!({"name": "kine-uds", "emptyDir": {"medium": "Memory"}}));
        apiserver_mounts.push(json!({"name": "kine-uds", "mountPath": "/uds"}));
        let mut kine_mounts = vec![json!({"name": "kine-uds", "mountPath": "/uds"})];
        if storage.certificate.is_some() {
            volumes.push(json!({"name": "kine-config", "secret": {"secretName": super::build::certificate_secret_name(tcp), "defaultMode": 420}}));
            volumes.push(json!({"name": "kine-certs", "emptyDir": {}}));
            kine_mounts.push(json!({"name": "kine-certs", "mountPath": "/certs", "readOnly": true}));
            init_containers.push(json!({
                "name": "chmod",
                "image": settings.kine_image,
                "command": ["sh"],
                "args": ["-c", "cp /kine/*.* /certs && chmod -R 600 /certs/*.*"],
                "volumeMounts": [
                    {"name": "kine-config", "mountPath": "/kine", "readOnly": true},
                    {"name": "kine-certs", "mountPath": "/certs"},
                ],
            }));
        }
        containers.push(json!({
            "name": "kine",
            "image": settings.kine_image,
            "imagePullPolicy": "Always",
            "command": ["/bin/kine"],
            "args": kine_args(tcp, storage),
            "envFrom": [{"secretRef": {"name": super::build::config_secret_name(tcp)}}],
            "env": [{"name": "GODEBUG", "value": "x509ignoreCN=0"}],
            "ports": [{"name": "server", "containerPort": 2379, "protocol": "TCP"}],
            "volumeMounts": kine_mounts,
            "resources": resources.kine.clone().unwrap_or_default(),
        }));
    }
    containers[0]["volumeMounts"] = json!(apiserver_mounts);

    let selector = BTreeMap::from([(TCP_NAME_LABEL.to_string(), name.clone())]);
    let mut pod_labels = selector.clone();
    pod_labels.insert("kamaji.clastix.io/component".into(), "deployment".into());
    let mut pod_annotations = BTreeMap::from([
        (POD_CHECKSUM_ANNOTATION.to_string(), pod_checksum(pki, storage)),
        (
            STORAGE_CONFIG_ANNOTATION.to_string(),
            storage.config_checksum.clone(),
        ),
    ]);
    if let Some((c, _)) = &storage.certificate {
        pod_annotations.insert(STORAGE_CERTIFICATE_ANNOTATION.to_string(), c.clone());
    }
    if let Some(meta) = &spec.pod_additional_metadata {
        for (k, v) in meta.labels.iter().flatten() {
            pod_labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            pod_annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let mut labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), name.clone()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    let mut annotations = BTreeMap::new();
    if let Some(meta) = &spec.additional_metadata {
        for (k, v) in meta.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in meta.annotations.iter().flatten() {
            annotations.insert(k.clone(), v.clone());
        }
    }
    let strategy = spec.strategy.clone().map(|s| json!(s)).unwrap_or_else(
        || json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": 0}}),
    );
    let mut pod_spec = json!({
        "initContainers": init_containers,
        "containers": containers,
        "volumes": volumes,
    });
    if let Some(ns) = &spec.node_selector {
        pod_spec["nodeSelector"] = json!(ns);
    }
    if let Some(t) = &spec.tolerations {
        pod_spec["tolerations"] = json!(t);
    }
    if let Some(a) = &spec.affinity {
        pod_spec["affinity"] = json!(a);
    }
    if let Some(sa) = &spec.service_account_name {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    let value = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": tcp.namespace(),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner(tcp)?],
        },
        "spec": {
            "replicas": replicas(tcp),
            "selector": {"matchLabels": selector},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    });
    let deployment = serde_json::from_value(value).map_err(|e| {
        invalid(
            "DeploymentInvalid",
            format!("the Deployment does not serialize: {e}"),
        )
    })?;
    Ok(BuiltDeployment {
        deployment,
        apiserver_args: apiserver,
    })
}

// ============================================================================================ Service

/// The Service `<tcp>` on `networkProfile.port`.
pub fn service(tcp: &TenantControlPlane) -> Result<Service, Error> {
    let port = port(tcp);
    let type_ = tcp.spec.control_plane.service.service_type;
    let mut svc_port = json!({"name": "kube-apiserver", "port": port, "targetPort": port, "protocol": "TCP"});
    if type_ == ServiceType::NodePort {
        svc_port["nodePort"] = json!(port);
    }
    let mut spec = json!({
        "type": serde_json::to_value(type_).map_err(|e| invalid("ServiceInvalid", e.to_string()))?,
        "selector": {TCP_NAME_LABEL: tcp.name_any()},
        "ports": [svc_port],
    });
    if type_ == ServiceType::LoadBalancer
        && let Some(np) = &tcp.spec.network_profile
    {
        if let Some(class) = &np.load_balancer_class {
            spec["loadBalancerClass"] = json!(class);
        }
        if let Some(ranges) = np.load_balancer_source_ranges.as_ref().filter(|r| !r.is_empty()) {
            spec["loadBalancerSourceRanges"] = json!(ranges);
        }
    }
    let meta = tcp
        .spec
        .control_plane
        .service
        .additional_metadata
        .clone()
        .unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(TCP_NAME_LABEL.into(), tcp.name_any());
    labels.insert(MANAGED_BY_LABEL.0.into(), MANAGED_BY_LABEL.1.into());
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": tcp.name_any(),
            "namespace": tcp.namespace(),
            "labels": labels,
            "annotations": meta.annotations.unwrap_or_default(),
            "ownerReferences": [owner(tcp)?],
        },
        "spec": spec,
    }))
    .map_err(|e| invalid("ServiceInvalid", format!("the Service does not serialize: {e}")))
}

// ========================================================================================= versions

/// `(major, minor, patch)` of `vX.Y.Z`.
pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

/// The version to run: the spec's, unless it is a downgrade or skips a minor vs `installed`; then the
/// installed one with the reason and message of the refusal.
pub fn version_to_run(spec: &str, installed: Option<&str>) -> (String, Option<(&'static str, String)>) {
    let Some(installed) = installed.filter(|i| !i.is_empty()) else {
        return (spec.to_string(), None);
    };
    let (Some(want), Some(have)) = (parse_version(spec), parse_version(installed)) else {
        return (spec.to_string(), None);
    };
    if want < have {
        return (
            installed.to_string(),
            Some((
                "VersionDowngradeRefused",
                format!("unable to downgrade from {installed} to {spec}: {installed} keeps running"),
            )),
        );
    }
    if want.0 != have.0 || want.1 > have.1 + 1 {
        return (
            installed.to_string(),
            Some((
                "VersionSkipRefused",
                format!(
                    "unable to upgrade from {installed} to {spec}: upgrade one minor version at a time; {installed} keeps running"
                ),
            )),
        );
    }
    (spec.to_string(), None)
}

/// The version state from the applied Deployment (upstream's order) and whether the rollout is complete.
pub fn version_state(
    deployment: &Deployment,
    running: &str,
    installed: Option<&str>,
) -> (KubernetesVersionState, bool) {
    let desired = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let complete = status.observed_generation.is_some()
        && status.observed_generation == deployment.metadata.generation
        && status.unavailable_replicas.unwrap_or(0) == 0
        && status.updated_replicas.unwrap_or(0) == desired
        && status.ready_replicas.unwrap_or(0) == desired
        && status.available_replicas.unwrap_or(0) == desired
        && status.replicas.unwrap_or(0) == desired;
    let state = if desired == 0 {
        KubernetesVersionState::Sleeping
    } else if complete {
        KubernetesVersionState::Ready
    } else if installed.is_some_and(|i| i != running) {
        KubernetesVersionState::Upgrading
    } else if installed.is_none() {
        KubernetesVersionState::Provisioning
    } else {
        KubernetesVersionState::NotReady
    };
    (state, complete && desired > 0)
}

/// `status.kubernetesResources.deployment` from the applied Deployment.
pub fn deployment_summary(deployment: &Deployment, now: &str) -> DeploymentStatusSummary {
    let status = deployment.status.clone().unwrap_or_default();
    let selector = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    DeploymentStatusSummary {
        name: deployment.metadata.name.clone(),
        namespace: deployment.metadata.namespace.clone(),
        selector: Some(selector),
        replicas: Some(status.replicas.unwrap_or(0)),
        ready_replicas: Some(status.ready_replicas.unwrap_or(0)),
        available_replicas: Some(status.available_replicas.unwrap_or(0)),
        updated_replicas: Some(status.updated_replicas.unwrap_or(0)),
        last_update: Some(now.to_string()),
    }
}

#[cfg(test)]
#[path = "workload_tests.rs"]
mod tests;
