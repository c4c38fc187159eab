//! A local etcd: plain HTTP, or TLS with client-certificate auth and a `root` user (as a shared
//! production etcd runs). [`EtcdHttp`] talks to it through etcd's JSON gateway (`/v3/...`).

use std::{path::PathBuf, time::Duration};

use base64::Engine as _;
use serde_json::{Value, json};

use super::{
    IoContext, LocalEnvError, Result, assets, ports,
    process::{ChildProcess, Spec},
    wait_until,
};
use crate::pki::{Ca, CertKey};

/// TLS material of a TLS-enabled etcd.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The CA that signed the server certificate and that verifies client certificates.
    pub ca: CertKey,
    /// A client certificate for the `root` user (CN=root), for gRPC clients such as kube-apiserver.
    pub root_client: CertKey,
    /// A client certificate without CN: etcd's JSON gateway refuses certificates that carry a CN.
    pub gateway_client: CertKey,
    /// Files on disk: CA certificate, root client certificate and key (for kube-apiserver flags).
    pub ca_file: PathBuf,
    /// The root client certificate file.
    pub client_cert_file: PathBuf,
    /// The root client key file.
    pub client_key_file: PathBuf,
    /// The root user's password, for the JSON gateway (which ignores certificate CNs once auth is on).
    pub root_password: String,
}

/// A running etcd member.
#[derive(Debug)]
pub struct LocalEtcd {
    child: ChildProcess,
    spec: Spec,
    client_port: ports::PortClaim,
    _peer_port: ports::PortClaim,
    tls: Option<EtcdTls>,
    dir: PathBuf,
}

/// How to start etcd.
#[derive(Debug, Default)]
pub struct EtcdOptions<'a> {
    /// Serve TLS with client-certificate auth and enable etcd auth with a `root` user, signed by this CA
    /// (pass the same CA to several etcds so that they share one).
    pub tls_ca: Option<&'a Ca>,
}

impl LocalEtcd {
    /// Starts etcd with its data under `dir`.
    pub async fn start(dir: PathBuf, options: EtcdOptions<'_>) -> Result<Self> {
        let etcd = assets::binary("etcd")?;
        std::fs::create_dir_all(&dir).context("create the etcd dir")?;
        let tls = match options.tls_ca {
            Some(ca) => {
                let server = ca.server(
                    "etcd",
                    &["localhost"],
                    &["127.0.0.1"
                        .parse()
                        .map_err(|_| LocalEnvError::Other("bad loopback address".into()))?],
                )?;
                let root_client = ca.client("root", &[])?;
                let gateway_client = ca.client("", &["tenantplane-gateway"])?;
                let write = |name: &str, body: &str| -> Result<PathBuf> {
                    let path = dir.join(name);
                    std::fs::write(&path, body).context(format!("write {}", path.display()))?;
                    Ok(path)
                };
                std::fs::create_dir_all(&dir).context("create the etcd dir")?;
                let ca_file = write("ca.crt", &ca.ca.cert_pem)?;
                write("server.crt", &server.cert_pem)?;
                write("server.key", &server.key_pem)?;
                let client_cert_file = write("root.crt", &root_client.cert_pem)?;
                let client_key_file = write("root.key", &root_client.key_pem)?;
                let root_password = uuid::Uuid::new_v4().simple().to_string();
                Some(EtcdTls {
                    ca: ca.ca.clone(),
                    root_client,
                    gateway_client,
                    ca_file,
                    client_cert_file,
                    client_key_file,
                    root_password,
                })
            }
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut last = None;
        for _attempt in 0..3 {
            let client_port = ports::claim().context("claim the etcd client port")?;
            let peer_port = ports::claim().context("claim the etcd peer port")?;
            let client_url = format!("{scheme}://127.0.0.1:{}", client_port.port());
            let peer_url = format!("http://127.0.0.1:{}", peer_port.port());
            let data = dir.join(format!("data-{}", client_port.port()));
            let mut spec = Spec::new("etcd", &etcd).args([
                "--name=tp".to_string(),
                format!("--data-dir={}", data.display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=tp={peer_url}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ]);
            if tls.is_some() {
                spec = spec.args([
                    format!("--cert-file={}", dir.join("server.crt").display()),
                    format!("--key-file={}", dir.join("server.key").display()),
                    format!("--trusted-ca-file={}", dir.join("ca.crt").display()),
                    "--client-cert-auth=true".into(),
                ]);
            }
            let mut child = ChildProcess::spawn(&spec, &dir.join("etcd.log"))?;
            let mut etcd = Self {
                child,
                spec,
                client_port,
                _peer_port: peer_port,
                tls: tls.clone(),
                dir: dir.clone(),
            };
            let http = etcd.http_without_auth()?;
            let ready = wait_until("etcd", Duration::from_secs(60), &mut etcd.child, || {
                let http = http.clone();
                async move { http.health().await }
            })
            .await;
            match ready {
                Ok(()) => {
                    if let Some(tls) = &etcd.tls {
                        http.enable_root_auth(&tls.root_password).await?;
                    }
                    return Ok(etcd);
                }
                Err(LocalEnvError::Exited(e)) if e.address_in_use => last = Some(LocalEnvError::Exited(e)),
                Err(e) => return Err(e),
            }
            child = etcd.child;
            drop(child);
        }
        Err(last.unwrap_or_else(|| LocalEnvError::Other("etcd did not start".into())))
    }

    /// Stops etcd (SIGTERM) and starts it again on the same port and data, as a restart of a real
    /// member; returns once it is healthy.
    pub async fn restart(&mut self) -> Result<()> {
        self.child.stop(Duration::from_secs(10));
        self.child = ChildProcess::spawn(&self.spec, &self.dir.join("etcd.log"))?;
        let http = self.http_without_auth()?;
        wait_until("etcd", Duration::from_secs(60), &mut self.child, || {
            let http = http.clone();
            async move { http.health().await }
        })
        .await
    }

    /// Driver settings that reach this etcd as its `root` user (a TLS etcd only).
    pub fn root_driver_settings(&self) -> Option<crate::datastore::etcd::EtcdSettings> {
        let tls = self.tls.as_ref()?;
        Some(crate::datastore::etcd::EtcdSettings::new(
            vec![self.endpoint()],
            tls.ca.clone(),
            tls.root_client.cert_pem.clone(),
            crate::secret::Secret::new(tls.root_client.key_pem.clone()),
        ))
    }

    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port.port())
    }

