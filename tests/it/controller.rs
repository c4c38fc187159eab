//! `tenantplane controller` against the real parts: the shared kube-apiserver, TLS etcds with auth,
//! PostgreSQL, MariaDB and NATS. Each test runs its own controller in-process, scoped to its own
//! namespace and to DataStores labelled with it (DataStores are cluster-scoped), so tests do not see
//! each other's objects.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures_util::StreamExt as _;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Secret, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::Condition,
};
use kube::{
    Api, ResourceExt as _,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use sqlx::{Connection, MySqlConnection, PgConnection};
use tenantplane::{
    controller::{
        ControllerSettings,
        leader::{LeaderElector, LeaseSettings},
        metrics::Metrics,
    },
    k8s::crd::{DataStore, TenantControlPlane},
    pki::{Ca, CertKey, KeyAlgorithm},
};
use tenantplane_devenv::localenv::{
    self,
    etcd::{EtcdOptions, LocalEtcd},
    nats::LocalNats,
    ports,
};

use crate::support::{self, eventually};

pub(crate) const WAIT: Duration = Duration::from_secs(60);
const LABEL: &str = "tenantplane.test/namespace";

/// A controller running on the test's runtime, scoped to one namespace; stopped on drop.
pub(crate) struct Env {
    pub(crate) client: kube::Client,
    pub(crate) ns: String,
    pub(crate) metrics: Arc<Metrics>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn env(prefix: &str) -> Env {
    env_with_default(prefix, None).await
}

/// A controller whose TenantControlPlanes without `spec.dataStore` get `default`.
async fn env_with_default(prefix: &str, default: Option<String>) -> Env {
    env_with(prefix, default, KeyAlgorithm::default()).await
}

/// The same, with every certificate the controller mints of key type `alg`.
async fn env_with(prefix: &str, default: Option<String>, alg: KeyAlgorithm) -> Env {
    env_configured(prefix, |settings| {
        settings.default_datastore = default;
        settings.workload.key_algorithm = alg;
    })
    .await
}

/// A controller scoped to a fresh namespace, with its settings changed by `configure`.
pub(crate) async fn env_configured(prefix: &str, configure: impl FnOnce(&mut ControllerSettings)) -> Env {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, prefix).await;
    let mut settings = ControllerSettings::new(format!("test-{ns}"));
    settings.namespace = Some(ns.clone());
    settings.datastore_selector = Some(format!("{LABEL}={ns}"));
    settings.concurrency = 2;
    configure(&mut settings);
    let metrics = Arc::new(Metrics::default());
    let task = tokio::spawn({
        let client = client.clone();
        let metrics = metrics.clone();
        async move {
            let _ =
                tenantplane::controller::run(client, settings, None, metrics, std::future::pending()).await;
        }
    });
    Env {
        client,
        ns,
        metrics,
        task,
    }
}

impl Env {
    pub(crate) fn datastores(&self) -> Api<DataStore> {
        Api::all(self.client.clone())
    }

    pub(crate) fn tcps(&self) -> Api<TenantControlPlane> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub(crate) fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub(crate) async fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let data: BTreeMap<String, String> =
            data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
        self.secrets()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// [`Env::secret`] unless a Secret of that name exists already.
    pub(crate) async fn secret_once(&self, name: &str, data: &[(&str, &str)]) {
        if self.secrets().get_opt(name).await.unwrap().is_none() {
            self.secret(name, data).await;
        }
    }

    pub(crate) fn sref(&self, secret: &str, key: &str) -> Value {
        json!({"secretReference": {"name": secret, "namespace": self.ns, "keyPath": key}})
    }

    pub(crate) async fn datastore(&self, name: &str, spec: Value) -> String {
        let ds: DataStore = serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "DataStore",
            "metadata": {"name": name, "labels": {LABEL: self.ns}},
            "spec": spec,
        }))
        .unwrap();
        self.datastores()
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
        name.to_string()
    }

    /// An etcd DataStore whose TLS material sits in Secret `<name>-tls`.
    pub(crate) async fn etcd_datastore(&self, etcd: &LocalEtcd) -> String {
        self.etcd_datastore_named(etcd, support::unique("ds-etcd")).await
    }

    /// The same with a given name.
    pub(crate) async fn etcd_datastore_named(&self, etcd: &LocalEtcd, name: String) -> String {
        let tls = etcd.tls().unwrap();
        let secret = format!("{name}-tls");
        self.secret(
            &secret,
            &[
                ("ca.crt", &tls.ca.cert_pem),
                ("ca.key", &tls.ca.key_pem),
                ("root.crt", &tls.root_client.cert_pem),
                ("root.key", &tls.root_client.key_pem),
            ],
        )
        .await;
        self.datastore(
            &name,
            json!({
                "driver": "etcd",
                "endpoints": [etcd.endpoint()],
                "tlsConfig": {
                    "certificateAuthority": {
                        "certificate": self.sref(&secret, "ca.crt"),
                        "privateKey": self.sref(&secret, "ca.key"),
                    },
                    "clientCertificate": {
                        "certificate": self.sref(&secret, "root.crt"),
                        "privateKey": self.sref(&secret, "root.key"),
                    },
                },
            }),
        )
        .await
    }

    pub(crate) async fn tcp(&self, name: &str, datastore: &str, overrides: Value) -> TenantControlPlane {
        let tcp = tenantplane_testkit::tcp(&self.ns, name)
            .datastore(datastore)
            .overrides(overrides)
            .build();
        self.tcps().create(&PostParams::default(), &tcp).await.unwrap()
    }

    /// Waits until DataStore `name` lists exactly `expected` in `status.usedBy`.
    pub(crate) async fn used_by(&self, name: &str, expected: &[&str]) {
        let api = self.datastores();
        let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        eventually(&format!("DataStore {name} usedBy {expected:?}"), WAIT, || {
            let (api, expected) = (api.clone(), expected.clone());
            async move { (api.get_opt(name).await.ok()??.status?.used_by == expected).then_some(()) }
        })
        .await;
    }

    pub(crate) async fn ds_condition(&self, name: &str, type_: &str, status: &str) -> Condition {
        let api = self.datastores();
        eventually(&format!("DataStore {name} {type_}={status}"), WAIT, || {
            let api = api.clone();
            async move {
                let ds = api.get_opt(name).await.ok()??;
                ds.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == type_ && c.status == status)
            }
        })
        .await
    }

    pub(crate) async fn tcp_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
    ) -> (TenantControlPlane, Condition) {
        let api = self.tcps();
        eventually(
            &format!("TenantControlPlane {name} {type_}={status}"),
            WAIT,
            || {
                let api = api.clone();
                async move {
                    let tcp = api.get_opt(name).await.ok()??;
                    let condition = tcp
                        .status
                        .as_ref()?
                        .conditions
                        .iter()
                        .find(|c| c.type_ == type_ && c.status == status)
                        .cloned()?;
                    Some((tcp, condition))
                }
            },
        )
        .await
    }

    /// Waits for `DataStoreReady=True` and returns the TCP with its status.
    pub(crate) async fn provisioned(&self, name: &str) -> TenantControlPlane {
        self.tcp_condition(name, "DataStoreReady", "True").await.0
    }

    pub(crate) async fn delete_tcp_and_wait(&self, name: &str) {
        self.tcps().delete(name, &DeleteParams::default()).await.unwrap();
        let api = self.tcps();
        eventually(&format!("TenantControlPlane {name} gone"), WAIT, || {
            let api = api.clone();
            async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
        })
        .await;
    }

    pub(crate) async fn delete_datastore_and_wait(&self, name: &str) {
        self.datastores()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let api = self.datastores();
        eventually(&format!("DataStore {name} gone"), WAIT, || {
            let api = api.clone();
            async move { api.get_opt(name).await.unwrap().is_none().then_some(()) }
        })
        .await;
    }

    pub(crate) async fn secret_data(&self, name: &str) -> BTreeMap<String, String> {
        self.secrets()
            .get(name)
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
            .collect()
    }
}

