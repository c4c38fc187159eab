//! The PKI and kubeconfig Secrets: kept while reusable, else generated.

use super::*;

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

pub(super) fn text(secret: &Secret, key: &str) -> Option<String> {
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

/// A leaf certificate signed by `ca` (PEM), valid for a year: `(cert, key, notAfter)`.
fn issue(
    ca: (&str, &str),
    alg: KeyAlgorithm,
    cn: &str,
    groups: &[&str],
    usage: Usage<'_>,
    now: i64,
) -> Result<(String, String, i64), Error> {
    let issuer = Ca::from_pem(CertKey {
        cert_pem: ca.0.to_string(),
        key_pem: ca.1.to_string(),
    })
    .map_err(pki_err)?
    .with_key_algorithm(alg);
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
    let cas = b.cas()?;
    b.leaves(&cas, cluster_ip)?;
    b.kubeconfigs(&cas)?;
    if konnectivity(tcp).is_some() {
        b.konnectivity(&cas)?;
    }
    Ok(b.out)
}

/// The cluster CA's and the front-proxy CA's certificate and key, PEM.
struct Cas {
    ca_cert: String,
    ca_key: String,
    fp_cert: String,
    fp_key: String,
}

impl PkiBuilder<'_> {
    /// The cluster CA, the front-proxy CA and the service-account key.
    fn cas(&mut self) -> Result<Cas, Error> {
        let (tcp, now, alg) = (self.tcp, self.now, self.settings.key_algorithm);
        let ca = self.secret(
            ca_secret_name(tcp),
            "ca",
            &["ca.crt", "ca.key", "tls.crt", "tls.key"],
            sha(&["ca", "v1"]),
            || {
                let validity = Validity::days(now, 3650);
                let ca = Ca::generate("kubernetes", alg, validity).map_err(pki_err)?;
                let (cert, key, not_after) = (ca.ca.cert_pem, ca.ca.key_pem, validity.not_after());
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
        let fp = self.secret(
            front_proxy_ca_secret_name(tcp),
            "front-proxy-ca-certificate",
            &["front-proxy-ca.crt", "front-proxy-ca.key"],
            sha(&["front-proxy-ca", "v1"]),
            || {
                let validity = Validity::days(now, 3650);
                let ca = Ca::generate("front-proxy-ca", alg, validity).map_err(pki_err)?;
                let (cert, key, not_after) = (ca.ca.cert_pem, ca.ca.key_pem, validity.not_after());
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
        self.secret(
            sa_secret_name(tcp),
            "sa-certificate",
            &["sa.pub", "sa.key"],
            sha(&["sa", "v1"]),
            || {
                let key = crate::pki::new_key(alg).map_err(pki_err)?;
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
        Ok(Cas {
            ca_cert,
            ca_key,
            fp_cert,
            fp_key,
        })
    }

    /// The apiserver's serving certificate, its kubelet client and the front-proxy client.
    fn leaves(&mut self, cas: &Cas, cluster_ip: Option<&str>) -> Result<(), Error> {
        let (tcp, now, alg) = (self.tcp, self.now, self.settings.key_algorithm);
        let (ca_cert, ca_key) = (cas.ca_cert.clone(), cas.ca_key.clone());
        let (fp_cert, fp_key) = (cas.fp_cert.clone(), cas.fp_key.clone());
        let (dns, ips) = apiserver_sans(tcp, cluster_ip);
        let ip_text: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
        let mut inputs: Vec<&str> = vec!["apiserver", &ca_cert];
        inputs.extend(dns.iter().map(String::as_str));
        inputs.extend(ip_text.iter().map(String::as_str));
        self.secret(
            apiserver_secret_name(tcp),
            "api-server-certificate",
            &["apiserver.crt", "apiserver.key"],
            sha(&inputs),
            || {
                let (cert, key, not_after) = issue(
                    (&ca_cert, &ca_key),
                    alg,
                    "kube-apiserver",
                    &[],
                    Usage::Server { dns: &dns, ips: &ips },
                    now,
                )?;
                Ok(Material {
                    data: BTreeMap::from([("apiserver.crt".into(), cert), ("apiserver.key".into(), key)]),
                    not_after,
                })
            },
        )?;
        self.secret(
            kubelet_client_secret_name(tcp),
            "api-server-kubelet-client-certificate",
            &["apiserver-kubelet-client.crt", "apiserver-kubelet-client.key"],
            sha(&["apiserver-kubelet-client", &ca_cert]),
            || {
                let (cert, key, not_after) = issue(
                    (&ca_cert, &ca_key),
                    alg,
                    "kube-apiserver-kubelet-client",
                    &["kubeadm:cluster-admins"],
                    Usage::Client,
                    now,
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
        self.secret(
            front_proxy_client_secret_name(tcp),
            "front-proxy-client-certificate",
            &["front-proxy-client.crt", "front-proxy-client.key"],
            sha(&["front-proxy-client", &fp_cert]),
            || {
                let (cert, key, not_after) = issue(
                    (&fp_cert, &fp_key),
                    alg,
                    "front-proxy-client",
                    &[],
                    Usage::Client,
                    now,
                )?;
                Ok(Material {
                    data: BTreeMap::from([
                        ("front-proxy-client.crt".into(), cert),
                        ("front-proxy-client.key".into(), key),
                    ]),
                    not_after,
                })
            },
        )?;
        Ok(())
    }

    /// The admin, controller-manager and scheduler kubeconfigs.
    fn kubeconfigs(&mut self, cas: &Cas) -> Result<(), Error> {
        let (tcp, now, alg) = (self.tcp, self.now, self.settings.key_algorithm);
        let (ca_cert, ca_key) = (cas.ca_cert.clone(), cas.ca_key.clone());
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
            self.secret(
                name,
                component,
                &[key_name],
                sha(&["kubeconfig", user, server, &ca_cert]),
                || {
                    let (cert, key, not_after) =
                        issue((&ca_cert, &ca_key), alg, user, groups, Usage::Client, now)?;
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
        Ok(())
    }
}

impl PkiBuilder<'_> {
    /// The Konnectivity server's client certificate (`system:konnectivity-server`), and its kubeconfig
    /// against the apiserver of its own pod beside the egress selector configuration.
    fn konnectivity(&mut self, cas: &Cas) -> Result<(), Error> {
        let (tcp, now, alg) = (self.tcp, self.now, self.settings.key_algorithm);
        let (ca_cert, ca_key) = (cas.ca_cert.clone(), cas.ca_key.clone());
        let certificate = self.secret(
            konnectivity_certificate_name(tcp),
            "konnectivity-certificate",
            &["tls.crt", "tls.key"],
            sha(&["konnectivity-certificate", SERVER_USER, &ca_cert]),
            || {
                let (cert, key, not_after) =
                    issue((&ca_cert, &ca_key), alg, SERVER_USER, &[], Usage::Client, now)?;
                Ok(Material {
                    data: BTreeMap::from([("tls.crt".into(), cert), ("tls.key".into(), key)]),
                    not_after,
                })
            },
        )?;
        let (cert, key) = (get(&certificate, "tls.crt")?, get(&certificate, "tls.key")?);
        let server = format!("https://127.0.0.1:{}", port(tcp));
        let egress = egress_selector();
        let not_after = self
            .out
            .secrets
            .last()
            .and_then(|s| s.annotations().get(NOT_AFTER_ANNOTATION)?.parse().ok())
            .unwrap_or_default();
        self.secret(
            konnectivity_kubeconfig_name(tcp),
            "konnectivity-kubeconfig",
            &[KUBECONFIG_KEY, EGRESS_KEY],
            sha(&["konnectivity-kubeconfig", &server, &ca_cert, &cert, &egress]),
            || {
                Ok(Material {
                    data: BTreeMap::from([
                        (
                            KUBECONFIG_KEY.into(),
                            kubeconfig(&ca_cert, &server, SERVER_USER, &cert, &key)?,
                        ),
                        (EGRESS_KEY.into(), egress.clone()),
                    ]),
                    not_after,
                })
            },
        )?;
        Ok(())
    }
}