    /// The bare `host:port` endpoint, as a DataStore spells it.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port.port())
    }

    /// TLS material, when TLS is on.
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    /// The etcd process id.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The data directory root.
    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// A gateway client authenticated as `root` (when TLS is on).
    pub fn http(&self) -> Result<EtcdHttp> {
        let http = self.http_without_auth()?;
        Ok(match &self.tls {
            Some(tls) => http.with_password("root", &tls.root_password),
            None => http,
        })
    }

    fn http_without_auth(&self) -> Result<EtcdHttp> {
        match &self.tls {
            Some(tls) => EtcdHttp::new(&self.url(), Some((&tls.ca.cert_pem, &tls.gateway_client))),
            None => EtcdHttp::new(&self.url(), None),
        }
    }

    /// An `etcdctl` that authenticates over gRPC with the given client certificate (CN = user).
    pub fn etcdctl(&self, client: &CertKey) -> Result<Etcdctl> {
        let tls = self
            .tls
            .as_ref()
            .ok_or_else(|| LocalEnvError::Other("etcd runs without TLS".into()))?;
        let dir = self
            .dir
            .join(format!("etcdctl-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).context("create the etcdctl dir")?;
        std::fs::write(dir.join("client.crt"), &client.cert_pem).context("write the etcdctl certificate")?;
        std::fs::write(dir.join("client.key"), &client.key_pem).context("write the etcdctl key")?;
        Ok(Etcdctl {
            endpoint: self.url(),
            ca_file: tls.ca_file.clone(),
            dir,
        })
    }
}

/// `etcdctl` bound to one endpoint and one client certificate: a real gRPC client with certificate auth.
#[derive(Debug)]
pub struct Etcdctl {
    endpoint: String,
    ca_file: PathBuf,
    dir: PathBuf,
}

impl Etcdctl {
    /// Runs `etcdctl <args>`; returns stdout on success and stderr on failure.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let bin = assets::binary("etcdctl").map_err(|e| e.to_string())?;
        let output = std::process::Command::new(bin)
            .arg(format!("--endpoints={}", self.endpoint))
            .arg(format!("--cacert={}", self.ca_file.display()))
            .arg(format!("--cert={}", self.dir.join("client.crt").display()))
            .arg(format!("--key={}", self.dir.join("client.key").display()))
            .arg("--command-timeout=10s")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }
}