fn keys(data: &BTreeMap<String, String>) -> Vec<&str> {
    data.keys().map(String::as_str).collect()
}

pub(crate) async fn tls_etcd(prefix: &str, ca: &Ca) -> LocalEtcd {
    LocalEtcd::start(
        localenv::scratch_dir(prefix).unwrap(),
        EtcdOptions { tls_ca: Some(ca) },
    )
    .await
    .unwrap()
}

/// (`role get`, `user get`) as etcd's root reports them.
pub(crate) fn etcd_auth(etcd: &LocalEtcd, name: &str) -> (Result<String, String>, Result<String, String>) {
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    (root.run(&["role", "get", name]), root.run(&["user", "get", name]))
}

pub(crate) fn etcd_keys(etcd: &LocalEtcd, prefix: &str) -> String {
    let root = etcd.etcdctl(&etcd.tls().unwrap().root_client).unwrap();
    root.run(&["get", prefix, "--prefix", "--keys-only"]).unwrap()
}

pub(crate) fn storage_setup(tcp: &TenantControlPlane) -> (Option<String>, Option<String>) {
    let setup = tcp.status.clone().unwrap().storage.unwrap().setup.unwrap();
    (setup.schema, setup.user)
}

// ------------------------------------------------------------------------------------------------- etcd

/// The OID of a PEM certificate's public-key algorithm.
fn key_oid(cert_pem: &str) -> String {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).unwrap();
    pem.parse_x509()
        .unwrap()
        .public_key()
        .algorithm
        .algorithm
        .to_id_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_key_algorithm_reaches_the_etcd_tenant_certificate_and_the_control_plane_pki() {
    let env = env_with("ctl-rsa", None, KeyAlgorithm::Rsa2048).await;
    let ca = Ca::new("ctl-rsa-ca").unwrap();
    let etcd = tls_etcd("ctl-rsa", &ca).await;
    let ds = env.etcd_datastore(&etcd).await;
    let tcp = env.tcp("cp", &ds, json!(null)).await;
    let uid = tcp.uid().unwrap();
    env.provisioned("cp").await;

    let cert = env.secret_data("cp-datastore-certificate").await;
    assert_eq!(
        key_oid(&cert["server.crt"]),
        "1.2.840.113549.1.1.1",
        "rsaEncryption"
    );
    assert!(cert["server.key"].starts_with("-----BEGIN PRIVATE KEY-----"));
    let tenant = etcd
        .etcdctl(&CertKey {
            cert_pem: cert["server.crt"].clone(),
            key_pem: cert["server.key"].clone(),
        })
        .unwrap();
    tenant.run(&["put", &format!("/{uid}/registry/x"), "v"]).unwrap();

    let pki_ca = eventually("the cluster CA Secret", WAIT, || async {
        env.secrets().get_opt("cp-ca").await.unwrap()
    })
    .await;
    let ca_cert = String::from_utf8(pki_ca.data.unwrap()["ca.crt"].0.clone()).unwrap();
    assert_eq!(key_oid(&ca_cert), "1.2.840.113549.1.1.1", "rsaEncryption");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_tenant_gets_a_user_role_and_certificate_and_loses_them_when_deleted() {
    let env = env("ctl-etcd").await;
    let ca = Ca::new("ctl-etcd-ca").unwrap();
    let etcd = tls_etcd("ctl-etcd", &ca).await;
    let ds = env.etcd_datastore(&etcd).await;
    let ready = env.ds_condition(&ds, "Ready", "True").await;
    assert_eq!(ready.reason, "DataStoreReady");
    assert!(env.datastores().get(&ds).await.unwrap().status.unwrap().ready);

    let tcp = env.tcp("cp", &ds, json!(null)).await;
    let uid = tcp.uid().unwrap();
    let tcp = env.provisioned("cp").await;
    let storage = tcp.status.clone().unwrap().storage.unwrap();
    assert_eq!(storage.driver.as_deref(), Some("etcd"));
    assert_eq!(storage.data_store_name.as_deref(), Some(ds.as_str()));
    assert_eq!(storage_setup(&tcp), (Some(uid.clone()), Some(uid.clone())));
    assert_eq!(
        storage.config.as_ref().unwrap().secret_name.as_deref(),
        Some("cp-datastore-config")
    );
    assert_eq!(
        storage.certificate.as_ref().unwrap().secret_name.as_deref(),
        Some("cp-datastore-certificate")
    );
    assert_eq!(storage.certificate.unwrap().checksum.unwrap().len(), 64);
    assert!(
        tcp.finalizers()
            .contains(&"finalizer.kamaji.clastix.io".to_string())
    );

    // etcd holds the user and its role on exactly /<uid>/.
    let (role, user) = etcd_auth(&etcd, &uid);
    assert_eq!(
        role.unwrap(),
        format!(
            "Role {uid}\nKV Read:\n\t[/{uid}/, /{uid}0) (prefix /{uid}/)\nKV Write:\n\t[/{uid}/, /{uid}0) (prefix /{uid}/)\n"
        )
    );
    assert_eq!(user.unwrap(), format!("User: {uid}\nRoles: {uid}\n"));

    // The Secrets: upstream's keys; the certificate works inside the prefix.
    let config = env.secret_data("cp-datastore-config").await;
    assert_eq!(
        keys(&config),
        vec!["DB_CONNECTION_STRING", "DB_PASSWORD", "DB_SCHEMA", "DB_USER"]
    );
    assert_eq!(
        (config["DB_SCHEMA"].as_str(), config["DB_USER"].as_str()),
        (uid.as_str(), uid.as_str())
    );
    let cert = env.secret_data("cp-datastore-certificate").await;
    assert_eq!(keys(&cert), vec!["ca.crt", "server.crt", "server.key"]);
    assert_eq!(cert["ca.crt"], ca.ca.cert_pem);
    let tenant = etcd
        .etcdctl(&CertKey {
            cert_pem: cert["server.crt"].clone(),
            key_pem: cert["server.key"].clone(),
        })
        .unwrap();
    tenant.run(&["put", &format!("/{uid}/registry/x"), "v"]).unwrap();
    let owner = &env
        .secrets()
        .get("cp-datastore-certificate")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("TenantControlPlane", uid.as_str())
    );

    // usedBy lists the TCP (the DataStore reconcile is debounced, so it may lag a moment).
    env.used_by(&ds, &[&format!("{}/cp", env.ns)]).await;

    env.delete_tcp_and_wait("cp").await;
    let (role, user) = etcd_auth(&etcd, &uid);
    assert!(role.unwrap_err().contains("role name not found"));
    assert!(user.unwrap_err().contains("user name not found"));
    assert_eq!(etcd_keys(&etcd, &format!("/{uid}/")), "");
    // Unused now: the DataStore's finalizer lets it go.
    env.delete_datastore_and_wait(&ds).await;
}

// ------------------------------------------------------------------------------------------- PostgreSQL

