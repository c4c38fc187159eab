//! A local kube-apiserver (and optionally kube-controller-manager) on an etcd or kine backend.

use std::{
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    time::Duration,
};

use base64::Engine as _;

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec},
    wait_until,
};
use crate::pki::{Ca, CertKey, key_pair_pem};

/// The controllers the test controller-manager runs: garbage collection, namespace deletion and
/// service accounts. Deployment and ReplicaSet controllers stay off, so that Deployment status is
/// written only by whoever plays kubelet (the pod-less runner).
pub const DEFAULT_CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller";

/// How to start the API server.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// `--etcd-servers`, e.g. `http://127.0.0.1:2379` (an etcd or a kine).
    pub etcd_servers: String,
    /// `--etcd-prefix` (default `/registry`).
    pub etcd_prefix: Option<String>,
    /// Client TLS files for a TLS etcd: CA, certificate, key.
    pub etcd_tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Start kube-controller-manager with these controllers (`None`: no controller-manager).
    pub controllers: Option<String>,
    /// How long to wait for `/readyz` and the `default` namespace.
    pub start_timeout: Duration,
}

impl KubeOptions {
    /// Options for an API server on `etcd_servers` with the default controllers.
    pub fn new(etcd_servers: impl Into<String>) -> Self {
        Self {
            etcd_servers: etcd_servers.into(),
            etcd_prefix: None,
            etcd_tls: None,
            controllers: Some(DEFAULT_CONTROLLERS.to_string()),
            start_timeout: start_timeout(),
        }
    }
}