/// A minimal client of etcd's JSON gateway (enough for setup and for tests to inspect keys).
#[derive(Debug, Clone)]
pub struct EtcdHttp {
    base: String,
    http: reqwest::Client,
    credentials: Option<(String, crate::secret::Secret<String>)>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(value: &Value) -> Vec<u8> {
    value
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

impl EtcdHttp {
    /// A client for `url`, optionally with a CA and client certificate.
    pub fn new(url: &str, tls: Option<(&str, &CertKey)>) -> Result<Self> {
        super::install_crypto_provider();
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
        if let Some((ca, client)) = tls {
            let ca = reqwest::Certificate::from_pem(ca.as_bytes())
                .map_err(|e| LocalEnvError::Other(format!("bad etcd CA: {e}")))?;
            let identity =
                reqwest::Identity::from_pem(format!("{}{}", client.cert_pem, client.key_pem).as_bytes())
                    .map_err(|e| LocalEnvError::Other(format!("bad etcd client certificate: {e}")))?;
            builder = builder.tls_certs_only([ca]).identity(identity);
        }
        let http = builder
            .build()
            .map_err(|e| LocalEnvError::Other(format!("etcd HTTP client: {e}")))?;
        Ok(Self {
            base: url.trim_end_matches('/').to_string(),
            http,
            credentials: None,
        })
    }

    /// Authenticates every request with a token for `user`/`password` (`/v3/auth/authenticate`).
    pub fn with_password(mut self, user: &str, password: &str) -> Self {
        self.credentials = Some((user.to_string(), crate::secret::Secret::new(password.to_string())));
        self
    }

    async fn token(&self) -> std::result::Result<Option<String>, String> {
        let Some((user, password)) = &self.credentials else {
            return Ok(None);
        };
        let body = json!({"name": user, "password": password.expose()});
        let value = self.send("/v3/auth/authenticate", body, None).await?;
        Ok(value["token"].as_str().map(str::to_string))
    }

    async fn post(&self, path: &str, body: Value) -> std::result::Result<Value, String> {
        let token = self.token().await?;
        self.send(path, body, token).await
    }

    async fn send(
        &self,
        path: &str,
        body: Value,
        token: Option<String>,
    ) -> std::result::Result<Value, String> {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(token) = token {
            request = request.header("Authorization", token);
        }
        let response = request.send().await.map_err(|e| format!("POST {path}: {e}"))?;
        let status = response.status();
        let value: Value = response.json().await.map_err(|e| format!("POST {path}: {e}"))?;
        if status.is_success() {
            Ok(value)
        } else {
            Err(format!("POST {path}: {status}: {value}"))
        }
    }

    /// `GET /health` answers `{"health":"true"}`.
    pub async fn health(&self) -> std::result::Result<(), String> {
        let response = self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = response.json().await.map_err(|e| e.to_string())?;
        if body["health"] == "true" {
            Ok(())
        } else {
            Err(format!("unhealthy: {body}"))
        }
    }

    /// Creates the `root` role and user (certificate auth over gRPC; `password` for the gateway) and
    /// enables auth.
    pub async fn enable_root_auth(&self, password: &str) -> Result<()> {
        let ignore_exists = |r: std::result::Result<Value, String>| match r {
            Ok(_) => Ok(()),
            Err(e) if e.contains("already exists") => Ok(()),
            Err(e) => Err(LocalEnvError::Other(format!("etcd auth setup: {e}"))),
        };
        ignore_exists(self.post("/v3/auth/role/add", json!({"name": "root"})).await)?;
        ignore_exists(
            self.post("/v3/auth/user/add", json!({"name": "root", "password": password}))
                .await,
        )?;
        self.post("/v3/auth/user/grant", json!({"user": "root", "role": "root"}))
            .await
            .map_err(|e| LocalEnvError::Other(format!("etcd auth setup: {e}")))?;
        self.post("/v3/auth/enable", json!({}))
            .await
            .map_err(|e| LocalEnvError::Other(format!("etcd auth enable: {e}")))?;
        Ok(())
    }

    /// Whether auth is enabled.
    pub async fn auth_enabled(&self) -> std::result::Result<bool, String> {
        let status = self.post("/v3/auth/status", json!({})).await?;
        Ok(status["enabled"].as_bool().unwrap_or(false))
    }

    /// Writes `key` = `value`.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> std::result::Result<(), String> {
        self.post("/v3/kv/put", json!({"key": b64(key), "value": b64(value)}))
            .await
            .map(|_| ())
    }

    /// The value of `key`, if it exists.
    pub async fn get(&self, key: &[u8]) -> std::result::Result<Option<Vec<u8>>, String> {
        let value = self.post("/v3/kv/range", json!({"key": b64(key)})).await?;
        Ok(value["kvs"]
            .as_array()
            .and_then(|kvs| kvs.first())
            .map(|kv| unb64(&kv["value"])))
    }

    /// Every key and value under `prefix`, sorted by key.
    pub async fn range_prefix(&self, prefix: &[u8]) -> std::result::Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
        let body = json!({"key": b64(prefix), "range_end": b64(&crate::datastore::etcd::prefix_end(prefix))});
        let value = self.post("/v3/kv/range", body).await?;
        Ok(value["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| (unb64(&kv["key"]), unb64(&kv["value"])))
                    .collect()
            })
            .unwrap_or_default())
    }
}