/// (endpoint, user, password) of the shared PostgreSQL's superuser.
pub(crate) fn pg_root() -> (String, String, String) {
    match support::postgres() {
        support::PgServer::Local(pg) => (
            format!("127.0.0.1:{}", pg.port()),
            "postgres".into(),
            String::new(),
        ),
        support::PgServer::External(url) => {
            let url = reqwest::Url::parse(url).unwrap();
            (
                format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432)),
                url.username().to_string(),
                url.password().unwrap_or_default().to_string(),
            )
        }
    }
}

async fn pg_owner_of(db: &str) -> Option<String> {
    let mut admin = PgConnection::connect(&support::postgres().admin_url())
        .await
        .unwrap();
    sqlx::query_scalar("select pg_get_userbyid(datdba)::text from pg_database where datname = $1")
        .bind(db)
        .fetch_optional(&mut admin)
        .await
        .unwrap()
}

async fn pg_role_exists(role: &str) -> bool {
    let mut admin = PgConnection::connect(&support::postgres().admin_url())
        .await
        .unwrap();
    sqlx::query_scalar::<_, i64>("select count(*) from pg_roles where rolname = $1")
        .bind(role)
        .fetch_one(&mut admin)
        .await
        .unwrap()
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_datastore_waits_for_its_secret_key_then_provisions_and_removes_a_tenant() {
    let env = env("ctl-pg").await;
    let (endpoint, user, password) = pg_root();
    // The password key is missing at first: Validated=False with the exact message.
    env.secret("pg-root", &[("username", &user)]).await;
    let ds = support::unique("ds-pg");
    env.datastore(
        &ds,
        json!({
            "driver": "PostgreSQL",
            "endpoints": [endpoint],
            "basicAuth": {"username": env.sref("pg-root", "username"), "password": env.sref("pg-root", "password")},
        }),
    )
    .await;
    let invalid = env.ds_condition(&ds, "Validated", "False").await;
    assert_eq!(invalid.reason, "SecretKeyMissing");
    assert_eq!(
        invalid.message,
        format!("secret {}/pg-root does not have key password", env.ns)
    );
    assert!(!env.datastores().get(&ds).await.unwrap().status.unwrap().ready);

    // Adding the key re-reconciles the DataStore through the Secret watch.
    env.secrets()
        .patch(
            "pg-root",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": password}})),
        )
        .await
        .unwrap();
    env.ds_condition(&ds, "Ready", "True").await;

    let uid = env.tcp("cp", &ds, json!(null)).await.uid().unwrap();
    let tcp = env.provisioned("cp").await;
    assert_eq!(storage_setup(&tcp), (Some(uid.clone()), Some(uid.clone())));
    assert_eq!(
        tcp.status.unwrap().storage.unwrap().driver.as_deref(),
        Some("PostgreSQL")
    );
    assert_eq!(pg_owner_of(&uid).await.as_deref(), Some(uid.as_str()));
    assert!(pg_role_exists(&uid).await);
    let config = env.secret_data("cp-datastore-config").await;
    assert_eq!(config["DB_CONNECTION_STRING"], endpoint);
    assert_eq!(
        (config["DB_SCHEMA"].as_str(), config["DB_USER"].as_str()),
        (uid.as_str(), uid.as_str())
    );
    assert_eq!(config["DB_PASSWORD"].len(), 32);
    // No TLS on this DataStore: no certificate Secret.
    assert!(
        env.secrets()
            .get_opt("cp-datastore-certificate")
            .await
            .unwrap()
            .is_none()
    );

    env.delete_tcp_and_wait("cp").await;
    assert_eq!(pg_owner_of(&uid).await, None);
    assert!(!pg_role_exists(&uid).await);
    env.delete_datastore_and_wait(&ds).await;
}

// ---------------------------------------------------------------------------------------------- MariaDB

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_tenant_connects_with_the_secrets_password_and_is_dropped_when_deleted() {
    let env = env("ctl-my").await;
    env.secret("my-root", &[("username", "root"), ("password", "")])
        .await;
    let ds = support::unique("ds-my");
    env.datastore(
        &ds,
        json!({
            "driver": "MySQL",
            "endpoints": [format!("127.0.0.1:{}", support::mariadb().port())],
            "basicAuth": {"username": env.sref("my-root", "username"), "password": env.sref("my-root", "password")},
        }),
    )
    .await;
    env.ds_condition(&ds, "Ready", "True").await;
    let uid = env.tcp("cp", &ds, json!(null)).await.uid().unwrap();
    let tcp = env.provisioned("cp").await;
    assert_eq!(storage_setup(&tcp), (Some(uid.clone()), Some(uid.clone())));
    let config = env.secret_data("cp-datastore-config").await;
    let url = format!(
        "mysql://{}:{}@{}/{}",
        config["DB_USER"], config["DB_PASSWORD"], config["DB_CONNECTION_STRING"], config["DB_SCHEMA"]
    );
    let mut tenant = MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("create table t (id int)")
        .execute(&mut tenant)
        .await
        .unwrap();
    drop(tenant);

    // A second reconcile keeps the password (read back from the Secret).
    let before = env.metrics.reconciles("tenantcontrolplane");
    env.tcps()
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touch": "1"}}})),
        )
        .await
        .unwrap();
    eventually("a reconcile after the touch", WAIT, || async {
        (env.metrics.reconciles("tenantcontrolplane") > before).then_some(())
    })
    .await;
    assert_eq!(
        env.secret_data("cp-datastore-config").await["DB_PASSWORD"],
        config["DB_PASSWORD"]
    );
    MySqlConnection::connect(&url).await.unwrap();

    env.delete_tcp_and_wait("cp").await;
    let mut admin = MySqlConnection::connect(&support::mariadb().url_for("mysql"))
        .await
        .unwrap();
    let dbs: i64 =
        sqlx::query_scalar("select count(*) from information_schema.schemata where schema_name = ?")
            .bind(&uid)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    let users: i64 = sqlx::query_scalar("select count(*) from mysql.user where user = ?")
        .bind(&uid)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!((dbs, users), (0, 0));
    env.delete_datastore_and_wait(&ds).await;
}

// ------------------------------------------------------------------------------------------------- NATS