/// The start timeout: `TENANTPLANE_KUBE_START_TIMEOUT` seconds, default 180 (2 cores are slow).
pub fn start_timeout() -> Duration {
    let secs = std::env::var("TENANTPLANE_KUBE_START_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180);
    Duration::from_secs(secs)
}

/// A running local control plane.
#[derive(Debug)]
pub struct LocalKube {
    apiserver: ChildProcess,
    controller_manager: Option<ChildProcess>,
    port: ports::PortClaim,
    dir: PathBuf,
    kubeconfig: PathBuf,
    ca: CertKey,
    admin: CertKey,
}

impl LocalKube {
    /// Generates certificates under `dir`, starts kube-apiserver and waits until it serves.
    pub async fn start(dir: PathBuf, options: KubeOptions) -> Result<Self> {
        let apiserver_bin = assets::binary("kube-apiserver")?;
        std::fs::create_dir_all(&dir).context("create the kube-apiserver dir")?;
        let ca = Ca::new("tenantplane-test-ca")?;
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let serving = ca.server(
            "kube-apiserver",
            &["localhost", "kubernetes", "kubernetes.default"],
            &[loopback, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
        )?;
        let admin = ca.client("admin", &["system:masters"])?;
        let (sa_key, sa_pub) = key_pair_pem(crate::pki::KeyAlgorithm::EcdsaP256)?;
        let write = |name: &str, body: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, body).context(format!("write {}", path.display()))?;
            Ok(path)
        };
        let ca_file = write("ca.crt", &ca.ca.cert_pem)?;
        let serving_crt = write("serving.crt", &serving.cert_pem)?;
        let serving_key = write("serving.key", &serving.key_pem)?;
        let sa_key_file = write("sa.key", &sa_key)?;
        let sa_pub_file = write("sa.pub", &sa_pub)?;

        let mut last = None;
        for _attempt in 0..3 {
            let port = ports::claim().context("claim the kube-apiserver port")?;
            let p = port.port();
            let mut args = vec![
                format!("--etcd-servers={}", options.etcd_servers),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={p}"),
                format!("--cert-dir={}", dir.join("certs").display()),
                format!("--tls-cert-file={}", serving_crt.display()),
                format!("--tls-private-key-file={}", serving_key.display()),
                format!("--client-ca-file={}", ca_file.display()),
                format!("--service-account-issuer=https://127.0.0.1:{p}/"),
                format!("--service-account-key-file={}", sa_pub_file.display()),
                format!("--service-account-signing-key-file={}", sa_key_file.display()),
                "--service-cluster-ip-range=10.0.0.0/16".into(),
                "--authorization-mode=RBAC".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
                "--allow-privileged=true".into(),
                "--v=0".into(),
            ];
            if let Some(prefix) = &options.etcd_prefix {
                args.push(format!("--etcd-prefix={prefix}"));
            }
            if let Some((ca, cert, key)) = &options.etcd_tls {
                args.push(format!("--etcd-cafile={}", ca.display()));
                args.push(format!("--etcd-certfile={}", cert.display()));
                args.push(format!("--etcd-keyfile={}", key.display()));
            }
            let spec = Spec::new("kube-apiserver", &apiserver_bin).args(args);
            let mut apiserver = ChildProcess::spawn(&spec, &dir.join("kube-apiserver.log"))?;
            let kubeconfig = write("admin.kubeconfig", &kubeconfig_yaml(p, &ca.ca, &admin))?;
            let mut kube = Self {
                apiserver,
                controller_manager: None,
                port,
                dir: dir.clone(),
                kubeconfig,
                ca: ca.ca.clone(),
                admin: admin.clone(),
            };
            match kube.wait_ready(options.start_timeout).await {
                Ok(()) => {
                    if let Some(controllers) = &options.controllers {
                        kube.start_controller_manager(controllers, &ca_file, &sa_key_file)
                            .await?;
                    }
                    return Ok(kube);
                }
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
            apiserver = kube.apiserver;
            drop(apiserver);
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("kube-apiserver did not start".into())))
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let http = self.http_client()?;
        let url = format!("{}/readyz", self.url());
        wait_until("kube-apiserver /readyz", timeout, &mut self.apiserver, || {
            let http = http.clone();
            let url = url.clone();
            async move {
                let response = http.get(&url).send().await.map_err(|e| e.to_string())?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("/readyz: {}", response.status()))
                }
            }
        })
        .await?;
        let client = self.client().await?;
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        wait_until("the default namespace", timeout, &mut self.apiserver, || {
            let namespaces = namespaces.clone();
            async move {
                namespaces
                    .get("default")
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        })
        .await
    }

    async fn start_controller_manager(
        &mut self,
        controllers: &str,
        ca_file: &Path,
        sa_key: &Path,
    ) -> Result<()> {
        let bin = assets::binary("kube-controller-manager")?;
        let port = ports::claim().context("claim the kube-controller-manager port")?;
        let spec = Spec::new("kube-controller-manager", bin).args([
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--authentication-kubeconfig={}", self.kubeconfig.display()),
            format!("--authorization-kubeconfig={}", self.kubeconfig.display()),
            format!("--controllers={controllers}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", port.port()),
            format!("--cert-dir={}", self.dir.join("kcm-certs").display()),
            format!("--root-ca-file={}", ca_file.display()),
            format!("--service-account-private-key-file={}", sa_key.display()),
            "--use-service-account-credentials=false".into(),
            "--v=0".into(),
        ]);
        let mut child = ChildProcess::spawn(&spec, &self.dir.join("kube-controller-manager.log"))?;
        // It serves /healthz once its controllers started.
        let http = self.http_client()?;
        let url = format!("https://127.0.0.1:{}/healthz", port.port());
        let insecure = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| LocalEnvError::Other(e.to_string()))?;
        drop(http);
        wait_until(
            "kube-controller-manager /healthz",
            Duration::from_secs(120),
            &mut child,
            || {
                let insecure = insecure.clone();
                let url = url.clone();
                async move {
                    let r = insecure.get(&url).send().await.map_err(|e| e.to_string())?;
                    if r.status().is_success() {
                        Ok(())
                    } else {
                        Err(format!("{}", r.status()))
                    }
                }
            },
        )
        .await?;
        drop(port);
        self.controller_manager = Some(child);
        Ok(())
    }

    /// The API server URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port.port())
    }

    /// Path of an admin kubeconfig (CN=admin, O=system:masters).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory with certificates and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster CA certificate.
    pub fn ca(&self) -> &CertKey {
        &self.ca
    }

    /// Process ids of the API server and, when running, the controller-manager.
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(self.apiserver.pid())
            .chain(self.controller_manager.as_ref().map(|c| c.pid()))
            .collect()
    }

    /// A fresh `kube::Config` for the admin (one per tokio runtime: clients are tied to their runtime).
    pub async fn config(&self) -> Result<kube::Config> {
        config_from(&self.kubeconfig).await
    }

    /// A fresh admin client.
    pub async fn client(&self) -> Result<kube::Client> {
        client_from(&self.kubeconfig).await
    }

    /// An HTTP client that trusts the cluster CA and presents the admin certificate.
    pub fn http_client(&self) -> Result<reqwest::Client> {
        super::install_crypto_provider();
        let ca = reqwest::Certificate::from_pem(self.ca.cert_pem.as_bytes())
            .map_err(|e| LocalEnvError::Other(e.to_string()))?;
        let identity =
            reqwest::Identity::from_pem(format!("{}{}", self.admin.cert_pem, self.admin.key_pem).as_bytes())
                .map_err(|e| LocalEnvError::Other(e.to_string()))?;
        reqwest::Client::builder()
            .tls_certs_only([ca])
            .identity(identity)
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| LocalEnvError::Other(e.to_string()))
    }
}