pub(crate) async fn nats_streams(nats: &LocalNats) -> Vec<String> {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut streams = js.streams();
    let mut names = Vec::new();
    while let Some(info) = streams.next().await {
        names.push(info.unwrap().config.name);
    }
    // The ownership registry is the driver's, not a tenant's.
    let registry = format!("KV_{}", tenantplane::datastore::nats::REGISTRY_BUCKET);
    names.retain(|n| *n != registry);
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_serves_one_tenant_a_second_is_refused_without_a_bucket_and_deletion_removes_the_bucket() {
    let env = env("ctl-nats").await;
    let nats = LocalNats::start(localenv::scratch_dir("ctl-nats").unwrap())
        .await
        .unwrap();
    env.secret("nats-auth", &[("username", ""), ("password", "")])
        .await;
    let ds = support::unique("ds-nats");
    env.datastore(
        &ds,
        json!({
            "driver": "NATS",
            "endpoints": [nats.endpoint()],
            "basicAuth": {"username": env.sref("nats-auth", "username"), "password": env.sref("nats-auth", "password")},
        }),
    )
    .await;
    env.ds_condition(&ds, "Ready", "True").await;
    let first = env.tcp("first", &ds, json!(null)).await.uid().unwrap();
    let tcp = env.provisioned("first").await;
    assert_eq!(storage_setup(&tcp), (Some(first.clone()), Some(first.clone())));
    let exclusive = tcp
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "DataStoreExclusive")
        .unwrap();
    assert_eq!(exclusive.status, "True");
    assert_eq!(nats_streams(&nats).await, vec![format!("KV_{first}")]);
    let config = env.secret_data("first-datastore-config").await;
    assert_eq!(config["DB_CONNECTION_STRING"], nats.endpoint());
    assert_eq!(config["DB_SCHEMA"], first);

    // A second TCP on the same NATS DataStore: refused, named holder, no bucket, an Event.
    env.tcp("second", &ds, json!(null)).await;
    let (second, refused) = env.tcp_condition("second", "DataStoreExclusive", "False").await;
    assert_eq!(refused.reason, "DataStoreNotExclusive");
    assert!(
        refused
            .message
            .contains("already serves another TenantControlPlane"),
        "{}",
        refused.message
    );
    assert!(second.status.unwrap().storage.is_none());
    assert_eq!(nats_streams(&nats).await, vec![format!("KV_{first}")]);
    assert!(
        env.secrets()
            .get_opt("second-datastore-config")
            .await
            .unwrap()
            .is_none()
    );
    wait_for_event(&env.client, &env.ns, "second", "DataStoreNotExclusive").await;
    assert!(env.metrics.errors("tenantcontrolplane", "DataStoreNotExclusive") >= 1);

    // Deleting the refused one touches nothing; deleting the holder removes its bucket.
    env.delete_tcp_and_wait("second").await;
    assert_eq!(nats_streams(&nats).await, vec![format!("KV_{first}")]);
    env.delete_tcp_and_wait("first").await;
    assert_eq!(nats_streams(&nats).await, Vec::<String>::new());
    env.delete_datastore_and_wait(&ds).await;
}

// -------------------------------------------------------------------------------------------- overrides

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_are_provisioned_hold_their_datastore_and_are_cleaned_after_removal_and_deletion() {
    let env = env("ctl-ovr").await;
    let ca = Ca::new("ctl-shared-ca").unwrap();
    let (primary_etcd, events_etcd) = tokio::join!(tls_etcd("ctl-ovr-a", &ca), tls_etcd("ctl-ovr-b", &ca));
    let primary = env.etcd_datastore(&primary_etcd).await;
    let events = env.etcd_datastore(&events_etcd).await;
    env.ds_condition(&primary, "Ready", "True").await;
    env.ds_condition(&events, "Ready", "True").await;

    let uid = env
        .tcp(
            "cp",
            &primary,
            json!([{"resource": "/events", "dataStore": events}]),
        )
        .await
        .uid()
        .unwrap();
    let (tcp, applied) = env.tcp_condition("cp", "OverridesApplied", "True").await;
    assert!(
        applied.message.contains(&format!("/events→{events}")),
        "{}",
        applied.message
    );
    let storage = tcp.status.unwrap().storage.unwrap();
    assert_eq!(storage.data_store_name.as_deref(), Some(primary.as_str()));
    assert_eq!(storage.overrides.len(), 1);
    assert_eq!(storage.overrides[0].resource, "/events");
    assert_eq!(
        storage.overrides[0].data_store_name.as_deref(),
        Some(events.as_str())
    );
    let setup = storage.overrides[0].setup.clone().unwrap();
    assert_eq!((setup.schema, setup.user), (Some(uid.clone()), Some(uid.clone())));
    for etcd in [&primary_etcd, &events_etcd] {
        let (role, user) = etcd_auth(etcd, &uid);
        assert!(role.unwrap().starts_with(&format!("Role {uid}\n")));
        assert_eq!(user.unwrap(), format!("User: {uid}\nRoles: {uid}\n"));
    }
    // The one client certificate works on the override etcd too (shared CA, same CN).
    let cert = env.secret_data("cp-datastore-certificate").await;
    events_etcd
        .etcdctl(&CertKey {
            cert_pem: cert["server.crt"].clone(),
            key_pem: cert["server.key"].clone(),
        })
        .unwrap()
        .run(&["put", &format!("/{uid}/events/e1"), "v"])
        .unwrap();

    // The override DataStore lists the TCP and refuses to go while it is used.
    env.used_by(&events, &[&format!("{}/cp", env.ns)]).await;
    env.datastores()
        .delete(&events, &DeleteParams::default())
        .await
        .unwrap();
    let blocked = env.ds_condition(&events, "DeletionBlocked", "True").await;
    assert_eq!(blocked.reason, "DataStoreStillUsed");
    assert!(
        blocked.message.ends_with(&format!("used by {}/cp", env.ns)),
        "{}",
        blocked.message
    );
    assert!(env.datastores().get_opt(&events).await.unwrap().is_some());

    // Remove the override from the spec and delete the TCP right away: the second etcd is still cleaned.
    env.tcps()
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"dataStoreOverrides": null}})),
        )
        .await
        .unwrap();
    env.delete_tcp_and_wait("cp").await;
    for etcd in [&primary_etcd, &events_etcd] {
        let (role, user) = etcd_auth(etcd, &uid);
        assert!(role.unwrap_err().contains("role name not found"));
        assert!(user.unwrap_err().contains("user name not found"));
        assert_eq!(etcd_keys(etcd, &format!("/{uid}/")), "");
    }
    // Unused now, the blocked DataStore goes away.
    let api = env.datastores();
    eventually("the override DataStore gone", WAIT, || {
        let api = api.clone();
        let events = events.clone();
        async move { api.get_opt(&events).await.unwrap().is_none().then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_on_an_etcd_with_another_ca_is_not_applied_and_says_why() {
    let env = env("ctl-ca").await;
    let (ca_a, ca_b) = (Ca::new("ctl-ca-a").unwrap(), Ca::new("ctl-ca-b").unwrap());
    let (primary_etcd, other_etcd) = tokio::join!(tls_etcd("ctl-ca-a", &ca_a), tls_etcd("ctl-ca-b", &ca_b));
    let primary = env.etcd_datastore(&primary_etcd).await;
    let other = env.etcd_datastore(&other_etcd).await;
    env.ds_condition(&primary, "Ready", "True").await;
    env.ds_condition(&other, "Ready", "True").await;

    let uid = env
        .tcp(
            "cp",
            &primary,
            json!([{"resource": "/events", "dataStore": other}]),
        )
        .await
        .uid()
        .unwrap();
    let (tcp, refused) = env.tcp_condition("cp", "OverridesApplied", "False").await;
    assert_eq!(refused.reason, "OverrideCANotShared");
    assert_eq!(
        refused.message,
        format!(
            "override /events: DataStore {other} has a different CA certificate than the primary DataStore {primary}; \
             kube-apiserver uses one etcd CA and client certificate, so every override must share the primary's CA"
        )
    );
    // The primary is provisioned all the same; nothing lands on the other etcd.
    let ready = tcp
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "DataStoreReady")
        .cloned();
    assert_eq!(ready.map(|c| c.status).as_deref(), Some("True"));
    assert!(tcp.status.unwrap().storage.unwrap().overrides.is_empty());
    assert!(
        etcd_auth(&other_etcd, &uid)
            .1
            .unwrap_err()
            .contains("user name not found")
    );
    wait_for_event(&env.client, &env.ns, "cp", "OverrideCANotShared").await;

    env.delete_tcp_and_wait("cp").await;
    assert!(
        etcd_auth(&primary_etcd, &uid)
            .1
            .unwrap_err()
            .contains("user name not found")
    );
}

// ----------------------------------------------------------------------------------------------- errors

pub(crate) async fn wait_for_event(client: &kube::Client, ns: &str, object: &str, reason: &str) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    eventually(&format!("a {reason} Event on {object}"), WAIT, || {
        let api = api.clone();
        async move {
            api.list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
                })
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datastore_on_a_closed_port_is_unreachable_and_its_tenants_are_not_ready_with_events() {
    let env = env("ctl-down").await;
    let closed = ports::claim().unwrap();
    let endpoint = format!("127.0.0.1:{}", closed.port());
    env.secret("root", &[("username", "postgres"), ("password", "pw")])
        .await;
    let ds = support::unique("ds-down");
    env.datastore(
        &ds,
        json!({
            "driver": "PostgreSQL",
            "endpoints": [endpoint],
            "basicAuth": {"username": env.sref("root", "username"), "password": env.sref("root", "password")},
        }),
    )
    .await;
    let unreachable = env.ds_condition(&ds, "Reachable", "False").await;
    assert_eq!(unreachable.reason, "DataStoreUnreachable");
    assert!(
        unreachable
            .message
            .starts_with(&format!("PostgreSQL datastore at {endpoint} is unreachable: ")),
        "{}",
        unreachable.message
    );
    let validated = env.ds_condition(&ds, "Validated", "True").await;
    assert_eq!(validated.reason, "DataStoreIsValid");
    let not_ready = env.ds_condition(&ds, "Ready", "False").await;
    assert_eq!(not_ready.message, unreachable.message);
    // Events of the cluster-scoped DataStore land in `default`.
    wait_for_event(&env.client, "default", &ds, "DataStoreUnreachable").await;

    env.tcp("cp", &ds, json!(null)).await;
    let (tcp, condition) = env.tcp_condition("cp", "DataStoreReady", "False").await;
    assert_eq!(condition.reason, "DataStoreNotReady");
    assert_eq!(
        condition.message,
        format!("DataStore {ds} is not ready: {}", unreachable.message)
    );
    assert!(tcp.status.unwrap().storage.is_none());
    let event = wait_for_event(&env.client, &env.ns, "cp", "DataStoreNotReady").await;
    assert_eq!(event.note.as_deref(), Some(condition.message.as_str()));
    assert!(env.metrics.errors("tenantcontrolplane", "DataStoreNotReady") >= 1);
    assert!(env.metrics.errors("datastore", "DataStoreUnreachable") >= 1);

    // Nothing was provisioned, so deletion goes through at once.
    env.delete_tcp_and_wait("cp").await;
    env.delete_datastore_and_wait(&ds).await;
}

// ------------------------------------------------------------------------------------------- leadership

/// The leadership test's lease: a standby takes over a record left unchanged this long, far longer than
/// a renewal takes on a loaded machine (the leader renews every second).
const LEASE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_the_lease_over_once_the_leader_stops_renewing() {
    let client = support::client().await;
    let ns = support::namespace(&client, "ctl-lease").await;
    let settings = |identity: &str| LeaseSettings {
        lease_duration: LEASE,
        renew_deadline: LEASE * 4 / 5,
        retry_period: Duration::from_secs(1),
        ..LeaseSettings::new("tenantplane-controller", ns.clone(), identity)
    };
    let candidate = |identity: &str| {
        let elector = LeaderElector::new(client.clone(), settings(identity));
        let leading = Arc::new(AtomicBool::new(false));
        let flag = leading.clone();
        let task = tokio::spawn(async move {
            let _ = elector
                .run(async move {
                    flag.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await
                })
                .await;
        });
        (leading, task)
    };
    let (a_leads, a) = candidate("a");
    let (b_leads, b) = candidate("b");
    eventually("a leader", WAIT, || async {
        (a_leads.load(Ordering::SeqCst) || b_leads.load(Ordering::SeqCst)).then_some(())
    })
    .await;
    // For more than a lease duration exactly one leads (a flag, once set, stays set): the Lease shows its
    // holder renewing past a lease duration after it acquired it, so the standby kept seeing renewals.
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), &ns);
    eventually("renewals for more than a lease duration", WAIT, || async {
        assert!(a_leads.load(Ordering::SeqCst) ^ b_leads.load(Ordering::SeqCst));
        let spec = lease_api.get("tenantplane-controller").await.ok()?.spec?;
        let (acquired, renewed) = (spec.acquire_time?.0, spec.renew_time?.0);
        (renewed.as_second() - acquired.as_second() > LEASE.as_secs() as i64).then_some(())
    })
    .await;
    assert!(a_leads.load(Ordering::SeqCst) ^ b_leads.load(Ordering::SeqCst));
    let (leader, standby, standby_leads, other) = if a_leads.load(Ordering::SeqCst) {
        (a, "b", b_leads, b)
    } else {
        (b, "a", a_leads, a)
    };
    let before = lease_api
        .get("tenantplane-controller")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(before.lease_transitions, Some(0));

    // The leader dies without releasing: the standby waits out the lease, then takes over.
    leader.abort();
    eventually("the standby to lead", WAIT, || async {
        standby_leads.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let after = lease_api
        .get("tenantplane-controller")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(after.holder_identity.as_deref(), Some(standby));
    assert_eq!(after.lease_transitions, Some(1));
    assert_eq!(after.lease_duration_seconds, Some(LEASE.as_secs() as i32));
    other.abort();
}

#[tokio::test]
async fn a_tenant_without_a_datastore_gets_the_default_one() {
    let default = support::unique("ds-default");
    let env = env_with_default("ctl-default", Some(default.clone())).await;
    let ca = Ca::new("ctl-default-ca").unwrap();
    let etcd = tls_etcd("ctl-default", &ca).await;
    env.etcd_datastore_named(&etcd, default.clone()).await;
    env.ds_condition(&default, "Ready", "True").await;
    let tcp: TenantControlPlane = serde_json::from_value(json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": {"name": "nameless", "namespace": env.ns},
        "spec": {
            "controlPlane": {"service": {"serviceType": "ClusterIP"}},
            "kubernetes": {"version": "v1.34.0", "kubelet": {}},
        },
    }))
    .unwrap();
    env.tcps().create(&PostParams::default(), &tcp).await.unwrap();
    let tcp = env.provisioned("nameless").await;
    assert_eq!(tcp.spec.data_store.as_deref(), Some(default.as_str()));
    assert_eq!(
        tcp.status.unwrap().storage.unwrap().data_store_name.as_deref(),
        Some(default.as_str())
    );
}

// ------------------------------------------------------------------------------------- workload phase

mod workload {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};

    use super::*;

    /// Upstream's rotate annotation on a certificate Secret.
    const ROTATE: &str = "certs.kamaji.clastix.io/rotate";
    /// The pod template annotation that rolls the pods when certificates or datastore config change.
    const CHECKSUM: &str = "tenantplane.io/checksum";

    impl Env {
        fn deployments(&self) -> Api<Deployment> {
            Api::namespaced(self.client.clone(), &self.ns)
        }

        /// Waits until the Deployment `name` satisfies `check`.
        async fn deployment_where(
            &self,
            name: &str,
            what: &str,
            check: impl Fn(&Deployment) -> bool,
        ) -> Deployment {
            let api = self.deployments();
            let check = &check;
            eventually(&format!("Deployment {name}: {what}"), WAIT, || {
                let api = api.clone();
                async move { api.get_opt(name).await.ok()?.filter(|d| check(d)) }
            })
            .await
        }

        /// Waits until the TenantControlPlane's version status is `state`.
        async fn version_status(&self, name: &str, state: &str) -> TenantControlPlane {
            let api = self.tcps();
            eventually(&format!("TenantControlPlane {name} {state}"), WAIT, || {
                let api = api.clone();
                async move {
                    let tcp = api.get_opt(name).await.ok()??;
                    let status = tcp
                        .status
                        .as_ref()?
                        .kubernetes_resources
                        .as_ref()?
                        .version
                        .as_ref()?
                        .status?;
                    (format!("{status:?}") == state).then_some(tcp)
                }
            })
            .await
        }

        /// Plays the Deployment controller: every replica updated, ready and available.
        async fn mark_available(&self, name: &str) {
            let d = self.deployments().get(name).await.unwrap();
            let replicas = d.spec.as_ref().unwrap().replicas.unwrap();
            self.deployments()
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                        "observedGeneration": d.metadata.generation,
                        "replicas": replicas, "readyReplicas": replicas,
                        "availableReplicas": replicas, "updatedReplicas": replicas,
                    }})),
                )
                .await
                .unwrap();
        }

        async fn patch_tcp(&self, name: &str, patch: Value) {
            self.tcps()
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    }

    fn container<'a>(d: &'a Deployment, name: &str) -> &'a k8s_openapi::api::core::v1::Container {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .find(|c| c.name == name)
            .unwrap()
    }

    fn args(d: &Deployment) -> Vec<String> {
        container(d, "kube-apiserver").args.clone().unwrap()
    }

    fn image(d: &Deployment) -> String {
        container(d, "kube-apiserver").image.clone().unwrap()
    }

    fn pod_annotation(d: &Deployment, key: &str) -> String {
        d.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[key]
            .clone()
    }

    fn condition(tcp: &TenantControlPlane, type_: &str) -> Condition {
        tcp.status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .cloned()
            .unwrap_or_else(|| panic!("no condition {type_}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_tcp_gets_secrets_deployment_service_then_sleeps_becomes_ready_refuses_a_downgrade_and_rolls_a_new_version()
     {
        let env = env("wl-etcd").await;
        let ca = Ca::new("wl-etcd-ca").unwrap();
        let etcd = tls_etcd("wl-etcd", &ca).await;
        let ds = env.etcd_datastore(&etcd).await;
        env.ds_condition(&ds, "Ready", "True").await;
        let uid = env.tcp("cp", &ds, json!(null)).await.uid().unwrap();

        let d = env.deployment_where("cp", "exists", |_| true).await;
        assert_eq!(d.owner_references()[0].uid, uid);
        assert_eq!(d.owner_references()[0].controller, Some(true));
        let a = args(&d);
        assert!(
            a.contains(&format!("--etcd-servers=https://{}", etcd.endpoint())),
            "{a:?}"
        );
        assert!(a.contains(&format!("--etcd-prefix=/{uid}")), "{a:?}");
        assert!(a.contains(&"--etcd-compaction-interval=0".to_string()));
        assert!(a.contains(&"--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt".to_string()));
        assert!(a.contains(&"--secure-port=6443".to_string()));
        assert!(a.contains(&"--authorization-mode=Node,RBAC".to_string()));
        assert!(!a.iter().any(|f| f.starts_with("--etcd-servers-overrides")));
        assert_eq!(image(&d), "registry.k8s.io/kube-apiserver:v1.34.0");
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
        let names: Vec<_> = d
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(
            names,
            ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]
        );

        for name in [
            "cp-ca",
            "cp-api-server-certificate",
            "cp-api-server-kubelet-client-certificate",
            "cp-front-proxy-ca-certificate",
            "cp-front-proxy-client-certificate",
            "cp-sa-certificate",
            "cp-admin-kubeconfig",
            "cp-controller-manager-kubeconfig",
            "cp-scheduler-kubeconfig",
        ] {
            let s = env.secrets().get(name).await.unwrap();
            assert_eq!(s.owner_references()[0].uid, uid, "{name}");
        }
        let admin = env.secret_data("cp-admin-kubeconfig").await;
        assert!(admin["admin.conf"].contains(&format!("server: https://cp.{}.svc:6443", env.ns)));

        let svc: Service = Api::namespaced(env.client.clone(), &env.ns)
            .get("cp")
            .await
            .unwrap();
        let spec = svc.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.ports.unwrap()[0].port, 6443);
        let cluster_ip = spec.cluster_ip.unwrap();

        let tcp = env.version_status("cp", "Provisioning").await;
        let status = tcp.status.clone().unwrap();
        assert_eq!(status.control_plane_endpoint, Some(format!("{cluster_ip}:6443")));
        assert_eq!(
            status.kubeconfig.unwrap().admin.unwrap().secret_name.as_deref(),
            Some("cp-admin-kubeconfig")
        );
        let deployment = status.kubernetes_resources.unwrap().deployment.unwrap();
        assert_eq!(deployment.selector.as_deref(), Some("kamaji.clastix.io/name=cp"));
        assert_eq!(condition(&tcp, "CertificatesReady").status, "True");
        assert_eq!(condition(&tcp, "KubeconfigsReady").status, "True");
        assert_eq!(condition(&tcp, "Ready").status, "False");
        // The apiserver certificate names the Service's cluster IP once it is known.
        let crt = env.secret_data("cp-api-server-certificate").await["apiserver.crt"].clone();
        let (_, pem) = x509_parser::pem::parse_x509_pem(crt.as_bytes()).unwrap();
        let x509 = pem.parse_x509().unwrap();
        let sans = format!("{:?}", x509.subject_alternative_name().unwrap().unwrap().value);
        let ip: std::net::Ipv4Addr = cluster_ip.parse().unwrap();
        assert!(sans.contains(&format!("IPAddress({:?})", ip.octets())), "{sans}");

        // replicas 0: Sleeping.
        env.patch_tcp(
            "cp",
            json!({"spec": {"controlPlane": {"deployment": {"replicas": 0}}}}),
        )
        .await;
        let tcp = env.version_status("cp", "Sleeping").await;
        assert_eq!(condition(&tcp, "Ready").reason, "Sleeping");
        env.deployment_where("cp", "replicas 0", |d| {
            d.spec.as_ref().unwrap().replicas == Some(0)
        })
        .await;

        // Back to 1 and rolled out (no kubelet here: the test plays the Deployment controller): Ready.
        env.patch_tcp(
            "cp",
            json!({"spec": {"controlPlane": {"deployment": {"replicas": 1}}}}),
        )
        .await;
        env.deployment_where("cp", "replicas 1", |d| {
            d.spec.as_ref().unwrap().replicas == Some(1)
        })
        .await;
        env.mark_available("cp").await;
        let tcp = env.version_status("cp", "Ready").await;
        let status = tcp.status.clone().unwrap();
        assert_eq!(
            status.storage.unwrap().data_store_name.as_deref(),
            Some(ds.as_str())
        );
        assert_eq!(
            status
                .kubernetes_resources
                .unwrap()
                .version
                .unwrap()
                .version
                .as_deref(),
            Some("v1.34.0")
        );
        let ready = condition(&tcp, "Ready");
        assert_eq!(ready.status, "True");
        // No pod runs here: the cluster IP does not answer, and the message says so.
        assert!(
            ready.message.contains("unreachable from the controller"),
            "{}",
            ready.message
        );
        assert_eq!(condition(&tcp, "DeploymentAvailable").status, "True");
        assert_eq!(status.observed_generation, tcp.metadata.generation);

        // A downgrade is refused; v1.34.0 keeps running.
        let before = env.deployments().get("cp").await.unwrap();
        env.patch_tcp("cp", json!({"spec": {"kubernetes": {"version": "v1.33.2"}}}))
            .await;
        let (tcp, refused) = env
            .tcp_condition("cp", "KubernetesVersionAccepted", "False")
            .await;
        assert_eq!(refused.reason, "VersionDowngradeRefused");
        assert!(refused.message.contains("v1.34.0"), "{}", refused.message);
        let after = env.deployments().get("cp").await.unwrap();
        assert_eq!(image(&after), "registry.k8s.io/kube-apiserver:v1.34.0");
        assert_eq!(after.metadata.generation, before.metadata.generation);
        assert_eq!(
            tcp.status
                .unwrap()
                .kubernetes_resources
                .unwrap()
                .version
                .unwrap()
                .version
                .as_deref(),
            Some("v1.34.0")
        );
        wait_for_event(&env.client, &env.ns, "cp", "VersionDowngradeRefused").await;

        // One minor up rolls the pod template: Upgrading until the rollout completes.
        env.patch_tcp("cp", json!({"spec": {"kubernetes": {"version": "v1.35.1"}}}))
            .await;
        let rolled = env
            .deployment_where("cp", "v1.35.1", |d| image(d).ends_with(":v1.35.1"))
            .await;
        assert!(rolled.metadata.generation > before.metadata.generation);
        assert_eq!(
            container(&rolled, "kube-scheduler").image.as_deref(),
            Some("registry.k8s.io/kube-scheduler:v1.35.1")
        );
        env.version_status("cp", "Upgrading").await;
        env.tcp_condition("cp", "KubernetesVersionAccepted", "True").await;
        env.mark_available("cp").await;
        let tcp = env.version_status("cp", "Ready").await;
        assert_eq!(
            tcp.status
                .unwrap()
                .kubernetes_resources
                .unwrap()
                .version
                .unwrap()
                .version
                .as_deref(),
            Some("v1.35.1")
        );
        // The gauge is set right after the status write the test just saw.
        eventually("the Ready gauge", WAIT, || async {
            (env.metrics.with_status("Ready") >= 1).then_some(())
        })
        .await;

        // Upstream's rotate annotation, set by someone else (an empty value requests it): the CA and
        // what it signs are regenerated once, the pods roll, and the annotation is answered with the time.
        let old_ca = env.secret_data("cp-ca").await["ca.crt"].clone();
        let old_checksum = pod_annotation(&env.deployments().get("cp").await.unwrap(), CHECKSUM);
        env.secrets()
            .patch(
                "cp-ca",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {ROTATE: ""}}})),
            )
            .await
            .unwrap();
        let rotated = eventually("the rotation is answered", WAIT, || async {
            let s = env.secrets().get("cp-ca").await.ok()?;
            s.annotations().get(ROTATE).filter(|v| !v.is_empty())?;
            Some(s)
        })
        .await;
        let new_ca = String::from_utf8(rotated.data.as_ref().unwrap()["ca.crt"].0.clone()).unwrap();
        assert_ne!(new_ca, old_ca);
        env.deployment_where("cp", "rolled by the rotation", |d| {
            pod_annotation(d, CHECKSUM) != old_checksum
        })
        .await;
        // Once: a later reconcile (a spec change) keeps the new CA and the answer.
        env.patch_tcp(
            "cp",
            json!({"spec": {"controlPlane": {"deployment": {"replicas": 2}}}}),
        )
        .await;
        eventually("the spec change is observed", WAIT, || async {
            let tcp = env.tcps().get("cp").await.ok()?;
            (tcp.status?.observed_generation == tcp.metadata.generation).then_some(())
        })
        .await;
        let again = env.secrets().get("cp-ca").await.unwrap();
        assert_eq!(again.resource_version(), rotated.resource_version());
        assert_eq!(again.annotations().get(ROTATE), rotated.annotations().get(ROTATE));
    }

    /// The controller reads its Secrets from a watch cache, which can lag behind the API. A cache that
    /// has listed but misses an existing CA must not make the controller replace it: the create finds
    /// the Secret, and the build runs again on a live read.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lagging_secret_cache_never_replaces_a_ca() {
        use kube::runtime::{reflector, watcher};
        use tenantplane::controller::{Context, tenant_control_plane::apply::write_pki};

        support::crds_installed();
        let client = support::client().await;
        // No controller watches this namespace: the test drives the certificates step itself.
        let ns = support::namespace(&client, "wl-stale").await;
        let tcp: TenantControlPlane = serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": "cp", "namespace": ns},
            "spec": {
                "dataStore": "none",
                "controlPlane": {"service": {"serviceType": "ClusterIP"}},
                "kubernetes": {"version": "v1.34.0", "kubelet": {}},
            },
        }))
        .unwrap();
        let tcp = Api::<TenantControlPlane>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &tcp)
            .await
            .unwrap();
        let context = || {
            Context::new(
                client.clone(),
                ControllerSettings::new("stale-cache-test"),
                Arc::new(Metrics::default()),
            )
        };
        let now = k8s_openapi::jiff::Timestamp::now();

        // Without a cache the Secrets are read live: the first build generates all nine.
        let first = write_pki(&tcp, &context(), &ns, None, now).await.unwrap();
        assert_eq!(first.generated.len(), 9, "{:?}", first.generated);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let ca = secrets.get("cp-ca").await.unwrap();

        // A cache that has listed, but none of them yet.
        let (store, mut writer) = reflector::store::<Secret>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let lagging = context();
        lagging.caches.set_secrets(store);
        let second = write_pki(&tcp, &lagging, &ns, None, now).await.unwrap();
        assert_eq!(second.generated, Vec::<String>::new());
        let after = secrets.get("cp-ca").await.unwrap();
        assert_eq!(after.data, ca.data);
        assert_eq!(after.resource_version(), ca.resource_version());
        assert_eq!(second.get("cp-ca").unwrap().data, ca.data);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn removing_the_overrides_removes_the_flag_from_the_deployment() {
        let env = env("wl-ovr").await;
        let ca = Ca::new("wl-shared-ca").unwrap();
        let (primary_etcd, events_etcd) = tokio::join!(tls_etcd("wl-ovr-a", &ca), tls_etcd("wl-ovr-b", &ca));
        let primary = env.etcd_datastore(&primary_etcd).await;
        let events = env.etcd_datastore(&events_etcd).await;
        env.ds_condition(&primary, "Ready", "True").await;
        env.ds_condition(&events, "Ready", "True").await;
        env.tcp(
            "cp",
            &primary,
            json!([{"resource": "/events", "dataStore": events}]),
        )
        .await;
        let flag = format!(
            "--etcd-servers-overrides=/events#https://{}",
            events_etcd.endpoint()
        );
        let d = env
            .deployment_where("cp", "has the overrides flag", |d| args(d).contains(&flag))
            .await;
        assert!(args(&d).contains(&format!("--etcd-servers=https://{}", primary_etcd.endpoint())));

        env.patch_tcp("cp", json!({"spec": {"dataStoreOverrides": null}}))
            .await;
        let d = env
            .deployment_where("cp", "no overrides flag", |d| {
                !args(d).iter().any(|a| a.starts_with("--etcd-servers-overrides"))
            })
            .await;
        assert!(args(&d).contains(&format!("--etcd-servers=https://{}", primary_etcd.endpoint())));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_tcp_runs_kine_and_a_corrupted_config_secret_is_regenerated_and_rolls_the_pods() {
        let env = env("wl-pg").await;
        let (endpoint, user, password) = pg_root();
        env.secret("pg-root", &[("username", &user), ("password", &password)])
            .await;
        let ds = support::unique("ds-pg");
        env.datastore(
            &ds,
            json!({
                "driver": "PostgreSQL",
                "endpoints": [endpoint],
                "basicAuth": {"username": env.sref("pg-root", "username"), "password": env.sref("pg-root", "password")},
            }),
        )
        .await;
        env.ds_condition(&ds, "Ready", "True").await;
        env.tcp("cp", &ds, json!(null)).await;
        let d = env.deployment_where("cp", "exists", |_| true).await;
        assert!(args(&d).contains(&"--etcd-servers=unix:///uds/kine".to_string()));
        assert!(!args(&d).iter().any(|a| a.starts_with("--etcd-prefix")));
        let kine = container(&d, "kine");
        assert!(
            !kine.args.iter().flatten().any(|a| a.starts_with("--endpoint")),
            "{:?}",
            kine.args
        );
        let endpoint = kine.env.iter().flatten().find(|e| e.name == "KINE_ENDPOINT");
        assert_eq!(
            endpoint.and_then(|e| e.value.as_deref()),
            Some("postgres://$(DB_USER):$(DB_PASSWORD)@$(DB_CONNECTION_STRING)/$(DB_SCHEMA)")
        );
        let checksum = pod_annotation(&d, "tenantplane.io/checksum");
        let config = pod_annotation(&d, "storage.kamaji.clastix.io/config");

        // Settle first, then corrupt. A reconcile that read the Secret just before the corruption may
        // restore the old password; corrupt again until a reconcile sees the tampered Secret.
        env.version_status("cp", "Provisioning").await;
        let original = env.secret_data("cp-datastore-config").await["DB_PASSWORD"].clone();
        for _ in 0..3 {
            env.secrets()
                .patch(
                    "cp-datastore-config",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"stringData": {"DB_PASSWORD": "corrupted"}})),
                )
                .await
                .unwrap();
            let api = env.secrets();
            let password = eventually("cp-datastore-config rewritten", WAIT, || {
                let api = api.clone();
                async move {
                    let s = api.get("cp-datastore-config").await.ok()?;
                    let p = String::from_utf8(s.data.as_ref()?.get("DB_PASSWORD")?.0.clone()).ok()?;
                    (p != "corrupted").then_some(p)
                }
            })
            .await;
            if password != original {
                break;
            }
        }
        let d = env
            .deployment_where("cp", "rolled by the new config", |d| {
                pod_annotation(d, "storage.kamaji.clastix.io/config") != config
            })
            .await;
        assert_ne!(pod_annotation(&d, "tenantplane.io/checksum"), checksum);
        let data = env.secret_data("cp-datastore-config").await;
        assert_ne!(data["DB_PASSWORD"], "corrupted");
        assert_eq!(data["DB_PASSWORD"].len(), 32);
    }

    /// `spec.authentication`: the ConfigMap with the rendered configuration, its volume and flag in the
    /// kube-apiserver container; new authenticators change the file but not the pod template; an edit
    /// of the ConfigMap is repaired; removing the spec removes the flag, the ConfigMap and the condition.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn structured_authentication_is_a_mounted_configmap_whose_changes_do_not_roll_the_pods() {
        use k8s_openapi::api::core::v1::ConfigMap;

        const FLAG: &str =
            "--authentication-config=/etc/kubernetes/authentication/authentication-config.yaml";
        let issuer = |url: &str| {
            json!({
                "issuer": {"url": url, "audiences": ["tenantplane:cp:1"]},
                "claimValidationRules": [{"claim": "tid", "requiredValue": "t1"}],
                "claimMappings": {"username": {"claim": "sub", "prefix": "tenantplane:"}, "uid": {"claim": "jti"}},
            })
        };
        let env = env("wl-authn").await;
        let ca = Ca::new("wl-authn-ca").unwrap();
        let etcd = tls_etcd("wl-authn", &ca).await;
        let ds = env.etcd_datastore(&etcd).await;
        env.ds_condition(&ds, "Ready", "True").await;
        let tcp = tenantplane_testkit::tcp(&env.ns, "cp")
            .datastore(&ds)
            .spec(
                "authentication",
                json!({"jwt": [issuer("https://127.0.0.1:8443")]}),
            )
            .build();
        env.tcps().create(&PostParams::default(), &tcp).await.unwrap();

        let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.ns);
        let rendered = |url: &str| {
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: {url}\n    audiences:\n    - tenantplane:cp:1\n  claimValidationRules:\n  - claim: tid\n    requiredValue: t1\n  claimMappings:\n    username:\n      claim: sub\n      prefix: 'tenantplane:'\n    uid:\n      claim: jti\n"
            )
        };
        let content = |expected: String| {
            let api = config_maps.clone();
            async move {
                eventually("cp-authentication-config rendered", WAIT, || {
                    let (api, expected) = (api.clone(), expected.clone());
                    async move {
                        let cm = api.get_opt("cp-authentication-config").await.ok()??;
                        (cm.data?.get("authentication-config.yaml")? == &expected).then_some(())
                    }
                })
                .await
            }
        };
        content(rendered("https://127.0.0.1:8443")).await;
        let cm = config_maps.get("cp-authentication-config").await.unwrap();
        assert_eq!(cm.owner_references()[0].uid, tcp_uid(&env, "cp").await);
        let d = env
            .deployment_where("cp", "has the flag", |d| args(d).contains(&FLAG.to_string()))
            .await;
        let apiserver = container(&d, "kube-apiserver");
        assert!(
            apiserver
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "authentication-config"
                    && m.mount_path == "/etc/kubernetes/authentication"
                    && m.sub_path.is_none())
        );
        let (_, condition) = env.tcp_condition("cp", "AuthenticationConfigured", "True").await;
        assert_eq!(condition.reason, "Rendered");

        // Another issuer: a new file, the same pod template (kube-apiserver reloads the file itself).
        let generation = d.metadata.generation;
        env.patch_tcp(
            "cp",
            json!({"spec": {"authentication": {"jwt": [issuer("https://127.0.0.1:9443")]}}}),
        )
        .await;
        content(rendered("https://127.0.0.1:9443")).await;
        eventually("the spec change is observed", WAIT, || async {
            let tcp = env.tcps().get("cp").await.ok()?;
            (tcp.status?.observed_generation == tcp.metadata.generation).then_some(())
        })
        .await;
        let d = env.deployments().get("cp").await.unwrap();
        assert_eq!(d.metadata.generation, generation);

        // An edit of the ConfigMap is repaired.
        config_maps
            .patch(
                "cp-authentication-config",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"authentication-config.yaml": "edited"}})),
            )
            .await
            .unwrap();
        content(rendered("https://127.0.0.1:9443")).await;

        // Gone from the spec: no flag, no ConfigMap, no condition.
        env.patch_tcp("cp", json!({"spec": {"authentication": null}}))
            .await;
        env.deployment_where("cp", "no authentication flag", |d| {
            !args(d).iter().any(|a| a.starts_with("--authentication-config"))
        })
        .await;
        let api = config_maps.clone();
        eventually("cp-authentication-config deleted", WAIT, || {
            let api = api.clone();
            async move {
                api.get_opt("cp-authentication-config")
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            }
        })
        .await;
        eventually("AuthenticationConfigured removed", WAIT, || async {
            let tcp = env.tcps().get("cp").await.ok()?;
            let conditions = tcp.status?.conditions;
            conditions
                .iter()
                .all(|c| c.type_ != "AuthenticationConfigured")
                .then_some(())
        })
        .await;
    }

    async fn tcp_uid(env: &Env, name: &str) -> String {
        env.tcps().get(name).await.unwrap().uid().unwrap()
    }
}