/// A fresh `kube::Config` from the kubeconfig file at `path` (60 s read timeout).
pub async fn config_from(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| LocalEnvError::Other(format!("read kubeconfig: {e}")))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| LocalEnvError::Other(format!("kubeconfig: {e}")))?;
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(config)
}

/// A fresh client from the kubeconfig file at `path`.
pub async fn client_from(path: &Path) -> Result<kube::Client> {
    super::install_crypto_provider();
    kube::Client::try_from(config_from(path).await?)
        .map_err(|e| LocalEnvError::Other(format!("kube client: {e}")))
}

/// An admin kubeconfig with embedded certificates.
pub fn kubeconfig_yaml(port: u16, ca: &CertKey, user: &CertKey) -> String {
    let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\ncurrent-context: local\n",
        b(&ca.cert_pem),
        b(&user.cert_pem),
        b(&user.key_pem)
    )
}

/// Server-side applies every generated CRD as `field_manager` and waits (at most 60 s each) until each
/// is `Established`.
pub async fn install_crds(client: &kube::Client, field_manager: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let failed = |what: String| move |e: kube::Error| LocalEnvError::Other(format!("{what}: {e}"));
    for (_, crd) in crate::k8s::crd::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(failed(format!("apply CRD {name}")))?;
        let start = std::time::Instant::now();
        loop {
            let established = api
                .get(&name)
                .await
                .map_err(failed(format!("read CRD {name}")))?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(LocalEnvError::Other(format!(
                    "CRD {name} not Established after 60s"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Creates namespace `name` unless it exists (e.g. the controller's state namespace, which a
/// management cluster provides as the chart's release namespace does).
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, ObjectMeta, PostParams};
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(LocalEnvError::Other(format!("create namespace {name}: {e}"))),
    }
}

/// Registers the TLS etcd `etcd` in the cluster as DataStore `name`: its CA and root client key pair go
/// into Secret `<name>-tls` in `namespace` (which must exist), and the DataStore references them.
pub async fn create_etcd_datastore(
    client: &kube::Client,
    etcd: &super::etcd::LocalEtcd,
    name: &str,
    namespace: &str,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, PostParams};

    use crate::k8s::crd::DataStore;
    let failed = |what: &str, e: kube::Error| LocalEnvError::Other(format!("create {what}: {e}"));
    let tls = etcd
        .tls()
        .ok_or_else(|| LocalEnvError::Other(format!("the etcd of DataStore {name} has no TLS")))?;
    let secret_name = format!("{name}-tls");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": secret_name},
        "stringData": {
            "ca.crt": tls.ca.cert_pem, "ca.key": tls.ca.key_pem,
            "root.crt": tls.root_client.cert_pem, "root.key": tls.root_client.key_pem,
        },
    }))
    .map_err(|e| LocalEnvError::Other(e.to_string()))?;
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(|e| failed(&format!("Secret {namespace}/{secret_name}"), e))?;
    let sref = |key: &str| serde_json::json!({"secretReference": {"name": secret_name, "namespace": namespace, "keyPath": key}});
    let ds: DataStore = serde_json::from_value(serde_json::json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "DataStore",
        "metadata": {"name": name},
        "spec": {
            "driver": "etcd",
            "endpoints": [etcd.endpoint()],
            "tlsConfig": {
                "certificateAuthority": {"certificate": sref("ca.crt"), "privateKey": sref("ca.key")},
                "clientCertificate": {"certificate": sref("root.crt"), "privateKey": sref("root.key")},
            },
        },
    }))
    .map_err(|e| LocalEnvError::Other(e.to_string()))?;
    Api::<DataStore>::all(client.clone())
        .create(&PostParams::default(), &ds)
        .await
        .map_err(|e| failed(&format!("DataStore {name}"), e))?;
    Ok(())
}
